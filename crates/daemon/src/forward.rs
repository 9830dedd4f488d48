//! Forwarding between frontends over HTTP (`[forward]`; the protocol is the engine's,
//! `tlogd_core::engine::forward`): the client a forwarding frontend sends its batches
//! with, and the `POST <log>/.tlogd/forward` route the sequencing frontend takes them
//! on.
//!
//! Frontends authenticate each other with a shared bearer token (`forward.token_file`),
//! checked in constant time before the body is read. A request is bounded: at most
//! one batch of entries (`batching.max_entries`), each no larger than an add, read
//! within the body timeout; its entries then meet the sequencing frontend's own queue
//! limits, so a forwarding frontend gets the same pushback as a client.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::{Body, Bytes};
use axum::extract::Request;
use axum::http::{HeaderValue, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use http_body_util::{BodyExt, LengthLimitError, Limited};
use tlogd_core::bundle::MAX_ENTRY_SIZE;
use tlogd_core::engine::forward::{
    decode_entries, decode_outcomes, encode_entries, encode_outcomes,
};
use tlogd_core::engine::{BoxFuture, ForwardError, ForwardedOutcome, Forwarder, Log, LogStorage};
use tlogd_http::client::{BaseUrl, Client, ClientError};

use crate::auth::{Verdict, WriteTokens};
use crate::http::text;

/// The route, relative to a log's base URL.
pub const FORWARD_PATH: &str = ".tlogd/forward";

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
    timeout: Duration,
    idle: Mutex<Vec<(Client, Instant)>>,
}

impl HttpForwarder {
    /// A forwarder to the log at `url` (its base URL on the sequencing frontend).
    pub fn new(url: &str, token: String, timeout: Duration) -> Result<Self, ClientError> {
        let base = BaseUrl::parse(url)?;
        // Checked now, so that a bad token is a start-up error, not a failed forward.
        Client::new(base.clone(), Some(&token), timeout)?;
        Ok(HttpForwarder {
            target: url.to_string(),
            base,
            token,
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
            let mut client = client.with_max_body(max_answer(n));
            let resp = match client.send(Method::POST, FORWARD_PATH, body).await {
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
            let status = resp.status;
            let why = || {
                format!(
                    "{status}: {}",
                    String::from_utf8_lossy(&resp.body[..resp.body.len().min(200)]).trim()
                )
            };
            if status == StatusCode::OK {
                self.put_back(client);
                return decode_outcomes(&resp.body, n)
                    .map_err(|e| ForwardError::Unknown(e.to_string()));
            }
            // Refused as a whole before any entry was queued there: a wrong token, a
            // frontend not taking forwards, a bad request, its connection limit.
            if status.is_client_error() || status == StatusCode::SERVICE_UNAVAILABLE {
                self.put_back(client);
                return Err(ForwardError::Unsent(why()));
            }
            Err(ForwardError::Unknown(why()))
        })
    }
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
}

/// `POST <log>/.tlogd/forward`: queue the entries as this frontend's own adds and
/// answer each (see `tlogd_core::engine::forward` for the format).
pub async fn take_forwarded<S: LogStorage>(
    log: Log<S>,
    route: ForwardRoute,
    req: Request,
) -> Response {
    let label = log.config().name.clone();
    let refused = |status: StatusCode, o: &'static str, msg: String| {
        metrics::counter!("tlogd_forward_requests_total", "log" => label.clone(), "outcome" => o)
            .increment(1);
        text(status, msg)
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
    let max_bytes = route.max_entries.saturating_mul(MAX_ENTRY_SIZE + 4);
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
    (
        StatusCode::OK,
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/octet-stream"),
        )],
        encode_outcomes(&outcomes),
    )
        .into_response()
}
