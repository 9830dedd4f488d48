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
fn the_command_line_mounts_cuts_and_unmounts() {
    let d = dirs();
    std::fs::write(d.backing.join("f"), b"old").unwrap();
    let exe = env!("CARGO_BIN_EXE_faultfs");
    let run = |args: &[&std::ffi::OsStr]| {
        let mut c = std::process::Command::new("timeout");
        c.arg("60").arg(exe).args(args);
        let out = c.output().unwrap();
        assert!(
            out.status.success(),
            "faultfs {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    };
    let os = |s: &str| std::ffi::OsString::from(s);
    run(&[
        &os("mount"),
        &os("--background"),
        &os("--profile"),
        &os("network"),
        &os("--latency"),
        &os("fsync=1ms"),
        d.backing.as_os_str(),
        d.mnt.as_os_str(),
    ]);
    // Whatever happens below, the mount goes away.
    struct Umount(std::path::PathBuf);
    impl Drop for Umount {
        fn drop(&mut self) {
            let _ = std::process::Command::new("timeout")
                .arg("30")
                .arg(env!("CARGO_BIN_EXE_faultfs"))
                .arg("umount")
                .arg(&self.0)
                .status();
        }
    }
    let _guard = Umount(d.mnt.clone());
    assert!(is_mounted(&d.mnt));
    let status = run(&[&os("status"), d.mnt.as_os_str()]);
    assert!(status.contains("\"network\""), "{status}");
    let mnt = d.mnt.clone();
    bounded(60, move || {
        std::fs::write(mnt.join("f"), b"new").unwrap();
        write_synced(&mnt.join("g"), b"g");
        sync_dir(&mnt);
    });
    run(&[&os("set"), &os("--erofs"), d.mnt.as_os_str()]);
    let mnt = d.mnt.clone();
    bounded(60, move || {
        let e = std::fs::write(mnt.join("h"), b"x").unwrap_err();
        assert_eq!(errno(&e), libc::EROFS);
    });
    let report = run(&[&os("cut"), &os("--umount"), d.mnt.as_os_str()]);
    // The rewrite of `f` (a truncation and a write) is lost; `g` was synced.
    assert!(
        report.contains("power cut (all): discarded 2 of 2"),
        "{report}"
    );
    assert!(report.contains("cut during create h"), "{report}");
    assert!(!is_mounted(&d.mnt));
    assert_eq!(std::fs::read(d.backing.join("f")).unwrap(), b"old");
    assert_eq!(std::fs::read(d.backing.join("g")).unwrap(), b"g");
}
