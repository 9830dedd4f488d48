//! Crash loops: the real `tlogd` SIGKILLed under write load at random instants, 20
//! cycles per backend (POSIX, MariaDB, PostgreSQL, S3 on MinIO, GCS on the emulator), each restart followed by the
//! checks, and at the end a whole-log check over HTTP: every entry appears once,
//! every acknowledged index holds exactly its entry, every checkpoint seen is
//! consistent with the last, and `tlogd verify` recomputes every tile.

mod common;

use std::time::{Duration, Instant};

use common::objects;
use common::*;
use tlogd_storage_mysql::testdb::TestMariaDb;
use tlogd_storage_postgres::testdb::TestPostgres;

const CYCLES: u64 = 20;

/// A pseudo-random delay in `0..max_ms` (the instant of the kill).
fn jitter(max_ms: u64) -> Duration {
    let mut b = [0u8; 8];
    getrandom::fill(&mut b).expect("random");
    Duration::from_millis(u64::from_le_bytes(b) % max_ms)
}

async fn wait_for(what: &str, cond: impl Fn() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

async fn crash_loop(start: impl Fn() -> Daemon) {
    let http = Http::new();
    let mut writers = Writers::default();
    let mut checkpoints = Vec::new();
    for round in 0..CYCLES {
        let mut d = start();
        d.wait_ready(&http).await;
        let u = d.url.clone();
        // Everything acknowledged before the last kill is served, byte for byte.
        let known = writers.snapshot();
        let need = known.iter().map(|(i, _)| i + 1).max().unwrap_or(0);
        let cp = http.wait_checkpoint(&u, need).await;
        http.verify_entries(&u, cp.size, &known).await;
        checkpoints.push(cp);
        writers.start(&http, &u, 16, &format!("round {round}"));
        let before = writers.count();
        wait_for("adds acknowledged under load", || {
            writers.count() >= before + 20
        })
        .await;
        tokio::time::sleep(jitter(300)).await;
        d.kill();
        writers.stop().await;
    }
    let mut d = start();
    d.wait_ready(&http).await;
    let u = d.url.clone();
    let known = writers.snapshot();
    assert!(known.len() as u64 >= 20 * CYCLES);
    let need = known.iter().map(|(i, _)| i + 1).max().unwrap_or(0);
    let last = http.wait_checkpoint(&u, need).await;
    for cp in &checkpoints {
        http.verify_consistency(&u, cp, &last).await;
    }
    // The whole tree: each entry once, each acknowledged index its entry.
    let mut seen = std::collections::HashMap::new();
    for n in 0..last.size.div_ceil(256) {
        for (i, e) in http.bundle(&u, n, last.size).await.into_iter().enumerate() {
            let index = n * 256 + i as u64;
            if let Some(first) = seen.insert(e.clone(), index) {
                panic!(
                    "{:?} logged twice, at {first} and {index}",
                    String::from_utf8_lossy(&e)
                );
            }
        }
    }
    for (index, e) in &known {
        assert_eq!(seen.get(e), Some(index), "acknowledged entry {index}");
    }
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_tlogd"))
        .args(["verify", &u, "--log-public-key"])
        .arg(verifier().to_vkey())
        .output()
        .expect("run tlogd verify");
    assert!(
        out.status.success(),
        "tlogd verify: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(d.terminate().success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn posix_survives_twenty_kills_under_load() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().to_path_buf();
    crash_loop(move || Daemon::start(&path, "")).await;
}

fn sql_daemon(dir: &std::path::Path, backend: &str, url: &str) -> Daemon {
    std::fs::create_dir_all(dir).unwrap();
    let storage = format!("backend = \"{backend}\"\nurl = \"{url}\"\npool_size = 8\n");
    let dedup = format!("[dedup]\npath = \"{}\"\n", dir.join("dedup").display());
    Daemon::start_with(dir, &storage, &dedup)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mariadb_survives_twenty_kills_under_load() {
    let url = TestMariaDb::shared().fresh_database("crash_loop").await;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().to_path_buf();
    crash_loop(move || sql_daemon(&path, "mysql", &url)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_survives_twenty_kills_under_load() {
    let url = TestPostgres::shared().fresh_database("crash_loop").await;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().to_path_buf();
    crash_loop(move || sql_daemon(&path, "postgres", &url)).await;
}

// The object stores: a kill can land between staging a batch, the compare-and-swap of
// the state that names it, and the uploads that apply it; the restarted daemon must
// finish a committed batch and drop an uncommitted one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s3_survives_twenty_kills_under_load() {
    let (store, _) = objects::minio_store("crash-loop").await;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().to_path_buf();
    crash_loop(move || objects::daemon(&path, &store)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gcs_survives_twenty_kills_under_load() {
    let dir = tempfile::tempdir().unwrap();
    let store = objects::gcs_store(dir.path()).await;
    let path = dir.path().join("daemon");
    crash_loop(move || objects::daemon(&path, &store)).await;
}
