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
    /// POST until a verified checkpoint covered the index.
    pub integrate_latency: Mutex<Histogram<u64>>,
    /// Tile and bundle reads.
    pub read_latency: Mutex<Histogram<u64>>,
    /// Verification failures, each naming what was wrong.
    pub failures: Mutex<Vec<String>>,
    /// Transport and status errors (first few, for the report).
    pub error_samples: Mutex<Vec<String>>,
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
            read_latency: Mutex::new(histogram()),
            failures: Mutex::new(Vec::new()),
            error_samples: Mutex::new(Vec::new()),
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Stats {
    /// Record an add round trip.
    pub fn add_done(&self, us: u64) {
        let _ = lock(&self.add_latency).record(us.max(1));
        let _ = lock(&self.add_latency_tick).record(us.max(1));
    }

    /// Record a time-to-integrate.
    pub fn integrated(&self, us: u64) {
        let _ = lock(&self.integrate_latency).record(us.max(1));
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
        let mut h = lock(&self.add_latency_tick);
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
    /// Tree growth per second (from verified checkpoints).
    pub growth_per_s: f64,
    /// Add latency p50 (ms) in this second.
    pub p50_ms: f64,
    /// Add latency p99 (ms) in this second.
    pub p99_ms: f64,
    /// Adds in flight.
    pub in_flight: i64,
    /// Pushback answers so far.
    pub pushback: u64,
}
