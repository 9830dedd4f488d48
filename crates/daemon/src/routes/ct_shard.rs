//! A Certificate Transparency log as a temporal shard: its log-list entry, served at
//! `GET <log>/log.v3.json`, and its freeze once its window has ended.
//!
//! - **`log.v3.json`** is the entry a log list (Chrome's v3, with the fields of the
//!   "Operator-published CT Log Metadata" proposal) takes for this shard, in the shape
//!   Sunlight writes: sorted keys, four-space indent, a final newline. It is built per
//!   request from the configuration, the key and the served checkpoint; nothing is
//!   written to storage. Before the freeze: `status` `"active"` and, when a freeze is
//!   scheduled, `planned_changes` naming it. Once frozen: `status` `"readonly"` and
//!   `final_tree_head`, the size, root and timestamp of the served checkpoint (the
//!   frozen size and root; the timestamp is the checkpoint's, which a republish
//!   renews), and `status_timestamp`, the scheduled freeze instant once it has come
//!   (a log frozen earlier by `read_only` has none).
//! - **The freeze**: with `[ct] freeze_after_window` (the default) and a
//!   `not_after_limit`, the shard is frozen for good (`Log::freeze`: adds get `403`,
//!   reads go on, a final checkpoint is published) once the limit plus
//!   `freeze_grace_s` has passed: at start-up, or while running by a timer. No
//!   unexpired certificate can fall in the window any more, so a log list expects the
//!   shard read-only (Sunlight freezes a week after the limit, the default grace).

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use serde::Serialize;
use sha2::{Digest, Sha256};
use tlogd_core::checkpoint::Checkpoint;
use tlogd_core::engine::{Log, LogStorage};
use tlogd_core::note::Note;
use tlogd_static_ct::sth::note_key_id;

use crate::answer::now_ms;
use crate::config::{CtConfig, log_list_url};

/// What `log_software` names.
const SOFTWARE: (&str, &str) = ("tlogd", env!("CARGO_PKG_VERSION"));

/// One CT shard's log-list entry and freeze instant, from its configuration and key.
#[derive(Clone, Debug)]
pub struct CtShard {
    origin: String,
    description: String,
    friendly_name: String,
    spki: Vec<u8>,
    log_id: [u8; 32],
    mmd_seconds: u64,
    /// `not_after_start` and `not_after_limit` (ms).
    window: (Option<u64>, Option<u64>),
    submission_url: String,
    monitoring_url: String,
    intended_use: Option<String>,
    /// `not_after_limit` plus the grace (ms), when the shard freezes then.
    freeze_at: Option<u64>,
    /// The frozen tree's size once read from storage (`u64::MAX` until then): a
    /// served checkpoint below it is not the final tree head yet.
    frozen_size: Arc<std::sync::atomic::AtomicU64>,
}

/// The tree head a frozen log's entry names: the served checkpoint's.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FinalTreeHead {
    /// Tree size.
    pub size: u64,
    /// RFC 6962 root hash.
    pub root: [u8; 32],
    /// The RFC 6962 note signature's timestamp (ms).
    pub timestamp: u64,
}

impl CtShard {
    /// The shard of `config` whose checkpoint origin is `origin`, served under the
    /// `[[logs]]` name `name` (`""` for the one log of a file), with the public key
    /// `spki` (SubjectPublicKeyInfo DER).
    pub fn new(config: &CtConfig, origin: &str, name: &str, spki: &[u8]) -> anyhow::Result<Self> {
        let submission_url = match &config.submission_url {
            Some(u) => log_list_url("ct.submission_url", u)?,
            None => log_list_url("ct.submission_url", &format!("https://{origin}/"))?,
        };
        let monitoring_url = match &config.monitoring_url {
            Some(u) => log_list_url("ct.monitoring_url", u)?,
            None => submission_url.clone(),
        };
        let friendly_name = match (&config.friendly_name, name) {
            (Some(f), _) => f.clone(),
            (None, "") => origin.to_string(),
            (None, n) => n.to_string(),
        };
        Ok(CtShard {
            origin: origin.to_string(),
            description: config
                .description
                .clone()
                .unwrap_or_else(|| origin.to_string()),
            friendly_name,
            spki: spki.to_vec(),
            log_id: Sha256::digest(spki).into(),
            mmd_seconds: config.mmd_seconds,
            window: config.shard_window()?,
            submission_url,
            monitoring_url,
            intended_use: config.intended_use.clone(),
            freeze_at: config.freeze_at_ms()?,
            frozen_size: Arc::new(std::sync::atomic::AtomicU64::new(u64::MAX)),
        })
    }

    /// Whether a served checkpoint of `size` names the whole frozen tree of `log`
    /// (read from storage once; a witness that holds cosignatures back, or another
    /// frontend that froze the log, can leave the served checkpoint behind it).
    async fn names_frozen_tree<S: LogStorage>(
        &self,
        log: &Log<S>,
        size: u64,
    ) -> Result<bool, tlogd_core::engine::StorageError> {
        use std::sync::atomic::Ordering;
        let known = self.frozen_size.load(Ordering::Acquire);
        if known != u64::MAX {
            return Ok(size >= known);
        }
        match log.storage().load_state().await? {
            Some(state) if state.frozen => {
                self.frozen_size.store(state.size, Ordering::Release);
                Ok(size >= state.size)
            }
            // Frozen here, not yet read back as frozen: not final yet.
            _ => Ok(false),
        }
    }

    /// When the shard freezes (ms since the Unix epoch), if it does.
    pub fn freeze_at_ms(&self) -> Option<u64> {
        self.freeze_at
    }

    /// The tree head of `checkpoint`, a static-ct-api checkpoint of this log: its size
    /// and root, and the timestamp of its RFC 6962 note signature. `None` when it is
    /// not one (another origin, no signature line of this key).
    pub fn tree_head(&self, checkpoint: &[u8]) -> Option<FinalTreeHead> {
        let note = Note::parse(checkpoint).ok()?;
        let cp = Checkpoint::parse(&note.text).ok()?;
        if cp.origin != self.origin {
            return None;
        }
        let id = u32::from_be_bytes(note_key_id(&self.origin, &self.log_id));
        let sig = note
            .signatures
            .iter()
            .find(|s| s.name == self.origin && s.key_id == id)?;
        let ts: [u8; 8] = sig.signature.get(..8)?.try_into().ok()?;
        Some(FinalTreeHead {
            size: cp.size,
            root: cp.root,
            timestamp: u64::from_be_bytes(ts),
        })
    }

    /// The `log.v3.json` body: `frozen` with the final tree head once the log is
    /// frozen, at `now_ms`.
    pub fn log_v3_json(&self, frozen: Option<FinalTreeHead>, now_ms: u64) -> String {
        self.log_v3_json_as(SOFTWARE, frozen, now_ms)
    }

    fn log_v3_json_as(
        &self,
        software: (&str, &str),
        frozen: Option<FinalTreeHead>,
        now_ms: u64,
    ) -> String {
        let (status, status_timestamp, planned_changes) = match frozen {
            Some(_) => (
                "readonly",
                self.freeze_at
                    .filter(|&at| now_ms >= at)
                    .map(format_rfc3339_ms),
                Vec::new(),
            ),
            None => (
                "active",
                None,
                self.freeze_at
                    .map(|at| PlannedChange {
                        effective_date: format_rfc3339_ms(at),
                        new_status: "readonly",
                    })
                    .into_iter()
                    .collect(),
            ),
        };
        let temporal_interval = match self.window {
            (Some(start), Some(limit)) => Some(Interval {
                end_exclusive: format_rfc3339_ms(limit),
                start_inclusive: format_rfc3339_ms(start),
            }),
            _ => None,
        };
        let tls_only = self.submission_url.starts_with("https://")
            && self.monitoring_url.starts_with("https://");
        let entry = LogV3 {
            description: &self.description,
            final_tree_head: frozen.map(|h| TreeHead {
                sha256_root_hash: B64.encode(h.root),
                timestamp: h.timestamp,
                tree_size: h.size,
            }),
            friendly_name: &self.friendly_name,
            intended_use: self.intended_use.as_deref(),
            key: B64.encode(&self.spki),
            log_id: B64.encode(self.log_id),
            log_software: Software {
                name: software.0,
                version: software.1,
            },
            log_spec: "static-ct-api",
            mmd: self.mmd_seconds,
            mmd_seconds: self.mmd_seconds,
            monitoring_endpoint: Endpoint {
                url: &self.monitoring_url,
            },
            monitoring_url: &self.monitoring_url,
            planned_changes,
            status,
            status_timestamp,
            submission_endpoint: Endpoint {
                url: &self.submission_url,
            },
            submission_url: &self.submission_url,
            temporal_interval,
            tls_only,
        };
        let mut out = Vec::with_capacity(1024);
        let formatter = serde_json::ser::PrettyFormatter::with_indent(b"    ");
        let mut ser = serde_json::Serializer::with_formatter(&mut out, formatter);
        // Serializing strings and numbers into a Vec cannot fail.
        if entry.serialize(&mut ser).is_err() {
            return String::from("{}\n");
        }
        out.push(b'\n');
        String::from_utf8(out).unwrap_or_default()
    }
}

// The fields in sorted order, as Sunlight's encoder writes them (Go sorts map keys).

#[derive(Serialize)]
struct LogV3<'a> {
    description: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    final_tree_head: Option<TreeHead>,
    friendly_name: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    intended_use: Option<&'a str>,
    key: String,
    log_id: String,
    log_software: Software<'a>,
    log_spec: &'static str,
    mmd: u64,
    mmd_seconds: u64,
    monitoring_endpoint: Endpoint<'a>,
    monitoring_url: &'a str,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    planned_changes: Vec<PlannedChange>,
    status: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    status_timestamp: Option<String>,
    submission_endpoint: Endpoint<'a>,
    submission_url: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    temporal_interval: Option<Interval>,
    tls_only: bool,
}

#[derive(Serialize)]
struct TreeHead {
    sha256_root_hash: String,
    timestamp: u64,
    tree_size: u64,
}

#[derive(Serialize)]
struct Software<'a> {
    name: &'a str,
    version: &'a str,
}

#[derive(Serialize)]
struct Endpoint<'a> {
    url: &'a str,
}

#[derive(Serialize)]
struct PlannedChange {
    effective_date: String,
    new_status: &'static str,
}

#[derive(Serialize)]
struct Interval {
    end_exclusive: String,
    start_inclusive: String,
}

/// Milliseconds since the Unix epoch as RFC 3339 in UTC: `2026-01-01T00:00:00Z`, with
/// `.fff` only when there are milliseconds (the inverse of
/// [`crate::config::parse_rfc3339_ms`]).
pub fn format_rfc3339_ms(ms: u64) -> String {
    tlogd_core::time::format_rfc3339_ms(i64::try_from(ms).unwrap_or(i64::MAX))
}

/// `GET /log.v3.json` of `log`.
pub fn routes<S: LogStorage>(log: Log<S>, shard: Arc<CtShard>) -> Router {
    Router::new()
        .route(
            "/log.v3.json",
            get(
                |State((log, shard)): State<(Log<S>, Arc<CtShard>)>| async move {
                    log_v3(&log, &shard).await
                },
            ),
        )
        .with_state((log, shard))
}

/// `503` + `Retry-After`: the frozen log's final checkpoint is not served yet.
fn final_head_pending(name: &str) -> Response {
    crate::answer::read_metric("log.v3.json", StatusCode::SERVICE_UNAVAILABLE, name);
    let mut resp = crate::answer::text(
        StatusCode::SERVICE_UNAVAILABLE,
        "the frozen log's final checkpoint is not published yet; retry",
    );
    resp.headers_mut()
        .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
    resp
}

async fn log_v3<S: LogStorage>(log: &Log<S>, shard: &CtShard) -> Response {
    let name = log.config().name.clone();
    let frozen = match log.is_frozen() {
        false => None,
        true => match log.latest_checkpoint().await {
            Ok(Some(cp)) => match shard.tree_head(&cp) {
                Some(head) => match shard.names_frozen_tree(log, head.size).await {
                    Ok(true) => Some(head),
                    // `readonly` only with the final tree head (#57): until the
                    // checkpoint of the frozen size is served, say so and come back.
                    Ok(false) => return final_head_pending(&name),
                    Err(e) => return crate::answer::internal_error("GET /log.v3.json", &e),
                },
                None => {
                    let why = "the served checkpoint has no RFC 6962 signature of this log";
                    return crate::answer::internal_error("GET /log.v3.json", &why);
                }
            },
            // Frozen before its first checkpoint was published: it comes at once.
            Ok(None) => return final_head_pending(&name),
            Err(e) => return crate::answer::internal_error("GET /log.v3.json", &e),
        },
    };
    crate::answer::read_metric("log.v3.json", StatusCode::OK, &name);
    let body = shard.log_v3_json(frozen, now_ms());
    let mut resp = (StatusCode::OK, body).into_response();
    let h = resp.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    // It changes when the shard freezes.
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    resp
}

/// Freeze `log` now if its window ended (plus the grace) before it was opened.
pub async fn freeze_if_past<S: LogStorage>(
    log: &Log<S>,
    shard: &CtShard,
    label: &str,
) -> anyhow::Result<()> {
    let Some(at) = shard.freeze_at else {
        return Ok(());
    };
    if log.is_frozen() || now_ms() < at {
        return Ok(());
    }
    tracing::warn!(
        log = label,
        size = log.committed_size(),
        not_after_limit = %shard.window.1.map(format_rfc3339_ms).unwrap_or_default(),
        freeze_at = %format_rfc3339_ms(at),
        "the CT shard's window has ended (`ct.freeze_after_window`): freezing the log for good"
    );
    let state = log
        .freeze()
        .await
        .map_err(|e| anyhow::anyhow!("freezing the CT shard past its window: {e}"))?;
    tracing::warn!(
        log = label,
        size = state.size,
        "CT shard frozen: read-only from now on"
    );
    Ok(())
}

/// While the daemon runs, freeze `log` when its window ends (plus the grace): a task
/// that wakes at least every minute to check the wall clock (a monotonic sleep of
/// months would miss clock corrections), and ends when the log fails.
pub fn spawn_freeze_at_window_end<S: LogStorage>(log: Log<S>, shard: Arc<CtShard>, label: String) {
    let Some(at) = shard.freeze_at else {
        return;
    };
    if log.is_frozen() {
        return;
    }
    tracing::info!(
        log = %label,
        freeze_at = %format_rfc3339_ms(at),
        "the CT shard will be frozen when its window ends (`ct.freeze_after_window`)"
    );
    tokio::spawn(async move {
        loop {
            let now = now_ms();
            if now >= at {
                break;
            }
            let wait = Duration::from_millis((at - now).min(60_000));
            tokio::select! {
                () = tokio::time::sleep(wait) => {}
                _ = log.failed() => return,
            }
        }
        if log.is_frozen() {
            return;
        }
        tracing::warn!(
            log = %label,
            size = log.committed_size(),
            freeze_at = %format_rfc3339_ms(at),
            "the CT shard's window has ended (`ct.freeze_after_window`): freezing the log for good"
        );
        match log.freeze().await {
            Ok(state) => tracing::warn!(
                log = %label,
                size = state.size,
                "CT shard frozen: read-only from now on"
            ),
            Err(e) => tracing::error!(
                log = %label,
                error = %e,
                "could not freeze the CT shard past its window (it refuses adds until a restart, which freezes it again)"
            ),
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{Config, parse_rfc3339_ms};
    use tlogd_static_ct::signer::LogKey;

    fn testdata(name: &str) -> String {
        let p = format!(
            "{}/../static-ct/testdata/sunlight/{name}",
            // At run time: the binary may come from a build in another clone.
            std::env::var("CARGO_MANIFEST_DIR")
                .unwrap_or_else(|_| env!("CARGO_MANIFEST_DIR").to_string())
        );
        std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{p}: {e}"))
    }

    fn ct_config(extra: &str) -> CtConfig {
        let toml = format!(
            "origin = \"rome2026h1.example.org\"\nstorage.dir = \"d\"\n[ct]\nroots_file = \"r.pem\"\n{extra}"
        );
        let c = Config::parse(&toml).unwrap();
        c.validate().unwrap();
        c.ct.unwrap()
    }

    /// Sunlight's skylight vector (`testdata/tree/log.v3.json`, the vector's key,
    /// window, checkpoint and names): the same bytes, but for `log_software`.
    #[test]
    fn sunlights_log_v3_json_is_reproduced_byte_for_byte() {
        // The vector's key: d = SHA-256("skylight test log key").
        let key = LogKey::from_scalar(&Sha256::digest(b"skylight test log key")).unwrap();
        let config = ct_config(
            "not_after_start = \"2025-07-01T00:00:00Z\"\nnot_after_limit = \"2026-01-01T00:00:00Z\"\n\
             friendly_name = \"rome2026h1\"\nintended_use = \"test\"\n",
        );
        let shard =
            CtShard::new(&config, "rome2026h1.example.org", "", key.public_key_der()).unwrap();
        let head = shard
            .tree_head(testdata("checkpoint").as_bytes())
            .expect("the vector's checkpoint is this log's");
        assert_eq!((head.size, head.timestamp), (300, 1_767_139_200_000));
        let now = parse_rfc3339_ms("2026-01-08T00:00:00Z").unwrap();
        let want = testdata("log.v3.json");
        let got = shard.log_v3_json_as(("sunlight", "test"), Some(head), now);
        // Field by field first, for a readable failure.
        let (w, g): (serde_json::Value, serde_json::Value) = (
            serde_json::from_str(&want).unwrap(),
            serde_json::from_str(&got).unwrap(),
        );
        let (w, g) = (w.as_object().unwrap(), g.as_object().unwrap());
        for (k, v) in w {
            assert_eq!(g.get(k), Some(v), "field {k}");
        }
        assert_eq!(w.len(), g.len(), "{got}");
        assert_eq!(got, want);
        // tlogd names itself.
        let ours: serde_json::Value =
            serde_json::from_str(&shard.log_v3_json(Some(head), now)).unwrap();
        assert_eq!(ours["log_software"]["name"], "tlogd");
        assert_eq!(ours["log_software"]["version"], env!("CARGO_PKG_VERSION"));
    }

    #[test]
    fn an_active_shard_plans_its_freeze_and_names_no_final_tree() {
        let key = LogKey::from_scalar(&Sha256::digest(b"another key")).unwrap();
        let config = ct_config(
            "not_after_start = \"2026-01-01T00:00:00Z\"\nnot_after_limit = \"2026-07-01T00:00:00.5Z\"\n\
             freeze_grace_s = 0\nmonitoring_url = \"https://mon.example.org/rome\"\nmmd_seconds = 30\n",
        );
        let shard = CtShard::new(
            &config,
            "rome2026h1.example.org",
            "rome",
            key.public_key_der(),
        )
        .unwrap();
        let v: serde_json::Value = serde_json::from_str(&shard.log_v3_json(None, 0)).unwrap();
        assert_eq!(v["status"], "active");
        assert!(v.get("status_timestamp").is_none());
        assert!(v.get("final_tree_head").is_none());
        assert!(v.get("intended_use").is_none());
        assert_eq!(v["planned_changes"][0]["new_status"], "readonly");
        assert_eq!(
            v["planned_changes"][0]["effective_date"],
            "2026-07-01T00:00:00.500Z"
        );
        assert_eq!(v["friendly_name"], "rome");
        assert_eq!(v["description"], "rome2026h1.example.org");
        assert_eq!(v["submission_url"], "https://rome2026h1.example.org/");
        assert_eq!(v["submission_endpoint"]["url"], v["submission_url"]);
        assert_eq!(v["monitoring_url"], "https://mon.example.org/rome/");
        assert_eq!(
            (v["mmd"].as_u64(), v["mmd_seconds"].as_u64()),
            (Some(30), Some(30))
        );
        assert_eq!(v["tls_only"], true);
        assert_eq!(
            v["temporal_interval"]["start_inclusive"],
            "2026-01-01T00:00:00Z"
        );
        assert_eq!(
            v["log_id"],
            B64.encode(Sha256::digest(key.public_key_der()))
        );
        // Frozen before its scheduled instant (read_only): no status timestamp.
        let head = FinalTreeHead {
            size: 3,
            root: [7; 32],
            timestamp: 5,
        };
        let v: serde_json::Value = serde_json::from_str(&shard.log_v3_json(Some(head), 0)).unwrap();
        assert_eq!(v["status"], "readonly");
        assert!(v.get("status_timestamp").is_none());
        assert!(v.get("planned_changes").is_none());
        assert_eq!(v["final_tree_head"]["tree_size"], 3);
        // A checkpoint of another origin or key is not this log's tree head.
        let other = testdata("checkpoint");
        assert_eq!(shard.tree_head(other.as_bytes()), None);
    }

    #[test]
    fn rfc3339_formatting_inverts_parsing() {
        for s in [
            "1970-01-01T00:00:00Z",
            "2000-02-29T23:59:59.999Z",
            "2026-01-08T00:00:00Z",
            "2100-03-01T12:34:56.001Z",
            "9999-12-31T23:59:59Z",
        ] {
            assert_eq!(format_rfc3339_ms(parse_rfc3339_ms(s).unwrap()), s);
        }
        for ms in (0..4_000_000_000_000u64).step_by(86_399_999_937) {
            assert_eq!(parse_rfc3339_ms(&format_rfc3339_ms(ms)).unwrap(), ms);
        }
    }
}
