//! The public HTTP API: `POST /add` and the tlog-tiles read paths.

use std::sync::Arc;
use std::time::Instant;

use axum::Router;
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{DefaultBodyLimit, Path, Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use tlogd_core::bundle::MAX_ENTRY_SIZE;
use tlogd_core::engine::{AddError, Log, LogStorage};
use tlogd_core::tile::{TileId, TileKind};

use crate::auth::{Verdict, WriteTokens};

/// Response header marking an add answered from the dedup index.
pub const DUPLICATE_HEADER: &str = "x-tlog-duplicate";

const IMMUTABLE: &str = "public, max-age=31536000, immutable";

/// The public router, without write authentication.
pub fn router<S: LogStorage>(log: Log<S>) -> Router {
    router_with_auth(log, None)
}

/// The public router; with `tokens`, `POST /add` needs `Authorization: Bearer <token>`
/// with one of them (401 without, 403 with another), checked before the body is read.
/// Reads stay public.
pub fn router_with_auth<S: LogStorage>(log: Log<S>, tokens: Option<Arc<WriteTokens>>) -> Router {
    let mut add_route = post(add::<S>);
    if let Some(tokens) = tokens.filter(|t| !t.is_empty()) {
        add_route = add_route.route_layer(middleware::from_fn_with_state(tokens, require_token));
    }
    Router::new()
        .route("/add", add_route)
        .route("/checkpoint", get(checkpoint::<S>))
        .route("/tile/{*path}", get(tile::<S>))
        // One byte over the limit is enough to know it is too large.
        .layer(DefaultBodyLimit::max(MAX_ENTRY_SIZE + 1))
        .with_state(log)
}

fn text(status: StatusCode, msg: impl Into<String>) -> Response {
    let mut body = msg.into();
    body.push('\n');
    (
        status,
        [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
        body,
    )
        .into_response()
}

fn outcome(o: &'static str, started: Instant) {
    metrics::counter!("tlogd_add_requests_total", "outcome" => o).increment(1);
    metrics::histogram!("tlogd_add_duration_seconds", "outcome" => o)
        .record(started.elapsed().as_secs_f64());
}

/// RFC 6750 section 3: 401 with a `WWW-Authenticate` challenge when credentials are
/// missing, 403 when they are not accepted. The token is never logged.
async fn require_token(
    State(tokens): State<Arc<WriteTokens>>,
    request: Request,
    next: Next,
) -> Response {
    let started = Instant::now();
    match tokens.check(request.headers().get(header::AUTHORIZATION)) {
        Verdict::Allowed => next.run(request).await,
        Verdict::Missing => {
            outcome("unauthorized", started);
            let mut resp = text(
                StatusCode::UNAUTHORIZED,
                "POST /add needs an Authorization: Bearer token",
            );
            resp.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                HeaderValue::from_static("Bearer realm=\"tlogd\""),
            );
            resp
        }
        Verdict::Wrong => {
            outcome("forbidden", started);
            text(StatusCode::FORBIDDEN, "the bearer token is not accepted")
        }
    }
}

async fn add<S: LogStorage>(
    State(log): State<Log<S>>,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let started = Instant::now();
    let body = match body {
        Ok(b) => b,
        Err(r) if r.status() == StatusCode::PAYLOAD_TOO_LARGE => {
            outcome("too_large", started);
            return text(
                StatusCode::PAYLOAD_TOO_LARGE,
                format!("entry exceeds {MAX_ENTRY_SIZE} bytes"),
            );
        }
        Err(r) => {
            outcome("bad_request", started);
            return text(StatusCode::BAD_REQUEST, format!("cannot read body: {r}"));
        }
    };
    match log.add(body).await {
        Ok(o) => {
            let mut headers = HeaderMap::new();
            headers.insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static("text/plain; charset=utf-8"),
            );
            if o.duplicate {
                headers.insert(DUPLICATE_HEADER, HeaderValue::from_static("true"));
                outcome("duplicate", started);
            } else {
                outcome("ok", started);
            }
            (StatusCode::OK, headers, o.index.to_string()).into_response()
        }
        Err(e) => {
            let (status, o) = match &e {
                AddError::Empty => (StatusCode::BAD_REQUEST, "bad_request"),
                AddError::TooLarge(_) => (StatusCode::PAYLOAD_TOO_LARGE, "too_large"),
                e if e.is_pushback() => (StatusCode::SERVICE_UNAVAILABLE, "pushback"),
                _ => (StatusCode::INTERNAL_SERVER_ERROR, "error"),
            };
            outcome(o, started);
            let mut resp = text(status, e.to_string());
            if status == StatusCode::SERVICE_UNAVAILABLE {
                let secs = log.config().retry_after.as_secs().max(1);
                resp.headers_mut()
                    .insert(header::RETRY_AFTER, HeaderValue::from(secs));
            }
            resp
        }
    }
}

fn read_metric(kind: &'static str, status: StatusCode) {
    metrics::counter!("tlogd_read_requests_total", "kind" => kind, "status" => status.as_str().to_owned())
        .increment(1);
}

async fn checkpoint<S: LogStorage>(State(log): State<Log<S>>) -> Response {
    match log.storage().read_checkpoint().await {
        Ok(Some(b)) => {
            read_metric("checkpoint", StatusCode::OK);
            (
                [
                    (header::CONTENT_TYPE, "text/plain; charset=utf-8"),
                    (header::CACHE_CONTROL, "no-cache"),
                ],
                b,
            )
                .into_response()
        }
        Ok(None) => {
            read_metric("checkpoint", StatusCode::NOT_FOUND);
            text(StatusCode::NOT_FOUND, "no checkpoint published yet")
        }
        Err(e) => {
            read_metric("checkpoint", StatusCode::INTERNAL_SERVER_ERROR);
            tracing::error!(error = %e, "reading checkpoint");
            text(StatusCode::INTERNAL_SERVER_ERROR, "cannot read checkpoint")
        }
    }
}

async fn tile<S: LogStorage>(State(log): State<Log<S>>, Path(rest): Path<String>) -> Response {
    let path = format!("tile/{rest}");
    let id = match TileId::parse(&path) {
        Ok(id) => id,
        Err(e) => {
            read_metric("invalid", StatusCode::BAD_REQUEST);
            return text(StatusCode::BAD_REQUEST, format!("malformed tile path: {e}"));
        }
    };
    let (kind, available) = match id.kind {
        TileKind::Entries => ("entries", log.committed_size()),
        TileKind::Hash { level } => (
            "tile",
            log.committed_size()
                .checked_shr(8 * level as u32)
                .unwrap_or(0),
        ),
    };
    // Only serve what a committed tree contains: files of a batch that was written but
    // never committed (before a crash) must not be cached forever by readers.
    let end = id.index.saturating_mul(256).saturating_add(id.width as u64);
    if end > available && !log.storage().reads_are_committed() {
        read_metric(kind, StatusCode::NOT_FOUND);
        return text(StatusCode::NOT_FOUND, format!("{path} not found"));
    }
    match log.storage().read_tile(&id).await {
        Ok(Some(b)) => {
            read_metric(kind, StatusCode::OK);
            (
                [
                    (header::CONTENT_TYPE, "application/octet-stream"),
                    (header::CACHE_CONTROL, IMMUTABLE),
                ],
                b,
            )
                .into_response()
        }
        Ok(None) => {
            read_metric(kind, StatusCode::NOT_FOUND);
            text(StatusCode::NOT_FOUND, format!("{path} not found"))
        }
        Err(e) => {
            read_metric(kind, StatusCode::INTERNAL_SERVER_ERROR);
            tracing::error!(error = %e, %path, "reading tile");
            text(StatusCode::INTERNAL_SERVER_ERROR, "cannot read tile")
        }
    }
}
