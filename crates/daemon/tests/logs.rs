//! Several logs in one daemon (`[[logs]]`), on POSIX, MySQL (MariaDB) and S3 (MinIO):
//! each under its own path prefix and verified whole; one log's store stalled while
//! the other two keep committing and answering; and freezing (`read_only`, `tlogd
//! freeze`) binding across restarts.

mod common;

use std::path::Path;
use std::time::Duration;

use bytes::Bytes;
use common::frontends::tlogd_verify_with;
use common::objects::minio_store;
use common::*;
use tlogd_core::note::generate_key;
use tlogd_storage_mysql::testdb::TestMariaDb;
use tlogd_storage_sql::faultproxy::FaultProxy;

/// One `[[logs]]` entry: its name, origin and verifier key; its key file is written
/// to `dir`.
struct LogSpec {
    name: &'static str,
    origin: String,
    vkey: String,
    toml: String,
}

fn log_spec(dir: &Path, name: &'static str, storage_toml: &str, extra: &str) -> LogSpec {
    let origin = format!("example.com/logs-test/{name}");
    let (skey, vkey) = generate_key(&origin).unwrap();
    let key = dir.join(format!("{name}.key"));
    std::fs::write(&key, skey).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).unwrap();
    let toml = format!(
        "[[logs]]\nname = \"{name}\"\norigin = \"{origin}\"\nprivate_key_file = \"{}\"\n{extra}\
         [logs.storage]\n{storage_toml}[logs.checkpoint]\ninterval_ms = 50\n",
        key.display()
    );
    LogSpec {
        name,
        origin,
        vkey,
        toml,
    }
}

/// A daemon serving `logs`, its config at `dir/tlogd.toml`.
fn start(dir: &Path, logs: &[&LogSpec], env: &[(String, String)]) -> Daemon {
    let port = free_port();
    let mport = free_port();
    let mut cfg =
        format!("listen = \"127.0.0.1:{port}\"\n[metrics]\nlisten = \"127.0.0.1:{mport}\"\n");
    for l in logs {
        cfg.push_str(&l.toml);
    }
    let path = dir.join("tlogd.toml");
    std::fs::write(&path, cfg).unwrap();
    let opts = Opts {
        env: env.to_vec(),
        ..Opts::default()
    };
    Daemon::spawn(dir, &path, port, mport, &opts)
}

async fn wait_ready(d: &mut Daemon, http: &Http, log: &str) {
    d.wait_ready_at(http, &format!("/{log}")).await
}

/// `tlogd verify` of one log of the daemon.
async fn verify(url: String, l: &LogSpec) {
    tlogd_verify_with(url, l.vkey.clone(), Some(l.origin.clone())).await
}

/// Four logs on three backends in one daemon (two in one bucket, under prefixes, on
/// one client): each reached under its own prefix,
/// with its own indices, checkpoint and metrics; MySQL's database stalls (every byte
/// held) while the others keep committing and answering, and `/readyz/<name>`
/// tells the logs apart; once the database is back, its log commits again; all four
/// verify whole.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn four_logs_on_three_backends_and_one_stalled_store() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let maria = tokio::task::spawn_blocking(TestMariaDb::shared)
        .await
        .unwrap();
    let url = maria.fresh_database("logs").await;
    let proxy = FaultProxy::start(([127, 0, 0, 1], maria.port()).into()).unwrap();
    let url = url.replace(
        &format!(":{}/", maria.port()),
        &format!(":{}/", proxy.port()),
    );
    let (minio, _bucket) = minio_store("three-logs").await;
    let posix = log_spec(
        dir,
        "files",
        &format!("dir = \"{}\"\n", dir.join("files").display()),
        "",
    );
    let mysql = log_spec(
        dir,
        "db",
        &format!("backend = \"mysql\"\nurl = \"{url}\"\ncommit_retry_ms = 1000\n"),
        &format!("dedup.path = \"{}\"\n", dir.join("db-dedup").display()),
    );
    let s3 = log_spec(
        dir,
        "bucket",
        &format!("{}prefix = \"first\"\n", minio.storage_toml),
        &format!("dedup.path = \"{}\"\n", dir.join("bucket-dedup").display()),
    );
    // A second log in the same bucket, under a prefix: it shares the first's client.
    let s3b = log_spec(
        dir,
        "bucket2",
        &format!("{}prefix = \"second\"\n", minio.storage_toml),
        &format!("dedup.path = \"{}\"\n", dir.join("bucket2-dedup").display()),
    );
    let all = [&posix, &mysql, &s3, &s3b];
    let http = Http::new();
    let mut d = start(dir, &all, &minio.env);
    for l in all {
        wait_ready(&mut d, &http, l.name).await;
    }
    // Each log numbers its own entries from 0.
    for i in 0..20u64 {
        for l in all {
            let e = Bytes::from(format!("{} entry {i}", l.name));
            let (index, dup) = http.add(&format!("{}/{}", d.url, l.name), e).await.unwrap();
            assert_eq!((index, dup), (i, false), "{}", l.name);
        }
    }
    let unknown = http
        .get(&format!("{}/nope/checkpoint", d.url))
        .await
        .unwrap();
    assert_eq!(unknown.0, 404);
    // The database stalls: every byte to and from it is held.
    proxy.set_latency(Duration::from_secs(3600));
    let stalled = {
        let (http, base) = (http.clone(), format!("{}/db", d.url));
        tokio::spawn(async move { http.add(&base, Bytes::from_static(b"stalled")).await })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    for i in 20..40u64 {
        for l in [&posix, &s3, &s3b] {
            let e = Bytes::from(format!("{} entry {i}", l.name));
            let base = format!("{}/{}", d.url, l.name);
            let add = http.add(&base, e);
            let (index, _) = tokio::time::timeout(Duration::from_secs(10), add)
                .await
                .unwrap_or_else(|_| panic!("{} waited for the stalled database", l.name))
                .unwrap();
            assert_eq!(index, i, "{}", l.name);
        }
    }
    assert!(
        !stalled.is_finished(),
        "the stalled log's add should still wait"
    );
    for (l, code) in [(&posix, 200), (&s3, 200)] {
        let r = http
            .get(&format!("{}/readyz/{}", d.metrics_url, l.name))
            .await
            .unwrap();
        assert_eq!(r.0, code, "{}", l.name);
    }
    // Back: the held connections are reset and the log commits again.
    proxy.set_latency(Duration::ZERO);
    proxy.cut();
    let _ = tokio::time::timeout(Duration::from_secs(30), stalled)
        .await
        .expect("the stalled add was answered once the database came back");
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        match http
            .add(&format!("{}/db", d.url), Bytes::from_static(b"after"))
            .await
        {
            Ok(_) => break,
            Err(r) => assert!(
                std::time::Instant::now() < deadline,
                "the database log did not recover: {r:?}"
            ),
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let metrics = http
        .get(&format!("{}/metrics", d.metrics_url))
        .await
        .unwrap();
    let text = String::from_utf8_lossy(&metrics.2);
    for l in all {
        let line = format!(
            "tlogd_add_requests_total{{log=\"{}\",outcome=\"ok\"}}",
            l.name
        );
        assert!(text.contains(&line), "no {line} in the metrics");
    }
    let ready = http
        .get(&format!("{}/readyz", d.metrics_url))
        .await
        .unwrap();
    assert_eq!(ready.0, 200, "{}", String::from_utf8_lossy(&ready.2));
    assert_eq!(d.terminate().code(), Some(0));
    let mut d = start(dir, &all, &minio.env);
    for l in all {
        wait_ready(&mut d, &http, l.name).await;
        verify(format!("{}/{}", d.url, l.name), l).await;
    }
}

/// A log frozen by `read_only`: adds refused with 403 (duplicates still answered),
/// reads and `tlogd verify` go on, its neighbour keeps taking entries, and the freeze
/// survives a restart without the setting; `tlogd freeze` freezes the neighbour.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_log_stays_frozen_and_its_neighbour_writable() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let posix = |name: &'static str| {
        log_spec(
            dir,
            name,
            &format!("dir = \"{}\"\n", dir.join(name).display()),
            "",
        )
    };
    let (old, other) = (posix("old"), posix("other"));
    let http = Http::new();
    let mut d = start(dir, &[&old, &other], &[]);
    wait_ready(&mut d, &http, "old").await;
    // A browser at `/` gets the list of the logs (#61), at `/<name>` is sent to
    // `/<name>/`, the log's own page; API clients get the 404s of before.
    let browse = |path: String, accept: &'static str| {
        let http = http.clone();
        async move {
            let req = hyper::Request::get(path)
                .header("accept", accept)
                .body(http_body_util::Full::new(Bytes::new()))
                .unwrap();
            http.request(req).await.unwrap()
        }
    };
    let (status, _, body) = browse(format!("{}/", d.url), "text/html").await;
    assert_eq!(status, 200);
    let page = String::from_utf8_lossy(&body);
    for l in [&old, &other] {
        assert!(
            page.contains(&format!("<a href=\"/{}/\">{}</a>", l.name, l.origin)),
            "{page}"
        );
    }
    assert_eq!(browse(format!("{}/", d.url), "*/*").await.0, 404);
    let (status, headers, _) = browse(format!("{}/old", d.url), "text/html").await;
    assert_eq!((status, headers["location"].as_str()), (308, "/old/"));
    let (status, _, body) = browse(format!("{}/old/", d.url), "text/html").await;
    assert_eq!(status, 200);
    assert!(String::from_utf8_lossy(&body).contains(&old.vkey));
    assert_eq!(browse(format!("{}/old/", d.url), "*/*").await.0, 404);
    for i in 0..5u64 {
        let (index, _) = http
            .add(&format!("{}/old", d.url), Bytes::from(format!("old {i}")))
            .await
            .unwrap();
        assert_eq!(index, i);
    }
    assert_eq!(d.terminate().code(), Some(0));
    // The same log (its key, its directory), now read_only.
    let frozen = LogSpec {
        toml: old
            .toml
            .replacen("[logs.storage]", "read_only = true\n[logs.storage]", 1),
        origin: old.origin.clone(),
        vkey: old.vkey.clone(),
        ..old
    };
    let mut d = start(dir, &[&frozen, &other], &[]);
    wait_ready(&mut d, &http, "old").await;
    let refused = http
        .add(&format!("{}/old", d.url), Bytes::from_static(b"new"))
        .await;
    let r = refused.expect_err("a frozen log takes no entry");
    assert_eq!(r.0, 403);
    assert!(String::from_utf8_lossy(&r.2).contains("frozen"));
    let dup = http
        .add(&format!("{}/old", d.url), Bytes::from_static(b"old 3"))
        .await;
    assert_eq!(dup.unwrap(), (3, true), "a duplicate is still answered");
    let (index, _) = http
        .add(
            &format!("{}/other", d.url),
            Bytes::from_static(b"still writable"),
        )
        .await
        .unwrap();
    assert_eq!(index, 0);
    let ready = http
        .get(&format!("{}/readyz/old", d.metrics_url))
        .await
        .unwrap();
    assert_eq!(ready.0, 200);
    assert!(String::from_utf8_lossy(&ready.2).contains("frozen"));
    let metrics = http
        .get(&format!("{}/metrics", d.metrics_url))
        .await
        .unwrap();
    assert!(String::from_utf8_lossy(&metrics.2).contains("tlogd_log_frozen{log=\"old\"} 1"));
    verify(format!("{}/old", d.url), &frozen).await;
    assert_eq!(d.terminate().code(), Some(0));
    // Without the setting: still frozen (it is in the log's storage).
    let mut d = start(dir, &[&old, &other], &[]);
    wait_ready(&mut d, &http, "old").await;
    let r = http
        .add(&format!("{}/old", d.url), Bytes::from_static(b"new"))
        .await;
    assert_eq!(r.expect_err("still frozen").0, 403);
    let cp = http
        .get(&format!("{}/old/checkpoint", d.url))
        .await
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&cp.2).lines().nth(1), Some("5"));
    assert_eq!(d.terminate().code(), Some(0));
    // `tlogd freeze` on the stopped daemon's file, naming the log.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_tlogd"))
        .args(["freeze", "--config"])
        .arg(dir.join("tlogd.toml"))
        .args(["--log", "other"])
        .env("RUST_LOG", "warn")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("frozen at size 1"));
    let mut d = start(dir, &[&old, &other], &[]);
    wait_ready(&mut d, &http, "other").await;
    let r = http
        .add(&format!("{}/other", d.url), Bytes::from_static(b"x"))
        .await;
    assert_eq!(r.expect_err("frozen by the command").0, 403);
    verify(format!("{}/other", d.url), &other).await;
}
