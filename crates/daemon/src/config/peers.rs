//! The servers a log talks to: `[forward]` (the sequencing frontend of a shared store)
//! and `[witnessing]` (the witnesses that cosign its checkpoints).

use std::path::PathBuf;

use serde::Deserialize;

/// `[forward]`: frontends of one shared store (MySQL, PostgreSQL, S3, GCS) that all
/// take adds but let one of them sequence. A frontend with `to` sends its batches to
/// the frontend there, which commits them with its own; while that one cannot be
/// reached, it commits them itself. A frontend with `token_file` takes batches
/// forwarded to it (`POST <log>/.tlogd/forward`).
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ForwardConfig {
    /// This log's base URL on the sequencing frontend (`http://10.0.0.1:8080`, or
    /// `http://10.0.0.1:8080/<name>` for one of several logs). Unset: commit here.
    pub to: Option<String>,
    /// The frontends' shared bearer token (same syntax as `auth.bearer_tokens_file`):
    /// the first is sent with forwards, any is accepted. Required with `to`; set alone,
    /// this frontend takes forwards but sends none.
    pub token_file: Option<PathBuf>,
    /// How long a forward may take; one unanswered is answered `503` (the entries may
    /// be logged: resubmit), two in a row make this frontend commit by itself for 5 s.
    pub timeout_ms: u64,
}

impl Default for ForwardConfig {
    fn default() -> Self {
        ForwardConfig {
            to: None,
            token_file: None,
            timeout_ms: 10_000,
        }
    }
}

/// `[witnessing]`
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct WitnessingConfig {
    /// A C2SP tlog-policy file: `witness <name> <vkey> <url>` lines, `group`s and the
    /// `quorum`. Unset: checkpoints are published without cosignatures.
    pub policy_file: Option<PathBuf>,
    /// How long one request to a witness may take.
    pub timeout_ms: u64,
    /// Publish a checkpoint even when the quorum is not met (with the cosignatures
    /// obtained); by default it is withheld and retried.
    pub fail_open: bool,
}

impl Default for WitnessingConfig {
    fn default() -> Self {
        WitnessingConfig {
            policy_file: None,
            timeout_ms: 5000,
            fail_open: false,
        }
    }
}
