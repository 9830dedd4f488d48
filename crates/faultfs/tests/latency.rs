//! Latency: operations are delayed as the profile says, and a slow operation on one
//! file does not hold up the others. Assertions are on ordering and lower bounds, with
//! wide margins, never on tight timings.

mod common;

use std::io::Write;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use common::*;
use faultfs::{Latency, OpKind, Options, Profile};

#[test]
fn a_slow_fsync_does_not_block_other_files() {
    let d = dirs();
    let mut p = Profile::none();
    p.set(OpKind::Fsync, Latency::fixed(Duration::from_secs(2)));
    let m = mount_with(&d, Options::with_profile(p));
    let mnt = d.mnt.clone();
    bounded(120, move || {
        let (tx, rx) = mpsc::channel();
        let a = mnt.join("a");
        let tx2 = tx.clone();
        let start = Instant::now();
        let t = std::thread::spawn(move || {
            let mut f = std::fs::File::create(&a).unwrap();
            f.write_all(b"a").unwrap();
            tx2.send("fsync-started").unwrap();
            f.sync_all().unwrap();
            tx2.send("fsync-done").unwrap();
            start.elapsed()
        });
        assert_eq!(rx.recv().unwrap(), "fsync-started");
        // Meanwhile, other files' operations (without latency) go through.
        for i in 0..20 {
            let p = mnt.join(format!("b{i}"));
            std::fs::write(&p, b"b").unwrap();
            assert_eq!(std::fs::read(&p).unwrap(), b"b");
            std::fs::rename(&p, mnt.join(format!("c{i}"))).unwrap();
        }
        tx.send("others-done").unwrap();
        let fsync_took = t.join().unwrap();
        let order: Vec<_> = rx.try_iter().collect();
        assert_eq!(order, ["others-done", "fsync-done"]);
        assert!(fsync_took >= Duration::from_secs(2), "{fsync_took:?}");
    });
    drop(m);
}

#[test]
fn fsyncs_of_different_files_overlap() {
    let d = dirs();
    let delay = Duration::from_millis(1500);
    let mut p = Profile::none();
    p.set(OpKind::Fsync, Latency::fixed(delay));
    let m = mount_with(&d, Options::with_profile(p));
    let mnt = d.mnt.clone();
    bounded(120, move || {
        let files: Vec<_> = (0..4)
            .map(|i| std::fs::File::create(mnt.join(format!("f{i}"))).unwrap())
            .collect();
        let start = Instant::now();
        let threads: Vec<_> = files
            .into_iter()
            .map(|f| std::thread::spawn(move || f.sync_all().unwrap()))
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        let took = start.elapsed();
        // Serially, 4 x 1.5 s = 6 s; overlapped about 1.5 s. The bound leaves ~4 s of
        // slack for a loaded machine.
        assert!(took >= delay, "{took:?}");
        assert!(
            took < delay * 4 - Duration::from_millis(500),
            "not overlapped: {took:?}"
        );
    });
    drop(m);
}

#[test]
fn profiles_apply_and_change_at_run_time() {
    let d = dirs();
    let m = mount_with(
        &d,
        Options::with_profile(Profile::named("network").unwrap()),
    );
    assert!(m.profile().get(OpKind::Fsync).min >= Duration::from_millis(5));
    let mnt = d.mnt.clone();
    let took = bounded(60, move || {
        let f = std::fs::File::create(mnt.join("f")).unwrap();
        let start = Instant::now();
        for _ in 0..5 {
            f.sync_all().unwrap();
        }
        start.elapsed()
    });
    assert!(
        took >= Duration::from_millis(25),
        "5 network fsyncs took {took:?}"
    );
    let mut p = Profile::none();
    p.apply_override("rename=300ms").unwrap();
    m.set_profile(p);
    let mnt = d.mnt.clone();
    let took = bounded(60, move || {
        std::fs::write(mnt.join("x"), b"x").unwrap();
        let start = Instant::now();
        std::fs::rename(mnt.join("x"), mnt.join("y")).unwrap();
        start.elapsed()
    });
    assert!(took >= Duration::from_millis(300), "{took:?}");
}
