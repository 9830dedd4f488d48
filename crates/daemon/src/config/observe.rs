//! What the daemon tells its operator: `[metrics]` (the metrics and health listener)
//! and `[log]` (its own log lines).

use serde::Deserialize;

/// `[metrics]`
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct MetricsConfig {
    /// Address for `/metrics`, `/healthz`, `/readyz`. Empty string disables.
    pub listen: String,
}

impl Default for MetricsConfig {
    fn default() -> Self {
        MetricsConfig {
            listen: "127.0.0.1:9464".into(),
        }
    }
}

/// `[log]`
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LogFormatConfig {
    /// `text` or `json`.
    pub format: String,
    /// A `tracing` filter such as `info` or `tlogd=debug`; `RUST_LOG` wins if set.
    pub level: String,
}

impl Default for LogFormatConfig {
    fn default() -> Self {
        LogFormatConfig {
            format: "text".into(),
            level: "info".into(),
        }
    }
}
