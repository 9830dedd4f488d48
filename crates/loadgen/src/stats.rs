//! Counters, latency histograms and the per-second timeline.

use std::sync::Mutex;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};

use hdrhistogram::Histogram;
use serde::Serialize;

/// Microsecond histogram up to one hour, 3 significant digits.
pub fn histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 3_600_000_000, 3).unwrap_or_else(|_| unreachable!("valid bounds"))
}

/// Everything the tasks record, shared.
pub struct Stats {
    /// Adds answered 200 with a new index.
    pub writes_new: AtomicU64,
    /// Adds answered 200 as duplicates.
    pub writes_dup: AtomicU64,
    /// 503/429 answers.
    pub pushback: AtomicU64,
    /// Failed adds (other statuses, transport errors).
    pub write_errors: AtomicU64,
    /// Adds in flight.
    pub in_flight: AtomicI64,
    /// Reads that succeeded.
    pub reads_ok: AtomicU64,
    /// Reads that failed (transport, status).
    pub read_errors: AtomicU64,
    /// Entries whose bytes and inclusion proof were verified.
    pub verified: AtomicU64,
    /// Size of the latest verified checkpoint.
    pub tree_size: AtomicU64,
    /// Histograms (µs): add round trip, time to integrate, reads.
    pub add_latency: Mutex<Histogram<u64>>,
    /// Add round trip of the current second, for the status line.
    pub add_latency_tick: Mutex<Histogram<u64>>,
    /// POST until the first checkpoint covering the index was fetched and verified
    /// (signature, consistency with the previous one); new entries only.
    pub integrate_latency: Mutex<Histogram<u64>>,
    /// Time to integrate of the entries covered in the current second.
    pub integrate_latency_tick: Mutex<Histogram<u64>>,
    /// POST until the entry's bytes and inclusion were checked (lags behind time to
    /// integrate by the verification backlog).
    pub verify_latency: Mutex<Histogram<u64>>,
    /// Sampled entries waiting for their bytes and inclusion to be checked.
    pub verify_backlog: AtomicU64,
    /// The largest backlog seen.
    pub verify_backlog_max: AtomicU64,
    /// Tile and bundle reads.
    pub read_latency: Mutex<Histogram<u64>>,
    /// Verification failures, each naming what was wrong.
    pub failures: Mutex<Vec<String>>,
    /// Transport and status errors (first few, for the report).
    pub error_samples: Mutex<Vec<String>>,
    /// Adds answered before this are left out of the add latency figures
    /// (`--latency-warmup`); `None`: none are.
    pub latency_from: Option<std::time::Instant>,
}

impl Default for Stats {
    fn default() -> Self {
        Stats {
            writes_new: AtomicU64::new(0),
            writes_dup: AtomicU64::new(0),
            pushback: AtomicU64::new(0),
            write_errors: AtomicU64::new(0),
            in_flight: AtomicI64::new(0),
            reads_ok: AtomicU64::new(0),
            read_errors: AtomicU64::new(0),
            verified: AtomicU64::new(0),
            tree_size: AtomicU64::new(0),
            add_latency: Mutex::new(histogram()),
            add_latency_tick: Mutex::new(histogram()),
            integrate_latency: Mutex::new(histogram()),
            integrate_latency_tick: Mutex::new(histogram()),
            verify_latency: Mutex::new(histogram()),
            verify_backlog: AtomicU64::new(0),
            verify_backlog_max: AtomicU64::new(0),
            read_latency: Mutex::new(histogram()),
            failures: Mutex::new(Vec::new()),
            error_samples: Mutex::new(Vec::new()),
            latency_from: None,
        }
    }
}

pub(crate) fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// (p50, p99) in ms of a per-second histogram, which is then emptied.
fn take_quantiles(h: &Mutex<Histogram<u64>>) -> (f64, f64) {
    let mut h = lock(h);
    let r = if h.is_empty() {
        (0.0, 0.0)
    } else {
        (
            h.value_at_quantile(0.5) as f64 / 1000.0,
            h.value_at_quantile(0.99) as f64 / 1000.0,
        )
    };
    h.reset();
    r
}

impl Stats {
    /// Whether an add answered now counts in the latency figures (past the warm-up).
    pub fn counts_latency(&self) -> bool {
        self.latency_from
            .is_none_or(|from| std::time::Instant::now() >= from)
    }

    /// Record add round trips (one lock per batch).
    pub fn adds_done(&self, us: &[u64]) {
        if us.is_empty() || !self.counts_latency() {
            return;
        }
        for h in [&self.add_latency, &self.add_latency_tick] {
            let mut h = lock(h);
            for v in us {
                let _ = h.record((*v).max(1));
            }
        }
    }

    /// Record times to integrate (one lock per batch: a checkpoint covers thousands).
    pub fn integrated(&self, us: &[u64]) {
        if us.is_empty() {
            return;
        }
        for h in [&self.integrate_latency, &self.integrate_latency_tick] {
            let mut h = lock(h);
            for v in us {
                let _ = h.record((*v).max(1));
            }
        }
    }

    /// Record entries whose bytes and inclusion were checked, with their time since the
    /// add was sent.
    pub fn verified_batch(&self, us: &[u64]) {
        self.verified.fetch_add(us.len() as u64, Ordering::Relaxed);
        let mut h = lock(&self.verify_latency);
        for v in us {
            let _ = h.record((*v).max(1));
        }
    }

    /// `n` more entries wait for verification.
    pub fn backlog_add(&self, n: u64) {
        let now = self.verify_backlog.fetch_add(n, Ordering::Relaxed) + n;
        self.verify_backlog_max.fetch_max(now, Ordering::Relaxed);
    }

    /// `n` entries left the verification backlog (checked, or failed).
    pub fn backlog_done(&self, n: u64) {
        self.verify_backlog.fetch_sub(n, Ordering::Relaxed);
    }

    /// Record a read.
    pub fn read_done(&self, us: u64, ok: bool) {
        if ok {
            self.reads_ok.fetch_add(1, Ordering::Relaxed);
            let _ = lock(&self.read_latency).record(us.max(1));
        } else {
            self.read_errors.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// A verification failure: the run fails.
    pub fn fail(&self, what: String) {
        let mut f = lock(&self.failures);
        if f.len() < 100 {
            f.push(what);
        }
    }

    /// A transport or status error (kept as a sample).
    pub fn error(&self, what: String) {
        let mut f = lock(&self.error_samples);
        if f.len() < 20 {
            f.push(what);
        }
    }

    /// Take the current second's add latencies: (p50, p99) in ms.
    pub fn take_tick(&self) -> (f64, f64) {
        take_quantiles(&self.add_latency_tick)
    }

    /// Take the current second's times to integrate: (p50, p99) in ms.
    pub fn take_integrate_tick(&self) -> (f64, f64) {
        take_quantiles(&self.integrate_latency_tick)
    }

    /// Failures so far.
    pub fn failures(&self) -> Vec<String> {
        lock(&self.failures).clone()
    }

    /// One report row from a histogram.
    pub fn row(&self, name: &str, h: &Mutex<Histogram<u64>>, secs: f64) -> OpRow {
        let h = lock(h);
        let ms = |v: u64| v as f64 / 1000.0;
        OpRow {
            operation: name.to_string(),
            count: h.len(),
            rate_per_s: if secs > 0.0 {
                h.len() as f64 / secs
            } else {
                0.0
            },
            mean_ms: if h.is_empty() { 0.0 } else { h.mean() / 1000.0 },
            p50_ms: ms(h.value_at_quantile(0.5)),
            p90_ms: ms(h.value_at_quantile(0.9)),
            p99_ms: ms(h.value_at_quantile(0.99)),
            max_ms: ms(h.max()),
        }
    }
}

/// One row of the final table.
#[derive(Clone, Debug, Serialize)]
pub struct OpRow {
    /// Operation name.
    pub operation: String,
    /// Samples.
    pub count: u64,
    /// Samples per second over the run.
    pub rate_per_s: f64,
    /// Mean (ms).
    pub mean_ms: f64,
    /// Median (ms).
    pub p50_ms: f64,
    /// 90th percentile (ms).
    pub p90_ms: f64,
    /// 99th percentile (ms).
    pub p99_ms: f64,
    /// Maximum (ms).
    pub max_ms: f64,
}

/// One second of the run.
#[derive(Clone, Debug, Serialize)]
pub struct Sample {
    /// Seconds since start.
    pub t: f64,
    /// Adds acknowledged per second.
    pub writes_per_s: f64,
    /// Tree growth per second over the latest interval between two verified
    /// checkpoints (not per second of the run: checkpoints come once an interval).
    pub growth_per_s: f64,
    /// Add latency p50 (ms) in this second.
    pub p50_ms: f64,
    /// Add latency p99 (ms) in this second.
    pub p99_ms: f64,
    /// Adds in flight.
    pub in_flight: i64,
    /// Pushback answers so far.
    pub pushback: u64,
    /// Time to integrate p50 (ms) of the entries covered in this second (0: none).
    pub integrate_p50_ms: f64,
    /// Time to integrate p99 (ms) in this second.
    pub integrate_p99_ms: f64,
    /// Entries waiting for verification.
    pub verify_backlog: u64,
    /// The loadgen's CPU in this second, in cores (1.0 = one core busy).
    pub loadgen_cpu: f64,
    /// The log's CPU in this second, in cores, with `--log-pid`.
    pub log_cpu: Option<f64>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, Instant};

    /// `--latency-warmup`: adds answered before its end are left out of the latency
    /// histograms; after it, and without one, they count.
    #[test]
    fn adds_answered_in_the_warm_up_leave_the_latencies_alone() {
        let warming = Stats {
            latency_from: Some(Instant::now() + Duration::from_secs(3600)),
            ..Stats::default()
        };
        assert!(!warming.counts_latency());
        warming.adds_done(&[1000, 2000]);
        assert_eq!(lock(&warming.add_latency).len(), 0);
        let warm = Stats {
            latency_from: Some(Instant::now()),
            ..Stats::default()
        };
        assert!(warm.counts_latency());
        warm.adds_done(&[1000, 2000]);
        assert_eq!(lock(&warm.add_latency).len(), 2);
        let plain = Stats::default();
        plain.adds_done(&[5]);
        assert_eq!(lock(&plain.add_latency).len(), 1);
    }
}
