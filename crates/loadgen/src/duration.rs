//! Durations on the command line: `30s`, `500ms`, `5m`, `1h`, `1m30s`, or plain
//! seconds (`30`, `0.5`).

use std::time::Duration;

/// Parse a duration flag's value. A plain number is seconds; otherwise one or more
/// `<number><unit>` parts, units `ms`, `s`, `m` (or `min`), `h`, also `us`/`µs` and `ns`.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let s = text.trim();
    let bad = || {
        format!(
            "invalid duration {text:?}: expected e.g. 30s, 500ms, 5m, 1h, 1m30s or plain seconds"
        )
    };
    if s.is_empty() {
        return Err(bad());
    }
    if let Ok(secs) = s.parse::<f64>() {
        return seconds(secs).ok_or_else(bad);
    }
    let mut total = 0f64;
    let mut rest = s;
    while !rest.is_empty() {
        let num_len = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .ok_or_else(bad)?;
        if num_len == 0 {
            return Err(bad());
        }
        let value: f64 = rest[..num_len].parse().map_err(|_| bad())?;
        rest = &rest[num_len..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let scale = match &rest[..unit_len] {
            "ns" => 1e-9,
            "us" | "µs" => 1e-6,
            "ms" => 1e-3,
            "s" => 1.0,
            "m" | "min" => 60.0,
            "h" => 3600.0,
            _ => return Err(bad()),
        };
        total += value * scale;
        rest = &rest[unit_len..];
    }
    seconds(total).ok_or_else(bad)
}

fn seconds(s: f64) -> Option<Duration> {
    Duration::try_from_secs_f64(s).ok()
}

/// A duration as a flag would take it back: whole units where exact (`300s`, `100ms`).
pub fn show(d: Duration) -> String {
    if d.subsec_nanos() == 0 {
        format!("{}s", d.as_secs())
    } else if d.as_nanos().is_multiple_of(1_000_000) {
        format!("{}ms", d.as_millis())
    } else {
        format!("{:?}", d)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn units_and_plain_seconds() {
        let ms = Duration::from_millis;
        for (text, want) in [
            ("30s", ms(30_000)),
            ("30", ms(30_000)),
            ("0.5", ms(500)),
            ("500ms", ms(500)),
            ("5m", ms(300_000)),
            ("5min", ms(300_000)),
            ("1h", ms(3_600_000)),
            ("1m30s", ms(90_000)),
            ("1h2m3s", ms(3_723_000)),
            ("1.5s", ms(1500)),
            (" 2s ", ms(2000)),
            ("0", Duration::ZERO),
            ("250us", Duration::from_micros(250)),
            ("7ns", Duration::from_nanos(7)),
        ] {
            assert_eq!(parse_duration(text), Ok(want), "{text:?}");
        }
    }

    #[test]
    fn nonsense_is_refused_with_examples() {
        for text in [
            "", "s", "10x", "-5", "-5s", "1.2.3s", "5 m", "ms5", "inf", "NaN", "1e400",
        ] {
            let e = parse_duration(text).expect_err(text);
            assert!(e.contains("30s") && e.contains(text), "{text:?}: {e}");
        }
    }

    #[test]
    fn shown_as_taken() {
        assert_eq!(show(Duration::from_secs(300)), "300s");
        assert_eq!(show(Duration::from_millis(100)), "100ms");
        assert_eq!(
            parse_duration(&show(Duration::from_millis(1500))),
            Ok(Duration::from_millis(1500))
        );
    }
}
