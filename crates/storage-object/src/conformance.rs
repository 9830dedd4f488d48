//! The conformance suite of the object-store backends (feature `conformance`), run by
//! the S3 crate's tests on MinIO and the GCS crate's on the emulator: each implements
//! [`ObjectServer`] for its private test server and invokes
//! [`object_conformance_tests!`](crate::object_conformance_tests). Driven by core's real engine and ObjectLog
//! against a real server, through the real adapter.
//!
//! It runs the suite every backend runs (`tlogd_core::conformance`: byte-identical to
//! the Go reference logs, the largest bundle, compare-and-swap between frontends, two
//! engines racing on one bucket, a checkpoint that never goes backwards), then what is
//! particular to object stores: conditional writes with exactly one winner, the HTTP
//! metadata of each class of object, key prefixes, the origin check, and, through
//! Toxiproxy, a store outage, connection resets and cut answers mid-load with no
//! acknowledged entry lost, and two frontends, one losing the answers to its swaps
//! while the other commits on top, with no entry logged twice.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::testsupport::toxiproxy::{Stream, Toxiproxy};
use crate::{ClientTuning, ObjectStoreBackend, open_log};
use bytes::Bytes;
use tlogd_core::conformance::{ConformanceStore, ORIGIN, add_in_order, check_entries, config};
use tlogd_core::engine::checker::check_log;
use tlogd_core::engine::objects::{
    ObjectBackend, ObjectClass, ObjectLog, ObjectLogOptions, ObjectOpenError, PutCondition,
    PutOutcome,
};
use tlogd_core::engine::{AddError, Log, LogStorage, StorageError};
use tlogd_core::note::NoteSigner;

/// A private test server of one object store.
pub trait ObjectServer: Send + Sync + 'static {
    /// The server shared by the tests of this process (started on first use).
    fn shared() -> &'static Self;
    /// A new empty bucket named after `name`; its name.
    fn fresh_bucket(&self, name: &str) -> String;
    /// The server's TCP port on 127.0.0.1.
    fn port(&self) -> u16;
    /// A backend on `bucket` below `prefix`, reached at 127.0.0.1:`port` (the server's
    /// own port, or a proxy's in front of it), with `client` settings.
    fn backend_via(
        &self,
        port: u16,
        bucket: &str,
        prefix: &str,
        client: ClientTuning,
    ) -> ObjectStoreBackend;
}

/// One `#[tokio::test]` per conformance test, for server `$s`, each bounded in time.
#[macro_export]
macro_rules! object_conformance_tests {
    ($s:ty) => {
        // The suite every backend runs.
        mod core_conformance {
            use super::*;
            tlogd_core::conformance_tests!(
                $crate::conformance::ObjectStores<$s>,
                $crate::conformance::ObjectStores::<$s>::default()
            );
        }
        $crate::object_conformance_tests!(@ $s, multi_thread:
            conditional_writes_have_exactly_one_winner,
            objects_carry_their_class_metadata_and_prefixes_separate_logs,
            reopening_works_and_another_log_is_refused,
            a_store_outage_mid_load_loses_no_acknowledged_entry,
            connection_resets_and_cut_answers_lose_no_acknowledged_entry,
            answers_lost_while_another_frontend_commits_log_nothing_twice);
    };
    (@ $s:ty, multi_thread: $($name:ident),*) => {$(
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $name() {
            $crate::conformance::bounded($crate::conformance::$name::<$s>()).await
        }
    )*};
}

/// Run a test body, failing it (never hanging) after five minutes.
pub async fn bounded(test: impl std::future::Future<Output = ()>) {
    // RUST_LOG=tlogd_core=debug shows the engine's retries and the adapter's errors.
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_test_writer()
        .try_init();
    if tokio::time::timeout(Duration::from_secs(300), test)
        .await
        .is_err()
    {
        panic!("the test did not finish within 5 minutes");
    }
}

/// The shared server, started off the async threads.
async fn server<S: ObjectServer>() -> &'static S {
    tokio::task::spawn_blocking(S::shared)
        .await
        .unwrap_or_else(|e| panic!("starting the test server: {e}"))
}

async fn fresh<S: ObjectServer>(name: &str) -> (&'static S, String) {
    let s = server::<S>().await;
    let name = name.to_string();
    let bucket = tokio::task::spawn_blocking(move || s.fresh_bucket(&name))
        .await
        .unwrap_or_else(|e| panic!("creating a bucket: {e}"));
    (s, bucket)
}

/// The object store as a [`ConformanceStore`]: a fresh bucket per test on the shared
/// server; every handle is another frontend on it.
pub struct ObjectStores<S>(std::marker::PhantomData<S>);

impl<S> Default for ObjectStores<S> {
    fn default() -> Self {
        ObjectStores(std::marker::PhantomData)
    }
}

impl<S: ObjectServer> ConformanceStore for ObjectStores<S> {
    type Storage = ObjectLog<ObjectStoreBackend>;

    async fn fresh(&self, name: &str) -> String {
        fresh::<S>(name).await.1
    }

    async fn open(&self, location: &str) -> Arc<ObjectLog<ObjectStoreBackend>> {
        open(backend(server::<S>().await, location)).await
    }

    fn shared(&self) -> bool {
        true
    }
}

fn backend<S: ObjectServer>(s: &S, bucket: &str) -> ObjectStoreBackend {
    s.backend_via(s.port(), bucket, "", ClientTuning::default())
}

/// Settings that open a connection per request, so that Toxiproxy's toxics (which
/// pick connections) hit requests rather than a few long-lived pooled connections.
fn connection_per_request() -> ClientTuning {
    ClientTuning {
        pool_max_idle_per_host: 0,
        ..ClientTuning::default()
    }
}

pub async fn open(b: ObjectStoreBackend) -> Arc<ObjectLog<ObjectStoreBackend>> {
    Arc::new(
        open_log(b, ORIGIN, ObjectLogOptions::default())
            .await
            .unwrap_or_else(|e| panic!("opening the log: {e}")),
    )
}

/// The log over any backend (a wrapped one, say), with `options`.
async fn open_with<B: ObjectBackend>(b: B, options: ObjectLogOptions) -> Arc<ObjectLog<B>> {
    Arc::new(
        ObjectLog::open(b, ORIGIN, options)
            .await
            .unwrap_or_else(|e| panic!("opening the log: {e}")),
    )
}

pub async fn conditional_writes_have_exactly_one_winner<S: ObjectServer>() {
    // 8 writers race on one key with the same condition, 20 rounds: one write takes
    // effect per round, the others are told their condition failed, and the object
    // holds the winner's bytes.
    let (s, bucket) = fresh::<S>("race").await;
    let backends: Vec<Arc<ObjectStoreBackend>> =
        (0..8).map(|_| Arc::new(backend(s, &bucket))).collect();
    let key = ".tlogd/race";
    let mut current: Option<tlogd_core::engine::objects::ObjectVersion> = None;
    for round in 0..20 {
        let mut tasks = Vec::new();
        for (w, b) in backends.iter().enumerate() {
            let b = b.clone();
            let condition = match &current {
                None => PutCondition::Absent,
                Some(v) => PutCondition::Matches(v.clone()),
            };
            let bytes = Bytes::from(format!("round {round} writer {w}"));
            tasks.push(tokio::spawn(async move {
                let out = b
                    .put_if(key, bytes.clone(), ObjectClass::Private, condition)
                    .await;
                (bytes, out)
            }));
        }
        let mut winners = Vec::new();
        for t in tasks {
            let (bytes, out) = t.await.unwrap();
            match out.unwrap_or_else(|e| panic!("round {round}: {e}")) {
                PutOutcome::Written(v) => winners.push((bytes, v)),
                PutOutcome::ConditionFailed => {}
            }
        }
        assert_eq!(winners.len(), 1, "round {round}: {} winners", winners.len());
        let (bytes, version) = winners.pop().unwrap();
        let (stored, stored_version) = backends[0].get_versioned(key).await.unwrap().unwrap();
        assert_eq!(stored, bytes, "round {round}");
        assert_eq!(stored_version, version, "round {round}");
        current = Some(version);
    }
}

pub async fn objects_carry_their_class_metadata_and_prefixes_separate_logs<S: ObjectServer>() {
    use object_store::{Attribute, GetOptions};
    let (s, bucket) = fresh::<S>("meta").await;
    let one = open(s.backend_via(s.port(), &bucket, "logs/one", ClientTuning::default())).await;
    let (log, tasks) = Log::open(one.clone(), None, config(16)).await.unwrap();
    add_in_order(
        &log,
        (0..300).map(|i| Bytes::from(format!("m{i}"))).collect(),
        0,
    )
    .await;
    log.shutdown();
    tasks.join().await;
    let blob = ObjectClass::Blob {
        content_type: "application/pkix-cert",
    };
    one.put_blob("issuer/ab", b"cert", "application/pkix-cert")
        .await
        .unwrap();
    let raw = s.backend_via(s.port(), &bucket, "", ClientTuning::default());
    for (key, class) in [
        ("logs/one/issuer/ab", blob),
        ("logs/one/checkpoint", ObjectClass::Checkpoint),
        ("logs/one/tile/0/000", ObjectClass::Tile),
        ("logs/one/tile/entries/001.p/44", ObjectClass::Tile),
        ("logs/one/.tlogd/state", ObjectClass::Private),
    ] {
        let got = raw
            .store()
            .get_opts(&key.into(), GetOptions::default())
            .await
            .unwrap_or_else(|e| panic!("{key}: {e}"));
        let a = &got.attributes;
        assert_eq!(
            a.get(&Attribute::ContentType).map(|v| v.as_ref()),
            Some(class.content_type()),
            "{key}"
        );
        assert_eq!(
            a.get(&Attribute::CacheControl).map(|v| v.as_ref()),
            Some(class.cache_control()),
            "{key}"
        );
    }
    // The partials of completed tiles are cleaned up in the background.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let partials = raw.list("logs/one/tile/0/000.p/").await.unwrap();
        if partials.is_empty() {
            break;
        }
        assert!(Instant::now() < deadline, "partials left: {partials:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // Another prefix of the same bucket is another log.
    let two = open(s.backend_via(s.port(), &bucket, "logs/two", ClientTuning::default())).await;
    assert_eq!(two.load_state().await.unwrap(), None);
    assert_eq!(one.load_state().await.unwrap().map(|st| st.size), Some(300));
    assert_eq!(
        check_entries(&*one, |i| Some(format!("m{i}").into_bytes())).await,
        300
    );
}

pub async fn reopening_works_and_another_log_is_refused<S: ObjectServer>() {
    let (s, bucket) = fresh::<S>("reopen").await;
    let storage = open(backend(s, &bucket)).await;
    let (log, tasks) = Log::open(storage.clone(), None, config(16)).await.unwrap();
    for i in 0..40u32 {
        log.add(Bytes::from(format!("m{i}"))).await.unwrap();
    }
    log.shutdown();
    tasks.join().await;
    let state = storage.load_state().await.unwrap().unwrap();
    assert_eq!(state.size, 40);
    let again = open(backend(s, &bucket)).await;
    assert_eq!(again.load_state().await.unwrap(), Some(state));
    assert_eq!(check_entries(&*again, |_| None).await, 40);
    match open_log(
        backend(s, &bucket),
        "example.com/other",
        ObjectLogOptions::default(),
    )
    .await
    {
        Err(e @ ObjectOpenError::OriginMismatch { .. }) => {
            let msg = e.to_string();
            assert!(
                msg.contains("example.com/other") && msg.contains(ORIGIN),
                "{msg}"
            );
        }
        Err(e) => panic!("expected an origin mismatch, got {e}"),
        Ok(_) => panic!("expected an origin mismatch, the log opened"),
    }
    // A bucket that does not exist is an error naming the operation, not a hang.
    let missing = backend(s, "no-such-bucket-tlogd");
    match open_log(missing, ORIGIN, ObjectLogOptions::default()).await {
        Err(e) => {
            let msg = e.to_string();
            assert!(msg.contains("put_if") || msg.contains("get"), "{msg}");
        }
        Ok(_) => panic!("a missing bucket opened"),
    }
}

/// Adds from `workers` tasks until stopped, recording every acknowledged index.
struct Load {
    acked: Arc<Mutex<HashMap<u64, Vec<u8>>>>,
    /// Entries answered "not logged" (500): they must not be in the log.
    not_logged: Arc<Mutex<Vec<Vec<u8>>>>,
    failed: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
    workers: Vec<tokio::task::JoinHandle<()>>,
}

impl Load {
    fn start<St: LogStorage>(log: &Log<St>, workers: usize, tag: &str) -> Load {
        let acked: Arc<Mutex<HashMap<u64, Vec<u8>>>> = Arc::default();
        let not_logged: Arc<Mutex<Vec<Vec<u8>>>> = Arc::default();
        let failed = Arc::new(AtomicU64::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let handles = (0..workers)
            .map(|w| {
                let (log, acked, not_logged, failed, stop) = (
                    log.clone(),
                    acked.clone(),
                    not_logged.clone(),
                    failed.clone(),
                    stop.clone(),
                );
                let tag = tag.to_string();
                tokio::spawn(async move {
                    let mut i = 0u64;
                    while !stop.load(Ordering::Relaxed) {
                        let entry = format!("{tag} worker {w} entry {i}").into_bytes();
                        i += 1;
                        match log.add(Bytes::from(entry.clone())).await {
                            Ok(out) => {
                                let prev = acked.lock().unwrap().insert(out.index, entry);
                                assert!(prev.is_none(), "index {} handed out twice", out.index);
                            }
                            Err(e) => {
                                if matches!(e, AddError::Storage(_)) {
                                    not_logged.lock().unwrap().push(entry);
                                }
                                failed.fetch_add(1, Ordering::Relaxed);
                                tokio::time::sleep(Duration::from_millis(20)).await;
                            }
                        }
                    }
                })
            })
            .collect();
        Load {
            acked,
            not_logged,
            failed,
            stop,
            workers: handles,
        }
    }

    fn count(&self) -> usize {
        self.acked.lock().unwrap().len()
    }

    /// Wait until `n` more adds than now are acknowledged.
    async fn wait_more(&self, n: usize, what: &str) {
        let want = self.count() + n;
        let deadline = Instant::now() + Duration::from_secs(60);
        while self.count() < want {
            assert!(
                Instant::now() < deadline,
                "{what}: only {} of {want} adds acknowledged ({} failed)",
                self.count(),
                self.failed.load(Ordering::Relaxed)
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// [`Load::stop`], and the entries answered "not logged".
    async fn stop_all(self) -> (HashMap<u64, Vec<u8>>, Vec<Vec<u8>>) {
        let not_logged = self.not_logged.clone();
        let acked = self.stop().await;
        let not_logged = not_logged.lock().unwrap().clone();
        (acked, not_logged)
    }

    async fn stop(self) -> HashMap<u64, Vec<u8>> {
        self.stop.store(true, Ordering::Relaxed);
        for w in self.workers {
            w.await.unwrap();
        }
        let acked = self.acked.lock().unwrap().clone();
        eprintln!(
            "{} adds acknowledged, {} failed",
            acked.len(),
            self.failed.load(Ordering::Relaxed)
        );
        acked
    }
}

async fn toxiproxy() -> Toxiproxy {
    tokio::task::spawn_blocking(Toxiproxy::start)
        .await
        .unwrap_or_else(|e| panic!("starting Toxiproxy: {e}"))
}

/// Every acknowledged entry is in the log, at its index, and the log checks out: read
/// directly from the server (not through the proxy).
async fn check_acked<S: ObjectServer>(s: &S, bucket: &str, acked: &HashMap<u64, Vec<u8>>) {
    let direct = open(backend(s, bucket)).await;
    let size = check_entries(&*direct, |i| acked.get(&i).cloned()).await;
    assert!(
        acked.keys().all(|&i| i < size),
        "an acknowledged index is beyond the tree of size {size}"
    );
}

/// [`check_acked`], and every entry once at most: an entry answered "not logged" is
/// not in the log, and none is there twice (every entry a [`Load`] adds is unique).
async fn check_logged_once<S: ObjectServer>(
    s: &S,
    bucket: &str,
    acked: &HashMap<u64, Vec<u8>>,
    not_logged: &[Vec<u8>],
) {
    check_acked(s, bucket, acked).await;
    let direct = open(backend(s, bucket)).await;
    let verifier = NoteSigner::from_skey(tlogd_core::conformance::SKEY)
        .expect("test key")
        .verifier();
    let mut seen: HashMap<Vec<u8>, u64> = HashMap::new();
    let mut twice = Vec::new();
    let mut visit = |i: u64, e: &[u8]| {
        if let Some(first) = seen.insert(e.to_vec(), i) {
            twice.push((first, i));
        }
    };
    check_log(&*direct, ORIGIN, &verifier, Some(&mut visit))
        .await
        .expect("the whole-log check");
    assert!(
        twice.is_empty(),
        "{} entries logged twice, e.g. at {:?}",
        twice.len(),
        &twice[..twice.len().min(5)]
    );
    let logged: Vec<&Vec<u8>> = not_logged
        .iter()
        .filter(|e| seen.contains_key(*e))
        .collect();
    assert!(
        logged.is_empty(),
        "{} entries answered \"not logged\" are in the log",
        logged.len()
    );
}

/// Two frontends on one bucket, both taking adds. Every 1.5 s the answers to
/// frontend A's requests are held 300 ms, then cut on half of its connections: A's
/// swaps of the state land while B commits on top, and A never hears back. (Measured on main
/// before the fix: 255 entries logged twice in 30 s.) Every acknowledged entry is in
/// the log at its index, no entry is there twice, and none answered "not logged" is.
pub async fn answers_lost_while_another_frontend_commits_log_nothing_twice<S: ObjectServer>() {
    let (s, bucket) = fresh::<S>("lost").await;
    let proxy = toxiproxy().await;
    let port = proxy.proxy("a", s.port());
    let counting = Counting::new(s.backend_via(port, &bucket, "", connection_per_request()));
    let swap_errors = counting.swap_errors.clone();
    let errors = counting.errors.clone();
    // Without turns (`turn` zero), so that B commits whenever it has entries, as every
    // frontend did before turns: the interleaving this test is about. (Turns make it
    // rarer: B then commits on top of A only once A has been silent for a while.)
    let racing = ObjectLogOptions {
        turn: Duration::ZERO,
        ..ObjectLogOptions::default()
    };
    let a_storage = open_with(counting, racing.clone()).await;
    let b_storage = open_with(backend(s, &bucket), racing).await;
    let (a, a_tasks) = Log::open(a_storage, None, config(64)).await.unwrap();
    let (b, b_tasks) = Log::open(b_storage, None, config(64)).await.unwrap();
    let load_a = Load::start(&a, 16, "a");
    load_a.wait_more(100, "A before the faults").await;
    // Every 1.5 s, for 300 ms, the answers to A are held (toxics act in the order
    // added), and then half of them are cut after their first byte; meanwhile B adds a
    // burst of entries. A swap of A's in flight lands, B reads it, commits on top,
    // and A never hears back. (B adds only then: B busy all along starves A of every
    // race, without turns.)
    let mut acked_b = HashMap::new();
    let mut not_logged_b = Vec::new();
    // Until five swaps lost their answer; on two loaded cores that can take longer
    // than a minute (once: three in 60 s), so up to two, and at least three must.
    let until = Instant::now() + Duration::from_secs(120);
    let mut round = 0u64;
    while swap_errors.load(Ordering::Relaxed) < 5 && Instant::now() < until {
        proxy.add_toxic(
            "a",
            "held",
            "latency",
            Stream::Downstream,
            1.0,
            serde_json::json!({ "latency": 300 }),
        );
        proxy.add_toxic(
            "a",
            "cut",
            "limit_data",
            Stream::Downstream,
            0.5,
            serde_json::json!({ "bytes": 1 }),
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
        let burst: Vec<_> = (0..8)
            .map(|i| {
                let entry = format!("b round {round} entry {i}").into_bytes();
                let b = b.clone();
                tokio::spawn(async move { (b.add(Bytes::from(entry.clone())).await, entry) })
            })
            .collect();
        for add in burst {
            match add.await.unwrap() {
                (Ok(out), entry) => {
                    assert!(acked_b.insert(out.index, entry).is_none());
                }
                (Err(AddError::Storage(_)), entry) => not_logged_b.push(entry),
                (Err(_), _) => {}
            }
        }
        round += 1;
        tokio::time::sleep(Duration::from_millis(250)).await;
        proxy.remove_toxic("a", "cut");
        proxy.remove_toxic("a", "held");
        tokio::time::sleep(Duration::from_millis(1200)).await;
    }
    let lost = swap_errors.load(Ordering::Relaxed);
    eprintln!(
        "{lost} swaps of A's state lost their answer ({} failed requests of A; adds: A {} acknowledged, {} failed; B {})",
        errors.load(Ordering::Relaxed),
        load_a.count(),
        load_a.failed.load(Ordering::Relaxed),
        acked_b.len()
    );
    assert!(
        lost >= 3,
        "only {lost} swaps lost their answer in 120 s: the faults did not bite"
    );
    load_a.wait_more(100, "A after the faults").await;
    let (mut acked, mut not_logged) = load_a.stop_all().await;
    for (i, e) in acked_b {
        assert!(
            acked.insert(i, e).is_none(),
            "index {i} given to both frontends"
        );
    }
    not_logged.extend(not_logged_b);
    a.shutdown();
    b.shutdown();
    a_tasks.join().await;
    b_tasks.join().await;
    check_logged_once(s, &bucket, &acked, &not_logged).await;
}

pub async fn a_store_outage_mid_load_loses_no_acknowledged_entry<S: ObjectServer>() {
    let (s, bucket) = fresh::<S>("outage").await;
    let proxy = toxiproxy().await;
    let port = proxy.proxy("store", s.port());
    let storage = open(s.backend_via(port, &bucket, "", ClientTuning::default())).await;
    let (log, tasks) = Log::open(storage.clone(), None, config(64)).await.unwrap();
    let load = Load::start(&log, 16, "outage");
    for round in 0..2 {
        load.wait_more(300, "before the outage").await;
        // The store is unreachable for a while: connections are cut, new ones refused.
        proxy.set_enabled("store", false);
        tokio::time::sleep(Duration::from_millis(1500)).await;
        assert!(storage.check_writable().await.is_err(), "round {round}");
        proxy.set_enabled("store", true);
        // The same engine recovers by itself.
        load.wait_more(300, "after the outage").await;
    }
    let acked = load.stop().await;
    log.shutdown();
    tasks.join().await;
    check_acked(s, &bucket, &acked).await;
}

pub async fn connection_resets_and_cut_answers_lose_no_acknowledged_entry<S: ObjectServer>() {
    let (s, bucket) = fresh::<S>("resets").await;
    let proxy = toxiproxy().await;
    let port = proxy.proxy("store", s.port());
    let counting = Counting::new(s.backend_via(port, &bucket, "", connection_per_request()));
    let errors = counting.errors.clone();
    let storage = open_with(counting, ObjectLogOptions::default()).await;
    let (log, tasks) = Log::open(storage.clone(), None, config(64)).await.unwrap();
    let load = Load::start(&log, 16, "resets");
    load.wait_more(200, "before the faults").await;
    // Half the connections (one per request here) are reset (RST) 3 ms after they
    // open: requests die before, while or after the store acts on them.
    proxy.add_toxic(
        "store",
        "resets",
        "reset_peer",
        Stream::Upstream,
        0.5,
        serde_json::json!({ "timeout": 3 }),
    );
    tokio::time::sleep(Duration::from_millis(2500)).await;
    proxy.remove_toxic("store", "resets");
    load.wait_more(200, "after the resets").await;
    // Answers cut after their first 100 bytes on a third of the connections: writes
    // that took effect but whose success was never seen ("fail but persist").
    proxy.add_toxic(
        "store",
        "cut",
        "limit_data",
        Stream::Downstream,
        0.33,
        serde_json::json!({ "bytes": 100 }),
    );
    tokio::time::sleep(Duration::from_millis(2500)).await;
    proxy.remove_toxic("store", "cut");
    load.wait_more(200, "after the cut answers").await;
    let acked = load.stop().await;
    let errors = errors.load(Ordering::Relaxed);
    eprintln!("{errors} failed store requests");
    assert!(
        errors >= 10,
        "only {errors} store requests failed: the faults did not bite"
    );
    log.shutdown();
    tasks.join().await;
    check_acked(s, &bucket, &acked).await;
}

/// A backend that counts its failed calls, and among them the swaps of the state.
struct Counting<B> {
    inner: B,
    errors: Arc<AtomicU64>,
    swap_errors: Arc<AtomicU64>,
}

impl<B: ObjectBackend> Counting<B> {
    fn new(inner: B) -> Self {
        Counting {
            inner,
            errors: Arc::default(),
            swap_errors: Arc::default(),
        }
    }

    fn count<T>(&self, r: Result<T, StorageError>) -> Result<T, StorageError> {
        if r.is_err() {
            self.errors.fetch_add(1, Ordering::Relaxed);
        }
        r
    }
}

impl<B: ObjectBackend> ObjectBackend for Counting<B> {
    fn backend_name(&self) -> &'static str {
        self.inner.backend_name()
    }
    async fn get(&self, key: &str) -> Result<Option<Bytes>, StorageError> {
        self.count(self.inner.get(key).await)
    }
    async fn get_versioned(
        &self,
        key: &str,
    ) -> Result<Option<(Bytes, tlogd_core::engine::objects::ObjectVersion)>, StorageError> {
        self.count(self.inner.get_versioned(key).await)
    }
    async fn put(&self, key: &str, bytes: Bytes, class: ObjectClass) -> Result<(), StorageError> {
        self.count(self.inner.put(key, bytes, class).await)
    }
    async fn put_if(
        &self,
        key: &str,
        bytes: Bytes,
        class: ObjectClass,
        condition: PutCondition,
    ) -> Result<PutOutcome, StorageError> {
        let r = self.inner.put_if(key, bytes, class, condition).await;
        if r.is_err() && key == tlogd_core::engine::objects::STATE_KEY {
            self.swap_errors.fetch_add(1, Ordering::Relaxed);
        }
        self.count(r)
    }
    async fn delete(&self, key: &str) -> Result<(), StorageError> {
        self.count(self.inner.delete(key).await)
    }
    async fn list(&self, prefix: &str) -> Result<Vec<String>, StorageError> {
        self.count(self.inner.list(prefix).await)
    }
}
