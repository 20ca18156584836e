//! The percentile spectrum of a latency histogram in HdrHistogram's `.hgrm`
//! text format: what its `outputPercentileDistribution` prints (columns
//! Value, Percentile, TotalCount, 1/(1-Percentile); five ticks per half
//! distance to 100%; the `#[Mean`, `#[Max` and `#[Buckets` footer), so
//! HdrHistogram's plotter and the tools around it read throng's results.
//! Values are in milliseconds (the histograms hold microseconds).
//!
//! A result's spectra: response and service time of its queries, and of
//! `--proto push` the gap between arrivals, the jitter and the one-way
//! delay, each in its own file; a result that has none is told why.
//!
//! The spectrum is pure text: the caller decides where it goes.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use anyhow::Result;
use hdrhistogram::Histogram;

use super::json::write_bytes_atomic;
use crate::metrics::decode_histogram;
use crate::outcome::{PushResult, RunResult};

/// Percentile ticks per half distance to 100%, as HdrHistogram's default.
pub const TICKS_PER_HALF_DISTANCE: u32 = 5;

/// Microseconds per unit of the file's values (milliseconds).
const US_PER_MS: f64 = 1000.0;

/// The spectrum of `h` (microseconds), values in milliseconds.
pub fn spectrum(h: &Histogram<u64>) -> String {
    let mut s = String::new();
    // write! to a String cannot fail.
    let _ = writeln!(
        s,
        "{:>12} {:>14} {:>10} {:>14}\n",
        "Value", "Percentile", "TotalCount", "1/(1-Percentile)"
    );
    let mut total = 0u64;
    if !h.is_empty() {
        for v in h.iter_quantiles(TICKS_PER_HALF_DISTANCE) {
            total += v.count_since_last_iteration();
            let q = v.quantile_iterated_to();
            let value = v.value_iterated_to() as f64 / US_PER_MS;
            if q < 1.0 {
                let _ = writeln!(
                    s,
                    "{value:>12.3} {q:>2.12} {total:>10} {:>14.2}",
                    1.0 / (1.0 - q)
                );
            } else {
                let _ = writeln!(s, "{value:>12.3} {q:>2.12} {total:>10}");
            }
        }
    }
    let (mean, stdev) = if h.is_empty() {
        (0.0, 0.0)
    } else {
        (h.mean() / US_PER_MS, h.stdev() / US_PER_MS)
    };
    let _ = writeln!(
        s,
        "#[Mean    = {mean:>12.3}, StdDeviation   = {stdev:>12.3}]"
    );
    let _ = writeln!(
        s,
        "#[Max     = {:>12.3}, Total count    = {:>12}]",
        h.max() as f64 / US_PER_MS,
        h.len()
    );
    let _ = writeln!(
        s,
        "#[Buckets = {:>12}, SubBuckets     = {:>12}]",
        h.buckets(),
        sub_buckets(h)
    );
    s
}

/// The histogram's sub-bucket count, as HdrHistogram computes it from its
/// lowest discernible value and significant digits (the crate keeps it
/// private).
fn sub_buckets(h: &Histogram<u64>) -> u64 {
    let single_unit = 2 * 10u64.pow(u32::from(h.sigfig()));
    let magnitude = (single_unit as f64).log2().ceil() as u32;
    1 << magnitude.max(1)
}

/// Where the spectra of one result go: `PREFIX.response.hgrm` and
/// `PREFIX.service.hgrm`, or with `tag` (one of several runs)
/// `PREFIX.TAG.response.hgrm`.
pub fn paths(prefix: &Path, tag: Option<&str>) -> [PathBuf; 2] {
    [path(prefix, tag, "response"), path(prefix, tag, "service")]
}

/// The file of one spectrum: `PREFIX[.TAG].WHAT.hgrm`.
fn path(prefix: &Path, tag: Option<&str>, what: &str) -> PathBuf {
    let base = prefix.as_os_str().to_string_lossy();
    PathBuf::from(match tag {
        Some(t) => format!("{base}.{t}.{what}.hgrm"),
        None => format!("{base}.{what}.hgrm"),
    })
}

/// The push spectra's names in the files (`PREFIX.push_jitter.hgrm`...),
/// in the order they are written.
pub const PUSH_SPECTRA: [&str; 3] = ["push_gap", "push_jitter", "push_delay"];

/// What [`write`] did with one result: the files written, and each
/// spectrum it has not, with why.
#[derive(Debug, Default)]
pub struct Spectra {
    pub written: Vec<PathBuf>,
    pub missing: Vec<String>,
}

/// Writes the spectra of `r`: response and service time when it has
/// queries (their files even when none was answered), and of `--proto
/// push` each of gap, jitter and one-way delay that holds a value. What
/// it has not is said in `missing`, with why.
pub fn write(prefix: &Path, tag: Option<&str>, r: &RunResult) -> Result<Spectra> {
    let mut done = Spectra::default();
    if let Some(l) = &r.latency {
        let [response, service] = paths(prefix, tag);
        for (path, hdr) in [
            (response, &l.response_time_us.hdr),
            (service, &l.service_time_us.hdr),
        ] {
            let h = decode_histogram(hdr)?;
            write_bytes_atomic(&path, spectrum(&h).as_bytes(), "--hgrm")?;
            done.written.push(path);
        }
    }
    let Some(p) = &r.push else {
        if r.latency.is_none() {
            done.missing.push(
                "no spectrum: the run sent no queries and received no push messages \
                 (connections only): its connect times are in the JSON result and the --html \
                 report"
                    .into(),
            );
        }
        return Ok(done);
    };
    let delay = p.delay_us.as_ref().map(|d| &d.hdr);
    for (what, hdr) in
        PUSH_SPECTRA
            .into_iter()
            .zip([Some(&p.gap_us.hdr), Some(&p.jitter_us.hdr), delay])
    {
        let h = hdr.map(|h| decode_histogram(h)).transpose()?;
        match h.filter(|h| !h.is_empty()) {
            Some(h) => {
                let path = path(prefix, tag, what);
                write_bytes_atomic(&path, spectrum(&h).as_bytes(), "--hgrm")?;
                done.written.push(path);
            }
            None => done
                .missing
                .push(format!("no {what} spectrum: {}", push_why(r, p, what))),
        }
    }
    Ok(done)
}

/// Why a push result has no values of `what` (one of [`PUSH_SPECTRA`]).
fn push_why(r: &RunResult, p: &PushResult, what: &str) -> String {
    if p.received == 0 {
        return format!(
            "no push message arrived (0 of {} expected): see the summary's connections",
            p.expected
        );
    }
    match what {
        "push_delay" => format!("the one-way delay was not measured: {}", no_delay(r, p)),
        _ => "no connection received two messages: a gap is between two arrivals".into(),
    }
}

/// Why a push run that received messages has no one-way delay.
pub fn no_delay(r: &RunResult, p: &PushResult) -> String {
    let lines = r
        .scenario
        .push
        .as_ref()
        .is_some_and(|l| l.format == crate::domain::PushFormat::Line);
    if lines {
        "the messages are lines (--push-format line), without a send stamp".into()
    } else if p.delay_us.is_none() {
        "the server is not on this host and --clock-sync was not given (give it when the \
         hosts' clocks agree)"
            .into()
    } else {
        format!(
            "{} send stamps were ahead of this host's clock (the server is not on this host, \
             or the clocks disagree)",
            p.stamps_ahead
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::new_histogram;

    fn histogram(values: impl IntoIterator<Item = u64>) -> Histogram<u64> {
        let mut h = new_histogram();
        for v in values {
            h.record(v).unwrap();
        }
        h
    }

    /// (value ms, percentile, total count) of each row.
    fn rows(text: &str) -> Vec<(f64, f64, u64)> {
        text.lines()
            .skip(2)
            .take_while(|l| !l.starts_with('#'))
            .map(|l| {
                let f: Vec<&str> = l.split_whitespace().collect();
                (
                    f[0].parse().unwrap(),
                    f[1].parse().unwrap(),
                    f[2].parse().unwrap(),
                )
            })
            .collect()
    }

    #[test]
    fn columns_and_footer_are_hdrhistograms() {
        let h = histogram(1..=10_000);
        let text = spectrum(&h);
        let mut lines = text.lines();
        assert_eq!(
            lines.next().unwrap(),
            "       Value     Percentile TotalCount 1/(1-Percentile)"
        );
        assert_eq!(lines.next().unwrap(), "");
        assert_eq!(
            lines.next().unwrap(),
            "       0.001 0.000000000000          1           1.00"
        );
        let footer: Vec<&str> = text.lines().filter(|l| l.starts_with("#[")).collect();
        assert_eq!(footer.len(), 3);
        assert!(
            footer[0].starts_with("#[Mean    =        5.00"),
            "{}",
            footer[0]
        );
        assert_eq!(
            footer[1],
            "#[Max     =       10.007, Total count    =        10000]"
        );
        assert_eq!(
            footer[2],
            format!(
                "#[Buckets = {:>12}, SubBuckets     =         2048]",
                h.buckets()
            )
        );
        // The last row is 100%, without the 1/(1-Percentile) column.
        let last = text.lines().rfind(|l| !l.starts_with('#')).unwrap();
        assert_eq!(last.split_whitespace().count(), 3, "{last}");
        assert!(last.contains(" 1.000000000000 "), "{last}");
    }

    #[test]
    fn each_row_is_the_histograms_value_at_its_percentile() {
        let h = histogram((1..=5000).map(|i| i * i % 977_777 + 1));
        let r = rows(&spectrum(&h));
        assert!(r.len() > 50);
        for w in r.windows(2) {
            assert!(w[0].0 <= w[1].0 && w[0].1 <= w[1].1 && w[0].2 <= w[1].2);
        }
        // The count up to each row's value is its TotalCount, at least its
        // percentile of all; the count below the value falls short of it.
        let all = h.len() as f64;
        for &(ms, q, total) in &r {
            let us = (ms * 1000.0).round() as u64;
            assert_eq!(us, h.highest_equivalent(us), "at {q}");
            assert_eq!(h.count_between(0, us), total, "at {q}");
            assert!(total as f64 >= q * all * (1.0 - 1e-12), "at {q}");
            let below = h.count_between(0, h.lowest_equivalent(us).saturating_sub(1));
            assert!(
                (below as f64) < q * all * (1.0 + 1e-12) || q == 0.0,
                "at {q}"
            );
        }
        assert_eq!(r.last().unwrap().2, 5000);
    }

    #[test]
    fn an_empty_histogram_has_the_header_and_footer() {
        let text = spectrum(&new_histogram());
        assert!(rows(&text).is_empty());
        assert!(text.contains("#[Max     =        0.000, Total count    =            0]"));
    }

    fn temp(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("throng-hgrm-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn a_push_run_writes_a_spectrum_per_push_histogram() {
        let dir = temp("push");
        let r = crate::fixtures::push_result(true);
        let s = write(&dir.join("p"), None, &r).unwrap();
        let names: Vec<String> = s
            .written
            .iter()
            .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
            .collect();
        assert_eq!(
            names,
            ["p.push_gap.hgrm", "p.push_jitter.hgrm", "p.push_delay.hgrm"]
        );
        assert!(s.missing.is_empty(), "{:?}", s.missing);
        let delay = std::fs::read_to_string(dir.join("p.push_delay.hgrm")).unwrap();
        assert_eq!(rows(&delay).last().unwrap().2, 390);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_spectrum_a_run_has_not_is_named_with_why() {
        let dir = temp("missing");
        let r = crate::fixtures::push_result(false);
        let s = write(&dir.join("p"), Some("b"), &r).unwrap();
        assert_eq!(s.written.len(), 2);
        assert!(s.written[1].ends_with("p.b.push_jitter.hgrm"));
        assert_eq!(s.missing.len(), 1);
        assert!(
            s.missing[0].starts_with("no push_delay spectrum: the one-way delay was not measured")
        );
        let mut lines = crate::fixtures::push_result(true);
        lines.scenario.push.as_mut().unwrap().format = crate::domain::PushFormat::Line;
        lines.push.as_mut().unwrap().delay_us = None;
        let s = write(&dir.join("l"), None, &lines).unwrap();
        assert!(s.missing[0].ends_with("(--push-format line), without a send stamp"));
        let mut conns = crate::fixtures::slice(1, &crate::fixtures::outcome(1, 1.0));
        conns.latency = None;
        let s = write(&dir.join("c"), None, &conns).unwrap();
        assert!(s.written.is_empty());
        assert!(
            s.missing[0].contains("no queries and received no push messages"),
            "{:?}",
            s.missing
        );
        assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 4);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn several_runs_get_a_tag() {
        let [a, b] = paths(Path::new("out/run"), None);
        assert_eq!(a, Path::new("out/run.response.hgrm"));
        assert_eq!(b, Path::new("out/run.service.hgrm"));
        let [a, _] = paths(Path::new("run"), Some("udp"));
        assert_eq!(a, Path::new("run.udp.response.hgrm"));
    }
}
