//! What a person and a script see of a client run: the live view while it
//! runs, the summary at the end, the JSON result, and the files made to be
//! looked at: an HTML report (`html`), the curve of a `throng limit`
//! search (`curve`, text and HTML) and the percentile spectra in
//! HdrHistogram's text format (`hgrm`). Reads snapshots only; it never
//! holds anything a worker waits on. The room of each: `live` (the live
//! view), `plan` (the plan paragraph), `summary` (the end's figures;
//! `queries` and `push` its parts for queries and pushed messages),
//! `hints` (what a figure means, from what was seen), `views` (the files
//! to look at), `words` (a scenario in words), `chart` (what the HTML
//! pages share, their one chart helper among it), `json` (the result),
//! `check`, `books`.

pub mod accounting;
mod chart;
pub mod check;
pub mod curve;
pub mod files;
pub mod hgrm;
pub mod html;
pub mod json;
pub mod prometheus;

mod describe;
mod hints;
mod judge;
mod live;
mod plan;
mod push;
mod queries;
mod summary;
mod views;

use hints::*;
pub use hints::{
    client_connect_hint, lag_warning, nagle_hint, retransmit_hint, udp_silence_hint, wait_text,
};
pub use judge::{causes, conclude, judge};
pub use live::LiveView;
pub(crate) use plan::phase_steps;
pub use plan::plan_paragraph;
use push::*;
use queries::*;
use summary::*;
pub use summary::{line, summary};
pub use views::Views;

use std::io::{self, IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use crate::domain::Transport;
use crate::engine::Live;
use crate::metrics::exported::RunCounters;
use crate::metrics::{Bucket, ConnTotals, QueryTotals};
use crate::outcome::{Outcome, Sample};
use crate::scenario::{End, Scenario};
use crate::units::{human_bytes, human_us};
use crate::verdict::{Cause, Code, Level, Side, Verdict};

#[cfg(test)]
mod tests {
    use super::views::{file_word, hgrm_tags};
    use super::*;
    use crate::fixtures::{outcome, slice};

    /// The lag cause as its summary line.
    fn lag_line(
        h: &crate::metrics::Histograms,
        not_sent: u64,
        waited: Option<&str>,
        cpu: Option<&crate::evidence::ClientCpu>,
        embedded: bool,
    ) -> Option<String> {
        lag_warning(h, not_sent, waited, cpu, embedded).map(|c| line(&c))
    }

    /// Histograms whose send lag, loop lag and service time sit at the
    /// given values (µs).
    fn lags(send: u64, looped: u64, service: u64) -> crate::metrics::Histograms {
        let mut h = crate::metrics::Histograms::default();
        for _ in 0..100 {
            h.send_lag.record(send).unwrap();
            h.loop_lag.record(looped).unwrap();
            h.service_time.record(service).unwrap();
        }
        h
    }

    #[test]
    fn a_tail_well_above_a_prompt_loop_is_not_the_clients() {
        let w = lag_line(&lags(5_000, 2_000, 50_000), 0, None, None, false).unwrap();
        assert!(w.contains("is well above that"), "{w}");
    }

    #[test]
    fn a_late_loop_keeps_the_tail_from_being_put_on_the_server() {
        // A loop 140 ms late beside a 350 ms service tail (its own late
        // reads): the tail is not named the server's or the network's.
        let w = lag_line(&lags(150_000, 140_000, 350_000), 0, None, None, false).unwrap();
        assert!(w.contains("reads the answers late as well"), "{w}");
        assert!(w.contains("cannot be put on the server alone"), "{w}");
        assert!(!w.contains("the server's or the network's"), "{w}");
    }

    /// The client's CPU: `cpu_s` over 10 s on 2 cores, no server beside it.
    fn cpu(cpu_s: f64) -> crate::evidence::ClientCpu {
        let mut c = crate::evidence::ClientCpu {
            cpu_s,
            cores: 2,
            wall_s: 10.0,
            ..Default::default()
        };
        c.derive(1000);
        c
    }

    /// Late against the service time, the words follow the client's CPU:
    /// short of it, more cores; idle (under half a core), not more cores
    /// but cores of its own; with the server in its process, a server of
    /// its own (the embedded server's CPU is counted in the client's).
    #[test]
    fn a_late_client_is_told_what_would_help() {
        let late = lags(1_100, 1_100, 2_100);
        // The codes and sides, which limit and cluster read.
        let code = |c: Option<crate::evidence::ClientCpu>, embedded: bool| {
            let c = lag_warning(&late, 0, None, c.as_ref(), embedded).unwrap();
            (c.code, c.side)
        };
        assert_eq!(
            code(Some(cpu(19.0)), false),
            (Code::ClientCpu, Side::Client)
        );
        assert_eq!(
            code(Some(cpu(9.5)), false),
            (Code::ClientLate, Side::Client)
        );
        assert_eq!(
            code(Some(cpu(2.0)), false),
            (Code::ClientLate, Side::Client)
        );
        assert_eq!(code(None, false), (Code::ClientLate, Side::Client));
        assert_eq!(code(None, true), (Code::EmbeddedServer, Side::Both));
        let above = lag_warning(&lags(5_000, 2_000, 50_000), 0, None, None, false).unwrap();
        assert_eq!(
            (above.code, above.side),
            (Code::ServerLatency, Side::Server)
        );
        // (Whose it is, above, by code; here only the fix its words give.)
        let busy = lag_line(&late, 0, None, Some(&cpu(9.5)), false).unwrap();
        assert!(busy.contains("Give it more cores"), "{busy}");
        let idle = lag_line(&late, 0, None, Some(&cpu(2.0)), false).unwrap();
        assert!(idle.starts_with("warning: the client sent late"), "{idle}");
        assert!(
            idle.contains("it used 10% of its 2 core(s), less than half of one"),
            "{idle}"
        );
        assert!(idle.contains("more workers will not help"), "{idle}");
        assert!(
            !idle.contains("bottleneck") && !idle.contains("more cores"),
            "{idle}"
        );
        // Unknown CPU: more cores.
        let unknown = lag_line(&late, 0, None, None, false).unwrap();
        assert!(unknown.contains("Give it more cores"), "{unknown}");
        for c in [None, Some(cpu(2.0)), Some(cpu(9.5))] {
            let e = lag_line(&late, 0, None, c.as_ref(), true).unwrap();
            assert!(e.starts_with("note: the client sent late"), "{e}");
            assert!(
                e.contains("the embedded server runs in the client's process"),
                "{e}"
            );
            assert!(
                !e.contains("more cores") && !e.contains("bottleneck"),
                "{e}"
            );
        }
        // A late loop beside a longer tail: the same split.
        let looped = lags(5_000, 140_000, 350_000);
        let idle = lag_line(&looped, 0, None, Some(&cpu(2.0)), false).unwrap();
        assert!(idle.contains("cannot be put on the server alone"), "{idle}");
        assert!(idle.contains("more workers will not help"), "{idle}");
        let busy = lag_line(&looped, 0, None, Some(&cpu(9.5)), false).unwrap();
        assert!(busy.contains("give the client more cores"), "{busy}");
        // On time, or a tail well above the lateness: no change.
        assert!(lag_line(&lags(500, 400, 2_000), 0, None, Some(&cpu(2.0)), true).is_none());
        let above = lag_line(&lags(5_000, 2_000, 50_000), 0, None, Some(&cpu(2.0)), true);
        assert!(above.unwrap().contains("is well above that"));
    }

    /// A service p99.9 of 41 ms beside a loop late by 20 ms at p99 and
    /// 28 ms at p99.9 (client and server on one busy core) is the loop's
    /// wait, not Nagle's at the server: the loop's lag is read at the
    /// tail's quantile. A prompt loop still gets the hint.
    #[test]
    fn a_tail_at_the_timer_beside_a_loop_as_late_is_not_nagle() {
        let sc = crate::fixtures::scenario(&["--proto", "echo"]);
        let mut q = outcome(10, 1.0).queries.unwrap();
        q.totals.pipelined = q.totals.sent;
        let mut h = crate::metrics::Histograms::default();
        for (v, n) in [(1_700, 985), (21_600, 12), (41_300, 3)] {
            h.service_time.record_n(v, n).unwrap();
        }
        h.loop_lag.record_n(100, 1000).unwrap();
        let nagle = nagle_hint(&sc, &q, &h).unwrap();
        assert_eq!((nagle.code, nagle.side), (Code::Nagle, Side::Server));
        assert!(nagle.sentence.contains("Nagle's algorithm"));
        h.loop_lag.reset();
        for (v, n) in [(100, 988), (20_400, 10), (28_000, 2)] {
            h.loop_lag.record_n(v, n).unwrap();
        }
        assert_eq!(nagle_hint(&sc, &q, &h), None);
    }

    #[test]
    fn labels_become_words_of_file_names() {
        assert_eq!(file_word("tcp (recycle 100)"), "tcp-recycle-100");
        assert_eq!(file_word("tcp-per-query"), "tcp-per-query");
        assert_eq!(file_word("  a/b.json "), "a-b-json");
    }

    #[test]
    fn several_runs_tag_their_spectra_by_label_or_by_number() {
        let r = slice(1, &outcome(1, 2.0));
        let run = |label: &str| html::Run {
            label: label.into(),
            result: &r,
        };
        assert_eq!(hgrm_tags(&[run("x")]), [None]);
        assert_eq!(
            hgrm_tags(&[run("udp"), run("tcp (recycle 10)")]),
            [Some("udp".into()), Some("tcp-recycle-10".into())]
        );
        // Labels that would name the same files: numbers instead.
        assert_eq!(
            hgrm_tags(&[run("a b"), run("a-b")]),
            [Some("1".into()), Some("2".into())]
        );
    }

    #[test]
    fn a_view_into_a_missing_directory_is_refused() {
        let v = Views {
            html: Some("/nonexistent/dir/r.html".into()),
            ..Views::default()
        };
        assert!(v.check().unwrap_err().contains("/nonexistent/dir"));
        let v = Views {
            html: Some("r.html".into()),
            hgrm: Some("out".into()),
            server_stats: None,
        };
        assert_eq!(v.check(), Ok(()));
    }
}
