//! Engine tests over the in-memory backend with fault injection.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use bytes::Bytes;

use super::checker::check_log;
use super::memory::{Fault, MemoryStorage};
use super::*;
use crate::hash::leaf_hash;
use crate::personality::TlogTiles;

use crate::conformance::{ORIGIN, SKEY};

fn config() -> LogConfig {
    let signer = Arc::new(NoteSigner::from_skey(SKEY).expect("test key"));
    let mut c = LogConfig::new(ORIGIN, signer);
    c.checkpoint_interval = Duration::from_millis(10);
    c
}

#[derive(Default)]
struct MapIndex {
    map: Mutex<(HashMap<EntryHash, Indexed>, u64)>,
}

impl DedupIndex for MapIndex {
    fn get(&self, hash: &EntryHash) -> Result<Option<Indexed>, DedupError> {
        Ok(self.map.lock().unwrap().0.get(hash).copied())
    }
    fn put_batch(&self, entries: &[(EntryHash, Indexed)], upto: u64) -> Result<(), DedupError> {
        let mut m = self.map.lock().unwrap();
        for (h, i) in entries {
            m.0.entry(*h).or_insert(*i);
        }
        m.1 = upto;
        Ok(())
    }
    fn indexed_up_to(&self) -> Result<u64, DedupError> {
        Ok(self.map.lock().unwrap().1)
    }
}

async fn check(storage: &MemoryStorage, cfg: &LogConfig) -> checker::LogReport {
    check_log(storage, ORIGIN, &cfg.verifier(), None)
        .await
        .expect("log checks out")
}

/// Every entry of the checked log, in index order.
async fn logged(storage: &MemoryStorage, cfg: &LogConfig) -> Vec<Vec<u8>> {
    let mut seen = Vec::new();
    let mut visit = |_: u64, e: &[u8]| seen.push(e.to_vec());
    check_log(storage, ORIGIN, &cfg.verifier(), Some(&mut visit))
        .await
        .expect("log checks out");
    seen
}

fn entry(i: u64) -> Bytes {
    Bytes::from(format!("entry {i}"))
}

/// A log of `n` entries (`entry 0` ..), written without dedup and closed.
async fn prefilled(n: u64) -> (Arc<MemoryStorage>, LogConfig) {
    let storage = Arc::new(MemoryStorage::new());
    let cfg = config();
    let (log, tasks) = Log::open(storage.clone(), None, cfg.clone()).await.unwrap();
    for i in 0..n {
        log.add(entry(i)).await.unwrap();
    }
    log.shutdown();
    tasks.join().await;
    (storage, cfg)
}

/// A stored state rolled back behind the log's back (a restored backup, a deleted
/// state): the engine refuses to commit on it, so no index is handed out twice, and
/// goes on once the state is put back. (Without the check the add got index 0 again
/// and the tree forked.)
#[tokio::test]
async fn a_state_rolled_back_behind_the_log_is_not_committed_on() {
    let storage = Arc::new(MemoryStorage::new());
    let mut cfg = config();
    cfg.commit_retry = Duration::from_millis(100);
    let (log, tasks) = Log::open(storage.clone(), None, cfg.clone()).await.unwrap();
    for i in 0..3 {
        assert_eq!(log.add(entry(i)).await.map(|o| o.index), Ok(i));
    }
    let committed = storage.load_state().await.unwrap().unwrap();
    // Conflicts first (the edge is stale), then every reload finds the rolled-back
    // state: refused until the deadline.
    storage.force_state(TreeState::empty());
    let r = log.add(entry(3)).await;
    assert!(matches!(r, Err(AddError::Storage(_))), "{r:?}");
    assert_eq!(
        storage.load_state().await.unwrap(),
        Some(TreeState::empty())
    );
    storage.force_state(committed);
    assert_eq!(log.add(entry(4)).await.map(|o| o.index), Ok(3));
    log.shutdown();
    tasks.join().await;
    assert_eq!(
        logged(&storage, &cfg).await,
        [0, 1, 2, 4].map(|i| entry(i).to_vec())
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_adds_get_contiguous_indices() {
    let storage = Arc::new(MemoryStorage::new());
    let cfg = config();
    let (log, tasks) = Log::open(storage.clone(), None, cfg.clone()).await.unwrap();
    let watch = checker::CheckpointWatch::start(storage.clone(), ORIGIN, &cfg.verifier());
    let mut handles = Vec::new();
    for i in 0..2000u64 {
        let log = log.clone();
        handles.push(tokio::spawn(async move { (i, log.add(entry(i)).await) }));
    }
    let mut seen = vec![None; 2000];
    for h in handles {
        let (i, r) = h.await.unwrap();
        let out = r.unwrap();
        assert!(!out.duplicate);
        assert!(
            seen[out.index as usize].replace(i).is_none(),
            "index reused"
        );
    }
    log.shutdown();
    tasks.join().await;
    let mut got = HashMap::new();
    let mut record = |idx: u64, e: &[u8]| {
        got.insert(idx, e.to_vec());
    };
    // Every checkpoint published on the way: its root and the partials it names.
    let observed = watch.stop().await.unwrap();
    assert!(observed.len() > 1, "{} checkpoints seen", observed.len());
    let report = checker::check_log_observed(
        &*storage,
        ORIGIN,
        &cfg.verifier(),
        &observed,
        Some(&mut record),
    )
    .await
    .unwrap();
    assert_eq!(report.state.size, 2000);
    assert_eq!(report.checkpoint_size, 2000, "final checkpoint published");
    for (idx, i) in seen.iter().enumerate() {
        let i = i.expect("every index assigned");
        assert_eq!(got[&(idx as u64)], entry(i).to_vec());
    }
}

#[tokio::test]
async fn failed_commit_that_did_not_persist_is_not_acknowledged() {
    let storage = Arc::new(MemoryStorage::new());
    let mut cfg = config();
    cfg.commit_retry = Duration::ZERO;
    let (log, tasks) = Log::open(storage.clone(), None, cfg.clone()).await.unwrap();
    assert_eq!(log.add(entry(0)).await.unwrap().index, 0);
    storage.fail_next_commit(Fault::FailAndDontPersist);
    assert!(matches!(log.add(entry(1)).await, Err(AddError::Storage(_))));
    storage.fail_next_commit(Fault::FailAfterTiles);
    assert!(matches!(log.add(entry(2)).await, Err(AddError::Storage(_))));
    // The failed entries were not logged; the next one takes index 1.
    assert_eq!(log.add(entry(3)).await.unwrap().index, 1);
    log.shutdown();
    tasks.join().await;
    assert_eq!(check(&storage, &cfg).await.state.size, 2);
}

#[tokio::test]
async fn commits_that_did_not_persist_are_retried_until_storage_is_back() {
    let storage = Arc::new(MemoryStorage::new());
    let cfg = config();
    let (log, tasks) = Log::open(storage.clone(), None, cfg.clone()).await.unwrap();
    assert_eq!(log.add(entry(0)).await.unwrap().index, 0);
    storage.fail_next_commit(Fault::FailAfterTiles);
    assert_eq!(log.add(entry(1)).await.unwrap().index, 1);
    // Storage down for a while (a database restart): the add waits, then lands.
    storage.set_unwritable(true);
    let pending = tokio::spawn({
        let log = log.clone();
        async move { log.add(entry(2)).await }
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        !pending.is_finished(),
        "the add must wait, not fail or succeed"
    );
    storage.set_unwritable(false);
    assert_eq!(pending.await.unwrap().unwrap().index, 2);
    log.shutdown();
    tasks.join().await;
    assert_eq!(check(&storage, &cfg).await.state.size, 3);
}

#[tokio::test]
async fn failed_commit_that_did_persist_is_acknowledged() {
    let storage = Arc::new(MemoryStorage::new());
    let cfg = config();
    let (log, tasks) = Log::open(storage.clone(), None, cfg.clone()).await.unwrap();
    storage.fail_next_commit(Fault::FailButPersist);
    assert_eq!(log.add(entry(0)).await.unwrap().index, 0);
    assert_eq!(log.add(entry(1)).await.unwrap().index, 1);
    log.shutdown();
    tasks.join().await;
    assert_eq!(check(&storage, &cfg).await.state.size, 2);
}

/// A commit that fails, reads back as not persisted, then lands anyway (a `COMMIT`
/// still on its way to the server when the engine read the state): the retry conflicts
/// with it, and the engine must find its own batch in the tree instead of appending it
/// again on top.
#[tokio::test]
async fn a_commit_that_lands_after_the_read_back_is_logged_once() {
    let storage = Arc::new(MemoryStorage::new());
    let cfg = config();
    let (log, tasks) = Log::open(storage.clone(), None, cfg.clone()).await.unwrap();
    assert_eq!(log.add(entry(0)).await.unwrap().index, 0);
    storage.fail_next_commit(Fault::PersistLate);
    assert_eq!(log.add(entry(1)).await.unwrap().index, 1);
    assert_eq!(log.add(entry(2)).await.unwrap().index, 2);
    log.shutdown();
    tasks.join().await;
    let want: Vec<Vec<u8>> = (0..3).map(|i| entry(i).to_vec()).collect();
    assert_eq!(
        logged(&storage, &cfg).await,
        want,
        "each entry once, at its index"
    );
}

/// A commit that may still land (its request could not be fenced off) and has not
/// when the retry time runs out: its adds are answered "uncertain" (503: resubmit), not
/// "not logged" (500), since it lands afterwards. (It was answered `Storage`, "not
/// logged", and the entry was in the log at 1.)
#[tokio::test]
async fn a_commit_that_may_still_land_at_the_deadline_is_answered_uncertain() {
    let storage = Arc::new(MemoryStorage::new());
    let mut cfg = config();
    cfg.commit_retry = Duration::ZERO;
    let (log, tasks) = Log::open(storage.clone(), None, cfg.clone()).await.unwrap();
    assert_eq!(log.add(entry(0)).await.unwrap().index, 0);
    storage.fail_next_commit(Fault::PersistLate);
    assert_eq!(log.add(entry(1)).await, Err(AddError::Uncertain));
    // It lands just before the next commit, which goes on top of it.
    assert_eq!(log.add(entry(2)).await.unwrap().index, 2);
    log.shutdown();
    tasks.join().await;
    let want: Vec<Vec<u8>> = (0..3).map(|i| entry(i).to_vec()).collect();
    assert_eq!(logged(&storage, &cfg).await, want);
}

/// An outcome that may still land outlives its batch (#57, hole 1): a commit fails
/// `Unsettled` and is still open at the deadline (answered 503); the client resubmits
/// the same entry, with dedup on, before it lands: the resubmission is answered 503
/// again, never queued; the next batch finds the late commit landed under it and goes
/// on top; the resubmission then gets the original index. (The read-back forgot the
/// open outcome, the resubmission was queued and logged a second time, at 2.)
#[tokio::test]
async fn an_outcome_that_may_still_land_outlives_its_batch() {
    let storage = Arc::new(MemoryStorage::new());
    let mut cfg = config();
    cfg.commit_retry = Duration::ZERO;
    let index = Arc::new(MapIndex::default());
    let (log, tasks) = Log::open(storage.clone(), Some(index.clone()), cfg.clone())
        .await
        .unwrap();
    assert_eq!(log.add(entry(0)).await.unwrap().index, 0);
    storage.fail_next_commit(Fault::PersistLate);
    assert_eq!(log.add(entry(1)).await, Err(AddError::Uncertain));
    // The tree as stored cannot tell yet: "may be logged", not queued.
    assert_eq!(log.add(entry(1)).await, Err(AddError::Uncertain));
    // The late commit lands just before this one, which goes on top of it.
    assert_eq!(log.add(entry(2)).await.map(|o| o.index), Ok(2));
    assert_eq!(log.add(entry(1)).await, Ok(AddOutcome::duplicate(1)));
    log.shutdown();
    tasks.join().await;
    let want: Vec<Vec<u8>> = (0..3).map(|i| entry(i).to_vec()).collect();
    assert_eq!(logged(&storage, &cfg).await, want, "each entry once");
}

/// An open outcome learned as landed from a tree another writer grew moves the
/// committed size past that writer's entries too; they must still be checked before
/// the next append. Here this frontend's commit of P may land late; it is lost, and
/// another writer (a crashed process of ours landing, another frontend) commits P and
/// Q; P's resubmission learns P landed (the tree at size 1 is P's), which moves the
/// committed size to 2; Q's resubmission then gets Q's index, not a second one.
/// (Found by `benches/sim.sh` at seed 251083: the learned outcome moved the size the
/// check starts from, and Q was appended again.)
#[tokio::test]
async fn entries_another_writer_logged_under_a_learned_outcome_are_never_appended_again() {
    let storage = Arc::new(MemoryStorage::new());
    let mut cfg = config();
    cfg.commit_retry = Duration::ZERO;
    let (log, tasks) = Log::open(
        storage.clone(),
        Some(Arc::new(MapIndex::default())),
        cfg.clone(),
    )
    .await
    .unwrap();
    storage.fail_next_commit(Fault::PersistLate);
    assert_eq!(log.add(entry(0)).await, Err(AddError::Uncertain));
    storage.drop_late();
    let (other, other_tasks) = Log::open(
        storage.clone(),
        Some(Arc::new(MapIndex::default())),
        cfg.clone(),
    )
    .await
    .unwrap();
    assert_eq!(other.add(entry(0)).await.map(|o| o.index), Ok(0));
    assert_eq!(other.add(entry(1)).await.map(|o| o.index), Ok(1));
    other.shutdown();
    other_tasks.join().await;
    assert_eq!(log.add(entry(0)).await, Ok(AddOutcome::duplicate(0)));
    assert_eq!(log.committed_size(), 2, "the learned outcome moved it");
    assert_eq!(log.add(entry(1)).await, Ok(AddOutcome::duplicate(1)));
    log.shutdown();
    tasks.join().await;
    assert_eq!(
        logged(&storage, &cfg).await,
        [0, 1].map(|i| entry(i).to_vec())
    );
}

/// An open outcome that turns out never to land (the next batch's swap moved the tree
/// off the state it was built on) is closed: the resubmission is then queued and
/// logged, once.
#[tokio::test]
async fn an_open_outcome_superseded_by_a_swap_is_closed() {
    let storage = Arc::new(MemoryStorage::new());
    let mut cfg = config();
    cfg.commit_retry = Duration::ZERO;
    let index = Arc::new(MapIndex::default());
    let (log, tasks) = Log::open(storage.clone(), Some(index.clone()), cfg.clone())
        .await
        .unwrap();
    storage.fail_next_commit(Fault::PersistLate);
    assert_eq!(log.add(entry(0)).await, Err(AddError::Uncertain));
    // The late write is lost for good (its condition can never hold again once the
    // tree moves): the next commit lands instead.
    storage.drop_late();
    assert_eq!(log.add(entry(1)).await.map(|o| o.index), Ok(0));
    assert_eq!(
        log.add(entry(0)).await.map(|o| (o.index, o.duplicate)),
        Ok((1, false))
    );
    log.shutdown();
    tasks.join().await;
    assert_eq!(
        logged(&storage, &cfg).await,
        [1, 0].map(|i| entry(i).to_vec())
    );
}

/// While an earlier commit's outcome cannot be learned (storage unreadable), later
/// batches are answered 503 "may be logged", never 500 "not logged" (#57, hole 3: a
/// client that believed the 500 and sent the entry elsewhere got it logged twice).
#[tokio::test]
async fn no_batch_is_answered_not_logged_while_an_outcome_is_unknown() {
    let storage = Arc::new(MemoryStorage::new());
    let mut cfg = config();
    cfg.commit_retry = Duration::from_millis(50);
    let (log, tasks) = Log::open(storage.clone(), None, cfg.clone()).await.unwrap();
    assert_eq!(log.add(entry(0)).await.unwrap().index, 0);
    storage.fail_next_commit(Fault::PersistThenPartition);
    assert_eq!(log.add(entry(1)).await, Err(AddError::Uncertain));
    assert_eq!(log.add(entry(2)).await, Err(AddError::Uncertain));
    storage.set_unreadable(false);
    assert_eq!(log.add(entry(2)).await.map(|o| o.index), Ok(2));
    log.shutdown();
    tasks.join().await;
    let want: Vec<Vec<u8>> = (0..3).map(|i| entry(i).to_vec()).collect();
    assert_eq!(logged(&storage, &cfg).await, want);
}

/// What a scripted link to the sequencing frontend does with the next forward.
#[derive(Clone, Copy, Debug)]
enum Link {
    /// Delivered and answered.
    Deliver,
    /// Delivered (committed there), then the answer is lost or replaced: a timeout, or
    /// a 503 from a response budget or a proxy (`classify_answer`: unknown).
    DeliverThenLose,
    /// The sequencing frontend is down: the connection is refused.
    Refuse,
    /// Delivered into the sequencing frontend's queue but not committed yet (held in
    /// `held` until the test commits it there), and the answer lost.
    HoldThenLose,
}

/// A forwarder to another `Log` in this process, doing what its script says.
struct ScriptedForwarder {
    to: Log<MemoryStorage>,
    script: Mutex<std::collections::VecDeque<Link>>,
    held: Mutex<Vec<Bytes>>,
}

impl ScriptedForwarder {
    /// A forwarder to `to` taking the links of `script` in turn (then delivering).
    fn new<const N: usize>(to: &Log<MemoryStorage>, script: [Link; N]) -> Arc<Self> {
        Arc::new(ScriptedForwarder {
            to: to.clone(),
            script: Mutex::new(script.into()),
            held: Mutex::default(),
        })
    }
}

impl Forwarder for ScriptedForwarder {
    fn target(&self) -> &str {
        "scripted"
    }
    fn forward(
        &self,
        entries: Vec<Bytes>,
    ) -> BoxFuture<'_, Result<Vec<ForwardedOutcome>, ForwardError>> {
        let step = self
            .script
            .lock()
            .unwrap()
            .pop_front()
            .unwrap_or(Link::Deliver);
        Box::pin(async move {
            match step {
                Link::Deliver => Ok(self.to.add_forwarded(entries).await),
                Link::DeliverThenLose => {
                    let n = entries.len();
                    self.to.add_forwarded(entries).await;
                    forward::classify_answer(503, false, b"busy: too many response bytes", n)
                }
                Link::Refuse => Err(ForwardError::Unsent("connection refused".into())),
                Link::HoldThenLose => {
                    self.held.lock().unwrap().extend(entries);
                    Err(ForwardError::Unknown("timed out".into()))
                }
            }
        })
    }
}

/// A forward committed by the sequencing frontend whose answer was lost (a timeout, or
/// a 503 from its response budget) leaves the entry tied to it (#57, hole 2 and the
/// measured case): the client's resubmission while the sequencing frontend is down is
/// answered 503, not committed here; once it is back, the resubmission is forwarded
/// and answered with the original index. (The resubmission was committed by the
/// forwarding frontend at a second index.)
#[tokio::test]
async fn an_unanswered_forward_is_never_committed_by_the_forwarding_frontend() {
    let storage = Arc::new(MemoryStorage::new());
    let cfg = config();
    let (s, s_tasks) = Log::open(
        storage.clone(),
        Some(Arc::new(MapIndex::default())),
        cfg.clone(),
    )
    .await
    .unwrap();
    let forwarder =
        ScriptedForwarder::new(&s, [Link::DeliverThenLose, Link::Refuse, Link::Deliver]);
    let mut f_cfg = cfg.clone();
    f_cfg.forward = Some(forwarder);
    let (f, f_tasks) = Log::open(storage.clone(), Some(Arc::new(MapIndex::default())), f_cfg)
        .await
        .unwrap();
    assert_eq!(f.add(entry(0)).await, Err(AddError::Uncertain));
    // The sequencing frontend is down: forwarding pauses, and the resubmission is not
    // committed here.
    assert_eq!(f.add(entry(0)).await, Err(AddError::Uncertain));
    assert_eq!(f.add(entry(0)).await, Err(AddError::Uncertain), "paused");
    // Other entries are committed here meanwhile.
    assert_eq!(f.add(entry(1)).await.map(|o| o.index), Ok(1));
    // Back, and forwarding again: the resubmission reaches its index there.
    *f.inner.forward_paused_until.lock().unwrap() = None;
    assert_eq!(f.add(entry(0)).await, Ok(AddOutcome::duplicate(0)));
    f.shutdown();
    f_tasks.join().await;
    s.shutdown();
    s_tasks.join().await;
    assert_eq!(
        logged(&storage, &cfg).await,
        [0, 1].map(|i| entry(i).to_vec())
    );
}

/// A forwarding frontend whose own commit fails never answers "not logged": the
/// process of it before a crash may have forwarded the same entry, which the
/// sequencing frontend still holds and commits later; a client told "not logged" may
/// send the entry elsewhere and log it twice. Here the first process's forward of the
/// entry is delivered but unanswered and it crashes; the restarted frontend finds the
/// sequencing frontend down, commits the resubmission itself and fails: answered 503
/// "may be logged"; the sequencing frontend then commits the forward it held, and the
/// client's resubmission gets that index. (Found by `benches/sim.sh`, seed 234224;
/// answered `Storage`, 500, before.)
#[tokio::test]
async fn a_forwarding_frontend_never_answers_not_logged_for_its_own_failed_commit() {
    let storage = Arc::new(MemoryStorage::new());
    let cfg = config();
    let (s, s_tasks) = Log::open(
        storage.clone(),
        Some(Arc::new(MapIndex::default())),
        cfg.clone(),
    )
    .await
    .unwrap();
    let forwarder = ScriptedForwarder::new(&s, [Link::HoldThenLose, Link::Refuse]);
    let mut f_cfg = cfg.clone();
    f_cfg.forward = Some(forwarder.clone());
    f_cfg.commit_retry = Duration::from_millis(50);
    let (f1, f1_tasks) = Log::open(
        storage.clone(),
        Some(Arc::new(MapIndex::default())),
        f_cfg.clone(),
    )
    .await
    .unwrap();
    assert_eq!(f1.add(entry(0)).await, Err(AddError::Uncertain));
    f1_tasks.abort().await;
    drop(f1);
    // Restarted: it has forgotten that forward. The sequencing frontend is down and
    // storage refuses writes.
    let (f2, f2_tasks) = Log::open(storage.clone(), Some(Arc::new(MapIndex::default())), f_cfg)
        .await
        .unwrap();
    storage.set_unwritable(true);
    assert_eq!(f2.add(entry(0)).await, Err(AddError::Uncertain));
    storage.set_unwritable(false);
    // The sequencing frontend commits what it held.
    let held = std::mem::take(&mut *forwarder.held.lock().unwrap());
    let outcomes = s.add_forwarded(held).await;
    assert_eq!(outcomes.len(), 1);
    assert_eq!(outcomes[0].as_ref().map(|o| o.index), Ok(0));
    // The resubmission, as told, to the same frontend: that index.
    *f2.inner.forward_paused_until.lock().unwrap() = None;
    assert_eq!(f2.add(entry(0)).await, Ok(AddOutcome::duplicate(0)));
    f2.shutdown();
    f2_tasks.join().await;
    s.shutdown();
    s_tasks.join().await;
    assert_eq!(logged(&storage, &cfg).await, [entry(0).to_vec()]);
}

/// The one rule by which a forwarding frontend reads an answer: only the sequencing
/// frontend's own "refused before queueing" lets it commit the batch itself; any bare
/// status (a budget's or a proxy's 503 after the batch was committed) is unknown.
#[test]
fn only_an_explicit_refusal_lets_a_forwarding_frontend_commit_the_batch() {
    use forward::{REFUSED_MARKER, classify_answer, is_refusal};
    let refusal = format!("{REFUSED_MARKER}the forward names another log\n");
    assert!(is_refusal(refusal.as_bytes()));
    for status in [503, 500, 502, 429, 401, 404] {
        assert!(matches!(
            classify_answer(status, false, b"busy: too many response bytes in flight", 1),
            Err(ForwardError::Unknown(_))
        ));
        assert!(matches!(
            classify_answer(status, true, refusal.as_bytes(), 1),
            Err(ForwardError::Unsent(_))
        ));
    }
    let ok = forward::encode_outcomes(&[Ok(AddOutcome::duplicate(7))]);
    assert_eq!(
        classify_answer(200, false, &ok, 1).unwrap(),
        [Ok(AddOutcome::duplicate(7))]
    );
    assert!(matches!(
        classify_answer(200, false, &ok, 2),
        Err(ForwardError::Unknown(_))
    ));
}

/// With dedup on, a client resubmits after `503 Uncertain`, as it is told to, and the
/// uncertain commit turns out to have persisted: the resubmission (queued in one batch
/// with a new entry) is answered with the original index, the new entry with the next
/// one, and each is in the log once. (The resubmission was logged again, at 2.)
#[tokio::test]
async fn a_resubmission_after_an_uncertain_commit_that_persisted_is_not_logged_again() {
    let storage = Arc::new(MemoryStorage::new());
    let mut cfg = config();
    cfg.commit_retry = Duration::from_millis(100);
    let index = Arc::new(MapIndex::default());
    let (log, tasks) = Log::open(storage.clone(), Some(index.clone()), cfg.clone())
        .await
        .unwrap();
    assert_eq!(log.add(entry(0)).await.unwrap().index, 0);
    storage.fail_next_commit(Fault::PersistThenPartition);
    assert_eq!(log.add(entry(1)).await, Err(AddError::Uncertain));
    storage.set_unreadable(false);
    let (again, new) = tokio::join!(log.add(entry(1)), log.add(entry(2)));
    let duplicate = AddOutcome::duplicate;
    assert_eq!(again, Ok(duplicate(1)));
    let new = new.unwrap();
    assert_eq!((new.index, new.duplicate), (2, false));
    assert!(
        new.timestamp.is_some(),
        "an appended entry has its timestamp"
    );
    // Before and after the persistent index has it.
    assert_eq!(log.add(entry(1)).await, Ok(duplicate(1)));
    log.shutdown();
    tasks.join().await;
    let want: Vec<Vec<u8>> = (0..3).map(|i| entry(i).to_vec()).collect();
    assert_eq!(logged(&storage, &cfg).await, want);
    assert_eq!(
        index.get(&entry_hash(&entry(1))).unwrap().map(|f| f.index),
        Some(1)
    );
}

/// A refused write (nothing persisted) takes the edge back in place to what it was
/// before the batch: the same state, partial bundle and timestamp, from which the
/// retry appends the same tiles; a batch that filled the bundle cannot be undone so,
/// and the edge is reloaded instead.
#[test]
fn an_edge_appended_in_place_is_undone_unless_its_bundle_filled() {
    let batch = |from: u64, n: u64| {
        let entries: Vec<Bytes> = (from..from + n).map(entry).collect();
        let leaves: Vec<Hash> = entries.iter().map(|e| leaf_hash(e)).collect();
        (entries, leaves)
    };
    let mut edge = Edge {
        tree: TileTree::empty(),
        bundle: Vec::new(),
        last_timestamp: 0,
        frozen: false,
    };
    let (entries, leaves) = batch(0, 100);
    edge.append(&TlogTiles, &entries, &leaves).unwrap();
    let before = edge.clone();
    // One batch that stays in bundle 0, one that fills it.
    for (n, undone) in [(100, true), (200, false)] {
        let mut edge = before.clone();
        let undo = edge.undo_point();
        let (entries, leaves) = batch(100, n);
        let tiles = edge.append(&TlogTiles, &entries, &leaves).unwrap();
        assert_eq!(edge.state().size, 100 + n);
        match edge.undo(undo) {
            Some(mut edge) => {
                assert!(undone, "{n}");
                assert_eq!(edge.state(), before.state());
                assert_eq!(edge.bundle, before.bundle);
                assert_eq!(edge.last_timestamp, before.last_timestamp);
                // The retry appends the same tiles (tlog-tiles bundles hold no
                // timestamp).
                let again = edge.append(&TlogTiles, &entries, &leaves).unwrap();
                assert_eq!(again, tiles);
            }
            None => assert!(!undone, "{n}"),
        }
    }
}

/// A store where another frontend commits its prepared batch right after this
/// frontend's commit fails: the failed batch is overtaken before it is read back.
struct Overtaken {
    inner: Arc<MemoryStorage>,
    other: Mutex<Option<CommitBatch>>,
}

impl LogStorage for Overtaken {
    fn backend_name(&self) -> &'static str {
        "overtaken"
    }
    async fn load_state(&self) -> Result<Option<TreeState>, StorageError> {
        self.inner.load_state().await
    }
    async fn commit(&self, batch: CommitBatch) -> Result<(), StorageError> {
        let result = self.inner.commit(batch).await;
        let other = self.other.lock().unwrap().take();
        if let (Err(_), Some(other)) = (&result, other) {
            self.inner
                .commit(other)
                .await
                .expect("the other frontend commits");
        }
        result
    }
    async fn read_tile(&self, id: &TileId) -> Result<Option<Vec<u8>>, StorageError> {
        self.inner.read_tile(id).await
    }
    async fn publish_checkpoint(&self, signed: &[u8]) -> Result<(), StorageError> {
        self.inner.publish_checkpoint(signed).await
    }
    async fn read_checkpoint(&self) -> Result<Option<Vec<u8>>, StorageError> {
        self.inner.read_checkpoint().await
    }
    async fn put_blob(
        &self,
        key: &str,
        bytes: &[u8],
        content_type: &'static str,
    ) -> Result<(), StorageError> {
        self.inner.put_blob(key, bytes, content_type).await
    }
    async fn read_blob(&self, key: &str) -> Result<Option<Vec<u8>>, StorageError> {
        self.inner.read_blob(key).await
    }
    async fn check_writable(&self) -> Result<(), StorageError> {
        self.inner.check_writable().await
    }
}

/// A failed commit (3 -> 4) read back on a tree another frontend moved past it in one
/// batch (3 -> 5): no partial tile of width 4 was ever stored, so the root at 4 comes
/// from the stored width-5 tile's prefix, the batch is known not to have persisted and
/// is retried on top. (Reading only the missing width-4 tile left the outcome unknown
/// for good: the add was answered "uncertain" and every later batch refused.)
#[tokio::test]
async fn a_failed_commit_overtaken_by_another_frontend_is_resolved() {
    let storage = Arc::new(MemoryStorage::new());
    let cfg = config();
    let racing = Arc::new(Overtaken {
        inner: storage.clone(),
        other: Mutex::new(None),
    });
    let (log, tasks) = Log::open(racing.clone(), None, cfg.clone()).await.unwrap();
    for i in 0..3 {
        assert_eq!(log.add(entry(i)).await.unwrap().index, i);
    }
    let mut edge = Edge::load(&*storage, &TlogTiles, None).await.unwrap();
    let prev = edge.state();
    let theirs = [Bytes::from("theirs 0"), Bytes::from("theirs 1")];
    let leaves: Vec<Hash> = theirs.iter().map(|e| leaf_hash(e)).collect();
    let tiles = edge.append(&TlogTiles, &theirs, &leaves).unwrap();
    let next = edge.state();
    *racing.other.lock().unwrap() = Some(CommitBatch { prev, next, tiles });
    storage.fail_next_commit(Fault::FailAndDontPersist);
    assert_eq!(log.add(entry(3)).await.unwrap().index, 5);
    assert_eq!(log.add(entry(4)).await.unwrap().index, 6);
    log.shutdown();
    tasks.join().await;
    let want: Vec<Vec<u8>> = [entry(0), entry(1), entry(2)]
        .iter()
        .chain(&theirs)
        .chain(&[entry(3), entry(4)])
        .map(|e| e.to_vec())
        .collect();
    assert_eq!(logged(&storage, &cfg).await, want);
}

#[tokio::test]
async fn reopen_continues_the_same_tree() {
    let storage = Arc::new(MemoryStorage::new());
    let cfg = config();
    for round in 0..3u64 {
        let (log, tasks) = Log::open(storage.clone(), None, cfg.clone()).await.unwrap();
        for i in 0..300u64 {
            let idx = log.add(entry(round * 1000 + i)).await.unwrap().index;
            assert_eq!(idx, round * 300 + i);
        }
        log.shutdown();
        tasks.join().await;
    }
    assert_eq!(check(&storage, &cfg).await.state.size, 900);
}

#[tokio::test]
async fn reopen_refuses_a_tampered_edge() {
    let storage = Arc::new(MemoryStorage::new());
    let cfg = config();
    let (log, tasks) = Log::open(storage.clone(), None, cfg.clone()).await.unwrap();
    for i in 0..5 {
        log.add(entry(i)).await.unwrap();
    }
    log.shutdown();
    tasks.join().await;
    storage.tamper(&TileId::hash(0, 0, 5), vec![7u8; 5 * 32]);
    assert!(Log::open(storage.clone(), None, cfg.clone()).await.is_err());
    assert!(
        check_log(&*storage, ORIGIN, &cfg.verifier(), None)
            .await
            .is_err()
    );
}

#[tokio::test]
async fn invalid_entries_change_nothing() {
    let storage = Arc::new(MemoryStorage::new());
    let cfg = config();
    let (log, tasks) = Log::open(storage.clone(), None, cfg.clone()).await.unwrap();
    assert_eq!(log.add(Bytes::new()).await, Err(AddError::Empty));
    let big = Bytes::from(vec![1u8; 65536]);
    assert_eq!(
        log.add(big).await,
        Err(AddError::TooLarge {
            size: 65536,
            max: 65535
        })
    );
    let max = Bytes::from(vec![1u8; 65535]);
    assert_eq!(log.add(max).await.unwrap().index, 0);
    log.shutdown();
    tasks.join().await;
    assert_eq!(check(&storage, &cfg).await.state.size, 1);
}

#[tokio::test]
async fn full_queue_pushes_back() {
    let storage = Arc::new(MemoryStorage::new());
    let mut cfg = config();
    cfg.max_pending_entries = 4;
    cfg.commit_retry = Duration::from_secs(60);
    let (log, tasks) = Log::open(storage.clone(), None, cfg.clone()).await.unwrap();
    // Storage that cannot commit holds the four entries in the queue for as long as
    // the test needs (a linger would release them after a time that a loaded machine
    // may exceed before the fifth add).
    storage.set_unwritable(true);
    let mut handles = Vec::new();
    for i in 0..4 {
        let log = log.clone();
        handles.push(tokio::spawn(async move { log.add(entry(i)).await }));
    }
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while log.queue_depth() < 4 {
        assert!(
            std::time::Instant::now() < deadline,
            "four adds never queued"
        );
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    assert_eq!(log.add(entry(99)).await, Err(AddError::QueueFull));
    storage.set_unwritable(false);
    for h in handles {
        h.await.unwrap().unwrap();
    }
    assert_eq!(
        log.add(entry(99)).await.unwrap().index,
        4,
        "pushback clears"
    );
    log.shutdown();
    tasks.join().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn duplicates_return_the_first_index() {
    let storage = Arc::new(MemoryStorage::new());
    let cfg = config();
    let index = Arc::new(MapIndex::default());
    let (log, tasks) = Log::open(storage.clone(), Some(index.clone()), cfg.clone())
        .await
        .unwrap();
    // Concurrent identical adds collapse onto one index.
    let mut handles = Vec::new();
    for _ in 0..50 {
        let log = log.clone();
        handles.push(tokio::spawn(
            async move { log.add(entry(7)).await.unwrap() },
        ));
    }
    let outs: Vec<AddOutcome> = {
        let mut v = Vec::new();
        for h in handles {
            v.push(h.await.unwrap());
        }
        v
    };
    assert!(outs.iter().all(|o| o.index == outs[0].index));
    assert_eq!(outs.iter().filter(|o| !o.duplicate).count(), 1);
    assert_eq!(log.add(entry(8)).await.unwrap().index, 1);
    log.shutdown();
    tasks.join().await;
    assert_eq!(index.indexed_up_to().unwrap(), 2);

    // After a restart, the persistent index answers.
    let (log, tasks) = Log::open(storage.clone(), Some(index.clone()), cfg.clone())
        .await
        .unwrap();
    let again = log.add(entry(7)).await.unwrap();
    assert_eq!((again.index, again.duplicate), (0, true));
    log.shutdown();
    tasks.join().await;
    assert_eq!(check(&storage, &cfg).await.state.size, 2);
}

#[tokio::test]
async fn dedup_index_catches_up_from_the_log() {
    let (storage, cfg) = prefilled(600).await;
    // A fresh (deleted) index: the follower rebuilds it from the bundles.
    let index = Arc::new(MapIndex::default());
    let (log, tasks) = Log::open(storage.clone(), Some(index.clone()), cfg.clone())
        .await
        .unwrap();
    for _ in 0..200 {
        if log.dedup_lag() == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(log.dedup_lag(), 0);
    let out = log.add(entry(123)).await.unwrap();
    assert_eq!((out.index, out.duplicate), (123, true));
    log.shutdown();
    tasks.join().await;
    assert_eq!(index.indexed_up_to().unwrap(), 600);
}

#[tokio::test]
async fn dedup_lag_pushes_back() {
    let (storage, cfg) = prefilled(100).await;
    let mut cfg = cfg;
    cfg.dedup_max_lag = 10;
    // An index that is stuck far behind: writes fail, so the lag never clears.
    struct Stuck;
    impl DedupIndex for Stuck {
        fn get(&self, _: &EntryHash) -> Result<Option<Indexed>, DedupError> {
            Ok(None)
        }
        fn put_batch(&self, _: &[(EntryHash, Indexed)], _: u64) -> Result<(), DedupError> {
            Err(DedupError("disk full".into()))
        }
        fn indexed_up_to(&self) -> Result<u64, DedupError> {
            Ok(0)
        }
    }
    let (log, _tasks) = Log::open(storage.clone(), Some(Arc::new(Stuck)), cfg)
        .await
        .unwrap();
    assert_eq!(log.add(entry(1000)).await, Err(AddError::DedupLag));
    assert!(AddError::DedupLag.is_pushback());
    log.shutdown();
}

/// An index whose writes wait behind a gate: while it is closed, the follower cannot
/// catch up and the lag stays.
struct Gated {
    open: std::sync::atomic::AtomicBool,
    inner: MapIndex,
}

impl Gated {
    fn closed() -> Arc<Gated> {
        Arc::new(Gated {
            open: std::sync::atomic::AtomicBool::new(false),
            inner: MapIndex::default(),
        })
    }
}

impl DedupIndex for Gated {
    fn get(&self, h: &EntryHash) -> Result<Option<Indexed>, DedupError> {
        self.inner.get(h)
    }
    fn put_batch(&self, e: &[(EntryHash, Indexed)], upto: u64) -> Result<(), DedupError> {
        while !self.open.load(std::sync::atomic::Ordering::Acquire) {
            std::thread::sleep(Duration::from_millis(5));
        }
        self.inner.put_batch(e, upto)
    }
    fn indexed_up_to(&self) -> Result<u64, DedupError> {
        self.inner.indexed_up_to()
    }
}

/// Opens the gate however the test ends: a panic with the indexer stuck behind it
/// would leave the runtime waiting for that thread.
struct OpenAtEnd(Arc<Gated>);

impl Drop for OpenAtEnd {
    fn drop(&mut self) {
        self.0
            .open
            .store(true, std::sync::atomic::Ordering::Release);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dedup_lag_pushback_triggers_and_clears() {
    let (storage, cfg) = prefilled(100).await;
    let gated = Gated::closed();
    let _open_at_end = OpenAtEnd(gated.clone());
    let mut cfg = cfg;
    cfg.dedup_max_lag = 10;
    let (log, tasks) = Log::open(storage.clone(), Some(gated.clone()), cfg)
        .await
        .unwrap();
    assert_eq!(log.dedup_lag(), 100);
    assert_eq!(log.add(entry(1000)).await, Err(AddError::DedupLag));
    gated.open.store(true, std::sync::atomic::Ordering::Release);
    for _ in 0..400 {
        if log.dedup_lag() == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let out = log
        .add(entry(1000))
        .await
        .expect("pushback clears once the index caught up");
    assert_eq!(out.index, 100);
    let dup = log.add(entry(42)).await.unwrap();
    assert_eq!((dup.index, dup.duplicate), (42, true));
    log.shutdown();
    tasks.join().await;
}

/// While the index catches up with entries committed before the log opened (a
/// restart, a migration, an index that lost unsynced writes), a lookup that misses
/// proves nothing: such an add is pushed back, within `dedup_max_lag` too, and never
/// logged again; a hit is answered. Found by `tlogd migrate`'s test: an entry sent
/// right after the start was logged a second time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resubmission_during_the_catch_up_is_never_logged_again() {
    let (storage, cfg) = prefilled(600).await;
    let gated = Gated::closed();
    let _open_at_end = OpenAtEnd(gated.clone());
    // The index kept the first 256 entries (a restart's index lost the rest).
    let first: Vec<(EntryHash, Indexed)> = (0..256)
        .map(|i| {
            let at = Indexed {
                index: i,
                timestamp: 0,
            };
            (entry_hash(&entry(i)), at)
        })
        .collect();
    gated.inner.put_batch(&first, 256).unwrap();
    let mut cfg = cfg;
    cfg.dedup_max_lag = 1 << 20;
    let (log, tasks) = Log::open(storage.clone(), Some(gated.clone()), cfg.clone())
        .await
        .unwrap();
    assert_eq!(log.dedup_lag(), 344);
    assert_eq!(log.add(entry(500)).await, Err(AddError::DedupLag));
    assert_eq!(log.add(entry(1000)).await, Err(AddError::DedupLag));
    let hit = log.add(entry(7)).await.unwrap();
    assert_eq!((hit.index, hit.duplicate), (7, true));
    assert_eq!(log.add(entry(500)).await, Err(AddError::DedupLag));
    gated.open.store(true, std::sync::atomic::Ordering::Release);
    for _ in 0..400 {
        if log.dedup_lag() == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let dup = log.add(entry(500)).await.unwrap();
    assert_eq!((dup.index, dup.duplicate), (500, true));
    assert_eq!(log.add(entry(1000)).await.unwrap().index, 600);
    log.shutdown();
    tasks.join().await;
    assert_eq!(check(&storage, &cfg).await.state.size, 601);
}

/// A store whose commit panics (a bug in a backend or in the engine).
struct PanickingStorage(MemoryStorage);

impl LogStorage for PanickingStorage {
    fn backend_name(&self) -> &'static str {
        "panicking"
    }
    async fn load_state(&self) -> Result<Option<TreeState>, StorageError> {
        self.0.load_state().await
    }
    async fn commit(&self, _batch: CommitBatch) -> Result<(), StorageError> {
        panic!("injected bug in commit");
    }
    async fn read_tile(&self, id: &TileId) -> Result<Option<Vec<u8>>, StorageError> {
        self.0.read_tile(id).await
    }
    async fn publish_checkpoint(&self, signed: &[u8]) -> Result<(), StorageError> {
        self.0.publish_checkpoint(signed).await
    }
    async fn read_checkpoint(&self) -> Result<Option<Vec<u8>>, StorageError> {
        self.0.read_checkpoint().await
    }
    async fn put_blob(
        &self,
        key: &str,
        bytes: &[u8],
        content_type: &'static str,
    ) -> Result<(), StorageError> {
        self.0.put_blob(key, bytes, content_type).await
    }
    async fn read_blob(&self, key: &str) -> Result<Option<Vec<u8>>, StorageError> {
        self.0.read_blob(key).await
    }
    async fn check_writable(&self) -> Result<(), StorageError> {
        self.0.check_writable().await
    }
}

/// A panicking integrator answers its adds, refuses new ones, reports not ready and
/// tells the daemon to stop: nothing waits forever.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panicking_integrator_stops_the_log() {
    let storage = Arc::new(PanickingStorage(MemoryStorage::new()));
    let (log, tasks) = Log::open(storage, None, config()).await.unwrap();
    let adds: Vec<_> = (0..50)
        .map(|i| {
            let log = log.clone();
            tokio::spawn(async move { log.add(entry(i)).await })
        })
        .collect();
    let reason = tokio::time::timeout(Duration::from_secs(10), log.failed())
        .await
        .expect("the failure is reported");
    assert!(reason.contains("integrator"), "{reason}");
    for a in adds {
        let r = tokio::time::timeout(Duration::from_secs(10), a)
            .await
            .expect("every add is answered")
            .unwrap();
        assert!(r.is_err(), "{r:?}");
    }
    assert!(!log.is_ready());
    assert!(log.add(entry(99)).await.is_err());
    tokio::time::timeout(Duration::from_secs(10), tasks.join())
        .await
        .expect("the tasks end");
}

/// A dedup index whose writes wait for a gate and whose first lookup of one hash is
/// slow: the lookup misses, then the indexer indexes the entry and forgets it as in
/// flight, then the lookup answers "not found".
struct RacyIndex {
    map: MapIndex,
    gate: std::sync::atomic::AtomicBool,
    slow: Mutex<Option<EntryHash>>,
}

impl DedupIndex for RacyIndex {
    fn get(&self, hash: &EntryHash) -> Result<Option<Indexed>, DedupError> {
        let found = self.map.get(hash)?;
        let slow = self.slow.lock().unwrap().take_if(|h| h == hash).is_some();
        if slow {
            // Let the indexer through, and wait until it has forgotten the entry.
            self.gate.store(true, Ordering::Release);
            for _ in 0..500 {
                if self.map.get(hash)?.is_some() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(10));
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        Ok(found)
    }
    fn put_batch(&self, entries: &[(EntryHash, Indexed)], upto: u64) -> Result<(), DedupError> {
        for _ in 0..1000 {
            if self.gate.load(Ordering::Acquire) {
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        self.map.put_batch(entries, upto)
    }
    fn indexed_up_to(&self) -> Result<u64, DedupError> {
        self.map.indexed_up_to()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resubmission_racing_the_indexer_is_not_logged_twice() {
    let index = Arc::new(RacyIndex {
        map: MapIndex::default(),
        gate: std::sync::atomic::AtomicBool::new(false),
        slow: Mutex::new(None),
    });
    let storage = Arc::new(MemoryStorage::new());
    let (log, tasks) = Log::open(storage.clone(), Some(index.clone()), config())
        .await
        .unwrap();
    // Committed; its index write waits at the gate.
    assert_eq!(log.add(entry(1)).await.unwrap().index, 0);
    *index.slow.lock().unwrap() = Some(entry_hash(&entry(1)));
    let again = log.add(entry(1)).await.unwrap();
    assert_eq!(again.index, 0, "the resubmission was logged again");
    assert!(again.duplicate);
    log.shutdown();
    tasks.join().await;
    assert_eq!(check(&storage, &config()).await.state.size, 1);
}

/// A frontend on an in-memory object store.
async fn object_log(
    store: &objects::memory::MemoryObjects,
) -> Arc<objects::ObjectLog<objects::memory::MemoryObjects>> {
    Arc::new(
        objects::ObjectLog::open(store.clone(), ORIGIN, objects::ObjectLogOptions::default())
            .await
            .unwrap(),
    )
}

/// With several frontends, each one's index covers the entries others committed
/// between its own batches: its marker never jumps past entries it does not hold.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dedup_index_fills_in_other_frontends_entries() {
    use super::objects::memory::MemoryObjects;
    let store = MemoryObjects::new();
    let open = || object_log(&store);
    let index_a = Arc::new(MapIndex::default());
    let (a, tasks_a) = Log::open(open().await, Some(index_a.clone()), config())
        .await
        .unwrap();
    let (b, tasks_b) = Log::open(open().await, None, config()).await.unwrap();
    assert_eq!(a.add(entry(0)).await.unwrap().index, 0);
    for i in 1..5 {
        assert_eq!(b.add(entry(i)).await.unwrap().index, i);
    }
    assert_eq!(a.add(entry(5)).await.unwrap().index, 5);
    // Wait for a's indexer to take in its batch (and the gap before it).
    for _ in 0..500 {
        if index_a.indexed_up_to().unwrap() == 6 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(index_a.indexed_up_to().unwrap(), 6);
    let dup = a.add(entry(3)).await.unwrap();
    assert_eq!((dup.index, dup.duplicate), (3, true));
    for (log, tasks) in [(a, tasks_a), (b, tasks_b)] {
        log.shutdown();
        tasks.join().await;
    }
}

/// Another frontend commits and publishes while this one opens: the checkpoint read
/// at open may be newer than a state read before it, so the state is read after.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn opening_while_another_frontend_publishes() {
    use super::objects::CHECKPOINT_KEY;
    use super::objects::memory::{MemoryObjects, ObjectFault, ObjectOp};
    let store = MemoryObjects::new();
    let open = || object_log(&store);
    let (a, tasks_a) = Log::open(open().await, None, config()).await.unwrap();
    a.add(entry(0)).await.unwrap();
    let b_storage = open().await;
    // b's read of the checkpoint is slow: the other frontend commits and publishes
    // meanwhile.
    store.inject(
        ObjectOp::Get,
        CHECKPOINT_KEY,
        ObjectFault::Delay(Duration::from_millis(300)),
        1,
    );
    let opening = tokio::spawn(async move { Log::open(b_storage, None, config()).await });
    for i in 1..20 {
        a.add(entry(i)).await.unwrap();
    }
    let (b, tasks_b) = opening.await.unwrap().expect("b opens");
    b.add(entry(100)).await.unwrap();
    for (log, tasks) in [(a, tasks_a), (b, tasks_b)] {
        log.shutdown();
        tasks.join().await;
    }
}

/// A personality whose stored bytes depend on sequencing, as CT's do: each entry is
/// stored as `index || timestamp || submitted bytes` (uint16-prefixed), hashed as
/// stored, and deduplicated by the submitted bytes.
#[derive(Debug, Default)]
struct Stamped {
    /// The (index, timestamp) of every `encode` call.
    encoded: Mutex<Vec<(u64, u64)>>,
}

impl crate::personality::Personality for Stamped {
    fn name(&self) -> &'static str {
        "stamped"
    }
    fn max_entry_size(&self) -> usize {
        crate::bundle::MAX_ENTRY_SIZE - 16
    }
    fn accept(&self, entry: &[u8]) -> Result<Hash, EntryError> {
        match entry.len() {
            0 => Err(EntryError::Empty),
            n if n > self.max_entry_size() => Err(EntryError::Invalid("too long".into())),
            _ if entry.starts_with(b"bad") => Err(EntryError::Invalid("a bad entry".into())),
            // Not the leaf: that depends on the index.
            _ => Ok([0; 32]),
        }
    }
    fn dedup_key(&self, entry: &[u8]) -> [u8; 32] {
        entry_hash(entry)
    }
    fn bundle_kind(&self) -> crate::tile::TileKind {
        TileKind::Entries
    }
    fn stores_timestamps(&self) -> bool {
        true
    }
    fn encode(
        &self,
        entry: &[u8],
        _accepted: &Hash,
        index: u64,
        timestamp: u64,
        bundle: &mut Vec<u8>,
    ) -> Result<Hash, EntryError> {
        self.encoded.lock().unwrap().push((index, timestamp));
        let mut stored = index.to_be_bytes().to_vec();
        stored.extend_from_slice(&timestamp.to_be_bytes());
        stored.extend_from_slice(entry);
        crate::bundle::append_entry(bundle, &stored)
            .map_err(|e| EntryError::Invalid(e.to_string()))?;
        Ok(leaf_hash(&stored))
    }
    fn split_bundle<'a>(
        &self,
        bytes: &'a [u8],
    ) -> Result<Vec<crate::personality::StoredEntry<'a>>, EntryError> {
        let entries =
            crate::bundle::parse_bundle(bytes).map_err(|e| EntryError::Malformed(e.to_string()))?;
        entries
            .into_iter()
            .map(|bytes| {
                let ts = bytes
                    .get(8..16)
                    .ok_or_else(|| EntryError::Malformed("short entry".into()))?;
                Ok(crate::personality::StoredEntry {
                    bytes,
                    timestamp: u64::from_be_bytes(ts.try_into().expect("8 bytes")),
                })
            })
            .collect()
    }
    fn stored_leaf(&self, e: &crate::personality::StoredEntry<'_>) -> Hash {
        leaf_hash(e.bytes)
    }
    fn stored_dedup_key(&self, e: &crate::personality::StoredEntry<'_>) -> [u8; 32] {
        entry_hash(&e.bytes[16..])
    }
}

/// The engine stores and hashes what the personality says, at the index and timestamp
/// it gives, and reads it back through the personality: the edge check of a reopen and
/// the dedup index's catch-up both go through `split_bundle`. Timestamps never
/// decrease, and the checkpoint is signed no earlier than the newest entry.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_personality_decides_what_is_stored_hashed_and_read_back() {
    let storage = Arc::new(MemoryStorage::new());
    let personality = Arc::new(Stamped::default());
    let signer = Arc::new(RecordingSigner::default());
    let mut cfg = config();
    cfg.personality = personality.clone();
    cfg.signers = vec![signer.clone()];
    cfg.batch_max_entries = 7;
    let (log, tasks) = Log::open(storage.clone(), None, cfg.clone()).await.unwrap();
    let mut adds = tokio::task::JoinSet::new();
    for i in 0..300 {
        let log = log.clone();
        adds.spawn(async move { log.add(entry(i)).await });
    }
    while let Some(r) = adds.join_next().await {
        r.unwrap().unwrap();
    }
    assert_eq!(
        log.add(Bytes::from("bad one")).await,
        Err(AddError::Rejected("a bad entry".into()))
    );
    log.shutdown();
    tasks.join().await;
    // Every stored entry names its own index; the tree (checked as tlog-tiles over
    // the stored bytes) hashes what was stored. The entries are in index order, not
    // submission order: find each by its submitted bytes.
    let stored = logged(&storage, &cfg).await;
    let mut submitted: Vec<&[u8]> = stored.iter().map(|s| &s[16..]).collect();
    submitted.sort();
    let mut want: Vec<Bytes> = (0..300).map(entry).collect();
    want.sort();
    assert_eq!(submitted, want.iter().map(|b| &b[..]).collect::<Vec<_>>());
    assert_eq!(stored.len(), 300);
    let mut last = 0;
    for (i, s) in stored.iter().enumerate() {
        assert_eq!(u64::from_be_bytes(s[..8].try_into().unwrap()), i as u64);
        let ts = u64::from_be_bytes(s[8..16].try_into().unwrap());
        assert!(ts >= last && ts > 0, "timestamp {ts} after {last}");
        last = ts;
    }
    let encoded = personality.encoded.lock().unwrap().clone();
    assert_eq!(encoded.len(), 300);
    let signed_at = *signer.timestamps.lock().unwrap().last().expect("signed");
    assert!(
        signed_at >= last,
        "checkpoint at {signed_at}, newest entry {last}"
    );

    // A reopen checks the edge through the personality, and a fresh dedup index is
    // filled from the stored bundles with the personality's keys.
    let index = Arc::new(MapIndex::default());
    let (log, tasks) = Log::open(storage.clone(), Some(index.clone()), cfg.clone())
        .await
        .unwrap();
    while log.dedup_lag() > 0 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let at = stored
        .iter()
        .position(|s| s[16..] == entry(123)[..])
        .expect("logged") as u64;
    let again = log.add(entry(123)).await.unwrap();
    let stored_ts = |s: &[u8]| u64::from_be_bytes(s[8..16].try_into().unwrap());
    // A duplicate is answered from the index alone: its index and the timestamp its
    // stored entry holds (the index was filled from the log here).
    let s = &stored[at as usize];
    assert_eq!(
        again,
        AddOutcome {
            index: at,
            duplicate: true,
            timestamp: Some(stored_ts(s)),
        }
    );
    // The same as reading the entry back.
    let original = log.read_entry(at).await.unwrap().expect("committed");
    assert_eq!(original.bytes, *s);
    assert_eq!(original.timestamp, stored_ts(s));
    assert_eq!(log.read_entry(300).await.unwrap(), None, "beyond the tree");
    let new = log.add(entry(300)).await.unwrap();
    assert_eq!(new.index, 300);
    // Indexed as committed (not read back): the duplicate has the same timestamp.
    while log.dedup_lag() > 0 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let again = log.add(entry(300)).await.unwrap();
    assert_eq!((again.index, again.timestamp), (300, new.timestamp));
    let first = index
        .get(&entry_hash(&entry(300)))
        .unwrap()
        .expect("indexed");
    assert_eq!(Some(first.timestamp), new.timestamp);
    log.shutdown();
    tasks.join().await;
    let stored = logged(&storage, &cfg).await;
    assert_eq!(Some(stored_ts(&stored[300])), new.timestamp);
}

/// Records the timestamps it signs at; signs as the test key.
#[derive(Debug)]
struct RecordingSigner {
    key: NoteSigner,
    timestamps: Mutex<Vec<u64>>,
}

impl Default for RecordingSigner {
    fn default() -> Self {
        RecordingSigner {
            key: NoteSigner::from_skey(SKEY).expect("test key"),
            timestamps: Mutex::new(Vec::new()),
        }
    }
}

impl LogSigner for RecordingSigner {
    fn name(&self) -> &str {
        LogSigner::name(&self.key)
    }
    fn key_id(&self) -> u32 {
        LogSigner::key_id(&self.key)
    }
    fn algorithm(&self) -> crate::note::SignatureAlgorithm {
        self.key.algorithm()
    }
    fn sign(&self, text: &str, timestamp: u64) -> Result<Vec<u8>, crate::note::NoteError> {
        self.timestamps.lock().unwrap().push(timestamp);
        LogSigner::sign(&self.key, text, timestamp)
    }
    fn verifier(&self) -> NoteVerifier {
        self.key.verifier()
    }
}

/// Every configured signer signs each checkpoint, in order; the log reopens with the
/// keys in either order or with only the new one (a rotation), and refuses to open
/// with neither.
#[tokio::test]
async fn every_signer_signs_and_any_configured_key_opens_the_log() {
    let storage = Arc::new(MemoryStorage::new());
    let (new_skey, _) = crate::note::generate_key(ORIGIN).unwrap();
    let old: Arc<dyn LogSigner> = Arc::new(NoteSigner::from_skey(SKEY).unwrap());
    let new: Arc<dyn LogSigner> = Arc::new(NoteSigner::from_skey(&new_skey).unwrap());
    let mut cfg = config();
    cfg.signers = vec![old.clone(), new.clone()];
    let (log, tasks) = Log::open(storage.clone(), None, cfg.clone()).await.unwrap();
    log.add(entry(0)).await.unwrap();
    log.shutdown();
    tasks.join().await;
    let signed = storage.read_checkpoint().await.unwrap().expect("published");
    let note = crate::note::Note::parse(&signed).unwrap();
    let ids: Vec<u32> = note.signatures.iter().map(|s| s.key_id).collect();
    assert_eq!(ids, [old.key_id(), new.key_id()]);
    for v in [old.verifier(), new.verifier()] {
        Checkpoint::open(&signed, ORIGIN, &v).expect("each line verifies");
    }
    for signers in [vec![new.clone(), old.clone()], vec![new.clone()]] {
        cfg.signers = signers;
        let (log, tasks) = Log::open(storage.clone(), None, cfg.clone()).await.unwrap();
        log.shutdown();
        tasks.join().await;
    }
    let (other, _) = crate::note::generate_key(ORIGIN).unwrap();
    cfg.signers = vec![Arc::new(NoteSigner::from_skey(&other).unwrap())];
    assert!(matches!(
        Log::open(storage.clone(), None, cfg.clone()).await,
        Err(EngineError::Checkpoint(_))
    ));
    cfg.signers.clear();
    assert!(matches!(
        Log::open(storage.clone(), None, cfg.clone()).await,
        Err(EngineError::NoSigner)
    ));
}

/// A log signed by [Ed25519, ML-DSA-44] writes both lines, in that order, the ML-DSA-44
/// one stamped with the signing time in seconds; it reopens with the ML-DSA-44 key
/// first, then alone (the rotation of docs/operating.md), and each checkpoint it then
/// publishes carries the lines of the keys configured; a foreign ML-DSA-44 key opens
/// nothing.
#[tokio::test]
async fn a_log_signed_by_ed25519_and_mldsa44_rotates_to_mldsa44() {
    use crate::keys::log_signer_from_skey;
    use crate::mldsa::{MlDsa44Verifier, generate_mldsa44_key};
    use crate::note::Note;
    let storage = Arc::new(MemoryStorage::new());
    let (pq_skey, pq_vkey) = generate_mldsa44_key(ORIGIN).unwrap();
    let ed: Arc<dyn LogSigner> = Arc::new(NoteSigner::from_skey(SKEY).unwrap());
    let pq = log_signer_from_skey(&pq_skey).unwrap();
    let pq_v = MlDsa44Verifier::from_vkey(&pq_vkey).unwrap();
    let lines = |signed: &[u8]| -> Vec<(u32, usize)> {
        Note::parse(signed)
            .unwrap()
            .signatures
            .iter()
            .map(|s| (s.key_id, s.signature.len()))
            .collect()
    };
    let now = || {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs()
    };
    let mut cfg = config();
    cfg.signers = vec![ed.clone(), pq.clone()];
    let before = now();
    let (log, tasks) = Log::open(storage.clone(), None, cfg.clone()).await.unwrap();
    log.add(entry(0)).await.unwrap();
    log.shutdown();
    tasks.join().await;
    let signed = storage.read_checkpoint().await.unwrap().expect("published");
    assert_eq!(
        lines(&signed),
        [
            (ed.key_id(), 64),
            (pq.key_id(), 8 + crate::mldsa::SIGNATURE_LEN)
        ]
    );
    let note = Note::parse(&signed).unwrap();
    let ts = pq_v
        .verify_checkpoint(&note.text, &note.signatures[1].signature)
        .unwrap();
    assert!(
        (before..=now()).contains(&ts),
        "{ts} not in [{before}, now]"
    );
    for v in [ed.verifier(), NoteVerifier::from_vkey(&pq_vkey).unwrap()] {
        Checkpoint::open(&signed, ORIGIN, &v).expect("each line verifies");
    }
    // The ML-DSA-44 key first, then alone: the log opens and signs with what is set.
    for (i, signers) in [vec![pq.clone(), ed.clone()], vec![pq.clone()]]
        .into_iter()
        .enumerate()
    {
        let ids: Vec<u32> = signers.iter().map(|s| s.key_id()).collect();
        cfg.signers = signers;
        let (log, tasks) = Log::open(storage.clone(), None, cfg.clone()).await.unwrap();
        log.add(entry(i as u64 + 1)).await.unwrap();
        log.shutdown();
        tasks.join().await;
        let signed = storage.read_checkpoint().await.unwrap().expect("published");
        let got: Vec<u32> = lines(&signed).iter().map(|(id, _)| *id).collect();
        assert_eq!(got, ids);
        Checkpoint::open(&signed, ORIGIN, &NoteVerifier::from_vkey(&pq_vkey).unwrap())
            .expect("the ML-DSA-44 line verifies");
    }
    // The Ed25519 key alone no longer opens the log: its line is gone.
    cfg.signers = vec![ed.clone()];
    assert!(matches!(
        Log::open(storage.clone(), None, cfg.clone()).await,
        Err(EngineError::Checkpoint(_))
    ));
    let (other, _) = generate_mldsa44_key(ORIGIN).unwrap();
    cfg.signers = vec![log_signer_from_skey(&other).unwrap()];
    assert!(matches!(
        Log::open(storage.clone(), None, cfg.clone()).await,
        Err(EngineError::Checkpoint(_))
    ));
    check_log(storage.as_ref(), ORIGIN, &pq.verifier(), None)
        .await
        .unwrap();
}

/// A freeze whose storage answer is lost after it persisted ("fail but persist"), or
/// that fails without persisting, ends frozen exactly once; duplicates of logged
/// entries are still answered with their index (dedup on), new entries refused, and
/// the whole log checks out with the frozen state.
#[tokio::test]
async fn a_freeze_survives_lost_answers_and_still_answers_duplicates() {
    for fault in [Fault::FailButPersist, Fault::FailAndDontPersist] {
        let storage = Arc::new(MemoryStorage::new());
        let cfg = config();
        let dedup: Arc<dyn DedupIndex> = Arc::new(MapIndex::default());
        let (log, tasks) = Log::open(storage.clone(), Some(dedup), cfg.clone())
            .await
            .unwrap();
        for i in 0..5 {
            assert_eq!(log.add(entry(i)).await.unwrap().index, i);
        }
        storage.fail_next_commit(fault);
        let frozen = log.freeze().await.expect("freeze");
        assert_eq!((frozen.size, frozen.frozen), (5, true), "{fault:?}");
        assert_eq!(storage.load_state().await.unwrap(), Some(frozen));
        assert_eq!(log.add(entry(9)).await, Err(AddError::Frozen));
        let again = log.add(entry(3)).await.expect("a duplicate");
        assert_eq!((again.index, again.duplicate), (3, true));
        log.shutdown();
        tasks.join().await;
        assert_eq!(check(&storage, &cfg).await.state, frozen);
        assert_eq!(logged(&storage, &cfg).await.len(), 5);
    }
}

/// What a forward does wrong, once ([`ToLog`]).
enum ForwardFault {
    /// The connection is refused: nothing reaches the other frontend.
    Unsent,
    /// Delivered and answered there, but the answer is lost on the way back.
    AnswerLost,
}

type ObjectFrontend = Log<objects::ObjectLog<objects::memory::MemoryObjects>>;

/// Forwards to another frontend's [`Log::add_forwarded`] in this process, as the
/// daemon's HTTP forwarder does over the network.
#[derive(Default)]
struct ToLog {
    to: Mutex<Option<ObjectFrontend>>,
    faults: Mutex<std::collections::VecDeque<ForwardFault>>,
    forwarded: std::sync::atomic::AtomicU64,
}

impl Forwarder for ToLog {
    fn target(&self) -> &str {
        "in-process"
    }
    fn forward(
        &self,
        entries: Vec<Bytes>,
    ) -> BoxFuture<'_, Result<Vec<ForwardedOutcome>, ForwardError>> {
        Box::pin(async move {
            let fault = self.faults.lock().unwrap().pop_front();
            let to = self.to.lock().unwrap().clone();
            let (Some(to), false) = (to, matches!(fault, Some(ForwardFault::Unsent))) else {
                return Err(ForwardError::Unsent("connection refused".into()));
            };
            self.forwarded
                .fetch_add(entries.len() as u64, Ordering::Relaxed);
            let outcomes = to.add_forwarded(entries).await;
            match fault {
                Some(ForwardFault::AnswerLost) => Err(ForwardError::Unknown("reset".into())),
                _ => Ok(outcomes),
            }
        })
    }
}

/// A frontend forwarding to `to` (set later when `None`), with its own dedup index.
async fn forwarding_frontend(
    store: &objects::memory::MemoryObjects,
    to: Option<ObjectFrontend>,
) -> (ObjectFrontend, LogTasks, Arc<ToLog>) {
    let forwarder = Arc::new(ToLog::default());
    *forwarder.to.lock().unwrap() = to;
    let mut cfg = config();
    cfg.forward = Some(forwarder.clone());
    let index = Arc::new(MapIndex::default());
    let (log, tasks) = Log::open(object_log(store).await, Some(index), cfg)
        .await
        .unwrap();
    caught_up(&log).await;
    (log, tasks, forwarder)
}

/// A frontend committing by itself, with its own dedup index.
async fn sequencing_frontend(store: &objects::memory::MemoryObjects) -> (ObjectFrontend, LogTasks) {
    let index = Arc::new(MapIndex::default());
    let (log, tasks) = Log::open(object_log(store).await, Some(index), config())
        .await
        .unwrap();
    caught_up(&log).await;
    (log, tasks)
}

/// Wait until a frontend opened on a store others wrote has indexed what they
/// committed: until then it pushes back adds its index cannot tell are new.
async fn caught_up(log: &ObjectFrontend) {
    for _ in 0..2000 {
        if log.dedup_lag() == 0 {
            return;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    panic!("the dedup index did not catch up with the store");
}

/// Every entry of an object-store log, in index order.
async fn logged_objects(store: &objects::memory::MemoryObjects) -> Vec<Vec<u8>> {
    let mut seen = Vec::new();
    let mut visit = |_: u64, e: &[u8]| seen.push(e.to_vec());
    check_log(
        &*object_log(store).await,
        ORIGIN,
        &config().verifier(),
        Some(&mut visit),
    )
    .await
    .expect("log checks out");
    seen
}

/// A forwarding frontend's adds are sequenced by the frontend it forwards to: each
/// answered with its own index, none committed by the forwarding frontend itself, and
/// duplicates found by the sequencing frontend's index whichever frontend took them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forwarding_frontend_has_its_adds_sequenced_by_the_other() {
    let store = objects::memory::MemoryObjects::new();
    let (a, tasks_a) = sequencing_frontend(&store).await;
    let (b, tasks_b, forwarder) = forwarding_frontend(&store, Some(a.clone())).await;
    let mut adds = Vec::new();
    for i in 0..40u64 {
        let log = if i % 2 == 0 { a.clone() } else { b.clone() };
        adds.push(tokio::spawn(async move { (i, log.add(entry(i)).await) }));
    }
    let mut at = HashMap::new();
    for add in adds {
        let (i, outcome) = add.await.unwrap();
        let outcome = outcome.expect("every add is answered");
        assert!(!outcome.duplicate);
        assert!(at.insert(outcome.index, i).is_none(), "index given twice");
    }
    assert_eq!(at.len(), 40);
    assert_eq!(forwarder.forwarded.load(Ordering::Relaxed), 20);
    assert_eq!(
        b.committed_size(),
        0,
        "the forwarding frontend committed nothing"
    );
    // Logged through a, sent again to b (and the other way): a's index answers both.
    let index_of = |i: u64| at.iter().find(|(_, e)| **e == i).map(|(x, _)| *x);
    for i in [2u64, 3] {
        let dup = b.add(entry(i)).await.unwrap();
        assert_eq!((dup.index, dup.duplicate), (index_of(i).unwrap(), true));
    }
    for (log, tasks) in [(b, tasks_b), (a, tasks_a)] {
        log.shutdown();
        tasks.join().await;
    }
    let log = logged_objects(&store).await;
    assert_eq!(log.len(), 40);
    for (index, i) in at {
        assert_eq!(log[index as usize], entry(i).to_vec());
    }
}

/// A forward that cannot reach the other frontend is committed here; one delivered
/// whose answer is lost is answered "uncertain", and its resubmission, forwarded
/// again, is found by the other frontend's index: logged once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_forward_is_committed_here_and_a_lost_answer_is_logged_once() {
    let store = objects::memory::MemoryObjects::new();
    let (a, tasks_a) = sequencing_frontend(&store).await;
    assert_eq!(a.add(entry(0)).await.unwrap().index, 0);

    let (b, tasks_b, to_a) = forwarding_frontend(&store, Some(a.clone())).await;
    to_a.faults
        .lock()
        .unwrap()
        .push_back(ForwardFault::AnswerLost);
    assert_eq!(b.add(entry(1)).await, Err(AddError::Uncertain));
    let again = b.add(entry(1)).await.unwrap();
    assert_eq!((again.index, again.duplicate), (1, true));
    assert_eq!(b.committed_size(), 1, "b committed nothing since it opened");

    let (c, tasks_c, to_a) = forwarding_frontend(&store, Some(a.clone())).await;
    to_a.faults.lock().unwrap().push_back(ForwardFault::Unsent);
    assert_eq!(c.add(entry(2)).await.unwrap().index, 2);
    assert_eq!(
        c.committed_size(),
        3,
        "committed by the frontend that took it"
    );
    // Paused: the next add is committed here too, without trying to forward.
    assert_eq!(c.add(entry(3)).await.unwrap().index, 3);
    assert_eq!(to_a.forwarded.load(Ordering::Relaxed), 0);
    for (log, tasks) in [(c, tasks_c), (b, tasks_b), (a, tasks_a)] {
        log.shutdown();
        tasks.join().await;
    }
    let want: Vec<Vec<u8>> = (0..4).map(|i| entry(i).to_vec()).collect();
    assert_eq!(logged_objects(&store).await, want);
}

/// Two frontends told to forward to each other (a configuration mistake) do not
/// bounce entries: what one was forwarded it commits itself.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn frontends_forwarding_to_each_other_commit_what_they_were_forwarded() {
    let store = objects::memory::MemoryObjects::new();
    let (a, tasks_a, to_b) = forwarding_frontend(&store, None).await;
    let (b, tasks_b, to_a) = forwarding_frontend(&store, Some(a.clone())).await;
    *to_b.to.lock().unwrap() = Some(b.clone());
    let mut adds = Vec::new();
    for i in 0..20u64 {
        let log = if i % 2 == 0 { a.clone() } else { b.clone() };
        adds.push(tokio::spawn(async move { log.add(entry(i)).await }));
    }
    let mut indices = Vec::new();
    for add in adds {
        indices.push(add.await.unwrap().expect("answered").index);
    }
    indices.sort_unstable();
    assert_eq!(indices, (0..20).collect::<Vec<u64>>());
    // A batch holding entries it was forwarded is committed where it is, with the
    // frontend's own entries queued beside them.
    let forwarded = to_a.forwarded.load(Ordering::Relaxed) + to_b.forwarded.load(Ordering::Relaxed);
    assert!(forwarded <= 20);
    for (log, tasks) in [(a, tasks_a), (b, tasks_b)] {
        log.shutdown();
        tasks.join().await;
    }
    let mut log = logged_objects(&store).await;
    log.sort();
    let mut want: Vec<Vec<u8>> = (0..20).map(|i| entry(i).to_vec()).collect();
    want.sort();
    assert_eq!(log, want);
}

/// Pacing bounds the commit rate, not a lone writer's latency: with an interval of an
/// hour, a writer adding one entry after another is answered at once each time, since
/// every batch holds every writer the engine knows of.
#[tokio::test]
async fn paced_commits_never_keep_a_lone_writer_waiting() {
    let storage = Arc::new(MemoryStorage::new());
    let mut cfg = config();
    cfg.min_commit_interval = Duration::from_secs(3600);
    let (log, tasks) = Log::open(storage.clone(), None, cfg.clone()).await.unwrap();
    let adds = async {
        for i in 0..5 {
            assert_eq!(log.add(entry(i)).await.map(|o| o.index), Ok(i));
        }
    };
    tokio::time::timeout(Duration::from_secs(60), adds)
        .await
        .expect("a lone writer waited on the commit interval");
    log.shutdown();
    tasks.join().await;
    assert_eq!(check(&storage, &cfg).await.state.size, 5);
}

/// A batch smaller than the writers waiting when the last commit ended waits for the
/// rest, until the interval since that commit's start has passed.
#[tokio::test]
async fn a_paced_batch_waits_for_the_writers_it_knows_of() {
    let storage = Arc::new(MemoryStorage::new());
    let mut cfg = config();
    let interval = Duration::from_millis(200);
    cfg.min_commit_interval = interval;
    let (log, tasks) = Log::open(storage.clone(), None, cfg.clone()).await.unwrap();
    let t0 = Instant::now();
    // Three writers at once (one batch on this single-threaded runtime), then one.
    let three = futures_util::future::join_all((0..3).map(|i| log.add(entry(i)))).await;
    assert!(three.iter().all(|r| r.is_ok()), "{three:?}");
    assert_eq!(log.add(entry(3)).await.map(|o| o.index), Ok(3));
    assert!(t0.elapsed() >= interval, "{:?}", t0.elapsed());
    log.shutdown();
    tasks.join().await;
    assert_eq!(check(&storage, &cfg).await.state.size, 4);
}

#[test]
fn pacing_holds_a_batch_only_below_the_known_writers_and_within_the_interval() {
    let ms = Duration::from_millis;
    let t = Instant::now();
    let mut pace = Pace::default();
    // Nothing committed yet: never held.
    assert_eq!(pace.hold(1, ms(1), t), None);
    pace.last = Some((t, 10));
    pace.note_waiting(|| 5);
    assert_eq!(pace.known_waiting, Some(15));
    // Counted once per commit, when the integrator first looks after it.
    pace.note_waiting(|| 100);
    assert_eq!(pace.known_waiting, Some(15));
    assert_eq!(pace.hold(5, ms(1), t + ms(0)), Some((t + ms(1), 15)));
    assert_eq!(pace.hold(14, ms(1), t + ms(0)), Some((t + ms(1), 15)));
    assert_eq!(pace.hold(15, ms(1), t), None, "every known writer is back");
    assert_eq!(
        pace.hold(5, ms(1), t + ms(1)),
        None,
        "the interval has passed"
    );
    assert_eq!(pace.hold(5, Duration::ZERO, t), None, "pacing off");
}
