//! The load generator against an in-process log (the real engine and HTTP router over
//! the in-memory backend), a tampered log, and a log that pushes back.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use clap::Parser;
use tlog_loadgen::{Args, Report, run};
use tlog_verify::fetch::HttpFetcher;
use tlog_verify::fsck::{FsckOptions, FsckSummary, fsck};
use tlogd_core::engine::memory::MemoryStorage;
use tlogd_core::engine::{DedupError, DedupIndex, EntryHash, Log, LogConfig};
use tlogd_core::note::{NoteSigner, NoteVerifier};
use tlogd_core::tile::TileId;

const SKEY: &str =
    "PRIVATE+KEY+example.com/log/testdata+33d7b496+AeymY/SZAX0jZcJ8enZ5FY1Dz+wTML2yWSkK+9DSF3eg";
const VKEY: &str = "example.com/log/testdata+33d7b496+AeHTu4Q3hEIMHNqc6fASMsq3rKNx280NI+oO5xCFkkSx";
const ORIGIN: &str = "example.com/log/testdata";

#[derive(Default)]
struct MapIndex(std::sync::Mutex<(std::collections::HashMap<EntryHash, u64>, u64)>);

impl DedupIndex for MapIndex {
    fn get(&self, h: &EntryHash) -> Result<Option<u64>, DedupError> {
        Ok(self.0.lock().unwrap().0.get(h).copied())
    }
    fn put_batch(&self, e: &[(EntryHash, u64)], upto: u64) -> Result<(), DedupError> {
        let mut m = self.0.lock().unwrap();
        for (h, i) in e {
            m.0.entry(*h).or_insert(*i);
        }
        m.1 = upto;
        Ok(())
    }
    fn indexed_up_to(&self) -> Result<u64, DedupError> {
        Ok(self.0.lock().unwrap().1)
    }
}

async fn serve_log(dedup: bool) -> (String, Arc<MemoryStorage>, Log<MemoryStorage>) {
    serve_log_with(dedup, |app| app).await
}

/// A real log (engine + HTTP router over the in-memory backend) on 127.0.0.1, its
/// router passed through `wrap` first.
async fn serve_log_with(
    dedup: bool,
    wrap: impl FnOnce(axum::Router) -> axum::Router,
) -> (String, Arc<MemoryStorage>, Log<MemoryStorage>) {
    let storage = Arc::new(MemoryStorage::new());
    let mut cfg = LogConfig::new(ORIGIN, Arc::new(NoteSigner::from_skey(SKEY).unwrap()));
    cfg.checkpoint_interval = Duration::from_millis(20);
    let index: Option<Arc<dyn DedupIndex>> = if dedup {
        Some(Arc::new(MapIndex::default()))
    } else {
        None
    };
    let (log, _tasks) = Log::open(storage.clone(), index, cfg).await.unwrap();
    let app = wrap(tlogd::http::router(log.clone()));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (format!("http://{addr}"), storage, log)
}

fn args(url: &str, extra: &[&str]) -> Args {
    let mut v = vec![
        "tlog-loadgen",
        "--log-url",
        url,
        "--log-public-key",
        VKEY,
        "--quiet",
        "--max-runtime",
        "60",
    ];
    v.extend_from_slice(extra);
    Args::parse_from(v)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_with_a_write_goal_succeeds_and_its_report_adds_up() {
    let (url, _storage, _log) = serve_log(true).await;
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("r.json");
    let html = dir.path().join("r.html");
    let a = args(
        &url,
        &[
            "--writers",
            "16",
            "--leaf-write-goal",
            "3000",
            "--dup-chance",
            "0.1",
            "--readers-full",
            "1",
            "--readers-random",
            "2",
            "--read-rate",
            "200",
            "--report-json",
            json.to_str().unwrap(),
            "--report-html",
            html.to_str().unwrap(),
        ],
    );
    let r: Report = run(a).await.unwrap();
    assert!(r.ok, "{:?}", r.failure_reasons);
    assert!(r.writes_new + r.writes_duplicate >= 3000);
    assert!(
        r.writes_duplicate > 100,
        "dup-chance 0.1 produced {} duplicates",
        r.writes_duplicate
    );
    assert_eq!(
        r.tree_growth, r.writes_new,
        "tree growth equals the unique entries written"
    );
    assert!(r.verified_entries >= r.writes_new + r.writes_duplicate);
    let j: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    assert_eq!(j["tree_growth"], j["writes_new"]);
    assert_eq!(j["ok"], true);
    let page = std::fs::read_to_string(&html).unwrap();
    assert!(page.contains("<svg") && page.contains("Tree growth"));
    // The whole-log check (tlogd verify's) passes on what the memory backend wrote.
    let summary = fsck_log(&url).await.unwrap();
    assert!(summary.entries >= r.tree_size_end, "{summary:?}");
}

/// `tlogd verify`'s check (tlog-verify) of the log at `url`.
async fn fsck_log(url: &str) -> Result<FsckSummary, tlog_verify::VerifyError> {
    let fetch = HttpFetcher::new(url, None, Duration::from_secs(10)).unwrap();
    let verifier = NoteVerifier::from_vkey(VKEY).unwrap();
    let mut summary = FsckSummary::default();
    fsck(
        &fetch,
        ORIGIN,
        &verifier,
        &FsckOptions::default(),
        &mut (),
        &mut summary,
    )
    .await
    .map(|()| summary)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tampered_bundle_is_found_and_named() {
    let (url, storage, _log) = serve_log(false).await;
    let r = run(args(&url, &["--writers", "8", "--leaf-write-goal", "600"]))
        .await
        .unwrap();
    assert!(r.ok, "{:?}", r.failure_reasons);
    // Swap one entry of the first full bundle.
    let id = TileId::entries(0, 256);
    let mut b = Vec::new();
    for i in 0..256 {
        let e = if i == 17 {
            b"evil".to_vec()
        } else {
            format!("x{i}").into_bytes()
        };
        tlogd_core::bundle::append_entry(&mut b, &e).unwrap();
    }
    storage.tamper(&id, b);
    let r = run(args(
        &url,
        &[
            "--writers",
            "1",
            "--leaf-write-goal",
            "1",
            "--readers-full",
            "1",
        ],
    ))
    .await
    .unwrap();
    assert!(!r.ok);
    assert!(
        r.failure_reasons
            .iter()
            .any(|f| f.contains("tile/0/000") && f.contains("tile/entries/000")),
        "{:?}",
        r.failure_reasons
    );
    let e = fsck_log(&url).await.unwrap_err().to_string();
    assert!(
        e.starts_with("tile/0/000 is not the tile recomputed from tile/entries/000"),
        "{e}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tampered_hash_tile_is_found_and_named() {
    let (url, storage, _log) = serve_log(false).await;
    let r = run(args(&url, &["--writers", "8", "--leaf-write-goal", "600"]))
        .await
        .unwrap();
    assert!(r.ok, "{:?}", r.failure_reasons);
    storage.tamper(&TileId::hash(0, 1, 256), vec![0u8; 256 * 32]);
    let r = run(args(
        &url,
        &[
            "--writers",
            "1",
            "--leaf-write-goal",
            "1",
            "--readers-random",
            "1",
            "--readers-full",
            "1",
        ],
    ))
    .await
    .unwrap();
    assert!(!r.ok);
    assert!(
        r.failure_reasons.iter().any(|f| f.contains("tile/0/001")),
        "{:?}",
        r.failure_reasons
    );
    assert!(
        r.failure_reasons
            .iter()
            .any(|f| f.contains("random reader")),
        "{:?}",
        r.failure_reasons
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pushback_is_honoured_not_counted_as_errors() {
    use axum::http::{StatusCode, header};
    use axum::response::IntoResponse;
    // A real log behind a layer that answers the first five adds with 503.
    let n = Arc::new(AtomicU64::new(0));
    let (url, _storage, _log) = serve_log_with(false, |app| {
        app.layer(axum::middleware::from_fn(
            move |req: axum::extract::Request, next: axum::middleware::Next| {
                let n = n.clone();
                async move {
                    if req.uri().path() == "/add" && n.fetch_add(1, Ordering::SeqCst) < 5 {
                        return (
                            StatusCode::SERVICE_UNAVAILABLE,
                            [(header::RETRY_AFTER, "1")],
                            "busy",
                        )
                            .into_response();
                    }
                    next.run(req).await
                }
            },
        ))
    })
    .await;
    let started = std::time::Instant::now();
    let r = run(args(&url, &["--writers", "5", "--leaf-write-goal", "20"]))
        .await
        .unwrap();
    assert!(r.ok, "{:?}", r.failure_reasons);
    assert_eq!(r.pushback, 5);
    assert_eq!(r.write_errors, 0);
    assert!(r.writes_new >= 20);
    assert!(
        started.elapsed() >= Duration::from_millis(900),
        "Retry-After was not honoured"
    );
}

#[tokio::test]
async fn verification_is_not_optional() {
    let mut a = args("http://127.0.0.1:9", &["--leaf-write-goal", "1"]);
    a.log_public_key = None;
    let err = run(a).await.unwrap_err();
    assert!(err.to_string().contains("--log-public-key"), "{err}");
}
