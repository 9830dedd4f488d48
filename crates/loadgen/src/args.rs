//! The command line ([`Args`], also built directly by tests) and `ct-root`'s.

use std::path::PathBuf;
use std::time::Duration;

use crate::ct;
use crate::duration::parse_duration;

/// Command-line arguments (also built directly by tests).
#[derive(clap::Parser, Clone, Debug)]
#[command(
    version,
    about = "A verifying load generator for C2SP tlog-tiles and static-ct-api logs",
    after_help = "`tlog-loadgen ct-root --cert FILE --key FILE` mints a root CA for a test CT log's roots file (for --ct)."
)]
pub struct Args {
    /// Base URL for reads (checkpoint, tiles, bundles).
    #[arg(long, required_unless_present = "dry_run_endpoint", default_value = "")]
    pub log_url: String,
    /// Base URL(s) for POST /add; repeat for several frontends (round-robin).
    /// Default: --log-url.
    #[arg(long)]
    pub write_log_url: Vec<String>,
    /// The log's verifier key (`name+hex+base64`); with --ct, the log's public key as
    /// base64 DER SubjectPublicKeyInfo (a log list's `key`).
    #[arg(long)]
    pub log_public_key: Option<String>,
    /// Checkpoint origin [default: the verifier key's name; required with --ct].
    #[arg(long)]
    pub origin: Option<String>,
    /// Certificate Transparency mode (C2SP static-ct-api): submit minted chains to
    /// ct/v1/add-chain and ct/v1/add-pre-chain, check every SCT, verify RFC 6962
    /// checkpoint signatures and the data tiles (tile/data/). Needs --ct-root-cert,
    /// --ct-root-key, --origin, and --log-public-key as base64 DER.
    #[arg(long, conflicts_with_all = ["dry_run_endpoint", "no_verify"])]
    pub ct: bool,
    /// With --ct: a root certificate the log trusts (PEM); the chains are minted under
    /// an intermediate minted under it (`tlog-loadgen ct-root` makes a pair).
    #[arg(long, requires = "ct")]
    pub ct_root_cert: Option<PathBuf>,
    /// With --ct: the root's ECDSA P-256 private key (PEM, PKCS#8 or SEC 1).
    #[arg(long, requires = "ct")]
    pub ct_root_key: Option<PathBuf>,
    /// With --ct: the fraction of chains minted as precertificates (sent to
    /// add-pre-chain).
    #[arg(long, default_value_t = 0.1)]
    pub ct_precert_chance: f64,
    /// With --ct: the fraction of chains minted as final certificates carrying an
    /// embedded SCT list (as crawlers resubmit certificates logged elsewhere); the
    /// report gives each class's acceptance and latency.
    #[arg(long, default_value_t = 0.0)]
    pub ct_scts_chance: f64,
    /// With --ct: the fraction of chains minted as final certificates issued 400 days
    /// ago.
    #[arg(long, default_value_t = 0.0)]
    pub ct_old_chance: f64,
    /// With --ct: the key of the minted intermediate, which signs every leaf (what the
    /// log verifies on each add): p256, p384 or rsa2048.
    #[arg(long, value_enum, default_value_t = ct::IssuerKey::P256)]
    pub ct_issuer_key: ct::IssuerKey,
    /// With --ct: chains minted before the run (not timed); writers cycle through them
    /// (a chain sent again is a duplicate). 0: --leaf-write-goal if given, else 20000.
    #[arg(long, default_value_t = 0)]
    pub ct_chains: usize,
    /// With --ct: when each SCT's signature is checked. `after`: once writing stops
    /// (each answer's other fields at once), so that the driver's ECDSA checks (~50 µs
    /// each) do not take the cores of a log measured on the same machine; `during`: as
    /// each answer arrives, before its add counts. Either way every SCT is checked, and
    /// one that does not verify fails the run.
    #[arg(long, value_enum, default_value_t = ct::SctChecks::After)]
    pub ct_sct_checks: ct::SctChecks,
    /// Bearer token sent with every request.
    #[arg(long)]
    pub bearer_token: Option<String>,
    /// Bearer token for writes only (overrides --bearer-token for POST).
    #[arg(long)]
    pub bearer_token_write: Option<String>,
    /// Concurrent writers; 0 = a read-only run (checkpoints followed and verified,
    /// readers as asked, nothing written).
    #[arg(long, default_value_t = 64)]
    pub writers: usize,
    /// HTTP/2 to the log, for writes and reads: without TLS (h2c, prior knowledge) to
    /// an http:// URL, over TLS (ALPN h2) to an https:// one. The writers share
    /// --h2c-connections connections per write URL, their adds multiplexed. Default:
    /// HTTP/1.1, one keep-alive connection per writer.
    #[arg(long)]
    pub h2c: bool,
    /// With --h2c: connections per write URL shared by all writers; 0 (the default):
    /// one per 100 writers (tlogd allows 100 streams per connection by default; a
    /// writer beyond a connection's limit waits for one of its streams to end).
    #[arg(long, default_value_t = 0)]
    pub h2c_connections: usize,
    /// Global write rate limit in adds/s (0 = unlimited).
    #[arg(long, default_value_t = 0.0)]
    pub write_rate: f64,
    /// Minimum leaf size in bytes.
    #[arg(long, default_value_t = 64)]
    pub leaf_min_size: usize,
    /// Probability that an add resubmits an earlier leaf.
    #[arg(long, default_value_t = 0.0)]
    pub dup_chance: f64,
    /// Random readers (verify an inclusion proof for each entry read).
    #[arg(long, default_value_t = 0)]
    pub readers_random: usize,
    /// Full readers (read every bundle in order and recompute every hash tile).
    #[arg(long, default_value_t = 0)]
    pub readers_full: usize,
    /// Global read rate limit in reads/s (0 = unlimited).
    #[arg(long, default_value_t = 0.0)]
    pub read_rate: f64,
    /// Stop writing after this long (30s, 5m, 1h, 500ms or plain seconds; 0 = no limit).
    #[arg(long, value_parser = parse_duration, default_value = "0")]
    pub duration: Duration,
    /// Stop writing after this many acknowledged adds (0 = no goal).
    #[arg(long, default_value_t = 0)]
    pub leaf_write_goal: u64,
    /// Leave the adds answered in the first this-long of the run out of the add latency
    /// figures (the connection storm of many writers starting at once, caches warming);
    /// they count otherwise (units as --duration; 0 = none left out).
    #[arg(long, value_parser = parse_duration, default_value = "0")]
    pub latency_warmup: Duration,
    /// Hard limit on the whole run, verification included (units as --duration).
    #[arg(long, value_parser = parse_duration, default_value = "300s")]
    pub max_runtime: Duration,
    /// Fraction of written entries whose bytes and inclusion are verified (inclusion is
    /// proven once per tile and checkpoint, and each entry's hash checked in that tile).
    #[arg(long, default_value_t = 1.0)]
    pub verify_fraction: f64,
    /// HTTP timeout of one request (units as --duration).
    #[arg(long, value_parser = parse_duration, default_value = "10s")]
    pub http_timeout: Duration,
    /// How often to poll the checkpoint (units as --duration: 100ms, 1s).
    #[arg(long, value_parser = parse_duration, default_value = "100ms")]
    pub checkpoint_poll: Duration,
    /// The same in milliseconds (older spelling of --checkpoint-poll).
    #[arg(long, hide = true, conflicts_with = "checkpoint_poll")]
    pub checkpoint_poll_ms: Option<u64>,
    /// The log's process id, when it runs on this machine: its CPU time (from
    /// /proc/PID/stat) is sampled every second and reported per add.
    #[arg(long)]
    pub log_pid: Option<u32>,
    /// Write the full report as JSON.
    #[arg(long)]
    pub report_json: Option<PathBuf>,
    /// Write a self-contained HTML report with charts.
    #[arg(long)]
    pub report_html: Option<PathBuf>,
    /// Measure the filesystem type and fsync latency of this directory for the report.
    #[arg(long)]
    pub probe_dir: Option<PathBuf>,
    /// No per-second status output.
    #[arg(long)]
    pub quiet: bool,
    /// Drive a trivial in-process endpoint (measures the loadgen itself; no verification).
    #[arg(long)]
    pub dry_run_endpoint: bool,
    /// Writes only: no checkpoint is read and nothing is verified, so the server need
    /// not be a log (an HTTP floor, a stub). Needs no --log-public-key; no readers.
    #[arg(long, conflicts_with = "log_public_key")]
    pub no_verify: bool,
}

/// `tlog-loadgen ct-root`: mint a root CA for a test CT log's `[ct] roots_file`, and its
/// key, for `--ct-root-cert` and `--ct-root-key`.
#[derive(clap::Parser, Clone, Debug)]
#[command(
    name = "tlog-loadgen ct-root",
    about = "Mint a root CA (ECDSA P-256) for a test CT log's roots file"
)]
pub struct CtRootArgs {
    /// Where to write the root certificate (PEM); must not exist.
    #[arg(long)]
    pub cert: PathBuf,
    /// Where to write its private key (PKCS#8 PEM, mode 0600); must not exist.
    #[arg(long)]
    pub key: PathBuf,
}
