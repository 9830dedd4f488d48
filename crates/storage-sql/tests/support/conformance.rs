//! The conformance suite of the SQL backends (MySQL/MariaDB and PostgreSQL), shared by
//! their tests through `#[path]`: each backend implements [`SqlBackend`] for its
//! private test server and invokes [`sql_conformance_tests!`]. Driven by the real
//! engine against a real server: byte-identical to the Go reference logs,
//! compare-and-swap between frontends, the sequencing lock, two engines racing, schema
//! and origin checks, a checkpoint that never goes backwards, the largest bundle, no
//! acknowledged entry lost when the server is killed, TLS verified and refused.

use std::collections::HashMap;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use tlogd_core::bundle::append_entry;
use tlogd_core::engine::checker::{CheckpointWatch, check_log_observed};
use tlogd_core::engine::{CommitBatch, Log, LogStorage, StorageError, TreeState};
use tlogd_core::hash::leaf_hash;
use tlogd_core::merkle::TileTree;
use tlogd_core::note::NoteSigner;
use tlogd_core::tile::TileId;
use tlogd_storage_sql::{OpenError, SCHEMA_VERSION, SqlOptions};

use crate::backend::{ORIGIN, SKEY, add_in_order, config, files};
use crate::vectors_dir::vectors;

/// A private test server of one SQL backend.
pub trait TestServer: Send + Sync + 'static {
    /// The URL of database `db` (empty: none).
    fn url(&self, db: &str) -> String;
    /// A new empty database; its URL.
    fn fresh_database(&self, prefix: &str) -> impl Future<Output = String> + Send;
    /// The TCP port on 127.0.0.1.
    fn port(&self) -> u16;
    /// Kill the server.
    fn stop(&self);
    /// Start it again on the same data.
    fn restart(&self);
    /// The CA of a server started with TLS.
    fn tls_ca(&self) -> Option<PathBuf>;
}

/// One SQL backend under test.
pub trait SqlBackend: Send + Sync + 'static {
    /// The storage type.
    type Storage: LogStorage;
    /// Its private test server.
    type Server: TestServer;
    /// The server shared by the tests of this process.
    fn shared() -> &'static Self::Server;
    /// A server of the test's own (one it may kill).
    fn start() -> Self::Server;
    /// A server of the test's own serving TLS.
    fn start_tls() -> Self::Server;
    /// `Storage::connect`.
    fn connect(
        url: &str,
        origin: &str,
        opts: SqlOptions,
    ) -> impl Future<Output = Result<Self::Storage, OpenError>> + Send;
    /// Close the pool.
    fn close(s: &Self::Storage) -> impl Future<Output = ()> + Send;
    /// Take the sequencing lock.
    fn lock_sequencer(s: &Self::Storage) -> impl Future<Output = Result<(), StorageError>> + Send;
    /// Release the sequencing lock.
    fn unlock_sequencer(s: &Self::Storage) -> impl Future<Output = ()> + Send;
    /// Record a migration of a newer, compatible release in `tlogd_migrations`.
    const FUTURE_MIGRATION: &'static str;
    /// Run a statement without parameters; panics on failure.
    fn execute(s: &Self::Storage, sql: &str) -> impl Future<Output = ()> + Send;
    /// Make the server refuse writes (or accept them again), as a replica would.
    fn set_read_only(s: &Self::Storage, on: bool) -> impl Future<Output = ()> + Send;
    /// The URL of `url` over TLS, verifying the server against `ca`.
    fn tls_url(url: &str, ca: &Path) -> String;
    /// The TLS cipher of a pooled connection ("" when not encrypted).
    fn tls_cipher(s: &Self::Storage) -> impl Future<Output = String> + Send;
}

/// One `#[tokio::test]` per conformance test, for backend `$b`.
#[macro_export]
macro_rules! sql_conformance_tests {
    ($b:ty) => {
        $crate::sql_conformance_tests!(@ $b, current_thread:
            every_intermediate_state_of_the_small_log_matches,
            seventy_thousand_entries_in_batches_of_4096_match_the_go_reference,
            seventy_thousand_entries_in_irregular_batches_match_the_go_reference);
        $crate::sql_conformance_tests!(@ $b, default:
            a_commit_on_a_stale_state_conflicts_and_leaves_nothing_visible,
            the_largest_possible_bundle_round_trips,
            the_sequencing_lock_is_exclusive_per_database,
            reopening_works_and_a_foreign_or_future_database_is_refused,
            read_tiles_answers_like_read_tile_in_one_query);
        $crate::sql_conformance_tests!(@ $b, multi_thread:
            two_engines_on_one_database_sequence_without_forking,
            the_checkpoint_never_goes_backwards,
            no_acknowledged_add_is_lost_when_the_server_is_killed,
            tls_connections_verify_the_server_certificate);
    };
    (@ $b:ty, current_thread: $($name:ident),*) => {$(
        #[tokio::test(flavor = "current_thread")]
        async fn $name() {
            conformance::$name::<$b>().await
        }
    )*};
    (@ $b:ty, default: $($name:ident),*) => {$(
        #[tokio::test]
        async fn $name() {
            conformance::$name::<$b>().await
        }
    )*};
    (@ $b:ty, multi_thread: $($name:ident),*) => {$(
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $name() {
            conformance::$name::<$b>().await
        }
    )*};
}

pub fn options() -> SqlOptions {
    SqlOptions {
        connect_timeout: Duration::from_secs(3),
        tile_cache_bytes: 8 << 20,
        ..SqlOptions::default()
    }
}

pub async fn open<B: SqlBackend>(url: &str) -> Arc<B::Storage> {
    Arc::new(B::connect(url, ORIGIN, options()).await.unwrap())
}

pub async fn fresh<B: SqlBackend>(name: &str) -> String {
    B::shared().fresh_database(name).await
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

/// Check the whole log and that every entry is `want(index)`.
pub async fn check_entries<S: LogStorage>(
    s: &Arc<S>,
    want: impl Fn(u64) -> Option<Vec<u8>>,
) -> u64 {
    check_entries_observed(s, &[], want).await
}

/// [`check_entries`], also checking every checkpoint in `observed` (its root, and the
/// partial tiles it names: every width a checkpoint named stays readable).
pub async fn check_entries_observed<S: LogStorage>(
    s: &Arc<S>,
    observed: &[tlogd_core::checkpoint::Checkpoint],
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
    let report = check_log_observed(&**s, ORIGIN, &verifier, observed, Some(&mut visit))
        .await
        .unwrap();
    assert!(
        bad.is_empty(),
        "entries differ at {:?}",
        &bad[..bad.len().min(10)]
    );
    report.state.size
}

pub async fn every_intermediate_state_of_the_small_log_matches<B: SqlBackend>() {
    let v = vectors().join("tessera-testdata-log");
    let words =
        "one two three four five six seven eit nain ten ileven twelf threeten fourten fivten";
    let storage = open::<B>(&fresh::<B>("small").await).await;
    assert_eq!(storage.load_state().await.unwrap(), None, "fresh log");
    let (log, tasks) = Log::open(storage.clone(), None, config(1)).await.unwrap();
    let wait_checkpoint = |n: u64| {
        let log = log.clone();
        async move {
            let deadline = Instant::now() + Duration::from_secs(10);
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
        // Only the newest width is stored: every earlier partial is served by
        // truncating it, and must match the reference byte for byte.
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
        // A partial wider than the tree is not served.
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
async fn seventy_thousand<B: SqlBackend>(name: &str, sizes: &[usize]) {
    let want_dir = vectors().join("tessera-70k");
    let url = fresh::<B>(name).await;
    let entries: Vec<Bytes> = (0..70_000)
        .map(|i| Bytes::from(format!("entry {i}")))
        .collect();
    let half = 33_333;
    let mut next = 0usize;
    let mut cycle = sizes.iter().cycle();
    for end in [half, entries.len()] {
        // Each chunk is pushed whole before the integrator runs: one batch per chunk.
        let storage = open::<B>(&url).await;
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
        B::close(&storage).await;
    }
    let storage = open::<B>(&url).await;
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

pub async fn seventy_thousand_entries_in_batches_of_4096_match_the_go_reference<B: SqlBackend>() {
    seventy_thousand::<B>("b4096", &[4096]).await;
}

pub async fn seventy_thousand_entries_in_irregular_batches_match_the_go_reference<B: SqlBackend>() {
    // Batches that end on, just before and just after tile boundaries, and spans
    // crossing several tiles and a level-1 tile.
    seventy_thousand::<B>(
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

pub async fn a_commit_on_a_stale_state_conflicts_and_leaves_nothing_visible<B: SqlBackend>() {
    let url = fresh::<B>("cas").await;
    let a = open::<B>(&url).await;
    let b = open::<B>(&url).await;
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
    for s in [&a, &b] {
        assert_eq!(s.load_state().await.unwrap(), Some(first_next));
        let mut want = Vec::new();
        append_entry(&mut want, b"a0").unwrap();
        append_entry(&mut want, b"a1").unwrap();
        assert_eq!(
            s.read_tile(&TileId::entries(0, 2)).await.unwrap(),
            Some(want.clone())
        );
        assert_eq!(s.read_tile(&TileId::entries(0, 3)).await.unwrap(), None);
        assert_eq!(s.read_tile(&TileId::hash(0, 0, 3)).await.unwrap(), None);
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
    // B, rebuilt on the current state, commits.
    let next = batch(&mut ta, &mut ba, &[b"b0"]);
    let next_state = next.next;
    b.commit(next).await.unwrap();
    assert_eq!(a.load_state().await.unwrap(), Some(next_state));
    assert_eq!(check_entries(&a, |_| None).await, 3);
}

pub async fn the_largest_possible_bundle_round_trips<B: SqlBackend>() {
    // 256 entries of 65,535 bytes: a 16,777,472-byte bundle, beyond a MEDIUMBLOB and a
    // 16 MiB packet.
    let url = fresh::<B>("large").await;
    let s = open::<B>(&url).await;
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
    s.commit(CommitBatch {
        prev: TreeState::empty(),
        next,
        tiles,
    })
    .await
    .unwrap();
    let big_cache = SqlOptions {
        tile_cache_bytes: 64 << 20,
        ..options()
    };
    let other = B::connect(&url, ORIGIN, big_cache).await.unwrap();
    assert_eq!(other.load_state().await.unwrap(), Some(next));
    assert!(other.read_tile(&TileId::entries(0, 256)).await.unwrap() == Some(bundle.clone()));
    // From the cache this time (the pool is closed), and truncated.
    B::close(&other).await;
    assert!(other.load_state().await.is_err(), "the pool is closed");
    assert!(other.read_tile(&TileId::entries(0, 256)).await.unwrap() == Some(bundle.clone()));
    assert!(
        other.read_tile(&TileId::entries(0, 3)).await.unwrap()
            == Some(bundle[..3 * 65_537].to_vec())
    );
    assert_eq!(
        check_entries(&s, |i| Some(entries[i as usize].clone())).await,
        256
    );
}

pub async fn the_sequencing_lock_is_exclusive_per_database<B: SqlBackend>() {
    let url = fresh::<B>("seq").await;
    let quick = SqlOptions {
        lock_timeout: Duration::from_secs(1),
        ..options()
    };
    let a = B::connect(&url, ORIGIN, quick.clone()).await.unwrap();
    let b = B::connect(&url, ORIGIN, quick.clone()).await.unwrap();
    let elsewhere = B::connect(&fresh::<B>("seq_other").await, ORIGIN, quick)
        .await
        .unwrap();
    B::lock_sequencer(&a).await.unwrap();
    let started = Instant::now();
    let e = B::lock_sequencer(&b).await.unwrap_err();
    assert!(e.to_string().contains("sequencing lock"), "{e}");
    assert!(started.elapsed() >= Duration::from_millis(900));
    // Another database's log has a lock of its own.
    B::lock_sequencer(&elsewhere).await.unwrap();
    B::unlock_sequencer(&elsewhere).await;
    B::unlock_sequencer(&a).await;
    B::lock_sequencer(&b).await.unwrap();
    B::unlock_sequencer(&b).await;
    // Unlocking twice is harmless.
    B::unlock_sequencer(&b).await;
}

pub async fn two_engines_on_one_database_sequence_without_forking<B: SqlBackend>() {
    let url = fresh::<B>("two").await;
    let mut logs = Vec::new();
    let mut all_tasks = Vec::new();
    for _ in 0..2 {
        let (log, tasks) = Log::open(open::<B>(&url).await, None, config(64))
            .await
            .unwrap();
        logs.push(log);
        all_tasks.push(tasks);
    }
    let verifier = NoteSigner::from_skey(SKEY).unwrap().verifier();
    let watch = CheckpointWatch::start(open::<B>(&url).await, ORIGIN, &verifier);
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
    // Every checkpoint either frontend published on the way, with its partials.
    let observed = watch.stop().await.unwrap();
    assert!(observed.len() > 1, "{} checkpoints seen", observed.len());
    let storage = open::<B>(&url).await;
    let size = check_entries_observed(&storage, &observed, |i| acked.get(&i).cloned()).await;
    assert_eq!(size, n);
}

pub async fn reopening_works_and_a_foreign_or_future_database_is_refused<B: SqlBackend>() {
    let url = fresh::<B>("meta").await;
    let storage = open::<B>(&url).await;
    let (log, tasks) = Log::open(storage.clone(), None, config(16)).await.unwrap();
    for i in 0..40u32 {
        log.add(Bytes::from(format!("m{i}"))).await.unwrap();
    }
    log.shutdown();
    tasks.join().await;
    let state = storage.load_state().await.unwrap().unwrap();
    assert_eq!(state.size, 40);
    B::close(&storage).await;

    // Reopening sees the state and the log.
    let again = open::<B>(&url).await;
    assert_eq!(again.load_state().await.unwrap(), Some(state));
    assert_eq!(check_entries(&again, |_| None).await, 40);

    // Another log's database.
    match B::connect(&url, "example.com/other", options()).await {
        Err(e @ OpenError::OriginMismatch { .. }) => {
            let msg = e.to_string();
            assert!(
                msg.contains("example.com/other") && msg.contains(ORIGIN),
                "{msg}"
            );
        }
        other => panic!("expected an origin mismatch, got {:?}", other.err()),
    }

    // A migration of a newer, compatible release is tolerated.
    B::execute(&again, B::FUTURE_MIGRATION).await;
    let compatible = open::<B>(&url).await;
    assert_eq!(compatible.load_state().await.unwrap(), Some(state));

    // A schema upgraded beyond this release's compatibility is refused, clearly.
    B::execute(
        &again,
        &format!(
            "UPDATE tlogd_meta SET schema_version = {} WHERE id = 1",
            SCHEMA_VERSION + 1
        ),
    )
    .await;
    match B::connect(&url, ORIGIN, options()).await {
        Err(e @ OpenError::SchemaTooNew { .. }) => {
            let msg = e.to_string();
            assert!(msg.contains("upgrade tlogd"), "{msg}");
        }
        other => panic!("expected a schema refusal, got {:?}", other.err()),
    }

    // Not a database at all.
    match B::connect(&B::shared().url(""), ORIGIN, options()).await {
        Err(OpenError::NoDatabase) => {}
        other => panic!("expected NoDatabase, got {:?}", other.err()),
    }
    match B::connect(&B::shared().url("no_such_db"), ORIGIN, options()).await {
        Err(e @ OpenError::Connect { .. }) => assert!(!e.to_string().contains("@127.0.0.1"), "{e}"),
        other => panic!("expected a connect error, got {:?}", other.err()),
    }
}

fn fake_checkpoint(size: u64, tag: &str) -> Vec<u8> {
    format!("{ORIGIN}\n{size}\nroot-{tag}\n\n— sig {tag}\n").into_bytes()
}

pub async fn the_checkpoint_never_goes_backwards<B: SqlBackend>() {
    let url = fresh::<B>("checkpoint").await;
    let s = open::<B>(&url).await;
    assert_eq!(s.read_checkpoint().await.unwrap(), None);
    s.publish_checkpoint(&fake_checkpoint(10, "ten"))
        .await
        .unwrap();
    s.publish_checkpoint(&fake_checkpoint(5, "five"))
        .await
        .unwrap();
    assert_eq!(
        s.read_checkpoint().await.unwrap(),
        Some(fake_checkpoint(10, "ten"))
    );
    s.publish_checkpoint(&fake_checkpoint(11, "eleven"))
        .await
        .unwrap();
    assert_eq!(
        s.read_checkpoint().await.unwrap(),
        Some(fake_checkpoint(11, "eleven"))
    );
    // Frontends publishing concurrently, in any order: the largest wins.
    let other = open::<B>(&url).await;
    let mut tasks = Vec::new();
    for size in (12..60u64).rev() {
        let st = if size % 2 == 0 {
            s.clone()
        } else {
            other.clone()
        };
        tasks.push(tokio::spawn(async move {
            st.publish_checkpoint(&fake_checkpoint(size, &size.to_string()))
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
    assert!(s.publish_checkpoint(b"no size line").await.is_err());
    s.check_writable().await.unwrap();
}

pub async fn no_acknowledged_add_is_lost_when_the_server_is_killed<B: SqlBackend>() {
    // A server of its own: this test kills it.
    let db = Arc::new(tokio::task::spawn_blocking(B::start).await.unwrap());
    let url = db.fresh_database("crash").await;
    let storage = open::<B>(&url).await;
    let (log, tasks) = Log::open(storage.clone(), None, config(32)).await.unwrap();
    let acked: Arc<Mutex<HashMap<u64, Vec<u8>>>> = Arc::default();
    let failed = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut workers = Vec::new();
    for w in 0..4 {
        let (log, acked, failed, stop) = (log.clone(), acked.clone(), failed.clone(), stop.clone());
        workers.push(tokio::spawn(async move {
            let mut i = 0u64;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let e = format!("worker {w} entry {i}").into_bytes();
                i += 1;
                match log.add(Bytes::from(e.clone())).await {
                    Ok(out) => {
                        assert!(acked.lock().unwrap().insert(out.index, e).is_none());
                    }
                    Err(_) => {
                        failed.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        tokio::time::sleep(Duration::from_millis(20)).await;
                    }
                }
            }
        }));
    }
    let wait_acks = |n: usize| {
        let acked = acked.clone();
        async move {
            let deadline = Instant::now() + Duration::from_secs(60);
            while acked.lock().unwrap().len() < n {
                assert!(
                    Instant::now() < deadline,
                    "only {} acks",
                    acked.lock().unwrap().len()
                );
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
    };
    for round in 0..2 {
        let before = acked.lock().unwrap().len();
        wait_acks(before + 200).await;
        // Crash mid-stream, stay down a moment, come back.
        let d = db.clone();
        tokio::task::spawn_blocking(move || d.stop()).await.unwrap();
        assert!(
            std::net::TcpStream::connect(("127.0.0.1", db.port())).is_err(),
            "the server is still up"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
        let d = db.clone();
        tokio::task::spawn_blocking(move || d.restart())
            .await
            .unwrap();
        // The same engine keeps going: more adds are acknowledged.
        let after = acked.lock().unwrap().len();
        wait_acks(after + 200).await;
        eprintln!(
            "round {round}: {} acks, {} failed adds",
            acked.lock().unwrap().len(),
            failed.load(std::sync::atomic::Ordering::Relaxed)
        );
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    for w in workers {
        w.await.unwrap();
    }
    log.shutdown();
    tasks.join().await;
    // Every acknowledged index holds the bytes sent, in a log that checks out.
    let acked = acked.lock().unwrap().clone();
    let reopened = open::<B>(&url).await;
    let size = check_entries(&reopened, |i| acked.get(&i).cloned()).await;
    assert!(
        acked.keys().all(|&i| i < size),
        "an acked index is beyond the tree"
    );
    // Every entry sent was distinct, so none may be in the log twice: a batch retried
    // across the restart after it had in fact committed would be.
    let mut seen: HashMap<Vec<u8>, u64> = HashMap::new();
    let mut twice = Vec::new();
    let mut visit = |i: u64, e: &[u8]| {
        if let Some(first) = seen.insert(e.to_vec(), i) {
            twice.push((first, i));
        }
    };
    let verifier = NoteSigner::from_skey(SKEY).unwrap().verifier();
    check_log_observed(&*reopened, ORIGIN, &verifier, &[], Some(&mut visit))
        .await
        .unwrap();
    assert!(twice.is_empty(), "entries logged twice, at {twice:?}");
    for (i, e) in &acked {
        assert_eq!(seen.get(e), Some(i), "acknowledged entry {i}");
    }
    // The probe sees a read-only server.
    B::set_read_only(&reopened, true).await;
    assert!(reopened.check_writable().await.is_err());
    B::set_read_only(&reopened, false).await;
    reopened.check_writable().await.unwrap();
}

pub async fn tls_connections_verify_the_server_certificate<B: SqlBackend>() {
    let db = B::start_tls();
    let ca = db.tls_ca().unwrap();
    let url = db.fresh_database("tls").await;
    let tls_url = B::tls_url(&url, &ca);
    let storage = Arc::new(B::connect(&tls_url, ORIGIN, options()).await.unwrap());
    let (log, tasks) = Log::open(storage.clone(), None, config(16)).await.unwrap();
    add_in_order(
        &log,
        (0..40).map(|i| Bytes::from(format!("tls {i}"))).collect(),
        0,
    )
    .await;
    log.shutdown();
    tasks.join().await;
    let cipher = B::tls_cipher(&storage).await;
    assert!(!cipher.is_empty(), "the connection is not encrypted");
    assert_eq!(check_entries(&storage, |_| None).await, 40);
    // A server whose certificate does not chain to the given CA is refused.
    let wrong_ca = ca.with_file_name("server-cert.pem");
    let bad = B::tls_url(&url, &wrong_ca);
    match B::connect(&bad, ORIGIN, options()).await {
        Ok(_) => panic!("connected with an untrusted server certificate"),
        Err(e) => {
            let msg = format!("{e}");
            assert!(
                msg.contains("certificate") || msg.contains("ssuer"),
                "{msg}"
            );
        }
    }
}

pub async fn read_tiles_answers_like_read_tile_in_one_query<B: SqlBackend>() {
    let url = fresh::<B>("read_tiles").await;
    let storage = open::<B>(&url).await;
    let (log, tasks) = Log::open(storage.clone(), None, config(64)).await.unwrap();
    add_in_order(
        &log,
        (0..600).map(|i| Bytes::from(format!("rt {i}"))).collect(),
        0,
    )
    .await;
    log.shutdown();
    tasks.join().await;
    use tlogd_core::tile::TileId;
    let ids = [
        TileId::hash(0, 0, 256),
        TileId::hash(0, 2, 50),
        TileId::hash(0, 2, 88),
        TileId::hash(0, 2, 89),
        TileId::entries(1, 256),
        TileId::entries(2, 10),
        TileId::hash(1, 0, 2),
        TileId::hash(0, 7, 1),
    ];
    // The expected bytes, computed from the entries without the store: `read_tile`
    // is itself answered through `read_tiles`, so comparing the two would compare a
    // function with itself.
    let entries: Vec<Vec<u8>> = (0..600).map(|i| format!("rt {i}").into_bytes()).collect();
    let mut tree = TileTree::empty();
    let mut tiles = Vec::new();
    let leaves: Vec<_> = entries.iter().map(|e| leaf_hash(e)).collect();
    tree.append(&leaves, &mut tiles);
    let mut newest: HashMap<(tlogd_core::tile::TileKind, u64), (u16, Vec<u8>)> = HashMap::new();
    for (id, bytes) in tiles {
        newest.insert((id.kind, id.index), (id.width, bytes));
    }
    for (n, chunk) in entries.chunks(256).enumerate() {
        let mut bundle = Vec::new();
        for e in chunk {
            append_entry(&mut bundle, e).unwrap();
        }
        newest.insert(
            (tlogd_core::tile::TileKind::Entries, n as u64),
            (chunk.len() as u16, bundle),
        );
    }
    let expected = |id: &TileId| -> Option<Vec<u8>> {
        let (stored, bytes) = newest.get(&(id.kind, id.index))?;
        tlogd_core::tile::tile_prefix(id.kind, bytes, *stored, id.width).map(<[u8]>::to_vec)
    };
    let want: Vec<Option<Vec<u8>>> = ids.iter().map(expected).collect();
    assert!(want[3].is_none() && want[7].is_none());
    assert_eq!(want.iter().filter(|b| b.is_some()).count(), 6);
    // A fresh connection (nothing cached), then again with the full tiles cached; and
    // one at a time through `read_tile`.
    let fresh_storage = open::<B>(&url).await;
    for _ in 0..2 {
        let batched = fresh_storage.read_tiles(&ids).await.unwrap();
        assert_eq!(batched.len(), ids.len());
        for ((id, got), want) in ids.iter().zip(&batched).zip(&want) {
            assert_eq!(got, want, "read_tiles: {}", id.path());
            assert_eq!(
                &storage.read_tile(id).await.unwrap(),
                want,
                "read_tile: {}",
                id.path()
            );
        }
    }
}
