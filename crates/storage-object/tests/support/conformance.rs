//! The conformance suite of the object-store backends, shared by the MinIO and GCS
//! emulator tests: each implements [`ObjectServer`] for its private test server and
//! invokes [`object_conformance_tests!`]. Driven by core's real engine and ObjectLog
//! against a real server, through the real adapter: byte-identical to the Go reference
//! logs, compare-and-swap between frontends, conditional writes with exactly one
//! winner, two engines racing on one bucket, a checkpoint that never goes backwards,
//! the largest bundle, and, through Toxiproxy, a store outage, connection resets and
//! cut answers mid-load with no acknowledged entry lost.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use tlogd_core::bundle::append_entry;
use tlogd_core::engine::checker::check_log;
use tlogd_core::engine::objects::{
    ObjectBackend, ObjectClass, ObjectLog, ObjectLogOptions, ObjectOpenError, PutCondition,
    PutOutcome,
};
use tlogd_core::engine::{CommitBatch, Log, LogStorage, StorageError, TreeState};
use tlogd_core::hash::leaf_hash;
use tlogd_core::merkle::TileTree;
use tlogd_core::note::NoteSigner;
use tlogd_core::tile::TileId;
use tlogd_storage_object::testsupport::toxiproxy::{Stream, Toxiproxy};
use tlogd_storage_object::{ClientTuning, ObjectStoreBackend, open_log};

use crate::backend::{ORIGIN, SKEY, add_in_order, config, files};
use crate::vectors_dir::vectors;

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
        $crate::object_conformance_tests!(@ $s, current_thread:
            every_intermediate_state_of_the_small_log_matches,
            seventy_thousand_entries_in_batches_of_4096_match_the_go_reference,
            seventy_thousand_entries_in_irregular_batches_match_the_go_reference);
        $crate::object_conformance_tests!(@ $s, multi_thread:
            a_commit_on_a_stale_state_conflicts_and_leaves_nothing_visible,
            conditional_writes_have_exactly_one_winner,
            objects_carry_their_class_metadata_and_prefixes_separate_logs,
            reopening_works_and_another_log_is_refused,
            the_largest_possible_bundle_round_trips,
            two_engines_on_one_bucket_sequence_without_forking,
            the_checkpoint_never_goes_backwards,
            a_store_outage_mid_load_loses_no_acknowledged_entry,
            connection_resets_and_cut_answers_lose_no_acknowledged_entry);
    };
    (@ $s:ty, current_thread: $($name:ident),*) => {$(
        #[tokio::test(flavor = "current_thread")]
        async fn $name() {
            conformance::bounded(conformance::$name::<$s>()).await
        }
    )*};
    (@ $s:ty, multi_thread: $($name:ident),*) => {$(
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $name() {
            conformance::bounded(conformance::$name::<$s>()).await
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

/// A vector file read back through the storage API.
async fn read_resource<S: LogStorage>(s: &Arc<S>, rel: &str) -> Option<Vec<u8>> {
    if rel == "checkpoint" {
        s.read_checkpoint().await.unwrap()
    } else {
        let id = TileId::parse(rel).unwrap_or_else(|e| panic!("{rel}: {e}"));
        s.read_tile(&id).await.unwrap()
    }
}

/// Check the whole log and that every entry is `want(index)`; the tree size.
pub async fn check_entries<S: LogStorage>(
    s: &Arc<S>,
    want: impl Fn(u64) -> Option<Vec<u8>>,
) -> u64 {
    let verifier = NoteSigner::from_skey(SKEY).unwrap().verifier();
    let mut bad = Vec::new();
    let mut visit = |i: u64, e: &[u8]| {
        if let Some(w) = want(i)
            && w != e
        {
            bad.push(i);
        }
    };
    let report = check_log(&**s, ORIGIN, &verifier, Some(&mut visit))
        .await
        .unwrap_or_else(|e| panic!("the log does not check out: {e}"));
    assert!(
        bad.is_empty(),
        "entries differ at {:?}",
        &bad[..bad.len().min(10)]
    );
    report.state.size
}

pub async fn every_intermediate_state_of_the_small_log_matches<S: ObjectServer>() {
    let v = vectors().join("tessera-testdata-log");
    let words =
        "one two three four five six seven eit nain ten ileven twelf threeten fourten fivten";
    let (s, bucket) = fresh::<S>("small").await;
    let storage = open(backend(s, &bucket)).await;
    assert_eq!(storage.load_state().await.unwrap(), None, "fresh log");
    let (log, tasks) = Log::open(storage.clone(), None, config(1)).await.unwrap();
    let wait_checkpoint = |n: u64| {
        let log = log.clone();
        async move {
            let deadline = Instant::now() + Duration::from_secs(20);
            while Instant::now() < deadline {
                if log.published_size() == Some(n) {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
            panic!("checkpoint {n} not published");
        }
    };
    wait_checkpoint(0).await;
    assert_eq!(
        storage.read_checkpoint().await.unwrap().unwrap(),
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
        let cp = storage.read_checkpoint().await.unwrap().unwrap();
        assert!(
            cp == std::fs::read(v.join(format!("checkpoint.{n}"))).unwrap(),
            "checkpoint at size {n}"
        );
        // Every batch (of one entry) leaves its right-edge partials: all of them are
        // still there, byte for byte the reference's.
        for k in 1..=n {
            for rel in [
                format!("tile/0/000.p/{k}"),
                format!("tile/entries/000.p/{k}"),
            ] {
                let got = read_resource(&storage, &rel).await;
                assert!(
                    got == Some(std::fs::read(v.join(&rel)).unwrap()),
                    "{rel} at size {n}"
                );
            }
        }
        for rel in [
            format!("tile/0/000.p/{}", n + 1),
            format!("tile/entries/000.p/{}", n + 1),
        ] {
            assert_eq!(
                read_resource(&storage, &rel).await,
                None,
                "{rel} at size {n}"
            );
        }
    }
    log.shutdown();
    tasks.join().await;
    assert_eq!(check_entries(&storage, |_| None).await, 15);
}

/// Append the 70,000 reference entries in batches of `sizes` (cycled), reopening the
/// storage and the engine halfway; then compare every file of the reference log.
async fn seventy_thousand<S: ObjectServer>(name: &str, sizes: &[usize]) {
    let want_dir = vectors().join("tessera-70k");
    let (s, bucket) = fresh::<S>(name).await;
    let entries: Vec<Bytes> = (0..70_000)
        .map(|i| Bytes::from(format!("entry {i}")))
        .collect();
    let half = 33_333;
    let mut next = 0usize;
    let mut cycle = sizes.iter().cycle();
    for end in [half, entries.len()] {
        // Each chunk is pushed whole before the integrator runs: one batch per chunk.
        let storage = open(backend(s, &bucket)).await;
        let (log, tasks) = Log::open(storage.clone(), None, config(1 << 16))
            .await
            .unwrap();
        while next < end {
            let n = (*cycle.next().unwrap()).min(end - next);
            add_in_order(&log, entries[next..next + n].to_vec(), next as u64).await;
            next += n;
        }
        log.shutdown();
        tasks.join().await;
    }
    let storage = open(backend(s, &bucket)).await;
    for f in files(&want_dir) {
        let rel = f.to_string_lossy();
        let got = read_resource(&storage, &rel)
            .await
            .unwrap_or_else(|| panic!("{name}: {rel} missing"));
        assert!(
            got == std::fs::read(want_dir.join(&f)).unwrap(),
            "{name}: {rel} differs from the Go reference"
        );
    }
    let size = check_entries(&storage, |i| Some(format!("entry {i}").into_bytes())).await;
    assert_eq!(size, 70_000);
}

pub async fn seventy_thousand_entries_in_batches_of_4096_match_the_go_reference<S: ObjectServer>() {
    seventy_thousand::<S>("b4096", &[4096]).await;
}

pub async fn seventy_thousand_entries_in_irregular_batches_match_the_go_reference<
    S: ObjectServer,
>() {
    // Batches that end on, just before and just after tile boundaries, and spans
    // crossing several tiles and a level-1 tile.
    seventy_thousand::<S>(
        "irregular",
        &[1, 255, 256, 1, 3000, 17, 511, 65_536, 4097, 2],
    )
    .await;
}

/// A batch of `entries` on top of `tree` (advanced), as the engine would build it.
fn batch(tree: &mut TileTree, bundle: &mut Vec<u8>, entries: &[&[u8]]) -> CommitBatch {
    let prev = TreeState {
        size: tree.size(),
        root: if tree.size() == 0 {
            TreeState::empty().root
        } else {
            tree.root()
        },
    };
    let mut tiles = Vec::new();
    let leaves: Vec<_> = entries.iter().map(|e| leaf_hash(e)).collect();
    tree.append(&leaves, &mut tiles);
    for e in entries {
        append_entry(bundle, e).unwrap();
    }
    let width = (tree.size() % 256) as u16;
    assert!(width > 0, "keep test batches inside the first bundle");
    tiles.push((TileId::entries(0, width), bundle.clone()));
    CommitBatch {
        prev,
        next: TreeState {
            size: tree.size(),
            root: tree.root(),
        },
        tiles,
    }
}

pub async fn a_commit_on_a_stale_state_conflicts_and_leaves_nothing_visible<S: ObjectServer>() {
    let (s, bucket) = fresh::<S>("cas").await;
    let a = open(backend(s, &bucket)).await;
    let b = open(backend(s, &bucket)).await;
    let (mut ta, mut ba) = (TileTree::empty(), Vec::new());
    let (mut tb, mut bb) = (TileTree::empty(), Vec::new());
    let first = batch(&mut ta, &mut ba, &[b"a0", b"a1"]);
    let first_next = first.next;
    a.commit(first).await.unwrap();
    // B builds on the empty tree it last saw.
    let stale = batch(&mut tb, &mut bb, &[b"b0", b"b1", b"b2"]);
    match b.commit(stale).await {
        Err(StorageError::Conflict { expected, found }) => {
            assert_eq!((expected, found), (0, 2));
        }
        other => panic!("expected a conflict, got {other:?}"),
    }
    // Nothing of B's batch is visible, from either frontend.
    for st in [&a, &b] {
        assert_eq!(st.load_state().await.unwrap(), Some(first_next));
        let mut want = Vec::new();
        append_entry(&mut want, b"a0").unwrap();
        append_entry(&mut want, b"a1").unwrap();
        assert_eq!(
            st.read_tile(&TileId::entries(0, 2)).await.unwrap(),
            Some(want.clone())
        );
        assert_eq!(st.read_tile(&TileId::entries(0, 3)).await.unwrap(), None);
        assert_eq!(st.read_tile(&TileId::hash(0, 0, 3)).await.unwrap(), None);
    }
    // Retrying the very same batch (an uncertain error that did persist) conflicts
    // too: the state already moved.
    let mut t2 = TileTree::empty();
    let mut b2 = Vec::new();
    let again = batch(&mut t2, &mut b2, &[b"a0", b"a1"]);
    assert!(matches!(
        a.commit(again).await,
        Err(StorageError::Conflict { .. })
    ));
    // B, rebuilt on the current state (it reloaded above), commits.
    let next = batch(&mut ta, &mut ba, &[b"b0"]);
    let next_state = next.next;
    b.commit(next).await.unwrap();
    assert_eq!(a.load_state().await.unwrap(), Some(next_state));
    assert_eq!(check_entries(&a, |_| None).await, 3);
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
    let raw = s.backend_via(s.port(), &bucket, "", ClientTuning::default());
    for (key, class) in [
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
        check_entries(&one, |i| Some(format!("m{i}").into_bytes())).await,
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
    assert_eq!(check_entries(&again, |_| None).await, 40);
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

pub async fn the_largest_possible_bundle_round_trips<S: ObjectServer>() {
    // 256 entries of 65,535 bytes: a 16,777,472-byte bundle (and a staged batch a bit
    // larger), in single PUTs.
    let (s, bucket) = fresh::<S>("large").await;
    let st = open(backend(s, &bucket)).await;
    let entries: Vec<Vec<u8>> = (0..256u32)
        .map(|i| vec![(i % 251) as u8 + 1; 65_535])
        .collect();
    let mut tree = TileTree::empty();
    let mut tiles = Vec::new();
    let leaves: Vec<_> = entries.iter().map(|e| leaf_hash(e)).collect();
    tree.append(&leaves, &mut tiles);
    let mut bundle = Vec::new();
    for e in &entries {
        append_entry(&mut bundle, e).unwrap();
    }
    assert_eq!(bundle.len(), 16_777_472);
    tiles.push((TileId::entries(0, 256), bundle.clone()));
    let next = TreeState {
        size: 256,
        root: tree.root(),
    };
    st.commit(CommitBatch {
        prev: TreeState::empty(),
        next,
        tiles,
    })
    .await
    .unwrap();
    let other = open(backend(s, &bucket)).await;
    assert_eq!(other.load_state().await.unwrap(), Some(next));
    assert!(other.read_tile(&TileId::entries(0, 256)).await.unwrap() == Some(bundle.clone()));
    assert_eq!(
        check_entries(&st, |i| Some(entries[i as usize].clone())).await,
        256
    );
}

pub async fn two_engines_on_one_bucket_sequence_without_forking<S: ObjectServer>() {
    let (s, bucket) = fresh::<S>("two").await;
    let mut logs = Vec::new();
    let mut all_tasks = Vec::new();
    for _ in 0..2 {
        let (log, tasks) = Log::open(open(backend(s, &bucket)).await, None, config(64))
            .await
            .unwrap();
        logs.push(log);
        all_tasks.push(tasks);
    }
    let acked: Arc<Mutex<HashMap<u64, Vec<u8>>>> = Arc::default();
    let mut workers = Vec::new();
    for w in 0..8usize {
        let log = logs[w % 2].clone();
        let acked = acked.clone();
        workers.push(tokio::spawn(async move {
            for i in 0..150 {
                let e = format!("frontend {} worker {w} entry {i}", w % 2).into_bytes();
                let out = log.add(Bytes::from(e.clone())).await.unwrap();
                let prev = acked.lock().unwrap().insert(out.index, e);
                assert!(prev.is_none(), "index {} handed out twice", out.index);
            }
        }));
    }
    for w in workers {
        w.await.unwrap();
    }
    for log in &logs {
        log.shutdown();
    }
    for t in all_tasks {
        t.join().await;
    }
    let acked = acked.lock().unwrap().clone();
    let n = acked.len() as u64;
    assert_eq!(n, 8 * 150);
    assert!(
        (0..n).all(|i| acked.contains_key(&i)),
        "indices not contiguous"
    );
    let storage = open(backend(s, &bucket)).await;
    let size = check_entries(&storage, |i| acked.get(&i).cloned()).await;
    assert_eq!(size, n);
}

fn fake_checkpoint(size: u64, tag: &str) -> Vec<u8> {
    format!("{ORIGIN}\n{size}\nroot-{tag}\n\n— sig {tag}\n").into_bytes()
}

pub async fn the_checkpoint_never_goes_backwards<S: ObjectServer>() {
    let (s, bucket) = fresh::<S>("checkpoint").await;
    let st = open(backend(s, &bucket)).await;
    assert_eq!(st.read_checkpoint().await.unwrap(), None);
    st.publish_checkpoint(&fake_checkpoint(10, "ten"))
        .await
        .unwrap();
    st.publish_checkpoint(&fake_checkpoint(5, "five"))
        .await
        .unwrap();
    assert_eq!(
        st.read_checkpoint().await.unwrap(),
        Some(fake_checkpoint(10, "ten"))
    );
    // Frontends publishing concurrently, in any order: the largest wins.
    let other = open(backend(s, &bucket)).await;
    let mut tasks = Vec::new();
    for size in (12..60u64).rev() {
        let target = if size % 2 == 0 {
            st.clone()
        } else {
            other.clone()
        };
        tasks.push(tokio::spawn(async move {
            target
                .publish_checkpoint(&fake_checkpoint(size, &size.to_string()))
                .await
                .unwrap()
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    assert_eq!(
        other.read_checkpoint().await.unwrap(),
        Some(fake_checkpoint(59, "59"))
    );
    assert!(st.publish_checkpoint(b"no size line").await.is_err());
    st.check_writable().await.unwrap();
}

/// Adds from `workers` tasks until stopped, recording every acknowledged index.
struct Load {
    acked: Arc<Mutex<HashMap<u64, Vec<u8>>>>,
    failed: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
    workers: Vec<tokio::task::JoinHandle<()>>,
}

impl Load {
    fn start<St: LogStorage>(log: &Log<St>, workers: usize, tag: &str) -> Load {
        let acked: Arc<Mutex<HashMap<u64, Vec<u8>>>> = Arc::default();
        let failed = Arc::new(AtomicU64::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let handles = (0..workers)
            .map(|w| {
                let (log, acked, failed, stop) =
                    (log.clone(), acked.clone(), failed.clone(), stop.clone());
                let tag = tag.to_string();
                tokio::spawn(async move {
                    let mut i = 0u64;
                    while !stop.load(Ordering::Relaxed) {
                        let e = format!("{tag} worker {w} entry {i}").into_bytes();
                        i += 1;
                        match log.add(Bytes::from(e.clone())).await {
                            Ok(out) => {
                                let prev = acked.lock().unwrap().insert(out.index, e);
                                assert!(prev.is_none(), "index {} handed out twice", out.index);
                            }
                            Err(_) => {
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
    let size = check_entries(&direct, |i| acked.get(&i).cloned()).await;
    assert!(
        acked.keys().all(|&i| i < size),
        "an acknowledged index is beyond the tree of size {size}"
    );
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
    let storage = Arc::new(
        ObjectLog::open(counting, ORIGIN, ObjectLogOptions::default())
            .await
            .unwrap_or_else(|e| panic!("opening the log: {e}")),
    );
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

/// A backend that counts its failed calls.
struct Counting<B> {
    inner: B,
    errors: Arc<AtomicU64>,
}

impl<B: ObjectBackend> Counting<B> {
    fn new(inner: B) -> Self {
        Counting {
            inner,
            errors: Arc::default(),
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
        self.count(self.inner.put_if(key, bytes, class, condition).await)
    }
    async fn delete(&self, key: &str) -> Result<(), StorageError> {
        self.count(self.inner.delete(key).await)
    }
    async fn list(&self, prefix: &str) -> Result<Vec<String>, StorageError> {
        self.count(self.inner.list(prefix).await)
    }
}
