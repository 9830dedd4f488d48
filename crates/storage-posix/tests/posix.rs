//! The POSIX backend driven by the real engine: byte-identical to the Go reference
//! logs, crash-consistent reopen, and the directory lock.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use tlogd_core::engine::checker::{CheckpointWatch, check_log, check_log_observed};
use tlogd_core::engine::{Log, LogStorage};
use tlogd_core::note::NoteSigner;
use tlogd_storage_posix::{OpenError, PosixStorage};

#[path = "../../core/tests/support/vectors_dir.rs"]
mod vectors_dir;
use tlogd_core::conformance::{ORIGIN, SKEY, add_in_order, config, files};
use vectors_dir::vectors;

/// [`PosixStorage::open`], retried for a while when the lock is still held by a
/// storage this test process already dropped. The lock belongs to an open file
/// description, and a child process that another test of this binary is spawning
/// (`mkfs`, `mount`, `chattr`) holds a copy of every descriptor between its fork and
/// its exec, close-on-exec or not: a reopen in that window finds the lock held (seen
/// once in CI). A second process is still refused at once; see
/// `a_second_process_is_refused_and_origin_is_checked`.
fn open(root: impl AsRef<std::path::Path>, origin: &str) -> Result<PosixStorage, OpenError> {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        match PosixStorage::open(root.as_ref(), origin) {
            Err(OpenError::Locked(..)) if std::time::Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(10));
            }
            other => return other,
        }
    }
}

/// The state slot the last commit wrote: the one with the higher sequence number
/// (magic, length, origin length, origin, then the sequence number, big-endian).
fn newest_slot(root: &std::path::Path) -> std::path::PathBuf {
    let seq = |p: &std::path::Path| {
        let b = std::fs::read(p).unwrap();
        let at = 21 + 4 + 2 + u16::from_be_bytes([b[25], b[26]]) as usize;
        u64::from_be_bytes(b[at..at + 8].try_into().unwrap())
    };
    ["state.0", "state.1"]
        .iter()
        .map(|n| root.join(".tlogd").join(n))
        .max_by_key(|p| seq(p))
        .unwrap()
}

#[tokio::test(flavor = "current_thread")]
async fn seventy_thousand_entries_match_the_go_reference_byte_for_byte() {
    let want_dir = vectors().join("tessera-70k");
    let want = files(&want_dir);
    for batch in [256usize, 1000, 4096] {
        let dir = tempfile::tempdir().unwrap();
        let storage = Arc::new(open(dir.path(), ORIGIN).unwrap());
        let (log, tasks) = Log::open(storage.clone(), None, config(batch))
            .await
            .unwrap();
        // In two halves, so the second starts from a reloaded partial edge.
        let entries: Vec<Bytes> = (0..70_000)
            .map(|i| Bytes::from(format!("entry {i}")))
            .collect();
        add_in_order(&log, entries[..33_333].to_vec(), 0).await;
        log.shutdown();
        tasks.join().await;
        drop(log);
        drop(storage);
        let storage = Arc::new(open(dir.path(), ORIGIN).unwrap());
        let (log, tasks) = Log::open(storage.clone(), None, config(batch))
            .await
            .unwrap();
        add_in_order(&log, entries[33_333..].to_vec(), 33_333).await;
        log.shutdown();
        tasks.join().await;
        for f in &want {
            let got = std::fs::read(dir.path().join(f))
                .unwrap_or_else(|e| panic!("batch {batch}: {} missing: {e}", f.display()));
            let exp = std::fs::read(want_dir.join(f)).unwrap();
            assert!(
                got == exp,
                "batch {batch}: {} differs from the Go reference",
                f.display()
            );
        }
        // Beyond the reference's files there are only partial tiles: those of the
        // still-partial edge (tlog-tiles "Partial Tiles": they must stay while
        // checkpoints name them) and those of the last batch's newly full tiles, which
        // are garbage-collected one commit later. Earlier ones are gone.
        let extra: Vec<String> = files(dir.path())
            .into_iter()
            .filter(|f| !want.contains(f))
            .map(|f| f.to_string_lossy().into_owned())
            .collect();
        for s in &extra {
            assert!(s.contains(".p/"), "batch {batch}: unexpected {s}");
        }
        assert!(
            !dir.path().join("tile/0/000.p").exists(),
            "batch {batch}: old partials were not collected"
        );
        let verifier = NoteSigner::from_skey(SKEY).unwrap().verifier();
        let report = check_log(&*storage, ORIGIN, &verifier, None).await.unwrap();
        assert_eq!(report.state.size, 70_000);
    }
}

#[tokio::test(flavor = "current_thread")]
async fn every_intermediate_state_of_the_small_log_matches() {
    let v = vectors().join("tessera-testdata-log");
    let words =
        "one two three four five six seven eit nain ten ileven twelf threeten fourten fivten";
    let dir = tempfile::tempdir().unwrap();
    let storage = Arc::new(open(dir.path(), ORIGIN).unwrap());
    let (log, tasks) = Log::open(storage.clone(), None, config(1)).await.unwrap();
    let wait_checkpoint = |n: u64| {
        let log = log.clone();
        async move {
            for _ in 0..500 {
                if log.published_size() == Some(n) {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
            panic!("checkpoint {n} not published");
        }
    };
    wait_checkpoint(0).await;
    let cp = std::fs::read(dir.path().join("checkpoint")).unwrap();
    assert_eq!(
        cp,
        std::fs::read(v.join("checkpoint.0")).unwrap(),
        "empty checkpoint"
    );
    for (i, w) in words.split(' ').enumerate() {
        let n = i as u64 + 1;
        assert_eq!(
            log.add(Bytes::from(w.to_string())).await.unwrap().index,
            i as u64
        );
        wait_checkpoint(n).await;
        for rel in [
            format!("tile/0/000.p/{n}"),
            format!("tile/entries/000.p/{n}"),
            "checkpoint".into(),
        ] {
            let want_name = if rel == "checkpoint" {
                format!("checkpoint.{n}")
            } else {
                rel.clone()
            };
            let got = std::fs::read(dir.path().join(&rel)).unwrap();
            assert!(
                got == std::fs::read(v.join(&want_name)).unwrap(),
                "{rel} at size {n}"
            );
        }
    }
    log.shutdown();
    tasks.join().await;
}

#[tokio::test]
async fn a_second_process_is_refused_and_origin_is_checked() {
    let dir = tempfile::tempdir().unwrap();
    let first = open(dir.path(), ORIGIN).unwrap();
    // OFD locks conflict between open file descriptions, even within one process.
    match PosixStorage::open(dir.path(), ORIGIN) {
        Err(OpenError::Locked(..)) => {}
        other => panic!("expected the lock to be refused, got {:?}", other.err()),
    }
    let (log, tasks) = Log::open(Arc::new(first), None, config(16)).await.unwrap();
    log.add(Bytes::from_static(b"x")).await.unwrap();
    log.shutdown();
    tasks.join().await;
    drop(log);
    match open(dir.path(), "example.com/other") {
        Err(e @ OpenError::OriginMismatch { .. }) => assert!(e.to_string().contains("other")),
        other => panic!("expected origin mismatch, got {:?}", other.err()),
    }
}

#[tokio::test]
async fn a_crash_leaves_staged_tiles_which_reopen_publishes_or_discards() {
    // Where a crash really leaves bytes: full tiles of a batch are staged privately
    // until the state commits (commit protocol steps 1-4). Simulate a crash after the
    // state of size 300 committed but before its tiles were renamed into place, plus
    // an uncommitted batch's staged tiles beyond it.
    let dir = tempfile::tempdir().unwrap();
    {
        let storage = Arc::new(open(dir.path(), ORIGIN).unwrap());
        let (log, tasks) = Log::open(storage, None, config(64)).await.unwrap();
        for i in 0..300u32 {
            log.add(Bytes::from(format!("a{i}"))).await.unwrap();
        }
        log.shutdown();
        tasks.join().await;
    }
    let staged = dir.path().join(".tlogd/staged");
    let committed_bundle = std::fs::read(dir.path().join("tile/entries/000")).unwrap();
    let committed_tile = std::fs::read(dir.path().join("tile/0/000")).unwrap();
    for rel in ["tile/entries/000", "tile/0/000"] {
        std::fs::create_dir_all(staged.join(rel).parent().unwrap()).unwrap();
        std::fs::rename(dir.path().join(rel), staged.join(rel)).unwrap();
    }
    // An uncommitted batch's garbage.
    for rel in ["tile/entries/001", "tile/0/001"] {
        std::fs::write(staged.join(rel), vec![9u8; 32 * 256]).unwrap();
    }
    let storage = Arc::new(open(dir.path(), ORIGIN).unwrap());
    assert_eq!(
        std::fs::read(dir.path().join("tile/entries/000")).unwrap(),
        committed_bundle
    );
    assert_eq!(
        std::fs::read(dir.path().join("tile/0/000")).unwrap(),
        committed_tile
    );
    for rel in ["tile/entries/001", "tile/0/001"] {
        assert!(!staged.join(rel).exists(), "{rel} was not discarded");
        assert!(!dir.path().join(rel).exists(), "{rel} was published");
    }
    let (log, tasks) = Log::open(storage.clone(), None, config(64)).await.unwrap();
    let verifier = NoteSigner::from_skey(SKEY).unwrap().verifier();
    let watch = CheckpointWatch::start(storage.clone(), ORIGIN, &verifier);
    for i in 0..1000u32 {
        log.add(Bytes::from(format!("b{i}"))).await.unwrap();
    }
    log.shutdown();
    tasks.join().await;
    // Every checkpoint published on the way names partials that are files (or whose
    // full tile is, once they were deleted).
    let observed = watch.stop().await.unwrap();
    assert!(observed.len() > 1, "{} checkpoints seen", observed.len());
    let r = check_log_observed(&*storage, ORIGIN, &verifier, &observed, None)
        .await
        .unwrap();
    assert_eq!(r.state.size, 1300);
    assert_eq!(r.checkpoint_size, 1300);
}

#[tokio::test]
async fn committed_tiles_a_crash_left_only_in_the_state_slot_are_published_at_open() {
    // Commit protocol steps 3-5: the full tiles of a batch are durable in its state
    // slot first; a later flush syncs their staged files and renames them into place.
    // Tile 0 is flushed; then a crash before any further flush: staged files torn
    // (written, never synced), no later full tile public, and the newest slot torn as
    // well, so the previous slot must carry every tile not yet flushed. Also with that
    // slot written by the previous release (v4, the same tiles under a SHA-256).
    for previous_v4 in [false, true] {
        committed_tiles_left_in_the_slot(previous_v4).await;
    }
}

async fn committed_tiles_left_in_the_slot(previous_v4: bool) {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = config(64);
    cfg.checkpoint_interval = Duration::from_secs(3600);
    {
        let storage = Arc::new(open(dir.path(), ORIGIN).unwrap());
        let (log, tasks) = Log::open(storage.clone(), None, cfg.clone()).await.unwrap();
        let entries = (0..300).map(|i| Bytes::from(format!("c{i}"))).collect();
        add_in_order(&log, entries, 0).await;
        // The flusher runs on its own; wait until tile 0 is public.
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        while !dir.path().join("tile/entries/000").exists() {
            assert!(std::time::Instant::now() < deadline, "tile 0 never flushed");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        storage.stop_flushing();
        let entries = (300..700).map(|i| Bytes::from(format!("c{i}"))).collect();
        add_in_order(&log, entries, 300).await;
        log.shutdown();
        tasks.join().await;
    }
    for rel in ["tile/entries/001", "tile/0/001"] {
        assert!(!dir.path().join(rel).exists(), "{rel} was flushed");
    }
    let staged = dir.path().join(".tlogd/staged");
    let staged_files = files(&staged);
    assert!(staged_files.len() >= 2, "{staged_files:?}");
    for f in &staged_files {
        let p = staged.join(f);
        let b = std::fs::read(&p).unwrap();
        std::fs::write(&p, &b[..b.len() / 2]).unwrap();
    }
    let newest = newest_slot(dir.path());
    if previous_v4 {
        let previous = dir
            .path()
            .join(".tlogd")
            .join(match newest.ends_with("state.0") {
                true => "state.1",
                false => "state.0",
            });
        assert!(
            v5_to_old(&previous, "v4"),
            "the previous slot carries no tile"
        );
    }
    std::fs::write(&newest, b"tlogd-posix-state v5\n").unwrap();
    let storage = Arc::new(open(dir.path(), ORIGIN).unwrap());
    let size = storage.load_state().await.unwrap().unwrap().size;
    assert!((512..700).contains(&size), "recovered size {size}");
    assert!(files(&staged).is_empty(), "staged files left behind");
    for rel in [
        "tile/entries/000",
        "tile/entries/001",
        "tile/0/000",
        "tile/0/001",
    ] {
        assert!(dir.path().join(rel).exists(), "{rel} was not published");
    }
    for n in ["state.0", "state.1"] {
        let b = std::fs::read(dir.path().join(".tlogd").join(n)).unwrap();
        assert!(b.starts_with(b"tlogd-posix-state v5\n"), "{n}");
    }
    // The whole tree, read from the public files, and the log goes on from there.
    let verifier = NoteSigner::from_skey(SKEY).unwrap().verifier();
    let r = check_log(&*storage, ORIGIN, &verifier, None).await.unwrap();
    assert_eq!(r.state.size, size);
    let (log, tasks) = Log::open(storage.clone(), None, cfg).await.unwrap();
    let more = (0..300).map(|i| Bytes::from(format!("d{i}"))).collect();
    add_in_order(&log, more, size).await;
    log.shutdown();
    tasks.join().await;
    let r = check_log(&*storage, ORIGIN, &verifier, None).await.unwrap();
    assert_eq!((r.state.size, r.checkpoint_size), (size + 300, size + 300));
}

/// Rewrite the v5 slot record at `path` as an earlier release would have written the
/// same state: `old` is "v4" (the same fields, a SHA-256 instead of the CRC-32C) or
/// "v3" (no carried tiles: only for a record carrying none). Stale bytes follow, as
/// in a slot file. Whether the record carried tiles.
fn v5_to_old(path: &std::path::Path, old: &str) -> bool {
    use sha2::Digest;
    let b = std::fs::read(path).unwrap();
    assert!(b.starts_with(b"tlogd-posix-state v5\n"));
    let len = u32::from_be_bytes(b[21..25].try_into().unwrap()) as usize;
    let body = &b[25..len - 4];
    // The count of carried tiles follows the edge: find it by walking the record.
    let at = 2 + u16::from_be_bytes([body[0], body[1]]) as usize + 8 + 40;
    let mut at = at + 1;
    for _ in 0..body[at - 1] {
        let n = u32::from_be_bytes(body[at + 11..at + 15].try_into().unwrap()) as usize;
        at += 15 + n;
    }
    let carries = body[at..at + 4] != [0; 4];
    let fields = match old {
        "v4" => body,
        "v3" => {
            assert!(!carries, "a v3 record carries no tiles");
            &body[..body.len() - 4]
        }
        _ => panic!("{old}"),
    };
    let mut rec = format!("tlogd-posix-state {old}\n").into_bytes();
    rec.extend_from_slice(&((25 + fields.len() + 32) as u32).to_be_bytes());
    rec.extend_from_slice(fields);
    let sum = sha2::Sha256::digest(&rec);
    rec.extend_from_slice(&sum);
    rec.extend_from_slice(&[7; 100]);
    std::fs::write(path, rec).unwrap();
    carries
}

#[tokio::test]
async fn logs_of_earlier_releases_are_read_and_both_slots_are_upgraded() {
    for old in ["v4", "v3"] {
        let dir = tempfile::tempdir().unwrap();
        {
            let storage = Arc::new(open(dir.path(), ORIGIN).unwrap());
            let (log, tasks) = Log::open(storage, None, config(64)).await.unwrap();
            let entries = (0..200).map(|i| Bytes::from(format!("v{i}"))).collect();
            add_in_order(&log, entries, 0).await;
            log.shutdown();
            tasks.join().await;
        }
        // Both slots as an earlier release wrote them.
        let slots = ["state.0", "state.1"].map(|n| dir.path().join(".tlogd").join(n));
        for p in &slots {
            assert!(!v5_to_old(p, old), "{} carries tiles", p.display());
        }
        let storage = Arc::new(open(dir.path(), ORIGIN).unwrap());
        assert_eq!(storage.load_state().await.unwrap().unwrap().size, 200);
        // An earlier release can no longer read either slot, so it refuses the log
        // rather than fall back to an older commit.
        for p in &slots {
            assert!(
                std::fs::read(p)
                    .unwrap()
                    .starts_with(b"tlogd-posix-state v5\n"),
                "{old}: {} not rewritten",
                p.display()
            );
        }
        let (log, tasks) = Log::open(storage.clone(), None, config(64)).await.unwrap();
        let more = (200..300).map(|i| Bytes::from(format!("v{i}"))).collect();
        add_in_order(&log, more, 200).await;
        log.shutdown();
        tasks.join().await;
        let verifier = NoteSigner::from_skey(SKEY).unwrap().verifier();
        let r = check_log(&*storage, ORIGIN, &verifier, None).await.unwrap();
        assert_eq!((r.state.size, r.checkpoint_size), (300, 300));
    }
}

#[tokio::test]
async fn a_batch_whose_state_does_not_commit_publishes_nothing() {
    // Engine invariant 1: a public path only ever holds committed bytes. Make the
    // state write fail (both slots replaced by directories) after the batch's full
    // tiles were written: none of them may be at a public path.
    let dir = tempfile::tempdir().unwrap();
    let storage = Arc::new(open(dir.path(), ORIGIN).unwrap());
    let mut cfg = config(64);
    cfg.commit_retry = Duration::ZERO;
    let (log, tasks) = Log::open(storage.clone(), None, cfg).await.unwrap();
    for i in 0..200u32 {
        log.add(Bytes::from(format!("a{i}"))).await.unwrap();
    }
    for slot in ["state.0", "state.1"] {
        let p = dir.path().join(".tlogd").join(slot);
        std::fs::remove_file(&p).unwrap();
        std::fs::create_dir(&p).unwrap();
    }
    // Pushed together, so that one batch completes the first bundle and tile.
    let adds: Vec<_> = (0..100u32)
        .map(|i| {
            let log = log.clone();
            tokio::spawn(async move { log.add(Bytes::from(format!("b{i}"))).await })
        })
        .collect();
    for a in adds {
        let r = a.await.unwrap();
        assert!(r.is_err(), "{r:?}");
    }
    assert!(
        dir.path().join(".tlogd/staged/tile/entries/000").exists(),
        "the batch did reach its staging step"
    );
    for rel in ["tile/entries/000", "tile/0/000"] {
        assert!(
            !dir.path().join(rel).exists(),
            "{rel} is public uncommitted"
        );
    }
    log.shutdown();
    tasks.join().await;
}

/// The state slot's `fdatasync` fails (a disk reporting `EIO`) after the slot was
/// written: the page cache holds the record and may still write it to disk, so the
/// batch's adds are answered "uncertain" (503: resubmit), not "not logged"; the store
/// takes no more commits until a restart, which here finds the batch logged. (Its adds
/// were answered "storage refuses writes", that is, not logged.)
#[tokio::test]
async fn a_failed_sync_of_the_state_slot_is_answered_uncertain() {
    use tlogd_core::engine::AddError;
    let dir = tempfile::tempdir().unwrap();
    {
        let storage = Arc::new(open(dir.path(), ORIGIN).unwrap());
        let (log, tasks) = Log::open(storage.clone(), None, config(64)).await.unwrap();
        assert_eq!(log.add(Bytes::from("a0")).await.map(|o| o.index), Ok(0));
        storage.fail_next_slot_sync();
        assert_eq!(log.add(Bytes::from("a1")).await, Err(AddError::Uncertain));
        // Poisoned: the next batch is refused, and truly not logged.
        assert_eq!(
            log.add(Bytes::from("a2")).await,
            Err(AddError::WritesRefused)
        );
        log.shutdown();
        tasks.join().await;
    }
    let storage = open(dir.path(), ORIGIN).unwrap();
    let verifier = NoteSigner::from_skey(SKEY).unwrap().verifier();
    let mut logged = Vec::new();
    let mut visit = |_: u64, e: &[u8]| logged.push(e.to_vec());
    check_log(&storage, ORIGIN, &verifier, Some(&mut visit))
        .await
        .unwrap();
    assert_eq!(logged, [b"a0".to_vec(), b"a1".to_vec()]);
}

#[tokio::test]
async fn partial_tiles_are_files_only_for_checkpointed_sizes() {
    let dir = tempfile::tempdir().unwrap();
    let storage = Arc::new(open(dir.path(), ORIGIN).unwrap());
    let mut cfg = config(64);
    // One checkpoint at start (size 0) and one at shutdown, none in between.
    cfg.checkpoint_interval = Duration::from_secs(3600);
    let (log, tasks) = Log::open(storage.clone(), None, cfg).await.unwrap();
    let entries: Vec<Bytes> = (0..1000).map(|i| Bytes::from(format!("p{i}"))).collect();
    add_in_order(&log, entries, 0).await;
    // Committed but not checkpointed: served (from the state's edge), not files.
    let mid = tlogd_core::tile::TileId::entries(3, 232);
    assert!(storage.read_tile(&mid).await.unwrap().is_some());
    assert!(!dir.path().join(mid.path()).exists());
    log.shutdown();
    tasks.join().await;
    let partials: Vec<String> = files(dir.path())
        .into_iter()
        .map(|f| f.to_string_lossy().into_owned())
        .filter(|f| f.contains(".p/"))
        .collect();
    assert_eq!(
        partials,
        [
            "tile/0/003.p/232",
            "tile/1/000.p/3",
            "tile/entries/003.p/232"
        ],
        "only the final checkpoint's partials"
    );
    let verifier = NoteSigner::from_skey(SKEY).unwrap().verifier();
    assert_eq!(
        check_log(&*storage, ORIGIN, &verifier, None)
            .await
            .unwrap()
            .checkpoint_size,
        1000
    );
}

#[tokio::test]
async fn a_torn_state_slot_falls_back_to_the_previous_commit() {
    let dir = tempfile::tempdir().unwrap();
    {
        let storage = Arc::new(open(dir.path(), ORIGIN).unwrap());
        let (log, tasks) = Log::open(storage, None, config(64)).await.unwrap();
        add_in_order(
            &log,
            (0..100).map(|i| Bytes::from(format!("t{i}"))).collect(),
            0,
        )
        .await;
        add_in_order(
            &log,
            (100..110).map(|i| Bytes::from(format!("t{i}"))).collect(),
            100,
        )
        .await;
        log.shutdown();
        tasks.join().await;
    }
    // The newest slot, written by the last commit (to size 110), torn by a crash: the
    // commit never returned, so it was never acknowledged.
    let newest = newest_slot(dir.path());
    // Only its first bytes reached the disk. (Slot files are padded: the record is a
    // prefix of the file, so half the file could still hold all of it.)
    let bytes = std::fs::read(&newest).unwrap();
    std::fs::write(&newest, &bytes[..100]).unwrap();
    // The checkpoint (size 110) now names a tree the log does not hold; remove it as
    // it would not have been written before that commit.
    std::fs::remove_file(dir.path().join("checkpoint")).unwrap();
    let storage = Arc::new(open(dir.path(), ORIGIN).unwrap());
    let state = storage.load_state().await.unwrap().unwrap();
    assert!(
        state.size < 110,
        "fell back to an earlier commit, got {}",
        state.size
    );
    let (log, tasks) = Log::open(storage.clone(), None, config(64)).await.unwrap();
    let more: Vec<Bytes> = (0..50).map(|i| Bytes::from(format!("u{i}"))).collect();
    add_in_order(&log, more, state.size).await;
    log.shutdown();
    tasks.join().await;
    let verifier = NoteSigner::from_skey(SKEY).unwrap().verifier();
    let r = check_log(&*storage, ORIGIN, &verifier, None).await.unwrap();
    assert_eq!(r.state.size, state.size + 50);
}

#[tokio::test]
async fn a_log_with_no_readable_state_is_refused_not_restarted() {
    let dir = tempfile::tempdir().unwrap();
    {
        let storage = Arc::new(open(dir.path(), ORIGIN).unwrap());
        let (log, tasks) = Log::open(storage, None, config(8)).await.unwrap();
        add_in_order(
            &log,
            (0..40).map(|i| Bytes::from(format!("d{i}"))).collect(),
            0,
        )
        .await;
        log.shutdown();
        tasks.join().await;
    }
    // Both slots damaged: no crash does that, and an empty tree written over this
    // log's files would fork it.
    for n in ["state.0", "state.1"] {
        let p = dir.path().join(".tlogd").join(n);
        let mut b = std::fs::read(&p).unwrap();
        b[30] ^= 1;
        std::fs::write(&p, b).unwrap();
    }
    match open(dir.path(), ORIGIN) {
        Err(e @ OpenError::CorruptState(..)) => assert!(e.to_string().contains("state.0"), "{e}"),
        other => panic!("expected a corrupt state error, got {:?}", other.err()),
    }
}

fn copy_dir(from: &std::path::Path, to: &std::path::Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap().flatten() {
        let target = to.join(e.file_name());
        if e.file_type().unwrap().is_dir() {
            copy_dir(&e.path(), &target);
        } else {
            std::fs::copy(e.path(), &target).unwrap();
        }
    }
}

/// The entries of a log directory up to `size`, read from its bundles.
fn entries_of(dir: &std::path::Path, size: u64) -> Vec<Bytes> {
    let mut out = Vec::new();
    for n in 0..size.div_ceil(256) {
        let w = (size - n * 256).min(256) as u16;
        let b = std::fs::read(dir.join(tlogd_core::tile::TileId::entries(n, w).path())).unwrap();
        for e in tlogd_core::bundle::parse_bundle(&b).unwrap() {
            out.push(Bytes::copy_from_slice(e));
        }
    }
    out
}

/// Adopting Tessera v1.0.4's POSIX directory: tlogd continues the same tree, and the
/// result is byte for byte what tlogd writes for the same entries from scratch.
#[tokio::test(flavor = "current_thread")]
async fn a_tessera_posix_log_is_adopted_and_continued_byte_for_byte() {
    let tessera = vectors().join("tessera-posix-dir");
    let dir = tempfile::tempdir().unwrap();
    let adopted = dir.path().join("adopted");
    copy_dir(&tessera, &adopted);
    let old_entries = entries_of(&tessera, 1000);
    let new_entries: Vec<Bytes> = (0..1500)
        .map(|i| Bytes::from(format!("appended by tlogd {i}")))
        .collect();

    let storage = Arc::new(open(&adopted, ORIGIN).unwrap());
    assert_eq!(storage.adopted_tessera().map(|t| t.size), Some(1000));
    let state = storage.load_state().await.unwrap().unwrap();
    assert_eq!(state.size, 1000);
    // A Tessera process cannot integrate while tlogd has the directory.
    let tessera_lock = std::fs::File::open(adopted.join(".state/treeState.lock")).unwrap();
    // SAFETY: valid fd.
    let rc = unsafe {
        libc::flock(
            std::os::fd::AsRawFd::as_raw_fd(&tessera_lock),
            libc::LOCK_EX | libc::LOCK_NB,
        )
    };
    assert_eq!(rc, -1, "Tessera's tree lock is held by tlogd");
    let (log, tasks) = Log::open(storage.clone(), None, config(100)).await.unwrap();
    add_in_order(&log, new_entries.clone(), 1000).await;
    log.shutdown();
    tasks.join().await;
    drop(log);
    drop(storage);

    // The same entries through a fresh tlogd log.
    let fresh = dir.path().join("fresh");
    let storage = Arc::new(open(&fresh, ORIGIN).unwrap());
    let (log, tasks) = Log::open(storage.clone(), None, config(100)).await.unwrap();
    let all: Vec<Bytes> = old_entries.iter().chain(&new_entries).cloned().collect();
    add_in_order(&log, all, 0).await;
    log.shutdown();
    tasks.join().await;

    // Every full tile and bundle, the final checkpoint and its partials. (Partials of
    // intermediate checkpoints depend on when those were published.)
    let edge: Vec<std::path::PathBuf> = tlogd_core::tile::edge_tiles(2500)
        .into_iter()
        .chain(tlogd_core::tile::edge_bundle(2500))
        .map(|id| id.path().into())
        .collect();
    for f in files(&fresh)
        .into_iter()
        .filter(|f| !f.to_string_lossy().contains(".p/") || edge.contains(f))
    {
        let got = std::fs::read(adopted.join(&f))
            .unwrap_or_else(|e| panic!("{} missing from the adopted log: {e}", f.display()));
        assert!(
            got == std::fs::read(fresh.join(&f)).unwrap(),
            "{} differs between the adopted and the fresh log",
            f.display()
        );
    }
    // Tessera's full tiles are untouched; anything else extra is an old partial.
    for f in files(&tessera) {
        let s = f.to_string_lossy();
        if s.starts_with(".state") || s.contains(".p/") || s == "checkpoint" {
            continue;
        }
        assert_eq!(
            std::fs::read(adopted.join(&f)).unwrap(),
            std::fs::read(tessera.join(&f)).unwrap(),
            "{s}"
        );
    }
    for f in files(&adopted) {
        let s = f.to_string_lossy();
        assert!(
            s.starts_with(".state") || s.contains(".p/") || fresh.join(&f).exists(),
            "unexpected {s}"
        );
    }
    assert!(
        !adopted.join("tile/0/003.p").exists(),
        "Tessera's partials of a tile now full were collected"
    );
    // Reopened, it is tlogd's log now (its own state), and it checks out.
    let storage = Arc::new(open(&adopted, ORIGIN).unwrap());
    assert_eq!(storage.adopted_tessera(), None);
    let verifier = NoteSigner::from_skey(SKEY).unwrap().verifier();
    let r = check_log(&*storage, ORIGIN, &verifier, None).await.unwrap();
    assert_eq!((r.state.size, r.checkpoint_size), (2500, 2500));
}

/// A Tessera directory whose state and files disagree is refused, naming what
/// disagrees, and nothing public is written.
#[tokio::test]
async fn a_tessera_log_that_disagrees_with_itself_is_refused() {
    let tessera = vectors().join("tessera-posix-dir");
    let tmp = tempfile::tempdir().unwrap();
    let signer = NoteSigner::from_skey(SKEY).unwrap();
    let mut case = 0;
    let mut refused = |prepare: &dyn Fn(&std::path::Path), needle: &str| {
        case += 1;
        let d = tmp.path().join(format!("case{case}"));
        copy_dir(&tessera, &d);
        prepare(&d);
        let before = files(&d);
        match PosixStorage::open(&d, ORIGIN) {
            Err(e @ (OpenError::Tessera(..) | OpenError::OriginMismatch { .. })) => {
                assert!(e.to_string().contains(needle), "{needle:?} not in: {e}")
            }
            other => panic!("case {case}: expected a refusal, got {:?}", other.err()),
        }
        assert_eq!(files(&d), before, "case {case} changed the log");
        assert!(!d.join(".tlogd/state.0").exists() && !d.join(".tlogd/state.1").exists());
    };
    let tree_state =
        |d: &std::path::Path, json: &str| std::fs::write(d.join(".state/treeState"), json).unwrap();
    refused(
        &|d| {
            tree_state(
                d,
                r#"{"size":1000,"root":"AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA="}"#,
            )
        },
        ".state/treeState and the public tiles disagree: the edge tiles at size 1000 hash to root IbAOuiyFS0NiMRNgC0pdZ+cisRr24kFfaoModBPAQug=",
    );
    refused(
        &|d| {
            tree_state(
                d,
                r#"{"size":1001,"root":"IbAOuiyFS0NiMRNgC0pdZ+cisRr24kFfaoModBPAQug="}"#,
            )
        },
        "says size 1001 but tile/0/003.p/233 cannot be read",
    );
    refused(
        &|d| tree_state(d, "not json"),
        "is not a Tessera tree state",
    );
    refused(
        &|d| {
            let p = d.join("tile/1/000.p/3");
            let mut b = std::fs::read(&p).unwrap();
            b[40] ^= 1;
            std::fs::write(p, b).unwrap();
        },
        "disagree",
    );
    refused(
        &|d| {
            let p = d.join("tile/entries/003.p/232");
            let mut b = std::fs::read(&p).unwrap();
            b[3] ^= 1;
            std::fs::write(p, b).unwrap();
        },
        "tile/entries/003.p/232 does not match the level-0 tile at size 1000",
    );
    refused(
        &|d| {
            let cp = tlogd_core::checkpoint::Checkpoint {
                origin: ORIGIN.into(),
                size: 768,
                root: [3u8; 32],
                extensions: vec![],
            };
            std::fs::write(d.join("checkpoint"), cp.sign(&signer).unwrap()).unwrap();
        },
        "the checkpoint and the public tiles disagree",
    );
    refused(
        &|d| std::fs::write(d.join(".state/version"), "2").unwrap(),
        "only version 1 is supported",
    );
    refused(
        &|d| {
            let other = tlogd_core::checkpoint::Checkpoint {
                origin: "example.com/other".into(),
                size: 1000,
                root: [3u8; 32],
                extensions: vec![],
            };
            let (sk, _) = tlogd_core::note::generate_key("example.com/other").unwrap();
            let s = NoteSigner::from_skey(&sk).unwrap();
            std::fs::write(d.join("checkpoint"), other.sign(&s).unwrap()).unwrap();
        },
        "its checkpoint is for the log \"example.com/other\"",
    );

    // A running Tessera (holding its tree lock) keeps tlogd out.
    let d = tmp.path().join("locked");
    copy_dir(&tessera, &d);
    let held = std::fs::File::open(d.join(".state/treeState.lock")).unwrap();
    // SAFETY: valid fd.
    let rc = unsafe { libc::flock(std::os::fd::AsRawFd::as_raw_fd(&held), libc::LOCK_EX) };
    assert_eq!(rc, 0);
    match PosixStorage::open(&d, ORIGIN) {
        Err(e @ OpenError::TesseraLocked(..)) => {
            assert!(e.to_string().contains("in use by a Tessera process"), "{e}")
        }
        other => panic!(
            "expected the Tessera lock to be refused, got {:?}",
            other.err()
        ),
    }
}

/// A small ext4 filesystem on a loop device, unmounted on drop. The suite runs as
/// root; if it cannot mount, the test fails saying why (never skips).
struct SmallFs {
    dir: tempfile::TempDir,
}

impl SmallFs {
    fn mount(mib: u64) -> SmallFs {
        let dir = tempfile::tempdir().unwrap();
        let img = dir.path().join("fs.img");
        let mnt = dir.path().join("mnt");
        std::fs::create_dir(&mnt).unwrap();
        std::fs::File::create(&img)
            .unwrap()
            .set_len(mib << 20)
            .unwrap();
        let out = Self::run(
            "mkfs.ext4",
            &[
                "-q".as_ref(),
                "-F".as_ref(),
                "-m".as_ref(),
                "0".as_ref(),
                img.as_os_str(),
            ],
        );
        assert!(
            out.status.success(),
            "mkfs.ext4: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let fs = SmallFs { dir };
        fs.mount_image();
        fs
    }

    fn run(cmd: &str, args: &[&std::ffi::OsStr]) -> std::process::Output {
        std::process::Command::new(cmd)
            .args(args)
            .output()
            .unwrap_or_else(|e| panic!("cannot run {cmd} (install e2fsprogs, mount): {e}"))
    }

    /// Mount the image; an ext4 error (a failing disk) turns it read-only at once.
    fn mount_image(&self) {
        let img = self.dir.path().join("fs.img");
        let out = Self::run(
            "mount",
            &[
                "-o".as_ref(),
                "loop,errors=remount-ro".as_ref(),
                img.as_os_str(),
                self.path().as_os_str(),
            ],
        );
        assert!(
            out.status.success(),
            "mount failed (this test needs root to loop-mount a small ext4): {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// Make the kernel see an ext4 error, as a failing disk would: with
    /// `errors=remount-ro` the filesystem turns read-only under the daemon's feet.
    fn fail(&self) {
        let out = Self::run(
            "findmnt",
            &[
                "-n".as_ref(),
                "-o".as_ref(),
                "SOURCE".as_ref(),
                self.path().as_os_str(),
            ],
        );
        let dev = String::from_utf8_lossy(&out.stdout).trim().to_string();
        let name = dev.rsplit('/').next().unwrap_or_default().to_string();
        let knob = format!("/sys/fs/ext4/{name}/trigger_fs_error");
        std::fs::write(&knob, "1").unwrap_or_else(|e| panic!("{knob}: {e}"));
    }

    /// Unmount, repair (as an operator would), mount again.
    fn repair(&self) {
        let out = Self::run("umount", &[self.path().as_os_str()]);
        assert!(
            out.status.success(),
            "umount: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let img = self.dir.path().join("fs.img");
        // 0: clean, 1: errors corrected.
        let out = Self::run("e2fsck", &["-fy".as_ref(), img.as_os_str()]);
        assert!(
            matches!(out.status.code(), Some(0 | 1)),
            "e2fsck: {}",
            String::from_utf8_lossy(&out.stdout)
        );
        self.mount_image();
    }

    fn path(&self) -> std::path::PathBuf {
        self.dir.path().join("mnt")
    }
}

impl Drop for SmallFs {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount")
            .arg("-l")
            .arg(self.path())
            .status();
    }
}

/// The whole-log check, every acknowledged entry at its index, and no entry twice.
async fn check_acked(storage: &PosixStorage, acked: &std::collections::HashMap<u64, Bytes>) {
    let verifier = NoteSigner::from_skey(SKEY).unwrap().verifier();
    let mut found = std::collections::HashMap::new();
    let mut seen = std::collections::HashSet::new();
    let mut visit = |i: u64, e: &[u8]| {
        assert!(seen.insert(e.to_vec()), "an entry was logged twice");
        found.insert(i, e.to_vec());
    };
    check_log(storage, ORIGIN, &verifier, Some(&mut visit))
        .await
        .unwrap();
    for (i, e) in acked {
        assert_eq!(
            found.get(i).map(Vec::as_slice),
            Some(e.as_ref()),
            "entry {i}"
        );
    }
}

/// Fill the filesystem at `dir` with one file; returns its path.
fn fill(dir: &std::path::Path) -> std::path::PathBuf {
    use std::io::Write;
    let path = dir.join("filler");
    let mut f = std::fs::File::create(&path).unwrap();
    let chunk = vec![7u8; 64 << 10];
    let mut small = vec![7u8; 4096];
    loop {
        if f.write_all(&chunk).is_err() {
            break;
        }
    }
    // The last few blocks.
    while f.write_all(&small).is_ok() {}
    small.truncate(1);
    let _ = f.sync_all();
    path
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_disk_pushes_back_at_once_and_recovers_when_space_returns() {
    let fs = SmallFs::mount(24);
    let root = fs.path().join("log");
    let storage = Arc::new(open(&root, ORIGIN).unwrap());
    let mut cfg = config(64);
    // Long enough that an answer before it proves the full disk was not retried.
    cfg.commit_retry = Duration::from_secs(60);
    // Every checkpoint leaves a partial bundle file until its bundle is full: with
    // 4 KiB entries and a checkpoint per batch, those alone would fill this disk.
    cfg.checkpoint_interval = Duration::from_millis(500);
    let (log, tasks) = Log::open(storage.clone(), None, cfg).await.unwrap();
    let mut acked = std::collections::HashMap::new();
    let big = |i: u32| Bytes::from(format!("{i:08}").repeat(512));
    for i in 0..50u32 {
        let out = log.add(big(i)).await.unwrap();
        acked.insert(out.index, big(i));
    }
    let filler = fill(&fs.path());
    let started = std::time::Instant::now();
    let mut full = 0;
    for wave in 0..20u32 {
        let adds: Vec<_> = (0..64u32)
            .map(|j| {
                let log = log.clone();
                let e = big(1000 + wave * 64 + j);
                tokio::spawn(async move { (e.clone(), log.add(e).await) })
            })
            .collect();
        for a in adds {
            match a.await.unwrap() {
                (e, Ok(out)) => {
                    acked.insert(out.index, e);
                }
                (_, Err(tlogd_core::engine::AddError::WritesRefused)) => full += 1,
                (_, Err(e)) => panic!("a full disk must push back, not: {e}"),
            }
        }
        if full > 0 {
            break;
        }
    }
    assert!(full > 0, "the disk never filled up");
    assert!(
        started.elapsed() < Duration::from_secs(60),
        "adds were retried instead of pushed back"
    );
    // Space returns (ext4 reuses freed blocks once its journal commits, within
    // seconds): the log goes on without a restart.
    std::fs::remove_file(filler).unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let e = big(99_999);
        match log.add(e.clone()).await {
            Ok(out) => {
                acked.insert(out.index, e);
                break;
            }
            Err(tlogd_core::engine::AddError::WritesRefused)
                if std::time::Instant::now() < deadline =>
            {
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            Err(e) => panic!("no recovery after space returned: {e}"),
        }
    }
    for i in 0..100u32 {
        let e = Bytes::from(format!("small {i}"));
        let out = log.add(e.clone()).await.expect("recovered without restart");
        acked.insert(out.index, e);
    }
    log.shutdown();
    tasks.join().await;
    check_acked(&storage, &acked).await;
}

/// A commit whose state slot must grow on a full disk fails, and leaves no record of
/// itself behind: had the record landed whole while the slot's growth failed, the next
/// start would read back as committed a batch whose adds were answered "not logged".
/// On a small tmpfs, which runs out of space page by page (ext4 refused the whole
/// write at once in every setting tried, so it cannot show the partial write).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_state_slot_that_cannot_grow_keeps_no_record_of_the_failed_commit() {
    let dir = tempfile::tempdir().unwrap();
    let out = SmallFs::run(
        "mount",
        &[
            "-t".as_ref(),
            "tmpfs".as_ref(),
            "-o".as_ref(),
            "size=2m".as_ref(),
            "tmpfs".as_ref(),
            dir.path().as_os_str(),
        ],
    );
    assert!(
        out.status.success(),
        "mount tmpfs (this test needs root): {}",
        String::from_utf8_lossy(&out.stderr)
    );
    struct Unmount<'a>(&'a std::path::Path);
    impl Drop for Unmount<'_> {
        fn drop(&mut self) {
            let _ = std::process::Command::new("umount")
                .arg("-l")
                .arg(self.0)
                .status();
        }
    }
    let _unmount = Unmount(dir.path());
    let root = dir.path().join("log");
    {
        let storage = Arc::new(open(&root, ORIGIN).unwrap());
        let mut cfg = config(64);
        cfg.commit_retry = Duration::ZERO;
        let (log, tasks) = Log::open(storage.clone(), None, cfg).await.unwrap();
        // Four pages free: room for the first record, not for the slot's growth.
        let spare = dir.path().join("spare");
        std::fs::write(&spare, vec![1u8; 16 << 10]).unwrap();
        let filler = fill(dir.path());
        std::fs::remove_file(&spare).unwrap();
        let refused = log.add(Bytes::from_static(b"not logged")).await;
        assert!(refused.is_err(), "{refused:?}");
        log.shutdown();
        tasks.join().await;
        drop(log);
        drop(storage);
        std::fs::remove_file(filler).unwrap();
    }
    // The next start.
    let storage = open(&root, ORIGIN).unwrap();
    let size = storage.load_state().await.unwrap().map_or(0, |t| t.size);
    assert_eq!(
        size, 0,
        "a commit answered as failed was read back as committed"
    );
}

/// The filesystem turns read-only under load (an ext4 error with `errors=remount-ro`,
/// as a failing disk causes): adds are refused with 503 at once, nothing acknowledged
/// is lost, and after the operator repairs the filesystem the log reopens whole.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_filesystem_turning_read_only_under_load_loses_nothing() {
    let fs = SmallFs::mount(64);
    let root = fs.path().join("log");
    let acked: Arc<std::sync::Mutex<std::collections::HashMap<u64, Bytes>>> = Arc::default();
    let refused = Arc::new(std::sync::atomic::AtomicU64::new(0));
    {
        let storage = Arc::new(open(&root, ORIGIN).unwrap());
        let mut cfg = config(64);
        cfg.commit_retry = Duration::from_secs(60);
        let (log, tasks) = Log::open(storage, None, cfg).await.unwrap();
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let mut writers = Vec::new();
        for w in 0..8u32 {
            let (log, acked, refused, stop) =
                (log.clone(), acked.clone(), refused.clone(), stop.clone());
            writers.push(tokio::spawn(async move {
                let mut i = 0u32;
                while !stop.load(std::sync::atomic::Ordering::Acquire) {
                    let e = Bytes::from(format!("writer {w} entry {i}"));
                    i += 1;
                    match log.add(e.clone()).await {
                        Ok(out) => {
                            acked.lock().unwrap().insert(out.index, e);
                        }
                        // A write refused (EROFS), or a slot's sync that failed
                        // as the filesystem turned (its batch "uncertain").
                        Err(
                            tlogd_core::engine::AddError::WritesRefused
                            | tlogd_core::engine::AddError::Uncertain,
                        ) => {
                            refused.fetch_add(1, std::sync::atomic::Ordering::AcqRel);
                            tokio::time::sleep(Duration::from_millis(5)).await;
                        }
                        Err(e) => panic!("a read-only filesystem must push back, not: {e}"),
                    }
                }
            }));
        }
        let wait = |what: &str, cond: &dyn Fn() -> bool| {
            let deadline = std::time::Instant::now() + Duration::from_secs(30);
            while !cond() {
                assert!(
                    std::time::Instant::now() < deadline,
                    "timed out waiting for {what}"
                );
                std::thread::sleep(Duration::from_millis(10));
            }
        };
        wait("500 acknowledged adds", &|| {
            acked.lock().unwrap().len() >= 500
        });
        fs.fail();
        wait("adds to be refused", &|| {
            refused.load(std::sync::atomic::Ordering::Acquire) >= 50
        });
        assert!(!log.is_ready() || refused.load(std::sync::atomic::Ordering::Acquire) > 0);
        stop.store(true, std::sync::atomic::Ordering::Release);
        for w in writers {
            w.await.unwrap();
        }
        log.shutdown();
        tasks.join().await;
    }
    fs.repair();
    let storage = Arc::new(open(&root, ORIGIN).unwrap());
    let acked = acked.lock().unwrap().clone();
    assert!(acked.len() >= 500);
    check_acked(&storage, &acked).await;
    // The log goes on after the repair.
    let (log, tasks) = Log::open(storage, None, config(64)).await.unwrap();
    log.add(Bytes::from("after the repair")).await.unwrap();
    log.shutdown();
    tasks.join().await;
}

/// A directory the log writes to stops accepting files mid-run (`chattr +i`, which
/// binds root too): adds are refused with 503 at once, and once the directory is
/// writable again the log goes on without a restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_directory_refusing_writes_mid_run_pushes_back_then_recovers() {
    let fs = SmallFs::mount(32);
    let root = fs.path().join("log");
    let storage = Arc::new(open(&root, ORIGIN).unwrap());
    let mut cfg = config(64);
    cfg.commit_retry = Duration::from_secs(60);
    let (log, tasks) = Log::open(storage.clone(), None, cfg).await.unwrap();
    let mut acked = std::collections::HashMap::new();
    let add_wave = |wave: u32| {
        let log = log.clone();
        async move {
            let adds: Vec<_> = (0..256u32)
                .map(|j| {
                    let log = log.clone();
                    let e = Bytes::from(format!("wave {wave} entry {j}"));
                    tokio::spawn(async move { (e.clone(), log.add(e).await) })
                })
                .collect();
            let mut out = Vec::new();
            for a in adds {
                out.push(a.await.unwrap());
            }
            out
        }
    };
    for (e, r) in add_wave(0).await {
        acked.insert(r.unwrap().index, e);
    }
    // Full bundles are staged under .tlogd/staged/tile/entries before they commit.
    let staged = root.join(".tlogd/staged/tile/entries");
    let chattr = |flag: &str| {
        let out = std::process::Command::new("chattr")
            .arg(flag)
            .arg(&staged)
            .output()
            .expect("chattr (e2fsprogs)");
        assert!(
            out.status.success(),
            "chattr {flag}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    chattr("+i");
    let mut refused = 0;
    for (e, r) in add_wave(1).await {
        match r {
            Ok(out) => {
                acked.insert(out.index, e);
            }
            Err(tlogd_core::engine::AddError::WritesRefused) => refused += 1,
            Err(e) => panic!("a directory refusing writes must push back, not: {e}"),
        }
    }
    assert!(refused > 0, "the batch completing a bundle was not refused");
    chattr("-i");
    for (e, r) in add_wave(2).await {
        acked.insert(r.expect("recovered without restart").index, e);
    }
    log.shutdown();
    tasks.join().await;
    check_acked(&storage, &acked).await;
}

#[tokio::test(flavor = "current_thread")]
// The guard stands for a publisher busy writing while commits go on: held across the
// adds on purpose (commits only ever `try_lock` it, so nothing waits on it).
#[allow(clippy::await_holding_lock)]
async fn partial_directories_are_kept_while_a_checkpoint_is_being_written() {
    // A commit deletes the partial directories of tiles completed one commit earlier.
    // If the publisher is writing the partials of an older size at that moment, the
    // directory it writes into must stay: under load a publish failed that way now and
    // then ("writing tile/entries/947.p/255: No such file or directory"), and that
    // checkpoint came a whole interval late.
    let dir = tempfile::tempdir().unwrap();
    let storage = Arc::new(open(dir.path(), ORIGIN).unwrap());
    let mut cfg = config(8);
    cfg.checkpoint_interval = Duration::from_secs(3600);
    let (log, tasks) = Log::open(storage.clone(), None, cfg).await.unwrap();
    let batch = |from: u64, n: u64| -> Vec<Bytes> {
        (from..from + n)
            .map(|i| Bytes::from(format!("g{i}")))
            .collect()
    };
    add_in_order(&log, batch(0, 248), 0).await;
    // A checkpoint at 248 writes tile/0/000.p/248 and tile/entries/000.p/248.
    let signer = NoteSigner::from_skey(SKEY).unwrap();
    let cp = |size| {
        tlogd_core::checkpoint::Checkpoint {
            origin: ORIGIN.to_string(),
            size,
            // The storage reads only the size; the engine's final checkpoint
            // replaces this one.
            root: [0; 32],
            extensions: Vec::new(),
        }
        .sign(&signer)
        .unwrap()
    };
    storage.publish_checkpoint(&cp(248)).await.unwrap();
    let partial = dir.path().join("tile/entries/000.p");
    assert!(partial.join("248").exists());
    {
        let _publishing = storage.hold_publishing();
        // Commit k completes tile 0 (248..256); commit k+1 (256..264) would collect
        // its partial directories.
        add_in_order(&log, batch(248, 16), 248).await;
        assert!(
            partial.exists(),
            "a partial directory was deleted while the publisher was writing"
        );
    }
    // Once a flush has made tile 0 public (the publisher flushes; so does a
    // background thread, at its own pace), the next commit collects them.
    storage.publish_checkpoint(&cp(264)).await.unwrap();
    add_in_order(&log, batch(264, 8), 264).await;
    assert!(!partial.exists());
    assert!(!dir.path().join("tile/0/000.p").exists());
    log.shutdown();
    tasks.join().await;
    let verifier = signer.verifier();
    assert_eq!(
        check_log(&*storage, ORIGIN, &verifier, None)
            .await
            .unwrap()
            .checkpoint_size,
        272
    );
}
