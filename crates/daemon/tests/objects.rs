//! The real `tlogd` binary on the object-store backends: S3 against a private MinIO
//! server, GCS against the GCS emulator. Two frontends on one bucket under the
//! loadgen, `tlogd verify` through both, every index handed out once; the log served
//! straight from the MinIO bucket (public read on `checkpoint` and `tile/` only); dedup
//! per frontend.

mod common;

use std::path::Path;

use bytes::Bytes;
use common::frontends::{tlogd_verify, two_frontends_under_load};
use common::objects::{Store, daemon, daemon_with, gcs_store, minio_store};
use common::*;
use tlogd_storage_s3::testsupport::minio::TestMinio;

async fn two_daemons_share_one_bucket(store: Store, dir: &Path) -> (Daemon, Daemon) {
    let http = Http::new();
    let mut a = daemon(&dir.join("a"), &store);
    let mut b = daemon(&dir.join("b"), &store);
    a.wait_ready(&http).await;
    b.wait_ready(&http).await;
    two_frontends_under_load(&http, &a, &b, dir).await;
    (a, b)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_daemons_share_one_s3_bucket_served_straight_from_the_bucket() {
    let dir = tempfile::tempdir().unwrap();
    let (store, bucket) = minio_store("e2e-two").await;
    let (mut a, mut b) = two_daemons_share_one_bucket(store, dir.path()).await;
    // Readers need no tlogd: the bucket itself serves the log once its public
    // resources are readable by anyone, and tlogd verify checks it there.
    let minio = TestMinio::shared();
    minio.set_public_read(&bucket, "");
    let bucket_url = format!("{}/{bucket}", minio.endpoint());
    tlogd_verify(bucket_url.clone()).await;
    let http = Http::new();
    let (status, headers, _) = http.get(&format!("{bucket_url}/checkpoint")).await.unwrap();
    assert_eq!(status, 200);
    assert_eq!(
        headers.get("cache-control").map(String::as_str),
        Some("no-cache")
    );
    let (status, headers, _) = http
        .get(&format!("{bucket_url}/tile/entries/000"))
        .await
        .unwrap();
    assert_eq!(status, 200);
    assert_eq!(
        headers.get("cache-control").map(String::as_str),
        Some("max-age=31536000, immutable")
    );
    // tlogd's own records stay private.
    let (status, _, _) = http
        .get(&format!("{bucket_url}/.tlogd/state"))
        .await
        .unwrap();
    assert_eq!(status, 403, ".tlogd/state must not be public");
    assert!(a.terminate().success());
    assert!(b.terminate().success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_daemons_share_one_gcs_bucket() {
    let dir = tempfile::tempdir().unwrap();
    let store = gcs_store(dir.path()).await;
    let (mut a, mut b) = two_daemons_share_one_bucket(store, dir.path()).await;
    assert!(a.terminate().success());
    assert!(b.terminate().success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_duplicate_sent_to_another_frontend_gets_the_original_index() {
    // Each frontend has its own dedup index: a resubmission to the same frontend gets
    // the original index; the same entry sent to the other frontend is found in the
    // entries it sees committed by others before it appends (#57; it was logged again).
    let dir = tempfile::tempdir().unwrap();
    let (store, _) = minio_store("e2e-dedup").await;
    let http = Http::new();
    let mut a = daemon(&dir.path().join("a"), &store);
    let mut b = daemon(&dir.path().join("b"), &store);
    a.wait_ready(&http).await;
    b.wait_ready(&http).await;
    let entry = Bytes::from_static(b"the same entry");
    let (first, dup) = http.add(&a.url, entry.clone()).await.unwrap();
    assert!(!dup);
    let (again, dup) = http.add(&a.url, entry.clone()).await.unwrap();
    assert_eq!((again, dup), (first, true));
    let (other, dup) = http.add(&b.url, entry.clone()).await.unwrap();
    assert_eq!(
        (other, dup),
        (first, true),
        "the other frontend finds it among the entries committed since it last looked"
    );
    assert!(a.terminate().success());
    assert!(b.terminate().success());
}

/// Two frontends on one bucket, `b` forwarding to `a` (#42): under the loadgen, every
/// index handed out once and both serve one tree, with `b`'s adds sequenced by `a`;
/// the same entry sent to `a` and then `b` is found by `a`'s index; forwards without
/// the frontends' token, or malformed, are refused and log nothing; with `a` gone, `b`
/// commits by itself.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forwarding_frontend_has_its_adds_sequenced_by_the_other() {
    let dir = tempfile::tempdir().unwrap();
    let (store, _) = minio_store("e2e-forward").await;
    let token = dir.path().join("forward.token");
    std::fs::write(&token, "# the frontends' token\nfrontends-secret-1\n").unwrap();
    let http = Http::new();
    let forward = |to: Option<&str>| {
        let to = to.map_or(String::new(), |url| format!("to = \"{url}\"\n"));
        format!("[forward]\n{to}token_file = \"{}\"\n", token.display())
    };
    let mut a = daemon_with(&dir.path().join("a"), &store, &forward(None));
    let mut b = daemon_with(&dir.path().join("b"), &store, &forward(Some(&a.url)));
    a.wait_ready(&http).await;
    b.wait_ready(&http).await;
    two_frontends_under_load(&http, &a, &b, dir.path()).await;
    let metrics = |d: &Daemon| {
        let url = format!("{}/metrics", d.metrics_url);
        let http = &http;
        async move { String::from_utf8(http.get(&url).await.unwrap().2.to_vec()).unwrap() }
    };
    let (ma, mb) = (metrics(&a).await, metrics(&b).await);
    let forwarded = metric(&mb, "tlogd_forwarded_entries_total");
    // Half of the loadgen's 4,000 adds went to b (a resubmission still in flight at b
    // is answered there, not forwarded): nearly all of them were forwarded.
    assert!(forwarded >= 1500.0, "b forwarded {forwarded} entries");
    assert_eq!(
        metric(&ma, "tlogd_forward_received_entries_total"),
        forwarded
    );

    // a's index sees b's entries: a duplicate is found whichever frontend takes it.
    let entry = Bytes::from_static(b"sent to a, then to b");
    let (first, dup) = http.add(&a.url, entry.clone()).await.unwrap();
    assert!(!dup);
    assert_eq!(http.add(&b.url, entry).await.unwrap(), (first, true));

    // Forwards need the token, and a well-formed body.
    let smuggled = Bytes::from(tlogd_core::engine::forward::encode_entries(&[
        Bytes::from_static(b"smuggled"),
    ]));
    let origin = tlogd_core::conformance::ORIGIN.replace('/', "%2F");
    let forward_url = format!("{}/.tlogd/forward?origin={origin}", a.url);
    let r = http.post(&forward_url, smuggled.clone()).await.unwrap();
    assert_eq!(r.0, 401, "{:?}", r.2);
    let wrong = [("authorization", "Bearer not-the-secret")];
    let r = http
        .post_with(&forward_url, &wrong, smuggled.clone())
        .await
        .unwrap();
    assert_eq!(r.0, 403, "{:?}", r.2);
    let right = [("authorization", "Bearer frontends-secret-1")];
    let truncated = Bytes::from_static(b"\0\0\0\x09smuggled");
    let r = http
        .post_with(&forward_url, &right, truncated)
        .await
        .unwrap();
    assert_eq!(r.0, 400, "{:?}", r.2);
    // A forward for another log (a `forward.to` naming the wrong log of a daemon) is
    // refused, and says it queued nothing.
    let other_log = format!("{}/.tlogd/forward?origin=example.com%2Fanother", a.url);
    let r = http
        .post_with(&other_log, &right, smuggled.clone())
        .await
        .unwrap();
    assert_eq!(r.0, 409, "{:?}", r.2);
    assert!(r.2.starts_with(b"tlogd-forward-refused: "), "{:?}", r.2);

    // a gone: b commits its adds itself (one answer may be 503, resubmitted).
    a.kill();
    let alone = Bytes::from_static(b"after a is gone");
    let mut index = None;
    for _ in 0..3 {
        match http.add(&b.url, alone.clone()).await {
            Ok((i, _)) => {
                index = Some(i);
                break;
            }
            Err(r) => assert_eq!(r.0, 503, "{:?}", r.2),
        }
    }
    let index = index.expect("b answers by itself once a is gone");
    assert!(index > first);
    let mb = metrics(&b).await;
    assert!(metric(&mb, "tlogd_forwarded_batches_total{outcome=\"unsent\"}") >= 1.0);
    let cp = http.wait_checkpoint(&b.url, index + 1).await;
    let mut seen = 0;
    for n in 0..cp.size.div_ceil(256) {
        for e in http.bundle(&b.url, n, cp.size).await {
            assert_ne!(e, b"smuggled", "a refused forward was logged");
            seen += usize::from(e == b"after a is gone");
        }
    }
    assert_eq!(seen, 1, "logged once");
    tlogd_verify(b.url.clone()).await;
    assert!(b.terminate().success());
}

/// Stands between a forwarding frontend and the sequencing one, as a proxy or a load
/// balancer would: delivers each request, then, while `shed` is set, answers 503 in
/// place of the real answer (what the sequencing frontend's own response budget did).
async fn shedding_proxy(to: String, shed: std::sync::Arc<std::sync::atomic::AtomicBool>) -> String {
    use http_body_util::{BodyExt, Full};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                return;
            };
            let (to, shed) = (to.clone(), shed.clone());
            tokio::spawn(async move {
                let service = hyper::service::service_fn(
                    move |req: hyper::Request<hyper::body::Incoming>| {
                        let (to, shed) = (to.clone(), shed.clone());
                        async move {
                            let path = req
                                .uri()
                                .path_and_query()
                                .map(|p| p.to_string())
                                .unwrap_or_default();
                            let auth = req
                                .headers()
                                .get("authorization")
                                .and_then(|v| v.to_str().ok())
                                .unwrap_or("")
                                .to_string();
                            let body = req
                                .into_body()
                                .collect()
                                .await
                                .map(|b| b.to_bytes())
                                .unwrap_or_default();
                            let (status, _, answer) = Http::new()
                                .post_with(
                                    &format!("{to}{path}"),
                                    &[("authorization", &auth)],
                                    body,
                                )
                                .await
                                .unwrap_or((502, Default::default(), Bytes::new()));
                            let (status, answer) = if shed.load(std::sync::atomic::Ordering::SeqCst)
                            {
                                (
                                    503,
                                    Bytes::from_static(
                                        b"busy: too many response bytes in flight; retry later\n",
                                    ),
                                )
                            } else {
                                (status, answer)
                            };
                            Ok::<_, std::convert::Infallible>(
                                hyper::Response::builder()
                                    .status(status)
                                    .body(Full::new(answer))
                                    .unwrap(),
                            )
                        }
                    },
                );
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(hyper_util::rt::TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    url
}

/// A forward the sequencing frontend committed, answered 503 by what stands between
/// (its response budget under readers that never read, a proxy): the forwarding
/// frontend answers "may be logged" and never commits the batch itself; the client's
/// resubmissions get 503 until the sequencing frontend's own answer reaches them, then
/// the original index. Read back: the entry is in the log once. (#57: the 503 read as
/// "never queued there", the forwarding frontend committed the batch again: 985
/// entries twice in 15 s.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forward_answered_503_after_it_was_committed_is_not_committed_again() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};
    let dir = tempfile::tempdir().unwrap();
    let (store, _) = minio_store("e2e-forward-shed").await;
    let token = dir.path().join("forward.token");
    std::fs::write(&token, "frontends-secret-1\n").unwrap();
    let http = Http::new();
    let forward = |to: Option<&str>| {
        let to = to.map_or(String::new(), |url| format!("to = \"{url}\"\n"));
        format!("[forward]\n{to}token_file = \"{}\"\n", token.display())
    };
    let mut a = daemon_with(&dir.path().join("a"), &store, &forward(None));
    a.wait_ready(&http).await;
    let shed = Arc::new(AtomicBool::new(true));
    let proxy = shedding_proxy(a.url.clone(), shed.clone()).await;
    let mut b = daemon_with(&dir.path().join("b"), &store, &forward(Some(&proxy)));
    b.wait_ready(&http).await;
    let entry = Bytes::from_static(b"committed by a, answered 503 on the way back");
    for _ in 0..4 {
        let r = http.add(&b.url, entry.clone()).await;
        assert_eq!(r.as_ref().map_err(|r| r.0), Err(503), "{r:?}");
    }
    // The way back heals; forwarding resumes after its pause.
    shed.store(false, Ordering::SeqCst);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let (index, duplicate) = loop {
        match http.add(&b.url, entry.clone()).await {
            Ok(answer) => break answer,
            Err(r) if r.0 == 503 && std::time::Instant::now() < deadline => {
                tokio::time::sleep(std::time::Duration::from_millis(200)).await;
            }
            Err(r) => panic!("{r:?}"),
        }
    };
    assert!(duplicate, "a logged it first");
    let cp = http.wait_checkpoint(&a.url, index + 1).await;
    let mut seen = 0;
    for n in 0..cp.size.div_ceil(256) {
        for e in http.bundle(&a.url, n, cp.size).await {
            seen += usize::from(e == entry);
        }
    }
    assert_eq!(seen, 1, "logged once");
    tlogd_verify(a.url.clone()).await;
    assert!(a.terminate().success());
    assert!(b.terminate().success());
}

/// Careful clients write through a forwarding frontend while the sequencing one is
/// killed three times (MinIO): every acknowledged entry once, none twice (#57).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn careful_clients_through_a_forwarding_frontend_survive_three_kills_on_minio() {
    let dir = tempfile::tempdir().unwrap();
    let (store, _) = minio_store("e2e-forward-kills").await;
    let token = dir.path().join("forward.token");
    std::fs::write(&token, "frontends-secret-1\n").unwrap();
    let http = Http::new();
    let forward = |to: Option<&str>| {
        let to = to.map_or(String::new(), |url| format!("to = \"{url}\"\n"));
        format!(
            "[forward]\n{to}token_file = \"{}\"\ntimeout_ms = 2000\n",
            token.display()
        )
    };
    let mut s = daemon_with(&dir.path().join("s"), &store, &forward(None));
    s.wait_ready(&http).await;
    let mut f = daemon_with(&dir.path().join("f"), &store, &forward(Some(&s.url)));
    f.wait_ready(&http).await;
    let opts = Opts {
        env: store.env.clone(),
        ..Opts::default()
    };
    common::frontends::careful_clients_survive_sequencer_kills(&http, &mut s, &f, &opts, 3).await;
    tlogd_verify(s.url.clone()).await;
    assert!(s.terminate().success());
    assert!(f.terminate().success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bucket_that_does_not_exist_stops_the_daemon_with_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let (mut store, bucket) = minio_store("e2e-missing").await;
    store.storage_toml = store
        .storage_toml
        .replace(&bucket, "no-such-bucket-anywhere");
    let log = dir.path().join("stderr.log");
    std::fs::create_dir_all(dir.path().join("d")).unwrap();
    let dedup = format!(
        "[dedup]\npath = \"{}\"\n",
        dir.path().join("d/dedup").display()
    );
    let opts = Opts {
        env: store.env.clone(),
        stderr_to: Some(log.clone()),
        ..Opts::default()
    };
    let mut d = Daemon::start_opts(&dir.path().join("d"), &store.storage_toml, &dedup, &opts);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let status = loop {
        if let Some(s) = d.child.try_wait().unwrap() {
            break s;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "tlogd kept running without a bucket"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    };
    assert!(!status.success());
    let err = std::fs::read_to_string(&log).unwrap();
    assert!(err.contains("opening the s3 log"), "{err}");
    assert!(err.contains("no-such-bucket-anywhere"), "{err}");
}
