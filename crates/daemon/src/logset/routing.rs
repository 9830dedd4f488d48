//! Several logs on one listener: each under its own path prefix (`/<name>/...`), and
//! optionally at `/` for its own host name. Every log keeps its own router (built by
//! [`crate::serve::router::router_with`] while its storage type is known); this only picks one
//! and hands it the request with the prefix taken off. A daemon of one log at `/`
//! (a single-log file) serves that log's router directly, as before.

use std::collections::HashMap;
use std::sync::Arc;

use axum::Router;
use axum::extract::Request;
use axum::http::{HeaderValue, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use tower_service::Service;

/// One log's public routes.
pub struct LogRoutes {
    /// The path prefix (`""`: the log is served at `/`).
    pub name: String,
    /// A host name whose requests go to this log at `/`.
    pub host: Option<String>,
    /// The log's router (`/add`, `/checkpoint`, `/tile/...`).
    pub router: Router,
    /// The log's origin, for the page listing the logs.
    pub origin: String,
}

struct Table {
    by_name: HashMap<String, Router>,
    by_host: HashMap<String, Router>,
    /// `(name, origin)` of each log, for the page at `/` (routes::home).
    listing: Vec<(String, String)>,
}

/// The public router of every log.
pub fn public_router(mut logs: Vec<LogRoutes>) -> Router {
    if logs.len() == 1 && logs[0].name.is_empty() && logs[0].host.is_none() {
        return logs.remove(0).router;
    }
    let mut table = Table {
        by_name: HashMap::new(),
        by_host: HashMap::new(),
        listing: Vec::new(),
    };
    for l in logs {
        table.listing.push((l.name.clone(), l.origin.clone()));
        if let Some(h) = l.host {
            table
                .by_host
                .insert(h.to_ascii_lowercase(), l.router.clone());
        }
        table.by_name.insert(l.name, l.router);
    }
    let table = Arc::new(table);
    Router::new().fallback(move |req: Request| dispatch(table.clone(), req))
}

/// The host a request names (HTTP/2 `:authority`, else `Host`), lowercase, without
/// its port.
fn host_of(req: &Request) -> Option<String> {
    let host = match req.uri().authority() {
        Some(a) => a.host().to_string(),
        None => {
            let h = req.headers().get(header::HOST)?.to_str().ok()?;
            match h.strip_prefix('[') {
                Some(v6) => v6.split(']').next()?.to_string(),
                None => h.split(':').next()?.to_string(),
            }
        }
    };
    Some(host.to_ascii_lowercase())
}

async fn dispatch(table: Arc<Table>, mut req: Request) -> Response {
    if !table.by_host.is_empty()
        && let Some(router) = host_of(&req).and_then(|h| table.by_host.get(&h))
    {
        return serve(router, req).await;
    }
    let path = req.uri().path();
    let rest = path.strip_prefix('/').unwrap_or(path);
    let html = crate::routes::home::wants_html(req.headers());
    // A browser at `/` gets the list of the logs (routes::home).
    if rest.is_empty() && html && !table.by_name.contains_key("") {
        return crate::routes::home::listing(&table.listing);
    }
    let (name, tail) = rest.split_once('/').unwrap_or((rest, ""));
    let Some(router) = table.by_name.get(name) else {
        return not_found(name);
    };
    // A browser at `/<name>` goes to `/<name>/`, where the page's relative links work.
    if html && !name.is_empty() && !rest.contains('/') {
        let mut resp = StatusCode::PERMANENT_REDIRECT.into_response();
        if let Ok(to) = HeaderValue::from_str(&format!("/{name}/")) {
            resp.headers_mut().insert(header::LOCATION, to);
        }
        return resp;
    }
    let rewritten = match req.uri().query() {
        Some(q) => format!("/{tail}?{q}"),
        None => format!("/{tail}"),
    };
    match rewritten.parse::<Uri>() {
        Ok(uri) => *req.uri_mut() = uri,
        Err(_) => return not_found(name),
    }
    serve(router, req).await
}

async fn serve(router: &Router, req: Request) -> Response {
    let mut router = router.clone();
    match router.call(req).await {
        Ok(resp) => resp,
        Err(never) => match never {},
    }
}

fn not_found(name: &str) -> Response {
    let shown: String = name
        .chars()
        .take(64)
        .map(|c| if c.is_ascii_graphic() { c } else { '?' })
        .collect();
    (
        StatusCode::NOT_FOUND,
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("text/plain; charset=utf-8"),
        )],
        format!("no log is named {shown:?} here\n"),
    )
        .into_response()
}
