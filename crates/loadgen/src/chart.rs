//! Line charts over time for the HTML report: plotters' SVG backend, with round tick
//! values on both axes (computed here, so they are what a person would pick: 0, 5k,
//! 10k, 15k; 0s, 30s, 1m, 1m30s) and a legend.

use std::ops::Range;

use plotters::coord::ranged1d::{DefaultFormatting, KeyPointHint, Ranged};
use plotters::prelude::*;

/// An axis from 0 to the last of its ticks, with exactly those ticks (plotters' own
/// key points are not round enough, and its `with_key_points` loses the label
/// formatter of `f64` axes).
#[derive(Clone)]
struct TickedAxis {
    ticks: Vec<f64>,
}

impl TickedAxis {
    fn end(&self) -> f64 {
        self.ticks
            .last()
            .copied()
            .filter(|e| *e > 0.0)
            .unwrap_or(1.0)
    }
}

impl Ranged for TickedAxis {
    type FormatOption = DefaultFormatting;
    type ValueType = f64;

    fn map(&self, v: &f64, limit: (i32, i32)) -> i32 {
        let frac = v / self.end();
        let len = f64::from(limit.1 - limit.0);
        if !frac.is_finite() {
            return limit.1;
        }
        limit.0 + (len * frac).round() as i32
    }

    fn key_points<H: KeyPointHint>(&self, hint: H) -> Vec<f64> {
        if hint.weight().allow_light_points() {
            Vec::new()
        } else {
            self.ticks.clone()
        }
    }

    fn range(&self) -> Range<f64> {
        0.0..self.end()
    }
}

/// One line: its name in the legend, its colour, its (seconds, value) points.
pub struct Series<'a> {
    /// Legend text.
    pub name: &'a str,
    /// Line colour.
    pub color: RGBColor,
    /// (time since the start in seconds, value).
    pub points: Vec<(f64, f64)>,
}

/// Tick values `0, step, 2·step, ...` up to the first at or above `max`, with `step` a
/// round number (1, 2 or 5 times a power of ten) giving about `target` intervals.
pub fn nice_ticks(max: f64, target: usize) -> Vec<f64> {
    let max = if max.is_finite() && max > 0.0 {
        max
    } else {
        1.0
    };
    let rough = max / target.max(1) as f64;
    let magnitude = 10f64.powf(rough.log10().floor());
    let step = [1.0, 2.0, 5.0, 10.0]
        .iter()
        .map(|m| m * magnitude)
        .find(|s| *s >= rough)
        .unwrap_or(10.0 * magnitude);
    ticks(step, max)
}

/// Tick values for a time axis in seconds: steps a clock would use (1, 2, 5, 10, 15,
/// 30 s, 1, 2, 5, 10, 15, 30 min, 1, 2, 6, 12 h), about `target` intervals.
pub fn time_ticks(max_s: f64, target: usize) -> Vec<f64> {
    const STEPS: [f64; 19] = [
        0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0, 15.0, 30.0, 60.0, 120.0, 300.0, 600.0, 900.0, 1800.0,
        3600.0, 7200.0, 21600.0, 43200.0,
    ];
    let max = if max_s.is_finite() && max_s > 0.0 {
        max_s
    } else {
        1.0
    };
    let rough = max / target.max(1) as f64;
    match STEPS.iter().find(|s| **s >= rough) {
        Some(step) => ticks(*step, max),
        // Beyond half a day a step: whole days.
        None => ticks((rough / 86400.0).ceil() * 86400.0, max),
    }
}

fn ticks(step: f64, max: f64) -> Vec<f64> {
    let n = (max / step - 1e-9).ceil().max(1.0) as usize;
    // Multiplying (not adding up) keeps 0.1-steps free of rounding drift.
    (0..=n).map(|i| i as f64 * step).collect()
}

/// A tick label for a value on an axis ending at `end`, every label of an axis in the
/// same unit: `0`, `2.5`, `750`; `0`, `5k`, `15k` (from 10,000 up); `1.2M`.
pub fn fmt_value(v: f64, end: f64) -> String {
    if v == 0.0 {
        return "0".into();
    }
    let a = end.abs();
    let (scaled, suffix) = if a >= 1e6 {
        (v / 1e6, "M")
    } else if a >= 1e4 {
        (v / 1e3, "k")
    } else {
        (v, "")
    };
    let s = format!("{scaled:.2}");
    let s = s.trim_end_matches('0').trim_end_matches('.');
    format!("{s}{suffix}")
}

/// A tick label for seconds since the start: `0s`, `45s`, `1m`, `1m30s`, `2h`, `1h15m`.
pub fn fmt_time(s: f64) -> String {
    if s < 60.0 {
        let t = format!("{s:.1}");
        return format!("{}s", t.trim_end_matches('0').trim_end_matches('.'));
    }
    let total = s.round() as u64;
    let (h, m, sec) = (total / 3600, total / 60 % 60, total % 60);
    match (h, m, sec) {
        (0, m, 0) => format!("{m}m"),
        (0, m, s) => format!("{m}m{s}s"),
        (h, 0, _) => format!("{h}h"),
        (h, m, _) => format!("{h}h{m}m"),
    }
}

/// An SVG line chart of `series` over time, titled `title`, values in `unit`.
pub fn line_chart(title: &str, unit: &str, series: &[Series<'_>]) -> String {
    let mut svg = String::new();
    if let Err(e) = draw(&mut svg, title, unit, series) {
        // Drawing into a string fails only on a bug; say so instead of a broken page.
        return format!("<p>chart {title:?} could not be drawn: {e}</p>");
    }
    svg
}

fn draw(
    svg: &mut String,
    title: &str,
    unit: &str,
    series: &[Series<'_>],
) -> Result<(), Box<dyn std::error::Error>> {
    let points = || series.iter().flat_map(|s| s.points.iter());
    let tmax = points().map(|p| p.0).fold(0.0, f64::max);
    let ymax = points().map(|p| p.1).fold(0.0, f64::max);
    let x = TickedAxis {
        ticks: time_ticks(tmax, 10),
    };
    let y = TickedAxis {
        ticks: nice_ticks(ymax, 5),
    };
    let y_end = y.end();
    let root = SVGBackend::with_string(svg, (860, 300)).into_drawing_area();
    root.fill(&WHITE)?;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 18))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(70)
        .build_cartesian_2d(x, y)?;
    chart
        .configure_mesh()
        .x_desc("time since start")
        .y_desc(unit)
        .x_label_formatter(&|v| fmt_time(*v))
        .y_label_formatter(&|v| fmt_value(*v, y_end))
        .bold_line_style(RGBColor(225, 225, 225))
        .label_style(("sans-serif", 13))
        .draw()?;
    for s in series {
        let color = s.color;
        chart
            .draw_series(LineSeries::new(
                s.points.iter().copied(),
                color.stroke_width(2),
            ))?
            .label(s.name)
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 18, y)], color.stroke_width(2))
            });
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE.mix(0.85))
        .border_style(RGBColor(200, 200, 200))
        .label_font(("sans-serif", 13))
        .draw()?;
    root.present()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn value_ticks_are_round_and_cover_the_maximum() {
        assert_eq!(
            nice_ticks(31_234.0, 5),
            vec![0.0, 10_000.0, 20_000.0, 30_000.0, 40_000.0]
        );
        assert_eq!(
            nice_ticks(100.0, 5),
            vec![0.0, 20.0, 40.0, 60.0, 80.0, 100.0]
        );
        assert_eq!(nice_ticks(7.3, 5), vec![0.0, 2.0, 4.0, 6.0, 8.0]);
        assert_eq!(nice_ticks(0.9, 4), vec![0.0, 0.5, 1.0]);
        // Nothing to show (all zero, empty, NaN): still an axis from 0 to 1.
        assert_eq!(
            nice_ticks(0.0, 5),
            vec![0.0, 0.2, 0.4, 0.6000000000000001, 0.8, 1.0]
        );
        assert_eq!(nice_ticks(f64::NAN, 5).last(), Some(&1.0));
        for max in [0.013, 1.0, 9.99, 12.0, 999.0, 1234.5, 56_789.0, 3.2e6] {
            let t = nice_ticks(max, 5);
            assert_eq!(t[0], 0.0);
            assert!(*t.last().unwrap() >= max, "{max}: {t:?}");
            assert!((3..=11).contains(&t.len()), "{max}: {t:?}");
            let step = t[1];
            let mantissa = step / 10f64.powf(step.log10().floor());
            assert!(
                [1.0, 2.0, 5.0].iter().any(|m| (mantissa - m).abs() < 1e-9),
                "{max}: step {step}"
            );
        }
    }

    #[test]
    fn time_ticks_use_clock_steps() {
        assert_eq!(
            time_ticks(20.0, 10),
            vec![0.0, 2.0, 4.0, 6.0, 8.0, 10.0, 12.0, 14.0, 16.0, 18.0, 20.0]
        );
        assert_eq!(
            time_ticks(31.0, 10),
            vec![0.0, 5.0, 10.0, 15.0, 20.0, 25.0, 30.0, 35.0]
        );
        assert_eq!(
            time_ticks(1200.0, 10),
            vec![
                0.0, 120.0, 240.0, 360.0, 480.0, 600.0, 720.0, 840.0, 960.0, 1080.0, 1200.0
            ]
        );
        assert_eq!(
            time_ticks(3.0 * 86400.0, 4).len(),
            4,
            "whole days beyond 12 h steps"
        );
        assert_eq!(time_ticks(0.0, 10).last(), Some(&1.0));
    }

    #[test]
    fn labels_read_like_a_person_wrote_them() {
        assert_eq!(fmt_value(0.0, 10.0), "0");
        assert_eq!(fmt_value(2.5, 10.0), "2.5");
        assert_eq!(fmt_value(750.0, 1000.0), "750");
        assert_eq!(fmt_value(8_000.0, 8_000.0), "8000");
        assert_eq!(fmt_value(5_000.0, 20_000.0), "5k", "the axis's unit");
        assert_eq!(fmt_value(0.0, 20_000.0), "0");
        assert_eq!(fmt_value(15_000.0, 20_000.0), "15k");
        assert_eq!(fmt_value(1_250_000.0, 2e6), "1.25M");
        assert_eq!(fmt_time(0.0), "0s");
        assert_eq!(fmt_time(0.5), "0.5s");
        assert_eq!(fmt_time(45.0), "45s");
        assert_eq!(fmt_time(60.0), "1m");
        assert_eq!(fmt_time(90.0), "1m30s");
        assert_eq!(fmt_time(7200.0), "2h");
        assert_eq!(fmt_time(4500.0), "1h15m");
    }

    #[test]
    fn a_chart_has_its_ticks_legend_and_lines() {
        let svg = line_chart(
            "Throughput",
            "entries/s",
            &[
                Series {
                    name: "adds/s",
                    color: RGBColor(31, 119, 180),
                    points: (0..=20).map(|t| (t as f64, 1000.0 * t as f64)).collect(),
                },
                Series {
                    name: "growth <tree>",
                    color: RGBColor(44, 160, 44),
                    points: vec![(0.0, 0.0), (20.0, 18_000.0)],
                },
            ],
        );
        assert!(svg.starts_with("<svg"), "{svg}");
        // Text elements carry their text on lines of their own.
        let flat = svg.replace('\n', "");
        let labels: Vec<&str> = flat
            .split("</text>")
            .filter_map(|t| t.rsplit_once('>').map(|(_, l)| l))
            .collect();
        for want in ["Throughput", "entries/s", "time since start", "adds/s"] {
            assert!(labels.contains(&want), "{want} missing from {labels:?}");
        }
        assert!(
            labels.contains(&"growth &lt;tree&gt;"),
            "legend text is escaped"
        );
        let x: Vec<String> = (0..=10).map(|i| format!("{}s", 2 * i)).collect();
        let y = ["0", "5k", "10k", "15k", "20k"];
        let ticks: Vec<&str> = labels
            .iter()
            .copied()
            .filter(|l| x.iter().any(|x| x == l) || y.contains(l))
            .collect();
        assert_eq!(ticks.len(), x.len() + y.len(), "{labels:?}");
        // Each series is drawn as a line and a legend mark in its colour.
        assert_eq!(svg.matches("stroke=\"#1F77B4\"").count(), 2);
        assert_eq!(svg.matches("stroke=\"#2CA02C\"").count(), 2);
    }
}
