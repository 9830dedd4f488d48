//! Power cuts (faultfs: a FUSE pass-through that loses, on command, what was not made
//! durable): a few cuts of each kind under load, the regression tests for what
//! `benches/power-cuts.sh` found, and the test that these tests catch a missing sync.
//! The long series (≥ 50 cuts per configuration, the daemon with its dedup index) is
//! `benches/power-cuts.sh`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use faultfs::{CutMode, CutReport, Mount, Options, Profile};
use tlogd_core::conformance::{ORIGIN, SKEY, config};
use tlogd_core::engine::checker::{CheckpointWatch, check_log_observed};
use tlogd_core::engine::{Log, LogStorage};
use tlogd_core::note::NoteSigner;
use tlogd_storage_posix::{PosixStorage, SyncMethod};

/// A faultfs mount over `<tmp>/backing` at `<tmp>/mnt`.
fn mount(tmp: &Path, profile: Profile) -> (Mount, PathBuf, PathBuf) {
    let (backing, mnt) = (tmp.join("backing"), tmp.join("mnt"));
    std::fs::create_dir_all(&backing).unwrap();
    std::fs::create_dir_all(&mnt).unwrap();
    let m = Mount::new(&backing, &mnt, Options::with_profile(profile))
        .unwrap_or_else(|e| panic!("faultfs (needs /dev/fuse and fusermount3): {e}"));
    (m, backing, mnt)
}

/// Found by the first cut of `benches/power-cuts.sh`: opening a log in a new directory
/// created the directory (and its `.tlogd`) without fsyncing their parents, so a
/// power cut lost the whole log, every acknowledged entry with it. A cut right after
/// the first open must keep the directory and both state slots.
#[test]
fn a_new_log_directory_survives_a_power_cut() {
    let tmp = tempfile::tempdir().unwrap();
    let (m, backing, mnt) = mount(tmp.path(), Profile::none());
    let dir = mnt.join("logs/one");
    let opened = std::thread::spawn(move || {
        drop(PosixStorage::open(&dir, ORIGIN).expect("open"));
    });
    let deadline = Instant::now() + Duration::from_secs(60);
    while !opened.is_finished() {
        assert!(Instant::now() < deadline, "opening the log hung");
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

/// What one cut left: the cut's report, the entries acknowledged before it, and the
/// whole-log check of the reopened log (`Err`: what it found wrong).
struct CutOutcome {
    report: CutReport,
    acknowledged: usize,
    check: Result<u64, String>,
}

/// A log under load (16 writers, a checkpoint every millisecond) on faultfs with
/// `profile`, cut with `mode` at a moment chosen by `seed` once at least two entry
/// bundles are full; then the backing directory is opened again (what a restart after
/// the power came back sees) and checked: the whole log verifies, every entry
/// acknowledged before the cut is at its index, and every checkpoint seen before the
/// cut is a prefix of the tree (no fork) whose tiles are there.
async fn cut_under_load(
    mode: CutMode,
    profile: Profile,
    seed: u64,
    skip_directory_syncs: bool,
) -> CutOutcome {
    let tmp = tempfile::tempdir().unwrap();
    let (m, backing, mnt) = mount(tmp.path(), profile);
    let storage = {
        let dir = mnt.join("log");
        tokio::task::spawn_blocking(move || PosixStorage::open(dir, ORIGIN).expect("open"))
            .await
            .unwrap()
    };
    assert_eq!(
        storage.sync_method(),
        SyncMethod::Fsync,
        "storage.sync = auto must not trust syncfs on FUSE"
    );
    if skip_directory_syncs {
        storage.skip_directory_syncs();
    }
    let storage = Arc::new(storage);
    let (log, tasks) = Log::open(storage.clone(), None, config(64)).await.unwrap();
    let log = Arc::new(log);
    let verifier = NoteSigner::from_skey(SKEY).unwrap().verifier();
    let watch = CheckpointWatch::start(storage.clone(), ORIGIN, &verifier);
    let acked = Arc::new(Mutex::new(BTreeMap::<u64, Vec<u8>>::new()));
    let stop = Arc::new(AtomicBool::new(false));
    let writers: Vec<_> = (0..16)
        .map(|w| {
            let (log, acked, stop) = (log.clone(), acked.clone(), stop.clone());
            tokio::spawn(async move {
                for i in 0u64.. {
                    if stop.load(Ordering::Acquire) {
                        return;
                    }
                    let entry = format!("cut {seed} writer {w} entry {i}").into_bytes();
                    match log.add(Bytes::from(entry.clone())).await {
                        Ok(out) => {
                            acked.lock().unwrap().insert(out.index, entry);
                        }
                        Err(_) => return,
                    }
                }
            })
        })
        .collect();
    let deadline = Instant::now() + Duration::from_secs(60);
    while acked.lock().unwrap().len() < 600 {
        assert!(
            Instant::now() < deadline,
            "the log took no entries on faultfs"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    tokio::time::sleep(Duration::from_millis(50 + seed * 97 % 400)).await;
    let observed = watch.stop().await.expect("checkpoints before the cut");
    let report = {
        let h = m.handle();
        tokio::task::spawn_blocking(move || h.cut(mode).expect("cut"))
            .await
            .unwrap()
    };
    stop.store(true, Ordering::Release);
    for w in writers {
        tokio::time::timeout(Duration::from_secs(30), w)
            .await
            .expect("a writer hung on the frozen mount")
            .unwrap();
    }
    log.shutdown();
    tokio::time::timeout(Duration::from_secs(30), tasks.join())
        .await
        .expect("the log's tasks hung on the frozen mount");
    drop(log);
    // Dropping the storage joins its flusher, whose last flush fails on the frozen
    // mount at once.
    tokio::task::spawn_blocking(move || drop(storage))
        .await
        .unwrap();
    drop(m);
    let acked = std::mem::take(&mut *acked.lock().unwrap());
    let reopened = {
        let dir = backing.join("log");
        tokio::task::spawn_blocking(move || PosixStorage::open(dir, ORIGIN))
            .await
            .unwrap()
    };
    let check = async {
        let storage = reopened.map_err(|e| format!("reopening: {e}"))?;
        let mut wrong = Vec::new();
        let mut visit = |i: u64, e: &[u8]| {
            if acked.get(&i).is_some_and(|want| want != e) {
                wrong.push(i);
            }
        };
        let r = check_log_observed(&storage, ORIGIN, &verifier, &observed, Some(&mut visit))
            .await
            .map_err(|e| format!("whole-log check: {e}"))?;
        if let Some(i) = wrong.first() {
            return Err(format!(
                "entry {i} is not the one acknowledged at its index"
            ));
        }
        if let Some(&last) = acked.keys().next_back()
            && last >= r.state.size
        {
            return Err(format!(
                "entry {last} was acknowledged, the tree has {} after the cut",
                r.state.size
            ));
        }
        // The stored checkpoint may be older than one seen before the cut (the cut
        // lost its rename); the log, opened again, publishes before anything else.
        let storage = Arc::new(storage);
        let (log, tasks) = Log::open(storage.clone(), None, config(64))
            .await
            .map_err(|e| format!("opening the log again: {e}"))?;
        log.shutdown();
        tasks.join().await;
        let published = storage
            .read_checkpoint()
            .await
            .map_err(|e| format!("reading the checkpoint: {e}"))?
            .and_then(|b| tlogd_core::checkpoint::signed_size(&b));
        let seen = observed.iter().map(|c| c.size).max();
        if published < seen {
            return Err(format!(
                "the checkpoint went back: {seen:?} was seen before the cut, {published:?} \
                 is published once the log is open again"
            ));
        }
        Ok(r.state.size)
    }
    .await;
    if check.is_err() && std::env::var_os("TLOGD_KEEP_CUT").is_some() {
        // For finding out what went wrong: the backing directory, as the cut left it
        // and the reopened log changed it.
        eprintln!("kept the backing directory: {}", tmp.keep().display());
    }
    CutOutcome {
        report,
        acknowledged: acked.len(),
        check,
    }
}

/// Every acknowledged entry survives cuts of each kind, with the sync `auto` picks on
/// FUSE (`fsync`): everything pending lost, and a seeded subset kept with torn writes.
/// Each cut must have discarded something.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acknowledged_entries_survive_power_cuts_under_load() {
    let cuts = [
        (CutMode::All, Profile::none(), 1),
        (CutMode::Subset { seed: 2 }, Profile::none(), 2),
    ];
    check_cuts(&cuts).await;
}

/// The seeded-subset cut on the "network" profile. It failed one run in ten: "tile/
/// entries/003.p/88 (named by the checkpoint of size 856) does not hold the log's
/// first 856 entries". The log was right; the checker was not: the cut had lost the
/// rename of the newest checkpoint, so the stored one was older than one seen before
/// the cut, and the checker split the bundle at the sizes in the order given, checking
/// one size's partial against another's prefix (`earlier_checkpoints_are_checked_in_
/// size_order` in the checker pins that). Kept: it is the cut that found it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acknowledged_entries_survive_a_subset_cut_on_the_network_profile() {
    check_cuts(&[(CutMode::Subset { seed: 3 }, Profile::network(), 3)]).await;
}

/// [`cut_under_load`] for each cut: it discarded something, and the log checks out.
async fn check_cuts(cuts: &[(CutMode, Profile, u64)]) {
    for &(mode, ref profile, seed) in cuts {
        let profile = profile.clone();
        let out = cut_under_load(mode, profile, seed, false).await;
        assert!(
            out.report.discarded() > 0,
            "cut {seed} discarded nothing, so it proves nothing ({})",
            out.report
        );
        let size = out
            .check
            .unwrap_or_else(|e| panic!("cut {seed} ({}): {e}", out.report));
        assert!(size as usize >= out.acknowledged);
    }
}

/// The harness has teeth: the same cut, with the directory `fsync`s after the flush's
/// renames left out (as a build without them would be), loses committed tiles, and
/// the check after the cut says so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_directory_sync_is_caught_by_a_power_cut() {
    let out = cut_under_load(CutMode::All, Profile::none(), 4, true).await;
    let e = out
        .check
        .expect_err("a log without its directory syncs survived a power cut");
    assert!(
        e.contains("missing") || e.contains("tile"),
        "the check failed, but not on a lost tile: {e}"
    );
}
