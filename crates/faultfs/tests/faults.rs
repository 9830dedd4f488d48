//! Injected errors: EIO on the Nth fsync or write, ENOSPC after N bytes, EROFS.

mod common;

use std::io::Write;

use common::*;
use faultfs::{CutMode, Faults};

#[test]
fn eio_on_the_nth_fsync_once() {
    let d = dirs();
    std::fs::write(d.backing.join("f"), b"old").unwrap();
    let m = mount(&d);
    m.update_faults(|f| f.eio_fsync = Some(2));
    let mnt = d.mnt.clone();
    bounded(60, move || {
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .open(mnt.join("f"))
            .unwrap();
        f.sync_all().unwrap(); // 1st
        f.write_all(b"new").unwrap();
        let e = f.sync_all().unwrap_err(); // 2nd
        assert_eq!(errno(&e), libc::EIO);
    });
    assert_eq!(m.faults(), Faults::default(), "the fault fires once");
    // The failed fsync made nothing durable.
    m.cut(CutMode::All).unwrap();
    drop(m);
    assert_eq!(std::fs::read(d.backing.join("f")).unwrap(), b"old");
}

#[test]
fn eio_on_the_nth_write_once() {
    let d = dirs();
    let m = mount(&d);
    m.set_faults(Faults {
        eio_write: Some(2),
        ..Faults::default()
    });
    let mnt = d.mnt.clone();
    bounded(60, move || {
        let mut f = std::fs::File::create(mnt.join("f")).unwrap();
        f.write_all(b"one").unwrap();
        let e = f.write_all(b"two").unwrap_err();
        assert_eq!(errno(&e), libc::EIO);
        f.write_all(b"three").unwrap();
        drop(f);
        assert_eq!(std::fs::read(mnt.join("f")).unwrap(), b"onethree");
    });
}

#[test]
fn enospc_after_n_bytes_also_in_the_middle_of_a_write() {
    let d = dirs();
    let m = mount(&d);
    m.update_faults(|f| f.enospc_after = Some(10));
    let mnt = d.mnt.clone();
    bounded(60, move || {
        let mut f = std::fs::File::create(mnt.join("f")).unwrap();
        f.write_all(b"123456").unwrap();
        // Crosses the limit: the part that fits is written (a short write), the retry
        // of the rest fails.
        let e = f.write_all(b"abcdefgh").unwrap_err();
        assert_eq!(errno(&e), libc::ENOSPC);
        let e = f.write_all(b"x").unwrap_err();
        assert_eq!(errno(&e), libc::ENOSPC);
        drop(f);
        assert_eq!(std::fs::read(mnt.join("f")).unwrap(), b"123456abcd");
    });
    assert_eq!(m.faults().enospc_after, Some(0));
    // Clearing the fault frees the space.
    m.set_faults(Faults::default());
    let mnt = d.mnt.clone();
    bounded(60, move || {
        std::fs::write(mnt.join("g"), b"fits again").unwrap()
    });
}

#[test]
fn erofs_from_a_moment_on() {
    let d = dirs();
    std::fs::write(d.backing.join("f"), b"content").unwrap();
    let m = mount(&d);
    let mnt = d.mnt.clone();
    let mut f = bounded(60, move || {
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .open(mnt.join("f"))
            .unwrap();
        f.write_all(b"C").unwrap();
        f
    });
    m.update_faults(|f| f.erofs = true);
    let mnt = d.mnt.clone();
    bounded(60, move || {
        let erofs = |r: std::io::Result<()>| assert_eq!(errno(&r.unwrap_err()), libc::EROFS);
        erofs(f.write_all(b"x"));
        erofs(f.sync_all());
        erofs(std::fs::write(mnt.join("new"), b"x"));
        erofs(std::fs::create_dir(mnt.join("dir")));
        erofs(std::fs::rename(mnt.join("f"), mnt.join("g")));
        erofs(std::fs::remove_file(mnt.join("f")));
        erofs(
            std::fs::OpenOptions::new()
                .write(true)
                .open(mnt.join("f"))
                .map(drop),
        );
        // Reading still works.
        assert_eq!(std::fs::read(mnt.join("f")).unwrap(), b"Content");
    });
}
