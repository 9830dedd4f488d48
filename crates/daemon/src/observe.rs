//! Observability: logging, the Prometheus recorder, `/metrics`, `/healthz`, `/readyz`.

use anyhow::Context;
use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};
use tlogd_core::engine::{Log, LogStorage};
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

struct Ops<S: LogStorage> {
    log: Log<S>,
    metrics: PrometheusHandle,
}

/// The operator router: `/metrics`, `/healthz`, `/readyz`.
pub fn router<S: LogStorage>(log: Log<S>, metrics: PrometheusHandle) -> Router {
    Router::new()
        .route("/metrics", get(render::<S>))
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(ready::<S>))
        .with_state(std::sync::Arc::new(Ops { log, metrics }))
}

async fn render<S: LogStorage>(State(ops): State<std::sync::Arc<Ops<S>>>) -> Response {
    // Gauges that are cheaper to sample at scrape time than to keep updated.
    metrics::gauge!("tlogd_queue_depth").set(ops.log.queue_depth() as f64);
    metrics::gauge!("tlogd_dedup_lag").set(ops.log.dedup_lag() as f64);
    (
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        ops.metrics.render(),
    )
        .into_response()
}

async fn ready<S: LogStorage>(State(ops): State<std::sync::Arc<Ops<S>>>) -> Response {
    if !ops.log.is_ready() {
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            "not ready: the tree could not be reloaded from storage\n",
        )
            .into_response();
    }
    match ops.log.storage().check_writable().await {
        Ok(()) => (StatusCode::OK, "ready\n").into_response(),
        Err(e) => {
            // The probe's answer carries no backend detail (paths, hosts, database
            // errors): whoever can reach it learns only that storage refuses writes.
            // The detail goes to the daemon's log.
            tracing::warn!(error = %e, "not ready: storage cannot take writes");
            (
                StatusCode::SERVICE_UNAVAILABLE,
                "not ready: storage cannot take writes (the daemon's log says why)\n",
            )
                .into_response()
        }
    }
}
