//! The load generator in CT mode (`--ct`) against a tlogd Certificate Transparency log:
//! the daemon's CT routes, the engine with the static-ct-api personality, POSIX storage
//! and the RocksDB dedup index, as `tlogd serve` assembles them, with the loadgen's
//! minted root in the log's `[ct] roots_file`.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use clap::Parser;
use sha2::{Digest, Sha256};
use tlog_loadgen::{Args, Report, run};
use tlog_verify::fetch::HttpFetcher;
use tlog_verify::fsck::{FsckOptions, FsckSummary, fsck};
use tlogd_core::engine::{DedupIndex, Log, LogConfig};
use tlogd_static_ct::signer::LogKey;
use tlogd_storage_posix::PosixStorage;

const CT_ORIGIN: &str = "ct.example.com/loadgen2026";

fn ct_key() -> LogKey {
    LogKey::from_scalar(&Sha256::digest(b"tlog-loadgen ct test key")).unwrap()
}

/// A CT log on POSIX in `dir` trusting `roots` (a PEM file), served on 127.0.0.1, its
/// router passed through `wrap` first. Returns its base URL and the log.
async fn serve_ct(
    dir: &Path,
    roots: &Path,
    wrap: impl FnOnce(axum::Router) -> axum::Router,
) -> (String, Log<PosixStorage>) {
    // The `[ct]` section read as `tlogd serve` reads it.
    let toml = format!(
        "origin = \"{CT_ORIGIN}\"\nprivate_key_file = \"{}\"\n[storage]\ndir = \"{}\"\n[ct]\nroots_file = \"{}\"\n",
        dir.join("ct-key.pem").display(),
        dir.join("log").display(),
        roots.display()
    );
    let config = tlogd::config::Config::parse(&toml).unwrap();
    let section = config.served_logs().remove(0);
    let ct = Arc::new(
        tlogd::routes::ct::CtLog::load(
            section.ct.as_ref().expect("a [ct] section"),
            ct_key(),
            Duration::from_secs(10),
            "ct",
        )
        .unwrap(),
    );
    let storage = Arc::new(PosixStorage::open(dir.join("log"), CT_ORIGIN).unwrap());
    let dedup = tlogd_dedup_rocksdb::RocksDedup::open(
        &storage.private_dir().join("dedup"),
        &tlogd_dedup_rocksdb::DedupOptions::default(),
    )
    .unwrap();
    let signer = tlogd_ct::Rfc6962Signer::new(CT_ORIGIN, ct_key());
    let mut cfg = LogConfig::with_signer(CT_ORIGIN, Arc::new(signer));
    cfg.personality = Arc::new(tlogd_ct::StaticCt);
    cfg.checkpoint_interval = Duration::from_millis(50);
    let index: Option<Arc<dyn DedupIndex>> = Some(Arc::new(dedup));
    let (log, _tasks) = Log::open(storage, index, cfg).await.unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while log.published_size().is_none() {
        assert!(std::time::Instant::now() < deadline, "no first checkpoint");
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    let opts = tlogd::serve::router::HttpOptions {
        ct: Some(ct),
        ..tlogd::serve::router::HttpOptions::default()
    };
    let app = wrap(tlogd::serve::router::router_with(log.clone(), &opts));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(tlogd::serve::server::serve(
        listener,
        app,
        tlogd::serve::server::ServeOptions::default(),
        std::future::pending(),
    ));
    (format!("http://{addr}"), log)
}

/// The loadgen's root and key in `dir` (`tlog-loadgen ct-root`'s files).
fn root_files(dir: &Path) -> (std::path::PathBuf, std::path::PathBuf) {
    let (cert, key) = (dir.join("root.pem"), dir.join("root-key.pem"));
    tlog_loadgen::ct::write_root(&cert, &key).unwrap();
    (cert, key)
}

fn ct_args(url: &str, public_key: &str, cert: &Path, key: &Path, extra: &[&str]) -> Args {
    let mut v = vec![
        "tlog-loadgen",
        "--ct",
        "--log-url",
        url,
        "--log-public-key",
        public_key,
        "--origin",
        CT_ORIGIN,
        "--ct-root-cert",
        cert.to_str().unwrap(),
        "--ct-root-key",
        key.to_str().unwrap(),
        "--quiet",
        "--max-runtime",
        "120",
        "--checkpoint-poll",
        "50ms",
    ];
    v.extend_from_slice(extra);
    Args::parse_from(v)
}

fn log_public_key() -> String {
    B64.encode(ct_key().public_key_der())
}

/// A CT run with duplicates, precertificates and both kinds of reader: every SCT
/// checks, every sampled entry is the TileLeaf expected in its data tile, the full
/// reader's hash tiles and roots match, and the counts add up.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ct_run_against_tlogd_succeeds_and_its_report_adds_up() {
    let dir = tempfile::tempdir().unwrap();
    let (cert, key) = root_files(dir.path());
    let (url, _log) = serve_ct(dir.path(), &cert, |a| a).await;
    let pk = log_public_key();
    let a = ct_args(
        &url,
        &pk,
        &cert,
        &key,
        &[
            "--writers",
            "8",
            "--leaf-write-goal",
            "400",
            "--dup-chance",
            "0.15",
            "--ct-precert-chance",
            "0.2",
            "--readers-full",
            "1",
            "--readers-random",
            "1",
            "--read-rate",
            "100",
        ],
    );
    let r: Report = tokio::time::timeout(Duration::from_secs(180), run(a))
        .await
        .expect("the run ends within its --max-runtime")
        .unwrap();
    eprintln!("{}", tlog_loadgen::report::table(&r));
    assert!(r.ok, "{:?} {:?}", r.failure_reasons, r.error_samples);
    assert_eq!(r.mode, "static-ct-api");
    assert_eq!(r.ct_chains_minted, 400);
    let adds = r.writes_new + r.writes_duplicate;
    assert!(adds >= 400, "{adds}");
    assert!(
        r.writes_duplicate >= 5,
        "dup-chance 0.15 produced {} duplicates",
        r.writes_duplicate
    );
    assert!(r.ct_precerts >= 20, "{} precertificates", r.ct_precerts);
    assert_eq!(r.write_errors, 0);
    // By default every SCT's signature is checked once writing stops.
    assert_eq!(r.ct_scts_checked_after, adds);
    assert_eq!(
        r.tree_growth, r.writes_new,
        "tree growth equals the unique chains logged"
    );
    assert!(
        r.verified_entries >= adds,
        "{} verified",
        r.verified_entries
    );
    let row = |name: &str| {
        r.operations
            .iter()
            .find(|o| o.operation == name)
            .unwrap_or_else(|| panic!("no {name} row"))
            .clone()
    };
    assert_eq!(row("time to integrate").count, r.writes_new);
    assert_eq!(row("inclusion verified").count, adds);
    assert!(r.reads_ok > 0);
    // `tlogd verify --ct`'s whole-log check agrees.
    let fetch = HttpFetcher::new(&url, None, Duration::from_secs(10)).unwrap();
    let verifier = tlogd_ct::Rfc6962Check::verifier(CT_ORIGIN, ct_key().public_key_der()).unwrap();
    let options = FsckOptions {
        personality: Arc::new(tlogd_ct::StaticCt),
        ..FsckOptions::default()
    };
    let mut summary = FsckSummary::default();
    fsck(
        &fetch,
        CT_ORIGIN,
        &verifier,
        &options,
        &mut (),
        &mut summary,
    )
    .await
    .unwrap();
    assert!(summary.entries >= r.tree_size_end, "{summary:?}");
}

/// The wrong log key: the first checkpoint does not verify and the run stops, naming
/// it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ct_run_with_another_logs_key_fails() {
    let dir = tempfile::tempdir().unwrap();
    let (cert, key) = root_files(dir.path());
    let (url, _log) = serve_ct(dir.path(), &cert, |a| a).await;
    let other = LogKey::from_scalar(&Sha256::digest(b"another CT log")).unwrap();
    let pk = B64.encode(other.public_key_der());
    let a = ct_args(
        &url,
        &pk,
        &cert,
        &key,
        &["--writers", "2", "--leaf-write-goal", "20"],
    );
    let e = tokio::time::timeout(Duration::from_secs(60), run(a))
        .await
        .expect("the run ends")
        .expect_err("a run against another log's key fails");
    assert!(format!("{e:#}").contains("checkpoint"), "{e:#}");
}

/// SCTs whose signature does not cover what was submitted (a log answering with a
/// timestamp other than the one it signed) fail the run, named, whether checked as
/// they arrive (no add counts, so the run writes for its --duration) or once writing
/// stops (every add acknowledged is then an error, and only the first is named: no
/// precertificates, so that it is an add-chain's).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_sct_that_does_not_verify_fails_the_run() {
    let dir = tempfile::tempdir().unwrap();
    let (cert, key) = root_files(dir.path());
    let (url, _log) = serve_ct(dir.path(), &cert, |app| {
        app.layer(axum::middleware::map_response(shift_sct_timestamps))
    })
    .await;
    let pk = log_public_key();
    for checks in ["during", "after"] {
        let a = ct_args(
            &url,
            &pk,
            &cert,
            &key,
            &[
                "--writers",
                "2",
                "--duration",
                "2s",
                "--ct-sct-checks",
                checks,
                "--ct-precert-chance",
                "0",
            ],
        );
        let r = tokio::time::timeout(Duration::from_secs(150), run(a))
            .await
            .expect("the run ends")
            .unwrap();
        assert!(!r.ok, "{checks}");
        assert!(
            r.failure_reasons
                .iter()
                .any(|f| f.contains("ct/v1/add-chain") && f.contains("does not verify")),
            "{checks}: {:?}",
            r.failure_reasons
        );
        let adds = r.writes_new + r.writes_duplicate;
        if checks == "during" {
            assert_eq!(adds, 0);
            assert_eq!(r.ct_scts_checked_after, 0);
        } else {
            assert!(adds > 0);
            assert_eq!(r.ct_scts_checked_after, adds);
            assert_eq!(r.write_errors, adds);
        }
    }
}

/// Move every SCT's timestamp by a millisecond, leaving its signature as it was.
async fn shift_sct_timestamps(resp: axum::response::Response) -> axum::response::Response {
    let (parts, body) = resp.into_parts();
    let bytes = axum::body::to_bytes(body, 1 << 20)
        .await
        .unwrap_or_default();
    let out = match serde_json::from_slice::<serde_json::Value>(&bytes) {
        Ok(mut v) if v.get("sct_version").is_some() => {
            v["timestamp"] = (v["timestamp"].as_u64().unwrap_or(0) + 1).into();
            v.to_string().into_bytes()
        }
        _ => bytes.to_vec(),
    };
    let mut parts = parts;
    parts.headers.remove(axum::http::header::CONTENT_LENGTH);
    axum::response::Response::from_parts(parts, axum::body::Body::from(out))
}
