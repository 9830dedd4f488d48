//! The tlog-tiles route family: `POST /add` and the read paths (`checkpoint`,
//! `tile/...`), as tlog-tiles names them.

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use tlogd_core::bundle::MAX_ENTRY_SIZE;
use tlogd_core::engine::{Log, LogStorage};
use tlogd_core::tile::{TileId, TileKind};

use crate::answer::{
    DUPLICATE_HEADER, add_refused, internal_error, printable, read_body, read_metric, text,
};
use crate::client::Client;

use crate::routes::cache::{self, IMMUTABLE, REVALIDATE};

/// What the read handlers share: the log, and the turns to read its storage.
pub(crate) struct Reads<S: LogStorage> {
    pub(crate) log: Log<S>,
    pub(crate) turns: tokio::sync::Semaphore,
    pub(crate) queue_timeout: Duration,
}

impl<S: LogStorage> Reads<S> {
    /// A turn to read storage, waited for at most `queue_timeout`; else the `503`
    /// to answer (counted under `kind`).
    pub(crate) async fn turn(
        &self,
        kind: &'static str,
    ) -> Result<tokio::sync::SemaphorePermit<'_>, Response> {
        match tokio::time::timeout(self.queue_timeout, self.turns.acquire()).await {
            Ok(Ok(turn)) => Ok(turn),
            _ => {
                read_metric(
                    kind,
                    StatusCode::SERVICE_UNAVAILABLE,
                    &self.log.config().name,
                );
                metrics::counter!("tlogd_storage_reads_shed_total", "log" => self.log.config().name.clone())
                    .increment(1);
                let mut resp = text(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "too many reads in progress; retry later",
                );
                resp.headers_mut()
                    .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
                Err(resp)
            }
        }
    }
}

/// Whether the request's `Accept-Encoding` takes gzip (not with `q=0`).
fn accepts_gzip(headers: &HeaderMap) -> bool {
    headers
        .get_all(header::ACCEPT_ENCODING)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|coding| {
            let mut parts = coding.split(';').map(str::trim);
            let name = parts.next().unwrap_or_default();
            let refused = parts.any(|p| {
                p.strip_prefix("q=")
                    .and_then(|q| q.parse::<f32>().ok())
                    .is_some_and(|q| q == 0.0)
            });
            (name.eq_ignore_ascii_case("gzip") || name == "*") && !refused
        })
}

/// `bytes` gzip-compressed (fast: a data tile is compressed per request).
fn gzip(bytes: &[u8]) -> std::io::Result<Vec<u8>> {
    use std::io::Write;
    let mut z = flate2::write::GzEncoder::new(
        Vec::with_capacity(bytes.len() / 2),
        flate2::Compression::fast(),
    );
    z.write_all(bytes)?;
    z.finish()
}

/// The metrics of the two outcomes nearly every add ends with, registered once: the
/// `counter!`/`histogram!` macros hash their key and look it up in the recorder's
/// registry on every call.
pub(crate) struct AddMetrics {
    ok: (metrics::Counter, metrics::Histogram),
    duplicate: (metrics::Counter, metrics::Histogram),
}

impl AddMetrics {
    pub(crate) fn new(log: &str) -> Self {
        let pair = |o: &'static str| {
            (
                metrics::counter!("tlogd_add_requests_total", "log" => log.to_string(), "outcome" => o),
                metrics::histogram!("tlogd_add_duration_seconds", "log" => log.to_string(), "outcome" => o),
            )
        };
        AddMetrics {
            ok: pair("ok"),
            duplicate: pair("duplicate"),
        }
    }
}

pub(crate) fn outcome(o: &'static str, started: Instant, log: &str) {
    metrics::counter!("tlogd_add_requests_total", "log" => log.to_string(), "outcome" => o)
        .increment(1);
    metrics::histogram!("tlogd_add_duration_seconds", "log" => log.to_string(), "outcome" => o)
        .record(started.elapsed().as_secs_f64());
}

/// Read an add's body: at most [`MAX_ENTRY_SIZE`] bytes (one more is enough to know it
/// is too large), within `timeout`.
async fn read_entry(
    headers: &HeaderMap,
    body: Body,
    client: Option<&Client>,
    timeout: Duration,
) -> Result<Bytes, Response> {
    // Copied out: the entry is held until its batch commits (see `read_body`).
    read_body(headers, body, client, timeout, MAX_ENTRY_SIZE, "entry")
        .await
        .map(|b| Bytes::copy_from_slice(&b))
}

pub(crate) async fn add<S: LogStorage>(
    log: Log<S>,
    req: Request,
    timeout: Duration,
    done: Arc<AddMetrics>,
) -> Response {
    let started = Instant::now();
    let (parts, body) = req.into_parts();
    let read = read_entry(
        &parts.headers,
        body,
        parts.extensions.get::<Client>(),
        timeout,
    )
    .await;
    // The request's head (headers whose values share the connection's read buffer,
    // the URI, the extensions map) goes now, while its memory is warm. Held across
    // the commit's wait below, milliseconds in which hundreds of other connections
    // are served, it was freed cold: `drop_in_place<Parts>` took 2.5 % of the
    // daemon's CPU at 512 writers over HTTP/1.1 (benches/results/history.md,
    // 2026-11-29 evening).
    drop(parts);
    let body = match read {
        Ok(b) => b,
        Err(resp) => {
            outcome(
                match resp.status() {
                    StatusCode::PAYLOAD_TOO_LARGE => "too_large",
                    StatusCode::REQUEST_TIMEOUT => "timeout",
                    _ => "bad_request",
                },
                started,
                &log.config().name,
            );
            return resp;
        }
    };
    match log.add(body).await {
        Ok(o) => {
            // Built in place: a header map of its own merged into the response's would
            // cost two more allocations on every add.
            let mut resp = Response::new(Body::from(o.index.to_string()));
            let headers = resp.headers_mut();
            headers.insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static("text/plain; charset=utf-8"),
            );
            let (count, took) = if o.duplicate {
                headers.insert(DUPLICATE_HEADER, HeaderValue::from_static("true"));
                &done.duplicate
            } else {
                &done.ok
            };
            count.increment(1);
            took.record(started.elapsed().as_secs_f64());
            resp
        }
        Err(e) => {
            let (resp, o) = add_refused(&e, log.config().retry_after, "POST /add");
            outcome(o, started, &log.config().name);
            resp
        }
    }
}

pub(crate) async fn checkpoint<S: LogStorage>(
    State(reads): State<Arc<Reads<S>>>,
    headers: HeaderMap,
) -> Response {
    // From memory (engine::latest): a flood of these never reaches storage.
    match reads.log.latest_checkpoint().await {
        Ok(Some(b)) => {
            let etag = cache::content_etag(&b);
            if cache::holds(&headers, &etag) {
                read_metric(
                    "checkpoint",
                    StatusCode::NOT_MODIFIED,
                    &reads.log.config().name,
                );
                return cache::not_modified(etag, REVALIDATE, false);
            }
            read_metric("checkpoint", StatusCode::OK, &reads.log.config().name);
            (
                [
                    (
                        header::CONTENT_TYPE,
                        HeaderValue::from_static("text/plain; charset=utf-8"),
                    ),
                    (header::CACHE_CONTROL, HeaderValue::from_static(REVALIDATE)),
                    (header::ETAG, etag),
                ],
                b,
            )
                .into_response()
        }
        Ok(None) => {
            read_metric(
                "checkpoint",
                StatusCode::NOT_FOUND,
                &reads.log.config().name,
            );
            not_yet(text(StatusCode::NOT_FOUND, "no checkpoint published yet"))
        }
        Err(e) => {
            read_metric(
                "checkpoint",
                StatusCode::INTERNAL_SERVER_ERROR,
                &reads.log.config().name,
            );
            internal_error("GET /checkpoint", &e)
        }
    }
}

/// A 404 for something that may exist a moment later (a path beyond the tree, which
/// another frontend may be committing; the first checkpoint): no cache may keep it.
pub(crate) fn not_yet(mut resp: Response) -> Response {
    resp.headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    resp
}

pub(crate) async fn tile<S: LogStorage>(
    State(reads): State<Arc<Reads<S>>>,
    req: Request,
) -> Response {
    let arrival = Instant::now();
    let log = &reads.log;
    // The path as sent, not percent-decoded: tlog-tiles paths are plain ASCII, and
    // `tile/0/%30%30%30` or `tile/%2e%2e/x` are not paths of this log.
    let path = req
        .uri()
        .path()
        .strip_prefix('/')
        .unwrap_or_default()
        .to_string();
    let id = match TileId::parse(&path) {
        Ok(id) => id,
        Err(e) => {
            read_metric("invalid", StatusCode::BAD_REQUEST, &reads.log.config().name);
            return text(
                StatusCode::BAD_REQUEST,
                format!("malformed tile path {}: {e}", printable(&path)),
            );
        }
    };
    let kind = match id.kind {
        TileKind::Entries => "entries",
        TileKind::Data => "data",
        TileKind::Hash { .. } => "tile",
    };
    // A log bundles its entries one way (tlog-tiles `entries`, static-ct-api `data`):
    // the other kind's paths are not this log's.
    if id.kind.is_bundle() && id.kind != log.config().personality.bundle_kind() {
        read_metric(kind, StatusCode::NOT_FOUND, &reads.log.config().name);
        return text(StatusCode::NOT_FOUND, format!("{path} not found"));
    }
    // Only serve what a tree known to be committed contains, and look nothing else up:
    // files of a batch written but never committed (before a crash) must not be cached
    // forever by readers, and a flood of paths beyond the tree must cost no tile reads.
    // With a shared store the checkpoint in hand may be a moment behind one another
    // frontend just published (and a reader may have it): it is re-read first, by one
    // read shared with every request waiting, at most ten a second. There, a full tile
    // whose partial the tree names is looked up too: once another frontend completed
    // it, its partials are deleted and readers fall back to it (tlog-tiles "Partial
    // Tiles"), possibly before any checkpoint covers it.
    let start = id.index.saturating_mul(256);
    let end = start.saturating_add(id.width as u64);
    let at_level = |size: u64| match id.kind {
        TileKind::Entries | TileKind::Data => size,
        TileKind::Hash { level } => size.checked_shr(8 * u32::from(level)).unwrap_or(0),
    };
    let served = |size: u64| {
        let size = at_level(size);
        end <= size || (log.storage().reads_are_committed() && id.is_full() && start < size)
    };
    if !served(log.known_size()) && !served(log.known_size_since(arrival).await) {
        read_metric(kind, StatusCode::NOT_FOUND, &reads.log.config().name);
        return not_yet(text(StatusCode::NOT_FOUND, format!("{path} not found")));
    }
    // Data tiles are served gzipped to whoever takes it (below): another
    // representation, with its own tag.
    let gzipped = id.kind == TileKind::Data && accepts_gzip(req.headers());
    let etag = cache::immutable_etag(&path, gzipped);
    if let Some(etag) = &etag
        && cache::holds(req.headers(), etag)
    {
        read_metric(kind, StatusCode::NOT_MODIFIED, &reads.log.config().name);
        return cache::not_modified(etag.clone(), IMMUTABLE, id.kind == TileKind::Data);
    }
    let turn = match reads.turn(kind).await {
        Ok(turn) => turn,
        Err(resp) => return resp,
    };
    let read = log.storage().read_public_tile(&id).await;
    let mut resp = match read {
        Ok(Some(b)) if gzipped => {
            read_metric(kind, StatusCode::OK, &reads.log.config().name);
            // static-ct-api "Log entries": data tiles SHOULD be served compressed;
            // certificates compress to about half. Within the read's turn (#62): a
            // flood of data tile reads compresses no more at once than it reads.
            let gzipped = tokio::task::spawn_blocking(move || gzip(&b)).await;
            drop(turn);
            match gzipped {
                Ok(Ok(z)) => (
                    [
                        (header::CONTENT_TYPE, "application/octet-stream"),
                        (header::CACHE_CONTROL, IMMUTABLE),
                        (header::CONTENT_ENCODING, "gzip"),
                        (header::VARY, "Accept-Encoding"),
                    ],
                    z,
                )
                    .into_response(),
                Ok(Err(e)) => internal_error(&format!("GET /{path}"), &e),
                Err(e) => internal_error(&format!("GET /{path}"), &e),
            }
        }
        Ok(Some(b)) => {
            read_metric(kind, StatusCode::OK, &reads.log.config().name);
            let mut resp = (
                [
                    (header::CONTENT_TYPE, "application/octet-stream"),
                    (header::CACHE_CONTROL, IMMUTABLE),
                ],
                b,
            )
                .into_response();
            if id.kind == TileKind::Data {
                // Caches must not hand the plain bytes to a client asking for gzip.
                resp.headers_mut()
                    .insert(header::VARY, HeaderValue::from_static("Accept-Encoding"));
            }
            resp
        }
        Ok(None) => {
            read_metric(kind, StatusCode::NOT_FOUND, &reads.log.config().name);
            not_yet(text(StatusCode::NOT_FOUND, format!("{path} not found")))
        }
        Err(e) => {
            read_metric(
                kind,
                StatusCode::INTERNAL_SERVER_ERROR,
                &reads.log.config().name,
            );
            internal_error(&format!("GET /{path}"), &e)
        }
    };
    if let Some(etag) = etag
        && resp.status() == StatusCode::OK
    {
        resp.headers_mut().insert(header::ETAG, etag);
    }
    resp
}
