//! Serving a router on a TCP listener: HTTP/1.1 and HTTP/2 without TLS (h2c, prior
//! knowledge) on the same port, with the timeouts and the limits that keep slow, idle or
//! greedy clients from pinning the daemon, and graceful shutdown.
//!
//! `axum::serve` has none of these (no timer, so hyper's header-read timeout never
//! runs): a client that sends half a request and stops would hold its connection, its
//! task and a file descriptor forever. What bounds what:
//!
//! * **Header read** (`header_read_timeout`): for every connection, the first request
//!   must start within it (this also covers a client that connects and sends nothing,
//!   or a few bytes of the HTTP/2 preface, which hyper would wait on forever while
//!   telling the two protocols apart); on HTTP/1.1, each next request's headers must
//!   be whole within it of its first bytes read. (A head whose first bytes came in
//!   before the previous request was parsed, pipelined behind it, is bounded by the
//!   idle timeout instead.) The connection's own
//!   timer checks this, not hyper's: hyper's sets, polls and cancels a timer for every
//!   request (boxed, in tokio's timer wheel), ~3 % of the daemon's CPU under load.
//! * **Idle** (`idle_timeout`): a connection with no request in flight for this long
//!   is shut down gracefully (HTTP/2: `GOAWAY`). On HTTP/1.1 this is the wait for the
//!   next request on a kept-alive connection, and it is longer by default than the
//!   idle timeouts of common clients (Go's 90 s): the client closes an idle connection
//!   first, so it never sends a request into a connection the server is closing (an
//!   `EOF` that a client does not retry for a `POST`). A request counts as in flight until
//!   its response body has been handed to the connection, so a long add waiting for its
//!   commit is never cut; nothing is idle while a write is blocked.
//! * **Write progress** (`write_timeout`): a connection is dropped when a socket write
//!   has been blocked that long with no byte accepted (the peer reads nothing), or when
//!   a response handed to hyper has not had its next piece taken for that long (an
//!   HTTP/2 stream whose flow-control window the peer keeps shut: hyper does not poll a
//!   body while its stream has no send capacity, and the socket has nothing to write).
//!   The deadline is on progress, at a minimum rate (`min_response_bytes_per_s`): each
//!   piece a response hands over earns it the time the piece takes at that rate, and
//!   a response that falls the write timeout behind is cut as one that stopped; a slow
//!   reader above the rate gets everything, one trickling below it holds nothing for
//!   long.
//!   Response bodies are handed over in pieces of at most [`FRAME`] bytes (slices of
//!   one buffer, no copy), so that "taken" follows what was sent: a whole bundle polled
//!   at once would sit in hyper's or h2's buffer, taken yet unsent.
//! * **HTTP/2 keep-alive** (`h2_keep_alive_*`): a connection the peer has sent nothing
//!   on for the interval is pinged; a ping not answered in time closes it.
//! * **Response bytes** (`max_response_bytes_in_flight`): response bodies hold their
//!   size from one budget per listener, and from the client address's share of it
//!   (`max_response_bytes_per_ip`; trusted proxies not counted), until dropped; one that
//!   does not fit either is answered `503` with `Retry-After: 1` instead.
//! * **Request bodies** (`max_request_bytes_in_flight`, `max_request_bytes_per_ip`): a
//!   budget every request carries (`client.rs`), within which handlers read bodies
//!   (`answer::read_body`); their size and time bounds are the handlers' business
//!   (`routes/tiles.rs`, `routes/ct.rs`).
//! * **Connections** (`max_connections`, `max_connections_per_ip`): one permit each,
//!   and at most so many from one address (except `trusted_proxies`); a connection
//!   accepted beyond either is closed at once and counted in
//!   `tlogd_http_connections_rejected_total{reason="limit"|"per_ip"}`.

use std::collections::HashMap;
use std::future::Future;
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, ready};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Body;
use axum::extract::Request;
use axum::http::{HeaderValue, StatusCode, header};
use bytes::Bytes;
use hyper::body::{Frame, Incoming, SizeHint};
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use tlogd_http::yield_first::YieldFirst;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tower_service::Service;

use crate::client::{BodyBudget, Client};
use crate::config::{HttpConfig, IpCidr};

/// The largest piece of a response body handed to hyper at once: a larger body is
/// handed over in slices of this (no copy), so that what hyper (or h2, for one stream)
/// buffers unsent is bounded and a body's progress follows what the peer receives.
pub const FRAME: usize = 64 << 10;

/// Response bodies of at most this many bytes take nothing from the response-byte
/// budget: they are the hot path (add answers, checkpoints; ~80k a second on two cores,
/// where the budget's shared counter would be one more contended atomic pair each), and
/// they are no larger than what every stream costs anyway (its task, its h2 state, its
/// request's headers), which no budget counts either; a stuck one is bounded by the
/// write timeout and the stream and connection limits.
pub const SMALL_BODY: u64 = 4 << 10;

/// Timeouts and limits of one listener.
#[derive(Clone, Debug)]
pub struct ServeOptions {
    /// The `listener` label of this listener's metrics (`public`, `metrics`).
    pub name: &'static str,
    /// A request's headers (and a new connection's first request) must arrive within
    /// this.
    pub header_read_timeout: Duration,
    /// A connection with no request in flight for this long is closed.
    pub idle_timeout: Duration,
    /// A response that makes no progress for this long closes its connection.
    pub write_timeout: Duration,
    /// Open connections at most.
    pub max_connections: usize,
    /// Open connections from one address at most, except from `trusted_proxies`.
    pub max_connections_per_ip: usize,
    /// Addresses without a per-address cap (reverse proxies).
    pub trusted_proxies: Vec<IpCidr>,
    /// IPv6 clients are counted by this many leading bits of their address.
    pub ipv6_prefix_len: u8,
    /// Response body bytes held at once (this listener); beyond it, `503`.
    pub max_response_bytes_in_flight: u64,
    /// Of those, held for one client address at most (trusted proxies not counted).
    pub max_response_bytes_per_ip: u64,
    /// Request-body bytes being read at once (this listener); beyond it, `503`.
    pub max_request_bytes_in_flight: u64,
    /// Of those, read for one client address at most (trusted proxies not counted).
    pub max_request_bytes_per_ip: u64,
    /// The rate a response must be taken at, on average (0: any progress counts).
    pub min_response_bytes_per_s: u64,
    /// Requests in flight at once on one HTTP/2 connection.
    pub h2_max_concurrent_streams: u32,
    /// An HTTP/2 connection silent for this long is pinged.
    pub h2_keep_alive_interval: Duration,
    /// A ping not answered within this closes the connection.
    pub h2_keep_alive_timeout: Duration,
    /// At shutdown, how long busy connections are waited for.
    pub shutdown_grace: Duration,
    /// HTTPS: each connection's handshake first (within `header_read_timeout`).
    pub tls: Option<crate::serve::tls::TlsAcceptor>,
}

impl Default for ServeOptions {
    fn default() -> Self {
        ServeOptions::from(&HttpConfig::default())
    }
}

impl From<&HttpConfig> for ServeOptions {
    fn from(c: &HttpConfig) -> Self {
        ServeOptions {
            name: "public",
            header_read_timeout: Duration::from_millis(c.header_read_timeout_ms.max(1)),
            idle_timeout: Duration::from_millis(c.idle_timeout_ms.max(1)),
            write_timeout: Duration::from_millis(c.write_timeout_ms.max(1)),
            max_connections: c.max_connections.max(1),
            max_connections_per_ip: c.max_connections_per_ip.max(1),
            // Validated with the rest of the configuration (`Config::validate`), which
            // names a bad entry; here an unparsable one is only skipped.
            trusted_proxies: c
                .trusted_proxies
                .iter()
                .filter_map(|t| IpCidr::parse(t).ok())
                .collect(),
            ipv6_prefix_len: c.ipv6_prefix_len,
            max_response_bytes_in_flight: c.max_response_bytes_in_flight,
            max_response_bytes_per_ip: c.max_response_bytes_per_ip,
            max_request_bytes_in_flight: c.max_request_bytes_in_flight,
            max_request_bytes_per_ip: c.max_request_bytes_per_ip,
            min_response_bytes_per_s: c.min_response_bytes_per_s,
            h2_max_concurrent_streams: c.h2_max_concurrent_streams.max(1),
            h2_keep_alive_interval: Duration::from_millis(c.h2_keep_alive_interval_ms.max(1)),
            h2_keep_alive_timeout: Duration::from_millis(c.h2_keep_alive_timeout_ms.max(1)),
            shutdown_grace: Duration::from_millis(c.shutdown_grace_ms),
            tls: None,
        }
    }
}

/// Serve `app` on `listener` until `shutdown` resolves; then stop accepting, let every
/// connection finish what it is doing (HTTP/1.1 idle connections close at once,
/// HTTP/2 ones get `GOAWAY`), and return once all are closed or after
/// `shutdown_grace`, whichever comes first.
pub async fn serve(
    listener: TcpListener,
    app: Router,
    opts: ServeOptions,
    shutdown: impl Future<Output = ()> + Send,
) {
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder
        .http1()
        // No timer: the header-read deadline is checked by `connection` instead (see
        // the module's doc), and hyper's HTTP/1.1 connections time nothing else.
        .header_read_timeout(None)
        // One flat write per answer (head and body copied into one buffer, a `write`)
        // rather than a `writev` of the two: answers are small, and the vectored
        // write cost ~1.9 µs of CPU per append more (#59: 512 writers, pinned, three
        // alternated rounds, 48.5k against 53.3k appends/s; benches/README.md).
        .writev(false)
        .keep_alive(true);
    builder
        .http2()
        .timer(TokioTimer::new())
        .max_concurrent_streams(opts.h2_max_concurrent_streams)
        .keep_alive_interval(opts.h2_keep_alive_interval)
        .keep_alive_timeout(opts.h2_keep_alive_timeout);
    let builder = Arc::new(builder);
    let max = opts.max_connections.min(Semaphore::MAX_PERMITS);
    let permits = Arc::new(Semaphore::new(max));
    let per_ip = Arc::new(PerIp {
        max: opts.max_connections_per_ip,
        trusted: opts.trusted_proxies.clone(),
        v6_prefix: opts.ipv6_prefix_len,
        open: Mutex::new(HashMap::new()),
    });
    let shared = Arc::new(Shared {
        per_ip: per_ip.clone(),
        budget: Budget {
            used: AtomicU64::new(0),
            limit: opts.max_response_bytes_in_flight,
            gauge: metrics::gauge!("tlogd_http_response_bytes_in_flight", "listener" => opts.name),
            per_ip_limit: opts.max_response_bytes_per_ip,
            per_ip: Mutex::new(HashMap::new()),
            near_full: AtomicUsize::new(0),
        },
        bodies: Arc::new(BodyBudget::new(
            opts.name,
            opts.max_request_bytes_in_flight,
            opts.max_request_bytes_per_ip,
        )),
        shed: metrics::counter!("tlogd_http_responses_shed_total", "listener" => opts.name),
        shed_per_ip: metrics::counter!("tlogd_http_responses_shed_per_ip_total", "listener" => opts.name),
    });
    let closer = Arc::new(Closer::default());
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) => {
                    accept_error(e, opts.name).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        // Over a limit: closing at once costs the least; the client sees the
        // connection reset or closed and may retry later.
        let reject = |reason: &'static str| {
            metrics::counter!("tlogd_http_connections_rejected_total", "listener" => opts.name, "reason" => reason)
                .increment(1);
        };
        let Some(ip_slot) = per_ip.admit(peer.ip()) else {
            reject("per_ip");
            drop(stream);
            continue;
        };
        let Ok(permit) = permits.clone().try_acquire_owned() else {
            reject("limit");
            drop(stream);
            continue;
        };
        // Responses are single writes; with HTTP/2 several go out back to back and
        // Nagle's algorithm would hold the later ones for the peer's delayed ACK.
        let _ = stream.set_nodelay(true);
        tokio::spawn(connection(
            builder.clone(),
            stream,
            app.clone(),
            opts.clone(),
            shared.clone(),
            closer.register(),
            (permit, ip_slot),
        ));
    }
    // Stop accepting (the kernel refuses new connections from now on), then ask every
    // connection to finish.
    drop(listener);
    closer.close_all();
    let all = u32::try_from(max).unwrap_or(u32::MAX);
    if tokio::time::timeout(opts.shutdown_grace, permits.acquire_many(all))
        .await
        .is_err()
    {
        tracing::warn!(
            open = max - permits.available_permits(),
            grace = ?opts.shutdown_grace,
            "connections still open after the shutdown grace period; going on without them"
        );
    }
}

/// Asks every open connection of a listener to finish, at shutdown. Each connection
/// polls a signal of its own, so a wake-up of a busy connection touches nothing that
/// other connections share (a `watch` channel, polled on every wake-up of every
/// connection, took a lock of its waiter list each time); a connection registers once
/// when it opens and once when it closes.
#[derive(Default)]
struct Closer {
    /// Set once `close_all` has run: a connection registered after it is asked at once.
    closed: AtomicBool,
    next_id: AtomicU64,
    open: Mutex<HashMap<u64, Arc<CloseSignal>>>,
}

/// One connection's "please finish".
#[derive(Default)]
struct CloseSignal {
    asked: AtomicBool,
    waker: futures_util::task::AtomicWaker,
}

/// A connection's place in its [`Closer`] (removed when dropped).
struct CloseHandle {
    closer: Arc<Closer>,
    id: u64,
    signal: Arc<CloseSignal>,
}

impl Closer {
    fn register(self: &Arc<Self>) -> CloseHandle {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let signal = Arc::new(CloseSignal::default());
        self.open
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(id, signal.clone());
        // After the insert: `close_all` sets `closed` before it looks at `open`, so a
        // connection it did not see sees `closed`.
        if self.closed.load(Ordering::Acquire) {
            signal.asked.store(true, Ordering::Release);
        }
        CloseHandle {
            closer: self.clone(),
            id,
            signal,
        }
    }

    fn close_all(&self) {
        self.closed.store(true, Ordering::Release);
        let open = self.open.lock().unwrap_or_else(|p| p.into_inner());
        for signal in open.values() {
            signal.asked.store(true, Ordering::Release);
            signal.waker.wake();
        }
    }
}

impl CloseHandle {
    /// Ready once the listener asks its connections to finish.
    fn asked(&self) -> impl Future<Output = ()> + '_ {
        std::future::poll_fn(|cx| {
            if self.signal.asked.load(Ordering::Acquire) {
                return Poll::Ready(());
            }
            self.signal.waker.register(cx.waker());
            if self.signal.asked.load(Ordering::Acquire) {
                Poll::Ready(())
            } else {
                Poll::Pending
            }
        })
    }
}

impl Drop for CloseHandle {
    fn drop(&mut self) {
        self.closer
            .open
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&self.id);
    }
}

/// What accepting a connection can fail with. A connection the peer reset before it
/// was accepted is nobody's problem; anything else (out of file descriptors) is logged
/// and accepting pauses a little, as hyper 0.14 and axum do, so the loop does not spin.
async fn accept_error(e: std::io::Error, listener: &'static str) {
    use std::io::ErrorKind::*;
    if matches!(
        e.kind(),
        ConnectionRefused | ConnectionAborted | ConnectionReset
    ) {
        return;
    }
    metrics::counter!("tlogd_http_accept_errors_total", "listener" => listener).increment(1);
    tracing::error!(error = %e, listener, "accepting a connection failed; pausing 100 ms");
    tokio::time::sleep(Duration::from_millis(100)).await;
}

/// Open connections per client address (`max_connections_per_ip`).
struct PerIp {
    max: usize,
    trusted: Vec<IpCidr>,
    /// IPv6 addresses are counted by this many leading bits (`ipv6_prefix_len`).
    v6_prefix: u8,
    /// Addresses (IPv6 ones cut to their prefix) with at least one connection open; an entry is removed at zero, so the
    /// map holds no more entries than there are connections.
    open: Mutex<HashMap<IpAddr, usize>>,
}

impl PerIp {
    /// A place for one more connection from `ip`, or `None` when it has its fill.
    /// Trusted addresses get a place that counts nothing.
    fn admit(self: &Arc<Self>, ip: IpAddr) -> Option<IpSlot> {
        // One client is one client, over IPv4 or as an IPv4-mapped IPv6 address, and
        // an IPv6 host is counted by its prefix (#62: one /64 is one client).
        if self.trusted.iter().any(|t| t.contains(ip)) {
            return Some(IpSlot(None));
        }
        let ip = crate::config::client_key(ip, self.v6_prefix);
        // A poisoned lock (a panic while held: none of the code under it can panic)
        // still holds consistent counts.
        let mut open = self.open.lock().unwrap_or_else(|p| p.into_inner());
        let n = open.entry(ip).or_insert(0);
        if *n >= self.max {
            return None;
        }
        *n += 1;
        Some(IpSlot(Some((self.clone(), ip))))
    }
}

impl PerIp {
    /// The client a trusted proxy forwards a request for (`X-Forwarded-For`), as
    /// per-address shares count it: the rightmost address that is not itself a trusted
    /// proxy. Each proxy appends the address it saw, so that one was written by a proxy
    /// of ours; anything left of it is the client's own to forge. `None` when the
    /// header is absent, holds only trusted addresses, or the entry in question is not
    /// an address (`unknown`, garbage): the request is then the proxy's, not counted per
    /// address, as before.
    fn forwarded_for(&self, headers: &hyper::HeaderMap) -> Option<IpAddr> {
        let mut lines = headers.get_all(&X_FORWARDED_FOR).iter();
        // Several header lines are one list, in order (RFC 9110 §5.3): the last line
        // holds the rightmost entries.
        let mut rest = lines.next_back();
        while let Some(line) = rest {
            let text = line.to_str().ok()?;
            for entry in text.rsplit(',') {
                let ip = parse_forwarded(entry.trim())?;
                if !self.trusted.iter().any(|t| t.contains(ip)) {
                    return Some(crate::config::client_key(ip, self.v6_prefix));
                }
            }
            rest = lines.next_back();
        }
        None
    }
}

/// The header name, made once (a `&str` name is parsed and hashed at every lookup).
static X_FORWARDED_FOR: hyper::header::HeaderName =
    hyper::header::HeaderName::from_static("x-forwarded-for");

/// One `X-Forwarded-For` entry: an address, perhaps with a port (`192.0.2.7:4711`,
/// `[2001:db8::1]:443`).
fn parse_forwarded(entry: &str) -> Option<IpAddr> {
    entry
        .parse::<IpAddr>()
        .ok()
        .or_else(|| entry.parse::<std::net::SocketAddr>().ok().map(|a| a.ip()))
}

/// One connection's place in [`PerIp`], given back when dropped.
struct IpSlot(Option<(Arc<PerIp>, IpAddr)>);

impl IpSlot {
    /// The client's address as per-address shares count it: `None` for a trusted proxy.
    fn addr(&self) -> Option<IpAddr> {
        self.0.as_ref().map(|(_, ip)| *ip)
    }
}

impl Drop for IpSlot {
    fn drop(&mut self) {
        if let Some((per_ip, ip)) = self.0.take() {
            let mut open = per_ip.open.lock().unwrap_or_else(|p| p.into_inner());
            if let Some(n) = open.get_mut(&ip) {
                *n = n.saturating_sub(1);
                if *n == 0 {
                    open.remove(&ip);
                }
            }
        }
    }
}

/// What all connections of one listener share.
struct Shared {
    /// Open connections per address, and who the trusted proxies are.
    per_ip: Arc<PerIp>,
    budget: Budget,
    /// Request-body bytes being read (`max_request_bytes_in_flight`).
    bodies: Arc<BodyBudget>,
    /// `tlogd_http_responses_shed_total{listener}`.
    shed: metrics::Counter,
    /// `tlogd_http_responses_shed_per_ip_total{listener}`: those over an address's share.
    shed_per_ip: metrics::Counter,
}

/// Response body bytes held for clients (`max_response_bytes_in_flight`).
struct Budget {
    used: AtomicU64,
    limit: u64,
    /// `tlogd_http_response_bytes_in_flight{listener}`.
    gauge: metrics::Gauge,
    /// One client address's share (`max_response_bytes_per_ip`).
    per_ip_limit: u64,
    /// Bytes held by client address; an entry is removed at zero. Only responses over
    /// [`SMALL_BODY`] come here (tiles and bundles, not adds' answers).
    per_ip: Mutex<HashMap<IpAddr, u64>>,
    /// How many addresses hold over half their share: their next reads are refused
    /// before they are served (see [`Budget::refuses_before`]). Zero, the usual case,
    /// costs a request one atomic load.
    near_full: AtomicUsize,
}

impl Budget {
    /// Over this, an address is near its share.
    fn near_mark(&self) -> u64 {
        self.per_ip_limit / 2
    }

    /// An address's held bytes went from `was` to `now`: count it in or out of
    /// `near_full`.
    fn moved(&self, was: u64, now: u64) {
        let mark = self.near_mark();
        match (was > mark, now > mark) {
            (false, true) => {
                self.near_full.fetch_add(1, Ordering::AcqRel);
            }
            (true, false) => {
                self.near_full.fetch_sub(1, Ordering::AcqRel);
            }
            _ => {}
        }
    }

    /// Whether a read from `ip` is refused before it is served: the address holds over
    /// half its share of response bytes. Refusing only once a response is built would
    /// let such a client make the daemon read a 14 MB bundle for every `503` it is
    /// then given (measured: the other logs lost half their appends,
    /// `benches/hostile.sh`); a client that reads what it asked for is never here.
    fn refuses_before(&self, ip: IpAddr) -> bool {
        if self.near_full.load(Ordering::Acquire) == 0 {
            return false;
        }
        let per_ip = self.per_ip.lock().unwrap_or_else(|p| p.into_inner());
        per_ip.get(&ip).is_some_and(|&held| held > self.near_mark())
    }
}

/// `n` bytes of the listener's [`Budget`] (and of the client's share of it), given
/// back when dropped (with the body).
struct Held {
    shared: Arc<Shared>,
    n: u64,
    client: Option<IpAddr>,
}

/// Why a response's bytes were not held.
enum Over {
    /// The listener's budget is full.
    Listener,
    /// The client's share of it is.
    Client,
}

impl Held {
    /// `n` bytes for `client` (`None`: a trusted proxy, not counted per address) if
    /// they fit in both the listener's budget and the client's share.
    fn take(shared: &Arc<Shared>, n: u64, client: Option<IpAddr>) -> Result<Held, Over> {
        let b = &shared.budget;
        b.used
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |used| {
                used.checked_add(n).filter(|&total| total <= b.limit)
            })
            .map_err(|_| Over::Listener)?;
        b.gauge.increment(n as f64);
        // From here, dropping `held` gives the listener's bytes back (and the
        // client's, once counted).
        let mut held = Held {
            shared: shared.clone(),
            n,
            client: None,
        };
        if let Some(ip) = client {
            let mut per_ip = b.per_ip.lock().unwrap_or_else(|p| p.into_inner());
            let mine = per_ip.entry(ip).or_insert(0);
            match mine.checked_add(n).filter(|&t| t <= b.per_ip_limit) {
                Some(t) => {
                    b.moved(*mine, t);
                    *mine = t;
                }
                None => {
                    if *mine == 0 {
                        per_ip.remove(&ip);
                    }
                    return Err(Over::Client);
                }
            }
            held.client = Some(ip);
        }
        Ok(held)
    }

    /// Returns `n` bytes to the client's share.
    fn give_back_client(&self) {
        if let Some(ip) = self.client {
            let mut per_ip = self
                .shared
                .budget
                .per_ip
                .lock()
                .unwrap_or_else(|p| p.into_inner());
            if let Some(held) = per_ip.get_mut(&ip) {
                let now = held.saturating_sub(self.n);
                self.shared.budget.moved(*held, now);
                *held = now;
                if now == 0 {
                    per_ip.remove(&ip);
                }
            }
        }
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        let b = &self.shared.budget;
        b.used.fetch_sub(self.n, Ordering::AcqRel);
        b.gauge.decrement(self.n as f64);
        self.give_back_client();
    }
}

/// What a response that does not fit in the budget gets instead: one line, and a hint
/// to come back in a second, as the add queue's `503`s.
fn shed_response() -> axum::response::Response {
    let mut r = axum::response::Response::new(Body::from(
        "busy: too many response bytes in flight; retry later\n",
    ));
    *r.status_mut() = StatusCode::SERVICE_UNAVAILABLE;
    let h = r.headers_mut();
    h.insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    r
}

/// Marks a time stamp as unset (no request ended yet, no write blocked, a free slot).
const NEVER: u64 = u64::MAX;

/// What happens on one connection: requests in flight and when the last one ended,
/// socket writes and reads, and the progress of each response handed to hyper.
struct Activity {
    epoch: Instant,
    /// The connection speaks HTTP/2 (known from its first request).
    http2: AtomicBool,
    in_flight: AtomicUsize,
    /// Milliseconds after `epoch` when a request last ended; [`NEVER`] before the
    /// first request started.
    last_end_ms: AtomicU64,
    /// When a socket write last made progress.
    last_write_ms: AtomicU64,
    /// When the first bytes were read with no request in flight since the last one
    /// started: the next request's head has begun, and must be whole within the header
    /// timeout. [`NEVER`] while none has (a kept-alive HTTP/1.1 connection then waits
    /// the idle timeout for it).
    head_since_ms: AtomicU64,
    /// Since when socket writes have been refused (the socket's buffer full, the peer
    /// not reading) with no progress since; [`NEVER`] while writes go through.
    blocked_since_ms: AtomicU64,
    /// For each response handed to hyper and not yet dropped, when its body last
    /// handed over a piece (or was handed to hyper); [`NEVER`] marks a free slot. One
    /// entry for HTTP/1.1, up to the stream limit for HTTP/2; the lock is the
    /// connection's own and held for a store or a scan of those few entries.
    responses: Mutex<Slots>,
    /// `min_response_bytes_per_s`: a piece handed over moves its response's stamp on by
    /// the time it earns at this rate, never beyond now (0: to now).
    min_rate: u64,
}

/// A small slab of time stamps.
#[derive(Default)]
struct Slots {
    at: Vec<u64>,
    free: Vec<usize>,
}

impl Activity {
    fn new(min_rate: u64) -> Self {
        Activity {
            min_rate,
            epoch: Instant::now(),
            http2: AtomicBool::new(false),
            in_flight: AtomicUsize::new(0),
            last_end_ms: AtomicU64::new(NEVER),
            last_write_ms: AtomicU64::new(0),
            head_since_ms: AtomicU64::new(NEVER),
            blocked_since_ms: AtomicU64::new(NEVER),
            responses: Mutex::new(Slots::default()),
        }
    }

    /// Milliseconds from `epoch` to now.
    fn now_ms(&self) -> u64 {
        self.epoch.elapsed().as_millis() as u64
    }

    fn at(&self, ms: u64) -> Instant {
        self.epoch + Duration::from_millis(ms)
    }

    fn slots(&self) -> std::sync::MutexGuard<'_, Slots> {
        // Nothing under this lock can panic; a poisoned one still holds stamps.
        self.responses.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A slot for a new response, stamped now.
    fn add_response(&self) -> usize {
        let now = self.now_ms();
        let mut s = self.slots();
        match s.free.pop() {
            Some(i) => {
                s.at[i] = now;
                i
            }
            None => {
                s.at.push(now);
                s.at.len() - 1
            }
        }
    }

    /// Response `slot` handed over a piece of `n` bytes: with a minimum rate, its
    /// stamp moves on by the time the piece earns at that rate (so a response taken
    /// slower falls behind, and is cut once `write_timeout` behind); else to now.
    fn response_progress(&self, slot: usize, n: usize) {
        let now = self.now_ms();
        if let Some(at) = self.slots().at.get_mut(slot) {
            *at = match self.min_rate {
                0 => now,
                rate => at
                    .saturating_add((n as u64).saturating_mul(1000) / rate)
                    .min(now),
            };
        }
    }

    fn remove_response(&self, slot: usize) {
        let mut s = self.slots();
        if let Some(at) = s.at.get_mut(slot) {
            *at = NEVER;
            s.free.push(slot);
        }
    }

    /// When the response that has waited longest for its next piece last moved.
    fn oldest_response(&self) -> Option<u64> {
        self.slots()
            .at
            .iter()
            .copied()
            .filter(|&t| t != NEVER)
            .min()
    }

    /// A socket read returned `n` bytes: with nothing in flight, a request's head has
    /// begun (its first bytes stamp the header deadline's start).
    fn read(&self, n: usize) {
        if n > 0
            && self.in_flight.load(Ordering::Acquire) == 0
            && self.head_since_ms.load(Ordering::Relaxed) == NEVER
        {
            self.head_since_ms.store(self.now_ms(), Ordering::Release);
        }
    }

    /// A socket write returned.
    fn wrote(&self, r: &Poll<std::io::Result<usize>>) {
        match r {
            Poll::Ready(Ok(n)) if *n > 0 => {
                self.last_write_ms.store(self.now_ms(), Ordering::Release);
                if self.blocked_since_ms.load(Ordering::Relaxed) != NEVER {
                    self.blocked_since_ms.store(NEVER, Ordering::Release);
                }
            }
            // The first refusal since the last progress starts the clock.
            Poll::Pending if self.blocked_since_ms.load(Ordering::Relaxed) == NEVER => {
                self.blocked_since_ms
                    .store(self.now_ms(), Ordering::Release);
            }
            _ => {}
        }
    }

    /// What the connection's timer finds at `now`: close it, or look again at the
    /// instant returned. Rules, all of them from `now`'s view:
    ///
    /// * a socket write blocked, or a response without progress, for `write_timeout`:
    ///   closed (on HTTP/1.1 the one response owns the socket, so a write that goes
    ///   through is its progress too; on HTTP/2 it is not: pings and other streams'
    ///   data are written too);
    /// * while a request is in flight or a write is blocked: nothing else;
    /// * before any request: its headers by `header_read` after the connection opened;
    /// * then on HTTP/1.1, once the next request's first bytes are read, its headers by
    ///   `header_read` after them; until then `idle` after the later of the last
    ///   request's end and the last write (a response is not over before its last byte
    ///   is written); on HTTP/2 `idle` after the last request ended (not the last
    ///   write: keep-alive pings are writes).
    fn check(&self, now: Instant, o: &ServeOptions) -> Result<Instant, Close> {
        let now_ms = now.saturating_duration_since(self.epoch).as_millis() as u64;
        let write_ms = o.write_timeout.as_millis() as u64;
        // Busy: look again in a while, so a deadline that starts when the request
        // ends is at most that late.
        let mut next = now
            + o.header_read_timeout
                .min(o.idle_timeout)
                .min(o.write_timeout);
        let http2 = self.http2.load(Ordering::Relaxed);
        let last_write = self.last_write_ms.load(Ordering::Acquire);
        let blocked = self.blocked_since_ms.load(Ordering::Acquire);
        // On HTTP/1.1 a socket write is the one response's progress too, unless a
        // minimum rate is asked: then only what the response earned counts (a reader
        // trickling bytes out of the socket is behind all the same).
        let stalled = self.oldest_response().map(|t| {
            if http2 || self.min_rate > 0 {
                t
            } else {
                t.max(last_write)
            }
        });
        for since in [blocked, stalled.unwrap_or(NEVER)] {
            if since != NEVER {
                let d = since.saturating_add(write_ms);
                if d <= now_ms {
                    return Err(Close::WriteTimeout);
                }
                next = next.min(self.at(d));
            }
        }
        if self.in_flight.load(Ordering::Acquire) > 0 || blocked != NEVER {
            return Ok(next);
        }
        let (deadline, why) = match self.last_end_ms.load(Ordering::Acquire) {
            NEVER => (self.epoch + o.header_read_timeout, Close::HeaderTimeout),
            end if http2 => (self.at(end) + o.idle_timeout, Close::Idle),
            end => match self.head_since_ms.load(Ordering::Acquire) {
                NEVER => {
                    // Waiting for the next request: the idle timeout, from the later
                    // of the last request's end and the last write. Looked at again
                    // within a header timeout, so that a head begun meanwhile is held
                    // to it.
                    let idle = self.at(end.max(last_write)) + o.idle_timeout;
                    if idle <= now {
                        return Err(Close::Idle);
                    }
                    return Ok(idle.min(now + o.header_read_timeout));
                }
                head => (self.at(head) + o.header_read_timeout, Close::HeaderTimeout),
            },
        };
        if deadline <= now {
            Err(why)
        } else {
            Ok(deadline)
        }
    }
}

/// Why the timer closes a connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Close {
    /// No request, or not all of its headers, in time: dropped.
    HeaderTimeout,
    /// Nothing in flight for the idle timeout: shut down gracefully.
    Idle,
    /// A write or a response made no progress for the write timeout: dropped.
    WriteTimeout,
}

/// Marks one request in flight until dropped (with the response body).
struct InFlight(Arc<Activity>);

impl InFlight {
    fn new(a: &Arc<Activity>) -> Self {
        a.in_flight.fetch_add(1, Ordering::AcqRel);
        // Its head is whole: the header deadline is over.
        a.head_since_ms.store(NEVER, Ordering::Release);
        // A request has started: the "first request" deadline no longer applies.
        let _ = a
            .last_end_ms
            .compare_exchange(NEVER, 0, Ordering::AcqRel, Ordering::Relaxed);
        InFlight(a.clone())
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        let a = &self.0;
        a.last_end_ms.store(a.now_ms(), Ordering::Release);
        a.in_flight.fetch_sub(1, Ordering::AcqRel);
    }
}

/// A response body as handed to hyper: its request stays in flight and its bytes stay
/// held from the budget until it is dropped; every piece it hands over is progress; a
/// large piece is handed over in slices of at most [`FRAME`] bytes.
struct Watched {
    inner: Body,
    /// What is left of the last piece of `inner`, handed over before polling it again.
    rest: Bytes,
    slot: usize,
    _held: Option<Held>,
    in_flight: InFlight,
}

impl Watched {
    fn new(inner: Body, in_flight: InFlight, held: Option<Held>) -> Self {
        let slot = in_flight.0.add_response();
        Watched {
            inner,
            rest: Bytes::new(),
            slot,
            _held: held,
            in_flight,
        }
    }
}

impl Drop for Watched {
    fn drop(&mut self) {
        self.in_flight.0.remove_response(self.slot);
    }
}

impl hyper::body::Body for Watched {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        let this = self.get_mut();
        if !this.rest.is_empty() {
            let piece = this.rest.split_to(FRAME.min(this.rest.len()));
            this.in_flight.0.response_progress(this.slot, piece.len());
            return Poll::Ready(Some(Ok(Frame::data(piece))));
        }
        let frame = match ready!(Pin::new(&mut this.inner).poll_frame(cx)) {
            Some(Ok(f)) => f,
            other => return Poll::Ready(other),
        };
        match frame.into_data() {
            Ok(mut data) => {
                if data.len() > FRAME {
                    this.rest = data.split_off(FRAME);
                }
                this.in_flight.0.response_progress(this.slot, data.len());
                Poll::Ready(Some(Ok(Frame::data(data))))
            }
            Err(other) => {
                this.in_flight.0.response_progress(this.slot, 0);
                Poll::Ready(Some(Ok(other)))
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.rest.is_empty() && self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        let inner = self.inner.size_hint();
        let rest = self.rest.len() as u64;
        let mut h = SizeHint::new();
        h.set_lower(inner.lower().saturating_add(rest));
        if let Some(u) = inner.upper() {
            h.set_upper(u.saturating_add(rest));
        }
        h
    }
}

/// The connection's socket, noting in its [`Activity`] when writes make progress or
/// are refused (reads pass through).
struct Io {
    inner: Stream,
    activity: Arc<Activity>,
}

/// A connection's byte stream: the socket, or TLS over it.
enum Stream {
    Plain(TcpStream),
    Tls(Box<tokio_rustls::server::TlsStream<TcpStream>>),
}

impl AsyncRead for Stream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_read(cx, buf),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Stream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_write(cx, buf),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_write_vectored(cx, bufs),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_write_vectored(cx, bufs),
        }
    }

    fn is_write_vectored(&self) -> bool {
        match self {
            Stream::Plain(s) => s.is_write_vectored(),
            Stream::Tls(s) => s.is_write_vectored(),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_flush(cx),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_shutdown(cx),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_shutdown(cx),
        }
    }
}

impl AsyncRead for Io {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        let r = Pin::new(&mut this.inner).poll_read(cx, buf);
        if r.is_ready() {
            this.activity.read(buf.filled().len() - before);
        }
        r
    }
}

impl AsyncWrite for Io {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let this = self.get_mut();
        let r = Pin::new(&mut this.inner).poll_write(cx, buf);
        this.activity.wrote(&r);
        r
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        let this = self.get_mut();
        let r = Pin::new(&mut this.inner).poll_write_vectored(cx, bufs);
        this.activity.wrote(&r);
        r
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}

/// The `reason` of a connection that hyper ended with an error: an HTTP/2 keep-alive
/// ping not answered in time (the only timer hyper runs here), or anything else.
fn error_reason(e: &(dyn std::error::Error + 'static)) -> &'static str {
    match e.downcast_ref::<hyper::Error>() {
        Some(h) if h.is_timeout() => "keep_alive_timeout",
        _ => "error",
    }
}

async fn connection(
    builder: Arc<auto::Builder<TokioExecutor>>,
    stream: TcpStream,
    app: Router,
    opts: ServeOptions,
    shared: Arc<Shared>,
    close: CloseHandle,
    places: (OwnedSemaphorePermit, IpSlot),
) {
    let name = opts.name;
    let stream = match &opts.tls {
        None => Stream::Plain(stream),
        // The handshake is bounded as a request's head is: a client that opens a
        // connection and says nothing holds its place no longer.
        Some(tls) => {
            match tokio::time::timeout(opts.header_read_timeout, tls.acceptor.accept(stream)).await
            {
                // An ACME CA's TLS-ALPN-01 validation ends with the handshake
                // (RFC 8737 §3): no HTTP on it.
                Ok(Ok(s))
                    if s.get_ref().1.alpn_protocol() == Some(crate::serve::tls::ACME_TLS_ALPN) =>
                {
                    return;
                }
                Ok(Ok(s)) => Stream::Tls(Box::new(s)),
                Ok(Err(_)) | Err(_) => {
                    metrics::counter!("tlogd_http_tls_handshake_failures_total", "listener" => name)
                        .increment(1);
                    return;
                }
            }
        }
    };
    let client = Client {
        addr: places.1.addr(),
        bodies: Some(shared.bodies.clone()),
    };
    metrics::gauge!("tlogd_http_connections", "listener" => name).increment(1.0);
    let activity = Arc::new(Activity::new(opts.min_response_bytes_per_s));
    let service = {
        let activity = activity.clone();
        hyper::service::service_fn(move |req: hyper::Request<Incoming>| {
            if req.version() == hyper::Version::HTTP_2 {
                activity.http2.store(true, Ordering::Relaxed);
            }
            let guard = InFlight::new(&activity);
            // Behind a trusted proxy, the client it forwards for.
            let addr = client
                .addr
                .or_else(|| shared.per_ip.forwarded_for(req.headers()));
            // A read from an address holding over half its share of response bytes is
            // refused before it is served (adds and forwards are never refused here).
            if let Some(ip) = addr
                && req.method() == hyper::Method::GET
                && shared.budget.refuses_before(ip)
            {
                shared.shed.increment(1);
                shared.shed_per_ip.increment(1);
                let shed = shed_response().map(|b| Body::new(Watched::new(b, guard, None)));
                return futures_util::future::Either::Left(std::future::ready(Ok(shed)));
            }
            let mut req = Request::from(req.map(Body::new));
            req.extensions_mut().insert(Client {
                addr,
                bodies: client.bodies.clone(),
            });
            let call = app.clone().call(req);
            let shared = shared.clone();
            futures_util::future::Either::Right(async move {
                let resp = call.await?;
                // A large body holds its size from the budget while it is with hyper
                // (a body of unknown size holds nothing: tlogd's are all in memory and
                // sized); one that does not fit is dropped and answered 503.
                let held = match hyper::body::Body::size_hint(resp.body()).exact() {
                    Some(_)
                        if resp
                            .extensions()
                            .get::<crate::answer::NeverShed>()
                            .is_some() =>
                    {
                        None
                    }
                    Some(n) if n > SMALL_BODY => match Held::take(&shared, n, addr) {
                        Ok(h) => Some(h),
                        Err(over) => {
                            shared.shed.increment(1);
                            if matches!(over, Over::Client) {
                                shared.shed_per_ip.increment(1);
                            }
                            let shed = shed_response();
                            return Ok(shed.map(|b| Body::new(Watched::new(b, guard, None))));
                        }
                    },
                    _ => None,
                };
                // The request stays in flight until hyper has dropped its body.
                Ok::<_, std::convert::Infallible>(
                    resp.map(move |b| Body::new(Watched::new(b, guard, held))),
                )
            })
        })
    };
    let io = Io {
        inner: stream,
        activity: activity.clone(),
    };
    let conn = builder.serve_connection(TokioIo::new(io), service);
    let mut conn = std::pin::pin!(conn);
    let first = activity.epoch + opts.header_read_timeout.min(opts.write_timeout);
    let check = tokio::time::sleep_until(first.into());
    let mut check = std::pin::pin!(check);
    let mut closing = false;
    let mut closed_for: Option<&'static str> = None;
    let error = loop {
        // Over HTTP/2, many streams' answers leave in one write (`YieldFirst`).
        let polled = YieldFirst::new(conn.as_mut()).only_if(&activity.http2);
        tokio::select! {
            // In this order: the connection is polled first on every wake-up, and
            // `biased` spares a random draw per poll.
            biased;
            done = polled => match done {
                Ok(()) => break None,
                // hyper times out nothing here but HTTP/2 keep-alive pings (the
                // header-read deadline is checked below, see `serve`): any other
                // error is the connection's.
                Err(e) => break Some(error_reason(&*e)),
            },
            () = close.asked(), if !closing => {
                conn.as_mut().graceful_shutdown();
                closing = true;
            }
            () = &mut check => {
                match activity.check(Instant::now(), &opts) {
                    Ok(next) => check.as_mut().reset(next.into()),
                    // Stuck: whatever is in flight cannot be delivered, so the
                    // connection is dropped (its bodies with it, and their bytes).
                    Err(Close::WriteTimeout) => {
                        closed_for = Some("write_timeout");
                        break None;
                    }
                    // Asked to close before and still idle: the peer did not go away.
                    Err(_) if closing => break None,
                    // No request (or its headers) in time: nothing is in flight to
                    // finish, and hyper would go on waiting for a head it has begun
                    // to read, so the connection is dropped.
                    Err(Close::HeaderTimeout) => {
                        closed_for = Some("header_timeout");
                        break None;
                    }
                    Err(Close::Idle) => {
                        conn.as_mut().graceful_shutdown();
                        closing = true;
                        closed_for = Some("idle");
                        // Give a request that raced the shutdown time to finish.
                        check.as_mut().reset((Instant::now() + opts.idle_timeout).into());
                    }
                }
            }
        }
    };
    // One count per connection that the daemon closed: a header read (or a first
    // request) that did not come in time, idleness, a write that made no progress, an
    // unanswered ping, or a connection error. Closing a connection that is still
    // telling HTTP/1.1 from HTTP/2 apart ends it with an error: that is the timeout's
    // close too.
    let reason = closed_for.or(error);
    if let Some(r) = reason {
        metrics::counter!("tlogd_http_connections_closed_total", "listener" => name, "reason" => r)
            .increment(1);
    }
    metrics::gauge!("tlogd_http_connections", "listener" => name).decrement(1.0);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn per_ip(max: usize, v6_prefix: u8) -> Arc<PerIp> {
        Arc::new(PerIp {
            max,
            trusted: vec![IpCidr::parse("::1").unwrap()],
            v6_prefix,
            open: Mutex::new(HashMap::new()),
        })
    }

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    /// Behind trusted proxies, the client is the rightmost `X-Forwarded-For` entry that
    /// is not a trusted proxy; what a client writes left of it, garbage and an absent
    /// header leave the request uncounted per address (the proxy's).
    #[test]
    fn the_forwarded_client_is_the_rightmost_untrusted_address() {
        let p = PerIp {
            max: 1,
            trusted: vec![
                IpCidr::parse("127.0.0.0/8").unwrap(),
                IpCidr::parse("10.0.0.0/8").unwrap(),
            ],
            v6_prefix: 64,
            open: Mutex::new(HashMap::new()),
        };
        let with = |lines: &[&'static str]| {
            let mut h = hyper::HeaderMap::new();
            for l in lines {
                h.append(
                    "x-forwarded-for",
                    hyper::header::HeaderValue::from_static(l),
                );
            }
            p.forwarded_for(&h)
        };
        assert_eq!(with(&[]), None);
        assert_eq!(with(&["192.0.2.7"]), Some(ip("192.0.2.7")));
        // A forged entry left of what our proxies wrote is not taken.
        assert_eq!(
            with(&["203.0.113.9, 192.0.2.7, 10.1.2.3"]),
            Some(ip("192.0.2.7"))
        );
        assert_eq!(
            with(&["203.0.113.9", "192.0.2.7:4711", "10.1.2.3"]),
            Some(ip("192.0.2.7"))
        );
        // IPv6 with a port, cut to its /64 as per-address shares count it.
        assert_eq!(
            with(&["[2001:db8:1:2:3::7]:443"]),
            Some(ip("2001:db8:1:2::"))
        );
        // Only trusted proxies, or an entry that is no address: the proxy's request.
        assert_eq!(with(&["127.0.0.1, 10.0.0.1"]), None);
        assert_eq!(with(&["192.0.2.7, unknown"]), None);
        assert_eq!(with(&[""]), None);
    }

    /// At shutdown every open connection is asked to finish: an idle HTTP/1.1
    /// keep-alive connection is closed at once, so `serve` returns long before the
    /// grace period or any timeout would end it.
    #[tokio::test]
    async fn shutdown_closes_idle_connections_at_once() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let app = Router::new().route("/", axum::routing::get(|| async { "hello" }));
        let long = Duration::from_secs(60);
        let opts = ServeOptions {
            header_read_timeout: long,
            idle_timeout: long,
            write_timeout: long,
            shutdown_grace: long,
            ..ServeOptions::default()
        };
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let server = tokio::spawn(serve(listener, app, opts, async {
            let _ = stop_rx.await;
        }));
        let mut idle = Vec::new();
        for _ in 0..3 {
            let mut c = tokio::net::TcpStream::connect(addr).await.unwrap();
            c.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
                .await
                .unwrap();
            let mut buf = [0u8; 1024];
            let n = c.read(&mut buf).await.unwrap();
            assert!(
                buf[..n].ends_with(b"hello"),
                "{:?}",
                String::from_utf8_lossy(&buf[..n])
            );
            idle.push(c);
        }
        let asked = std::time::Instant::now();
        stop_tx.send(()).unwrap();
        tokio::time::timeout(Duration::from_secs(5), server)
            .await
            .expect("serve returned within 5 s of the shutdown, not after the 60 s grace")
            .unwrap();
        assert!(asked.elapsed() < Duration::from_secs(5));
        for mut c in idle {
            let mut buf = [0u8; 16];
            let n = tokio::time::timeout(Duration::from_secs(5), c.read(&mut buf))
                .await
                .expect("the idle connection was closed")
                .unwrap_or(0);
            assert_eq!(n, 0, "EOF on the idle connection");
        }
    }

    /// #62: one IPv6 /64 is one client (by default): its addresses share the cap and
    /// the per-address shares, another /64 has its own; with a /128 prefix each address
    /// counts alone; IPv4 (and IPv4-mapped) addresses count alone; trusted ones not at
    /// all.
    #[test]
    fn ipv6_clients_are_counted_by_their_prefix() {
        let p = per_ip(1, 64);
        let a = p.admit(ip("2001:db8:1:2::1")).expect("first");
        assert_eq!(a.addr(), Some(ip("2001:db8:1:2::")));
        assert!(p.admit(ip("2001:db8:1:2:ffff::9")).is_none(), "same /64");
        let b = p.admit(ip("2001:db8:1:3::1")).expect("another /64");
        assert!(p.admit(ip("192.0.2.1")).is_some());
        let v4 = p.admit(ip("192.0.2.2")).expect("v4");
        assert!(
            p.admit(ip("::ffff:192.0.2.2")).is_none(),
            "mapped is the same"
        );
        assert_eq!(v4.addr(), Some(ip("192.0.2.2")));
        let t = p.admit(ip("::1")).expect("trusted");
        assert!(p.admit(ip("::1")).is_some());
        assert_eq!(t.addr(), None);
        drop(a);
        assert!(p.admit(ip("2001:db8:1:2::7")).is_some(), "place given back");
        drop(b);
        let each = per_ip(1, 128);
        let _x = each.admit(ip("2001:db8::1")).expect("first");
        assert!(each.admit(ip("2001:db8::2")).is_some(), "/128: each alone");
        assert!(each.admit(ip("2001:db8::1")).is_none());
    }
}
