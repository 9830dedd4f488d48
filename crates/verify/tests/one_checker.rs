//! One whole-log checker for every caller: a log on real files (the POSIX backend),
//! corrupted one resource at a time, must be refused by the storage tests' check
//! (`check_log`, over `LogStorage`) and by `tlogd verify`'s (`fsck` over a directory)
//! alike, each naming the resource at fault, and both must pass it intact.

use std::path::Path;
use std::sync::Arc;

use tlog_verify::fetch::DirFetcher;
use tlog_verify::fsck::{FsckOptions, FsckSummary, fsck};
use tlogd_core::conformance::{ORIGIN, add_in_order, config};
use tlogd_core::engine::Log;
use tlogd_core::engine::checker::check_log;
use tlogd_core::tile::TileId;
use tlogd_storage_posix::PosixStorage;

/// Both checks over the log in `dir`: the storage test's (through `storage`, the
/// backend the log was written with, still open: reopening it would first repair
/// from its state slot the tiles the slot still carries) and `tlogd verify`'s, each
/// `Ok(())` or its error message.
async fn both_checks(storage: &PosixStorage, dir: &Path) -> [Result<(), String>; 2] {
    let verifier = config(64).verifier();
    let stored = check_log(storage, ORIGIN, &verifier, None)
        .await
        .map(|_| ())
        .map_err(|e| e.to_string());
    let fetch = DirFetcher::new(dir).expect("dir");
    let mut summary = FsckSummary::default();
    let served = fsck(
        &fetch,
        ORIGIN,
        &verifier,
        &FsckOptions::default(),
        &mut (),
        &mut summary,
    )
    .await
    .map_err(|e| e.to_string());
    [stored, served]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_caller_refuses_the_same_corrupt_tile() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("log");
    let storage = Arc::new(PosixStorage::open(&dir, ORIGIN).expect("open"));
    {
        let (log, tasks) = Log::open(storage.clone(), None, config(64))
            .await
            .expect("log");
        let entries = (0..700u32)
            .map(|i| bytes::Bytes::from(format!("entry {i}")))
            .collect();
        add_in_order(&log, entries, 0).await;
        log.shutdown();
        tasks.join().await;
        assert_eq!(log.published_size(), Some(700));
    }
    for r in both_checks(&storage, &dir).await {
        assert_eq!(r, Ok(()));
    }
    // One flipped byte at a time, in a full hash tile of each level and in a full
    // entry bundle: both callers refuse it and name it.
    for id in [
        TileId::hash(0, 1, 256),
        TileId::hash(0, 0, 256),
        TileId::entries(0, 256),
        TileId::entries(1, 256),
    ] {
        let good = flip_a_byte(&dir, &id);
        for (caller, r) in ["check_log", "fsck"]
            .iter()
            .zip(both_checks(&storage, &dir).await)
        {
            let e = r.expect_err(&format!("{caller} passed a corrupt {}", id.path()));
            assert!(
                e.contains(&id.path()),
                "{caller} on a corrupt {}: {e}",
                id.path()
            );
        }
        std::fs::write(dir.join(id.path()), &good).unwrap();
    }
    // The partials at the right edge: the POSIX backend serves them from its state
    // slot (which holds them durably), so the storage view is right whatever the file
    // holds; the file is what a static server would serve, and the directory check
    // refuses it.
    for id in [TileId::hash(0, 2, 188), TileId::entries(2, 188)] {
        let good = flip_a_byte(&dir, &id);
        let [stored, served] = both_checks(&storage, &dir).await;
        assert_eq!(stored, Ok(()), "the storage view of {}", id.path());
        let e = served.expect_err(&format!("fsck passed a corrupt {}", id.path()));
        assert!(
            e.contains(&id.path()),
            "fsck on a corrupt {}: {e}",
            id.path()
        );
        std::fs::write(dir.join(id.path()), &good).unwrap();
    }
    for r in both_checks(&storage, &dir).await {
        assert_eq!(r, Ok(()));
    }
}

/// Flip one byte in the middle of the file of `id`; its good bytes.
fn flip_a_byte(dir: &Path, id: &TileId) -> Vec<u8> {
    let path = dir.join(id.path());
    let good = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", id.path()));
    let mut bad = good.clone();
    let at = bad.len() / 2;
    bad[at] ^= 1;
    std::fs::write(&path, &bad).unwrap();
    good
}
