//! faultfs as a plain filesystem: what goes in through the mount is what the backing
//! directory holds and what comes back out.

mod common;

use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::fs::MetadataExt;

use common::*;

#[test]
fn operations_pass_through() {
    let d = dirs();
    std::fs::write(d.backing.join("pre.txt"), b"existing").unwrap();
    let m = mount(&d);
    let mnt = d.mnt.clone();
    bounded(60, move || {
        // Existing content is visible.
        assert_eq!(std::fs::read(mnt.join("pre.txt")).unwrap(), b"existing");
        // Write, append, overwrite in the middle, read back.
        let p = mnt.join("a.txt");
        std::fs::write(&p, b"hello world").unwrap();
        let mut f = std::fs::OpenOptions::new().append(true).open(&p).unwrap();
        f.write_all(b"!!").unwrap();
        drop(f);
        let mut f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(&p)
            .unwrap();
        f.seek(SeekFrom::Start(6)).unwrap();
        f.write_all(b"WORLD").unwrap();
        f.seek(SeekFrom::Start(0)).unwrap();
        let mut s = String::new();
        f.read_to_string(&mut s).unwrap();
        assert_eq!(s, "hello WORLD!!");
        f.sync_all().unwrap();
        f.sync_data().unwrap();
        // Truncate, both ways.
        f.set_len(5).unwrap();
        drop(f);
        assert_eq!(std::fs::read(&p).unwrap(), b"hello");
        std::fs::OpenOptions::new()
            .write(true)
            .open(&p)
            .unwrap()
            .set_len(8)
            .unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), b"hello\0\0\0");
        // Large write across several FUSE requests.
        let big: Vec<u8> = (0..3_000_000u32).map(|i| (i % 251) as u8).collect();
        std::fs::write(mnt.join("big"), &big).unwrap();
        assert_eq!(std::fs::read(mnt.join("big")).unwrap(), big);
        // Directories, rename, readdir, hard link, symlink, unlink, rmdir.
        std::fs::create_dir(mnt.join("d")).unwrap();
        std::fs::create_dir(mnt.join("d/e")).unwrap();
        std::fs::rename(&p, mnt.join("d/e/b.txt")).unwrap();
        std::fs::hard_link(mnt.join("d/e/b.txt"), mnt.join("d/link")).unwrap();
        assert_eq!(std::fs::metadata(mnt.join("d/link")).unwrap().nlink(), 2);
        std::os::unix::fs::symlink("e/b.txt", mnt.join("d/sym")).unwrap();
        assert_eq!(
            std::fs::read_link(mnt.join("d/sym")).unwrap().to_str(),
            Some("e/b.txt")
        );
        assert_eq!(std::fs::read(mnt.join("d/sym")).unwrap(), b"hello\0\0\0");
        let mut names: Vec<String> = std::fs::read_dir(mnt.join("d"))
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        names.sort();
        assert_eq!(names, ["e", "link", "sym"]);
        // Rename a directory, then use paths under it.
        std::fs::rename(mnt.join("d/e"), mnt.join("d/f")).unwrap();
        assert_eq!(
            std::fs::read(mnt.join("d/f/b.txt")).unwrap(),
            b"hello\0\0\0"
        );
        std::fs::remove_file(mnt.join("d/f/b.txt")).unwrap();
        std::fs::remove_dir(mnt.join("d/f")).unwrap();
        assert_eq!(std::fs::read(mnt.join("d/link")).unwrap(), b"hello\0\0\0");
        // Rename over an existing file replaces it.
        std::fs::write(mnt.join("x"), b"x").unwrap();
        std::fs::write(mnt.join("y"), b"y").unwrap();
        std::fs::rename(mnt.join("x"), mnt.join("y")).unwrap();
        assert!(!mnt.join("x").exists());
        assert_eq!(std::fs::read(mnt.join("y")).unwrap(), b"x");
        // create_new refuses an existing name.
        assert!(
            std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(mnt.join("y"))
                .is_err()
        );
        // Errors pass through.
        let e = std::fs::read(mnt.join("missing")).unwrap_err();
        assert_eq!(errno(&e), libc::ENOENT);
        let e = std::fs::remove_dir(mnt.join("d")).unwrap_err();
        assert_eq!(errno(&e), libc::ENOTEMPTY);
    });
    // The backing directory holds the live view.
    let t = tree(&d.backing);
    let keys: Vec<&str> = t.keys().map(|s| s.as_str()).collect();
    assert_eq!(keys, ["big", "d", "d/link", "d/sym", "pre.txt", "y"]);
    assert_eq!(t["d/link"].as_deref(), Some(&b"hello\0\0\0"[..]));
    drop(m);
    assert!(!is_mounted(&d.mnt));
}
