//! Serving a router on a TCP listener: HTTP/1.1 and HTTP/2 without TLS (h2c, prior
//! knowledge) on the same port, with the timeouts and the connection limit that keep
//! slow, idle or greedy clients from pinning the daemon, and graceful shutdown.
//!
//! `axum::serve` has none of these (no timer, so hyper's header-read timeout never
//! runs): a client that sends half a request and stops would hold its connection, its
//! task and a file descriptor forever. What bounds what:
//!
//! * **Header read** (`header_read_timeout`): for every connection, the first request
//!   must start within it (this also covers a client that connects and sends nothing,
//!   or a few bytes of the HTTP/2 preface, which hyper would wait on forever while
//!   telling the two protocols apart); on HTTP/1.1, each next request's headers must
//!   arrive within it of the previous response, which also bounds a keep-alive
//!   connection's wait for its next request. The connection's own timer checks this,
//!   not hyper's: hyper's sets, polls and cancels a timer for every request (boxed, in
//!   tokio's timer wheel), ~3 % of the daemon's CPU under load.
//! * **Idle** (`idle_timeout`): a connection with no request in flight for this long
//!   is shut down gracefully (HTTP/2: `GOAWAY`). A request counts as in flight until
//!   its response body has been handed to the connection, so a long add waiting for its
//!   commit is never cut.
//! * **Body read**: the handlers' business (`POST /add` bounds it, see `http.rs`).
//! * **Connections** (`max_connections`): one permit each; a connection accepted beyond
//!   the limit is closed at once and counted in `tlogd_http_connections_rejected_total`.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Body;
use axum::extract::Request;
use http_body_util::BodyExt;
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use tlog_verify::yield_first::YieldFirst;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, watch};
use tower_service::Service;

use crate::config::HttpConfig;

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
    /// Open connections at most.
    pub max_connections: usize,
    /// Requests in flight at once on one HTTP/2 connection.
    pub h2_max_concurrent_streams: u32,
    /// At shutdown, how long busy connections are waited for.
    pub shutdown_grace: Duration,
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
            max_connections: c.max_connections.max(1),
            h2_max_concurrent_streams: c.h2_max_concurrent_streams.max(1),
            shutdown_grace: Duration::from_millis(c.shutdown_grace_ms),
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
        .keep_alive(true);
    builder
        .http2()
        .timer(TokioTimer::new())
        .max_concurrent_streams(opts.h2_max_concurrent_streams);
    let builder = Arc::new(builder);
    let max = opts.max_connections.min(Semaphore::MAX_PERMITS);
    let permits = Arc::new(Semaphore::new(max));
    let (close_tx, close_rx) = watch::channel(());
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        let stream = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(e) => {
                    accept_error(e, opts.name).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        let Ok(permit) = permits.clone().try_acquire_owned() else {
            // Over the limit: closing at once costs the least; the client sees the
            // connection reset or closed and may retry later.
            metrics::counter!("tlogd_http_connections_rejected_total", "listener" => opts.name)
                .increment(1);
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
            close_rx.clone(),
            permit,
        ));
    }
    // Stop accepting (the kernel refuses new connections from now on), then ask every
    // connection to finish.
    drop(listener);
    drop(close_rx);
    let _ = close_tx.send(());
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

/// Requests in flight on one connection and when the last one ended.
struct Activity {
    epoch: Instant,
    /// The connection speaks HTTP/2 (known from its first request).
    http2: AtomicBool,
    in_flight: AtomicUsize,
    /// Milliseconds after `epoch` when a request last ended; `u64::MAX` before the
    /// first request started.
    last_end_ms: AtomicU64,
}

impl Activity {
    fn new() -> Self {
        Activity {
            epoch: Instant::now(),
            http2: AtomicBool::new(false),
            in_flight: AtomicUsize::new(0),
            last_end_ms: AtomicU64::new(u64::MAX),
        }
    }

    /// When the connection may be closed, and whether for a header read (`None` while
    /// a request is in flight): before any request, `header_read` after it opened;
    /// then on HTTP/1.1 the sooner of `header_read` and `idle` after the last request
    /// ended (the next request's headers are read from then on), on HTTP/2 `idle`.
    fn deadline(&self, header_read: Duration, idle: Duration) -> Option<(Instant, bool)> {
        if self.in_flight.load(Ordering::Acquire) > 0 {
            return None;
        }
        match self.last_end_ms.load(Ordering::Acquire) {
            u64::MAX => Some((self.epoch + header_read, true)),
            ms => {
                let end = self.epoch + Duration::from_millis(ms);
                if !self.http2.load(Ordering::Relaxed) && header_read < idle {
                    Some((end + header_read, true))
                } else {
                    Some((end + idle, false))
                }
            }
        }
    }
}

/// Marks one request in flight until dropped (with the response body).
struct InFlight(Arc<Activity>);

impl InFlight {
    fn new(a: &Arc<Activity>) -> Self {
        a.in_flight.fetch_add(1, Ordering::AcqRel);
        // A request has started: the "first request" deadline no longer applies.
        let _ = a
            .last_end_ms
            .compare_exchange(u64::MAX, 0, Ordering::AcqRel, Ordering::Relaxed);
        InFlight(a.clone())
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        let a = &self.0;
        a.last_end_ms
            .store(a.epoch.elapsed().as_millis() as u64, Ordering::Release);
        a.in_flight.fetch_sub(1, Ordering::AcqRel);
    }
}

async fn connection(
    builder: Arc<auto::Builder<TokioExecutor>>,
    stream: TcpStream,
    app: Router,
    opts: ServeOptions,
    mut close_rx: watch::Receiver<()>,
    _permit: OwnedSemaphorePermit,
) {
    let name = opts.name;
    metrics::gauge!("tlogd_http_connections", "listener" => name).increment(1.0);
    let activity = Arc::new(Activity::new());
    let service = {
        let activity = activity.clone();
        hyper::service::service_fn(move |req: hyper::Request<Incoming>| {
            if req.version() == hyper::Version::HTTP_2 {
                activity.http2.store(true, Ordering::Relaxed);
            }
            let guard = InFlight::new(&activity);
            let call = app.clone().call(Request::from(req.map(Body::new)));
            async move {
                let resp = call.await?;
                // The request stays in flight until hyper has taken its whole body.
                Ok::<_, std::convert::Infallible>(resp.map(move |b| {
                    Body::new(b.map_frame(move |f| {
                        let _in_flight = &guard;
                        f
                    }))
                }))
            }
        })
    };
    let conn = builder.serve_connection(TokioIo::new(stream), service);
    let mut conn = std::pin::pin!(conn);
    let first = activity.epoch + opts.header_read_timeout;
    let check = tokio::time::sleep_until(first.into());
    let mut check = std::pin::pin!(check);
    let recheck = opts.header_read_timeout.min(opts.idle_timeout);
    let mut closing = false;
    let mut closed_for: Option<&'static str> = None;
    let error = loop {
        // Over HTTP/2, many streams' answers leave in one write (`YieldFirst`).
        let polled = YieldFirst::new(conn.as_mut()).only_if(&activity.http2);
        tokio::select! {
            done = polled => match done {
                Ok(()) => break None,
                // hyper times nothing out here (the header-read deadline is
                // checked below, see `serve`): any error is the connection's.
                Err(_) => break Some("error"),
            },
            _ = close_rx.changed(), if !closing => {
                conn.as_mut().graceful_shutdown();
                closing = true;
            }
            () = &mut check => {
                let now = Instant::now();
                match activity.deadline(opts.header_read_timeout, opts.idle_timeout) {
                    // Busy: look again in a while (so a deadline that starts when
                    // the request ends is at most that late).
                    None => check.as_mut().reset((now + recheck).into()),
                    Some((d, _)) if d > now => check.as_mut().reset(d.into()),
                    // Asked to close before and still idle: the peer did not go away.
                    Some(_) if closing => break None,
                    // No request (or its headers) in time: nothing is in flight to
                    // finish, and hyper would go on waiting for a head it has begun
                    // to read, so the connection is dropped.
                    Some((_, true)) => {
                        closed_for = Some("header_timeout");
                        break None;
                    }
                    Some((_, false)) => {
                        conn.as_mut().graceful_shutdown();
                        closing = true;
                        closed_for = Some("idle");
                        // Give a request that raced the shutdown time to finish.
                        check.as_mut().reset((now + opts.idle_timeout).into());
                    }
                }
            }
        }
    };
    // One count per connection that the daemon closed: a header read (or a first
    // request) that did not come in time, idleness, or a connection error. Closing a
    // connection that is still telling HTTP/1.1 from HTTP/2 apart ends it with an
    // error: that is the timeout's close too.
    let reason = closed_for.or(error);
    if let Some(r) = reason {
        metrics::counter!("tlogd_http_connections_closed_total", "listener" => name, "reason" => r)
            .increment(1);
    }
    metrics::gauge!("tlogd_http_connections", "listener" => name).decrement(1.0);
}
