//! The public HTTP API: `POST /add` and the tlog-tiles read paths.
//!
//! Every answer other than a success is one line of text. A `500` never carries the
//! backend's error text (it may name hosts, paths or the database): the client gets a
//! reference that appears in the server log next to the detail.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use http_body_util::{BodyExt, LengthLimitError, Limited};
use sha2::{Digest, Sha256};
use tlogd_core::bundle::MAX_ENTRY_SIZE;
use tlogd_core::engine::{AddError, Log, LogStorage};
use tlogd_core::tile::{TileId, TileKind};

use crate::auth::{Verdict, WriteTokens};

/// Response header marking an add answered from the dedup index.
pub const DUPLICATE_HEADER: &str = "x-tlog-duplicate";

const IMMUTABLE: &str = "public, max-age=31536000, immutable";

/// How the public router treats requests.
#[derive(Clone, Debug)]
pub struct HttpOptions {
    /// With tokens, `POST /add` needs `Authorization: Bearer <token>` with one of them
    /// (401 without, 403 with another), checked before the body is read.
    pub tokens: Option<Arc<WriteTokens>>,
    /// `POST /add`: the whole body must arrive within this once the headers have, or
    /// the client gets `408` and the connection is closed (a slowloris body).
    pub body_read_timeout: Duration,
    /// Tile and bundle reads from storage at once; more wait (see
    /// `storage_read_queue_timeout`). Reads of paths beyond the tree and of the
    /// checkpoint never reach storage per request, so this bounds what readers can take
    /// from the connections (database pool, object store client) commits need.
    pub max_storage_reads: usize,
    /// How long a read waits for its turn before it is answered `503` with
    /// `Retry-After`.
    pub storage_read_queue_timeout: Duration,
    /// Take batches other frontends forward (`POST /.tlogd/forward`), with their token.
    pub forward: Option<crate::forward::ForwardRoute>,
    /// A Certificate Transparency log: its submission routes replace `POST /add`
    /// (whose raw entries would skip chain validation).
    pub ct: Option<Arc<crate::ct::CtLog>>,
    /// A CT log's shard metadata: `GET /log.v3.json`.
    pub ct_shard: Option<Arc<crate::ct_shard::CtShard>>,
}

impl Default for HttpOptions {
    fn default() -> Self {
        let c = crate::config::HttpConfig::default();
        HttpOptions {
            tokens: None,
            body_read_timeout: Duration::from_millis(c.body_read_timeout_ms),
            max_storage_reads: c.max_storage_reads,
            storage_read_queue_timeout: Duration::from_millis(c.storage_read_queue_timeout_ms),
            forward: None,
            ct: None,
            ct_shard: None,
        }
    }
}

/// What the read handlers share: the log, and the turns to read its storage.
struct Reads<S: LogStorage> {
    log: Log<S>,
    turns: tokio::sync::Semaphore,
    queue_timeout: Duration,
}

/// The public router, without write authentication.
pub fn router<S: LogStorage>(log: Log<S>) -> Router {
    router_with(log, &HttpOptions::default())
}

/// The public router; with `tokens`, `POST /add` needs `Authorization: Bearer <token>`
/// with one of them (401 without, 403 with another), checked before the body is read.
/// Reads stay public.
pub fn router_with_auth<S: LogStorage>(log: Log<S>, tokens: Option<Arc<WriteTokens>>) -> Router {
    router_with(
        log,
        &HttpOptions {
            tokens,
            ..HttpOptions::default()
        },
    )
}

/// The public router with `opts`.
pub fn router_with<S: LogStorage>(log: Log<S>, opts: &HttpOptions) -> Router {
    let timeout = opts.body_read_timeout;
    let label = log.config().name.clone();
    let done = Arc::new(AddMetrics::new(&label));
    let mut add_route =
        post(move |State(log): State<Log<S>>, req: Request| add(log, req, timeout, done.clone()));
    if let Some(tokens) = opts.tokens.clone().filter(|t| !t.is_empty()) {
        add_route = add_route.route_layer(middleware::from_fn_with_state(
            (tokens, label.clone()),
            require_token,
        ));
    }
    let reads = Arc::new(Reads {
        log: log.clone(),
        turns: tokio::sync::Semaphore::new(
            opts.max_storage_reads
                .clamp(1, tokio::sync::Semaphore::MAX_PERMITS),
        ),
        queue_timeout: opts.storage_read_queue_timeout,
    });
    let read_routes = Router::new()
        .route("/checkpoint", get(checkpoint::<S>))
        .route("/tile/{*path}", get(tile::<S>))
        .with_state(reads);
    let mut writes = match &opts.ct {
        None => Router::new().route("/add", add_route),
        Some(_) => Router::new(),
    };
    if let Some(route) = opts.forward.clone() {
        writes = writes.route(
            &format!("/{}", crate::forward::FORWARD_PATH),
            post(move |State(log): State<Log<S>>, req: Request| {
                crate::forward::take_forwarded(log, route.clone(), req)
            }),
        );
    }
    let mut routes = writes.with_state(log.clone()).merge(read_routes);
    if let Some(shard) = &opts.ct_shard {
        routes = routes.merge(crate::ct_shard::routes(log.clone(), shard.clone()));
    }
    if let Some(ct) = &opts.ct {
        let mut submissions = crate::ct::submission_routes(log.clone(), ct.clone());
        if let Some(tokens) = opts.tokens.clone().filter(|t| !t.is_empty()) {
            submissions = submissions.route_layer(middleware::from_fn_with_state(
                (tokens, label.clone()),
                require_token,
            ));
        }
        routes = routes
            .merge(submissions)
            .merge(crate::ct::read_routes(log, ct.clone()));
    }
    routes
        .fallback(move |req: Request| not_found(req, label.clone()))
        .method_not_allowed_fallback(method_not_allowed)
}

async fn not_found(req: Request, log: String) -> Response {
    read_metric("other", StatusCode::NOT_FOUND, &log);
    text(
        StatusCode::NOT_FOUND,
        format!("{} not found", printable(req.uri().path())),
    )
}

async fn method_not_allowed(method: Method, req: Request) -> Response {
    let allowed = if req.uri().path() == "/add" {
        "POST"
    } else {
        "GET"
    };
    let mut resp = text(
        StatusCode::METHOD_NOT_ALLOWED,
        format!("{method} is not allowed here (use {allowed})"),
    );
    resp.headers_mut()
        .insert(header::ALLOW, HeaderValue::from_static(allowed));
    resp
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

/// At most 200 printable ASCII characters of client input, for echoing it in a
/// one-line answer.
fn printable(s: &str) -> String {
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

/// The metrics of the two outcomes nearly every add ends with, registered once: the
/// `counter!`/`histogram!` macros hash their key and look it up in the recorder's
/// registry on every call.
struct AddMetrics {
    ok: (metrics::Counter, metrics::Histogram),
    duplicate: (metrics::Counter, metrics::Histogram),
}

impl AddMetrics {
    fn new(log: &str) -> Self {
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

fn outcome(o: &'static str, started: Instant, log: &str) {
    metrics::counter!("tlogd_add_requests_total", "log" => log.to_string(), "outcome" => o)
        .increment(1);
    metrics::histogram!("tlogd_add_duration_seconds", "log" => log.to_string(), "outcome" => o)
        .record(started.elapsed().as_secs_f64());
}

/// RFC 6750 section 3: 401 with a `WWW-Authenticate` challenge when credentials are
/// missing, 403 when they are not accepted. The token is never logged.
async fn require_token(
    State((tokens, log)): State<(Arc<WriteTokens>, String)>,
    request: Request,
    next: Next,
) -> Response {
    let started = Instant::now();
    match tokens.check(request.headers().get(header::AUTHORIZATION)) {
        Verdict::Allowed => next.run(request).await,
        Verdict::Missing => {
            outcome("unauthorized", started, &log);
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
            outcome("forbidden", started, &log);
            text(StatusCode::FORBIDDEN, "the bearer token is not accepted")
        }
    }
}

/// Oversized add bodies up to this many bytes are read and dropped before the 413
/// (see [`read_entry`]).
const DRAIN_LIMIT: u64 = 1 << 20;

/// Read an add's body: at most [`MAX_ENTRY_SIZE`] bytes (one more is enough to know it
/// is too large), within `timeout`.
async fn read_entry(headers: &HeaderMap, body: Body, timeout: Duration) -> Result<Bytes, Response> {
    // Copied out: the entry is held until its batch commits (see `read_body`).
    read_body(headers, body, timeout, MAX_ENTRY_SIZE, "entry")
        .await
        .map(|b| Bytes::copy_from_slice(&b))
}

/// Read a request body of at most `max` bytes (`what`, in the `413`'s words) within
/// `timeout`; otherwise the one-line answer to send.
///
/// The bytes are usually a slice of the connection's read buffer (8 KiB or more), as
/// hyper hands a body over: a caller that holds them long (an entry, until its batch
/// commits) copies them out, or every queued entry would pin a whole buffer (the
/// queue's byte limit counting a small fraction of it) and hyper would allocate a
/// fresh one for the connection's next request. One parsed and dropped at once (a CT
/// chain) need not be.
pub(crate) async fn read_body(
    headers: &HeaderMap,
    body: Body,
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
    let limited = Limited::new(body, max + 1);
    match tokio::time::timeout(timeout, limited.collect()).await {
        Ok(Ok(collected)) => Ok(collected.to_bytes()),
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
        Ok(Err(e)) if e.downcast_ref::<LengthLimitError>().is_some() => Err(too_large()),
        Ok(Err(e)) => Err(text(
            StatusCode::BAD_REQUEST,
            format!("cannot read the request body: {e}"),
        )),
    }
}

async fn add<S: LogStorage>(
    log: Log<S>,
    req: Request,
    timeout: Duration,
    done: Arc<AddMetrics>,
) -> Response {
    let started = Instant::now();
    let (parts, body) = req.into_parts();
    let body = match read_entry(&parts.headers, body, timeout).await {
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
            let mut headers = HeaderMap::new();
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
            (StatusCode::OK, headers, o.index.to_string()).into_response()
        }
        Err(e) => {
            let (resp, o) = add_refused(&e, log.config().retry_after, "POST /add");
            outcome(o, started, &log.config().name);
            resp
        }
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
    let reference = crate::ct::hex(&digest[..4]);
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

async fn checkpoint<S: LogStorage>(State(reads): State<Arc<Reads<S>>>) -> Response {
    // From memory (engine::latest): a flood of these never reaches storage.
    match reads.log.latest_checkpoint().await {
        Ok(Some(b)) => {
            read_metric("checkpoint", StatusCode::OK, &reads.log.config().name);
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
fn not_yet(mut resp: Response) -> Response {
    resp.headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    resp
}

async fn tile<S: LogStorage>(State(reads): State<Arc<Reads<S>>>, req: Request) -> Response {
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
    let turn = match tokio::time::timeout(reads.queue_timeout, reads.turns.acquire()).await {
        Ok(Ok(turn)) => turn,
        _ => {
            read_metric(
                kind,
                StatusCode::SERVICE_UNAVAILABLE,
                &reads.log.config().name,
            );
            metrics::counter!("tlogd_storage_reads_shed_total", "log" => reads.log.config().name.clone())
                .increment(1);
            let mut resp = text(
                StatusCode::SERVICE_UNAVAILABLE,
                "too many reads in progress; retry later",
            );
            resp.headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
            return resp;
        }
    };
    let read = log.storage().read_public_tile(&id).await;
    drop(turn);
    match read {
        Ok(Some(b)) if id.kind == TileKind::Data && accepts_gzip(req.headers()) => {
            read_metric(kind, StatusCode::OK, &reads.log.config().name);
            // static-ct-api "Log entries": data tiles SHOULD be served compressed;
            // certificates compress to about half.
            let gzipped = tokio::task::spawn_blocking(move || gzip(&b)).await;
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
    }
}
