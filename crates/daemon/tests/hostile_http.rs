//! Clients that hold what they ask for: an HTTP/2 client that never opens its
//! flow-control window, a reader that stops reading, one that reads slowly (and must get
//! everything), a peer that does not answer pings, and many connections from one
//! address. Against the real server over real sockets, in process, with a router that
//! serves bodies of any size, and the server's metrics read from an in-process
//! recorder.

mod common;

use std::net::SocketAddr;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use axum::Router;
use axum::extract::Path;
use axum::routing::get;
use bytes::Bytes;
use common::{metric, read_until_closed};
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use tlogd::serve::server::ServeOptions;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Bound on any wait for something the server should do within a second or two.
const BOUND: Duration = Duration::from_secs(20);

const MIB: usize = 1 << 20;

/// The recorder of this test binary (one per process, installed before any server).
fn recorder() -> &'static PrometheusHandle {
    static R: OnceLock<PrometheusHandle> = OnceLock::new();
    R.get_or_init(|| PrometheusBuilder::new().install_recorder().unwrap())
}

/// A metric's value, 0 if it was never recorded.
fn value(name_and_labels: &str) -> f64 {
    let text = recorder().render();
    if text.lines().any(|l| l.starts_with(name_and_labels)) {
        metric(&text, name_and_labels)
    } else {
        0.0
    }
}

/// Wait (bounded) for a metric to reach `want`.
async fn wait_metric(name_and_labels: &str, want: f64) {
    let deadline = Instant::now() + BOUND;
    while value(name_and_labels) != want {
        assert!(
            Instant::now() < deadline,
            "{name_and_labels} stays at {} (want {want}):\n{}",
            value(name_and_labels),
            recorder().render()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Byte `i` of every body served.
fn pattern(i: usize) -> u8 {
    (i % 251) as u8
}

/// How many `GET /counted/{n}` were served (one test uses that route).
static COUNTED: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// `GET /bytes/{n}`: `n` bytes (at most 32 MiB) of [`pattern`], from one buffer
/// (`/counted/{n}` the same, counted in [`COUNTED`]);
/// `POST /body`: reads a body of up to 1 MiB as the handlers do (`read_body`, within
/// the listener's request-body budget) and answers its length.
fn router() -> Router {
    static BODY: OnceLock<Bytes> = OnceLock::new();
    let body = BODY.get_or_init(|| (0..32 * MIB).map(pattern).collect::<Vec<u8>>().into());
    Router::new()
        .route(
            "/bytes/{n}",
            get(move |Path(n): Path<usize>| async move { body.slice(..n.min(body.len())) }),
        )
        .route(
            "/counted/{n}",
            get(move |Path(n): Path<usize>| async move {
                COUNTED.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                body.slice(..n.min(body.len()))
            }),
        )
        .route(
            "/body",
            axum::routing::post(|req: axum::extract::Request| async move {
                let (parts, body) = req.into_parts();
                let client = parts.extensions.get::<tlogd::client::Client>();
                match tlogd::answer::read_body(
                    &parts.headers,
                    body,
                    client,
                    Duration::from_secs(60),
                    MIB,
                    "the body",
                )
                .await
                {
                    Ok(b) => axum::response::IntoResponse::into_response(b.len().to_string()),
                    Err(resp) => resp,
                }
            }),
        )
}

/// A server of [`router`] on a loopback port.
async fn start(opts: ServeOptions) -> SocketAddr {
    start_with_send_buffer(opts, None).await
}

/// A server of [`router`] on a loopback port, its connections' kernel send buffers of
/// `send_buffer` bytes if given (a listener's is inherited by the sockets it accepts).
async fn start_with_send_buffer(opts: ServeOptions, send_buffer: Option<u32>) -> SocketAddr {
    recorder();
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    if let Some(n) = send_buffer {
        socket.set_send_buffer_size(n).unwrap();
    }
    socket.bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let listener = socket.listen(1024).unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(tlogd::serve::server::serve(
        listener,
        router(),
        opts,
        std::future::pending(),
    ));
    addr
}

/// Options with every timeout long (so only the one under test can fire).
fn patient(name: &'static str) -> ServeOptions {
    ServeOptions {
        name,
        header_read_timeout: Duration::from_secs(120),
        idle_timeout: Duration::from_secs(120),
        write_timeout: Duration::from_secs(120),
        h2_keep_alive_interval: Duration::from_secs(120),
        h2_keep_alive_timeout: Duration::from_secs(120),
        ..ServeOptions::default()
    }
}

/// A connection whose receive buffer is small, so that a large response fills it and
/// the server's socket buffer quickly and then waits on this reader.
async fn small_window_connection(addr: SocketAddr) -> TcpStream {
    let s = tokio::net::TcpSocket::new_v4().unwrap();
    s.set_recv_buffer_size(32 << 10).unwrap();
    s.connect(addr).await.unwrap()
}

/// What [`window_zero_client`] returns: the response statuses and `Retry-After`s, the
/// connection's task, and what keeps the streams open.
type WindowZero = (
    Vec<(u16, Option<String>)>,
    tokio::task::JoinHandle<Result<(), h2::Error>>,
    Held,
);

/// An HTTP/2 client that opens no flow-control window (`initial_window_size(0)`, and
/// never a `WINDOW_UPDATE`: nothing of the bodies is read), with `streams` requests for
/// `size` bytes each. Returns the response statuses (their heads are not flow
/// controlled), the connection's task, which ends when the server closes it, and what
/// keeps the streams open (h2 resets a stream that nothing refers to any more).
async fn window_zero_client(addr: SocketAddr, streams: usize, size: usize) -> WindowZero {
    window_zero_client_at(addr, "bytes", streams, size).await
}

/// [`window_zero_client`] on `/<route>/{size}`.
async fn window_zero_client_at(
    addr: SocketAddr,
    route: &str,
    streams: usize,
    size: usize,
) -> WindowZero {
    window_zero_client_for(addr, route, streams, size, None).await
}

/// [`window_zero_client_at`], each request saying `X-Forwarded-For: forwarded_for`, as
/// a reverse proxy does for the client it forwards.
async fn window_zero_client_for(
    addr: SocketAddr,
    route: &str,
    streams: usize,
    size: usize,
    forwarded_for: Option<&str>,
) -> WindowZero {
    let tcp = TcpStream::connect(addr).await.unwrap();
    let (send, conn) = h2::client::Builder::new()
        .initial_window_size(0)
        .handshake::<_, Bytes>(tcp)
        .await
        .unwrap();
    let conn = tokio::spawn(conn);
    let mut pending = Vec::new();
    let mut held = Held(send.clone(), Vec::new(), Vec::new());
    for _ in 0..streams {
        let mut s = tokio::time::timeout(BOUND, send.clone().ready())
            .await
            .expect("a stream slot")
            .unwrap();
        let mut req = hyper::Request::get(format!("http://{addr}/{route}/{size}"));
        if let Some(client) = forwarded_for {
            req = req.header("x-forwarded-for", client);
        }
        let (resp, stream) = s.send_request(req.body(()).unwrap(), true).unwrap();
        pending.push(resp);
        held.1.push(stream);
    }
    let mut heads = Vec::new();
    for resp in pending {
        let r = tokio::time::timeout(BOUND, resp)
            .await
            .expect("a response head")
            .unwrap();
        let retry = r
            .headers()
            .get("retry-after")
            .map(|v| v.to_str().unwrap().to_string());
        heads.push((r.status().as_u16(), retry));
        // The body is kept, unread: no WINDOW_UPDATE is sent for it.
        held.2.push(r.into_body());
    }
    (heads, conn, held)
}

/// The request handle and both ends of every stream of [`window_zero_client`].
#[allow(dead_code)]
struct Held(
    h2::client::SendRequest<Bytes>,
    Vec<h2::SendStream<Bytes>>,
    Vec<h2::RecvStream>,
);

/// The attack of the issue: streams whose window stays at 0 pin their responses; with
/// a short write timeout the connection is closed within a few seconds, for a reason
/// that the metrics name.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_h2_client_that_opens_no_window_is_closed_after_the_write_timeout() {
    let addr = start(ServeOptions {
        write_timeout: Duration::from_secs(1),
        ..patient("window0")
    })
    .await;
    let started = Instant::now();
    let (heads, conn, _held) = window_zero_client(addr, 50, MIB).await;
    assert!(heads.iter().all(|(s, _)| *s == 200), "{heads:?}");
    let ended = tokio::time::timeout(BOUND, conn).await;
    let took = started.elapsed();
    assert!(
        ended.is_ok(),
        "the connection was not closed within {BOUND:?}"
    );
    assert!(
        took >= Duration::from_millis(900) && took < Duration::from_secs(6),
        "closed after {took:?}"
    );
    wait_metric(
        "tlogd_http_connections_closed_total{listener=\"window0\",reason=\"write_timeout\"}",
        1.0,
    )
    .await;
    // The budget was given back with the dropped bodies.
    wait_metric(
        "tlogd_http_response_bytes_in_flight{listener=\"window0\"}",
        0.0,
    )
    .await;
}

/// Small bodies are exempt from the byte budget, but not from the write timeout: a
/// window-0 stream whose only piece was taken (hyper holds it, waiting for a window)
/// still closes its connection.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn small_answers_held_by_a_shut_window_close_the_connection_too() {
    let addr = start(ServeOptions {
        write_timeout: Duration::from_secs(1),
        ..patient("window0small")
    })
    .await;
    let (heads, conn, _held) = window_zero_client(addr, 20, 1000).await;
    assert!(heads.iter().all(|(s, _)| *s == 200), "{heads:?}");
    assert!(
        tokio::time::timeout(Duration::from_secs(8), conn)
            .await
            .is_ok(),
        "the connection was not closed"
    );
    wait_metric(
        "tlogd_http_connections_closed_total{listener=\"window0small\",reason=\"write_timeout\"}",
        1.0,
    )
    .await;
}

/// Responses held by such a client count against the byte budget: beyond it, requests
/// get a 503 to retry, not another megabyte pinned; the bytes come back when the
/// connection goes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn responses_beyond_the_byte_budget_get_503() {
    let addr = start(ServeOptions {
        max_response_bytes_in_flight: 10 * MIB as u64,
        ..patient("budget")
    })
    .await;
    let (heads, conn, held) = window_zero_client(addr, 50, MIB).await;
    let ok = heads.iter().filter(|(s, _)| *s == 200).count();
    let shed: Vec<_> = heads.iter().filter(|(s, _)| *s == 503).collect();
    assert_eq!((ok, shed.len()), (10, 40), "{heads:?}");
    assert!(
        shed.iter().all(|(_, r)| r.as_deref() == Some("1")),
        "{heads:?}"
    );
    assert_eq!(
        value("tlogd_http_responses_shed_total{listener=\"budget\"}"),
        40.0
    );
    assert_eq!(
        value("tlogd_http_response_bytes_in_flight{listener=\"budget\"}"),
        (10 * MIB) as f64
    );
    // The client goes away: the held bodies are dropped and their bytes given back.
    drop(held);
    conn.abort();
    wait_metric(
        "tlogd_http_response_bytes_in_flight{listener=\"budget\"}",
        0.0,
    )
    .await;
}

/// Send a GET for `size` bytes on `s` and read the answer, `piece` bytes at a time with
/// `pause` between reads, until the whole body or the connection's end: the length of
/// the body received (checked to be what was served, as far as it goes).
async fn read_response(s: &mut TcpStream, size: usize, piece: usize, pause: Duration) -> usize {
    s.write_all(format!("GET /bytes/{size} HTTP/1.1\r\nHost: t\r\n\r\n").as_bytes())
        .await
        .unwrap();
    let mut got = Vec::with_capacity(size + 1024);
    let mut buf = vec![0u8; piece];
    let deadline = Instant::now() + BOUND;
    loop {
        let head_end = got.windows(4).position(|w| w == b"\r\n\r\n").map(|p| p + 4);
        if head_end.is_some_and(|h| got.len() >= h + size) {
            break;
        }
        let left = deadline.saturating_duration_since(Instant::now());
        match tokio::time::timeout(left, s.read(&mut buf)).await {
            Err(_) => panic!("no end within {BOUND:?}"),
            Ok(Ok(0)) | Ok(Err(_)) => break,
            Ok(Ok(n)) => got.extend_from_slice(&buf[..n]),
        }
        tokio::time::sleep(pause).await;
    }
    let head_end = got
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .map(|p| p + 4)
        .expect("a response head");
    assert!(got.starts_with(b"HTTP/1.1 200"), "{:?}", &got[..head_end]);
    let body = &got[head_end..];
    let intact = body.iter().enumerate().all(|(i, b)| *b == pattern(i));
    assert!(intact, "the body is not what was served");
    body.len()
}

/// A reader that keeps reading, slowly, gets the whole response however long it takes
/// beyond the header-read and idle timeouts (the truncation: the response used
/// to be cut `header_read_timeout` after hyper had taken its body; the idle wait now
/// runs from the same end). The kernel's
/// buffers are kept small, and the reader slow enough that what hyper buffers of the
/// body's end (up to ~400 KiB) takes it longer than the header-read timeout: the end of
/// a response is its last byte written, not its body's last piece taken.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_reader_gets_the_whole_response() {
    let addr = start_with_send_buffer(
        ServeOptions {
            header_read_timeout: Duration::from_millis(400),
            idle_timeout: Duration::from_millis(400),
            ..ServeOptions {
                name: "slowreader",
                ..ServeOptions::default()
            }
        },
        Some(64 << 10),
    )
    .await;
    let mut s = small_window_connection(addr).await;
    let started = Instant::now();
    // ~800 KiB/s, for ~2.5 s.
    let size = 2 * MIB;
    let got = read_response(&mut s, size, 16 << 10, Duration::from_millis(20)).await;
    let took = started.elapsed();
    assert_eq!(got, size, "the response was cut after {took:?}");
    assert!(
        took > Duration::from_secs(1),
        "read too fast to test: {took:?}"
    );
    // Nothing made the daemon close it early; now, idle, it is closed.
    let mut rest = Vec::new();
    assert!(read_until_closed(&mut s, &mut rest, BOUND).await);
    assert!(rest.is_empty(), "{rest:?}");
    wait_metric(
        "tlogd_http_connections_closed_total{listener=\"slowreader\",reason=\"idle\"}",
        1.0,
    )
    .await;
}

/// A reader that stops reading is cut after the write timeout (with the other timeouts
/// far away), and the metrics say why.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reader_that_stops_reading_is_cut_after_the_write_timeout() {
    let addr = start(ServeOptions {
        write_timeout: Duration::from_secs(1),
        ..patient("stalled")
    })
    .await;
    let mut s = small_window_connection(addr).await;
    let size = 16 * MIB;
    s.write_all(format!("GET /bytes/{size} HTTP/1.1\r\nHost: t\r\n\r\n").as_bytes())
        .await
        .unwrap();
    wait_metric(
        "tlogd_http_connections_closed_total{listener=\"stalled\",reason=\"write_timeout\"}",
        1.0,
    )
    .await;
    // What the kernel buffered is delivered, then the end: far from the whole body.
    let mut got = Vec::new();
    assert!(
        read_until_closed(&mut s, &mut got, BOUND).await,
        "never closed"
    );
    assert!(got.len() < size, "{} bytes: the whole response", got.len());
    wait_metric(
        "tlogd_http_response_bytes_in_flight{listener=\"stalled\"}",
        0.0,
    )
    .await;
}

/// Send a GET and read a short answer on a kept-alive connection: `true` if it was
/// served, `false` if the server closed the connection without a byte.
async fn served(s: &mut TcpStream) -> bool {
    if s.write_all(b"GET /bytes/10 HTTP/1.1\r\nHost: t\r\n\r\n")
        .await
        .is_err()
    {
        return false;
    }
    let mut buf = [0u8; 1024];
    let mut got = Vec::new();
    while !got.ends_with(&pattern_bytes(10)) {
        match tokio::time::timeout(BOUND, s.read(&mut buf)).await {
            Err(_) => panic!("no answer and no close within {BOUND:?}"),
            Ok(Ok(0)) | Ok(Err(_)) => return false,
            Ok(Ok(n)) => got.extend_from_slice(&buf[..n]),
        }
    }
    assert!(got.starts_with(b"HTTP/1.1 200"), "{got:?}");
    true
}

fn pattern_bytes(n: usize) -> Vec<u8> {
    (0..n).map(pattern).collect()
}

/// Beyond `max_connections_per_ip` from one address, a connection is closed at once
/// while the others stay served; a place given back is a place for the next; trusted
/// addresses (loopback by default) have no cap.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_beyond_the_per_address_cap_are_closed_unless_trusted() {
    let addr = start(ServeOptions {
        max_connections_per_ip: 2,
        trusted_proxies: vec![],
        ..patient("perip")
    })
    .await;
    let mut a = TcpStream::connect(addr).await.unwrap();
    let mut b = TcpStream::connect(addr).await.unwrap();
    assert!(served(&mut a).await && served(&mut b).await);
    let mut c = TcpStream::connect(addr).await.unwrap();
    assert!(!served(&mut c).await, "a third connection was served");
    assert_eq!(
        value("tlogd_http_connections_rejected_total{listener=\"perip\",reason=\"per_ip\"}"),
        1.0
    );
    assert!(served(&mut a).await && served(&mut b).await);
    // One goes: the next connection gets its place (once the server has seen it go).
    drop(a);
    let deadline = Instant::now() + BOUND;
    loop {
        let mut d = TcpStream::connect(addr).await.unwrap();
        if served(&mut d).await {
            break;
        }
        assert!(Instant::now() < deadline, "a freed place was not reused");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // With loopback trusted (the default), the same cap does not apply.
    let trusted = start(ServeOptions {
        max_connections_per_ip: 2,
        ..patient("perip_trusted")
    })
    .await;
    let mut conns = Vec::new();
    for _ in 0..5 {
        let mut s = TcpStream::connect(trusted).await.unwrap();
        assert!(served(&mut s).await, "a trusted address was capped");
        conns.push(s);
    }
    assert_eq!(
        value(
            "tlogd_http_connections_rejected_total{listener=\"perip_trusted\",reason=\"per_ip\"}"
        ),
        0.0
    );
}

/// An HTTP/2 peer that stops answering pings (its connection no longer polled, the
/// socket still open) is closed after the keep-alive interval and timeout, long before
/// the idle timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_h2_peer_that_does_not_answer_pings_is_closed() {
    let addr = start(ServeOptions {
        h2_keep_alive_interval: Duration::from_millis(300),
        h2_keep_alive_timeout: Duration::from_millis(300),
        ..patient("ping")
    })
    .await;
    let tcp = TcpStream::connect(addr).await.unwrap();
    let (send, mut conn) = h2::client::handshake(tcp).await.unwrap();
    // One request, the connection polled until its answer is in.
    let mut send = send.ready().await.unwrap();
    let req = hyper::Request::get(format!("http://{addr}/bytes/10"))
        .body(())
        .unwrap();
    let (resp, _) = send.send_request(req, true).unwrap();
    let status = tokio::time::timeout(BOUND, async {
        tokio::select! {
            r = resp => r.unwrap().status().as_u16(),
            e = &mut conn => panic!("connection ended: {e:?}"),
        }
    })
    .await
    .expect("an answer");
    assert_eq!(status, 200);
    // From now on nothing reads the socket: pings go unanswered.
    let started = Instant::now();
    wait_metric(
        "tlogd_http_connections_closed_total{listener=\"ping\",reason=\"keep_alive_timeout\"}",
        1.0,
    )
    .await;
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );
    drop(conn);
}

/// #62: one address holds at most its share of the response budget: once it holds over
/// half of it, its reads get `503` before they are served (counted apart; the handler
/// never runs, so a client that reads nothing cannot make the daemon build responses
/// for it), while another address still gets what fits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_address_holds_at_most_its_share_of_the_response_budget() {
    let addr = start(ServeOptions {
        max_response_bytes_in_flight: 10 * MIB as u64,
        max_response_bytes_per_ip: 3 * MIB as u64,
        trusted_proxies: vec![],
        ..patient("share")
    })
    .await;
    // Two responses held unread: 2 MiB of a 3 MiB share, over half of it.
    let (heads, conn, held) = window_zero_client_at(addr, "counted", 2, MIB).await;
    assert!(heads.iter().all(|(s, _)| *s == 200), "{heads:?}");
    // The same address's next reads, on another connection: refused unserved.
    let (heads, conn2, held2) = window_zero_client_at(addr, "counted", 8, MIB).await;
    assert!(heads.iter().all(|(s, _)| *s == 503), "{heads:?}");
    assert_eq!(
        value("tlogd_http_responses_shed_per_ip_total{listener=\"share\"}"),
        8.0
    );
    assert_eq!(
        COUNTED.load(std::sync::atomic::Ordering::SeqCst),
        2,
        "reads beyond the mark were served before they were refused"
    );
    // Another address (127.0.0.2 is loopback too) is served from what is left.
    let other = tokio::net::TcpSocket::new_v4().unwrap();
    other.set_recv_buffer_size(32 << 10).unwrap();
    other.bind("127.0.0.2:0".parse().unwrap()).unwrap();
    let mut other = other.connect(addr).await.unwrap();
    other
        .write_all(format!("GET /bytes/{MIB} HTTP/1.1\r\nHost: t\r\n\r\n").as_bytes())
        .await
        .unwrap();
    assert_answered_200(&mut other).await;
    drop(other);
    drop((held, held2));
    conn.abort();
    conn2.abort();
    wait_metric(
        "tlogd_http_response_bytes_in_flight{listener=\"share\"}",
        0.0,
    )
    .await;
}

/// #61: behind a reverse proxy (a trusted one, loopback by default), every client
/// comes from the proxy's address; the shares count the client the proxy names in
/// `X-Forwarded-For` instead: one forwarded client holding over half its share is
/// refused, another forwarded client and the proxy's own requests are still served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn behind_a_trusted_proxy_the_forwarded_client_holds_the_share() {
    let addr = start(ServeOptions {
        max_response_bytes_in_flight: 10 * MIB as u64,
        max_response_bytes_per_ip: 3 * MIB as u64,
        ..patient("forwarded")
    })
    .await;
    // A client behind the proxy holds two responses unread, over half its share; what
    // it wrote left of the proxy's entry is not believed.
    let (heads, conn, held) =
        window_zero_client_for(addr, "bytes", 2, MIB, Some("198.51.100.1, 192.0.2.7")).await;
    assert!(heads.iter().all(|(s, _)| *s == 200), "{heads:?}");
    // Its next reads through the proxy, on another connection: refused.
    let (heads, conn2, held2) =
        window_zero_client_for(addr, "bytes", 3, MIB, Some("192.0.2.7")).await;
    assert!(heads.iter().all(|(s, _)| *s == 503), "{heads:?}");
    assert_eq!(
        value("tlogd_http_responses_shed_per_ip_total{listener=\"forwarded\"}"),
        3.0
    );
    // Another client through the same proxy, and the proxy's own requests: served.
    for client in [Some("192.0.2.8"), Some("198.51.100.1"), None] {
        let (heads, conn3, held3) = window_zero_client_for(addr, "bytes", 1, MIB, client).await;
        assert!(
            heads.iter().all(|(s, _)| *s == 200),
            "{client:?}: {heads:?}"
        );
        drop(held3);
        conn3.abort();
    }
    drop((held, held2));
    conn.abort();
    conn2.abort();
    wait_metric(
        "tlogd_http_response_bytes_in_flight{listener=\"forwarded\"}",
        0.0,
    )
    .await;
}

/// #62: a reader that keeps reading, but below the minimum rate, is cut as one that
/// stopped: trickling a few bytes out of the socket is not progress enough to hold a
/// response (and its bytes of the budget) for ever.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reader_below_the_minimum_rate_is_cut() {
    let addr = start_with_send_buffer(
        ServeOptions {
            write_timeout: Duration::from_secs(1),
            min_response_bytes_per_s: 256 << 10,
            ..patient("trickle")
        },
        Some(64 << 10),
    )
    .await;
    let mut s = small_window_connection(addr).await;
    // ~10 KiB/s, far below 256 KiB/s, never stopping.
    let reader = tokio::spawn(async move {
        read_response(&mut s, 8 * MIB, 1 << 10, Duration::from_millis(100)).await
    });
    wait_metric(
        "tlogd_http_connections_closed_total{listener=\"trickle\",reason=\"write_timeout\"}",
        1.0,
    )
    .await;
    reader.abort();
}

/// #62: request bodies are budgeted like responses: an HTTP/2 client whose streams each
/// send most of a body and never finish holds at most its address's share; its streams
/// beyond it get `503` at once, and another address's body is still read.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unfinished_bodies_hold_at_most_their_address_share() {
    let addr = start(ServeOptions {
        max_request_bytes_in_flight: 4 * MIB as u64,
        max_request_bytes_per_ip: MIB as u64,
        trusted_proxies: vec![],
        ..patient("bodies")
    })
    .await;
    let tcp = TcpStream::connect(addr).await.unwrap();
    let (send, conn) = h2::client::Builder::new()
        .handshake::<_, Bytes>(tcp)
        .await
        .unwrap();
    let conn = tokio::spawn(conn);
    let piece = Bytes::from(vec![7u8; 100 << 10]);
    let mut answers = Vec::new();
    let mut streams = Vec::new();
    for _ in 0..20 {
        let mut s = tokio::time::timeout(BOUND, send.clone().ready())
            .await
            .expect("a stream slot")
            .unwrap();
        let req = hyper::Request::post(format!("http://{addr}/body"))
            .header("content-length", (200 << 10).to_string())
            .body(())
            .unwrap();
        let (resp, mut stream) = s.send_request(req, false).unwrap();
        // 100 KiB of the 200 announced, and never the rest.
        stream.send_data(piece.clone(), false).unwrap();
        streams.push(stream);
        answers.push(tokio::spawn(async move {
            resp.await.map(|r| r.status().as_u16()).unwrap_or(0)
        }));
    }
    // The share is 1 MiB: ~10 bodies beyond their free 4 KiB fit, the rest are refused.
    wait_metric_at_least(
        "tlogd_http_request_bodies_shed_total{listener=\"bodies\"}",
        9.0,
    )
    .await;
    let held = value("tlogd_http_request_bytes_in_flight{listener=\"bodies\"}");
    assert!(held <= MIB as f64, "{held} bytes held for one address");
    tokio::time::sleep(Duration::from_millis(300)).await;
    let (answered, waiting): (Vec<_>, Vec<_>) = answers.into_iter().partition(|a| a.is_finished());
    assert!(
        (9..=11).contains(&answered.len()),
        "{} of 20 answered",
        answered.len()
    );
    for a in answered {
        assert_eq!(a.await.unwrap(), 503, "a body over the share is refused");
    }
    // Another address's body is read whole.
    let other = tokio::net::TcpSocket::new_v4().unwrap();
    other.bind("127.0.0.2:0".parse().unwrap()).unwrap();
    let mut other = other.connect(addr).await.unwrap();
    let body = vec![1u8; 300 << 10];
    other
        .write_all(
            format!(
                "POST /body HTTP/1.1\r\nHost: t\r\nContent-Length: {}\r\n\r\n",
                body.len()
            )
            .as_bytes(),
        )
        .await
        .unwrap();
    other.write_all(&body).await.unwrap();
    assert_answered_200(&mut other).await;
    // The client goes: what its bodies held comes back.
    drop(waiting);
    drop(streams);
    drop(send);
    conn.abort();
    wait_metric(
        "tlogd_http_request_bytes_in_flight{listener=\"bodies\"}",
        0.0,
    )
    .await;
}

async fn wait_metric_at_least(name_and_labels: &str, want: f64) {
    let deadline = Instant::now() + BOUND;
    while value(name_and_labels) < want {
        assert!(
            Instant::now() < deadline,
            "{name_and_labels} stays at {} (want {want} or more)",
            value(name_and_labels)
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The answer on `s` starts `HTTP/1.1 200`, within [`BOUND`].
async fn assert_answered_200(s: &mut TcpStream) {
    let mut head = [0u8; 12];
    tokio::time::timeout(BOUND, s.read_exact(&mut head))
        .await
        .expect("an answer")
        .unwrap();
    assert_eq!(
        &head,
        b"HTTP/1.1 200",
        "{:?}",
        String::from_utf8_lossy(&head)
    );
}
