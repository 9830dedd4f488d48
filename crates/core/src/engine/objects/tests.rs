//! The object-store protocol over the in-memory store: faults at every step, two
//! frontends racing, and a record of every write to prove invariant 1 (a public key
//! only ever holds its final bytes).

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;

use super::memory::{MemoryObjects, ObjectFault, ObjectOp};
use super::*;
use crate::engine::checker::check_log;
use crate::engine::{AddError, Log, LogConfig};
use crate::note::NoteSigner;

use crate::conformance::{ORIGIN, SKEY};

fn config() -> LogConfig {
    let signer = Arc::new(NoteSigner::from_skey(SKEY).expect("test key"));
    let mut c = LogConfig::new(ORIGIN, signer);
    c.checkpoint_interval = Duration::from_millis(5);
    c.batch_max_entries = 64;
    c.commit_retry = Duration::from_secs(5);
    c
}

fn options() -> ObjectLogOptions {
    ObjectLogOptions {
        write_concurrency: 8,
        hedge_after: Duration::from_millis(50),
        write_retry: Duration::from_secs(2),
        // After every commit: sweeps race every other step of the protocol here.
        sweep_interval: Duration::ZERO,
        turn: Duration::from_millis(20),
    }
}

async fn open(store: &MemoryObjects) -> Arc<ObjectLog<MemoryObjects>> {
    Arc::new(
        ObjectLog::open(store.clone(), ORIGIN, options())
            .await
            .expect("open"),
    )
}

fn entry(frontend: u32, i: u64) -> Bytes {
    Bytes::from(format!("frontend {frontend} entry {i}"))
}

/// The whole-log check, plus: every acknowledged add holds exactly its entry, and no
/// entry appears twice.
async fn check_all(store: &MemoryObjects, acked: &HashMap<u64, Bytes>) -> u64 {
    let log = open(store).await;
    let verifier = config().verifier();
    let mut seen: HashMap<Vec<u8>, u64> = HashMap::new();
    let mut visit = |i: u64, e: &[u8]| {
        if let Some(first) = seen.insert(e.to_vec(), i) {
            panic!(
                "entry {:?} logged twice, at {first} and {i}",
                String::from_utf8_lossy(e)
            );
        }
    };
    let report = check_log(&*log, ORIGIN, &verifier, Some(&mut visit))
        .await
        .expect("the log checks out");
    for (index, bytes) in acked {
        assert_eq!(
            seen.get(bytes.as_ref()),
            Some(index),
            "acknowledged entry {:?} is not at its index {index}",
            String::from_utf8_lossy(bytes)
        );
    }
    report.state.size
}

/// Invariant 1: every write to a public key carried the bytes the key holds at the end
/// (or, for a partial tile deleted once full, the prefix of the full tile), and the
/// checkpoint only ever grew.
fn check_public_writes(store: &MemoryObjects) {
    let mut checkpoint_sizes = Vec::new();
    for w in store.writes() {
        if w.key == CHECKPOINT_KEY {
            checkpoint_sizes.push(checkpoint::signed_size(&w.bytes).expect("size line"));
            continue;
        }
        if w.key.starts_with(".tlogd/") {
            continue;
        }
        let id = TileId::parse(&w.key).expect("public keys are tile paths");
        match store.peek(&w.key) {
            Some(now) => assert_eq!(now, w.bytes, "{} was written with other bytes", w.key),
            None => {
                assert!(!id.is_full(), "full tile {} vanished", w.key);
                let full = store
                    .peek(&id.full().path())
                    .unwrap_or_else(|| panic!("{} deleted before its full tile", w.key));
                assert!(
                    full.starts_with(&w.bytes),
                    "{} is not a prefix of its full tile",
                    w.key
                );
            }
        }
    }
    assert!(
        checkpoint_sizes.windows(2).all(|w| w[0] <= w[1]),
        "the checkpoint went backwards: {checkpoint_sizes:?}"
    );
}

#[tokio::test]
async fn refuses_a_store_that_ignores_conditions() {
    let store = MemoryObjects::new();
    store.set_ignore_conditions(true);
    let err = ObjectLog::open(store, ORIGIN, options()).await.err();
    assert!(
        matches!(err, Some(ObjectOpenError::NoConditionalWrites(_))),
        "{err:?}"
    );
}

#[tokio::test]
async fn refuses_another_log() {
    let store = MemoryObjects::new();
    let (log, tasks) = Log::open(open(&store).await, None, config()).await.unwrap();
    log.add(entry(0, 0)).await.unwrap();
    log.shutdown();
    tasks.join().await;
    let err = ObjectLog::open(store, "example.com/other", options())
        .await
        .err();
    assert!(
        matches!(&err, Some(ObjectOpenError::OriginMismatch { found, .. }) if found == ORIGIN),
        "{err:?}"
    );
}

#[tokio::test]
async fn a_stale_commit_conflicts_and_changes_nothing() {
    let store = MemoryObjects::new();
    let a = open(&store).await;
    let b = open(&store).await;
    let (log, tasks) = Log::open(a.clone(), None, config()).await.unwrap();
    log.add(entry(0, 0)).await.unwrap();
    log.shutdown();
    tasks.join().await;
    let before = store.keys();
    // `b` read the empty store at open: its commit is built on a stale state.
    let batch = CommitBatch {
        prev: TreeState::empty(),
        next: TreeState::new(1, crate::hash::leaf_hash(b"other")),
        tiles: vec![(TileId::entries(0, 1), b"\x00\x05other".to_vec())],
    };
    let err = b.commit(batch).await.err();
    assert!(
        matches!(
            err,
            Some(StorageError::Conflict {
                expected: 0,
                found: 1
            })
        ),
        "{err:?}"
    );
    let public: Vec<_> = store
        .keys()
        .into_iter()
        .filter(|k| !k.starts_with(".tlogd/"))
        .collect();
    let public_before: Vec<_> = before
        .into_iter()
        .filter(|k| !k.starts_with(".tlogd/"))
        .collect();
    assert_eq!(public, public_before, "a losing commit touched public keys");
    check_public_writes(&store);
}

/// Crash between the commit point and the upload of the tiles: the next frontend to
/// open the store finishes the batch before integrating on top.
#[tokio::test]
async fn a_committed_but_unapplied_batch_is_finished_by_the_next_opener() {
    let store = MemoryObjects::new();
    let (log, tasks) = Log::open(open(&store).await, None, config()).await.unwrap();
    for i in 0..300 {
        log.add(entry(0, i)).await.unwrap();
    }
    log.shutdown();
    tasks.join().await;
    // The next commit reaches its commit point, then every tile upload fails for
    // longer than the write retry ("the process died"). The entry is durable at the
    // commit point, so it is acknowledged; the upload runs after.
    let mut cfg = config();
    cfg.commit_retry = Duration::ZERO;
    let (log, tasks) = Log::open(open(&store).await, None, cfg).await.unwrap();
    store.inject(
        ObjectOp::Put,
        "tile/",
        ObjectFault::FailBeforePersist,
        usize::MAX,
    );
    assert_eq!(log.add(entry(0, 300)).await.map(|o| o.index), Ok(300));
    // The commit after it waits for that upload, which fails: nothing more is
    // committed on top of a tree whose tiles are not all public, and the checkpoint
    // never covers 301.
    assert!(log.add(entry(0, 301)).await.is_err());
    assert!(
        store
            .peek(CHECKPOINT_KEY)
            .and_then(|c| checkpoint::signed_size(&c))
            .unwrap_or(0)
            <= 300,
        "a checkpoint covers tiles that are not public"
    );
    log.shutdown();
    tasks.join().await;
    store.clear_faults();
    // The state names size 301, but its tiles are not all public.
    assert!(store.peek(&TileId::entries(1, 45).path()).is_none());
    let reopened = open(&store).await;
    assert_eq!(
        reopened.load_state().await.unwrap().map(|s| s.size),
        Some(301)
    );
    assert!(store.peek(&TileId::entries(1, 45).path()).is_some());
    let acked = (0..301).map(|i| (i, entry(0, i))).collect();
    assert_eq!(check_all(&store, &acked).await, 301);
    check_public_writes(&store);
}

/// A read of a just-committed entry whose first read of the tile is answered after the
/// tile's upload landed (it read before): the read must wait for the upload it saw
/// pending and read again, not report the committed tile missing. (Found on the GCS
/// emulator: the check came after the read, saw the upload done, and answered
/// "missing tile/entries/001.p/45".)
#[tokio::test]
async fn a_tile_read_while_its_upload_lands_is_read_again() {
    let store = MemoryObjects::new();
    let (log, tasks) = Log::open(open(&store).await, None, config()).await.unwrap();
    for i in 0..300 {
        log.add(entry(0, i)).await.unwrap();
    }
    // Batch 301's tiles upload slowly; the first read of its partial bundle reads at
    // once (before the upload) and answers after the upload.
    let bundle = TileId::entries(1, 45).path();
    store.inject(
        ObjectOp::Put,
        &bundle,
        ObjectFault::Delay(Duration::from_millis(100)),
        1,
    );
    store.inject(
        ObjectOp::Get,
        &bundle,
        ObjectFault::AnswerLate(Duration::from_millis(300)),
        1,
    );
    assert_eq!(log.add(entry(0, 300)).await.map(|o| o.index), Ok(300));
    let read = log.read_entry(257).await.expect("read").expect("entry 257");
    assert_eq!(read.bytes, entry(0, 257).to_vec());
    log.shutdown();
    tasks.join().await;
}

/// Two frontends stage the same batch on the same tree (the same entry sent to both):
/// identical bytes. The loser's clean-up must not delete the staged object the winner's
/// state names, or no frontend could read the state again. The loser's read of the
/// staged object is delayed so that its clean-up runs first.
#[tokio::test]
async fn a_lost_race_with_an_identical_batch_deletes_nothing_the_state_names() {
    let store = MemoryObjects::new();
    let (a, a_tasks) = Log::open(open(&store).await, None, config()).await.unwrap();
    let (b, b_tasks) = Log::open(open(&store).await, None, config()).await.unwrap();
    let same = Bytes::from_static(b"the same entry");
    assert_eq!(a.add(same.clone()).await.map(|o| o.index), Ok(0));
    store.inject(
        ObjectOp::Get,
        STAGED_PREFIX,
        ObjectFault::Delay(Duration::from_millis(300)),
        1,
    );
    // B's tree is still empty: it stages the identical batch, loses the swap, reloads
    // (finishing A's batch from A's staged object) and logs the entry again at 1.
    assert_eq!(b.add(same.clone()).await.map(|o| o.index), Ok(1));
    for (log, tasks) in [(a, a_tasks), (b, b_tasks)] {
        log.shutdown();
        tasks.join().await;
    }
    let fresh = open(&store).await;
    assert_eq!(fresh.load_state().await.unwrap().map(|s| s.size), Some(2));
    let verifier = config().verifier();
    let report = check_log(&*fresh, ORIGIN, &verifier, None)
        .await
        .expect("the log checks out");
    assert_eq!(report.state.size, 2);
}

/// A compare-and-swap that persisted but whose answer was lost, and whose read-back
/// fails for a while: the batch is acknowledged once, never appended twice.
#[tokio::test]
async fn a_lost_commit_answer_is_resolved_by_reading_the_state() {
    let store = MemoryObjects::new();
    let (log, tasks) = Log::open(open(&store).await, None, config()).await.unwrap();
    log.add(entry(0, 0)).await.unwrap();
    store.inject(ObjectOp::PutIf, STATE_KEY, ObjectFault::FailAfterPersist, 1);
    store.inject(ObjectOp::Get, STATE_KEY, ObjectFault::FailBeforePersist, 5);
    let out = log.add(entry(0, 1)).await.expect("acknowledged");
    assert_eq!(out.index, 1);
    log.add(entry(0, 2)).await.unwrap();
    log.shutdown();
    tasks.join().await;
    let acked = (0..3).map(|i| (i, entry(0, i))).collect();
    assert_eq!(check_all(&store, &acked).await, 3);
}

/// The same, but the store stays unreadable past the commit-retry time: the add is
/// answered "uncertain" (not "failed"), no batch commits until the outcome is known
/// (those behind it are answered "uncertain" too), and the batch that did persist is in
/// the log exactly once.
#[tokio::test]
async fn an_unknown_outcome_blocks_commits_until_resolved() {
    let store = MemoryObjects::new();
    let mut cfg = config();
    cfg.commit_retry = Duration::from_millis(200);
    let (log, tasks) = Log::open(open(&store).await, None, cfg).await.unwrap();
    log.add(entry(0, 0)).await.unwrap();
    store.inject(
        ObjectOp::PutIf,
        STATE_KEY,
        ObjectFault::PersistThenPartition,
        1,
    );
    assert_eq!(log.add(entry(0, 1)).await, Err(AddError::Uncertain));
    assert!(!log.is_ready());
    // Still unreadable: the next batch is not attempted (it could land on top of a
    // batch the engine does not know about), and while an outcome is open no answer
    // says "not logged" (#57): 503, resubmit.
    let r = log.add(entry(0, 2)).await;
    assert_eq!(r, Err(AddError::Uncertain));
    store.set_unavailable(false);
    let out = log.add(entry(0, 3)).await.expect("storage is back");
    assert_eq!(out.index, 2, "entry 1 did persist, entry 2 did not");
    assert!(log.is_ready());
    log.shutdown();
    tasks.join().await;
    let acked = [(0, entry(0, 0)), (1, entry(0, 1)), (2, entry(0, 3))].into();
    assert_eq!(check_all(&store, &acked).await, 3);
}

/// Add `e` to `log` in the background, its swap of the state landing but its answer
/// held (until [`MemoryObjects::release_held`], then an error): returns once the swap
/// has landed.
async fn add_with_the_swap_answer_held(
    store: &MemoryObjects,
    log: &Log<ObjectLog<MemoryObjects>>,
    e: Bytes,
) -> tokio::task::JoinHandle<Result<crate::engine::AddOutcome, AddError>> {
    store.inject(ObjectOp::PutIf, STATE_KEY, ObjectFault::PersistThenHold, 1);
    let add = tokio::spawn({
        let log = log.clone();
        async move { log.add(e).await }
    });
    store.wait_held(1).await;
    add
}

/// Frontend A's swap of the state lands but its answer is lost, and before A reads the
/// record back, frontend B loses its own swap (412), reloads (finishing A's batch) and
/// commits on top. A must find its batch in the tree and acknowledge it. (It called the
/// record it read a conflict and appended the batch again: logged twice.)
#[tokio::test]
async fn a_landed_swap_whose_answer_was_lost_under_another_commit_is_logged_once() {
    let store = MemoryObjects::new();
    let (a, a_tasks) = Log::open(open(&store).await, None, config()).await.unwrap();
    let (b, b_tasks) = Log::open(open(&store).await, None, config()).await.unwrap();
    assert_eq!(a.add(entry(0, 0)).await.map(|o| o.index), Ok(0));
    let lost = add_with_the_swap_answer_held(&store, &a, entry(0, 1)).await;
    assert_eq!(b.add(entry(1, 0)).await.map(|o| o.index), Ok(2));
    store.release_held();
    assert_eq!(lost.await.unwrap().map(|o| o.index), Ok(1));
    for (log, tasks) in [(a, a_tasks), (b, b_tasks)] {
        log.shutdown();
        tasks.join().await;
    }
    let acked = [(0, entry(0, 0)), (1, entry(0, 1)), (2, entry(1, 0))].into();
    assert_eq!(check_all(&store, &acked).await, 3);
    check_public_writes(&store);
}

/// The same loss, and meanwhile a third frontend fenced the record A's swap wrote
/// (rewrote it with a fence line after a swap of its own lost its answer): A must know
/// its batch by the staged key the record names. (It called it a conflict and deleted
/// that staged object: every frontend that had not applied it, and every new open,
/// failed with "the committed state names the staged batch ..., which is missing".)
#[tokio::test]
async fn a_landed_swap_fenced_by_another_frontend_is_still_ours() {
    let store = MemoryObjects::new();
    let (a, a_tasks) = Log::open(open(&store).await, None, config()).await.unwrap();
    assert_eq!(a.add(entry(0, 0)).await.map(|o| o.index), Ok(0));
    let lost = add_with_the_swap_answer_held(&store, &a, entry(0, 1)).await;
    let (bytes, version) = store.get_versioned(STATE_KEY).await.unwrap().unwrap();
    let fenced = StateRecord {
        fence: Some(7),
        ..StateRecord::decode(&bytes).unwrap()
    };
    assert_eq!(fenced.state.size, 2);
    let written = store
        .put_if(
            STATE_KEY,
            fenced.encode(),
            ObjectClass::Private,
            PutCondition::Matches(version),
        )
        .await
        .unwrap();
    assert!(matches!(written, PutOutcome::Written(_)));
    store.release_held();
    assert_eq!(lost.await.unwrap().map(|o| o.index), Ok(1));
    // A frontend opening now reads the record and its staged batch.
    let (c, c_tasks) = Log::open(open(&store).await, None, config()).await.unwrap();
    assert_eq!(c.add(entry(2, 0)).await.map(|o| o.index), Ok(2));
    for (log, tasks) in [(a, a_tasks), (c, c_tasks)] {
        log.shutdown();
        tasks.join().await;
    }
    let acked = [(0, entry(0, 0)), (1, entry(0, 1)), (2, entry(2, 0))].into();
    assert_eq!(check_all(&store, &acked).await, 3);
}

/// Records the size of every checkpoint it is asked to cosign, and cosigns nothing.
#[derive(Default)]
struct CountingCosigner(std::sync::Mutex<Vec<u64>>);

impl crate::engine::CheckpointCosigner for CountingCosigner {
    fn cosign<'a>(
        &'a self,
        checkpoint: &'a checkpoint::Checkpoint,
        signed: &'a [u8],
        _: &'a dyn crate::engine::ConsistencyProver,
    ) -> crate::engine::BoxFuture<'a, Result<Vec<u8>, String>> {
        self.0.lock().unwrap().push(checkpoint.size);
        Box::pin(async move { Ok(signed.to_vec()) })
    }
}

/// An idle frontend whose tree another frontend has grown and published past: it must
/// not republish (sign, and ask witnesses to cosign) its stale size every republish
/// interval. (It did, and counted each as published.)
#[tokio::test]
async fn an_idle_frontend_does_not_republish_a_stale_checkpoint() {
    let store = MemoryObjects::new();
    let cosigner = Arc::new(CountingCosigner::default());
    let mut idle_cfg = config();
    idle_cfg.republish_interval = Duration::from_millis(20);
    idle_cfg.cosigner = Some(cosigner.clone());
    let (idle, idle_tasks) = Log::open(open(&store).await, None, idle_cfg).await.unwrap();
    assert_eq!(idle.add(entry(0, 0)).await.map(|o| o.index), Ok(0));
    while idle.published_size() != Some(1) {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let (busy, busy_tasks) = Log::open(open(&store).await, None, config()).await.unwrap();
    for i in 0..5 {
        busy.add(entry(1, i)).await.unwrap();
    }
    busy.shutdown();
    busy_tasks.join().await;
    let published = checkpoint::signed_size(&store.peek(CHECKPOINT_KEY).unwrap());
    assert_eq!(published, Some(6));
    let asked_before = cosigner.0.lock().unwrap().len();
    // Several republish intervals of the idle frontend.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let asked: Vec<u64> = cosigner.0.lock().unwrap()[asked_before..].to_vec();
    assert!(asked.is_empty(), "asked to cosign stale sizes {asked:?}");
    idle.shutdown();
    idle_tasks.join().await;
    assert_eq!(
        checkpoint::signed_size(&store.peek(CHECKPOINT_KEY).unwrap()),
        Some(6)
    );
}

/// A swap whose connection broke before it reached the store, and that arrives after
/// the state was read back: the read-back fences the state, so the late swap fails its
/// condition, and the add answered "not logged" is indeed not logged. (Unfenced, the
/// late swap landed: the entry answered 500 was at index 1, and the next add got 2.)
#[tokio::test]
async fn a_swap_still_on_its_way_when_read_back_is_fenced_off() {
    // After a first entry, and as the very first swap (there the fence creates the
    // empty tree's record).
    for before in [1u64, 0] {
        let store = MemoryObjects::new();
        let mut cfg = config();
        cfg.commit_retry = Duration::ZERO;
        let (log, tasks) = Log::open(open(&store).await, None, cfg).await.unwrap();
        for i in 0..before {
            log.add(entry(0, i)).await.unwrap();
        }
        let late = Duration::from_millis(200);
        store.inject(
            ObjectOp::PutIf,
            STATE_KEY,
            ObjectFault::PersistLate(late),
            1,
        );
        let r = log.add(entry(0, before)).await;
        assert!(matches!(r, Err(AddError::Storage(_))), "{r:?}");
        tokio::time::sleep(late * 2).await;
        let next = log.add(entry(0, before + 1)).await.map(|o| o.index);
        assert_eq!(next, Ok(before));
        log.shutdown();
        tasks.join().await;
        let acked: HashMap<u64, Bytes> = (0..before)
            .map(|i| (i, entry(0, i)))
            .chain([(before, entry(0, before + 1))])
            .collect();
        assert_eq!(check_all(&store, &acked).await, before + 1);
    }
}

/// A swap whose answer was lost, read back to find the state record gone while the
/// tree had entries (deleted behind the log's back): the commit fails as corrupt and
/// the record stays absent. The fence must not stand the record up again from this
/// process's memory of `prev` (it did, before the check: the record was back at size 1).
#[tokio::test]
async fn a_lost_swap_that_finds_the_record_deleted_does_not_recreate_it() {
    let store = MemoryObjects::new();
    let mut cfg = config();
    cfg.commit_retry = Duration::ZERO;
    let (log, tasks) = Log::open(open(&store).await, None, cfg).await.unwrap();
    log.add(entry(0, 0)).await.unwrap();
    store.delete(STATE_KEY).await.unwrap();
    store.inject(
        ObjectOp::PutIf,
        STATE_KEY,
        ObjectFault::FailBeforePersist,
        1,
    );
    let r = log.add(entry(0, 1)).await;
    assert!(matches!(r, Err(AddError::Storage(_))), "{r:?}");
    assert!(store.get_versioned(STATE_KEY).await.unwrap().is_none());
    log.shutdown();
    tasks.join().await;
    assert!(store.get_versioned(STATE_KEY).await.unwrap().is_none());
}

/// Two frontends on one store, faults injected at every step of the protocol (before
/// and after persisting, on every kind of key, slow writes that get hedged): every
/// acknowledged entry is logged exactly once at its index, the tree verifies, and no
/// public key was ever written with bytes other than its final ones.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_frontends_racing_with_faults_at_every_step() {
    let store = MemoryObjects::new();
    let frontends = [open(&store).await, open(&store).await];
    let mut logs = Vec::new();
    for (i, storage) in frontends.iter().enumerate() {
        let mut cfg = config();
        cfg.batch_max_entries = 16 + 8 * i;
        logs.push(Log::open(storage.clone(), None, cfg).await.unwrap());
    }
    let faults = [
        (ObjectOp::Put, STAGED_PREFIX, ObjectFault::FailBeforePersist),
        (ObjectOp::Put, STAGED_PREFIX, ObjectFault::FailAfterPersist),
        (ObjectOp::PutIf, STATE_KEY, ObjectFault::FailBeforePersist),
        (ObjectOp::PutIf, STATE_KEY, ObjectFault::FailAfterPersist),
        (
            ObjectOp::PutIf,
            STATE_KEY,
            ObjectFault::PersistLate(Duration::from_millis(30)),
        ),
        (ObjectOp::Put, "tile/0/", ObjectFault::FailBeforePersist),
        (
            ObjectOp::Put,
            "tile/entries/",
            ObjectFault::FailAfterPersist,
        ),
        (
            ObjectOp::Put,
            "tile/",
            ObjectFault::Delay(Duration::from_millis(80)),
        ),
        (ObjectOp::Get, STATE_KEY, ObjectFault::FailBeforePersist),
        (ObjectOp::Get, STAGED_PREFIX, ObjectFault::FailBeforePersist),
        (ObjectOp::Get, "tile/", ObjectFault::FailBeforePersist),
        (
            ObjectOp::PutIf,
            CHECKPOINT_KEY,
            ObjectFault::FailAfterPersist,
        ),
        (
            ObjectOp::PutIf,
            CHECKPOINT_KEY,
            ObjectFault::PersistLate(Duration::from_millis(30)),
        ),
        (ObjectOp::Delete, "", ObjectFault::FailBeforePersist),
        (ObjectOp::List, "", ObjectFault::FailBeforePersist),
    ];
    let injector = {
        let store = store.clone();
        tokio::spawn(async move {
            for round in 0..6 {
                for (op, prefix, fault) in faults {
                    store.inject(op, prefix, fault, 1 + round % 2);
                    tokio::time::sleep(Duration::from_millis(7)).await;
                }
            }
        })
    };
    let mut writers = Vec::new();
    for (f, (log, _)) in logs.iter().enumerate() {
        for w in 0..8u64 {
            let log = log.clone();
            writers.push(tokio::spawn(async move {
                let mut acked = Vec::new();
                for i in 0..60u64 {
                    let e = entry(f as u32, w * 1000 + i);
                    match log.add(e.clone()).await {
                        Ok(out) => acked.push((out.index, e)),
                        Err(AddError::Storage(_)) | Err(AddError::Uncertain) => {}
                        Err(e) => panic!("unexpected add error: {e}"),
                    }
                }
                acked
            }));
        }
    }
    let mut acked = HashMap::new();
    for w in writers {
        for (index, e) in w.await.unwrap() {
            assert!(
                acked.insert(index, e).is_none(),
                "index {index} given twice"
            );
        }
    }
    injector.await.unwrap();
    store.clear_faults();
    for (log, tasks) in logs {
        log.shutdown();
        tasks.join().await;
    }
    assert!(
        acked.len() > 500,
        "only {} of 960 adds acknowledged",
        acked.len()
    );
    let size = check_all(&store, &acked).await;
    assert!(size >= acked.len() as u64);
    check_public_writes(&store);
    // Staged batches are cleaned up, except the one the state names (deletes were
    // faulted sometimes, so allow a few orphans).
    let staged = |store: &MemoryObjects| -> HashSet<String> {
        store
            .keys()
            .into_iter()
            .filter(|k| k.starts_with(STAGED_PREFIX))
            .collect()
    };
    assert!(
        staged(&store).len() < 20,
        "{} staged batches left",
        staged(&store).len()
    );
    // The next opener sweeps what is left, except what the state names; the log is
    // still whole.
    let reopened = open(&store).await;
    let named = reopened
        .known()
        .record
        .as_ref()
        .and_then(|r| r.staged.clone());
    assert_eq!(staged(&store), named.into_iter().collect::<HashSet<_>>());
    assert_eq!(check_all(&store, &acked).await, size);
}

/// Two busy frontends on one store, every request taking a millisecond: how many
/// staged batches each committed state cost (1.0: no race lost), how many lease
/// handovers there were, and each frontend's acknowledged adds.
async fn two_busy_frontends(turn: Duration) -> (f64, usize, [usize; 2]) {
    let store = MemoryObjects::new();
    for op in [ObjectOp::Get, ObjectOp::Put, ObjectOp::PutIf] {
        store.inject(
            op,
            "",
            ObjectFault::Delay(Duration::from_millis(1)),
            usize::MAX,
        );
    }
    let mut logs = Vec::new();
    for _ in 0..2 {
        let storage = ObjectLog::open(
            store.clone(),
            ORIGIN,
            ObjectLogOptions { turn, ..options() },
        )
        .await
        .expect("open");
        logs.push(Log::open(Arc::new(storage), None, config()).await.unwrap());
    }
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut writers = Vec::new();
    for (f, (log, _)) in logs.iter().enumerate() {
        for w in 0..16u64 {
            let (log, stop) = (log.clone(), stop.clone());
            writers.push(tokio::spawn(async move {
                let mut acked = Vec::new();
                let mut i = 0;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    let e = entry(f as u32, w * 1_000_000 + i);
                    i += 1;
                    if let Ok(out) = log.add(e.clone()).await {
                        acked.push((f, out.index, e));
                    }
                }
                acked
            }));
        }
    }
    tokio::time::sleep(Duration::from_millis(1500)).await;
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let mut acked = HashMap::new();
    let mut per_frontend = [0; 2];
    for w in writers {
        for (f, index, e) in w.await.unwrap() {
            per_frontend[f] += 1;
            assert!(
                acked.insert(index, e).is_none(),
                "index {index} given twice"
            );
        }
    }
    for (log, tasks) in logs {
        log.shutdown();
        tasks.join().await;
    }
    store.clear_faults();
    check_all(&store, &acked).await;
    check_public_writes(&store);
    let writes = store.writes();
    let count = |f: &dyn Fn(&str) -> bool| writes.iter().filter(|w| f(&w.key)).count();
    let staged = count(&|k| k.starts_with(STAGED_PREFIX));
    let states = count(&|k| k == STATE_KEY);
    let handovers = writes
        .iter()
        .filter(|w| w.key == SEQUENCER_KEY && w.bytes.starts_with(b"tlogd-sequencer v1\n-\n"))
        .count();
    (
        staged as f64 / states.max(1) as f64,
        handovers,
        per_frontend,
    )
}

/// Two frontends both taking adds take turns through the lease: nearly every staged
/// batch commits (a lost race stages a batch for nothing, and uploads the winner's
/// again), the lease changes hands, and both frontends' adds are answered. Without
/// turns, the same load loses races all along.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn busy_frontends_take_turns_instead_of_racing() {
    let (racing, _, _) = two_busy_frontends(Duration::ZERO).await;
    let (turns, handovers, per_frontend) = two_busy_frontends(Duration::from_millis(20)).await;
    eprintln!(
        "staged batches per commit: {racing:.2} racing, {turns:.2} taking turns \
         ({handovers} handovers, adds per frontend {per_frontend:?})"
    );
    assert!(handovers >= 5, "only {handovers} handovers");
    assert!(
        per_frontend.iter().all(|&n| n >= 200),
        "a frontend was starved: {per_frontend:?}"
    );
    assert!(
        turns < 1.1,
        "{turns:.2} staged batches per commit while taking turns"
    );
    assert!(
        racing > turns,
        "racing ({racing:.2}) lost no more races than taking turns ({turns:.2})"
    );
}

/// Staged batches that no state names and none can (a crash between staging and the
/// swap, a delete that failed) are deleted when a frontend opens the store; the one
/// the state names, and any beyond the committed size (another frontend may be
/// committing it), are kept.
/// A blob's create-if-absent whose outcome is unknown (answer lost after it landed,
/// failed before it landed, still on its way) is settled by reading the key back; it
/// is stored with its content type as immutable, and a plain put never touches it.
#[tokio::test]
async fn a_blob_write_with_an_unknown_outcome_is_read_back() {
    let store = MemoryObjects::new();
    let log = open(&store).await;
    let ct = "application/pkix-cert";
    store.inject(ObjectOp::PutIf, "issuer/", ObjectFault::FailAfterPersist, 1);
    log.put_blob("issuer/a", b"one", ct).await.expect("landed");
    store.inject(
        ObjectOp::PutIf,
        "issuer/",
        ObjectFault::FailBeforePersist,
        2,
    );
    log.put_blob("issuer/b", b"two", ct).await.expect("retried");
    store.inject(
        ObjectOp::PutIf,
        "issuer/",
        ObjectFault::PersistLate(Duration::from_millis(30)),
        1,
    );
    log.put_blob("issuer/c", b"three", ct).await.expect("late");
    // A lost answer over other bytes is still a mismatch, not a success.
    store.inject(ObjectOp::PutIf, "issuer/", ObjectFault::FailAfterPersist, 1);
    assert!(matches!(
        log.put_blob("issuer/a", b"other", ct).await,
        Err(StorageError::Corrupt(_))
    ));
    assert_eq!(store.peek("issuer/a"), Some(Bytes::from("one")));
    for (key, bytes) in [
        ("issuer/a", "one"),
        ("issuer/b", "two"),
        ("issuer/c", "three"),
    ] {
        assert_eq!(
            log.read_blob(key).await.unwrap().as_deref(),
            Some(bytes.as_bytes())
        );
    }
    let blob_writes: Vec<_> = store
        .writes()
        .into_iter()
        .filter(|w| w.key.starts_with("issuer/"))
        .collect();
    assert_eq!(blob_writes.len(), 3, "each blob written once");
    for w in blob_writes {
        assert_eq!(w.class, ObjectClass::Blob { content_type: ct });
        assert_eq!(w.class.content_type(), ct);
        assert_eq!(w.class.cache_control(), "max-age=31536000, immutable");
    }
    // The store down for longer than the retry window: an error, not a hang.
    store.set_unavailable(true);
    assert!(log.put_blob("issuer/d", b"four", ct).await.is_err());
    store.set_unavailable(false);
    assert_eq!(log.read_blob("issuer/d").await.unwrap(), None);
}

#[tokio::test]
async fn an_opener_sweeps_orphaned_staged_batches() {
    let store = MemoryObjects::new();
    let (log, tasks) = Log::open(open(&store).await, None, config()).await.unwrap();
    for i in 0..100 {
        log.add(entry(0, i)).await.unwrap();
    }
    log.shutdown();
    tasks.join().await;
    let record = open(&store).await.known().record.clone().unwrap();
    let named = record.staged.clone().unwrap();
    assert_eq!(record.state.size, 100);
    let orphan = |size: u64, tag: &str| format!("{STAGED_PREFIX}{size:020}-{tag}-0000000000000000");
    let swept = [orphan(1, "a"), orphan(100, "b")];
    let kept = [orphan(101, "c"), format!("{STAGED_PREFIX}not-a-batch")];
    for key in swept.iter().chain(&kept) {
        store
            .put(key, Bytes::from_static(b"junk"), ObjectClass::Private)
            .await
            .unwrap();
    }
    let reopened = open(&store).await;
    let left: HashSet<String> = store
        .keys()
        .into_iter()
        .filter(|k| k.starts_with(STAGED_PREFIX))
        .collect();
    let expected: HashSet<String> = kept.iter().cloned().chain([named]).collect();
    assert_eq!(left, expected);
    assert_eq!(
        reopened.load_state().await.unwrap().map(|s| s.size),
        Some(100)
    );
    let acked = (0..100).map(|i| (i, entry(0, i))).collect();
    assert_eq!(check_all(&store, &acked).await, 100);
}

/// In-memory object stores by name, for the conformance suite.
#[derive(Default)]
struct MemoryStores(std::sync::Mutex<HashMap<String, MemoryObjects>>);

impl crate::conformance::ConformanceStore for MemoryStores {
    type Storage = ObjectLog<MemoryObjects>;

    async fn fresh(&self, name: &str) -> String {
        let mut stores = self.0.lock().unwrap();
        let location = format!("{name}-{}", stores.len());
        stores.insert(location.clone(), MemoryObjects::new());
        location
    }

    async fn open(&self, location: &str) -> Arc<Self::Storage> {
        let store = self.0.lock().unwrap()[location].clone();
        Arc::new(
            ObjectLog::open(
                store,
                crate::conformance::ORIGIN,
                ObjectLogOptions::default(),
            )
            .await
            .expect("open"),
        )
    }

    fn shared(&self) -> bool {
        true
    }
}

mod conformance {
    use super::MemoryStores;
    crate::conformance_tests!(MemoryStores, MemoryStores::default());
}
