//! Human output: the per-second status line, the final table, the HTML page.

use std::fmt::Write as _;
use std::sync::atomic::Ordering;

use crate::Report;
use crate::stats::{Sample, Stats};

/// Print one status line (redrawn in place on a terminal).
pub fn status_line(s: &Sample, stats: &Stats, tty: bool) {
    let line = format!(
        "t={:>5.0}s writes/s={:>8.0} growth/s={:>8.0} in-flight={:>4} pushback={} errors={} verified={} add p50={:.2}ms p99={:.2}ms",
        s.t,
        s.writes_per_s,
        s.growth_per_s,
        s.in_flight,
        s.pushback,
        stats.write_errors.load(Ordering::Relaxed),
        stats.verified.load(Ordering::Relaxed),
        s.p50_ms,
        s.p99_ms
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
        " verified: {} entries ({} sampled), {} reads ok, {} read errors; loadgen CPU {:.1} us/add",
        r.verified_entries, r.sampled_entries, r.reads_ok, r.read_errors, r.loadgen_cpu_us_per_add
    );
    for f in &r.failure_reasons {
        let _ = writeln!(o, " FAILURE: {f}");
    }
    let _ = writeln!(
        o,
        "=================================================================================="
    );
    o
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// A named, coloured series of (seconds, value) points.
type Series<'a> = (&'a str, &'a str, Vec<(f64, f64)>);

/// An inline SVG line chart of several series over time.
fn chart(title: &str, unit: &str, series: &[Series<'_>]) -> String {
    let (w, h, pad) = (760.0, 260.0, 48.0);
    let tmax = series
        .iter()
        .flat_map(|s| s.2.iter().map(|p| p.0))
        .fold(1.0, f64::max);
    let ymax = series
        .iter()
        .flat_map(|s| s.2.iter().map(|p| p.1))
        .fold(0.0, f64::max)
        .max(1e-9)
        * 1.1;
    let x = |t: f64| pad + (w - 2.0 * pad) * t / tmax;
    let y = |v: f64| h - pad + -(h - 2.0 * pad) * v / ymax;
    let mut o = format!(
        "<h2>{}</h2><svg viewBox=\"0 0 {w} {h}\" width=\"{w}\" height=\"{h}\">",
        escape(title)
    );
    let _ = write!(
        o,
        "<rect x=\"{pad}\" y=\"{pad}\" width=\"{}\" height=\"{}\" fill=\"#fafafa\" stroke=\"#ccc\"/>",
        w - 2.0 * pad,
        h - 2.0 * pad
    );
    for k in 0..=4 {
        let v = ymax * k as f64 / 4.0;
        let _ = write!(
            o,
            "<text x=\"4\" y=\"{:.1}\" font-size=\"11\">{:.1}</text>",
            y(v) + 4.0,
            v
        );
    }
    let _ = write!(
        o,
        "<text x=\"{:.1}\" y=\"{:.1}\" font-size=\"11\">{tmax:.0} s</text>",
        w - pad - 20.0,
        h - pad + 16.0
    );
    let _ = write!(
        o,
        "<text x=\"4\" y=\"14\" font-size=\"11\">{}</text>",
        escape(unit)
    );
    for (i, (name, color, pts)) in series.iter().enumerate() {
        let path: Vec<String> = pts
            .iter()
            .map(|(t, v)| format!("{:.1},{:.1}", x(*t), y(*v)))
            .collect();
        let _ = write!(
            o,
            "<polyline fill=\"none\" stroke=\"{color}\" stroke-width=\"2\" points=\"{}\"/>",
            path.join(" ")
        );
        let _ = write!(
            o,
            "<text x=\"{:.1}\" y=\"{:.1}\" font-size=\"12\" fill=\"{color}\">{}</text>",
            pad + 10.0 + 150.0 * i as f64,
            pad - 8.0,
            escape(name)
        );
    }
    o.push_str("</svg>");
    o
}

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
    for f in &r.failure_reasons {
        let _ = write!(o, "<p class=\"fail\">FAILURE: {}</p>", escape(f));
    }
    o.push_str(&chart(
        "Throughput",
        "entries/s",
        &[
            ("adds acknowledged/s", "#1f77b4", series(|s| s.writes_per_s)),
            ("tree growth/s", "#2ca02c", series(|s| s.growth_per_s)),
        ],
    ));
    o.push_str(&chart(
        "Add latency (time in queue)",
        "ms",
        &[
            ("p50", "#1f77b4", series(|s| s.p50_ms)),
            ("p99", "#d62728", series(|s| s.p99_ms)),
        ],
    ));
    o.push_str("</body></html>\n");
    o
}
