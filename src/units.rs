//! Units as people type and read them: counts (10k), rates (2.5k/s), sizes
//! (64KiB), durations (2.5s), wall-clock instants (read as RFC 3339,
//! written as UTC dates: the crate's one calendar), and the short forms the
//! live view and summaries print (12.3k, 1.5 MB, 85 µs).
//!
//! Plain functions over strings and numbers, at the bottom of the module
//! graph: the flags, the schedules, `--control` commands and every report
//! use them; they use nothing of throng's.

use std::time::Duration;

/// A wall-clock instant: RFC 3339 (2026-11-22T10:00:00Z) or Unix seconds.
pub fn parse_start_at(s: &str) -> Result<f64, String> {
    if let Ok(v) = s.parse::<f64>() {
        return Ok(v);
    }
    parse_rfc3339(s).ok_or_else(|| {
        format!("'{s}' is not a time; give RFC 3339 (2026-11-22T10:00:00Z) or Unix seconds")
    })
}

/// Unix seconds of `YYYY-MM-DDTHH:MM:SS[.frac](Z|+HH:MM|-HH:MM)`.
fn parse_rfc3339(s: &str) -> Option<f64> {
    let b = s.as_bytes();
    if b.len() < 20 || b[4] != b'-' || b[7] != b'-' || !matches!(b[10], b'T' | b't' | b' ') {
        return None;
    }
    let num = |r: std::ops::Range<usize>| s.get(r)?.parse::<i64>().ok();
    let (y, mo, d) = (num(0..4)?, num(5..7)?, num(8..10)?);
    let (h, mi, sec) = (num(11..13)?, num(14..16)?, num(17..19)?);
    let mut rest = &s[19..];
    let mut frac = 0.0;
    if let Some(r) = rest.strip_prefix('.') {
        let end = r.find(|c: char| !c.is_ascii_digit()).unwrap_or(r.len());
        frac = format!("0.{}", &r[..end]).parse().ok()?;
        rest = &r[end..];
    }
    let offset = match rest {
        "Z" | "z" => 0,
        o if o.len() == 6 && (o.starts_with('+') || o.starts_with('-')) => {
            let sign = if o.starts_with('-') { -1 } else { 1 };
            sign * (o[1..3].parse::<i64>().ok()? * 3600 + o[4..6].parse::<i64>().ok()? * 60)
        }
        _ => return None,
    };
    if !(1..=12).contains(&mo) || !(1..=31).contains(&d) || h > 23 || mi > 59 || sec > 60 {
        return None;
    }
    let days = days_from_civil(y, mo, d);
    Some((days * 86_400 + h * 3600 + mi * 60 + sec - offset) as f64 + frac)
}

/// "2023-11-14 22:13:20 UTC" for a Unix time.
pub fn utc(unix_s: u64) -> String {
    let (y, m, d) = civil_from_days((unix_s / 86_400) as i64);
    let secs = unix_s % 86_400;
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02} UTC",
        secs / 3600,
        secs / 60 % 60,
        secs % 60
    )
}

/// Days since 1970-01-01 of a date of the proleptic Gregorian calendar
/// (Howard Hinnant's days_from_civil; month and day from 1).
fn days_from_civil(y: i64, month: i64, d: i64) -> i64 {
    let (y, m) = if month <= 2 {
        (y - 1, month + 9)
    } else {
        (y, month - 3)
    };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * m + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// The date (year, month, day) of a day since 1970-01-01: the inverse of
/// [`days_from_civil`] (Hinnant's civil_from_days).
fn civil_from_days(days: i64) -> (i64, i64, i64) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    (yoe + era * 400 + i64::from(m <= 2), m, d)
}

/// A rate: `2000`, `10k`, `10k/s`, `2.5k/s`.
pub fn parse_rate(s: &str) -> Result<f64, String> {
    let body = s.trim().strip_suffix("/s").unwrap_or(s.trim());
    let err = || format!("'{s}' is not a rate; examples: 500, 10k, 2.5k/s");
    let (value, suffix) = split_number(body).ok_or_else(err)?;
    let scale = match suffix.to_ascii_lowercase().as_str() {
        "" => 1.0,
        "k" => 1e3,
        "m" => 1e6,
        _ => return Err(err()),
    };
    let r = value * scale;
    if r <= 0.0 {
        return Err(format!("'{s}' must be above 0; examples: 500, 10k, 2.5k/s"));
    }
    Ok(r)
}

/// Splits "2.5k" into (2.5, "k").
fn split_number(s: &str) -> Option<(f64, &str)> {
    let s = s.trim();
    let end = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '_'))
        .unwrap_or(s.len());
    let digits: String = s[..end].chars().filter(|&c| c != '_').collect();
    let value: f64 = digits.parse().ok()?;
    value.is_finite().then_some((value, s[end..].trim()))
}

/// A count: `1000`, `10k`, `2.5m`, `1g`.
pub fn parse_count(s: &str) -> Result<u64, String> {
    let err = || format!("'{s}' is not a count; examples: 1000, 10k, 2.5m");
    let (value, suffix) = split_number(s).ok_or_else(err)?;
    let scale = match suffix.to_ascii_lowercase().as_str() {
        "" => 1.0,
        "k" => 1e3,
        "m" => 1e6,
        "g" => 1e9,
        _ => return Err(err()),
    };
    let n = value * scale;
    if n.fract() != 0.0 || n > u64::MAX as f64 {
        return Err(format!(
            "'{s}' is not a whole count; examples: 1000, 10k, 2.5m"
        ));
    }
    Ok(n as u64)
}

/// A count of at least 1.
pub fn parse_positive_count(s: &str) -> Result<u64, String> {
    match parse_count(s)? {
        0 => Err(format!("'{s}' must be at least 1")),
        n => Ok(n),
    }
}

/// A size in bytes: `512`, `64KiB`, `1.5MiB`, `10kB` (decimal), `1GiB`.
pub fn parse_size(s: &str) -> Result<u64, String> {
    let err = || format!("'{s}' is not a size; examples: 512, 64KiB, 1MiB, 10kB");
    let (value, suffix) = split_number(s).ok_or_else(err)?;
    let scale = match suffix.to_ascii_lowercase().as_str() {
        "" | "b" => 1.0,
        "k" | "kb" => 1e3,
        "m" | "mb" => 1e6,
        "g" | "gb" => 1e9,
        "ki" | "kib" => 1024.0,
        "mi" | "mib" => 1024.0 * 1024.0,
        "gi" | "gib" => 1024.0 * 1024.0 * 1024.0,
        _ => return Err(err()),
    };
    let n = (value * scale).round();
    if n > u64::MAX as f64 {
        return Err(err());
    }
    Ok(n as u64)
}

/// A duration: `250ms`, `2.5s`, `10m`, `1h`, `500us`; a bare number is seconds.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let err = || format!("'{s}' is not a duration; examples: 250ms, 2.5s, 10m, 1h");
    let (value, suffix) = split_number(s).ok_or_else(err)?;
    let secs = match suffix {
        "us" | "µs" => value / 1e6,
        "ms" => value / 1e3,
        "" | "s" => value,
        "m" | "min" => value * 60.0,
        "h" => value * 3600.0,
        _ => return Err(err()),
    };
    Duration::try_from_secs_f64(secs).map_err(|_| err())
}

/// "1.2k", "3.4M": short human numbers for the stats line.
pub fn human(n: f64) -> String {
    match n {
        n if n >= 1e9 => format!("{:.1}G", n / 1e9),
        n if n >= 1e6 => format!("{:.1}M", n / 1e6),
        n if n >= 1e4 => format!("{:.1}k", n / 1e3),
        n => format!("{n:.0}"),
    }
}

/// "12.3 MB": bytes in decimal units, as network tools print them.
pub fn human_bytes(n: f64) -> String {
    match n {
        n if n >= 1e9 => format!("{:.2} GB", n / 1e9),
        n if n >= 1e6 => format!("{:.1} MB", n / 1e6),
        n if n >= 1e3 => format!("{:.1} kB", n / 1e3),
        n => format!("{n:.0} B"),
    }
}

/// "85 µs", "1.2 ms", "3.40 s".
pub fn human_us(us: u64) -> String {
    match us {
        u if u >= 1_000_000 => format!("{:.2} s", u as f64 / 1e6),
        u if u >= 1_000 => format!("{:.1} ms", u as f64 / 1e3),
        u => format!("{u} µs"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates_are_utc() {
        assert_eq!(utc(0), "1970-01-01 00:00:00 UTC");
        assert_eq!(utc(1_700_000_000), "2023-11-14 22:13:20 UTC");
        assert_eq!(utc(951_782_400), "2000-02-29 00:00:00 UTC");
    }

    #[test]
    fn days_and_dates_are_inverse() {
        for days in [-719_468, -1, 0, 59, 10_956, 11_016, 19_675, 2_932_896] {
            let (y, m, d) = civil_from_days(days);
            assert_eq!(days_from_civil(y, m, d), days, "{y}-{m}-{d}");
        }
    }

    #[test]
    fn count_suffixes() {
        assert_eq!(parse_count("1000"), Ok(1000));
        assert_eq!(parse_count("10k"), Ok(10_000));
        assert_eq!(parse_count("10K"), Ok(10_000));
        assert_eq!(parse_count("2.5m"), Ok(2_500_000));
        assert_eq!(parse_count("1_000"), Ok(1000));
    }

    #[test]
    fn count_rejects_junk() {
        for bad in ["", "k", "10x", "1.5", "-3", "ten"] {
            let e = parse_count(bad).unwrap_err();
            assert!(e.contains("10k"), "{bad}: {e}");
        }
        assert!(parse_positive_count("0").is_err());
    }

    #[test]
    fn size_units() {
        assert_eq!(parse_size("512"), Ok(512));
        assert_eq!(parse_size("64KiB"), Ok(65536));
        assert_eq!(parse_size("1MiB"), Ok(1 << 20));
        assert_eq!(parse_size("10kB"), Ok(10_000));
        assert!(parse_size("12parsecs").unwrap_err().contains("64KiB"));
    }

    #[test]
    fn duration_units() {
        assert_eq!(parse_duration("2.5s"), Ok(Duration::from_millis(2500)));
        assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_duration("10m"), Ok(Duration::from_secs(600)));
        assert_eq!(parse_duration("1h"), Ok(Duration::from_secs(3600)));
        assert_eq!(parse_duration("3"), Ok(Duration::from_secs(3)));
        assert_eq!(parse_duration("500us"), Ok(Duration::from_micros(500)));
        assert!(parse_duration("5 fortnights").unwrap_err().contains("2.5s"));
    }

    #[test]
    fn times() {
        assert_eq!(parse_start_at("1700000000"), Ok(1_700_000_000.0));
        assert_eq!(parse_start_at("2023-11-14T22:13:20Z"), Ok(1_700_000_000.0));
        assert_eq!(
            parse_start_at("2023-11-15T00:13:20+02:00"),
            Ok(1_700_000_000.0)
        );
        assert_eq!(
            parse_start_at("2023-11-14T22:13:20.5Z"),
            Ok(1_700_000_000.5)
        );
        assert!(parse_start_at("tomorrow").unwrap_err().contains("RFC 3339"));
    }

    #[test]
    fn rates() {
        assert_eq!(parse_rate("2000"), Ok(2000.0));
        assert_eq!(parse_rate("10k/s"), Ok(10_000.0));
        assert_eq!(parse_rate("2.5k"), Ok(2500.0));
        assert!(parse_rate("0").is_err());
        assert!(parse_rate("fast").unwrap_err().contains("10k"));
    }

    #[test]
    fn human_numbers() {
        assert_eq!(human(999.0), "999");
        assert_eq!(human(12_345.0), "12.3k");
        assert_eq!(human(2_500_000.0), "2.5M");
        assert_eq!(human_bytes(1_500_000.0), "1.5 MB");
    }

    #[test]
    fn human_durations() {
        assert_eq!(human_us(85), "85 µs");
        assert_eq!(human_us(1234), "1.2 ms");
        assert_eq!(human_us(3_400_000), "3.40 s");
    }
}
