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

mod args;
mod read;
mod write;

pub use args::{Args, CtRootArgs};
use read::{
    follow_checkpoints, full_reader, integration_clock, micros, random_reader, verify_entries,
};
use write::{check_deferred_scts, prepare_ct, writer};

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
use crate::reader::LogReader;
use crate::stats::{OpRow, Sample, Stats, lock};

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
    /// `http/1.1`, `h2c` or `h2` (over TLS).
    pub transport: String,
    /// Loadgen CPU time (user + system) over the whole run, verification included (s).
    pub loadgen_cpu_seconds: f64,
    /// Loadgen CPU time per acknowledged add (µs); 0 when nothing was added.
    pub loadgen_cpu_us_per_add: f64,
    /// The log's process (`--log-pid`): its CPU time over the run (s).
    pub log_cpu_seconds: Option<f64>,
    /// The log's CPU time per acknowledged add (µs).
    pub log_cpu_us_per_add: Option<f64>,
    /// The log's CPU time from the start until writing stopped, per acknowledged add
    /// (µs): the adds and the reads made meanwhile, not the checks after writing.
    pub log_cpu_us_per_add_writing: Option<f64>,
    /// The log's peak resident memory since it started (`VmHWM`, MiB), read at the
    /// end of the run.
    pub log_peak_rss_mib: Option<f64>,
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
    /// With --ct: each class of chain submitted.
    pub ct_classes: Vec<CtClassReport>,
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

/// A process's peak resident set (`VmHWM` in /proc/PID/status), in MiB.
fn process_peak_rss_mib(pid: u32) -> Option<f64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kib = line
        .trim_start_matches("VmHWM:")
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse::<f64>()
        .ok()?;
    Some(kib / 1024.0)
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
    /// Per [`ct::ChainClass`]: submissions, acknowledgements, pushback, latency.
    classes: [ClassStats; 4],
    /// Seconds minting took.
    mint_seconds: f64,
    /// SCTs whose signature is checked once writing stops (`--ct-sct-checks after`),
    /// with the chain each answered.
    deferred: Mutex<Vec<(usize, ct::UncheckedSct)>>,
    /// How many were deferred (at most [`ct::MAX_DEFERRED_SCTS`]).
    deferred_count: AtomicUsize,
}

/// One [`ct::ChainClass`]'s submissions.
struct ClassStats {
    sent: AtomicU64,
    acked: AtomicU64,
    pushback: AtomicU64,
    /// Round trips of the acknowledged ones (µs).
    latency: Mutex<hdrhistogram::Histogram<u64>>,
}

impl Default for ClassStats {
    fn default() -> Self {
        ClassStats {
            sent: AtomicU64::new(0),
            acked: AtomicU64::new(0),
            pushback: AtomicU64::new(0),
            latency: Mutex::new(stats::histogram()),
        }
    }
}

/// One class of CT submissions in the report (`--ct-scts-chance`, `--ct-old-chance`).
#[derive(Debug, Clone, Serialize)]
pub struct CtClassReport {
    /// `precertificate`, `fresh`, `with-scts` or `old`.
    pub class: String,
    /// Submissions sent.
    pub sent: u64,
    /// Answered with an SCT.
    pub acked: u64,
    /// Answered 429 or 503 (not sent again: the writer moves to its next chain).
    pub pushback: u64,
    /// Add round trip of the acknowledged ones, p50 and p99 (ms).
    pub add_p50_ms: f64,
    /// See `add_p50_ms`.
    pub add_p99_ms: f64,
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
    let latency_from = (!args.latency_warmup.is_zero()).then(|| started + args.latency_warmup);
    let ctx = Arc::new(Ctx {
        timeout: args.http_timeout.max(Duration::from_millis(100)),
        write_pacer: Pacer::new(args.write_rate),
        args,
        ct: ct_run,
        stats: Stats {
            latency_from,
            ..Stats::default()
        },
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
    // The log's CPU when writing stopped: what the adds cost it, without serving the
    // reads that check them afterwards (a CT run's deferred SCT checks re-read whole
    // data tiles).
    let mut log_cpu_at_write_end = None;
    loop {
        let ticked = tokio::select! {
            _ = tick.tick() => true,
            _ = tokio::time::sleep(Duration::from_millis(20)) => false,
        };
        if write_end.is_none() && !goal_or_time(&ctx, started, write_for, max_runtime) {
            ctx.stop_writing.store(true, Ordering::Relaxed);
            write_end = Some(started.elapsed());
            log_cpu_at_write_end = ctx.args.log_pid.and_then(process_cpu_seconds);
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
    let log_cpu_writing = log_cpu_start.zip(log_cpu_at_write_end).map(|(a, b)| b - a);
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
        transport: match (ctx.args.h2c, ctx.args.log_url.starts_with("https://")) {
            (true, true) => "h2",
            (true, false) => "h2c",
            (false, _) => "http/1.1",
        }
        .into(),
        loadgen_cpu_seconds: cpu,
        loadgen_cpu_us_per_add: per_add(cpu),
        log_cpu_seconds: log_cpu,
        log_cpu_us_per_add: log_cpu.map(per_add),
        log_cpu_us_per_add_writing: log_cpu_writing.map(per_add),
        log_peak_rss_mib: ctx.args.log_pid.and_then(process_peak_rss_mib),
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
        ct_classes: ctx.ct.as_ref().map_or_else(Vec::new, |c| {
            ct::ChainClass::ALL
                .iter()
                .zip(&c.classes)
                .filter(|(_, s)| s.sent.load(Ordering::Relaxed) > 0)
                .map(|(class, s)| {
                    let h = lock(&s.latency);
                    CtClassReport {
                        class: class.label().into(),
                        sent: s.sent.load(Ordering::Relaxed),
                        acked: s.acked.load(Ordering::Relaxed),
                        pushback: s.pushback.load(Ordering::Relaxed),
                        add_p50_ms: h.value_at_quantile(0.5) as f64 / 1000.0,
                        add_p99_ms: h.value_at_quantile(0.99) as f64 / 1000.0,
                    }
                })
                .collect()
        }),
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

#[cfg(test)]
mod log_process_tests {
    use super::{process_cpu_seconds, process_peak_rss_mib};

    #[test]
    fn a_live_process_has_cpu_time_and_a_peak_rss_and_a_missing_one_has_neither() {
        // This test's own process: it has run, and holds at least its binary.
        let me = std::process::id();
        let rss = process_peak_rss_mib(me).expect("VmHWM of this process");
        assert!(rss > 0.0, "peak RSS {rss} MiB");
        assert!(process_cpu_seconds(me).is_some());
        // Above the kernel's PID limit (4,194,304): never a process.
        assert_eq!(process_peak_rss_mib(u32::MAX), None);
        assert_eq!(process_cpu_seconds(u32::MAX), None);
    }
}
