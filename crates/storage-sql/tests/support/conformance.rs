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
use tlogd_core::conformance::ConformanceStore;
use tlogd_core::engine::checker::{check_log, check_log_observed};
use tlogd_core::engine::{CommitBatch, Log, LogStorage, StorageError, TreeState};
use tlogd_core::hash::leaf_hash;
use tlogd_core::merkle::TileTree;
use tlogd_core::note::NoteSigner;
use tlogd_core::tile::TileId;
use tlogd_storage_sql::faultproxy::FaultProxy;
use tlogd_storage_sql::{OpenError, SCHEMA_VERSION, SqlOptions};

use tlogd_core::conformance::{ORIGIN, SKEY, add_in_order, batch, config};

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
        // The suite every backend runs.
        mod core_conformance {
            use super::*;
            tlogd_core::conformance_tests!(
                conformance::SqlStores<$b>,
                conformance::SqlStores::<$b>::default()
            );
        }
        $crate::sql_conformance_tests!(@ $b, default:
            the_tile_cache_serves_the_largest_bundle,
            the_sequencing_lock_is_exclusive_per_database,
            reopening_works_and_a_foreign_or_future_database_is_refused,
            a_database_from_before_blobs_gains_their_table_when_opened,
            a_checkpoint_of_many_mldsa44_signatures_is_stored_whole,
            read_tiles_answers_like_read_tile_in_one_query);
        $crate::sql_conformance_tests!(@ $b, multi_thread:
            a_commit_whose_reply_is_lost_is_logged_once,
            a_commit_still_in_flight_when_read_back_is_logged_once,
            a_commit_in_flight_is_settled_before_its_error_returns,
            cut_and_slow_connections_under_load_lose_nothing,
            no_acknowledged_add_is_lost_when_the_server_is_killed,
            pooled_connections_idle_across_a_restart_are_replaced_unseen,
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

/// The SQL backend as a [`ConformanceStore`]: a fresh database per test on the shared
/// server.
pub struct SqlStores<B>(std::marker::PhantomData<B>);

impl<B> Default for SqlStores<B> {
    fn default() -> Self {
        SqlStores(std::marker::PhantomData)
    }
}

impl<B: SqlBackend> ConformanceStore for SqlStores<B> {
    type Storage = B::Storage;

    async fn fresh(&self, name: &str) -> String {
        fresh::<B>(name).await
    }

    async fn open(&self, location: &str) -> Arc<B::Storage> {
        open::<B>(location).await
    }

    async fn close(&self, storage: Arc<B::Storage>) {
        B::close(&storage).await
    }

    fn shared(&self) -> bool {
        true
    }
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

/// The largest bundle from a closed pool (the tile cache) and truncated.
pub async fn the_tile_cache_serves_the_largest_bundle<B: SqlBackend>() {
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
    let next = TreeState::new(256, tree.root());
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

/// A database written by a release before blobs (no `tlogd_blobs`, no record of its
/// migration) gets the table when opened, and keeps its log; keys differing only in
/// case are two blobs.
pub async fn a_database_from_before_blobs_gains_their_table_when_opened<B: SqlBackend>() {
    const CT: &str = "application/pkix-cert";
    let url = fresh::<B>("preblobs").await;
    let storage = open::<B>(&url).await;
    let (log, tasks) = Log::open(storage.clone(), None, config(16)).await.unwrap();
    add_in_order(
        &log,
        (0..20).map(|i| Bytes::from(format!("b{i}"))).collect(),
        0,
    )
    .await;
    log.shutdown();
    tasks.join().await;
    B::execute(&storage, "DROP TABLE tlogd_blobs").await;
    B::execute(&storage, "DELETE FROM tlogd_migrations WHERE version = 2").await;
    assert!(
        storage.read_blob("issuer/a").await.is_err(),
        "the table is gone"
    );
    B::close(&storage).await;
    let again = open::<B>(&url).await;
    assert_eq!(check_entries(&again, |_| None).await, 20);
    assert_eq!(again.read_blob("issuer/a").await.unwrap(), None);
    again.put_blob("issuer/a", b"lower", CT).await.unwrap();
    again.put_blob("issuer/A", b"upper", CT).await.unwrap();
    assert_eq!(
        again.read_blob("issuer/a").await.unwrap(),
        Some(b"lower".to_vec())
    );
    assert_eq!(
        again.read_blob("issuer/A").await.unwrap(),
        Some(b"upper".to_vec())
    );
    // The migration applied again over the table (its record lost, or two frontends
    // of two releases): IF NOT EXISTS keeps the table and its blobs.
    B::execute(&again, "DELETE FROM tlogd_migrations WHERE version = 2").await;
    B::close(&again).await;
    let third = open::<B>(&url).await;
    assert_eq!(
        third.read_blob("issuer/a").await.unwrap(),
        Some(b"lower".to_vec())
    );
}

/// A checkpoint of more than 64 KiB (the log's ML-DSA-44 line and 25 ML-DSA-44 witness
/// cosignatures, about 3.3 KB each) is stored and read back whole, also by a new
/// connection pool: MySQL's `tlogd_checkpoint.data` is a MEDIUMBLOB since migration
/// 0004 (a BLOB holds 65,535 bytes).
pub async fn a_checkpoint_of_many_mldsa44_signatures_is_stored_whole<B: SqlBackend>() {
    use tlogd_core::checkpoint::Checkpoint;
    use tlogd_core::mldsa::MlDsa44Signer;
    use tlogd_core::note::Note;
    let url = fresh::<B>("bigcheckpoint").await;
    let storage = open::<B>(&url).await;
    let log = MlDsa44Signer::from_seed(ORIGIN, &[1; 32]).unwrap();
    let cp = Checkpoint {
        origin: ORIGIN.to_string(),
        size: 0,
        root: tlogd_core::hash::empty_root(),
        extensions: vec![],
    };
    let text = cp.to_text();
    let mut note = Note::parse(&cp.sign_with(&[&log], 1_700_000_000_000).unwrap()).unwrap();
    for i in 0..25u8 {
        let w = MlDsa44Signer::from_seed(&format!("w{i}.witness.example"), &[i; 32]).unwrap();
        note.signatures
            .push(w.cosign(&text, 1_700_000_000 + u64::from(i)).unwrap());
    }
    let signed = note.to_bytes();
    assert!(signed.len() > 80_000, "{} bytes", signed.len());
    storage.publish_checkpoint(&signed).await.unwrap();
    assert_eq!(
        storage.read_checkpoint().await.unwrap(),
        Some(signed.clone())
    );
    B::close(&storage).await;
    let again = open::<B>(&url).await;
    assert_eq!(again.read_checkpoint().await.unwrap(), Some(signed));
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

/// The pools test a connection before use only once it has been idle a while (sqlx
/// tests it as it is released anyway): connections that sat in the pool while the
/// server restarted are found dead and replaced before any statement is sent, so the
/// first operations after the restart succeed. Without that test each would meet the
/// dead connections one attempt at a time and fail once its attempts ran out.
pub async fn pooled_connections_idle_across_a_restart_are_replaced_unseen<B: SqlBackend>() {
    // A server of its own: this test restarts it.
    let db = Arc::new(tokio::task::spawn_blocking(B::start).await.unwrap());
    let url = db.fresh_database("idle").await;
    let storage = open::<B>(&url).await;
    let first = batch(
        &mut TileTree::empty(),
        &mut Vec::new(),
        &[b"before the restart"],
    );
    storage.commit(first).await.unwrap();
    // Many connections open at once, then idle in the pool (more than an operation's
    // attempts).
    let mut readers = tokio::task::JoinSet::new();
    for _ in 0..12 {
        let s = storage.clone();
        readers.spawn(async move {
            for _ in 0..3 {
                s.load_state().await.unwrap();
            }
        });
    }
    readers.join_all().await;
    let d = db.clone();
    tokio::task::spawn_blocking(move || d.stop()).await.unwrap();
    let d = db.clone();
    tokio::task::spawn_blocking(move || d.restart())
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    // One at a time, so each meets the pool's idle connections.
    for i in 0..8 {
        let state = storage.load_state().await;
        assert!(
            matches!(&state, Ok(Some(s)) if s.size == 1),
            "state read {i} after the restart: {state:?}"
        );
    }
    assert!(storage.read_checkpoint().await.is_ok());
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

/// The storage behind a fault proxy on the shared server, and the proxy.
async fn behind_proxy<B: SqlBackend>(name: &str) -> (Arc<B::Storage>, FaultProxy) {
    let server = B::shared();
    let url = fresh::<B>(name).await;
    let proxy = FaultProxy::start(([127, 0, 0, 1], server.port()).into()).expect("fault proxy");
    let proxied = url.replacen(
        &format!(":{}/", server.port()),
        &format!(":{}/", proxy.port()),
        1,
    );
    assert_ne!(proxied, url, "the URL names the server's port");
    (open::<B>(&proxied).await, proxy)
}

/// Ten adds, then `middle` with the proxy `arm`ed so that its `COMMIT` meets the
/// fault (`fired` counts the faults), then one more: each is acknowledged once, at its
/// index, and logged once. No entry may contain "commit": the proxy finds the
/// `COMMIT` by that word.
async fn one_faulty_commit_is_logged_once<B: SqlBackend>(
    name: &str,
    middle: &str,
    arm: impl FnOnce(&FaultProxy),
    fired: impl Fn(&FaultProxy) -> u64,
) {
    let (storage, proxy) = behind_proxy::<B>(name).await;
    let (log, tasks) = Log::open(storage.clone(), None, config(16)).await.unwrap();
    for i in 0..10u64 {
        assert_eq!(
            log.add(Bytes::from(format!("before {i}")))
                .await
                .unwrap()
                .index,
            i
        );
    }
    arm(&proxy);
    let out = log.add(Bytes::from(middle.to_string())).await.unwrap();
    assert_eq!(fired(&proxy), 1, "the fault did not fire");
    assert_eq!(out.index, 10, "the faulty commit was logged again");
    let next = log.add(Bytes::from("after")).await.unwrap();
    assert_eq!(next.index, 11);
    log.shutdown();
    tasks.join().await;
    let want = |i: u64| {
        Some(match i {
            0..10 => format!("before {i}").into_bytes(),
            10 => middle.as_bytes().to_vec(),
            _ => b"after".to_vec(),
        })
    };
    assert_eq!(check_entries(&storage, want).await, 12);
}

/// A `COMMIT` that reaches the server while its reply is lost (the connection dies):
/// the engine learns from the stored state that the batch persisted, acknowledges it
/// once, and never appends it again.
pub async fn a_commit_whose_reply_is_lost_is_logged_once<B: SqlBackend>() {
    one_faulty_commit_is_logged_once::<B>(
        "lostreply",
        "the lost reply",
        FaultProxy::lose_next_commit_reply,
        FaultProxy::commits_lost,
    )
    .await;
}

/// A `COMMIT` still in flight when its connection drops: the engine reads the state
/// back before it reaches the server (the batch looks unlogged), then it commits. The
/// retry must find the batch in the tree, acknowledge it once, and not append it again
/// (a plain read cannot see a transaction that has not committed yet).
pub async fn a_commit_still_in_flight_when_read_back_is_logged_once<B: SqlBackend>() {
    one_faulty_commit_is_logged_once::<B>(
        "latecommit",
        "the late one",
        |proxy| proxy.deliver_next_commit_late(Duration::from_millis(500)),
        FaultProxy::commits_late,
    )
    .await;
}

/// A `COMMIT` still in flight when its connection drops (the proxy delivers it 500 ms
/// later) is settled before `commit` returns its error: the backend ends the session
/// that sent it, so the state read back at once is the final outcome. Before, the read
/// back found the batch absent and the late `COMMIT` then landed: an add answered "not
/// logged" was logged.
pub async fn a_commit_in_flight_is_settled_before_its_error_returns<B: SqlBackend>() {
    let (storage, proxy) = behind_proxy::<B>("settled").await;
    let mut tree = TileTree::empty();
    let mut tiles = Vec::new();
    tree.append(&[leaf_hash(b"late")], &mut tiles);
    let mut bundle = Vec::new();
    append_entry(&mut bundle, b"late").unwrap();
    tiles.push((TileId::entries(0, 1), bundle));
    let next = TreeState::new(1, tree.root());
    proxy.deliver_next_commit_late(Duration::from_millis(500));
    let out = storage
        .commit(CommitBatch {
            prev: TreeState::empty(),
            next,
            tiles,
        })
        .await;
    assert_eq!(proxy.commits_late(), 1, "the fault did not fire");
    match &out {
        Err(StorageError::Backend(m)) => assert!(m.contains("state read back is final"), "{m}"),
        other => panic!("expected an uncertain commit, got {other:?}"),
    }
    let read_back = storage.load_state().await.unwrap();
    // Past the late delivery (and then some, on a loaded machine).
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(
        storage.load_state().await.unwrap(),
        read_back,
        "the COMMIT landed after the state was read back"
    );
}

/// Connections cut again and again, and slowed, under load from eight writers: every
/// acknowledged entry is at its index exactly once, and failed adds logged nothing
/// twice.
pub async fn cut_and_slow_connections_under_load_lose_nothing<B: SqlBackend>() {
    let (storage, proxy) = behind_proxy::<B>("cuts").await;
    let (log, tasks) = Log::open(storage.clone(), None, config(64)).await.unwrap();
    let acked: Arc<Mutex<HashMap<u64, Vec<u8>>>> = Arc::default();
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut workers = Vec::new();
    for w in 0..8u32 {
        let (log, acked, stop) = (log.clone(), acked.clone(), stop.clone());
        workers.push(tokio::spawn(async move {
            let mut i = 0u32;
            while !stop.load(std::sync::atomic::Ordering::Acquire) {
                let e = format!("worker {w} entry {i}").into_bytes();
                i += 1;
                if let Ok(out) = log.add(Bytes::from(e.clone())).await {
                    let prev = acked.lock().unwrap().insert(out.index, e);
                    assert!(prev.is_none(), "index {} handed out twice", out.index);
                }
            }
        }));
    }
    let progress = |n: usize| {
        let acked = acked.clone();
        async move {
            let deadline = Instant::now() + Duration::from_secs(60);
            while acked.lock().unwrap().len() < n {
                assert!(Instant::now() < deadline, "no progress past {n} entries");
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    };
    let mut target = 200;
    for round in 0..6 {
        progress(target).await;
        if round % 2 == 0 {
            proxy.cut();
        } else {
            proxy.set_latency(Duration::from_millis(20));
            progress(target + 50).await;
            proxy.set_latency(Duration::ZERO);
        }
        target = acked.lock().unwrap().len() + 200;
    }
    progress(target).await;
    stop.store(true, std::sync::atomic::Ordering::Release);
    for w in workers {
        w.await.unwrap();
    }
    log.shutdown();
    tasks.join().await;
    let acked = acked.lock().unwrap().clone();
    let mut seen = std::collections::HashSet::new();
    let size = check_entries(&storage, |i| acked.get(&i).cloned()).await;
    let verifier = NoteSigner::from_skey(SKEY).unwrap().verifier();
    let mut visit =
        |_: u64, e: &[u8]| assert!(seen.insert(e.to_vec()), "an entry was logged twice");
    check_log(&*storage, ORIGIN, &verifier, Some(&mut visit))
        .await
        .unwrap();
    assert!(size >= acked.len() as u64);
}
