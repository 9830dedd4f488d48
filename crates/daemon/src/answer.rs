//! What every route family answers with: one-line text answers and errors (a `500`
//! never carries the backend's error text, which may name hosts, paths or the
//! database: the client gets a reference that appears in the server log next to the
//! detail), reading a bounded request body, the answer to a refused add, read metrics.
//! Below the router and the route families, so neither imports the other for these.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use axum::body::{Body, Bytes};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use futures_util::FutureExt;
use http_body_util::BodyExt;
use sha2::{Digest, Sha256};
use tlogd_core::engine::AddError;

use crate::client::{BODY_ROOM_WAIT, BodyHeld, Client};

/// Response header marking an add answered from the dedup index.
pub const DUPLICATE_HEADER: &str = "x-tlog-duplicate";

/// At most 200 printable ASCII characters of client input, for echoing it in a
/// one-line answer.
pub(crate) fn printable(s: &str) -> String {
    s.chars()
        .take(200)
        .map(|c| if c.is_ascii_graphic() { c } else { '?' })
        .collect()
}

/// A one-line `text/plain` answer (line breaks in `msg` become spaces).
pub(crate) fn text(status: StatusCode, msg: impl Into<String>) -> Response {
    let mut body: String = msg
        .into()
        .chars()
        .map(|c| if c == '\r' || c == '\n' { ' ' } else { c })
        .collect();
    body.push('\n');
    (
        status,
        [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
        body,
    )
        .into_response()
}

/// Oversized add bodies up to this many bytes are read and dropped before the 413
/// (see [`read_body`]).
const DRAIN_LIMIT: u64 = 1 << 20;

/// Read a request body of at most `max` bytes (`what`, in the `413`'s words) within
/// `timeout`; otherwise the one-line answer to send.
///
/// The bytes are usually a slice of the connection's read buffer (8 KiB or more), as
/// hyper hands a body over: a caller that holds them long (an entry, until its batch
/// commits) copies them out, or every queued entry would pin a whole buffer (the
/// queue's byte limit counting a small fraction of it) and hyper would allocate a
/// fresh one for the connection's next request. One parsed and dropped at once (a CT
/// chain) need not be.
///
/// Beyond its first bytes a body is read within `client`'s share of the listener's
/// request-body budget ([`crate::client`]): one that does not fit within a moment gets
/// `503` + `Retry-After: 1`.
pub async fn read_body(
    headers: &HeaderMap,
    body: Body,
    client: Option<&Client>,
    timeout: Duration,
    max: usize,
    what: &str,
) -> Result<Bytes, Response> {
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    let too_large = || {
        text(
            StatusCode::PAYLOAD_TOO_LARGE,
            format!("{what} exceeds {max} bytes"),
        )
    };
    if let Some(n) = declared.filter(|&n| n > max as u64) {
        // A body left unread makes hyper close the connection, and the kernel then
        // resets it while the client is still sending, which can destroy the 413
        // before the client reads it. A modest body is read and dropped, frame by
        // frame (never held), so the answer arrives and the connection stays usable;
        // a larger one is refused unread, and the connection closed.
        if n <= DRAIN_LIMIT {
            let mut body = body;
            let drain = async { while let Some(Ok(_)) = body.frame().await {} };
            if tokio::time::timeout(timeout, drain).await.is_ok() {
                return Err(too_large());
            }
        }
        let mut resp = too_large();
        resp.headers_mut()
            .insert(header::CONNECTION, HeaderValue::from_static("close"));
        return Err(resp);
    }
    let mut body = body;
    let mut held = BodyHeld::new(client);
    let mut pieces: Vec<Bytes> = Vec::new();
    let mut total = 0usize;
    // A body that has already arrived whole (an add of a small entry: nearly always)
    // is taken without arming the timeout below, whose timer, registered and then
    // cancelled, would cost two locks of the runtime's timer wheel per add.
    if let Some(first) = body.frame().now_or_never() {
        if let Some(frame) = first {
            take_frame(frame, &mut pieces, &mut total, &mut held, max, &too_large).await?;
        }
        if hyper::body::Body::is_end_stream(&body) {
            return Ok(joined(pieces));
        }
    }
    let read = async {
        while let Some(frame) = body.frame().await {
            take_frame(frame, &mut pieces, &mut total, &mut held, max, &too_large).await?;
        }
        Ok(joined(pieces))
    };
    match tokio::time::timeout(timeout, read).await {
        Ok(r) => r,
        Err(_) => {
            let mut resp = text(
                StatusCode::REQUEST_TIMEOUT,
                format!(
                    "the request body did not arrive within {} ms",
                    timeout.as_millis()
                ),
            );
            resp.headers_mut()
                .insert(header::CONNECTION, HeaderValue::from_static("close"));
            Err(resp)
        }
    }
}

/// Add one frame of a body being read to `pieces`: its data within `max` bytes in all
/// and within the client's share of the body budget (waiting a moment for room).
async fn take_frame(
    frame: Result<hyper::body::Frame<Bytes>, axum::Error>,
    pieces: &mut Vec<Bytes>,
    total: &mut usize,
    held: &mut BodyHeld<'_>,
    max: usize,
    too_large: &(dyn Fn() -> Response + Sync),
) -> Result<(), Response> {
    let frame = frame.map_err(|e| {
        text(
            StatusCode::BAD_REQUEST,
            format!("cannot read the request body: {e}"),
        )
    })?;
    let Ok(data) = frame.into_data() else {
        return Ok(());
    };
    *total += data.len();
    if *total > max {
        return Err(too_large());
    }
    if !held.grow_to_within(*total as u64, BODY_ROOM_WAIT).await {
        let mut resp = text(
            StatusCode::SERVICE_UNAVAILABLE,
            "busy: too many request bytes in flight; retry later",
        );
        let h = resp.headers_mut();
        h.insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
        h.insert(header::CONNECTION, HeaderValue::from_static("close"));
        return Err(resp);
    }
    pieces.push(data);
    Ok(())
}

/// A body's pieces as one: a single piece (the usual case) as it is, a slice of
/// hyper's buffer.
fn joined(mut pieces: Vec<Bytes>) -> Bytes {
    match pieces.len() {
        0 => Bytes::new(),
        1 => pieces.swap_remove(0),
        _ => Bytes::from(pieces.concat()),
    }
}

/// The answer to an add the log refused or failed, and its metric outcome.
pub(crate) fn add_refused(
    e: &AddError,
    retry_after: Duration,
    route: &str,
) -> (Response, &'static str) {
    let (status, o) = match e {
        AddError::Empty => (StatusCode::BAD_REQUEST, "bad_request"),
        AddError::Rejected(_) => (StatusCode::BAD_REQUEST, "bad_request"),
        AddError::TooLarge { .. } => (StatusCode::PAYLOAD_TOO_LARGE, "too_large"),
        // Final: retrying cannot help, so not a 503.
        AddError::Frozen => (StatusCode::FORBIDDEN, "frozen"),
        e if e.is_pushback() => (StatusCode::SERVICE_UNAVAILABLE, "pushback"),
        _ => (StatusCode::INTERNAL_SERVER_ERROR, "error"),
    };
    if status == StatusCode::INTERNAL_SERVER_ERROR {
        return (internal_error(route, e), o);
    }
    let mut resp = text(status, e.to_string());
    if status == StatusCode::SERVICE_UNAVAILABLE {
        resp.headers_mut().insert(
            header::RETRY_AFTER,
            HeaderValue::from(retry_after.as_secs().max(1)),
        );
    }
    (resp, o)
}

/// When each error reference was last logged, and how many answers carried it since.
static LOGGED_ERRORS: Mutex<Option<HashMap<String, (Instant, u64)>>> = Mutex::new(None);

/// A `500` with a generic body. The detail goes to the log under a reference derived
/// from it (the first 8 hex digits of its SHA-256), which the body quotes: the same
/// failure (a batch of 4096 adds whose commit failed) has one reference and is logged
/// once per second with a count, not once per request.
pub(crate) fn internal_error(route: &str, detail: &dyn std::fmt::Display) -> Response {
    let detail = detail.to_string();
    let digest = Sha256::digest(detail.as_bytes());
    let reference = hex(&digest[..4]);
    let now = Instant::now();
    let log_now = {
        let mut guard = LOGGED_ERRORS.lock().unwrap_or_else(|e| e.into_inner());
        let seen = guard.get_or_insert_with(HashMap::new);
        if seen.len() > 1024 {
            seen.retain(|_, (at, _)| now.duration_since(*at) < Duration::from_secs(1));
            // More than 1024 distinct failures within a second: forget them all rather
            // than grow (some are then logged once more).
            if seen.len() > 1024 {
                seen.clear();
            }
        }
        match seen.get_mut(&reference) {
            Some((at, n)) if now.duration_since(*at) < Duration::from_secs(1) => {
                *n += 1;
                None
            }
            Some((at, n)) => {
                let repeats = *n;
                (*at, *n) = (now, 0);
                Some(repeats)
            }
            None => {
                seen.insert(reference.clone(), (now, 0));
                Some(0)
            }
        }
    };
    if let Some(repeats) = log_now {
        tracing::error!(
            error_ref = %reference,
            route,
            error = %detail,
            earlier_answers_not_logged = repeats,
            "answered 500"
        );
    }
    text(
        StatusCode::INTERNAL_SERVER_ERROR,
        format!("internal error (ref {reference}); see the server log"),
    )
}

pub(crate) fn read_metric(kind: &'static str, status: StatusCode, log: &str) {
    metrics::counter!("tlogd_read_requests_total", "log" => log.to_string(), "kind" => kind, "status" => status.as_str().to_owned())
        .increment(1);
}

/// Lowercase hex (issuer paths, error references).
pub(crate) fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// Milliseconds since the Unix epoch (0 before it).
pub(crate) fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// Marks a response that must never be shed for the budget (a response extension): an
/// answer that tells what became of entries already queued, such as a forward's
/// (`routes/forward.rs`; the listener, `serve/server.rs`, obeys it), where a 503 in its place would leave their outcome unknown. Such
/// answers are bounded by their own route's limits instead.
#[derive(Clone, Copy, Debug)]
pub struct NeverShed;
