//! The HTTP transport of the real binary: slow and idle clients are closed after the
//! `[http]` timeouts while normal clients are served, the connection limit, HTTP/2
//! without TLS (h2c) next to HTTP/1.1, and `500` answers that name no backend detail.

mod common;

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use common::*;
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http2;
use hyper_util::rt::{TokioExecutor, TokioIo};

/// Bound on every wait for the daemon to close something: far above the configured
/// timeouts, so a loaded machine does not fail the test, yet a connection that is never
/// closed fails it instead of hanging it.
const BOUND: Duration = Duration::from_secs(60);

async fn scrape(http: &Http, d: &Daemon) -> String {
    let (s, _, body) = http
        .get(&format!("{}/metrics", d.metrics_url))
        .await
        .unwrap();
    assert_eq!(s, 200);
    String::from_utf8(body.to_vec()).unwrap()
}

/// An h2c (prior knowledge) connection to the daemon.
async fn h2c(url: &str) -> http2::SendRequest<Full<Bytes>> {
    let tcp = tokio::net::TcpStream::connect(addr_of(url)).await.unwrap();
    let (send, conn) = http2::handshake(TokioExecutor::new(), TokioIo::new(tcp))
        .await
        .unwrap();
    tokio::spawn(conn);
    send
}

async fn h2_request(
    send: &mut http2::SendRequest<Full<Bytes>>,
    method: &str,
    url: &str,
    body: &'static [u8],
) -> (u16, String) {
    let req = hyper::Request::builder()
        .method(method)
        .uri(url)
        .body(Full::new(Bytes::from_static(body)))
        .unwrap();
    send.ready().await.unwrap();
    let resp = tokio::time::timeout(BOUND, send.send_request(req))
        .await
        .expect("h2 request timed out")
        .unwrap();
    let status = resp.status().as_u16();
    let body = resp.into_body().collect().await.unwrap().to_bytes();
    (status, String::from_utf8(body.to_vec()).unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn half_requests_are_closed_after_the_header_timeout_while_clients_are_served() {
    let dir = tempfile::tempdir().unwrap();
    let mut d = Daemon::start(dir.path(), "[http]\nheader_read_timeout_ms = 1000\n");
    let http = Http::new();
    d.wait_ready(&http).await;
    // Three kinds of stalled client: half a request's headers, nothing at all, and the
    // first bytes of the HTTP/2 preface (on which hyper waits to tell the protocols
    // apart).
    const N: usize = 900;
    let stalls: [&[u8]; 3] = [
        b"POST /add HTTP/1.1\r\nHost: tlogd\r\nContent-Le",
        b"",
        b"PRI * HTTP/2.0\r\n",
    ];
    let mut conns = Vec::with_capacity(N);
    for i in 0..N {
        use tokio::io::AsyncWriteExt;
        let mut s = tokio::net::TcpStream::connect(addr_of(&d.url))
            .await
            .unwrap();
        s.write_all(stalls[i % 3]).await.unwrap();
        conns.push(s);
    }
    // A normal client is served while they wait.
    for i in 0..20 {
        let (idx, _) = http
            .add(&d.url, Bytes::from(format!("served {i}")))
            .await
            .expect("a normal client is served");
        assert_eq!(idx, i);
    }
    // Every stalled connection is closed by the daemon, having received nothing.
    let closing = conns.into_iter().map(|mut s| {
        tokio::spawn(async move {
            let mut got = Vec::new();
            let closed = read_until_closed(&mut s, &mut got, BOUND).await;
            (closed, got)
        })
    });
    for (i, c) in closing.enumerate() {
        let (closed, got) = c.await.unwrap();
        assert!(closed, "stalled connection {i} was never closed");
        assert!(
            got.is_empty() || got.starts_with(b"HTTP/1.1 408"),
            "connection {i}: {:?}",
            String::from_utf8_lossy(&got)
        );
    }
    let m = scrape(&http, &d).await;
    let closed = |reason: &str| {
        metric(
            &m,
            &format!(
                "tlogd_http_connections_closed_total{{listener=\"public\",reason=\"{reason}\"}}"
            ),
        )
    };
    assert!(closed("header_timeout") >= N as f64, "{m}");
    // And the log is still fine.
    assert_eq!(http.wait_checkpoint(&d.url, 20).await.size, 20);
    assert!(d.terminate().success());
}

/// `POST /add` of `entry` on `s`, and its whole answer.
async fn add_on(s: &mut tokio::net::TcpStream, entry: &str) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let req = format!(
        "POST /add HTTP/1.1\r\nHost: tlogd\r\nContent-Length: {}\r\n\r\n{entry}",
        entry.len()
    );
    s.write_all(req.as_bytes()).await.unwrap();
    let mut out = Vec::new();
    let mut buf = [0u8; 4096];
    // Whole once the headers are in and the body has its Content-Length.
    let whole = |out: &[u8]| {
        let text = String::from_utf8_lossy(out);
        let Some((head, body)) = text.split_once("\r\n\r\n") else {
            return false;
        };
        head.lines()
            .find_map(|l| {
                l.to_ascii_lowercase()
                    .strip_prefix("content-length:")
                    .and_then(|v| v.trim().parse::<usize>().ok())
            })
            .is_some_and(|n| body.len() >= n)
    };
    while !whole(&out) {
        match tokio::time::timeout(BOUND, s.read(&mut buf)).await {
            Ok(Ok(n)) if n > 0 => out.extend_from_slice(&buf[..n]),
            other => panic!(
                "no answer to {entry:?} ({other:?}) after {:?}",
                String::from_utf8_lossy(&out)
            ),
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// On HTTP/1.1 the header deadline starts at the next request's first bytes: a
/// kept-alive connection that sends half of its second request's headers is closed
/// after the header timeout, not the (far longer) idle one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_half_second_request_on_a_kept_alive_connection_is_closed_after_the_header_timeout() {
    use tokio::io::AsyncWriteExt;
    let dir = tempfile::tempdir().unwrap();
    let mut d = Daemon::start(
        dir.path(),
        "[http]\nheader_read_timeout_ms = 500\nidle_timeout_ms = 600000\n",
    );
    let http = Http::new();
    d.wait_ready(&http).await;
    let mut s = tokio::net::TcpStream::connect(common::addr_of(&d.url))
        .await
        .unwrap();
    let first = add_on(&mut s, "first").await;
    assert!(first.starts_with("HTTP/1.1 200"), "{first}");
    assert!(first.ends_with("\r\n\r\n0"), "{first}");
    // After a while (idle, as a kept-alive connection may be), half a head.
    tokio::time::sleep(Duration::from_millis(700)).await;
    s.write_all(b"POST /add HTTP/1.1\r\nHost: tl")
        .await
        .unwrap();
    let mut rest = Vec::new();
    assert!(
        common::read_until_closed(&mut s, &mut rest, BOUND).await,
        "a half request after a response was never closed"
    );
    let m = scrape(&http, &d).await;
    assert!(
        metric(
            &m,
            "tlogd_http_connections_closed_total{listener=\"public\",reason=\"header_timeout\"}"
        ) >= 1.0,
        "{m}"
    );
    // Nothing of the half request was logged.
    assert_eq!(http.add(&d.url, Bytes::from("second")).await.unwrap().0, 1);
    assert!(d.terminate().success());
}

/// #61: a client that keeps a connection idle for longer than the header timeout (Go
/// keeps them 90 s) and then sends its next `POST` on it gets an answer, not an `EOF`:
/// between requests a kept-alive HTTP/1.1 connection waits the idle timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_post_after_an_idle_gap_on_a_kept_alive_connection_is_answered() {
    let dir = tempfile::tempdir().unwrap();
    let mut d = Daemon::start(
        dir.path(),
        "[http]\nheader_read_timeout_ms = 300\nidle_timeout_ms = 20000\n",
    );
    let http = Http::new();
    d.wait_ready(&http).await;
    let mut s = tokio::net::TcpStream::connect(common::addr_of(&d.url))
        .await
        .unwrap();
    for (i, gap_ms) in [0u64, 400, 1000, 1500].into_iter().enumerate() {
        tokio::time::sleep(Duration::from_millis(gap_ms)).await;
        let answer = add_on(&mut s, &format!("after {gap_ms} ms")).await;
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
        assert!(answer.ends_with(&format!("\r\n\r\n{i}")), "{answer}");
    }
    assert!(d.terminate().success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slowloris_body_gets_408_and_changes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let mut d = Daemon::start(dir.path(), "[http]\nbody_read_timeout_ms = 500\n");
    let http = Http::new();
    d.wait_ready(&http).await;
    // Ten of the hundred bytes announced, then silence.
    let r = raw_exchange(
        &d.url,
        b"POST /add HTTP/1.1\r\nHost: tlogd\r\nContent-Length: 100\r\n\r\n0123456789",
        false,
        BOUND,
    )
    .await;
    assert_eq!(r.status(), Some(408), "{r:?}");
    assert_eq!(r.body().lines().count(), 1, "{r:?}");
    assert!(r.closed, "the connection of a timed-out body is closed");
    // The same with a chunked body that stops mid-way.
    let r = raw_exchange(
        &d.url,
        b"POST /add HTTP/1.1\r\nHost: tlogd\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nabcde\r\n",
        false,
        BOUND,
    )
    .await;
    assert_eq!(r.status(), Some(408), "{r:?}");
    assert!(r.closed);
    // Nothing was logged: the next entry gets index 0.
    assert_eq!(http.add(&d.url, Bytes::from("first")).await.unwrap().0, 0);
    let m = scrape(&http, &d).await;
    assert_eq!(
        metric(
            &m,
            "tlogd_add_requests_total{log=\"default\",outcome=\"timeout\"}"
        ),
        2.0
    );
    assert!(d.terminate().success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_connections_are_closed_and_busy_ones_are_not() {
    let dir = tempfile::tempdir().unwrap();
    // An add takes ~1.5 s (the integrator lingers for a fuller batch), three times the
    // idle and header timeouts.
    let mut d = Daemon::start(
        dir.path(),
        "[batching]\nmax_entries = 64\nmax_age_ms = 1500\n\
         [http]\nheader_read_timeout_ms = 500\nidle_timeout_ms = 500\n",
    );
    let http = Http::new();
    d.wait_ready(&http).await;
    let u = d.url.clone();

    // HTTP/2: a slow add completes on a connection with nothing else in flight.
    let mut h2 = h2c(&u).await;
    let (s, body) = h2_request(&mut h2, "POST", &format!("{u}/add"), b"slow h2").await;
    assert_eq!((s, body.trim()), (200, "0"));
    // HTTP/1.1: the same.
    let r = raw_exchange(
        &u,
        b"POST /add HTTP/1.1\r\nHost: tlogd\r\nContent-Length: 7\r\n\r\nslow h1",
        false,
        BOUND,
    )
    .await;
    assert_eq!(r.status(), Some(200), "{r:?}");
    assert_eq!(r.body(), "1");
    // ... and then, idle, that HTTP/1.1 connection was closed (raw_exchange read until
    // it was).
    assert!(r.closed, "an idle HTTP/1.1 connection stays open");
    // The idle HTTP/2 connection is closed too (GOAWAY, then the connection ends).
    let deadline = std::time::Instant::now() + BOUND;
    while !h2.is_closed() {
        assert!(
            std::time::Instant::now() < deadline,
            "an idle HTTP/2 connection stays open"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let m = scrape(&http, &d).await;
    assert!(
        metric(
            &m,
            "tlogd_http_connections_closed_total{listener=\"public\",reason=\"idle\"}"
        ) >= 1.0,
        "{m}"
    );
    assert!(d.terminate().success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_beyond_the_limit_are_closed_and_counted() {
    let dir = tempfile::tempdir().unwrap();
    let mut d = Daemon::start(
        dir.path(),
        "[http]\nmax_connections = 4\nheader_read_timeout_ms = 120000\n",
    );
    // The test's own client would hold connections of the limit: probe readiness
    // through the metrics listener (its own limit) and the held connections.
    let metrics_http = Http::new();
    let ready = format!("{}/healthz", d.metrics_url);
    let deadline = std::time::Instant::now() + BOUND;
    while metrics_http.get(&ready).await.map(|r| r.0) != Ok(200) {
        assert!(std::time::Instant::now() < deadline, "tlogd did not start");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let get = b"GET /checkpoint HTTP/1.1\r\nHost: tlogd\r\n\r\n";
    let mut held = Vec::new();
    while held.len() < 4 {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let mut s = tokio::net::TcpStream::connect(addr_of(&d.url))
            .await
            .unwrap();
        s.write_all(get).await.unwrap();
        let mut buf = [0u8; 1024];
        match tokio::time::timeout(BOUND, s.read(&mut buf)).await {
            // Served (the first checkpoint may not be published yet: 404 is an answer
            // too): this connection holds one of the four places.
            Ok(Ok(n)) if n > 0 => held.push(s),
            Ok(_) => tokio::time::sleep(Duration::from_millis(20)).await,
            Err(_) => panic!("no answer"),
        }
    }
    // The fifth is closed without an answer.
    let r = raw_exchange(&d.url, get, false, BOUND).await;
    assert!(r.closed && r.bytes.is_empty(), "{r:?}");
    let m = scrape(&metrics_http, &d).await;
    assert!(
        metric(
            &m,
            "tlogd_http_connections_rejected_total{listener=\"public\",reason=\"limit\"}"
        ) >= 1.0,
        "{m}"
    );
    assert_eq!(
        metric(&m, "tlogd_http_connections{listener=\"public\"}"),
        4.0
    );
    // A place freed is a place for the next client.
    drop(held.pop());
    let deadline = std::time::Instant::now() + BOUND;
    loop {
        let r = raw_exchange(
            &d.url,
            b"GET /checkpoint HTTP/1.1\r\nHost: tlogd\r\nConnection: close\r\n\r\n",
            false,
            BOUND,
        )
        .await;
        if r.status().is_some() {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "a freed place was not reused"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    drop(held);
    assert!(d.terminate().success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn h2c_carries_many_adds_on_one_connection_next_to_http1() {
    let dir = tempfile::tempdir().unwrap();
    let mut d = Daemon::start(dir.path(), "");
    let http = Http::new();
    d.wait_ready(&http).await;
    let u = d.url.clone();
    let h2 = h2c(&u).await;
    // 300 adds at once on one HTTP/2 connection, and 100 over HTTP/1.1 beside them.
    let mut tasks = Vec::new();
    for i in 0..300 {
        let (mut h2, u) = (h2.clone(), u.clone());
        tasks.push(tokio::spawn(async move {
            let entry: &'static [u8] = format!("h2c entry {i}").into_bytes().leak();
            let (s, body) = h2_request(&mut h2, "POST", &format!("{u}/add"), entry).await;
            assert_eq!(s, 200, "{body}");
            (body.trim().parse::<u64>().unwrap(), entry.to_vec())
        }));
    }
    for i in 0..100 {
        let (http, u) = (http.clone(), u.clone());
        tasks.push(tokio::spawn(async move {
            let entry = format!("h1 entry {i}").into_bytes();
            let (idx, dup) = http.add(&u, Bytes::from(entry.clone())).await.unwrap();
            assert!(!dup);
            (idx, entry)
        }));
    }
    let mut acked = Vec::new();
    for t in tasks {
        acked.push(t.await.unwrap());
    }
    let mut indices: Vec<u64> = acked.iter().map(|(i, _)| *i).collect();
    indices.sort();
    assert_eq!(indices, (0..400).collect::<Vec<_>>());
    // Reads over h2c too: the checkpoint verifies and every entry is where it was put.
    let cp = http.wait_checkpoint(&u, 400).await;
    let mut h2 = h2;
    let (s, body) = h2_request(&mut h2, "GET", &format!("{u}/checkpoint"), b"").await;
    assert_eq!(s, 200);
    let (via_h2, _) =
        tlogd_core::checkpoint::Checkpoint::open(body.as_bytes(), ORIGIN, &verifier())
            .expect("the checkpoint read over h2c verifies");
    assert!(via_h2.size >= cp.size);
    http.verify_entries(&u, cp.size, &acked).await;
    // The load generator over h2c: its writers multiplexed on one connection, its
    // readers on others; everything it wrote verifies.
    let vkey = verifier().to_vkey();
    let report = tlog_loadgen::run(<tlog_loadgen::Args as clap::Parser>::parse_from([
        "tlog-loadgen",
        "--log-url",
        &u,
        "--log-public-key",
        &vkey,
        "--h2c",
        "--writers",
        "32",
        "--leaf-write-goal",
        "2000",
        "--readers-random",
        "1",
        "--read-rate",
        "50",
        "--max-runtime",
        "2m",
        "--quiet",
    ]))
    .await
    .unwrap();
    assert!(report.ok, "{:?}", report.failure_reasons);
    assert_eq!(report.transport, "h2c");
    assert_eq!(report.tree_growth, report.writes_new);
    assert!(report.writes_new >= 2000);
    assert!(d.terminate().success());
}

/// Captured log output of the in-process server below.
#[derive(Clone, Default)]
struct Captured(Arc<std::sync::Mutex<Vec<u8>>>);

impl std::io::Write for Captured {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_500_names_no_backend_detail_and_the_log_has_it() {
    use tlogd_core::engine::memory::MemoryStorage;
    use tlogd_core::engine::{Log, LogConfig};
    use tlogd_core::note::NoteSigner;
    let logs = Captured::default();
    let writer = logs.clone();
    tracing::subscriber::set_global_default(
        tracing_subscriber::fmt()
            .with_writer(move || writer.clone())
            .with_ansi(false)
            .finish(),
    )
    .unwrap();
    // The real engine and router over the in-memory backend, whose writes all fail.
    let storage = Arc::new(MemoryStorage::new());
    let mut cfg = LogConfig::new(ORIGIN, Arc::new(NoteSigner::from_skey(SKEY).unwrap()));
    cfg.checkpoint_interval = Duration::from_millis(20);
    cfg.commit_retry = Duration::from_millis(50);
    let (log, _tasks) = Log::open(storage.clone(), None, cfg).await.unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(tlogd::serve::server::serve(
        listener,
        tlogd::serve::router::router(log.clone()),
        tlogd::serve::server::ServeOptions::default(),
        std::future::pending(),
    ));
    storage.set_unwritable(true);
    let http = Http::new();
    let mut bodies = Vec::new();
    for i in 0..3 {
        match http.add(&url, Bytes::from(format!("doomed {i}"))).await {
            Err((500, _, body)) => bodies.push(String::from_utf8(body.to_vec()).unwrap()),
            other => panic!("expected 500, got {other:?}"),
        }
    }
    for body in &bodies {
        assert_eq!(body.lines().count(), 1, "{body:?}");
        assert!(body.starts_with("internal error (ref "), "{body:?}");
        assert!(
            !body.contains("injected") && !body.contains("storage"),
            "{body:?}"
        );
    }
    // The reference in the body finds the detail in the log.
    let reference = bodies[0]
        .split_once("(ref ")
        .and_then(|(_, r)| r.split_once(')'))
        .map(|(r, _)| r.to_string())
        .unwrap();
    let text = String::from_utf8(logs.0.lock().unwrap().clone()).unwrap();
    let line = text
        .lines()
        .find(|l| l.contains(&reference) && l.contains("answered 500"))
        .unwrap_or_else(|| panic!("ref {reference} not in the log:\n{text}"));
    assert!(line.contains("injected fault"), "{line}");
    // Storage repaired: adds work again.
    storage.set_unwritable(false);
    assert!(http.add(&url, Bytes::from("fine")).await.is_ok());
}
