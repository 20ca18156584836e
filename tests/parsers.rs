//! Every parser of a flag value, over arbitrary and near-valid text: none
//! panics, none returns a value that is not finite, and where a value has
//! a written form the written form parses back to the same value (a
//! duration printed by `units::format_duration`, an RFC 3339 time, a
//! schedule, a check, a host list, a query file).
//!
//! The parsers: counts, sizes, rates, durations and start times
//! (`throng::units`), schedules (`scenario::parse_phases`), `--stop-on`,
//! check expressions (`report::check::parse`), query files
//! (`scenario::parse_query_file`), host lists (`cluster::ssh::parse_hosts`),
//! `--source-ip` prefixes (`sys::sources::expand`), and the flags parsed by
//! clap alone (`--precision`, `--segment`, `--processes`, `--run-id`,
//! `--listen`, `--metrics`) through `Cli::try_parse_from`.

use std::net::IpAddr;
use std::time::Duration;

use clap::Parser;
use proptest::prelude::*;
use throng::cli::Cli;
use throng::units::{
    format_duration, parse_burst, parse_count, parse_duration, parse_positive_count, parse_rate,
    parse_size, parse_start_at, parse_u64, MAX_COUNT, MAX_DURATION, MAX_RATE,
};

/// Text near what people type for a number with a unit: digits, dots,
/// underscores and a few letters, signs and the odd multi-byte character.
fn numberish() -> impl Strategy<Value = String> {
    prop_oneof![
        "[0-9._]{0,24}[kKmMgGiIbBsSuµnh/%é]{0,4}",
        "[-+]?[0-9]{0,3}(\\.[0-9]{0,12})?(e[-+]?[0-9]{1,3})?[a-zµ/]{0,3}",
        "(inf|nan|NaN|infinity|-inf|1e999|0x10|\u{0}|\u{feff}1)[a-z/]{0,2}",
        any::<String>(),
    ]
}

/// Text near an RFC 3339 time: the right shape with any digits, and
/// other characters in its places.
fn timeish() -> impl Strategy<Value = String> {
    prop_oneof![
        "[0-9]{4}-[0-9]{2}-[0-9]{2}[Tt ][0-9]{2}:[0-9]{2}:[0-9]{2}(\\.[0-9]{0,12})?(Z|z|[-+][0-9]{2}:[0-9]{2})",
        "[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}[-+é][0-9é]{1,2}[:é]?[0-9é]{0,2}",
        "\\PC{0,30}",
        numberish(),
    ]
}

fn finite_ok(r: Result<f64, String>) -> Result<(), TestCaseError> {
    if let Ok(v) = r {
        prop_assert!(v.is_finite(), "{v}");
    }
    Ok(())
}

/// Proleptic Gregorian date of a day since 1970 (to write RFC 3339 with
/// no help from the parser under test).
fn civil(days: i64) -> (i64, i64, i64) {
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

/// `throng client ARGS` as clap parses it: Ok, or a usage error; never a
/// panic.
fn client_flags(args: &[&str]) -> bool {
    let mut all = vec!["throng", "client"];
    all.extend(args);
    Cli::try_parse_from(all).is_ok()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn counts_sizes_rates_never_panic(s in numberish()) {
        let _ = parse_count(&s);
        let _ = parse_positive_count(&s);
        let _ = parse_u64(&s);
        if let Ok(b) = parse_burst(&s) {
            prop_assert!((1..=1_000_000).contains(&b), "{s}: {b}");
        }
        let _ = parse_size(&s);
        if let Ok(r) = parse_rate(&s) {
            prop_assert!(r.is_finite() && r > 0.0 && r <= MAX_RATE, "{s}: {r}");
        }
        if let Ok(d) = parse_duration(&s) {
            prop_assert!(d <= MAX_DURATION, "{s}: {d:?}");
        }
    }

    #[test]
    fn start_times_never_panic(s in timeish()) {
        finite_ok(parse_start_at(&s))?;
    }

    #[test]
    fn counts_print_and_parse_back(n in any::<u64>()) {
        prop_assert_eq!(parse_u64(&n.to_string()), Ok(n));
        prop_assert_eq!(parse_size(&n.to_string()), Ok(n));
        prop_assert_eq!(parse_count(&n.to_string()).ok(), (n <= MAX_COUNT).then_some(n));
        // With a suffix: thousands.
        if let Some(k) = n.checked_mul(1000) {
            prop_assert_eq!(parse_u64(&format!("{n}k")), Ok(k));
        }
        // With a decimal point: 1.5k is 1500, exactly.
        let (whole, frac) = (n / 1000, n % 1000);
        prop_assert_eq!(parse_u64(&format!("{whole}.{frac:03}k")), Ok(n));
    }

    #[test]
    fn sizes_in_binary_units_are_exact(n in 0u64..(1 << 33), unit in 0usize..3) {
        let (suffix, scale) = [("KiB", 1u64 << 10), ("MiB", 1 << 20), ("GiB", 1 << 30)][unit];
        prop_assert_eq!(parse_size(&format!("{n}{suffix}")), Ok(n * scale));
    }

    #[test]
    fn durations_print_and_parse_back(ns in 0u64..=MAX_DURATION.as_nanos() as u64) {
        let d = Duration::from_nanos(ns);
        let text = format_duration(d);
        prop_assert_eq!(parse_duration(&text), Ok(d), "{}", text);
        // In seconds with every digit of the fraction.
        let secs = format!("{}.{:09}s", d.as_secs(), d.subsec_nanos());
        prop_assert_eq!(parse_duration(&secs), Ok(d), "{}", secs);
    }

    #[test]
    fn float_seconds_read_to_the_nanosecond(x in 0.0f64..MAX_DURATION.as_secs_f64()) {
        // What `{}` of a float writes (another command's flags, built from
        // an f64: the shortest text that reads back as the same float)
        // reads back within the float's own precision and a nanosecond.
        let d = parse_duration(&format!("{x}s")).unwrap();
        let want = Duration::from_secs_f64(x);
        let half_ulp = (f64::from_bits(x.to_bits() + 1) - x) / 2.0;
        let slack = Duration::from_secs_f64(half_ulp) + Duration::from_nanos(1);
        prop_assert!(d.abs_diff(want) <= slack, "{x}: {d:?} vs {want:?}");
    }

    #[test]
    fn rates_print_and_parse_back(r in 1e-3f64..MAX_RATE) {
        // f64's Display is the shortest text that reads back as the same
        // number, never with an exponent.
        prop_assert_eq!(parse_rate(&r.to_string()), Ok(r));
        prop_assert_eq!(parse_rate(&format!("{r}/s")), Ok(r));
    }

    #[test]
    fn rfc3339_times_print_and_parse_back(
        secs in 0i64..253_402_300_800,
        nanos in 0u32..1_000_000_000,
        offset_min in -(23 * 60 + 59)..=(23 * 60 + 59i64),
    ) {
        // The local time at that offset, written by hand.
        let local = secs + offset_min * 60;
        prop_assume!((0..253_402_300_800).contains(&local));
        let (y, m, d) = civil(local.div_euclid(86_400));
        let t = local.rem_euclid(86_400);
        let sign = if offset_min < 0 { '-' } else { '+' };
        let text = format!(
            "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{nanos:09}{sign}{:02}:{:02}",
            t / 3600,
            t / 60 % 60,
            t % 60,
            offset_min.abs() / 60,
            offset_min.abs() % 60
        );
        let want = secs as f64 + f64::from(nanos) / 1e9;
        prop_assert_eq!(parse_start_at(&text), Ok(want), "{}", text);
        // Unix seconds as digits, whole.
        prop_assert_eq!(parse_start_at(&secs.to_string()), Ok(secs as f64));
    }

    #[test]
    fn impossible_dates_are_refused(y in 1970i64..9999, m in 1i64..=12, d in 29i64..=40) {
        let days_in = match m {
            2 if y % 4 == 0 && (y % 100 != 0 || y % 400 == 0) => 29,
            2 => 28,
            4 | 6 | 9 | 11 => 30,
            _ => 31,
        };
        let text = format!("{y:04}-{m:02}-{d:02}T00:00:00Z");
        prop_assert_eq!(parse_start_at(&text).is_ok(), d <= days_in, "{}", text);
    }

    #[test]
    fn schedules_never_panic_and_print_back(
        s in "[0-9a-zé.@,_ ]{0,40}",
        phases in prop::collection::vec((1u64..=86_400_000_000_000u64, any::<u32>(), any::<u32>()), 1..5),
    ) {
        let _ = throng::scenario::parse_phases(&s);
        let spec: Vec<String> = phases
            .iter()
            .map(|&(ns, a, b)| format!("{}@{a}..{b}", format_duration(Duration::from_nanos(ns))))
            .collect();
        let parsed = throng::scenario::parse_phases(&spec.join(",")).unwrap();
        prop_assert_eq!(parsed.len(), phases.len());
        for (p, &(ns, a, b)) in parsed.iter().zip(&phases) {
            prop_assert_eq!(p.seconds, Duration::from_nanos(ns).as_secs_f64());
            prop_assert_eq!((p.from, p.to), (f64::from(a), f64::from(b)));
        }
    }

    #[test]
    fn stop_on_never_panics_and_prints_back(s in "(verify-stall|failed|x)?=?[0-9.a-z%é]{0,12}") {
        use throng::scenario::StopOn;
        if let Ok(c) = StopOn::parse(&s) {
            prop_assert_eq!(StopOn::parse(&c.describe()), Ok(c));
        }
    }

    #[test]
    fn checks_never_panic_and_parse_back(
        key in prop_oneof![
            Just("queries.answered".to_string()),
            Just("queries.ok".to_string()),
            Just("latency.response_time_us.p99".to_string()),
            Just("connections.failed".to_string()),
            Just("queries.rate_achieved".to_string()),
            "[a-z._0-9]{0,30}",
        ],
        op in prop_oneof![Just(">="), Just("<="), Just("=="), Just("!="), Just(">"), Just("<"), Just("=")],
        value in numberish(),
    ) {
        let expr = format!("{key}{op}{value}");
        if let Ok(c) = throng::report::check::parse(&expr) {
            prop_assert_eq!(throng::report::check::parse(&c.expr), Ok(c.clone()));
        }
        let _ = throng::report::check::parse(&value);
    }

    #[test]
    fn query_files_never_panic_and_read_back(
        text in "\\PC{0,200}",
        names in prop::collection::vec(("[a-z]{1,12}(\\.[a-z0-9-]{1,12}){0,3}\\.?", prop_oneof![Just("A"), Just("AAAA"), Just("mx"), Just("TYPE65")]), 1..8),
    ) {
        let _ = throng::scenario::parse_query_file(&text, 1);
        let file: String = names.iter().map(|(n, t)| format!("{n} {t}\n")).collect();
        let (read, qtypes) = throng::scenario::parse_query_file(&file, 1).unwrap();
        let want: Vec<String> = names.iter().map(|(n, _)| n.clone()).collect();
        prop_assert_eq!(read, want);
        prop_assert_eq!(qtypes.len(), names.len());
    }

    #[test]
    fn host_lists_never_panic_and_read_back(
        text in "\\PC{0,200}",
        hosts in prop::collection::vec(("([a-z]{1,8}@)?[a-z][a-z0-9.-]{0,20}", prop::option::of(any::<u16>())), 1..6),
    ) {
        let _ = throng::cluster::ssh::parse_hosts(&text);
        let file: String = hosts
            .iter()
            .map(|(d, p)| match p {
                Some(p) => format!("{d}:{p}  # a comment\n"),
                None => format!("{d}\n\n"),
            })
            .collect();
        let read = throng::cluster::ssh::parse_hosts(&file).unwrap();
        let names: Vec<String> = read.iter().map(|h| h.name()).collect();
        let want: Vec<String> = hosts
            .iter()
            .map(|(d, p)| p.map_or(d.clone(), |p| format!("{d}:{p}")))
            .collect();
        prop_assert_eq!(names, want);
    }

    #[test]
    fn source_prefixes_stay_in_their_prefix(
        ip in any::<IpAddr>(),
        prefix in 0u32..=128,
        limit in 0usize..64,
        junk in "\\PC{0,24}",
    ) {
        let _ = throng::sys::sources::expand(&junk, limit);
        let max = if ip.is_ipv4() { 32 } else { 128 };
        let spec = format!("{ip}/{prefix}");
        let got = throng::sys::sources::expand(&spec, limit);
        prop_assert_eq!(got.is_ok(), prefix <= max, "{}", spec);
        let Ok(got) = got else { return Ok(()) };
        prop_assert!(got.len() <= limit);
        let bits = |a: IpAddr| match a {
            IpAddr::V4(v) => u128::from(u32::from(v)),
            IpAddr::V6(v) => u128::from(v),
        };
        let host_bits = max - prefix;
        for a in &got {
            prop_assert_eq!(a.is_ipv4(), ip.is_ipv4());
            if host_bits < 128 {
                prop_assert_eq!(bits(*a) >> host_bits, bits(ip) >> host_bits, "{} in {}", a, spec);
            }
        }
    }

    #[test]
    fn clap_flags_never_panic(
        flag in prop::sample::select(vec![
            "-c", "--rate", "-r", "--size", "-T", "--timeout", "--start-at", "--segment",
            "--processes", "--run-id", "--metrics", "--connect-rate", "--window", "--schedule",
            "--connections-schedule", "--check", "--stop-on", "--source-ip", "--every", "--burst",
            "--seed", "--queries", "--messages", "--max-failures",
        ]),
        value in numberish(),
    ) {
        let _ = client_flags(&[flag, &value]);
        let mut limit = vec!["throng", "limit", "127.0.0.1:1", "--find", "rate", "-r", "1k"];
        limit.extend(["--precision", value.as_str()]);
        if let Ok(cli) = Cli::try_parse_from(&limit) {
            if let throng::cli::Command::Limit(a) = cli.command {
                prop_assert!(a.precision > 0.0 && a.precision < 1.0, "{}", value);
            }
        }
        let _ = Cli::try_parse_from(["throng", "server", "--listen", value.as_str()]);
        for flag in ["--max-connections", "--body-size", "--dns-ttl", "--every", "--workers", "--burst"] {
            let _ = Cli::try_parse_from(["throng", "server", flag, value.as_str()]);
        }
    }

    #[test]
    fn segments_print_and_parse_back(n in 1u64..=u64::MAX, k in any::<u64>()) {
        let k = k % n + 1;
        let seg = format!("{k}/{n}");
        prop_assert!(client_flags(&["--segment", &seg]), "{}", seg);
        let zero = format!("0/{n}");
        prop_assert!(!client_flags(&["--segment", &zero]), "{}", zero);
    }
}

/// The forms that panicked or were taken with another meaning, by name.
#[test]
fn the_values_that_panicked_or_changed_are_refused() {
    for bad in [
        "2026-02-31T00:00:00Z",
        "inf",
        "nan",
        "+0é00",
        "2026-11-22T10:00:00+0é00",
    ] {
        let e = parse_start_at(bad).unwrap_err();
        assert!(e.contains("RFC 3339"), "{bad}: {e}");
        assert!(!client_flags(&["--start-at", bad]), "{bad}");
    }
    for bad in ["nan", "inf", "nan%", "-5%", "0", "100%"] {
        assert!(
            Cli::try_parse_from([
                "throng",
                "limit",
                "127.0.0.1:1",
                "--find",
                "rate",
                "--precision",
                bad
            ])
            .is_err(),
            "--precision {bad}"
        );
    }
    assert!(throng::report::check::parse("queries.answered>=nan%").is_err());
    assert!(parse_duration("100000000000000s").is_err());
}
