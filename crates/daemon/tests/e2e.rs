//! End-to-end tests against the real `tlogd` binary over HTTP.

mod common;

use std::collections::HashMap;

use std::time::Duration;

use bytes::Bytes;
use common::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn thousands_of_concurrent_adds_verify() {
    let dir = tempfile::tempdir().unwrap();
    let mut d = Daemon::start(dir.path(), "");
    let http = Http::new();
    d.wait_ready(&http).await;
    let url = d.url.clone();
    let first_cp = http.checkpoint(&url).await;
    assert_eq!(first_cp.size, 0);

    const N: u64 = 4000;
    const WRITERS: u64 = 64;
    let mut tasks = Vec::new();
    for w in 0..WRITERS {
        let http = http.clone();
        let url = url.clone();
        tasks.push(tokio::spawn(async move {
            let mut out = Vec::new();
            for i in (w..N).step_by(WRITERS as usize) {
                let e = format!("e2e entry {i}").into_bytes();
                let (idx, dup) = http.add(&url, Bytes::from(e.clone())).await.expect("add");
                assert!(!dup);
                out.push((idx, e));
            }
            out
        }));
    }
    // Collect checkpoints while writing, to check they are all consistent.
    let mut cps = vec![first_cp];
    let mut acked: HashMap<u64, Vec<u8>> = HashMap::new();
    for t in tasks {
        cps.push(http.checkpoint(&url).await);
        for (idx, e) in t.await.unwrap() {
            assert!(
                acked.insert(idx, e).is_none(),
                "index {idx} handed out twice"
            );
        }
    }
    let mut idx: Vec<u64> = acked.keys().copied().collect();
    idx.sort();
    assert_eq!(idx, (0..N).collect::<Vec<_>>(), "indices are contiguous");
    let last = http.wait_checkpoint(&url, N).await;
    cps.push(last.clone());
    for w in cps.windows(2) {
        assert!(w[0].size <= w[1].size, "checkpoints never go back");
        http.verify_consistency(&url, &w[0], &w[1]).await;
    }
    // The whole log, and the partials of every checkpoint seen on the way.
    let summary = check_observed(&url, &cps).await;
    assert_eq!(summary.entries, N);
    // Every entry is in its bundle and has an inclusion proof.
    for n in 0..N.div_ceil(256) {
        for (i, e) in http
            .bundle(&url, n, last.size)
            .await
            .into_iter()
            .enumerate()
        {
            assert_eq!(acked[&(n * 256 + i as u64)], e);
        }
    }
    for i in (0..N).step_by(7) {
        http.verify_inclusion(&url, &last, i, &acked[&i]).await;
    }
    assert!(d.terminate().success(), "clean shutdown");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_gets_clear_errors_and_changes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let mut d = Daemon::start(dir.path(), "");
    let http = Http::new();
    d.wait_ready(&http).await;
    let u = d.url.clone();
    let (s, _, body) = http.post(&format!("{u}/add"), Bytes::new()).await.unwrap();
    assert_eq!(s, 400, "empty body");
    assert_eq!(std::str::from_utf8(&body).unwrap().lines().count(), 1);
    let (s, _, _) = http
        .post(&format!("{u}/add"), Bytes::from(vec![b'a'; 65536]))
        .await
        .unwrap();
    assert_eq!(s, 413, "65536 bytes");
    // The server closes a connection whose body it refused to read; use a client of
    // its own so the main client's pool never reuses that connection.
    let (s, _, _) = Http::new()
        .post(&format!("{u}/add"), Bytes::from(vec![b'a'; 1 << 20]))
        .await
        .unwrap();
    assert_eq!(s, 413, "1 MiB");
    assert_eq!(
        http.add(&u, Bytes::from(vec![b'a'; 65535]))
            .await
            .unwrap()
            .0,
        0
    );
    for (path, want) in [
        ("/tile/0/0", 400),
        ("/tile/0/1", 400),
        ("/tile/0/01", 400),
        ("/tile/0/0001", 400),
        ("/tile/00/000", 400),
        ("/tile/01/000", 400),
        ("/tile/0/000.p/0", 400),
        ("/tile/0/000.p/256", 400),
        ("/tile/0/000.p/01", 400),
        ("/tile/0/000.p/", 400),
        ("/tile/0/000.p/1/", 400),
        ("/tile/0/000.p/1.p/1", 400),
        ("/tile/0/1000", 400),
        ("/tile/0/x000/001", 400),
        ("/tile/0/x001", 400),
        ("/tile/0/001/000", 400),
        ("/tile/0/X001/000", 400),
        ("/tile/entries/x000/000", 400),
        ("/tile/entries/000.p/256", 400),
        ("/tile/entry/000", 400),
        ("/tile/64/000", 400),
        ("/tile/-1/000", 400),
        ("/tile/abc", 400),
        ("/tile/", 404),
        ("/tile//0/000", 400),
        // Traversal, plain and percent-encoded: never a file outside the log's paths.
        ("/tile/../x", 400),
        ("/tile/0/../../.tlogd/state.0", 400),
        ("/tile/%2e%2e/x", 400),
        ("/tile/%2E%2E/%2e%2e/.tlogd/lock", 400),
        ("/tile/0/%30%30%30.p/1", 400),
        ("/tile/0/000%2ep/1", 400),
        ("/tile/0/000.p/1%00", 400),
        ("/tile/0/000.p/1", 200),
        ("/tile/entries/000.p/1", 200),
        ("/tile/0/000.p/1?cachebust=1", 200),
        ("/tile/0/000.p/2", 404),
        ("/tile/0/000", 404),
        ("/tile/0/001", 404),
        ("/tile/entries/001", 404),
        ("/tile/1/000.p/1", 404),
        ("/tile/0/x001/000", 404),
        ("/.tlogd/state", 404),
        ("/.tlogd/state.0", 404),
        ("/../checkpoint", 404),
        ("/checkpoint/", 404),
        ("/checkpoint/..", 404),
        ("/nothing", 404),
        ("/", 404),
    ] {
        let (s, _, body) = http.get(&format!("{u}{path}")).await.unwrap();
        assert_eq!(s, want, "GET {path}");
        if s != 200 {
            let body = std::str::from_utf8(&body).unwrap();
            assert!(
                body.ends_with('\n') && body.lines().count() == 1,
                "GET {path}: {body:?}"
            );
        }
    }
    // Wrong methods: 405 naming the right one, one line.
    for (method, path, allowed) in [
        ("GET", "/add", "POST"),
        ("PUT", "/add", "POST"),
        ("POST", "/checkpoint", "GET"),
        ("DELETE", "/tile/0/000.p/1", "GET"),
    ] {
        let req = hyper::Request::builder()
            .method(method)
            .uri(format!("{u}{path}"))
            .body(http_body_util::Full::new(Bytes::new()))
            .unwrap();
        let (s, h, body) = http.request(req).await.unwrap();
        assert_eq!(s, 405, "{method} {path}");
        assert_eq!(h["allow"], allowed, "{method} {path}");
        assert_eq!(std::str::from_utf8(&body).unwrap().lines().count(), 1);
    }
    // Bodies that do not arrive whole: announced but cut short by the client's EOF,
    // a chunked body over the limit, a malformed chunk. None is logged.
    for (raw, want) in [
        (
            &b"POST /add HTTP/1.1\r\nHost: t\r\nContent-Length: 100\r\n\r\nonly this"[..],
            400,
        ),
        (
            b"POST /add HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nab\r\n",
            400,
        ),
        (
            b"POST /add HTTP/1.1\r\nHost: t\r\nContent-Length: 99999999999\r\n\r\nx",
            413,
        ),
    ] {
        let r = raw_exchange(&u, raw, true, Duration::from_secs(60)).await;
        assert_eq!(r.status(), Some(want), "{r:?}");
        assert_eq!(r.body().lines().count(), 1, "{r:?}");
    }
    let mut chunked =
        b"POST /add HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n".to_vec();
    for _ in 0..9 {
        chunked.extend_from_slice(b"2000\r\n");
        chunked.extend_from_slice(&[b'c'; 0x2000]);
        chunked.extend_from_slice(b"\r\n");
    }
    chunked.extend_from_slice(b"0\r\n\r\n");
    // EOF after the whole body: the daemon may keep the connection for the next
    // request, and without EOF the exchange would wait out its header-read timeout.
    let r = raw_exchange(&u, &chunked, true, Duration::from_secs(60)).await;
    assert_eq!(r.status(), Some(413), "73728 chunked bytes: {r:?}");
    let (s, h, _) = http.get(&format!("{u}/tile/0/000.p/1")).await.unwrap();
    assert_eq!(s, 200);
    assert!(h["cache-control"].contains("immutable"));
    let (_, h, _) = http.get(&format!("{u}/checkpoint")).await.unwrap();
    assert_eq!(h["cache-control"], "no-cache");
    let cp = http.wait_checkpoint(&u, 1).await;
    assert_eq!(cp.size, 1, "only the valid entry was logged");
    assert_eq!(
        http.add(&u, Bytes::from_static(b"next")).await.unwrap().0,
        1,
        "the next entry follows the only one logged"
    );
    assert!(d.terminate().success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn overload_gets_503_with_retry_after() {
    let dir = tempfile::tempdir().unwrap();
    // Two entries in flight at most, and the integrator lingers 1.5 s on a batch (wide
    // margins: other tests load the same 2 cores).
    let mut d = Daemon::start(
        dir.path(),
        "[batching]\nmax_entries = 2\nmax_age_ms = 1500\n[queue]\nmax_entries = 2\nretry_after_s = 3\n",
    );
    let http = Http::new();
    d.wait_ready(&http).await;
    let u = d.url.clone();
    let add = |entry: String| {
        let http = http.clone();
        let u = u.clone();
        tokio::spawn(async move { http.add(&u, Bytes::from(entry)).await })
    };
    // Two adds sent together sit in the lingering batch: the queue is full, observed
    // through the metric rather than assumed after a sleep. On two loaded cores the
    // linger may end before the third add arrives (then it is logged): try again.
    let mut acked = Vec::new();
    let mut pushed_back = false;
    for round in 0..5 {
        let (first, second) = (
            add(format!("first {round}")),
            add(format!("second {round}")),
        );
        if http.saw_queue_depth(&d.metrics_url, 2).await {
            match http.add(&u, Bytes::from(format!("third {round}"))).await {
                Err((503, h, body)) => {
                    assert_eq!(h["retry-after"], "3");
                    assert!(String::from_utf8_lossy(&body).contains("queue is full"));
                    pushed_back = true;
                }
                Ok((index, _)) => acked.push(index),
                Err(other) => panic!("expected 503, got {other:?}"),
            }
        }
        acked.push(first.await.unwrap().unwrap().0);
        acked.push(second.await.unwrap().unwrap().0);
        if pushed_back {
            break;
        }
    }
    assert!(pushed_back, "the queue was never seen full in 5 rounds");
    acked.sort();
    assert_eq!(acked, (0..acked.len() as u64).collect::<Vec<_>>());
    // Pushback clears once the queue drains.
    assert_eq!(
        http.add(&u, Bytes::from_static(b"after")).await.unwrap().0,
        acked.len() as u64
    );
    assert!(d.terminate().success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_daemon_on_the_same_directory_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let mut d = Daemon::start(dir.path(), "");
    let http = Http::new();
    d.wait_ready(&http).await;
    let port = free_port();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_tlogd"))
        .args(["serve", "--metrics-listen", "", "--origin", ORIGIN])
        .arg("--listen")
        .arg(format!("127.0.0.1:{port}"))
        .arg("--storage-dir")
        .arg(dir.path().join("log"))
        .arg("--private-key-file")
        .arg(dir.path().join("key"))
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("in use by another tlogd"), "{err}");
    assert!(d.terminate().success());
}

/// An origin the log could not sign into a checkpoint or record in its state stops
/// the daemon before it opens anything, with one line naming the problem (it used to
/// accept adds and never publish).
#[test]
fn an_origin_that_cannot_be_published_stops_the_daemon_with_one_line() {
    let dir = tempfile::tempdir().unwrap();
    let long = "o".repeat(1025);
    for (origin, says) in [
        ("example.com/\tlog", "control character '\\t' at byte 12"),
        ("example.com/log\u{1}", "control character '\\u{1}'"),
        ("example.com/log\u{7f}", "control character '\\u{7f}'"),
        (" example.com/log", "whitespace"),
        (long.as_str(), "1025 bytes long"),
    ] {
        let port = free_port();
        let child = std::process::Command::new(env!("CARGO_BIN_EXE_tlogd"))
            .args(["serve", "--metrics-listen", ""])
            .arg("--origin")
            .arg(origin)
            .arg("--listen")
            .arg(format!("127.0.0.1:{port}"))
            .arg("--storage-dir")
            .arg(dir.path().join("log"))
            .env("TLOGD_PRIVATE_KEY", SKEY)
            // anyhow would append a backtrace, which is not what an operator sees.
            .env_remove("RUST_BACKTRACE")
            .env_remove("RUST_LIB_BACKTRACE")
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        // A daemon that accepted the origin would serve forever: never wait on it
        // unbounded.
        let out = wait_exit(child, Duration::from_secs(30));
        assert!(!out.status.success(), "{origin:?} was accepted");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(err.trim_end().lines().count(), 1, "{err}");
        assert!(err.contains("`origin`") && err.contains(says), "{err}");
        assert!(!dir.path().join("log").exists(), "nothing is created");
    }
}

/// The output of a process expected to exit by itself; killed (and the test failed)
/// if it is still running after `limit`.
fn wait_exit(mut child: std::process::Child, limit: Duration) -> std::process::Output {
    let deadline = std::time::Instant::now() + limit;
    loop {
        if child.try_wait().unwrap().is_some() {
            return child.wait_with_output().unwrap();
        }
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            let out = child.wait_with_output().unwrap();
            panic!(
                "still running after {limit:?}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// What a crash between writing a batch's files and committing its tree state leaves
/// on disk, the batch's full tiles and bundles at their final paths past the committed
/// size, is never served: reads stop at the committed tree (404 past it, the committed
/// partials with exactly the committed bytes), and later batches replace the files.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn files_a_crash_left_past_the_tree_are_never_served() {
    let dir = tempfile::tempdir().unwrap();
    let http = Http::new();
    let mut d = Daemon::start(dir.path(), "");
    d.wait_ready(&http).await;
    let u = d.url.clone();
    let mut known = Vec::new();
    for i in 0..300u64 {
        let e = format!("torn {i}").into_bytes();
        let (idx, _) = http.add(&u, Bytes::from(e.clone())).await.unwrap();
        known.push((idx, e));
    }
    http.wait_checkpoint(&u, 300).await;
    assert!(d.terminate().success());
    // The files of a batch that would have taken the tree to 768 entries, written
    // before a crash that came ahead of its state commit. The junk parses (a bundle of
    // 256 entries, a tile of 256 hashes), so only the committed size keeps it out.
    let mut junk_bundle = Vec::new();
    for _ in 0..256 {
        tlogd_core::bundle::append_entry(&mut junk_bundle, b"junk").unwrap();
    }
    let root = dir.path().join("log");
    for n in ["001", "002"] {
        std::fs::write(root.join("tile/entries").join(n), &junk_bundle).unwrap();
        std::fs::write(root.join("tile/0").join(n), vec![9u8; 256 * 32]).unwrap();
    }
    let mut d = Daemon::start(dir.path(), "");
    d.wait_ready(&http).await;
    let u = d.url.clone();
    let cp = http.checkpoint(&u).await;
    assert_eq!(cp.size, 300);
    for path in [
        "tile/entries/001",
        "tile/0/001",
        "tile/entries/002",
        "tile/0/002",
        "tile/entries/001.p/45",
        "tile/0/001.p/45",
        "tile/entries/002.p/1",
        "tile/1/000.p/2",
    ] {
        let (status, _, _) = http.get(&format!("{u}/{path}")).await.unwrap();
        assert_eq!(status, 404, "{path} is past the committed tree");
    }
    // The committed partials hold the committed entries and their hashes.
    http.verify_entries(&u, 300, &known).await;
    let level0 = http
        .tile_hashes(&u, &tlogd_core::tile::TileId::hash(0, 1, 44))
        .await;
    let leaves: Vec<_> = known[256..]
        .iter()
        .map(|(_, e)| tlogd_core::hash::leaf_hash(e))
        .collect();
    assert_eq!(level0, leaves);
    // Later batches replace the planted files with the real ones.
    for i in 300..800u64 {
        let e = format!("torn {i}").into_bytes();
        let (idx, _) = http.add(&u, Bytes::from(e.clone())).await.unwrap();
        known.push((idx, e));
    }
    let cp = http.wait_checkpoint(&u, 800).await;
    http.verify_entries(&u, cp.size, &known).await;
    for i in (0..800).step_by(9) {
        http.verify_inclusion(&u, &cp, i, &known[i as usize].1)
            .await;
    }
    assert!(d.terminate().success());
}

/// SIGKILL under write load, restart, repeat: no acknowledged entry is lost and every
/// checkpoint is consistent with all earlier ones.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crash_under_load_loses_no_acknowledged_entry() {
    let dir = tempfile::tempdir().unwrap();
    let http = Http::new();
    let mut writers = Writers::default();
    let mut checkpoints = Vec::new();
    for round in 0..4u64 {
        let mut d = Daemon::start(dir.path(), "");
        d.wait_ready(&http).await;
        let u = d.url.clone();
        let cp = http.checkpoint(&u).await;
        // Everything acknowledged before the crash is there, byte for byte.
        let known = writers.snapshot();
        let size = tlogd_size(&http, &u, &known).await;
        http.verify_entries(&u, size, &known).await;
        checkpoints.push(cp);
        // Kill once the load is really running: after a number of acknowledgements
        // (varied, so the kill lands at different points of the commit cycle), not
        // after a time that a slow machine may spend starting up.
        let target = writers.count() + 60 + 25 * round as usize;
        writers.start(&http, &u, 16, &format!("crash round {round}"));
        writers.wait_count(target).await;
        d.kill();
        writers.stop().await;
    }
    // Final restart: all checkpoints ever seen are consistent with the final one.
    let mut d = Daemon::start(dir.path(), "");
    d.wait_ready(&http).await;
    let u = d.url.clone();
    let n = writers.count() as u64;
    assert!(n >= 4 * 60, "the load acknowledged only {n} entries");
    let known = writers.snapshot();
    let size = tlogd_size(&http, &u, &known).await;
    let last = http.checkpoint(&u).await;
    assert!(last.size >= size, "the checkpoint went back");
    // Each acknowledged entry is in the log once, at its index, and nowhere else.
    http.verify_entries(&u, last.size, &known).await;
    http.verify_unique(&u, last.size, &known).await;
    for cp in &checkpoints {
        http.verify_consistency(&u, cp, &last).await;
    }
    // The whole log, and the partials every checkpoint seen before a crash named.
    check_observed(&u, &checkpoints).await;
    for (idx, e) in known.iter().step_by(13) {
        http.verify_inclusion(&u, &last, *idx, e).await;
    }
    assert!(d.terminate().success());
}

/// The tree size the restarted daemon serves once its checkpoint covers every
/// acknowledged index. Right after a restart the served checkpoint may still be the one
/// published before the crash (publishing lags committing), so wait for the restarted
/// daemon's own; an acknowledged entry that was lost never gets covered and fails here.
async fn tlogd_size(http: &Http, u: &str, known: &[(u64, Vec<u8>)]) -> u64 {
    let need = known.iter().map(|(i, _)| i + 1).max().unwrap_or(0);
    http.wait_checkpoint(u, need).await.size
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn duplicates_return_the_original_index_across_restarts() {
    let dir = tempfile::tempdir().unwrap();
    let http = Http::new();
    let mut d = Daemon::start(dir.path(), "");
    d.wait_ready(&http).await;
    let u = d.url.clone();
    let mut unique = 0u64;
    let mut first_index = HashMap::new();
    for i in 0..500u64 {
        // Every tenth add resubmits an earlier entry.
        let k = if i % 10 == 9 { i / 3 } else { i };
        let e = format!("dup test {k}");
        let (idx, dup) = http.add(&u, Bytes::from(e.clone())).await.unwrap();
        match first_index.get(&e) {
            Some(&orig) => {
                assert_eq!(idx, orig, "resubmission of {e:?}");
                assert!(dup, "duplicate header");
            }
            None => {
                assert!(!dup);
                first_index.insert(e, idx);
                unique += 1;
            }
        }
    }
    let cp = http.wait_checkpoint(&u, unique).await;
    assert_eq!(
        cp.size, unique,
        "the tree grew by exactly the unique entries"
    );
    assert!(d.terminate().success());
    let mut d = Daemon::start(dir.path(), "");
    d.wait_ready(&http).await;
    let u = d.url.clone();
    let (idx, dup) = http.add(&u, Bytes::from("dup test 5")).await.unwrap();
    assert_eq!((idx, dup), (first_index["dup test 5"], true));
    // Remove the index directory: the daemon rebuilds it from the log.
    assert!(d.terminate().success());
    std::fs::remove_dir_all(dir.path().join("log/.tlogd/dedup")).unwrap();
    // max_lag = 0: adds get 503 until the rebuilt index has caught up.
    let mut d = Daemon::start(dir.path(), "[dedup]\nmax_lag = 0\n");
    d.wait_ready(&http).await;
    let u = d.url.clone();
    // Polled until the rebuilt index has caught up, with a deadline a loaded machine
    // cannot reach by accident (200 tries of 20 ms were 4 s).
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    let got = loop {
        match http.add(&u, Bytes::from("dup test 7")).await {
            Ok(v) => break v,
            Err((503, _, _)) if std::time::Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(20)).await
            }
            Err(e) => panic!("the rebuilt index never caught up: {e:?}"),
        }
    };
    assert_eq!(got, (first_index["dup test 7"], true));
    assert!(d.terminate().success());
}

/// A taken port (the public one, or the metrics one) stops tlogd before it opens or
/// writes any log: no directory, no checkpoint, and one clear line saying which port.
#[test]
fn a_taken_port_fails_before_any_log_is_opened() {
    for which in ["listen", "metrics"] {
        let dir = tempfile::tempdir().unwrap();
        let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let taken_port = taken.local_addr().unwrap().port();
        let (port, mport) = match which {
            "listen" => (taken_port, free_port()),
            _ => (free_port(), taken_port),
        };
        let key = dir.path().join("key");
        std::fs::write(&key, SKEY).unwrap();
        let log_dir = dir.path().join("log");
        let cfg = dir.path().join("tlogd.toml");
        std::fs::write(
            &cfg,
            format!(
                "listen = \"127.0.0.1:{port}\"\norigin = \"{ORIGIN}\"\nprivate_key_file = \"{}\"\n\
                 [storage]\ndir = \"{}\"\n[metrics]\nlisten = \"127.0.0.1:{mport}\"\n",
                key.display(),
                log_dir.display()
            ),
        )
        .unwrap();
        let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_tlogd"))
            .args(["serve", "--config"])
            .arg(&cfg)
            .env("RUST_LOG", "warn")
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("spawn tlogd");
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        let status = loop {
            if let Some(s) = child.try_wait().unwrap() {
                break s;
            }
            if std::time::Instant::now() > deadline {
                let _ = child.kill();
                panic!("tlogd kept running with its {which} port taken");
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        let mut stderr = String::new();
        std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut stderr).unwrap();
        assert!(!status.success(), "{which}: {stderr}");
        assert!(
            stderr.contains(&format!("127.0.0.1:{taken_port}")),
            "{which}: the error names the port: {stderr}"
        );
        assert!(
            !log_dir.exists(),
            "{which}: the log was opened before the port was bound"
        );
        drop(taken);
    }
}

/// #60: with `[checkpoint] grease = true` every published checkpoint carries a line of
/// no known key, and the clients that must ignore it do: the verifying load generator
/// and `tlogd verify` (Go's note verifiers: the CT tests, whose logs are greased).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_greased_log_passes_its_verifiers() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let storage = format!("dir = \"{}\"\n", dir.join("log").display());
    let mut d = Daemon::start_opts(
        dir,
        &storage,
        "",
        &Opts {
            checkpoint_toml: "grease = true\n".into(),
            ..Opts::default()
        },
    );
    let http = Http::new();
    d.wait_ready(&http).await;
    let report = tlog_loadgen::run(<tlog_loadgen::Args as clap::Parser>::parse_from([
        "tlog-loadgen",
        "--log-url",
        &d.url,
        "--log-public-key",
        &verifier().to_vkey(),
        "--writers",
        "8",
        "--leaf-write-goal",
        "300",
        "--max-runtime",
        "60",
        "--quiet",
    ]))
    .await
    .unwrap();
    assert!(report.ok, "{:?}", report.failure_reasons);
    let (_, _, cp) = http.get(&format!("{}/checkpoint", d.url)).await.unwrap();
    let text = String::from_utf8_lossy(&cp);
    assert!(text.contains("\n\u{2014} grease.invalid "), "{text}");
    common::frontends::tlogd_verify(d.url.clone()).await;
    assert!(d.terminate().success());
}
