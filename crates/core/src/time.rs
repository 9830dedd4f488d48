//! Calendar dates without a calendar crate: the proleptic Gregorian calendar in UTC,
//! for RFC 3339 times in configuration, log-list JSON, messages and HTTP signatures
//! (Howard Hinnant's `civil_from_days` and `days_from_civil`).

/// Days since 1970-01-01 to (year, month 1–12, day 1–31).
pub fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    // In 1..=31 and 1..=12 by construction.
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = (if mp < 10 { mp + 3 } else { mp - 9 }) as u32;
    (yoe + era * 400 + i64::from(month <= 2), month, day)
}

/// (year, month 1–12, day 1–31) to days since 1970-01-01 (no range check: see
/// [`days_in_month`]).
pub fn days_from_civil(year: i64, month: u32, day: u32) -> i64 {
    let (y, m) = if month <= 2 {
        (year - 1, i64::from(month) + 9)
    } else {
        (year, i64::from(month) - 3)
    };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * m + 2) / 5 + i64::from(day) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// The days of `month` (1–12) of `year`; 0 for a month out of range.
pub fn days_in_month(year: i64, month: u32) -> u32 {
    let leap = year % 4 == 0 && (year % 100 != 0 || year % 400 == 0);
    match month {
        1 | 3 | 5 | 7 | 8 | 10 | 12 => 31,
        4 | 6 | 9 | 11 => 30,
        2 if leap => 29,
        2 => 28,
        _ => 0,
    }
}

/// (year, month, day, hour, minute, second, millisecond) of `ms` milliseconds since the
/// Unix epoch.
pub fn utc_fields(ms: i64) -> (i64, u32, u32, u32, u32, u32, u32) {
    let secs = ms.div_euclid(1000);
    let (days, sod) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    let (y, m, d) = civil_from_days(days);
    // Within a day: below 86,400 seconds and 1,000 milliseconds.
    let sod = sod as u32;
    (
        y,
        m,
        d,
        sod / 3600,
        sod / 60 % 60,
        sod % 60,
        ms.rem_euclid(1000) as u32,
    )
}

/// Milliseconds since the Unix epoch as RFC 3339 in UTC: `2026-01-01T00:00:00Z`, with
/// `.fff` only when there are milliseconds.
pub fn format_rfc3339_ms(ms: i64) -> String {
    let (y, mo, d, h, mi, s, f) = utc_fields(ms);
    match f {
        0 => format!("{y:04}-{mo:02}-{d:02}T{h:02}:{mi:02}:{s:02}Z"),
        f => format!("{y:04}-{mo:02}-{d:02}T{h:02}:{mi:02}:{s:02}.{f:03}Z"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Known dates both ways, every day of four centuries round-trips, and month
    /// lengths agree with the day counts.
    #[test]
    fn dates_convert_both_ways() {
        for (days, date) in [
            (0, (1970, 1, 1)),
            (-1, (1969, 12, 31)),
            (11_016, (2000, 2, 29)),
            (20_819, (2027, 1, 1)),
            (2_932_896, (9999, 12, 31)),
        ] {
            assert_eq!(civil_from_days(days), date);
            assert_eq!(days_from_civil(date.0, date.1, date.2), days);
        }
        let mut days = days_from_civil(1900, 1, 1);
        for year in 1900..2300 {
            for month in 1..=12 {
                for day in 1..=days_in_month(year, month) {
                    assert_eq!(civil_from_days(days), (year, month, day));
                    assert_eq!(days_from_civil(year, month, day), days);
                    days += 1;
                }
            }
        }
        assert_eq!(days_in_month(2100, 2), 28);
        assert_eq!(days_in_month(2000, 2), 29);
        assert_eq!(days_in_month(2026, 13), 0);
    }

    #[test]
    fn rfc3339_shows_milliseconds_only_when_there_are_some() {
        assert_eq!(format_rfc3339_ms(0), "1970-01-01T00:00:00Z");
        assert_eq!(format_rfc3339_ms(1_767_139_200_000), "2025-12-31T00:00:00Z");
        assert_eq!(
            format_rfc3339_ms(1_767_139_200_007),
            "2025-12-31T00:00:00.007Z"
        );
        assert_eq!(format_rfc3339_ms(-1), "1969-12-31T23:59:59.999Z");
    }
}
