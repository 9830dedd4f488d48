//! A mount never outlives its test, and nothing on a frozen or dead mount hangs.

mod common;

use std::io::{Read, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::time::Duration;

use common::*;
use faultfs::control::{self, Request, Response};
use faultfs::{CutMode, Options, Profile};

#[test]
fn drop_unmounts_even_when_the_test_panics() {
    let d = dirs();
    let r = std::panic::catch_unwind(|| {
        let m = mount(&d);
        std::fs::write(d.mnt.join("f"), b"x").unwrap();
        assert!(is_mounted(m.mountpoint()));
        panic!("the test failed");
    });
    assert!(r.is_err());
    assert!(!is_mounted(&d.mnt), "still mounted after the panic");
    // The mount point is free for a new mount at once.
    let m = mount(&d);
    assert!(is_mounted(&d.mnt));
    m.unmount().unwrap();
    assert!(!is_mounted(&d.mnt));
}

#[test]
fn a_frozen_mount_fails_at_once() {
    let d = dirs();
    std::fs::write(d.backing.join("f"), b"x").unwrap();
    let m = mount_with(
        &d,
        // A slow fsync must not hold the freeze up either.
        Options::with_profile(Profile::named("network").unwrap()),
    );
    let mnt = d.mnt.clone();
    let mut f = bounded(60, move || {
        std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(mnt.join("f"))
            .unwrap()
    });
    let r = m.cut(CutMode::All).unwrap();
    assert_eq!(r.pending(), 0);
    let mnt = d.mnt.clone();
    bounded(30, move || {
        let eio = |r: std::io::Result<()>| assert_eq!(errno(&r.unwrap_err()), libc::EIO);
        eio(f.write_all(b"y"));
        eio(f.sync_all());
        eio(std::fs::write(mnt.join("g"), b"x"));
        eio(std::fs::metadata(mnt.join("nothing")).map(drop));
        eio(std::fs::read_dir(&mnt).map(drop));
        eio(std::fs::create_dir(mnt.join("d")));
    });
    drop(m);
    assert!(!is_mounted(&d.mnt));
}

#[test]
fn a_dead_mount_does_not_hang_its_users() {
    let d = dirs();
    std::fs::write(d.backing.join("f"), b"hello").unwrap();
    let m = mount_with(&d, Options::with_profile(Profile::none()));
    let mnt = d.mnt.clone();
    // Holding a file open keeps the mount busy: the unmount is lazy, and the connection
    // is aborted so that the holder gets errors, not a hang.
    let mut f = bounded(60, move || {
        std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(libc::O_DIRECT)
            .open(mnt.join("f"))
            .or_else(|_| {
                std::fs::OpenOptions::new()
                    .read(true)
                    .write(true)
                    .open(mnt.join("f"))
            })
            .unwrap()
    });
    bounded(30, move || drop(m));
    assert!(!is_mounted(&d.mnt));
    bounded(30, move || {
        assert!(f.write_all(b"more").is_err());
        assert!(f.sync_all().is_err());
        let mut s = String::new();
        let _ = f.read_to_string(&mut s); // may be served from the page cache
    });
}

#[test]
fn the_control_socket_cuts_and_sets_faults() {
    let d = dirs();
    std::fs::write(d.backing.join("f"), b"old").unwrap();
    let m = mount_with(
        &d,
        Options {
            control_socket: true,
            ..Options::default()
        },
    );
    let t = Duration::from_secs(30);
    let r = control::request(
        &d.mnt,
        &Request::SetLatency {
            profile: Some("cloud-block".into()),
            overrides: vec!["rename=1ms".into()],
        },
        t,
    )
    .unwrap();
    assert!(matches!(r, Response::Ok), "{r:?}");
    assert_eq!(m.profile().name, "cloud-block");
    let r = control::request(
        &d.mnt,
        &Request::SetFaults {
            clear: false,
            eio_fsync: Some(3),
            eio_write: None,
            enospc_after: None,
            erofs: None,
        },
        t,
    )
    .unwrap();
    assert!(matches!(r, Response::Ok), "{r:?}");
    assert_eq!(m.faults().eio_fsync, Some(3));
    let mnt = d.mnt.clone();
    bounded(60, move || std::fs::write(mnt.join("f"), b"new").unwrap());
    match control::request(&d.mnt, &Request::Cut { mode: CutMode::All }, t).unwrap() {
        Response::Cut(r) => assert!(r.discarded() > 0, "{r}"),
        other => panic!("{other:?}"),
    }
    drop(m);
    assert_eq!(std::fs::read(d.backing.join("f")).unwrap(), b"old");
    // The socket went with the mount.
    assert!(control::request(&d.mnt, &Request::Status, t).is_err());
}

#[test]
fn a_cut_during_a_slow_fsync_loses_its_data_and_fails_it() {
    let d = dirs();
    std::fs::write(d.backing.join("f"), b"old").unwrap();
    let mut p = Profile::none();
    p.apply_override("fsync=5s").unwrap();
    let m = mount_with(&d, Options::with_profile(p));
    let (tx, rx) = std::sync::mpsc::channel();
    let mnt = d.mnt.clone();
    let syncer = std::thread::spawn(move || {
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .open(mnt.join("f"))
            .unwrap();
        f.write_all(b"new").unwrap();
        tx.send(()).unwrap();
        f.sync_all()
    });
    rx.recv_timeout(Duration::from_secs(60)).unwrap();
    std::thread::sleep(Duration::from_millis(500));
    // The cut does not wait for the sleeping fsync.
    let r = bounded(30, {
        let h = m.handle();
        move || h.cut(CutMode::All).unwrap()
    });
    assert!(r.discarded() >= 1, "{r}");
    assert!(
        r.last_ops.iter().any(|o| o.op == "write" && o.path == "f"),
        "{:?}",
        r.last_ops
    );
    // The fsync, answered after the freeze, fails.
    let res = bounded(30, move || syncer.join().unwrap());
    assert_eq!(errno(&res.unwrap_err()), libc::EIO);
    drop(m);
    assert_eq!(std::fs::read(d.backing.join("f")).unwrap(), b"old");
}
