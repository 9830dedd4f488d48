//! Observability: logging, the Prometheus recorder, `/metrics`, `/healthz`, `/readyz`.

use anyhow::Context;
use axum::Router;
use axum::extract::{Path, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};
use std::sync::Arc;

use tlogd_core::engine::ServedLog;
use tracing_subscriber::EnvFilter;

use crate::config::LogFormatConfig;

/// Text or JSON logs; `RUST_LOG` overrides the configured level.
pub fn init_logging(c: &LogFormatConfig) -> anyhow::Result<()> {
    let filter = match std::env::var("RUST_LOG") {
        Ok(f) if !f.is_empty() => EnvFilter::try_new(f).context("parsing RUST_LOG")?,
        _ => {
            EnvFilter::try_new(&c.level).with_context(|| format!("`log.level` = {:?}", c.level))?
        }
    };
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    if c.format == "json" {
        builder.json().init();
    } else {
        builder.init();
    }
    Ok(())
}

const LATENCY_BUCKETS: &[f64] = &[
    0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0,
];
const BATCH_BUCKETS: &[f64] = &[1.0, 4.0, 16.0, 64.0, 256.0, 1024.0, 4096.0, 16384.0];

/// Install the global Prometheus recorder (metrics are prefixed `tlogd_`).
pub fn install_metrics() -> anyhow::Result<PrometheusHandle> {
    let handle = PrometheusBuilder::new()
        .set_buckets_for_metric(Matcher::Suffix("_seconds".into()), LATENCY_BUCKETS)?
        .set_buckets_for_metric(Matcher::Full("tlogd_batch_size".into()), BATCH_BUCKETS)?
        .install_recorder()
        .context("installing the metrics recorder")?;
    metrics::gauge!("tlogd_build_info", "version" => env!("CARGO_PKG_VERSION")).set(1.0);
    Ok(handle)
}

struct Ops {
    logs: Vec<Arc<dyn ServedLog>>,
    metrics: PrometheusHandle,
}

/// The operator router: `/metrics`, `/healthz`, `/readyz` (every log), and with
/// several logs `/readyz/<name>` (one log: a load balancer in front of one log's host
/// asks about that log only, so one log's failing store does not pull the others).
pub fn router(logs: Vec<Arc<dyn ServedLog>>, metrics: PrometheusHandle) -> Router {
    Router::new()
        .route("/metrics", get(render))
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(ready_all))
        .route("/readyz/{name}", get(ready_one))
        .with_state(Arc::new(Ops { logs, metrics }))
}

async fn render(State(ops): State<Arc<Ops>>) -> Response {
    // Gauges that are cheaper to sample at scrape time than to keep updated.
    for log in &ops.logs {
        let name = log.name().to_string();
        metrics::gauge!("tlogd_queue_depth", "log" => name.clone()).set(log.queue_depth() as f64);
        metrics::gauge!("tlogd_dedup_lag", "log" => name).set(log.dedup_lag() as f64);
    }
    (
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        ops.metrics.render(),
    )
        .into_response()
}

/// One log's readiness: `Ok` with a note, or why not. The answer carries no backend
/// detail (paths, hosts, database errors): whoever can reach it learns only that
/// storage refuses writes. The detail goes to the daemon's log.
async fn readiness(log: &dyn ServedLog) -> Result<&'static str, &'static str> {
    if !log.is_ready() {
        return Err("not ready: the tree could not be reloaded from storage");
    }
    match log.check_writable().await {
        Ok(()) if log.is_frozen() => Ok("ready (frozen: serves reads, accepts no entries)"),
        Ok(()) => Ok("ready"),
        Err(e) => {
            tracing::warn!(log = log.name(), error = %e, "not ready: storage cannot take writes");
            Err("not ready: storage cannot take writes (the daemon's log says why)")
        }
    }
}

fn answer(ready: bool, body: String) -> Response {
    let status = match ready {
        true => StatusCode::OK,
        false => StatusCode::SERVICE_UNAVAILABLE,
    };
    (status, body).into_response()
}

/// Every log: `200` when all are ready, else `503`; a line per log (a single log of a
/// single-log file: just its answer, as before several logs).
async fn ready_all(State(ops): State<Arc<Ops>>) -> Response {
    if let [log] = &ops.logs[..]
        && log.name() == crate::config::DEFAULT_LOG_NAME
    {
        let r = readiness(&**log).await;
        return answer(r.is_ok(), format!("{}\n", r.unwrap_or_else(|e| e)));
    }
    let mut all = true;
    let mut body = String::new();
    for log in &ops.logs {
        let r = readiness(&**log).await;
        all &= r.is_ok();
        body.push_str(&format!("{}: {}\n", log.name(), r.unwrap_or_else(|e| e)));
    }
    answer(all, body)
}

/// One log by name.
async fn ready_one(State(ops): State<Arc<Ops>>, Path(name): Path<String>) -> Response {
    match ops.logs.iter().find(|l| l.name() == name) {
        Some(log) => {
            let r = readiness(&**log).await;
            answer(r.is_ok(), format!("{}\n", r.unwrap_or_else(|e| e)))
        }
        None => (StatusCode::NOT_FOUND, "no such log\n").into_response(),
    }
}
