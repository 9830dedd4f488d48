//! The public router of one log: the route families it serves (tlog-tiles reads and
//! adds, Certificate Transparency, forwarding, a CT shard's `log.v3.json`), write
//! authentication in front of the submissions, and the one-line 404 and 405.

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::Router;
use axum::extract::{Request, State};
use axum::http::{HeaderValue, Method, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::Response;
use axum::routing::{get, post};
use tlogd_core::engine::{Log, LogStorage};

use crate::answer::{printable, read_metric, text};
use crate::auth::{Verdict, WriteTokens};
use crate::routes::tiles::{AddMetrics, Reads, add, checkpoint, outcome, tile};

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
    pub forward: Option<crate::routes::forward::ForwardRoute>,
    /// A Certificate Transparency log: its submission routes replace `POST /add`
    /// (whose raw entries would skip chain validation).
    pub ct: Option<Arc<crate::routes::ct::CtLog>>,
    /// A CT log's shard metadata: `GET /log.v3.json`.
    pub ct_shard: Option<Arc<crate::routes::ct_shard::CtShard>>,
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
    let home = Arc::new(crate::routes::home::Home {
        reads: reads.clone(),
        ct: opts.ct.clone(),
        log_v3: opts.ct_shard.is_some(),
        writes_need_token: opts.tokens.as_ref().is_some_and(|t| !t.is_empty()),
    });
    let read_routes = Router::new()
        .route("/checkpoint", get(checkpoint::<S>))
        .route("/tile/{*path}", get(tile::<S>))
        .with_state(reads.clone())
        .merge(
            Router::new()
                .route("/", get(crate::routes::home::home::<S>))
                .with_state(home),
        );
    let mut writes = match &opts.ct {
        None => Router::new().route("/add", add_route),
        Some(_) => Router::new(),
    };
    if let Some(route) = opts.forward.clone() {
        writes = writes.route(
            &format!("/{}", crate::routes::forward::FORWARD_PATH),
            post(move |State(log): State<Log<S>>, req: Request| {
                crate::routes::forward::take_forwarded(log, route.clone(), req)
            }),
        );
    }
    let mut routes = writes.with_state(log.clone()).merge(read_routes);
    if let Some(shard) = &opts.ct_shard {
        routes = routes.merge(crate::routes::ct_shard::routes(log.clone(), shard.clone()));
    }
    if let Some(ct) = &opts.ct {
        let mut submissions = crate::routes::ct::submission_routes(log.clone(), ct.clone());
        if let Some(tokens) = opts.tokens.clone().filter(|t| !t.is_empty()) {
            submissions = submissions.route_layer(middleware::from_fn_with_state(
                (tokens, label.clone()),
                require_token,
            ));
        }
        routes = routes
            .merge(submissions)
            .merge(crate::routes::ct::read_routes(reads, ct.clone()));
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
