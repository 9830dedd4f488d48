//! The HTTP side: accepting connections, counting and faulting requests, and the
//! connection-level faults (reset, close, truncated body) that need control of the socket.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::BodyExt;
use hyper::body::{Frame, Incoming};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};

use crate::store::{self, Target};
use crate::{Fault, Op, Shared, lock};

/// Accepts connections until `shutdown` fires (or its sender is dropped).
pub(crate) async fn serve(
    listener: TcpListener,
    shared: Arc<Shared>,
    mut shutdown: tokio::sync::oneshot::Receiver<()>,
) {
    loop {
        tokio::select! {
            _ = &mut shutdown => return,
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => {
                    tokio::spawn(connection(stream, Arc::clone(&shared)));
                }
                // Out of descriptors and the like: back off rather than spin on the error.
                Err(_) => tokio::time::sleep(Duration::from_millis(10)).await,
            },
        }
    }
}

/// Returned by the service to make hyper drop the connection without answering.
#[derive(Debug, thiserror::Error)]
#[error("connection dropped by fault injection")]
struct Dropped;

/// What the handler decided to do with one request.
enum Outcome {
    Respond(Response<Body>),
    /// Drop the connection with a TCP RST.
    Reset,
    /// Drop the connection with a FIN.
    Close,
}

async fn connection(stream: TcpStream, shared: Arc<Shared>) {
    // Small request/response pairs: don't let Nagle delay them.
    let _ = stream.set_nodelay(true);
    let reset = Arc::new(AtomicBool::new(false));
    let io = TokioIo::new(ConnIo {
        inner: stream,
        reset: Arc::clone(&reset),
    });
    let service = hyper::service::service_fn(move |req| {
        let shared = Arc::clone(&shared);
        let reset = Arc::clone(&reset);
        async move {
            match handle(shared, req).await {
                Outcome::Respond(resp) => Ok(resp),
                Outcome::Reset => {
                    reset.store(true, Ordering::SeqCst);
                    Err(Dropped)
                }
                Outcome::Close => Err(Dropped),
            }
        }
    });
    // Errors here are the injected drops or clients going away: nothing to report.
    let _ = hyper::server::conn::http1::Builder::new()
        .serve_connection(io, service)
        .await;
}

async fn handle(shared: Arc<Shared>, req: Request<Incoming>) -> Outcome {
    let (parts, body) = req.into_parts();
    let target = Target::parse(&parts.uri);
    let op = match (&parts.method, &target.key) {
        (&Method::GET, None) => Op::List,
        (&Method::GET, Some(_)) => Op::Get,
        (&Method::HEAD, _) => Op::Head,
        (&Method::PUT, _) => Op::Put,
        (&Method::DELETE, _) => Op::Delete,
        (&Method::POST, _) => Op::Post,
        _ => Op::Any,
    };
    shared.count(op);
    // The whole request is read before any fault, so a dropped connection is never a
    // half-read request (closing with unread input would turn a FIN into an RST) and a
    // fault always comes after the client has sent everything, as on a real server.
    let body = match body.collect().await {
        Ok(collected) => collected.to_bytes(),
        Err(_) => return Outcome::Close,
    };
    if shared.unavailable.load(Ordering::SeqCst) {
        return Outcome::Respond(full(store::error_response(
            StatusCode::SERVICE_UNAVAILABLE,
            "ServiceUnavailable",
            "The service is unavailable (injected outage).",
        )));
    }
    let match_key = match op {
        Op::List => target.query("prefix").unwrap_or_default(),
        _ => target.key.clone().unwrap_or_default(),
    };
    let fault = shared.take_fault(op, &match_key);
    let mut delay = None;
    match &fault {
        Some(Fault::ServiceUnavailable) => {
            return Outcome::Respond(full(store::error_response(
                StatusCode::SERVICE_UNAVAILABLE,
                "ServiceUnavailable",
                "The service is unavailable (injected fault).",
            )));
        }
        Some(Fault::TooManyRequests) => {
            return Outcome::Respond(full(store::error_response(
                StatusCode::TOO_MANY_REQUESTS,
                "SlowDown",
                "Too many requests (injected fault).",
            )));
        }
        Some(Fault::Reset) => return Outcome::Reset,
        Some(Fault::Close) => return Outcome::Close,
        Some(Fault::Delay(d)) => delay = Some(*d),
        _ => {}
    }
    // Applied on a task of its own so that a client hanging up during a delay does not
    // cancel the request: a slow write still lands, as on a real server.
    let applier = Arc::clone(&shared);
    let applied = tokio::spawn(async move {
        if let Some(d) = delay {
            tokio::time::sleep(d).await;
        }
        let page_size = applier.page_size.load(Ordering::SeqCst);
        let mut store = lock(&applier.store);
        store.apply(&parts.method, &parts.headers, &target, body, page_size)
    })
    .await;
    let resp = match applied {
        Ok(resp) => resp,
        Err(_) => store::error_response(
            StatusCode::INTERNAL_SERVER_ERROR,
            "InternalError",
            "The emulator failed handling this request.",
        ),
    };
    match fault {
        Some(Fault::ApplyThenReset) => Outcome::Reset,
        Some(Fault::ApplyThenClose) => Outcome::Close,
        Some(Fault::TruncateBody(after)) => {
            let (parts, data) = resp.into_parts();
            Outcome::Respond(Response::from_parts(
                parts,
                Body::Truncated(Some(data.slice(..after.min(data.len())))),
            ))
        }
        _ => Outcome::Respond(full(resp)),
    }
}

fn full(resp: Response<Bytes>) -> Response<Body> {
    resp.map(|b| Body::Full(Some(b)))
}

/// A response body: whole, or cut short with an error after its first bytes (which makes
/// hyper abort the connection mid-body, while the headers promised the full length).
pub(crate) enum Body {
    Full(Option<Bytes>),
    Truncated(Option<Bytes>),
}

impl hyper::body::Body for Body {
    type Data = Bytes;
    type Error = io::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, io::Error>>> {
        let this = self.get_mut();
        Poll::Ready(match this {
            Body::Full(data) => data
                .take()
                .filter(|d| !d.is_empty())
                .map(|d| Ok(Frame::data(d))),
            Body::Truncated(data) => match data.take() {
                Some(d) if !d.is_empty() => Some(Ok(Frame::data(d))),
                // Sent what it may (or had nothing): now break the stream.
                _ => Some(Err(io::Error::new(
                    io::ErrorKind::ConnectionAborted,
                    "body truncated by fault injection",
                ))),
            },
        })
    }

    fn is_end_stream(&self) -> bool {
        matches!(self, Body::Full(None))
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        match self {
            Body::Full(Some(d)) => hyper::body::SizeHint::with_exact(d.len() as u64),
            Body::Full(None) => hyper::body::SizeHint::with_exact(0),
            Body::Truncated(_) => hyper::body::SizeHint::default(),
        }
    }
}

/// The connection's socket, which can be made to end with a TCP RST instead of a FIN.
///
/// Once `reset` is set nothing more is written (not even a FIN from a shutdown), and the
/// socket is closed with `SO_LINGER` 0, which makes the kernel send an RST: the client sees
/// "connection reset by peer" rather than an orderly end.
struct ConnIo {
    inner: TcpStream,
    reset: Arc<AtomicBool>,
}

impl ConnIo {
    fn resetting(&self) -> bool {
        self.reset.load(Ordering::SeqCst)
    }
}

fn reset_error() -> io::Error {
    io::Error::new(io::ErrorKind::ConnectionReset, "reset by fault injection")
}

impl AsyncRead for ConnIo {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_read(cx, buf)
    }
}

impl AsyncWrite for ConnIo {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        if self.resetting() {
            return Poll::Ready(Err(reset_error()));
        }
        Pin::new(&mut self.get_mut().inner).poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        if self.resetting() {
            return Poll::Ready(Err(reset_error()));
        }
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        if self.resetting() {
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}

impl Drop for ConnIo {
    fn drop(&mut self) {
        if self.resetting() {
            // Best effort: if it fails the client sees a FIN instead, still no answer.
            let _ = socket2::SockRef::from(&self.inner).set_linger(Some(Duration::ZERO));
        }
    }
}
