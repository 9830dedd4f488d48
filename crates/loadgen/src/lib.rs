//! tlog-loadgen: a verifying load generator for any C2SP tlog-tiles log that accepts
//! `POST /add` (tlogd, Tessera's conformance servers).
//!
//! Writers add entries over keep-alive HTTP/1.1 (or multiplexed over a few h2c
//! connections); a checkpoint follower verifies every checkpoint (signature,
//! consistency with the previous one) and stops the clock of every entry the first
//! verified checkpoint covers (time to integrate); a verifier then checks each written
//! entry's bytes and inclusion against a verified checkpoint, at its own pace (its
//! backlog is reported, and never moves the clock); full readers recompute every hash
//! tile from the bundles; random readers verify an inclusion proof for every entry
//! they read. Any verification failure fails the run and is named in the report.
//!
//! With `--ct` it drives a Certificate Transparency log (C2SP static-ct-api: tlogd's CT
//! personality, TesseraCT) instead: a pool of certificate chains is minted under a
//! root the log trusts before the clock starts ([`ct`]); writers submit them to
//! `ct/v1/add-chain` and `ct/v1/add-pre-chain` and check every SCT (the log's id, the
//! signature over the entry submitted, the `leaf_index` extension); checkpoints are
//! verified with the log's RFC 6962 note signature; entries are read from data tiles
//! (`tile/data/`), each sampled one compared byte for byte with the `TileLeaf` the
//! loadgen expects, and hashed as its `MerkleTreeLeaf`.

pub mod chart;
pub mod clock;
pub mod ct;
pub mod duration;
pub mod machine;
pub mod report;
pub mod stats;

/// The HTTP client and the verified reader live in `tlog-verify`, shared with
/// `tlogd verify`.
pub use tlog_verify::reader;
pub use tlogd_http::client;

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use bytes::Bytes;
use hyper::{Method, StatusCode};
use serde::Serialize;
use tlog_verify::fetch::HttpFetcher;
use tlog_verify::reader::width_at;
use tlog_verify::rebuild::{TreeRebuilder, compare_tile};
use tlogd_core::checkpoint::Checkpoint;
use tlogd_core::note::NoteVerifier;
use tlogd_core::tile::{TILE_WIDTH, TileId};
use tokio::sync::{mpsc, watch};

use crate::client::{BaseUrl, Client, ClientError, H2cPool};
use crate::clock::IntegrationClock;
use crate::duration::parse_duration;
use crate::reader::LogReader;
use crate::stats::{OpRow, Sample, Stats, lock};

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
    /// HTTP/2 without TLS (h2c, prior knowledge) to the log, for writes and reads: the
    /// writers share --h2c-connections connections per write URL, their adds
    /// multiplexed. Default: HTTP/1.1, one keep-alive connection per writer.
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

/// The outcome of a run: every figure, for the table, JSON and HTML.
#[derive(Clone, Debug, Serialize)]
pub struct Report {
    /// Whether the run succeeded.
    pub ok: bool,
    /// Why it failed.
    pub failure_reasons: Vec<String>,
    /// Seconds spent writing.
    pub write_seconds: f64,
    /// Seconds in all.
    pub total_seconds: f64,
    /// Adds acknowledged with a new index.
    pub writes_new: u64,
    /// Adds acknowledged as duplicates.
    pub writes_duplicate: u64,
    /// 503/429 answers.
    pub pushback: u64,
    /// Failed adds.
    pub write_errors: u64,
    /// Acknowledged adds per second.
    pub write_rate_per_s: f64,
    /// Entries whose bytes and inclusion proof were verified.
    pub verified_entries: u64,
    /// Written entries sampled for verification.
    pub sampled_entries: u64,
    /// Verification failures, each naming the resource.
    pub verification_failures: Vec<String>,
    /// Sample of transport/status errors.
    pub error_samples: Vec<String>,
    /// Tree size at start.
    pub tree_size_start: u64,
    /// Tree size of the last verified checkpoint.
    pub tree_size_end: u64,
    /// Tree growth (end - start).
    pub tree_growth: u64,
    /// The headline: tree growth per second of writing.
    pub tree_growth_per_s: f64,
    /// Successful reads.
    pub reads_ok: u64,
    /// Failed reads.
    pub read_errors: u64,
    /// One row per operation.
    pub operations: Vec<OpRow>,
    /// Per-second samples.
    pub timeline: Vec<Sample>,
    /// Machine and storage.
    pub machine: machine::Machine,
    /// `http/1.1` or `h2c`.
    pub transport: String,
    /// Loadgen CPU time (user + system) over the whole run, verification included (s).
    pub loadgen_cpu_seconds: f64,
    /// Loadgen CPU time per acknowledged add (µs); 0 when nothing was added.
    pub loadgen_cpu_us_per_add: f64,
    /// The log's process (`--log-pid`): its CPU time over the run (s).
    pub log_cpu_seconds: Option<f64>,
    /// The log's CPU time per acknowledged add (µs).
    pub log_cpu_us_per_add: Option<f64>,
    /// Most sampled entries waiting for their bytes and inclusion to be checked.
    pub verify_backlog_max: u64,
    /// Entries still waiting when writing stopped.
    pub verify_backlog_at_write_end: u64,
    /// Seconds from the end of writing until every sampled entry was checked.
    pub verify_drain_seconds: f64,
    /// `tlog-tiles`, or `static-ct-api` (--ct).
    pub mode: String,
    /// With --ct: chains minted before the run.
    pub ct_chains_minted: u64,
    /// With --ct: seconds minting them took (not part of the run's times or CPU).
    pub ct_mint_seconds: f64,
    /// With --ct: acknowledged submissions of precertificates (add-pre-chain).
    pub ct_precerts: u64,
    /// With --ct: SCTs whose signature was checked once writing stopped
    /// (`--ct-sct-checks after`; the others were checked as they arrived).
    pub ct_scts_checked_after: u64,
    /// With --ct: seconds those checks took.
    pub ct_sct_check_seconds: f64,
}

/// An acknowledged add, on its way to the integration clock.
struct Written {
    index: u64,
    sent: Instant,
    /// Its round trip (µs), recorded by the clock with the others of its batch.
    rtt_us: u64,
    /// Answered from the log's dedup index: its index was integrated long ago, so it
    /// has no time to integrate.
    duplicate: bool,
    /// The bytes, when sampled for verification.
    leaf: Option<Bytes>,
}

/// Acknowledged adds, collected from the writers and taken by the integration clock in
/// batches every few milliseconds: a writer pays one uncontended lock per add instead
/// of waking another task, and the histograms are locked once per batch. Nothing is
/// timed by the hand-over (each entry carries when it was sent).
#[derive(Default)]
struct Inbox {
    queue: std::sync::Mutex<Vec<Written>>,
    /// Set once every writer has finished (and so has put its last add here).
    writers_done: AtomicBool,
}

impl Inbox {
    fn put(&self, w: Written) {
        self.queue.lock().unwrap_or_else(|e| e.into_inner()).push(w);
    }

    /// Everything put so far, into `into` (emptied first).
    fn take(&self, into: &mut Vec<Written>) {
        into.clear();
        std::mem::swap(
            &mut *self.queue.lock().unwrap_or_else(|e| e.into_inner()),
            into,
        );
    }
}

/// How often the clock takes the writers' adds.
const INBOX_PERIOD: Duration = Duration::from_millis(10);

/// A sampled entry on its way to the verifier.
struct ToVerify {
    index: u64,
    sent: Instant,
    leaf: Bytes,
}

/// splitmix64: a tiny deterministic generator for leaf choice and sampling.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn chance(&mut self, p: f64) -> bool {
        p > 0.0 && ((self.next() >> 11) as f64 / ((1u64 << 53) as f64)) < p
    }
}

/// Paces operations to a global rate: each takes the next slot of a shared clock.
struct Pacer {
    start: Instant,
    interval_ns: u64,
    next_ns: AtomicU64,
}

impl Pacer {
    fn new(rate: f64) -> Option<Arc<Self>> {
        (rate > 0.0).then(|| {
            Arc::new(Pacer {
                start: Instant::now(),
                interval_ns: (1e9 / rate) as u64,
                next_ns: AtomicU64::new(0),
            })
        })
    }

    async fn wait(&self) {
        let slot = self.next_ns.fetch_add(self.interval_ns, Ordering::Relaxed);
        let now = self.start.elapsed().as_nanos() as u64;
        if slot > now {
            tokio::time::sleep(Duration::from_nanos(slot - now)).await;
        } else if now - slot > 1_000_000_000 {
            // Do not build up an unbounded burst after a stall.
            self.next_ns.store(now, Ordering::Relaxed);
        }
    }
}

/// CPU time (user + system) of this process, from getrusage (microsecond resolution).
fn cpu_seconds() -> f64 {
    // SAFETY: getrusage only writes the struct passed; all-zero is a valid rusage.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    if unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) } != 0 {
        return 0.0;
    }
    let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

/// CPU time (utime + stime) of process `pid` from /proc/PID/stat, if it is readable.
fn process_cpu_seconds(pid: u32) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name may hold spaces: fields count from after its ')'.
    let (_, after) = stat.rsplit_once(')')?;
    let f: Vec<&str> = after.split_whitespace().collect();
    let ticks = f.get(11)?.parse::<f64>().ok()? + f.get(12)?.parse::<f64>().ok()?;
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    Some(ticks / if hz > 0 { hz as f64 } else { 100.0 })
}

/// A CT run's chains and what the log answered for them.
struct CtRun {
    /// The log's key, which signs every SCT.
    log: ct::LogIdentity,
    /// The minted chains.
    pool: Vec<ct::MintedChain>,
    /// The next fresh chain (modulo the pool: writers cycle through it).
    next: AtomicU64,
    /// Per chain: 1 + the index the log last gave it, 0 before any (a resubmission
    /// answered with that index is a duplicate, whether or not the log says so).
    acked: Vec<AtomicU64>,
    /// Acknowledged precertificate submissions.
    precerts: AtomicU64,
    /// Seconds minting took.
    mint_seconds: f64,
    /// SCTs whose signature is checked once writing stops (`--ct-sct-checks after`),
    /// with the chain each answered.
    deferred: Mutex<Vec<(usize, ct::UncheckedSct)>>,
    /// How many were deferred (at most [`ct::MAX_DEFERRED_SCTS`]).
    deferred_count: AtomicUsize,
}

struct Ctx {
    args: Args,
    /// With --ct.
    ct: Option<CtRun>,
    stats: Stats,
    stop_writing: AtomicBool,
    stop_all: AtomicBool,
    sampled: AtomicU64,
    origin: String,
    verifier: Option<NoteVerifier>,
    write_bases: Vec<BaseUrl>,
    /// With --h2c: the shared connections of each write URL.
    write_pools: Vec<Arc<H2cPool>>,
    /// Acknowledged adds for the integration clock.
    inbox: Inbox,
    timeout: Duration,
    write_pacer: Option<Arc<Pacer>>,
}

impl Ctx {
    /// A verified reader of the log with a connection of its own (over h2c: a
    /// connection of its own too, so readers never queue behind the writers' streams).
    fn reader(&self) -> anyhow::Result<LogReader<HttpFetcher>> {
        let verifier = self
            .verifier
            .clone()
            .context("--log-public-key is required")?;
        let (url, token) = (&self.args.log_url, self.args.bearer_token.as_deref());
        let fetch = if self.args.h2c {
            HttpFetcher::h2c(url, token, self.timeout, 1)?
        } else {
            HttpFetcher::new(url, token, self.timeout)?
        };
        let reader = LogReader::new(fetch, self.origin.clone(), verifier);
        Ok(match self.ct {
            Some(_) => reader.with_personality(Arc::new(tlogd_ct::StaticCt)),
            None => reader,
        })
    }
}

/// Writers per h2c connection when `--h2c-connections` is 0: tlogd's default limit of
/// concurrent streams per connection (`http.h2_max_concurrent_streams`).
pub const WRITERS_PER_H2C_CONNECTION: usize = 100;

/// The h2c connections per write URL: as asked, or one per
/// [`WRITERS_PER_H2C_CONNECTION`] writers (at least one).
pub fn h2c_connections(args: &Args) -> usize {
    match args.h2c_connections {
        0 => args.writers.div_ceil(WRITERS_PER_H2C_CONNECTION).max(1),
        n => n,
    }
}

/// Run the load and verification; the report says whether it succeeded.
pub async fn run(mut args: Args) -> anyhow::Result<Report> {
    // Minting comes first: neither the run's clock nor its CPU count it.
    let ct_run = if args.ct {
        Some(prepare_ct(&args).await?)
    } else {
        None
    };
    let started = Instant::now();
    let cpu_start = cpu_seconds();
    let mut _dry = None;
    if args.dry_run_endpoint {
        let (addr, handle) = dry_run_endpoint().await?;
        args.log_url = format!("http://{addr}");
        args.write_log_url = vec![];
        _dry = Some(handle);
    }
    let verifier = match (&args.log_public_key, &ct_run) {
        (Some(_), Some(ct)) => Some(
            tlogd_ct::Rfc6962Check::verifier(
                args.origin.as_deref().unwrap_or_default(),
                &ct.log.spki,
            )
            .context("--log-public-key")?,
        ),
        (Some(k), None) => Some(NoteVerifier::from_vkey(k).context("--log-public-key")?),
        (None, _) if args.dry_run_endpoint || args.no_verify => None,
        (None, _) => bail!(
            "--log-public-key is required (verification is not optional; --no-verify for a server that is not a log)"
        ),
    };
    let origin = args
        .origin
        .clone()
        .or_else(|| verifier.as_ref().map(|v| v.name().to_string()))
        .unwrap_or_default();
    let read_base = BaseUrl::parse(&args.log_url)?;
    let write_bases = if args.write_log_url.is_empty() {
        vec![read_base.clone()]
    } else {
        args.write_log_url
            .iter()
            .map(|u| BaseUrl::parse(u))
            .collect::<Result<_, _>>()?
    };
    if !(0.0..=1.0).contains(&args.dup_chance) || !(0.0..=1.0).contains(&args.verify_fraction) {
        bail!("--dup-chance and --verify-fraction must be within 0..=1");
    }
    if args.duration.is_zero() && args.leaf_write_goal == 0 && args.max_runtime.is_zero() {
        bail!("give --duration, --leaf-write-goal or --max-runtime");
    }
    if verifier.is_none() && args.readers_random + args.readers_full > 0 {
        bail!("readers verify what they read: they need --log-public-key");
    }
    if args.writers == 0 && args.leaf_write_goal > 0 {
        bail!("--leaf-write-goal needs writers (--writers 0 is a read-only run)");
    }
    if let Some(ms) = args.checkpoint_poll_ms {
        args.checkpoint_poll = Duration::from_millis(ms);
    }
    let write_pools = if args.h2c {
        write_bases
            .iter()
            .map(|b| H2cPool::new(b.clone(), h2c_connections(&args)))
            .collect::<Result<_, _>>()?
    } else {
        Vec::new()
    };
    let machine = machine::describe(args.probe_dir.as_deref());
    let log_cpu_start = args.log_pid.and_then(process_cpu_seconds);
    if args.log_pid.is_some() && log_cpu_start.is_none() {
        bail!("--log-pid: cannot read /proc/PID/stat of that process");
    }
    let ctx = Arc::new(Ctx {
        timeout: args.http_timeout.max(Duration::from_millis(100)),
        write_pacer: Pacer::new(args.write_rate),
        args,
        ct: ct_run,
        stats: Stats::default(),
        stop_writing: AtomicBool::new(false),
        stop_all: AtomicBool::new(false),
        sampled: AtomicU64::new(0),
        origin,
        verifier,
        write_bases,
        write_pools,
        inbox: Inbox::default(),
    });

    // The starting checkpoint seeds leaf generation, so reruns never collide.
    let start_cp = if ctx.verifier.is_some() {
        Some(
            ctx.reader()?
                .checkpoint()
                .await
                .context("reading the starting checkpoint")?,
        )
    } else {
        None
    };
    let start_size = start_cp.as_ref().map(|c| c.size).unwrap_or(0);
    ctx.stats.tree_size.store(start_size, Ordering::Relaxed);
    let seed = start_size ^ (std::process::id() as u64) << 40;

    // Writers -> integration clock -> verifier; the checkpoint follower feeds both.
    let (verify_tx, verify_rx) = mpsc::unbounded_channel::<Vec<ToVerify>>();
    let (cp_tx, cp_rx) = mpsc::unbounded_channel::<(u64, Instant)>();
    let mut follower = None;
    let mut verifier_task = None;
    let mut cp_rx = Some(cp_rx);
    if let Some(cp) = start_cp {
        let (latest_tx, latest_rx) = watch::channel(Arc::new(cp.clone()));
        follower = Some(tokio::spawn({
            let ctx = ctx.clone();
            async move { follow_checkpoints(ctx, cp, cp_tx, latest_tx).await }
        }));
        verifier_task = Some(tokio::spawn({
            let ctx = ctx.clone();
            async move { verify_entries(ctx, verify_rx, latest_rx).await }
        }));
    } else {
        // Nothing to verify against (--dry-run-endpoint, --no-verify): the clock only times adds.
        cp_rx = None;
    }
    let clock = tokio::spawn({
        let ctx = ctx.clone();
        async move { integration_clock(ctx, cp_rx, verify_tx).await }
    });
    let mut tasks = Vec::new();
    for w in 0..ctx.args.writers {
        let ctx = ctx.clone();
        tasks.push(tokio::spawn(async move { writer(ctx, w, seed).await }));
    }
    let read_pacer = Pacer::new(ctx.args.read_rate);
    let mut readers = Vec::new();
    for _ in 0..ctx.args.readers_full {
        let (ctx, p) = (ctx.clone(), read_pacer.clone());
        readers.push(tokio::spawn(async move { full_reader(ctx, p).await }));
    }
    for r in 0..ctx.args.readers_random {
        let (ctx, p) = (ctx.clone(), read_pacer.clone());
        readers.push(tokio::spawn(async move {
            random_reader(ctx, p, seed ^ r as u64).await
        }));
    }

    // Stop conditions and the per-second status.
    let mut timeline = Vec::new();
    let max_runtime = ctx.args.max_runtime;
    let write_for = ctx.args.duration;
    let tty = !ctx.args.quiet && std::io::IsTerminal::is_terminal(&std::io::stderr());
    let mut last_w = 0u64;
    // Growth is measured per checkpoint interval: checkpoints arrive about once an
    // interval, so growth sampled once a second would swing between 0 and twice the
    // rate as one or two of them fall in a second.
    let mut growth = GrowthPerCheckpoint::new(start_size);
    let (mut last_cpu, mut last_log_cpu, mut last_t) = (cpu_start, log_cpu_start, 0.0);
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    tick.tick().await;
    let mut write_end: Option<Duration> = None;
    loop {
        let ticked = tokio::select! {
            _ = tick.tick() => true,
            _ = tokio::time::sleep(Duration::from_millis(20)) => false,
        };
        if write_end.is_none() && !goal_or_time(&ctx, started, write_for, max_runtime) {
            ctx.stop_writing.store(true, Ordering::Relaxed);
            write_end = Some(started.elapsed());
        }
        if write_end.is_some() && tasks.iter().all(|t| t.is_finished()) {
            break;
        }
        let t = started.elapsed().as_secs_f64();
        growth.observe(t, ctx.stats.tree_size.load(Ordering::Relaxed));
        if !ticked {
            continue;
        }
        let s = &ctx.stats;
        let w = s.writes_new.load(Ordering::Relaxed) + s.writes_dup.load(Ordering::Relaxed);
        let (p50, p99) = s.take_tick();
        let (i50, i99) = s.take_integrate_tick();
        let cpu = cpu_seconds();
        let log_cpu = ctx.args.log_pid.and_then(process_cpu_seconds);
        let dt = (t - last_t).max(1e-3);
        let sample = Sample {
            t,
            writes_per_s: (w - last_w) as f64,
            growth_per_s: growth.per_second(t),
            p50_ms: p50,
            p99_ms: p99,
            in_flight: s.in_flight.load(Ordering::Relaxed),
            pushback: s.pushback.load(Ordering::Relaxed),
            integrate_p50_ms: i50,
            integrate_p99_ms: i99,
            verify_backlog: s.verify_backlog.load(Ordering::Relaxed),
            loadgen_cpu: (cpu - last_cpu) / dt,
            log_cpu: log_cpu
                .zip(last_log_cpu)
                .map(|(now, then)| (now - then) / dt),
        };
        (last_w, last_cpu, last_log_cpu, last_t) = (w, cpu, log_cpu, t);
        if !ctx.args.quiet {
            report::status_line(&sample, s, tty);
        }
        timeline.push(sample);
    }
    let write_seconds = write_end.unwrap_or_else(|| started.elapsed()).as_secs_f64();
    for t in tasks {
        let _ = t.await;
    }
    ctx.inbox.writers_done.store(true, Ordering::Release);
    let backlog_at_write_end = ctx.stats.verify_backlog.load(Ordering::Relaxed);
    // Let the clock see every written entry covered and the verifier check every
    // sampled one, within the runtime limit.
    let left = || {
        max_runtime
            .saturating_sub(started.elapsed())
            .max(Duration::from_secs(1))
    };
    match tokio::time::timeout(left(), clock).await {
        Ok(Ok(0)) => {}
        Ok(Ok(n)) => ctx.stats.fail(format!(
            "{n} entries written were never covered by a verified checkpoint"
        )),
        Ok(Err(e)) => ctx.stats.fail(format!("integration clock: {e}")),
        Err(_) => ctx.stats.fail(format!(
            "entries written were not covered by a verified checkpoint within --max-runtime {}",
            duration::show(max_runtime)
        )),
    }
    if let Some(v) = verifier_task
        && tokio::time::timeout(left(), v).await.is_err()
    {
        ctx.stats.fail(format!(
            "{} written entries were not verified within --max-runtime {}",
            ctx.stats.verify_backlog.load(Ordering::Relaxed),
            duration::show(max_runtime)
        ));
    }
    let verify_drain_seconds = (started.elapsed().as_secs_f64() - write_seconds).max(0.0);
    // Only now: on every core, the checks would hold up the checkpoint follower, and
    // with it the time to integrate of the last entries written.
    let deferred = check_deferred_scts(&ctx).await;
    ctx.stop_all.store(true, Ordering::Relaxed);
    for r in readers {
        let _ = r.await;
    }
    if let Some(f) = follower {
        let _ = f.await;
    }
    if tty {
        eprintln!();
    }
    let s = &ctx.stats;
    let total = started.elapsed().as_secs_f64();
    let writes_new = s.writes_new.load(Ordering::Relaxed);
    let writes_dup = s.writes_dup.load(Ordering::Relaxed);
    let write_errors = s.write_errors.load(Ordering::Relaxed);
    let end_size = s.tree_size.load(Ordering::Relaxed);
    let failures = s.failures();
    let mut reasons = failures.clone();
    if let Some(first) = &deferred.first_failure {
        // First: the list of failures may be full of what follows from it (entries
        // read back that are not what the SCT said).
        reasons.insert(
            0,
            format!(
                "{} SCTs checked after writing do not verify; the first: {first}",
                deferred.failed
            ),
        );
    }
    if write_errors > 0 {
        reasons.push(format!("{write_errors} adds failed"));
    }
    if ctx.args.leaf_write_goal > 0 && writes_new + writes_dup < ctx.args.leaf_write_goal {
        reasons.push(format!(
            "write goal missed: {} of {} adds acknowledged",
            writes_new + writes_dup,
            ctx.args.leaf_write_goal
        ));
    }
    let read_errors = s.read_errors.load(Ordering::Relaxed);
    if read_errors > 0 {
        reasons.push(format!("{read_errors} reads failed"));
    }
    let cpu = cpu_seconds() - cpu_start;
    let log_cpu = log_cpu_start
        .zip(ctx.args.log_pid.and_then(process_cpu_seconds))
        .map(|(a, b)| b - a);
    let adds = writes_new + writes_dup;
    let per_add = |secs: f64| {
        if adds == 0 {
            0.0
        } else {
            secs * 1e6 / adds as f64
        }
    };
    let report = Report {
        ok: reasons.is_empty(),
        failure_reasons: reasons,
        write_seconds,
        total_seconds: total,
        writes_new,
        writes_duplicate: writes_dup,
        pushback: s.pushback.load(Ordering::Relaxed),
        write_errors,
        write_rate_per_s: (writes_new + writes_dup) as f64 / write_seconds.max(1e-9),
        verified_entries: s.verified.load(Ordering::Relaxed),
        sampled_entries: ctx.sampled.load(Ordering::Relaxed),
        verification_failures: failures,
        error_samples: s
            .error_samples
            .lock()
            .map(|e| e.clone())
            .unwrap_or_default(),
        tree_size_start: start_size,
        tree_size_end: end_size,
        tree_growth: end_size.saturating_sub(start_size),
        tree_growth_per_s: end_size.saturating_sub(start_size) as f64 / write_seconds.max(1e-9),
        reads_ok: s.reads_ok.load(Ordering::Relaxed),
        read_errors,
        operations: vec![
            s.row("add (time in queue)", &s.add_latency, write_seconds),
            s.row("time to integrate", &s.integrate_latency, write_seconds),
            s.row("inclusion verified", &s.verify_latency, total),
            s.row("read tile/bundle", &s.read_latency, total),
        ],
        timeline,
        machine,
        transport: if ctx.args.h2c { "h2c" } else { "http/1.1" }.into(),
        loadgen_cpu_seconds: cpu,
        loadgen_cpu_us_per_add: per_add(cpu),
        log_cpu_seconds: log_cpu,
        log_cpu_us_per_add: log_cpu.map(per_add),
        verify_backlog_max: s.verify_backlog_max.load(Ordering::Relaxed),
        verify_backlog_at_write_end: backlog_at_write_end,
        verify_drain_seconds,
        mode: if ctx.ct.is_some() {
            "static-ct-api"
        } else {
            "tlog-tiles"
        }
        .into(),
        ct_chains_minted: ctx.ct.as_ref().map_or(0, |c| c.pool.len() as u64),
        ct_mint_seconds: ctx.ct.as_ref().map_or(0.0, |c| c.mint_seconds),
        ct_precerts: ctx
            .ct
            .as_ref()
            .map_or(0, |c| c.precerts.load(Ordering::Relaxed)),
        ct_scts_checked_after: deferred.checked,
        ct_sct_check_seconds: deferred.seconds,
    };
    if let Some(p) = &ctx.args.report_json {
        std::fs::write(p, serde_json::to_vec_pretty(&report)?)
            .with_context(|| format!("writing {}", p.display()))?;
    }
    if let Some(p) = &ctx.args.report_html {
        std::fs::write(p, report::html(&report))
            .with_context(|| format!("writing {}", p.display()))?;
    }
    Ok(report)
}

fn goal_or_time(ctx: &Ctx, started: Instant, duration: Duration, max_runtime: Duration) -> bool {
    let s = &ctx.stats;
    let acked = s.writes_new.load(Ordering::Relaxed) + s.writes_dup.load(Ordering::Relaxed);
    let e = started.elapsed();
    !(ctx.stop_writing.load(Ordering::Relaxed)
        || (ctx.args.leaf_write_goal > 0 && acked >= ctx.args.leaf_write_goal)
        || (!duration.is_zero() && e >= duration)
        || e >= max_runtime)
}

/// A writer's clients: one per write URL (its own connection, or a user of the URL's
/// shared h2c connections).
fn write_clients(ctx: &Ctx) -> Result<Vec<Client>, ClientError> {
    let args = &ctx.args;
    let bearer = args
        .bearer_token_write
        .as_deref()
        .or(args.bearer_token.as_deref());
    if ctx.write_pools.is_empty() {
        ctx.write_bases
            .iter()
            .map(|b| Client::new(b.clone(), bearer, ctx.timeout))
            .collect()
    } else {
        ctx.write_pools
            .iter()
            .map(|p| Client::h2c(p.clone(), bearer, ctx.timeout))
            .collect()
    }
}

/// An add that was not acknowledged: pushback (503, 429) is honoured by waiting as the
/// log asks and not counted as an error; anything else is.
async fn not_added(s: &Stats, what: &str, resp: Result<client::Response, ClientError>) {
    match resp {
        Ok(r)
            if r.status == StatusCode::SERVICE_UNAVAILABLE
                || r.status == StatusCode::TOO_MANY_REQUESTS =>
        {
            s.pushback.fetch_add(1, Ordering::Relaxed);
            let wait = Duration::from_secs(r.retry_after.unwrap_or(1).min(30));
            tokio::time::sleep(wait).await;
        }
        Ok(r) => {
            s.write_errors.fetch_add(1, Ordering::Relaxed);
            s.error(format!(
                "{what}: HTTP {} {}",
                r.status,
                String::from_utf8_lossy(&r.body).trim()
            ));
        }
        Err(e) => {
            s.write_errors.fetch_add(1, Ordering::Relaxed);
            s.error(format!("{what}: {e:#}"));
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

/// What every writer starts with: its clients (`None` when they cannot be made, the
/// error recorded) and a generator of its own.
fn writer_start(ctx: &Ctx, w: usize, seed: u64) -> Option<(Vec<Client>, Rng)> {
    match write_clients(ctx) {
        Ok(clients) => Some((
            clients,
            Rng(seed ^ (w as u64).wrapping_mul(0x1234_5678_9abc_def1)),
        )),
        Err(e) => {
            ctx.stats.error(e.to_string());
            None
        }
    }
}

async fn writer(ctx: Arc<Ctx>, w: usize, seed: u64) {
    if ctx.ct.is_some() {
        return ct_writer(ctx, w, seed).await;
    }
    let args = &ctx.args;
    let Some((mut clients, mut rng)) = writer_start(&ctx, w, seed) else {
        return;
    };
    let pacer = ctx.write_pacer.clone();
    let mut recent: Vec<Bytes> = Vec::with_capacity(64);
    let mut i = 0u64;
    let mut turn = w;
    let s = &ctx.stats;
    loop {
        if ctx.stop_writing.load(Ordering::Relaxed) {
            return;
        }
        if let Some(p) = &pacer {
            p.wait().await;
        }
        let leaf = if !recent.is_empty() && rng.chance(args.dup_chance) {
            recent[(rng.next() % recent.len() as u64) as usize].clone()
        } else {
            // One allocation per leaf, sized up front.
            let mut s = String::with_capacity(args.leaf_min_size.max(64));
            let _ = write!(s, "tlog-loadgen seed {seed:x} writer {w} leaf {i} ");
            let pad = args.leaf_min_size.saturating_sub(s.len());
            s.extend(std::iter::repeat_n('.', pad));
            i += 1;
            let b = Bytes::from(s);
            // Kept only to be sent again: a kept leaf is one more reference to count
            // and drop per add.
            if args.dup_chance > 0.0 {
                if recent.len() < 64 {
                    recent.push(b.clone());
                } else {
                    let k = (rng.next() % 64) as usize;
                    recent[k] = b.clone();
                }
            }
            b
        };
        turn = (turn + 1) % clients.len();
        let sent = Instant::now();
        s.in_flight.fetch_add(1, Ordering::Relaxed);
        let resp = clients[turn].send(Method::POST, "add", leaf.clone()).await;
        s.in_flight.fetch_sub(1, Ordering::Relaxed);
        match resp {
            Ok(r) if r.status == StatusCode::OK => {
                let index = std::str::from_utf8(&r.body)
                    .ok()
                    .and_then(|t| t.trim().parse::<u64>().ok());
                let Some(index) = index else {
                    s.write_errors.fetch_add(1, Ordering::Relaxed);
                    s.error(format!(
                        "POST /add: unparseable index {:?}",
                        String::from_utf8_lossy(&r.body)
                    ));
                    continue;
                };
                let rtt_us = micros(sent.elapsed());
                if r.duplicate {
                    s.writes_dup.fetch_add(1, Ordering::Relaxed);
                } else {
                    s.writes_new.fetch_add(1, Ordering::Relaxed);
                }
                let sampled = rng.chance(args.verify_fraction);
                if sampled {
                    ctx.sampled.fetch_add(1, Ordering::Relaxed);
                }
                ctx.inbox.put(Written {
                    index,
                    sent,
                    rtt_us,
                    duplicate: r.duplicate,
                    leaf: sampled.then_some(leaf),
                });
            }
            other => not_added(s, "POST /add", other).await,
        }
    }
}

/// Mint what a CT run submits (--ct): check its flags, load the root, mint the
/// intermediate and the pool of chains.
async fn prepare_ct(args: &Args) -> anyhow::Result<CtRun> {
    let key = args
        .log_public_key
        .as_deref()
        .context("--ct needs --log-public-key (the log's base64 DER public key)")?;
    let log = ct::LogIdentity::from_base64(key)?;
    let origin = args
        .origin
        .as_deref()
        .context("--ct needs --origin (the log's checkpoint origin)")?;
    // The note verifier is built from the same key: refuse it here, named, if it cannot be.
    tlogd_ct::Rfc6962Check::verifier(origin, &log.spki).context("--log-public-key")?;
    if !(0.0..=1.0).contains(&args.ct_precert_chance) {
        bail!("--ct-precert-chance must be within 0..=1");
    }
    let (Some(cert), Some(key)) = (&args.ct_root_cert, &args.ct_root_key) else {
        bail!(
            "--ct needs --ct-root-cert and --ct-root-key (a root the log trusts; `tlog-loadgen ct-root` makes one)"
        );
    };
    let read = |p: &PathBuf| {
        std::fs::read_to_string(p).with_context(|| format!("reading {}", p.display()))
    };
    let root = Arc::new(ct::load_root(&read(cert)?, &read(key)?)?);
    let n = match (args.ct_chains, args.leaf_write_goal) {
        (0, 0) => ct::DEFAULT_POOL,
        (0, goal) => usize::try_from(goal).context("--leaf-write-goal")?,
        (n, _) => n,
    }
    .max(1);
    let started = Instant::now();
    // Each run's intermediate and names are its own: reruns never submit the same chain.
    let tag = (std::process::id() as u64) << 40
        ^ std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
    let minter = Arc::new(ct::Minter::new(root, tag, args.ct_issuer_key)?);
    let pool = ct::mint_pool(minter, n, args.ct_precert_chance).await?;
    let mint_seconds = started.elapsed().as_secs_f64();
    if !args.quiet {
        eprintln!(
            "tlog-loadgen: minted {n} chains ({} precertificates) in {mint_seconds:.2} s",
            pool.iter().filter(|c| c.precert).count()
        );
    }
    Ok(CtRun {
        log,
        acked: (0..pool.len()).map(|_| AtomicU64::new(0)).collect(),
        pool,
        next: AtomicU64::new(0),
        precerts: AtomicU64::new(0),
        mint_seconds,
        deferred: Mutex::new(Vec::new()),
        deferred_count: AtomicUsize::new(0),
    })
}

/// The SCT signatures checked once writing stopped (`--ct-sct-checks after`).
#[derive(Default)]
struct DeferredChecks {
    checked: u64,
    seconds: f64,
    /// How many did not verify, and why the first did not.
    failed: u64,
    first_failure: Option<String>,
}

/// Check the SCT signatures deferred by `--ct-sct-checks after`, on every core, once
/// every entry written was integrated and verified; each that does not verify fails
/// its add, as it would have at once.
async fn check_deferred_scts(ctx: &Arc<Ctx>) -> DeferredChecks {
    let Some(ct) = &ctx.ct else {
        return DeferredChecks::default();
    };
    let started = Instant::now();
    let deferred = std::mem::take(&mut *lock(&ct.deferred));
    let n = deferred.len();
    if n == 0 {
        return DeferredChecks::default();
    }
    let deferred = Arc::new(deferred);
    let parts = std::thread::available_parallelism().map_or(2, |p| p.get());
    let per_part = n.div_ceil(parts);
    let mut jobs = Vec::new();
    for part in 0..parts {
        let (ctx, deferred) = (ctx.clone(), deferred.clone());
        // Each part answers how many of its SCTs did not verify, and why the first did not.
        jobs.push(tokio::task::spawn_blocking(move || {
            let (mut failed, mut first) = (0u64, None);
            let Some(ct) = &ctx.ct else {
                return (failed, first);
            };
            let end = ((part + 1) * per_part).min(deferred.len());
            for (c, sct) in deferred.get(part * per_part..end).unwrap_or_default() {
                let chain = &ct.pool[*c];
                if let Err(e) = ct.log.check_signature(chain, sct) {
                    ctx.stats.write_errors.fetch_add(1, Ordering::Relaxed);
                    failed += 1;
                    first.get_or_insert_with(|| format!("{} (chain {c}): SCT: {e}", chain.path()));
                }
            }
            (failed, first)
        }));
    }
    let (mut failed, mut first_failure) = (0, None);
    for j in jobs {
        match j.await {
            Ok((n, first)) => {
                failed += n;
                first_failure = first_failure.or(first);
            }
            Err(e) => ctx.stats.fail(format!("checking SCTs: {e}")),
        }
    }
    DeferredChecks {
        checked: n as u64,
        seconds: started.elapsed().as_secs_f64(),
        failed,
        first_failure,
    }
}

/// A CT writer (--ct): submits the minted chains, each SCT checked before its add
/// counts; a resubmission (--dup-chance) sends a chain this writer had acknowledged.
async fn ct_writer(ctx: Arc<Ctx>, w: usize, seed: u64) {
    let Some(ct) = &ctx.ct else { return };
    let args = &ctx.args;
    let Some((mut clients, mut rng)) = writer_start(&ctx, w, seed) else {
        return;
    };
    let pacer = ctx.write_pacer.clone();
    let mut recent: Vec<usize> = Vec::with_capacity(64);
    let mut turn = w;
    let s = &ctx.stats;
    let pool = ct.pool.len() as u64;
    // SCTs whose signature this writer defers (`--ct-sct-checks after`), handed over
    // when it stops.
    let mut deferred = Vec::new();
    loop {
        if ctx.stop_writing.load(Ordering::Relaxed) {
            lock(&ct.deferred).append(&mut deferred);
            return;
        }
        if let Some(p) = &pacer {
            p.wait().await;
        }
        let c = if !recent.is_empty() && rng.chance(args.dup_chance) {
            recent[(rng.next() % recent.len() as u64) as usize]
        } else {
            (ct.next.fetch_add(1, Ordering::Relaxed) % pool) as usize
        };
        let chain = &ct.pool[c];
        turn = (turn + 1) % clients.len();
        let sent = Instant::now();
        s.in_flight.fetch_add(1, Ordering::Relaxed);
        let resp = clients[turn]
            .send(Method::POST, chain.path(), chain.body.clone())
            .await;
        s.in_flight.fetch_sub(1, Ordering::Relaxed);
        let r = match resp {
            Ok(r) if r.status == StatusCode::OK => r,
            other => {
                not_added(s, chain.path(), other).await;
                continue;
            }
        };
        let defer = args.ct_sct_checks == ct::SctChecks::After
            && ct.deferred_count.fetch_add(1, Ordering::Relaxed) < ct::MAX_DEFERRED_SCTS;
        let checked = ct.log.read_sct(&r.body).and_then(|sct| {
            if defer {
                let fields = sct.fields.clone();
                deferred.push((c, sct));
                Ok(fields)
            } else {
                ct.log.check_signature(chain, &sct).map(|()| sct.fields)
            }
        });
        let sct = match checked {
            Ok(sct) => sct,
            Err(e) => {
                s.write_errors.fetch_add(1, Ordering::Relaxed);
                s.fail(format!("{} (chain {c}): SCT: {e}", chain.path()));
                continue;
            }
        };
        let rtt_us = micros(sent.elapsed());
        let index = sct.index;
        // The log's marker, or the index this chain was already given.
        let duplicate = ct.acked[c].swap(index + 1, Ordering::Relaxed) == index + 1 || r.duplicate;
        if duplicate {
            s.writes_dup.fetch_add(1, Ordering::Relaxed);
        } else {
            s.writes_new.fetch_add(1, Ordering::Relaxed);
            if args.dup_chance > 0.0 {
                if recent.len() < 64 {
                    recent.push(c);
                } else {
                    recent[(rng.next() % 64) as usize] = c;
                }
            }
        }
        if chain.precert {
            ct.precerts.fetch_add(1, Ordering::Relaxed);
        }
        let sampled = rng.chance(args.verify_fraction);
        if sampled {
            ctx.sampled.fetch_add(1, Ordering::Relaxed);
        }
        ctx.inbox.put(Written {
            index,
            sent,
            rtt_us,
            duplicate,
            leaf: sampled.then(|| Bytes::from(ct::expected_leaf(chain, &sct))),
        });
    }
}

/// Follow checkpoints: fetch one every --checkpoint-poll, verify its signature and its
/// consistency with the previous one, and hand each verified checkpoint that grew the
/// tree, with the instant it was verified, to the integration clock and the verifier.
/// Runs until the run stops.
async fn follow_checkpoints(
    ctx: Arc<Ctx>,
    start: Checkpoint,
    clock: mpsc::UnboundedSender<(u64, Instant)>,
    latest: watch::Sender<Arc<Checkpoint>>,
) {
    let s = &ctx.stats;
    let mut reader = match ctx.reader() {
        // Consistency proofs between successive checkpoints need right-edge tiles only.
        Ok(r) => r.with_tile_cache(VERIFY_TILE_CACHE),
        Err(e) => return s.fail(e.to_string()),
    };
    let mut prev = start;
    let poll = ctx.args.checkpoint_poll.max(Duration::from_millis(1));
    while !ctx.stop_all.load(Ordering::Relaxed) {
        tokio::time::sleep(poll).await;
        let cp = match reader.checkpoint().await {
            Ok(cp) => cp,
            Err(e) => {
                s.fail(format!("{e:#}"));
                continue;
            }
        };
        if let Err(e) = reader.verify_consistency(&prev, &cp).await {
            s.fail(format!("{e:#}"));
            continue;
        }
        if cp.size == prev.size {
            continue;
        }
        let verified_at = Instant::now();
        s.tree_size.store(cp.size, Ordering::Relaxed);
        let _ = clock.send((cp.size, verified_at));
        latest.send_replace(Arc::new(cp.clone()));
        prev = cp;
    }
}

/// The time-to-integrate clock: an entry's clock stops at the first checkpoint fetched
/// and verified after its add was sent whose tree covers its index, whenever the
/// verification of the entry itself happens. Sampled entries are passed on to the
/// verifier. Returns, once the writers are done, how many entries were never covered
/// (the follower stopped first).
async fn integration_clock(
    ctx: Arc<Ctx>,
    mut checkpoints: Option<mpsc::UnboundedReceiver<(u64, Instant)>>,
    to_verify: mpsc::UnboundedSender<Vec<ToVerify>>,
) -> usize {
    let timing_only = checkpoints.is_none();
    let s = &ctx.stats;
    // Checkpoints are kept while an add sent before them may still be answered.
    let mut clock = IntegrationClock::new(ctx.timeout + Duration::from_secs(5));
    let mut batch = Vec::new();
    let (mut rtts, mut integrated, mut done) = (Vec::new(), Vec::new(), Vec::new());
    let mut every = tokio::time::interval(INBOX_PERIOD);
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = every.tick() => {
                // Read before taking: every add put before the writers were done is in
                // this batch or an earlier one.
                let writers_done = ctx.inbox.writers_done.load(Ordering::Acquire);
                ctx.inbox.take(&mut batch);
                rtts.clear();
                integrated.clear();
                let mut sampled = Vec::new();
                for w in batch.drain(..) {
                    rtts.push(w.rtt_us);
                    if timing_only {
                        continue;
                    }
                    if let Some(leaf) = w.leaf {
                        sampled.push(ToVerify { index: w.index, sent: w.sent, leaf });
                    }
                    if !w.duplicate
                        && let Some(d) = clock.written(w.index, w.sent)
                    {
                        integrated.push(micros(d));
                    }
                }
                s.adds_done(&rtts);
                s.integrated(&integrated);
                if !sampled.is_empty() {
                    s.backlog_add(sampled.len() as u64);
                    let _ = to_verify.send(sampled);
                }
                if writers_done && clock.waiting() == 0 {
                    return 0;
                }
            }
            cp = async {
                match checkpoints.as_mut() {
                    Some(c) => c.recv().await,
                    None => std::future::pending().await,
                }
            } => {
                let Some((size, at)) = cp else {
                    // The follower stopped (end of the run): what is left is uncovered.
                    return clock.waiting();
                };
                done.clear();
                clock.verified(size, at, &mut done);
                let us: Vec<u64> = done.iter().map(|d| micros(*d)).collect();
                s.integrated(&us);
            }
        }
    }
}

fn micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

/// Tiles of entries the verifier checks at once. Each check waits for a bundle, a tile
/// and maybe a proof from a log that is busy with the writers' adds; one at a time, a
/// log appending 80k entries/s outran it (the backlog grew by ~20k entries/s, held in
/// memory, and most of the checking happened after the run it belonged to).
const VERIFY_IN_FLIGHT: usize = 8;

/// Full tiles each of the verifier's readers keeps (8 KiB each).
const VERIFY_TILE_CACHE: usize = 64;

/// Check each sampled entry's bytes in its bundle and its hash in its level-0 tile,
/// the tile proven included in the newest verified checkpoint: one bundle, one tile
/// and one proof per tile of entries, however many entries, [`VERIFY_IN_FLIGHT`] tiles
/// at once (each with a reader of its own). Ends when the writers are done and
/// everything was checked, or the run stops.
async fn verify_entries(
    ctx: Arc<Ctx>,
    mut rx: mpsc::UnboundedReceiver<Vec<ToVerify>>,
    mut latest: watch::Receiver<Arc<Checkpoint>>,
) {
    let s = &ctx.stats;
    let mut idle = Vec::with_capacity(VERIFY_IN_FLIGHT);
    for _ in 0..VERIFY_IN_FLIGHT {
        match ctx.reader() {
            // Tiles are checked near the log's right edge, in order: the upper tiles
            // on their proofs' paths are few (a reader's default cache, 32 MiB, would
            // fill with upper tiles never needed again over a long run).
            Ok(r) => idle.push(r.with_tile_cache(VERIFY_TILE_CACHE)),
            Err(e) => return s.fail(e.to_string()),
        }
    }
    let mut checking = tokio::task::JoinSet::new();
    // (index, arrival) -> the bytes and when the add was sent; an index may come
    // more than once (duplicates).
    let mut pending: BTreeMap<(u64, u64), (Bytes, Instant)> = BTreeMap::new();
    let mut arrivals = 0u64;
    let mut add = |pending: &mut BTreeMap<_, _>, batch: Vec<ToVerify>| {
        for v in batch {
            arrivals += 1;
            pending.insert((v.index, arrivals), (v.leaf, v.sent));
        }
    };
    let mut input_done = false;
    loop {
        loop {
            match rx.try_recv() {
                Ok(batch) => add(&mut pending, batch),
                Err(mpsc::error::TryRecvError::Empty) => break,
                Err(mpsc::error::TryRecvError::Disconnected) => {
                    input_done = true;
                    break;
                }
            }
        }
        if input_done && pending.is_empty() && checking.is_empty() {
            return;
        }
        if ctx.stop_all.load(Ordering::Relaxed) {
            return;
        }
        let cp = latest.borrow_and_update().clone();
        let ready = match pending.first_key_value() {
            Some(((first, _), _)) if *first < cp.size => Some(first / TILE_WIDTH),
            _ => None,
        };
        if let Some(t) = ready
            && let Some(mut reader) = idle.pop()
        {
            let end = ((t + 1) * TILE_WIDTH).min(cp.size);
            let rest = pending.split_off(&(end, 0));
            let group = std::mem::replace(&mut pending, rest);
            let ctx = ctx.clone();
            checking.spawn(async move {
                verify_tile(&mut reader, &ctx.stats, &cp, t, group).await;
                reader
            });
            continue;
        }
        // Nothing the newest checkpoint covers, or every reader busy: wait for more
        // entries, a newer checkpoint or a reader.
        tokio::select! {
            v = rx.recv(), if !input_done => match v {
                Some(batch) => add(&mut pending, batch),
                None => input_done = true,
            },
            changed = latest.changed(), if ready.is_none() => if changed.is_err() {
                // The follower is gone: the run is stopping.
                tokio::time::sleep(Duration::from_millis(50)).await;
            },
            done = checking.join_next(), if !checking.is_empty() => match done {
                Some(Ok(reader)) => idle.push(reader),
                Some(Err(e)) => return s.fail(format!("verifier: {e}")),
                None => {}
            },
        }
    }
}

/// One tile's worth of sampled entries (all in level-0 tile `t`, covered by `cp`).
async fn verify_tile(
    reader: &mut LogReader<HttpFetcher>,
    s: &Stats,
    cp: &Checkpoint,
    t: u64,
    group: BTreeMap<(u64, u64), (Bytes, Instant)>,
) {
    let n = group.len() as u64;
    let bundle_id = reader.bundle_id(t, width_at(t, cp.size));
    let started = Instant::now();
    let bundle = match reader.bundle(t, cp.size).await {
        Ok(b) => b,
        Err(e) => {
            s.fail(format!("{e:#}"));
            return s.backlog_done(n);
        }
    };
    s.read_done(micros(started.elapsed()), true);
    let hashes = match reader.proven_leaf_hashes(cp, t).await {
        Ok(h) => h,
        Err(e) => {
            s.fail(format!("{e:#}"));
            return s.backlog_done(n);
        }
    };
    let mut verified = Vec::with_capacity(n as usize);
    for ((index, _), (leaf, sent)) in group {
        let j = (index % TILE_WIDTH) as usize;
        if bundle.get(j).map(Vec::as_slice) != Some(&leaf[..]) {
            s.fail(format!(
                "{}: entry {index} is not the bytes that were written",
                bundle_id.path()
            ));
        } else if hashes.get(j) != Some(&reader.leaf_hash(&leaf)) {
            s.fail(format!(
                "{}: hash {j} is not the leaf hash of entry {index}",
                TileId::hash(0, t, bundle_id.width).path()
            ));
        } else {
            verified.push(micros(sent.elapsed()));
        }
    }
    s.verified_batch(&verified);
    s.backlog_done(n);
}

/// Read every bundle in order, recompute the hash tiles and root, compare with the log.
async fn full_reader(ctx: Arc<Ctx>, pacer: Option<Arc<Pacer>>) {
    let s = &ctx.stats;
    let mut reader = match ctx.reader() {
        Ok(r) => r,
        Err(e) => return s.fail(e.to_string()),
    };
    let mut tree = TreeRebuilder::new();
    while !ctx.stop_all.load(Ordering::Relaxed) {
        let cp = match reader.checkpoint().await {
            Ok(c) => c,
            Err(e) => return s.fail(format!("full reader: {e:#}")),
        };
        // Full bundles extend the permanent tree; the tail is checked on a copy.
        while tree.size() + TILE_WIDTH <= cp.size && !ctx.stop_all.load(Ordering::Relaxed) {
            if let Some(p) = &pacer {
                p.wait().await;
            }
            let n = tree.size() / TILE_WIDTH;
            if let Err(e) = read_and_check(&mut reader, s, &mut tree, n, cp.size).await {
                return s.fail(format!("full reader: {e:#}"));
            }
        }
        if ctx.stop_all.load(Ordering::Relaxed) {
            // Stopped part-way through: the tree does not reach `cp` yet.
            return;
        }
        if cp.size % TILE_WIDTH != 0 {
            let mut tail = tree.clone();
            let n = tail.size() / TILE_WIDTH;
            if let Err(e) = read_and_check(&mut reader, s, &mut tail, n, cp.size).await {
                return s.fail(format!("full reader: {e:#}"));
            }
            if tail.root() != cp.root {
                return s.fail(format!(
                    "full reader: the bundles hash to another root than checkpoint {}",
                    cp.size
                ));
            }
        } else if tree.size() == cp.size && tree.root() != cp.root {
            return s.fail(format!(
                "full reader: the bundles hash to another root than checkpoint {}",
                cp.size
            ));
        }
        tokio::time::sleep(ctx.args.checkpoint_poll.max(Duration::from_millis(1))).await;
    }
}

/// One bundle through the shared check (tlog-verify): the hash tiles it determines are
/// recomputed and compared with the log's; every read is timed.
async fn read_and_check(
    reader: &mut LogReader<HttpFetcher>,
    s: &Stats,
    tree: &mut TreeRebuilder,
    n: u64,
    size: u64,
) -> anyhow::Result<()> {
    let t = Instant::now();
    let entries = reader.bundle(n, size).await?;
    s.read_done(t.elapsed().as_micros() as u64, true);
    let bundle = reader.bundle_id(n, width_at(n, size));
    let tiles = if reader.personality().is_none() {
        tree.append_bundle(&bundle, &entries, true)?
    } else {
        // A CT log's data tiles: each TileLeaf hashes as its MerkleTreeLeaf.
        tree.append_bundle_by(&bundle, &entries, true, |e| reader.leaf_hash(e))?
    };
    for (id, want) in tiles {
        let t = Instant::now();
        let (got_id, got) = reader.raw(&id).await?;
        s.read_done(t.elapsed().as_micros() as u64, true);
        compare_tile(&id, &want, &got_id, &got, &bundle)?;
    }
    Ok(())
}

/// Read random entries and verify an inclusion proof for each.
async fn random_reader(ctx: Arc<Ctx>, pacer: Option<Arc<Pacer>>, seed: u64) {
    let s = &ctx.stats;
    let mut reader = match ctx.reader() {
        Ok(r) => r,
        Err(e) => return s.fail(e.to_string()),
    };
    let mut rng = Rng(seed);
    let mut cp = None;
    let mut reads = 0u64;
    while !ctx.stop_all.load(Ordering::Relaxed) {
        if let Some(p) = &pacer {
            p.wait().await;
        }
        if reads.is_multiple_of(64) || cp.is_none() {
            match reader.checkpoint().await {
                Ok(c) => cp = Some(c),
                Err(e) => return s.fail(format!("random reader: {e:#}")),
            }
        }
        reads += 1;
        let Some(c) = &cp else { continue };
        if c.size == 0 {
            tokio::time::sleep(Duration::from_millis(50)).await;
            cp = None;
            continue;
        }
        let index = rng.next() % c.size;
        let t = Instant::now();
        let bundle = match reader.bundle(index / TILE_WIDTH, c.size).await {
            Ok(b) => b,
            Err(e) => return s.fail(format!("random reader: {e:#}")),
        };
        s.read_done(t.elapsed().as_micros() as u64, true);
        let Some(entry) = bundle.get((index % TILE_WIDTH) as usize) else {
            return s.fail(format!(
                "random reader: entry {index} missing from its bundle"
            ));
        };
        let hash = reader.leaf_hash(entry);
        if let Err(e) = reader.verify_inclusion(c, index, &hash).await {
            return s.fail(format!(
                "random reader: {e:#} (entry read from {})",
                reader
                    .bundle_id(
                        index / TILE_WIDTH,
                        (c.size - index / TILE_WIDTH * TILE_WIDTH).min(TILE_WIDTH) as u16
                    )
                    .path()
            ));
        }
        s.verified.fetch_add(1, Ordering::Relaxed);
    }
}

/// A trivial endpoint answering every `POST /add` with the next index: measures the
/// load generator alone.
async fn dry_run_endpoint() -> anyhow::Result<(std::net::SocketAddr, tokio::task::JoinHandle<()>)> {
    use axum::routing::post;
    let next = Arc::new(AtomicU64::new(0));
    let app = axum::Router::new().route(
        "/add",
        post(move || {
            let next = next.clone();
            async move { next.fetch_add(1, Ordering::Relaxed).to_string() }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let h = tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    Ok((addr, h))
}

/// Tree growth over the latest checkpoint interval: the two newest checkpoint sizes
/// seen, and when they were seen.
#[derive(Debug)]
struct GrowthPerCheckpoint {
    /// (seconds since start, size) of the newest checkpoint, and of the one before.
    newest: Option<(f64, u64)>,
    before: Option<(f64, u64)>,
    start_size: u64,
}

impl GrowthPerCheckpoint {
    fn new(start_size: u64) -> Self {
        GrowthPerCheckpoint {
            newest: None,
            before: None,
            start_size,
        }
    }

    /// The verified tree size at `t` (seconds since the start, when the size was
    /// `start_size`).
    fn observe(&mut self, t: f64, size: u64) {
        let newest = self.newest.map_or(self.start_size, |(_, s)| s);
        if size > newest {
            self.before = Some(self.newest.unwrap_or((0.0, self.start_size)));
            self.newest = Some((t, size));
        }
    }

    /// Entries per second over the latest interval between two checkpoints; once no
    /// checkpoint has come for longer than that interval, the growth since the one
    /// before spread over the time up to `now`, so a stalled log falls towards 0.
    fn per_second(&self, now: f64) -> f64 {
        let (Some((t1, s1)), Some((t0, s0))) = (self.newest, self.before) else {
            return 0.0;
        };
        let interval = t1 - t0;
        if interval <= 0.0 {
            return 0.0;
        }
        let span = if now - t1 > interval {
            now - t0
        } else {
            interval
        };
        s1.saturating_sub(s0) as f64 / span
    }
}

#[cfg(test)]
mod growth_tests {
    use super::GrowthPerCheckpoint;

    #[test]
    fn growth_is_per_checkpoint_interval_not_per_second() {
        // 1,000 entries/s, a checkpoint every 1.02 s, sampled every second: the per-second
        // difference would read 0 or ~2,000 now and then; this reads ~1,000 throughout.
        let mut g = GrowthPerCheckpoint::new(0);
        let mut samples = Vec::new();
        let mut next_cp = 1.02;
        let mut t = 0.0;
        while t < 30.0 {
            t += 0.02;
            if t >= next_cp {
                g.observe(t, (next_cp * 1000.0) as u64);
                next_cp += 1.02;
            }
            if ((t * 50.0).round() as u64).is_multiple_of(50) && t > 3.0 {
                samples.push(g.per_second(t));
            }
        }
        assert!(!samples.is_empty());
        for r in samples {
            assert!((900.0..1100.0).contains(&r), "{r}");
        }
        // A stalled log: no checkpoint for 10 s, the rate falls.
        assert!(g.per_second(t + 10.0) < 200.0);
    }
}
