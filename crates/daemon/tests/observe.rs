//! Metrics and health endpoints of the real binary.

mod common;

use std::time::Duration;

use bytes::Bytes;
use common::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_count_what_was_sent() {
    let dir = tempfile::tempdir().unwrap();
    let mut d = Daemon::start(
        dir.path(),
        "[batching]\nmax_entries = 2\nmax_age_ms = 1000\n[queue]\nmax_entries = 2\n",
    );
    let http = Http::new();
    d.wait_ready(&http).await;
    let u = d.url.clone();
    for i in 0..5 {
        http.add(&u, Bytes::from(format!("m{i}"))).await.unwrap();
    }
    for i in 0..2 {
        let (idx, dup) = http.add(&u, Bytes::from(format!("m{i}"))).await.unwrap();
        assert_eq!((idx, dup), (i, true));
    }
    for _ in 0..3 {
        let (s, _, _) = http.post(&format!("{u}/add"), Bytes::new()).await.unwrap();
        assert_eq!(s, 400);
    }
    // A client of its own: the server closes the connection of a refused body.
    let (s, _, _) = Http::new()
        .post(&format!("{u}/add"), Bytes::from(vec![0u8; 70_000]))
        .await
        .unwrap();
    assert_eq!(s, 413);
    // Pushback: two adds linger in the two-entry queue while a third arrives. The
    // first goes alone, so the integrator lingers (1 s) on a batch that is not full.
    let mut slow = Vec::new();
    for (depth, e) in [(1, &b"slow1"[..]), (2, &b"slow2"[..])] {
        let (client, u) = (http.clone(), u.clone());
        slow.push(tokio::spawn(async move {
            client.add(&u, Bytes::from_static(e)).await
        }));
        // Queued: observed, not assumed after a sleep.
        http.wait_queue_depth(&d.metrics_url, depth).await;
    }
    let third = http.add(&u, Bytes::from_static(b"rejected")).await;
    assert!(matches!(third, Err((503, _, _))), "{third:?}");
    for s in slow {
        s.await.unwrap().unwrap();
    }
    http.wait_checkpoint(&u, 7).await;
    let (s, _, _) = http.get(&format!("{u}/tile/0/000.p/1")).await.unwrap();
    assert_eq!(s, 200);

    let (s, _, body) = http
        .get(&format!("{}/metrics", d.metrics_url))
        .await
        .unwrap();
    assert_eq!(s, 200);
    let m = String::from_utf8(body.to_vec()).unwrap();
    assert_eq!(metric(&m, "tlogd_add_requests_total{outcome=\"ok\"}"), 7.0);
    assert_eq!(
        metric(&m, "tlogd_add_requests_total{outcome=\"duplicate\"}"),
        2.0
    );
    assert_eq!(
        metric(&m, "tlogd_add_requests_total{outcome=\"bad_request\"}"),
        3.0
    );
    assert_eq!(
        metric(&m, "tlogd_add_requests_total{outcome=\"too_large\"}"),
        1.0
    );
    assert_eq!(
        metric(&m, "tlogd_add_requests_total{outcome=\"pushback\"}"),
        1.0
    );
    assert_eq!(metric(&m, "tlogd_integrated_tree_size"), 7.0);
    assert_eq!(metric(&m, "tlogd_checkpoint_size"), 7.0);
    assert_eq!(
        metric(
            &m,
            "tlogd_read_requests_total{kind=\"tile\",status=\"200\"}"
        ),
        1.0
    );
    assert_eq!(metric(&m, "tlogd_dedup_hits_total"), 2.0);
    assert!(metric(&m, "tlogd_commit_duration_seconds_count{backend=\"posix\"}") >= 4.0);
    assert!(m.contains("tlogd_build_info{version="));
    assert!(m.contains("tlogd_add_duration_seconds_bucket"));
    assert!(d.terminate().success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readyz_fails_when_storage_is_unwritable() {
    let dir = tempfile::tempdir().unwrap();
    let mut d = Daemon::start(dir.path(), "");
    let http = Http::new();
    d.wait_ready(&http).await;
    let m = d.metrics_url.clone();
    assert_eq!(http.get(&format!("{m}/healthz")).await.unwrap().0, 200);
    assert_eq!(http.get(&format!("{m}/readyz")).await.unwrap().0, 200);
    // 255 entries: the next one completes tile 0, whose full files are staged in the
    // private staging directory before the state commits.
    let adds: Vec<_> = (0..255)
        .map(|i| {
            let (http, u) = (http.clone(), d.url.clone());
            tokio::spawn(async move { http.add(&u, Bytes::from(format!("r{i}"))).await })
        })
        .collect();
    for a in adds {
        a.await.unwrap().unwrap();
    }
    // Break the private temp and staging directories (permissions do not stop root, a
    // file does): the readiness probe writes in the first, commits in the second.
    let tmp = dir.path().join("log/.tlogd/tmp");
    let staged = dir.path().join("log/.tlogd/staged");
    std::fs::remove_dir_all(&tmp).unwrap();
    std::fs::write(&tmp, b"not a directory").unwrap();
    let _ = std::fs::remove_dir_all(&staged);
    std::fs::write(&staged, b"not a directory").unwrap();
    let (s, _, body) = http.get(&format!("{m}/readyz")).await.unwrap();
    assert_eq!(s, 503, "{}", String::from_utf8_lossy(&body));
    // No backend detail (here the paths of the log) in the probe's answer.
    assert_eq!(
        &body[..],
        b"not ready: storage cannot take writes (the daemon's log says why)\n"
    );
    assert_eq!(http.get(&format!("{m}/healthz")).await.unwrap().0, 200);
    // An add is not acknowledged while storage is broken: its batch is retried
    // (`storage.commit_retry_ms`), and lands once storage is repaired.
    let pending = tokio::spawn({
        let (http, u) = (http.clone(), d.url.clone());
        async move { http.add(&u, Bytes::from_static(b"x")).await }
    });
    // Wait until its commit was tried and failed (observed, not assumed after a
    // sleep), then it must still be waiting.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let (_, _, body) = http.get(&format!("{m}/metrics")).await.unwrap();
        let failed = String::from_utf8_lossy(&body).lines().any(|l| {
            l.starts_with(
                "tlogd_storage_errors_total{log=\"default\",backend=\"posix\",op=\"commit\"} ",
            )
        });
        if failed {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no failed commit within 30 s"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(
        !pending.is_finished(),
        "acknowledged while storage was broken"
    );
    std::fs::remove_file(&tmp).unwrap();
    std::fs::create_dir(&tmp).unwrap();
    std::fs::remove_file(&staged).unwrap();
    assert_eq!(http.get(&format!("{m}/readyz")).await.unwrap().0, 200);
    assert_eq!(pending.await.unwrap().unwrap().0, 255);
    assert!(d.terminate().success());
}

/// A log that does not grow republishes its checkpoint every
/// `checkpoint.republish_interval_ms`: same tree, signed again (witnesses then cosign
/// it with a fresh timestamp).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_log_republishes_its_checkpoint() {
    let dir = tempfile::tempdir().unwrap();
    let opts = Opts {
        checkpoint_toml: "republish_interval_ms = 100\n".into(),
        ..Opts::default()
    };
    let storage = format!("dir = \"{}\"\n", dir.path().join("log").display());
    let mut d = Daemon::start_opts(dir.path(), &storage, "", &opts);
    let http = Http::new();
    d.wait_ready(&http).await;
    http.add(&d.url, Bytes::from_static(b"only entry"))
        .await
        .unwrap();
    let cp = http.wait_checkpoint(&d.url, 1).await;
    let (_, _, first) = http.get(&format!("{}/checkpoint", d.url)).await.unwrap();
    let published = |m: &str| metric(m, "tlogd_checkpoints_published_total");
    let scrape = || async {
        let (_, _, m) = http
            .get(&format!("{}/metrics", d.metrics_url))
            .await
            .unwrap();
        String::from_utf8(m.to_vec()).unwrap()
    };
    let before = published(&scrape().await);
    // Bounded wait on the counter: three more publishes of the unchanged tree.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let m = scrape().await;
        if published(&m) >= before + 3.0 {
            assert_eq!(metric(&m, "tlogd_checkpoint_size"), 1.0);
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no republish within 30 s"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // Ed25519 is deterministic: without witnesses the republished bytes are the same.
    let (_, _, again) = http.get(&format!("{}/checkpoint", d.url)).await.unwrap();
    assert_eq!(again, first);
    assert_eq!(http.checkpoint(&d.url).await, cp);
    assert!(d.terminate().success());
}
