//! Power cuts (faultfs: a FUSE pass-through that loses, on command, what was not made
//! durable) kept as regression tests for what `benches/power-cuts.sh` found.

use std::time::Duration;

use faultfs::{CutMode, Mount, Options};
use tlogd_core::conformance::ORIGIN;
use tlogd_storage_posix::PosixStorage;

/// Found by the first cut of `benches/power-cuts.sh`: opening a log in a new directory
/// created the directory (and its `.tlogd`) without fsyncing their parents, so a
/// power cut lost the whole log, every acknowledged entry with it. A cut right after
/// the first open must keep the directory and both state slots.
#[test]
fn a_new_log_directory_survives_a_power_cut() {
    let tmp = tempfile::tempdir().unwrap();
    let (backing, mnt) = (tmp.path().join("backing"), tmp.path().join("mnt"));
    std::fs::create_dir_all(&backing).unwrap();
    std::fs::create_dir_all(&mnt).unwrap();
    let m = Mount::new(&backing, &mnt, Options::default())
        .unwrap_or_else(|e| panic!("faultfs (needs /dev/fuse and fusermount3): {e}"));
    let dir = mnt.join("logs/one");
    let opened = std::thread::spawn(move || {
        drop(PosixStorage::open(&dir, ORIGIN).expect("open"));
    });
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while !opened.is_finished() {
        assert!(std::time::Instant::now() < deadline, "opening the log hung");
        std::thread::sleep(Duration::from_millis(10));
    }
    opened.join().unwrap();
    let report = m.cut(CutMode::All).expect("cut");
    drop(m);
    // What a new mount of the backing directory would show: what survived the cut.
    for path in ["logs/one/.tlogd/state.0", "logs/one/.tlogd/state.1"] {
        assert!(
            backing.join(path).exists(),
            "{path} lost in the cut ({report})"
        );
    }
}
