//! Forwarding between frontends over HTTP (`[forward]`; the protocol is the engine's,
//! `tlogd_core::engine::forward`): the client a forwarding frontend sends its batches
//! with, and the `POST <log>/.tlogd/forward` route the sequencing frontend takes them
//! on.
//!
//! Frontends authenticate each other with a shared bearer token (`forward.token_file`),
//! checked in constant time before the body is read. A request names the log it is
//! for (its origin, [`ORIGIN_PARAM`]) and is refused for any other. A request is
//! bounded: at most [`MAX_FORWARDS_TAKEN`] at once per log, at most one batch of
//! entries (`batching.max_entries`), each no larger than an add, and at most
//! [`MAX_FORWARD_BYTES`] in all, read within the body timeout; its entries then meet
//! the sequencing frontend's own queue limits, so a forwarding frontend gets the same
//! pushback as a client.
//!
//! Never logged twice: every refusal before an entry is queued carries
//! [`REFUSED_MARKER`], the only answer besides a refused connection that lets the
//! forwarding frontend commit the batch itself ([`classify_answer`]); an answer that
//! went through the queue is never shed by the listener's response budget
//! ([`crate::answer::NeverShed`]), since a 503 in its place would read as "unknown".

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::{Body, Bytes};
use axum::extract::Request;
use axum::http::{HeaderValue, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use http_body_util::{BodyExt, LengthLimitError, Limited};
use tlogd_core::bundle::MAX_ENTRY_SIZE;
use tlogd_core::engine::forward::{
    ORIGIN_PARAM, REFUSED_MARKER, classify_answer, decode_entries, encode_entries, encode_outcomes,
    is_refusal,
};
use tlogd_core::engine::{BoxFuture, ForwardError, ForwardedOutcome, Forwarder, Log, LogStorage};
use tlogd_http::client::{BaseUrl, Client, ClientError};

use crate::answer::text;
use crate::auth::{Verdict, WriteTokens};

/// The route, relative to a log's base URL.
pub const FORWARD_PATH: &str = ".tlogd/forward";

/// Forward requests a sequencing frontend takes at once per log; one more is refused
/// before queueing ([`REFUSED_MARKER`]), and its frontend commits the batch itself.
pub const MAX_FORWARDS_TAKEN: usize = 32;

/// The largest forward body taken: a batch of ordinary entries is far below it, and
/// `MAX_FORWARDS_TAKEN` of them bound what forwards can hold in memory (512 MiB would
/// be ~256 MiB each at the largest entries and batches otherwise).
pub const MAX_FORWARD_BYTES: usize = 16 << 20;

/// Idle connections kept to the sequencing frontend; more are opened when busy.
const MAX_IDLE: usize = 16;
/// An idle connection older than this is not reused: the other side may have closed it.
const IDLE_REUSE: Duration = Duration::from_secs(20);
/// The largest answer accepted: a record per entry, each a few bytes (an error's
/// message at most 1 KiB).
fn max_answer(entries: usize) -> usize {
    entries.saturating_mul(1028).max(64 << 10)
}

/// Sends batches to the sequencing frontend over HTTP/1.1 keep-alive connections.
pub struct HttpForwarder {
    target: String,
    base: BaseUrl,
    token: String,
    /// `FORWARD_PATH?origin=...`: the path every forward is sent to.
    path: String,
    timeout: Duration,
    idle: Mutex<Vec<(Client, Instant)>>,
}

impl HttpForwarder {
    /// A forwarder to the log at `url` (its base URL on the sequencing frontend), for
    /// the log named `origin` (the sequencing frontend refuses forwards for another).
    pub fn new(
        url: &str,
        token: String,
        timeout: Duration,
        origin: &str,
    ) -> Result<Self, ClientError> {
        let base = BaseUrl::parse(url)?;
        // Checked now, so that a bad token is a start-up error, not a failed forward.
        Client::new(base.clone(), Some(&token), timeout)?;
        Ok(HttpForwarder {
            target: url.to_string(),
            base,
            token,
            path: format!("{FORWARD_PATH}?{ORIGIN_PARAM}={}", percent_encode(origin)),
            timeout,
            idle: Mutex::new(Vec::new()),
        })
    }

    fn client(&self) -> Result<Client, ClientError> {
        let mut idle = self.idle.lock().unwrap_or_else(|e| e.into_inner());
        while let Some((client, since)) = idle.pop() {
            if since.elapsed() < IDLE_REUSE {
                return Ok(client);
            }
        }
        drop(idle);
        Client::new(self.base.clone(), Some(&self.token), self.timeout)
    }

    fn put_back(&self, client: Client) {
        let mut idle = self.idle.lock().unwrap_or_else(|e| e.into_inner());
        if idle.len() < MAX_IDLE {
            idle.push((client, Instant::now()));
        }
    }
}

impl Forwarder for HttpForwarder {
    fn target(&self) -> &str {
        &self.target
    }

    fn forward(
        &self,
        entries: Vec<Bytes>,
    ) -> BoxFuture<'_, Result<Vec<ForwardedOutcome>, ForwardError>> {
        Box::pin(async move {
            let n = entries.len();
            let body = Bytes::from(encode_entries(&entries));
            drop(entries);
            let client = self
                .client()
                .map_err(|e| ForwardError::Unsent(e.to_string()))?;
            let mut client = client.with_max_body(max_answer(n)).with_close_probe();
            let resp = match client.send(Method::POST, &self.path, body).await {
                Ok(resp) => resp,
                Err(e) => {
                    // The other idle connections most likely died with this one (the
                    // frontend restarted): the next forward connects afresh.
                    self.idle.lock().unwrap_or_else(|e| e.into_inner()).clear();
                    return Err(match e {
                        ClientError::Unsent(e) => ForwardError::Unsent(e),
                        e => ForwardError::Unknown(e.to_string()),
                    });
                }
            };
            // Only the sequencing frontend's own word that nothing was queued lets
            // this frontend commit the batch: a bare 503 may be a response budget, a
            // proxy or a load balancer answering after the batch was committed.
            let refused = resp.status != StatusCode::OK && is_refusal(&resp.body);
            let answer = classify_answer(resp.status.as_u16(), refused, &resp.body, n);
            if resp.status == StatusCode::OK || refused {
                self.put_back(client);
            }
            answer
        })
    }
}

/// `s` with every byte but RFC 3986's unreserved ones percent-encoded.
fn percent_encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// The value of `name` in a query string, percent-decoded; `None` when absent or not
/// valid percent-encoded UTF-8.
fn query_param(query: &str, name: &str) -> Option<String> {
    let raw = query
        .split('&')
        .find_map(|kv| kv.strip_prefix(name)?.strip_prefix('='))?;
    let mut bytes = Vec::with_capacity(raw.len());
    let mut it = raw.bytes();
    while let Some(b) = it.next() {
        bytes.push(match b {
            b'%' => {
                let hex = [it.next()?, it.next()?];
                u8::from_str_radix(std::str::from_utf8(&hex).ok()?, 16).ok()?
            }
            b => b,
        });
    }
    String::from_utf8(bytes).ok()
}

/// How a sequencing frontend takes forwarded batches.
#[derive(Clone, Debug)]
pub struct ForwardRoute {
    /// Tokens accepted from forwarding frontends.
    pub tokens: Arc<WriteTokens>,
    /// The whole body must arrive within this.
    pub body_read_timeout: Duration,
    /// At most this many entries per request.
    pub max_entries: usize,
    /// The log's origin: a forward naming another is refused.
    pub origin: String,
    /// Forwards being taken ([`MAX_FORWARDS_TAKEN`]).
    pub slots: Arc<tokio::sync::Semaphore>,
}

impl ForwardRoute {
    /// The route of the log named `origin`.
    pub fn new(
        tokens: Arc<WriteTokens>,
        body_read_timeout: Duration,
        max_entries: usize,
        origin: String,
    ) -> Self {
        ForwardRoute {
            tokens,
            body_read_timeout,
            max_entries,
            origin,
            slots: Arc::new(tokio::sync::Semaphore::new(MAX_FORWARDS_TAKEN)),
        }
    }
}

/// `POST <log>/.tlogd/forward`: queue the entries as this frontend's own adds and
/// answer each (see `tlogd_core::engine::forward` for the format).
pub async fn take_forwarded<S: LogStorage>(
    log: Log<S>,
    route: ForwardRoute,
    req: Request,
) -> Response {
    let label = log.config().name.clone();
    // Every refusal here comes before an entry is queued, and says so
    // (`REFUSED_MARKER`): the forwarding frontend may then commit the batch itself.
    let refused = |status: StatusCode, o: &'static str, msg: String| {
        metrics::counter!("tlogd_forward_requests_total", "log" => label.clone(), "outcome" => o)
            .increment(1);
        text(status, format!("{REFUSED_MARKER}{msg}"))
    };
    match route.tokens.check(req.headers().get(header::AUTHORIZATION)) {
        Verdict::Allowed => {}
        Verdict::Missing => {
            return refused(
                StatusCode::UNAUTHORIZED,
                "unauthorized",
                "forwarding needs the frontends' Authorization: Bearer token".into(),
            );
        }
        Verdict::Wrong => {
            return refused(
                StatusCode::FORBIDDEN,
                "forbidden",
                "the forwarding token is not accepted".into(),
            );
        }
    }
    let named = req.uri().query().and_then(|q| query_param(q, ORIGIN_PARAM));
    if named.as_deref() != Some(route.origin.as_str()) {
        return refused(
            StatusCode::CONFLICT,
            "wrong_log",
            format!(
                "this is the log {:?}; the forward names {:?}: check forward.to",
                route.origin,
                named.unwrap_or_default()
            ),
        );
    }
    let Ok(_slot) = route.slots.clone().try_acquire_owned() else {
        let mut r = refused(
            StatusCode::SERVICE_UNAVAILABLE,
            "busy",
            format!("{MAX_FORWARDS_TAKEN} forwards are being taken; commit this batch yourself"),
        );
        r.headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
        return r;
    };
    let max_bytes = route
        .max_entries
        .saturating_mul(MAX_ENTRY_SIZE + 4)
        .min(MAX_FORWARD_BYTES);
    let body: Body = req.into_body();
    let read = tokio::time::timeout(
        route.body_read_timeout,
        Limited::new(body, max_bytes).collect(),
    )
    .await;
    let body = match read {
        Ok(Ok(collected)) => collected.to_bytes(),
        Ok(Err(e)) if e.downcast_ref::<LengthLimitError>().is_some() => {
            return refused(
                StatusCode::PAYLOAD_TOO_LARGE,
                "too_large",
                format!("a forwarded batch exceeds {max_bytes} bytes"),
            );
        }
        Ok(Err(e)) => {
            return refused(
                StatusCode::BAD_REQUEST,
                "bad_request",
                format!("cannot read the request body: {e}"),
            );
        }
        Err(_) => {
            return refused(
                StatusCode::REQUEST_TIMEOUT,
                "timeout",
                "the forwarded batch did not arrive in time".into(),
            );
        }
    };
    let entries = match decode_entries(&body, route.max_entries) {
        Ok(entries) => entries,
        Err(e) => return refused(StatusCode::BAD_REQUEST, "bad_request", e.to_string()),
    };
    metrics::counter!("tlogd_forward_requests_total", "log" => label.clone(), "outcome" => "ok")
        .increment(1);
    metrics::counter!("tlogd_forward_received_entries_total", "log" => label)
        .increment(entries.len() as u64);
    let outcomes = log.add_forwarded(entries).await;
    let mut r = (
        StatusCode::OK,
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/octet-stream"),
        )],
        encode_outcomes(&outcomes),
    )
        .into_response();
    // The entries went through the queue: this answer is the only word on them, and a
    // shed 503 in its place would make the other frontend's clients resubmit blind.
    r.extensions_mut().insert(crate::answer::NeverShed);
    r
}
