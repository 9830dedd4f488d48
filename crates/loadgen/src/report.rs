//! Human output: the per-second status line, the final table, the HTML page.

use std::fmt::Write as _;
use std::sync::atomic::Ordering;

use plotters::style::RGBColor;

use crate::Report;
use crate::chart::{Series, line_chart};
use crate::stats::{Sample, Stats};

/// Print one status line (redrawn in place on a terminal).
pub fn status_line(s: &Sample, stats: &Stats, tty: bool) {
    let line = format!(
        "t={:>5.0}s writes/s={:>8.0} growth/s={:>8.0} in-flight={:>4} pushback={} errors={} verified={} backlog={} add p50={:.2}ms p99={:.2}ms integrate p99={:.0}ms cpu={:.2}",
        s.t,
        s.writes_per_s,
        s.growth_per_s,
        s.in_flight,
        s.pushback,
        stats.write_errors.load(Ordering::Relaxed),
        stats.verified.load(Ordering::Relaxed),
        s.verify_backlog,
        s.p50_ms,
        s.p99_ms,
        s.integrate_p99_ms,
        s.loadgen_cpu
    );
    if tty {
        eprint!("\r\x1b[2K{line}");
    } else {
        eprintln!("{line}");
    }
}

/// The final report as a TPC-style terminal table.
pub fn table(r: &Report) -> String {
    let mut o = String::new();
    let m = &r.machine;
    let _ = writeln!(
        o,
        "=================================================================================="
    );
    let _ = writeln!(
        o,
        " tlog-loadgen report          result: {}",
        if r.ok { "PASS" } else { "FAIL" }
    );
    let _ = writeln!(
        o,
        " machine: {} cores, {:.1} GiB RAM, {}",
        m.cores,
        m.memory_bytes as f64 / (1u64 << 30) as f64,
        m.cpu
    );
    if let Some(st) = &m.storage {
        let _ = writeln!(
            o,
            " storage: {} ({}), fsync p50 {} us, p99 {} us",
            st.dir, st.fs_type, st.fsync_p50_us, st.fsync_p99_us
        );
    }
    let _ = writeln!(
        o,
        "----------------------------------------------------------------------------------"
    );
    let _ = writeln!(
        o,
        " TREE GROWTH: {:.0} entries/s   ({} -> {}, +{} in {:.1} s of writing)",
        r.tree_growth_per_s, r.tree_size_start, r.tree_size_end, r.tree_growth, r.write_seconds
    );
    let _ = writeln!(
        o,
        "----------------------------------------------------------------------------------"
    );
    let _ = writeln!(
        o,
        " {:<22} {:>10} {:>10} {:>9} {:>9} {:>9} {:>9}",
        "operation", "count", "rate/s", "mean ms", "p50 ms", "p99 ms", "max ms"
    );
    for row in &r.operations {
        let _ = writeln!(
            o,
            " {:<22} {:>10} {:>10.0} {:>9.2} {:>9.2} {:>9.2} {:>9.2}",
            row.operation,
            row.count,
            row.rate_per_s,
            row.mean_ms,
            row.p50_ms,
            row.p99_ms,
            row.max_ms
        );
    }
    let _ = writeln!(
        o,
        "----------------------------------------------------------------------------------"
    );
    let _ = writeln!(
        o,
        " adds: {} new, {} duplicate, {} pushback, {} errors   ({:.0}/s acknowledged)",
        r.writes_new, r.writes_duplicate, r.pushback, r.write_errors, r.write_rate_per_s
    );
    let _ = writeln!(
        o,
        " verified: {} entries ({} sampled), {} reads ok, {} read errors",
        r.verified_entries, r.sampled_entries, r.reads_ok, r.read_errors
    );
    let _ = writeln!(
        o,
        " verification backlog: max {} entries, {} when writing stopped, drained {:.1} s after",
        r.verify_backlog_max, r.verify_backlog_at_write_end, r.verify_drain_seconds
    );
    let _ = writeln!(o, " transport: {}   CPU: {}", r.transport, cpu_summary(r));
    if r.mode == "static-ct-api" {
        let _ = writeln!(
            o,
            " CT: {} chains minted in {:.2} s before the run, {} precertificates acknowledged, {} SCT signatures checked after writing ({:.2} s)",
            r.ct_chains_minted,
            r.ct_mint_seconds,
            r.ct_precerts,
            r.ct_scts_checked_after,
            r.ct_sct_check_seconds
        );
        if r.ct_classes.len() > 1 {
            for c in &r.ct_classes {
                let _ = writeln!(
                    o,
                    "   {:<15} sent {:>8}  acked {:>8} ({:5.1} %)  pushback {:>8}  add p50 {:.2} ms  p99 {:.2} ms",
                    c.class,
                    c.sent,
                    c.acked,
                    100.0 * c.acked as f64 / c.sent.max(1) as f64,
                    c.pushback,
                    c.add_p50_ms,
                    c.add_p99_ms
                );
            }
        }
    }
    for f in &r.failure_reasons {
        let _ = writeln!(o, " FAILURE: {f}");
    }
    let _ = writeln!(
        o,
        "=================================================================================="
    );
    o
}

/// "loadgen 12.3 us/add (4.1 s), log 25.0 us/add (8.2 s)".
fn cpu_summary(r: &Report) -> String {
    let adds = r.writes_new + r.writes_duplicate;
    let per = |us: f64, secs: f64| {
        if adds == 0 {
            format!("{secs:.1} s (no adds)")
        } else {
            format!("{us:.1} us/add ({secs:.1} s)")
        }
    };
    let mut s = format!(
        "loadgen {}",
        per(r.loadgen_cpu_us_per_add, r.loadgen_cpu_seconds)
    );
    if let (Some(us), Some(secs)) = (r.log_cpu_us_per_add, r.log_cpu_seconds) {
        s.push_str(&format!(", log {}", per(us, secs)));
        if let Some(writing) = r.log_cpu_us_per_add_writing {
            s.push_str(&format!(" ({writing:.1} us/add until writing stopped)"));
        }
    }
    if let Some(mib) = r.log_peak_rss_mib {
        s.push_str(&format!(", log peak RSS {mib:.0} MiB"));
    }
    s
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

const BLUE: RGBColor = RGBColor(31, 119, 180);
const GREEN: RGBColor = RGBColor(44, 160, 44);
const RED: RGBColor = RGBColor(214, 39, 40);
const ORANGE: RGBColor = RGBColor(255, 127, 14);
const PURPLE: RGBColor = RGBColor(148, 103, 189);

/// A self-contained HTML report: summary table and charts over time.
pub fn html(r: &Report) -> String {
    let series = |f: fn(&Sample) -> f64| r.timeline.iter().map(|s| (s.t, f(s))).collect::<Vec<_>>();
    let mut o = String::from(
        "<!doctype html><html><head><meta charset=\"utf-8\"><title>tlog-loadgen report</title><style>body{font-family:sans-serif;margin:2em;max-width:900px}table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:4px 10px;text-align:right}th:first-child,td:first-child{text-align:left}.fail{color:#b00}.pass{color:#070}</style></head><body>",
    );
    let _ = write!(
        o,
        "<h1>tlog-loadgen: <span class=\"{}\">{}</span></h1><p><b>Tree growth: {:.0} entries/s</b> ({} &rarr; {}) over {:.1} s of writing. {} cores, {:.1} GiB RAM, {}.</p>",
        if r.ok { "pass" } else { "fail" },
        if r.ok { "PASS" } else { "FAIL" },
        r.tree_growth_per_s,
        r.tree_size_start,
        r.tree_size_end,
        r.write_seconds,
        r.machine.cores,
        r.machine.memory_bytes as f64 / (1u64 << 30) as f64,
        escape(&r.machine.cpu)
    );
    if let Some(st) = &r.machine.storage {
        let _ = write!(
            o,
            "<p>Storage: {} ({}), fsync p50 {} &micro;s, p99 {} &micro;s.</p>",
            escape(&st.dir),
            escape(&st.fs_type),
            st.fsync_p50_us,
            st.fsync_p99_us
        );
    }
    o.push_str("<table><tr><th>operation</th><th>count</th><th>rate/s</th><th>mean ms</th><th>p50 ms</th><th>p90 ms</th><th>p99 ms</th><th>max ms</th></tr>");
    for row in &r.operations {
        let _ = write!(
            o,
            "<tr><td>{}</td><td>{}</td><td>{:.0}</td><td>{:.2}</td><td>{:.2}</td><td>{:.2}</td><td>{:.2}</td><td>{:.2}</td></tr>",
            escape(&row.operation),
            row.count,
            row.rate_per_s,
            row.mean_ms,
            row.p50_ms,
            row.p90_ms,
            row.p99_ms,
            row.max_ms
        );
    }
    o.push_str("</table>");
    let _ = write!(
        o,
        "<p>Adds: {} new, {} duplicate, {} pushback, {} errors. Verified entries: {} ({} sampled). Reads: {} ok, {} failed.</p>",
        r.writes_new,
        r.writes_duplicate,
        r.pushback,
        r.write_errors,
        r.verified_entries,
        r.sampled_entries,
        r.reads_ok,
        r.read_errors
    );
    let _ = write!(
        o,
        "<p>Transport: {}. CPU: {}. Verification backlog: at most {} entries, {} when writing stopped, drained {:.1} s after.</p>",
        escape(&r.transport),
        escape(&cpu_summary(r)),
        r.verify_backlog_max,
        r.verify_backlog_at_write_end,
        r.verify_drain_seconds
    );
    for f in &r.failure_reasons {
        let _ = write!(o, "<p class=\"fail\">FAILURE: {}</p>", escape(f));
    }
    let line = |name, color, f: fn(&Sample) -> f64| Series {
        name,
        color,
        points: series(f),
    };
    o.push_str(&line_chart(
        "Throughput",
        "entries/s",
        &[
            line("adds acknowledged/s", BLUE, |s| s.writes_per_s),
            line("tree growth/s (per checkpoint interval)", GREEN, |s| {
                s.growth_per_s
            }),
        ],
    ));
    o.push_str(&line_chart(
        "Add latency (time in queue)",
        "ms",
        &[
            line("p50", BLUE, |s| s.p50_ms),
            line("p99", RED, |s| s.p99_ms),
        ],
    ));
    // Seconds in which no checkpoint covered an entry have no time to integrate.
    let covered = |f: fn(&Sample) -> f64| {
        r.timeline
            .iter()
            .filter(|s| s.integrate_p99_ms > 0.0)
            .map(|s| (s.t, f(s)))
            .collect::<Vec<_>>()
    };
    o.push_str(&line_chart(
        "Time to integrate (add sent until a verified checkpoint covers it)",
        "ms",
        &[
            Series {
                name: "p50",
                color: BLUE,
                points: covered(|s| s.integrate_p50_ms),
            },
            Series {
                name: "p99",
                color: RED,
                points: covered(|s| s.integrate_p99_ms),
            },
        ],
    ));
    let mut cpu = vec![line("loadgen", ORANGE, |s| s.loadgen_cpu)];
    if r.timeline.iter().any(|s| s.log_cpu.is_some()) {
        cpu.push(Series {
            name: "log (--log-pid)",
            color: PURPLE,
            points: r
                .timeline
                .iter()
                .filter_map(|s| s.log_cpu.map(|c| (s.t, c)))
                .collect(),
        });
    }
    o.push_str(&line_chart("CPU", "cores busy", &cpu));
    o.push_str(&line_chart(
        "Verification backlog",
        "entries",
        &[line("waiting for their inclusion check", PURPLE, |s| {
            s.verify_backlog as f64
        })],
    ));
    o.push_str("</body></html>\n");
    o
}
