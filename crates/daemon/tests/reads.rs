//! Readers cannot starve commits (#35): the checkpoint is served from memory and paths
//! beyond the tree without any storage read, their `404`s are never cached, and tile
//! reads that do reach storage take turns, bounded and apart from commits.
//!
//! The real engine and router over the in-memory backend dressed as a shared store
//! (one whose reads see what other frontends commit, as SQL and object stores are),
//! counting every read that reaches it.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use common::*;
use tlogd_core::engine::memory::MemoryStorage;
use tlogd_core::engine::{CommitBatch, Log, LogConfig, LogStorage, StorageError, TreeState};
use tlogd_core::note::NoteSigner;
use tlogd_core::tile::TileId;

/// [`MemoryStorage`] as a shared store, counting reads; public tile reads can be made
/// slow.
#[derive(Default)]
struct Counted {
    inner: MemoryStorage,
    checkpoint_reads: AtomicUsize,
    public_tile_reads: AtomicUsize,
    slow_public_reads: AtomicBool,
}

impl LogStorage for Counted {
    fn backend_name(&self) -> &'static str {
        "counted"
    }
    async fn load_state(&self) -> Result<Option<TreeState>, StorageError> {
        self.inner.load_state().await
    }
    async fn commit(&self, batch: CommitBatch) -> Result<(), StorageError> {
        self.inner.commit(batch).await
    }
    async fn read_tile(&self, id: &TileId) -> Result<Option<Vec<u8>>, StorageError> {
        self.inner.read_tile(id).await
    }
    async fn read_public_tile(&self, id: &TileId) -> Result<Option<Vec<u8>>, StorageError> {
        self.public_tile_reads.fetch_add(1, Ordering::SeqCst);
        if self.slow_public_reads.load(Ordering::SeqCst) {
            tokio::time::sleep(Duration::from_secs(2)).await;
        }
        self.inner.read_tile(id).await
    }
    async fn publish_checkpoint(&self, signed: &[u8]) -> Result<(), StorageError> {
        self.inner.publish_checkpoint(signed).await
    }
    async fn read_checkpoint(&self) -> Result<Option<Vec<u8>>, StorageError> {
        self.checkpoint_reads.fetch_add(1, Ordering::SeqCst);
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
    fn reads_are_committed(&self) -> bool {
        true
    }
}

const MAX_AGE: Duration = Duration::from_millis(300);

async fn start(opts: tlogd::serve::router::HttpOptions) -> (Arc<Counted>, Log<Counted>, String) {
    let storage = Arc::new(Counted::default());
    let mut cfg = LogConfig::new(ORIGIN, Arc::new(NoteSigner::from_skey(SKEY).unwrap()));
    cfg.checkpoint_interval = Duration::from_millis(20);
    cfg.checkpoint_max_age = MAX_AGE;
    let (log, tasks) = Log::open(storage.clone(), None, cfg).await.unwrap();
    std::mem::forget(tasks);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(tlogd::serve::server::serve(
        listener,
        tlogd::serve::router::router_with(log.clone(), &opts),
        tlogd::serve::server::ServeOptions::default(),
        std::future::pending(),
    ));
    (storage, log, url)
}

/// Reads of storage's checkpoint allowed in `elapsed`: one per `MAX_AGE` for
/// `GET /checkpoint`, one per 100 ms for paths beyond the tree, and one more of each.
fn allowed(elapsed: Duration) -> usize {
    (elapsed.as_millis() / MAX_AGE.as_millis() + elapsed.as_millis() / 100) as usize + 2
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_checkpoint_and_beyond_the_tree_reads_reaches_no_storage() {
    let (storage, log, url) = start(tlogd::serve::router::HttpOptions::default()).await;
    let http = Http::new();
    for i in 0..3 {
        http.add(&url, Bytes::from(format!("entry {i}")))
            .await
            .unwrap();
    }
    let published = http.wait_checkpoint(&url, 3).await;
    storage.checkpoint_reads.store(0, Ordering::SeqCst);
    let started = Instant::now();
    let mut reads = Vec::new();
    for _ in 0..200 {
        let h = http.clone();
        let u = url.clone();
        reads.push(tokio::spawn(async move {
            let cp = h.get(&format!("{u}/checkpoint")).await.unwrap();
            let beyond = h.get(&format!("{u}/tile/entries/001")).await.unwrap();
            let above = h.get(&format!("{u}/tile/1/000.p/1")).await.unwrap();
            (cp, beyond, above)
        }));
    }
    for r in reads {
        let (cp, beyond, above) = r.await.unwrap();
        assert_eq!(cp.0, 200);
        assert_eq!(
            tlogd_core::checkpoint::signed_size(&cp.2),
            Some(published.size)
        );
        for (status, headers, body) in [beyond, above] {
            assert_eq!(status, 404, "{body:?}");
            // Another frontend may commit it the next moment: no cache may keep this.
            assert_eq!(
                headers.get("cache-control").map(String::as_str),
                Some("no-store")
            );
            assert_eq!(body.iter().filter(|&&b| b == b'\n').count(), 1);
        }
    }
    let elapsed = started.elapsed();
    let cp_reads = storage.checkpoint_reads.load(Ordering::SeqCst);
    assert!(
        cp_reads <= allowed(elapsed),
        "{cp_reads} checkpoint reads for 600 requests in {elapsed:?}"
    );
    assert_eq!(storage.public_tile_reads.load(Ordering::SeqCst), 0);
    // A path inside the tree is read from storage.
    let (status, _, body) = http
        .get(&format!("{url}/tile/entries/000.p/3"))
        .await
        .unwrap();
    assert_eq!(status, 200, "{body:?}");
    assert_eq!(storage.public_tile_reads.load(Ordering::SeqCst), 1);
    // A static-ct-api data tile is not a path of a tlog-tiles log: 404, no read.
    let (status, _, _) = http.get(&format!("{url}/tile/data/000.p/3")).await.unwrap();
    assert_eq!(status, 404);
    assert_eq!(storage.public_tile_reads.load(Ordering::SeqCst), 1);

    // Another frontend publishes a larger tree, and a reader who has its checkpoint
    // asks this frontend for a path it covers at once: looked up, not refused.
    let other = {
        let signer = NoteSigner::from_skey(SKEY).unwrap();
        let cp = tlogd_core::checkpoint::Checkpoint {
            origin: ORIGIN.into(),
            size: 300,
            root: [7; 32],
            extensions: Vec::new(),
        };
        cp.sign(&signer).unwrap()
    };
    storage.inner.publish_checkpoint(&other).await.unwrap();
    let (status, headers, _) = http
        .get(&format!("{url}/tile/entries/001.p/44"))
        .await
        .unwrap();
    // Looked up (the other frontend is pretend: its tiles are not in this store).
    assert_eq!(storage.public_tile_reads.load(Ordering::SeqCst), 2);
    assert_eq!(status, 404);
    assert_eq!(
        headers.get("cache-control").map(String::as_str),
        Some("no-store")
    );
    assert!(log.known_size() >= 300);
    let (_, _, body) = http.get(&format!("{url}/checkpoint")).await.unwrap();
    assert_eq!(body, other[..]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tile_reads_take_bounded_turns_and_the_rest_get_503() {
    let (storage, _log, url) = start(tlogd::serve::router::HttpOptions {
        max_storage_reads: 1,
        storage_read_queue_timeout: Duration::from_millis(200),
        ..tlogd::serve::router::HttpOptions::default()
    })
    .await;
    let http = Http::new();
    http.add(&url, Bytes::from_static(b"one")).await.unwrap();
    http.wait_checkpoint(&url, 1).await;
    storage.slow_public_reads.store(true, Ordering::SeqCst);
    let tile = format!("{url}/tile/entries/000.p/1");
    let first = {
        let (h, t) = (http.clone(), tile.clone());
        tokio::spawn(async move { h.get(&t).await.unwrap() })
    };
    // The first read holds the only turn for 2 s; the second waits 200 ms for it.
    while storage.public_tile_reads.load(Ordering::SeqCst) == 0 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let (status, headers, body) = http.get(&tile).await.unwrap();
    assert_eq!(status, 503, "{body:?}");
    assert_eq!(headers.get("retry-after").map(String::as_str), Some("1"));
    assert_eq!(storage.public_tile_reads.load(Ordering::SeqCst), 1);
    // The checkpoint and paths beyond the tree do not wait for a turn.
    let (status, _, _) = http.get(&format!("{url}/checkpoint")).await.unwrap();
    assert_eq!(status, 200);
    let (status, _, _) = http.get(&format!("{url}/tile/entries/001")).await.unwrap();
    assert_eq!(status, 404);
    let (status, _, _) = first.await.unwrap();
    assert_eq!(status, 200);
}

/// `GET url` with `If-None-Match: tag`, as a cache revalidating its copy.
async fn revalidate(http: &Http, url: &str, tag: &str) -> Resp {
    let req = hyper::Request::get(url)
        .header("if-none-match", tag)
        .body(http_body_util::Full::new(Bytes::new()))
        .unwrap();
    http.request(req).await.unwrap()
}

/// A cache or CDN in front revalidates what it holds (RFC 9110 §13.1.2): the checkpoint
/// and the tiles carry ETags, a revalidation of an unchanged one is a `304` with no
/// body that reads no storage, and a checkpoint published since is a `200` with a new
/// tag.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cache_revalidates_with_etags_and_gets_304s_that_read_no_storage() {
    let (storage, _log, url) = start(tlogd::serve::router::HttpOptions::default()).await;
    let http = Http::new();
    for i in 0..3 {
        http.add(&url, Bytes::from(format!("entry {i}")))
            .await
            .unwrap();
    }
    http.wait_checkpoint(&url, 3).await;

    let cp_url = format!("{url}/checkpoint");
    let (status, headers, first) = http.get(&cp_url).await.unwrap();
    assert_eq!(status, 200);
    assert_eq!(headers["cache-control"], "no-cache");
    let cp_tag = headers["etag"].clone();
    let (status, headers, body) = revalidate(&http, &cp_url, &cp_tag).await;
    assert_eq!(status, 304, "{body:?}");
    assert!(body.is_empty());
    assert_eq!(headers["etag"], cp_tag);
    assert_eq!(headers["cache-control"], "no-cache");

    // Each path is read once for its first GET and once for the tag it does not have.
    for (path, immutable_reads) in [("tile/entries/000.p/3", 1), ("tile/0/000.p/3", 3)] {
        let tile_url = format!("{url}/{path}");
        let (status, headers, bytes) = http.get(&tile_url).await.unwrap();
        assert_eq!(status, 200, "{bytes:?}");
        assert_eq!(
            headers["cache-control"],
            "public, max-age=31536000, immutable"
        );
        let tag = headers["etag"].clone();
        assert_eq!(tag, format!("\"{path}\""));
        assert_eq!(
            storage.public_tile_reads.load(Ordering::SeqCst),
            immutable_reads
        );
        for asked in [tag.clone(), format!("W/{tag}"), format!("\"x\", {tag}")] {
            let (status, headers, body) = revalidate(&http, &tile_url, &asked).await;
            assert_eq!(status, 304, "{asked}: {body:?}");
            assert!(body.is_empty());
            assert_eq!(headers["etag"], tag);
            assert_eq!(
                headers["cache-control"],
                "public, max-age=31536000, immutable"
            );
        }
        // Not one of those revalidations read storage.
        assert_eq!(
            storage.public_tile_reads.load(Ordering::SeqCst),
            immutable_reads
        );
        // A tag it does not have: the bytes, read again.
        let (status, _, again) = revalidate(&http, &tile_url, "\"tile/0/000.p/2\"").await;
        assert_eq!((status, &again), (200, &bytes));
    }
    // A path beyond the tree is a 404 whatever the client says it holds.
    let (status, headers, _) = revalidate(&http, &format!("{url}/tile/entries/001"), "*").await;
    assert_eq!(status, 404);
    assert_eq!(headers["cache-control"], "no-store");

    // A new checkpoint: the old tag no longer matches.
    http.add(&url, Bytes::from_static(b"entry 3"))
        .await
        .unwrap();
    http.wait_checkpoint(&url, 4).await;
    let (status, headers, body) = revalidate(&http, &cp_url, &cp_tag).await;
    assert_eq!(status, 200);
    assert_ne!(body, first);
    assert_ne!(headers["etag"], cp_tag);
}
