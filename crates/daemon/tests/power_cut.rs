//! Power cuts of the real `tlogd` (POSIX with its RocksDB dedup index, both on one
//! faultfs mount) under write load: a few cuts in the suite; `benches/power-cuts.sh`
//! runs the long series. After each cut the mount comes back with only what was
//! durable, tlogd restarts on it, and: every acknowledged entry is at its index, the
//! checkpoint covers them all and extends the one served before the cut (no fork),
//! and acknowledged entries sent again get their original index: the dedup index
//! writes without sync, so that holds only if its catch-up at start is right.

mod common;

use std::path::Path;
use std::time::Duration;

use bytes::Bytes;
use common::*;
use faultfs::{CutMode, Mount, Options, Profile};
use tlogd_core::checkpoint::Checkpoint;

fn mount(backing: &Path, mnt: &Path) -> Mount {
    Mount::new(backing, mnt, Options::with_profile(Profile::none()))
        .unwrap_or_else(|e| panic!("faultfs (needs /dev/fuse and fusermount3): {e}"))
}

/// Every acknowledged entry is where it was acknowledged, and `sample` of them, sent
/// again, are answered as duplicates at their original index.
async fn check_after_restart(http: &Http, url: &str, known: &[(u64, Vec<u8>)], before: u64) {
    let need = known.iter().map(|(i, _)| i + 1).max().unwrap_or(0);
    let cp = http.wait_checkpoint(url, need.max(before)).await;
    http.verify_entries(url, cp.size, known).await;
    for (index, entry) in known.iter().step_by(known.len().div_ceil(64).max(1)) {
        match http.add_when_ready(url, Bytes::from(entry.clone())).await {
            Ok((again, duplicate)) => assert!(
                again == *index && duplicate,
                "entry {index} sent again after the cut: index {again}, duplicate {duplicate}"
            ),
            Err(r) => panic!("entry {index} sent again after the cut: {r:?}"),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn posix_with_dedup_survives_power_cuts_under_load() {
    let tmp = tempfile::tempdir().unwrap();
    let (backing, mnt) = (tmp.path().join("backing"), tmp.path().join("mnt"));
    std::fs::create_dir_all(&backing).unwrap();
    std::fs::create_dir_all(&mnt).unwrap();
    let storage = format!("dir = \"{}\"\n", mnt.join("log").display());
    let http = Http::new();
    let mut writers = Writers::default();
    let mut served = Vec::new();
    let cuts = [
        CutMode::All,
        CutMode::Subset { seed: 1 },
        CutMode::Subset { seed: 2 },
    ];
    for (round, mode) in cuts.into_iter().enumerate() {
        let m = mount(&backing, &mnt);
        let mut d = Daemon::start_with(tmp.path(), &storage, "");
        d.wait_ready(&http).await;
        let before = served.last().map_or(0, |c: &Checkpoint| c.size);
        check_after_restart(&http, &d.url, &writers.snapshot(), before).await;
        writers.start(&http, &d.url, 16, &format!("round {round}"));
        let target = writers.count() + 600;
        writers.wait_count(target).await;
        tokio::time::sleep(Duration::from_millis(20 + 137 * round as u64 % 300)).await;
        served.push(http.checkpoint(&d.url).await);
        let report = m.cut(mode).expect("cut");
        assert!(
            report.discarded() > 0,
            "cut {round} discarded nothing ({report})"
        );
        d.kill();
        writers.stop().await;
        drop(m);
    }
    let _m = mount(&backing, &mnt);
    let mut d = Daemon::start_with(tmp.path(), &storage, "");
    d.wait_ready(&http).await;
    let known = writers.snapshot();
    check_after_restart(&http, &d.url, &known, served.last().map_or(0, |c| c.size)).await;
    // Every checkpoint served before a cut is a prefix of the tree after all of them,
    // and the whole log checks out.
    check_observed(&d.url, &served).await;
    assert!(d.terminate().success());
}
