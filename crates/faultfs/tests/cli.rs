//! The `faultfs` command line, and a server that is killed: its mount goes away and
//! nothing hangs.

mod common;

use std::ffi::{OsStr, OsString};
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::*;

const EXE: &str = env!("CARGO_BIN_EXE_faultfs");

/// `faultfs ARGS` (bounded by `timeout`), which must succeed; its stdout.
fn run(args: &[&OsStr]) -> String {
    let out = Command::new("timeout")
        .arg("60")
        .arg(EXE)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "faultfs {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

fn os(s: &str) -> OsString {
    OsString::from(s)
}

/// A `faultfs mount` in the foreground, child of this test: it exits with the test even
/// if the test is killed (`--exit-with-parent`), and is killed if still running when
/// dropped.
struct Server {
    child: Child,
    mnt: std::path::PathBuf,
}

impl Server {
    fn start(d: &Dirs, extra: &[&str]) -> Server {
        let mut child = Command::new(EXE)
            .arg("mount")
            .arg("--ready-stdout")
            .arg("--exit-with-parent")
            .args(extra)
            .arg(&d.backing)
            .arg(&d.mnt)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let out = child.stdout.take().unwrap();
        let line = bounded(60, move || {
            let mut line = String::new();
            BufReader::new(out).read_line(&mut line).unwrap();
            line
        });
        let server = Server {
            child,
            mnt: d.mnt.clone(),
        };
        assert!(
            line.starts_with("ready"),
            "faultfs mount did not start: {line:?}"
        );
        server
    }

    /// Waits (bounded) for the server to exit by itself.
    fn wait(mut self) -> std::process::ExitStatus {
        let start = Instant::now();
        loop {
            if let Some(s) = self.child.try_wait().unwrap() {
                return s;
            }
            assert!(
                start.elapsed() < Duration::from_secs(30),
                "server did not exit"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
        // A killed server leaves its control socket behind.
        if let Ok(sock) = faultfs::control::socket_path(&self.mnt) {
            let _ = std::fs::remove_file(sock);
        }
        // Killed: fusermount3's auto_unmount removes the mount; make sure of it.
        if !wait_unmounted(&self.mnt, Duration::from_secs(10)) {
            let _ = Command::new("umount").arg("-l").arg(&self.mnt).status();
        }
    }
}

fn wait_unmounted(mnt: &Path, limit: Duration) -> bool {
    let start = Instant::now();
    while is_mounted(mnt) {
        if start.elapsed() > limit {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    true
}

#[test]
fn the_command_line_mounts_sets_cuts_and_unmounts() {
    let d = dirs();
    std::fs::write(d.backing.join("f"), b"old").unwrap();
    let server = Server::start(&d, &["--profile", "network", "--latency", "fsync=1ms"]);
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
    let report = run(&[&os("cut"), d.mnt.as_os_str()]);
    // The rewrite of `f` (a truncation and a write) is lost; `g` was synced.
    assert!(
        report.contains("power cut (all): discarded 2 of 2"),
        "{report}"
    );
    assert!(report.contains("cut during create h"), "{report}");
    run(&[&os("umount"), d.mnt.as_os_str()]);
    assert!(server.wait().success());
    assert!(!is_mounted(&d.mnt));
    assert_eq!(std::fs::read(d.backing.join("f")).unwrap(), b"old");
    assert_eq!(std::fs::read(d.backing.join("g")).unwrap(), b"g");
}

#[test]
fn background_mode_returns_once_mounted() {
    let d = dirs();
    let pid = run(&[
        &os("mount"),
        &os("--background"),
        d.backing.as_os_str(),
        d.mnt.as_os_str(),
    ]);
    assert!(pid.trim().parse::<u32>().is_ok(), "{pid:?}");
    let mounted = is_mounted(&d.mnt);
    run(&[&os("umount"), d.mnt.as_os_str()]);
    assert!(mounted);
    assert!(!is_mounted(&d.mnt));
}

#[test]
fn a_killed_server_leaves_no_mount_and_nothing_hangs() {
    let d = dirs();
    std::fs::write(d.backing.join("f"), b"x").unwrap();
    let mut server = Server::start(&d, &[]);
    let mnt = d.mnt.clone();
    let mut f = bounded(60, move || std::fs::File::open(mnt.join("f")).unwrap());
    // SIGKILL: no destructor runs; the kernel aborts the connection, fusermount3 unmounts.
    server.child.kill().unwrap();
    server.child.wait().unwrap();
    assert!(
        wait_unmounted(&d.mnt, Duration::from_secs(20)),
        "still mounted 20 s after the server was killed"
    );
    let mnt = d.mnt.clone();
    bounded(30, move || {
        use std::io::Read;
        let mut s = Vec::new();
        assert!(f.read_to_end(&mut s).is_err() || s == b"x");
        // The mount point is an ordinary directory again.
        assert!(std::fs::read_dir(&mnt).unwrap().next().is_none());
    });
    drop(server);
}
