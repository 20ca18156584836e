//! Units as people type and read them: counts (10k), rates (2.5k/s), sizes
//! (64KiB), durations (2.5s), wall-clock instants (read as RFC 3339 by the
//! `time` crate, written as UTC dates), and the short forms the live view
//! and summaries print (12.3k, 1.5 MB, 85 µs).
//!
//! Plain functions over strings and numbers, at the bottom of the module
//! graph: the flags, the schedules, `--control` commands and every report
//! use them; they use nothing of throng's. A parser returns a value that
//! is exactly what was typed, or an error that names the problem and an
//! example: never a value rounded, clamped or wrapped into range, never a
//! number that is not finite.

use std::time::Duration;

use time::format_description::well_known::Rfc3339;
use time::OffsetDateTime;

/// The latest instant `--start-at` takes: 9999-12-31T23:59:59Z, the last
/// second RFC 3339 can write.
const MAX_UNIX_S: f64 = 253_402_300_799.0;

/// The longest duration taken: 10 years. A run, a step or a timeout
/// longer than that is a typo, and deadlines past it would overflow the
/// monotonic clock.
pub const MAX_DURATION: Duration = Duration::from_secs(10 * 365 * 86_400);

/// The highest rate taken: 10G/s (queries or connections a second).
pub const MAX_RATE: f64 = 1e10;

/// A wall-clock instant: RFC 3339 (2026-11-22T10:00:00Z) or Unix seconds.
pub fn parse_start_at(s: &str) -> Result<f64, String> {
    let t = s.trim();
    let seconds = !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit() || b == b'.');
    let unix = if seconds {
        t.parse::<f64>().ok().filter(|v| v.is_finite()).ok_or_else(|| {
            format!("'{s}' is not a time; give Unix seconds (1700000000.5) or RFC 3339 (2026-11-22T10:00:00Z)")
        })?
    } else {
        parse_rfc3339(t).map_err(|why| {
            format!(
                "'{s}' is not a time ({why}); give RFC 3339 (2026-11-22T10:00:00Z, \
                 2026-11-22T11:00:00.5+01:00) or Unix seconds"
            )
        })?
    };
    if unix > MAX_UNIX_S {
        return Err(format!(
            "'{s}' is past the year 9999; give RFC 3339 (2026-11-22T10:00:00Z) or Unix seconds"
        ));
    }
    Ok(unix)
}

/// Unix seconds of an RFC 3339 date and time; the error says which part
/// is wrong (a day the month does not have, an hour past 23, an offset
/// that is not ±HH:MM).
fn parse_rfc3339(s: &str) -> Result<f64, String> {
    // RFC 3339 lets a space stand for the T (section 5.6, NOTE).
    let fixed;
    let s = match s.as_bytes().get(10) {
        Some(b' ' | b't') if s.is_char_boundary(10) && s.is_char_boundary(11) => {
            fixed = format!("{}T{}", &s[..10], &s[11..]);
            fixed.as_str()
        }
        _ => s,
    };
    let b = s.as_bytes();
    if b.len() < 5 || !b[..4].iter().all(u8::is_ascii_digit) || b[4] != b'-' {
        return Err("neither Unix seconds nor a date".into());
    }
    let t = OffsetDateTime::parse(s, &Rfc3339).map_err(|e| e.to_string())?;
    Ok(t.unix_timestamp() as f64 + f64::from(t.nanosecond()) / 1e9)
}

/// "2023-11-14 22:13:20 UTC" for a Unix time.
pub fn utc(unix_s: u64) -> String {
    let t = i64::try_from(unix_s)
        .ok()
        .and_then(|s| OffsetDateTime::from_unix_timestamp(s).ok());
    match t {
        Some(t) => format!(
            "{:04}-{:02}-{:02} {:02}:{:02}:{:02} UTC",
            t.year(),
            u8::from(t.month()),
            t.day(),
            t.hour(),
            t.minute(),
            t.second()
        ),
        None => format!("{unix_s} s after 1970-01-01 UTC"),
    }
}

/// A rate: `2000`, `10k`, `10k/s`, `2.5k/s`.
pub fn parse_rate(s: &str) -> Result<f64, String> {
    let body = s.trim().strip_suffix("/s").unwrap_or(s.trim());
    let err = || format!("'{s}' is not a rate; examples: 500, 10k, 2.5k/s");
    if body.starts_with('-') {
        return Err(format!(
            "'{s}': a rate cannot be negative; examples: 500, 10k, 2.5k/s"
        ));
    }
    let (number, suffix) = split_number(body).ok_or_else(err)?;
    let scale = match suffix.to_ascii_lowercase().as_str() {
        "" => 1.0,
        "k" => 1e3,
        "m" => 1e6,
        "g" => 1e9,
        _ => return Err(err()),
    };
    let r = decimal_f64(number).ok_or_else(err)? * scale;
    if r <= 0.0 {
        return Err(format!("'{s}' must be above 0; examples: 500, 10k, 2.5k/s"));
    }
    if r > MAX_RATE {
        return Err(format!("'{s}' is above 10G/s; examples: 500, 10k, 2.5k/s"));
    }
    Ok(r)
}

/// Splits "2.5k" into ("2.5", "k"): the digits, dots and `_` of the
/// number, then the rest, trimmed. None when there are no digits.
fn split_number(s: &str) -> Option<(&str, &str)> {
    let s = s.trim();
    let end = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '_'))
        .unwrap_or(s.len());
    let number = &s[..end];
    number
        .bytes()
        .any(|b| b.is_ascii_digit())
        .then_some((number, s[end..].trim()))
}

/// The digits of a decimal number ("2.5", "1_000"): the whole part and
/// the fraction's digits, `_` dropped. None for two dots.
fn decimal_parts(number: &str) -> Option<(String, String)> {
    let digits: String = number.chars().filter(|&c| c != '_').collect();
    let (whole, frac) = digits.split_once('.').unwrap_or((&digits, ""));
    if frac.contains('.') {
        return None;
    }
    Some((whole.to_string(), frac.to_string()))
}

/// A decimal number as f64: finite, or None.
fn decimal_f64(number: &str) -> Option<f64> {
    let (whole, frac) = decimal_parts(number)?;
    let v: f64 = format!("{}.{}0", if whole.is_empty() { "0" } else { &whole }, frac)
        .parse()
        .ok()?;
    v.is_finite().then_some(v)
}

/// Why a decimal number times a scale is not a u64.
enum NotWhole {
    /// Two dots, say.
    Malformed,
    /// A fraction of one is left (1.5 bytes).
    Fraction,
    TooLarge,
}

/// `number` × `scale` exactly, in integers: "2.5" × 1000 is 2500, "1.1" ×
/// 1000 is 1100 (no float rounding), "1.5" × 1 is not whole.
fn decimal_times(number: &str, scale: u64) -> Result<u64, NotWhole> {
    decimal_times_rounded(number, scale, false)
}

/// As [`decimal_times`]; with `round`, a fraction of one left over is
/// rounded to the nearest whole (half up) instead of refused.
fn decimal_times_rounded(number: &str, scale: u64, round: bool) -> Result<u64, NotWhole> {
    let (whole, frac) = decimal_parts(number).ok_or(NotWhole::Malformed)?;
    let mut frac = frac.trim_end_matches('0');
    if frac.len() > 30 && !round {
        return Err(NotWhole::Fraction);
    }
    if round && frac.len() > 20 {
        // 20 digits are far below one unit of any scale (below 1e-7 ns of
        // an hour), and keep the product below 2^128.
        frac = &frac[..20];
    }
    let scale = u128::from(scale);
    let mut w: u128 = 0;
    for d in whole.bytes() {
        w = w
            .checked_mul(10)
            .and_then(|w| w.checked_add(u128::from(d - b'0')))
            .filter(|&w| w <= u128::from(u64::MAX))
            .ok_or(NotWhole::TooLarge)?;
    }
    let f: u128 = if frac.is_empty() {
        0
    } else {
        frac.parse().map_err(|_| NotWhole::Malformed)?
    };
    let unit = 10u128.pow(frac.len() as u32);
    // f < 10^30 and scale < 2^31 (GiB): the product fits a u128.
    let parts = f.checked_mul(scale).ok_or(NotWhole::Fraction)?;
    if !round && !parts.is_multiple_of(unit) {
        return Err(NotWhole::Fraction);
    }
    let n = w * scale + (parts + if round { unit / 2 } else { 0 }) / unit;
    u64::try_from(n).map_err(|_| NotWhole::TooLarge)
}

/// The largest count taken: 2^53, the last whole number a float holds
/// exactly (rates, shares and plans compute in floats), and far enough
/// below 2^64 that sums and products of counts do not wrap.
pub const MAX_COUNT: u64 = 1 << 53;

/// A count: `1000`, `10k`, `2.5m`, `1g`; at most [`MAX_COUNT`].
pub fn parse_count(s: &str) -> Result<u64, String> {
    let n = parse_u64(s)?;
    if n > MAX_COUNT {
        return Err(format!(
            "'{s}' is too large a count (above 2^53 = 9007199254740992); examples: 1000, 10k, 2.5m"
        ));
    }
    Ok(n)
}

/// A whole number of any size below 2^64 (a seed), with the suffixes of
/// a count.
pub fn parse_u64(s: &str) -> Result<u64, String> {
    let examples = "examples: 1000, 10k, 2.5m";
    let err = || format!("'{s}' is not a count; {examples}");
    if s.trim_start().starts_with('-') {
        return Err(format!("'{s}': a count cannot be negative; {examples}"));
    }
    let (number, suffix) = split_number(s).ok_or_else(err)?;
    let scale = match suffix.to_ascii_lowercase().as_str() {
        "" => 1,
        "k" => 1_000,
        "m" => 1_000_000,
        "g" => 1_000_000_000,
        _ => return Err(err()),
    };
    decimal_times(number, scale).map_err(|why| match why {
        NotWhole::Malformed => err(),
        NotWhole::Fraction => format!("'{s}' is not a whole count; {examples}"),
        NotWhole::TooLarge => format!("'{s}' is too large a count (above 2^64); {examples}"),
    })
}

/// A count of at least 1.
pub fn parse_positive_count(s: &str) -> Result<u64, String> {
    match parse_count(s)? {
        0 => Err(format!("'{s}' must be at least 1")),
        n => Ok(n),
    }
}

/// `--burst`: messages due together, 1 to 1m (a million messages a
/// period to each connection is past any server and any count's room).
pub fn parse_burst(s: &str) -> Result<u64, String> {
    match parse_positive_count(s)? {
        n if n > 1_000_000 => Err(format!("'{s}' is above 1m messages at once; give 1 to 1m")),
        n => Ok(n),
    }
}

/// A size in bytes: `512`, `64KiB`, `1.5MiB`, `10kB` (decimal), `1GiB`.
pub fn parse_size(s: &str) -> Result<u64, String> {
    let examples = "examples: 512, 64KiB, 1MiB, 10kB";
    let err = || format!("'{s}' is not a size; {examples}");
    let (number, suffix) = split_number(s).ok_or_else(err)?;
    let scale = match suffix.to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kb" => 1_000,
        "m" | "mb" => 1_000_000,
        "g" | "gb" => 1_000_000_000,
        "ki" | "kib" => 1 << 10,
        "mi" | "mib" => 1 << 20,
        "gi" | "gib" => 1 << 30,
        _ => return Err(err()),
    };
    decimal_times(number, scale).map_err(|why| match why {
        NotWhole::Malformed => err(),
        NotWhole::Fraction => format!("'{s}' is not a whole number of bytes; {examples}"),
        NotWhole::TooLarge => format!("'{s}' is too large a size (above 2^64 bytes); {examples}"),
    })
}

/// A duration: `250ms`, `2.5s`, `10m`, `1h`, `500us`; a bare number is
/// seconds. At most [`MAX_DURATION`]; to the nearest nanosecond (the
/// clock's unit: a float's `0.30000000000000004s` is 300 ms), and a
/// duration that is not zero never reads as zero.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let examples = "examples: 250ms, 2.5s, 10m, 1h";
    let err = || format!("'{s}' is not a duration; {examples}");
    let (number, suffix) = split_number(s).ok_or_else(err)?;
    let nanos_per: u64 = match suffix {
        "ns" => 1,
        "us" | "µs" => 1_000,
        "ms" => 1_000_000,
        "" | "s" => 1_000_000_000,
        "m" | "min" => 60_000_000_000,
        "h" => 3_600_000_000_000,
        _ => return Err(err()),
    };
    let nanos = decimal_times_rounded(number, nanos_per, true).map_err(|why| match why {
        NotWhole::Malformed | NotWhole::Fraction => err(),
        NotWhole::TooLarge => format!("'{s}' is longer than 10 years; {examples}"),
    })?;
    if nanos == 0 && number.bytes().any(|b| (b'1'..=b'9').contains(&b)) {
        return Err(format!("'{s}' is below a nanosecond; {examples}"));
    }
    let d = Duration::from_nanos(nanos);
    if d > MAX_DURATION {
        return Err(format!("'{s}' is longer than 10 years; {examples}"));
    }
    Ok(d)
}

/// A duration as [`parse_duration`] reads it back: the largest unit that
/// keeps it whole (`2500ms`, `10m`, `3ns`).
pub fn format_duration(d: Duration) -> String {
    let ns = d.as_nanos();
    for (unit, per) in [
        ("h", 3_600_000_000_000u128),
        ("m", 60_000_000_000),
        ("s", 1_000_000_000),
        ("ms", 1_000_000),
        ("us", 1_000),
    ] {
        if ns != 0 && ns.is_multiple_of(per) {
            return format!("{}{unit}", ns / per);
        }
    }
    format!("{ns}ns")
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
    fn start_at_refuses_a_day_the_month_does_not_have() {
        // 2026-02-31 is refused, not read as 3 March.
        let e = parse_start_at("2026-02-31T00:00:00Z").unwrap_err();
        assert!(e.contains("RFC 3339"), "{e}");
        assert_eq!(parse_start_at("2028-02-29T00:00:00Z"), Ok(1_835_395_200.0));
    }

    #[test]
    fn start_at_refuses_what_is_not_finite() {
        // inf and nan are refused: the wait computed from them would panic.
        for bad in ["inf", "nan", "-inf", "NaN", "infinity", "1e400", "-5"] {
            let e = parse_start_at(bad).unwrap_err();
            assert!(e.contains("RFC 3339"), "{bad}: {e}");
        }
        let e = parse_start_at("99999999999999999999").unwrap_err();
        assert!(e.contains("9999"), "{e}");
    }

    #[test]
    fn start_at_offset_of_other_characters_is_an_error() {
        // A multi-byte character in the offset is an error, not a panic on
        // a byte slice.
        for bad in [
            "2026-11-22T10:00:00+0é00",
            "2026-11-22T10:00:00+é",
            "2026-11-22é10:00:00Z",
        ] {
            assert!(parse_start_at(bad).is_err(), "{bad}");
        }
        assert_eq!(parse_start_at("2023-11-14 22:13:20Z"), Ok(1_700_000_000.0));
    }

    #[test]
    fn counts_and_sizes_are_exact() {
        // 1.1 × 1000 is 1100.0000000000002 in floats.
        assert_eq!(parse_count("1.1k"), Ok(1100));
        assert_eq!(parse_size("1.1kB"), Ok(1100));
        assert_eq!(parse_size("1.5KiB"), Ok(1536));
        assert!(parse_size("1.5")
            .unwrap_err()
            .contains("whole number of bytes"));
        assert_eq!(parse_u64("18446744073709551615"), Ok(u64::MAX));
        // 2^64 is too large, not taken as u64::MAX.
        assert!(parse_u64("18446744073709551616")
            .unwrap_err()
            .contains("too large"));
        assert_eq!(parse_count("9007199254740992"), Ok(MAX_COUNT));
        assert!(parse_count("9007199254740993")
            .unwrap_err()
            .contains("2^53"));
        assert!(parse_size("99999999999GiB")
            .unwrap_err()
            .contains("too large"));
        assert!(parse_count("1.2.3").is_err());
    }

    #[test]
    fn durations_are_bounded_and_exact() {
        assert_eq!(parse_duration("0.1s"), Ok(Duration::from_millis(100)));
        assert_eq!(parse_duration("3ns"), Ok(Duration::from_nanos(3)));
        assert!(parse_duration("0.4ns").unwrap_err().contains("nanosecond"));
        assert_eq!(parse_duration("0.5ns"), Ok(Duration::from_nanos(1)));
        // What `{}` of a float of seconds writes reads back to the nanosecond.
        assert_eq!(
            parse_duration(&format!("{}s", 0.1 + 0.2)),
            Ok(Duration::from_millis(300))
        );
        assert!(parse_duration("100000000000000s")
            .unwrap_err()
            .contains("10 years"));
        assert_eq!(format_duration(Duration::from_millis(2500)), "2500ms");
        assert_eq!(format_duration(Duration::from_secs(600)), "10m");
        assert_eq!(format_duration(Duration::ZERO), "0ns");
    }

    #[test]
    fn rates_are_bounded() {
        assert!(parse_rate("99999999999999999999")
            .unwrap_err()
            .contains("10G"));
        assert_eq!(parse_rate("0.5"), Ok(0.5));
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
