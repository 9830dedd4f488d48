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
use tlogd_core::engine::{DedupError, DedupIndex, EntryHash, Indexed, Log, LogConfig};
use tlogd_core::note::{NoteSigner, NoteVerifier};
use tlogd_core::tile::TileId;

use tlogd_core::conformance::{ORIGIN, SKEY};
const VKEY: &str = "example.com/log/testdata+33d7b496+AeHTu4Q3hEIMHNqc6fASMsq3rKNx280NI+oO5xCFkkSx";

#[derive(Default)]
struct MapIndex(std::sync::Mutex<(std::collections::HashMap<EntryHash, Indexed>, u64)>);

impl DedupIndex for MapIndex {
    fn get(&self, h: &EntryHash) -> Result<Option<Indexed>, DedupError> {
        Ok(self.0.lock().unwrap().0.get(h).copied())
    }
    fn put_batch(&self, e: &[(EntryHash, Indexed)], upto: u64) -> Result<(), DedupError> {
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
    serve_log_opts(dedup, wrap, tlogd::serve::server::ServeOptions::default()).await
}

/// [`serve_log_with`] with the server's connection options.
async fn serve_log_opts(
    dedup: bool,
    wrap: impl FnOnce(axum::Router) -> axum::Router,
    opts: tlogd::serve::server::ServeOptions,
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
    // The first checkpoint is published by a task: a run starting before it finds none
    // (seen once when the machine was busy).
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while log.published_size().is_none() {
        assert!(std::time::Instant::now() < deadline, "no first checkpoint");
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    let app = wrap(tlogd::serve::router::router(log.clone()));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    // The daemon's own server: HTTP/1.1 and h2c on the same port.
    tokio::spawn(tlogd::serve::server::serve(
        listener,
        app,
        opts,
        std::future::pending(),
    ));
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
    // Every new entry's clock stopped exactly once; duplicates have none.
    let row = |name: &str| {
        r.operations
            .iter()
            .find(|o| o.operation == name)
            .unwrap_or_else(|| panic!("no {name} row"))
            .clone()
    };
    assert_eq!(row("time to integrate").count, r.writes_new);
    assert_eq!(
        row("inclusion verified").count,
        r.writes_new + r.writes_duplicate
    );
    assert!(r.verify_backlog_max >= 1);
    assert!(r.loadgen_cpu_us_per_add > 0.0 && r.loadgen_cpu_seconds > 0.0);
    assert_eq!(r.transport, "http/1.1");
    let j: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    assert_eq!(j["tree_growth"], j["writes_new"]);
    assert_eq!(j["ok"], true);
    let page = std::fs::read_to_string(&html).unwrap();
    assert!(page.contains("<svg") && page.contains("Tree growth"));
    for chart in [
        "Throughput",
        "Time to integrate",
        "CPU",
        "Verification backlog",
    ] {
        assert!(page.contains(chart), "{chart} chart missing");
    }
    assert!(page.contains("us/add"), "CPU per add missing");
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

/// Counts the `POST /add` requests that reach the log.
fn counting_adds(n: Arc<AtomicU64>) -> impl FnOnce(axum::Router) -> axum::Router {
    move |app| {
        app.layer(axum::middleware::from_fn(
            move |req: axum::extract::Request, next: axum::middleware::Next| {
                let n = n.clone();
                async move {
                    if req.uri().path() == "/add" {
                        n.fetch_add(1, Ordering::SeqCst);
                    }
                    next.run(req).await
                }
            },
        ))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_verify_writes_to_a_server_without_a_key() {
    let adds = Arc::new(AtomicU64::new(0));
    let (url, _storage, _log) = serve_log_with(false, counting_adds(adds.clone())).await;
    let no_key = |extra: &[&str]| {
        let mut v = vec!["tlog-loadgen", "--log-url", &url, "--quiet", "--no-verify"];
        v.extend_from_slice(extra);
        Args::parse_from(v)
    };
    let r = run(no_key(&["--writers", "4", "--leaf-write-goal", "200"]))
        .await
        .unwrap();
    assert!(r.ok, "{:?}", r.failure_reasons);
    assert!(r.writes_new >= 200, "{}", r.writes_new);
    assert_eq!(adds.load(Ordering::SeqCst), r.writes_new);
    assert_eq!(r.verified_entries, 0, "nothing is verified without a key");
    // Readers verify what they read: without a key they are refused, said as such.
    let e = run(no_key(&["--readers-random", "1", "--duration", "1s"]))
        .await
        .unwrap_err();
    assert!(e.to_string().contains("--log-public-key"), "{e}");
    // Without the flag, a missing key is an error that names the flag.
    let e = run(Args::parse_from([
        "tlog-loadgen",
        "--log-url",
        &url,
        "--duration",
        "1s",
    ]))
    .await
    .unwrap_err();
    assert!(e.to_string().contains("--no-verify"), "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writers_0_is_a_read_only_run() {
    let adds = Arc::new(AtomicU64::new(0));
    let (url, _storage, log) = serve_log_with(false, counting_adds(adds.clone())).await;
    // Something to read: entries added behind the loadgen's back.
    for i in 0..300 {
        log.add(bytes::Bytes::from(format!("seed {i}")))
            .await
            .unwrap();
    }
    let r = run(args(
        &url,
        &[
            "--writers",
            "0",
            "--duration",
            "1500ms",
            "--readers-random",
            "1",
            "--readers-full",
            "1",
        ],
    ))
    .await
    .unwrap();
    assert!(r.ok, "{:?}", r.failure_reasons);
    assert_eq!(adds.load(Ordering::SeqCst), 0, "a read-only run sent adds");
    assert_eq!(
        (r.writes_new, r.writes_duplicate, r.write_errors),
        (0, 0, 0)
    );
    assert_eq!(r.tree_size_end, 300);
    assert!(r.reads_ok > 0, "the readers read");
    assert_eq!(r.loadgen_cpu_us_per_add, 0.0, "no adds, no CPU per add");
    // A write goal without writers is a contradiction, said as such.
    let e = run(args(&url, &["--writers", "0", "--leaf-write-goal", "10"]))
        .await
        .unwrap_err();
    assert!(e.to_string().contains("--writers 0"), "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn h2c_writers_share_one_connection_and_everything_verifies() {
    let adds = Arc::new(AtomicU64::new(0));
    let (url, _storage, _log) = serve_log_with(true, counting_adds(adds.clone())).await;
    let r = run(args(
        &url,
        &[
            "--h2c",
            "--writers",
            "64",
            "--leaf-write-goal",
            "4000",
            "--dup-chance",
            "0.05",
            "--readers-random",
            "1",
            "--read-rate",
            "100",
            "--checkpoint-poll",
            "50ms",
            "--http-timeout",
            "30s",
        ],
    ))
    .await
    .unwrap();
    assert!(r.ok, "{:?}", r.failure_reasons);
    assert_eq!(r.transport, "h2c");
    assert!(r.writes_new + r.writes_duplicate >= 4000);
    assert_eq!(
        adds.load(Ordering::SeqCst),
        r.writes_new + r.writes_duplicate
    );
    assert_eq!(r.tree_growth, r.writes_new);
    assert!(r.verified_entries >= r.writes_new + r.writes_duplicate);
    // The whole log checks out over h2c as well.
    let fetch = HttpFetcher::h2c(&url, None, Duration::from_secs(10), 1).unwrap();
    let mut summary = FsckSummary::default();
    fsck(
        &fetch,
        ORIGIN,
        &NoteVerifier::from_vkey(VKEY).unwrap(),
        &FsckOptions::default(),
        &mut (),
        &mut summary,
    )
    .await
    .unwrap();
    assert!(summary.entries >= r.tree_size_end);
}

/// `--h2c` to an `https://` URL is HTTP/2 over TLS (ALPN h2; it works against tlogd's
/// TLS listener: crates/daemon/tests/tls.rs): a server that speaks no TLS fails the
/// run at the handshake, never a fallback to plain text.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn h2_over_tls_never_falls_back_to_plain_text() {
    let (url, _storage, _log) = serve_log(false).await;
    let https = url.replacen("http://", "https://", 1);
    let r = run(args(&https, &["--h2c", "--leaf-write-goal", "1"])).await;
    let text = match r {
        Ok(report) => format!("{:?}", report.failure_reasons),
        Err(e) => format!("{e:#}"),
    };
    assert!(text.contains("TLS"), "{text}");
}

/// A server allowing fewer concurrent streams than there are writers refuses the
/// excess (`REFUSED_STREAM`) until the client has its settings; such a stream was never
/// processed and is sent again, not counted as a failed add.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn h2c_streams_refused_over_the_servers_limit_are_sent_again() {
    let opts = tlogd::serve::server::ServeOptions {
        h2_max_concurrent_streams: 4,
        ..tlogd::serve::server::ServeOptions::default()
    };
    let (url, _storage, _log) = serve_log_opts(false, |app| app, opts).await;
    let r = run(args(
        &url,
        &["--h2c", "--writers", "64", "--leaf-write-goal", "1000"],
    ))
    .await
    .unwrap();
    assert!(r.ok, "{:?} {:?}", r.failure_reasons, r.error_samples);
    assert_eq!(r.write_errors, 0);
    assert_eq!(r.tree_growth, r.writes_new);
}

/// By default the writers share one h2c connection per 100 of them (tlogd's default
/// stream limit per connection); a count given is kept.
#[test]
fn h2c_connections_default_to_one_per_hundred_writers() {
    let n = |extra: &[&str]| tlog_loadgen::h2c_connections(&args("http://127.0.0.1:9", extra));
    assert_eq!(n(&["--h2c", "--writers", "1"]), 1);
    assert_eq!(n(&["--h2c", "--writers", "100"]), 1);
    assert_eq!(n(&["--h2c", "--writers", "101"]), 2);
    assert_eq!(n(&["--h2c", "--writers", "1024"]), 11);
    assert_eq!(n(&["--h2c", "--writers", "0"]), 1);
    assert_eq!(
        n(&["--h2c", "--writers", "1024", "--h2c-connections", "4"]),
        4
    );
}
