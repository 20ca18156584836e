//! What a person and a script see of a client run: the live view while it
//! runs, the summary at the end, the JSON result, and the files made to be
//! looked at: an HTML report (`html`), the curve of a `throng limit`
//! search (`curve`, text and HTML) and the percentile spectra in
//! HdrHistogram's text format (`hgrm`). Reads snapshots only; it never
//! holds anything a worker waits on.

pub mod books;
mod chart;
pub mod check;
pub mod curve;
pub mod hgrm;
pub mod html;
pub mod json;
pub mod prometheus;

use std::io::{self, IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use crate::domain::Transport;
use crate::engine::{Live, Outcome, Sample};
use crate::metrics::exported::RunFigures;
use crate::metrics::{Bucket, ConnTotals, QueryTotals};
use crate::scenario::{End, Scenario};
use crate::units::{human_bytes, human_us};

/// The files a person looks at, beside the JSON result: `--html` (the
/// report), `--hgrm` (the spectra's prefix) and `--server-stats` (a
/// `throng server --stats-json` file the report draws).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Views {
    pub html: Option<PathBuf>,
    pub hgrm: Option<PathBuf>,
    pub server_stats: Option<PathBuf>,
}

impl Views {
    /// Before a run: a file whose directory does not exist is refused
    /// (the run would measure for nothing).
    pub fn check(&self) -> Result<(), String> {
        let dir_of = |p: &Path| {
            p.parent()
                .filter(|d| !d.as_os_str().is_empty())
                .map(Path::to_path_buf)
        };
        for (flag, p) in [("--html", &self.html), ("--hgrm", &self.hgrm)] {
            if let Some(d) = p.as_deref().and_then(dir_of) {
                if !d.is_dir() {
                    return Err(format!(
                        "{flag} {}: the directory {} does not exist",
                        p.as_deref().unwrap_or(Path::new("")).display(),
                        d.display()
                    ));
                }
            }
        }
        Ok(())
    }

    /// Writes the report and the spectra of `runs` (the result and the
    /// summary are written before: nothing measured is lost here). Says
    /// what it wrote on stdout and each failure on stderr; false when
    /// something could not be written.
    pub fn write(&self, runs: &[html::Run]) -> bool {
        let mut ok = true;
        if let Some(path) = &self.html {
            let server = self
                .server_stats
                .as_deref()
                .map(html::read_server_stats)
                .transpose();
            let written = server.and_then(|s| html::write(path, runs, s.as_deref()));
            match written {
                Ok(()) => println!("  report        {}", path.display()),
                Err(e) => {
                    eprintln!("throng: the HTML report was not written: {e:#}");
                    ok = false;
                }
            }
        }
        if let Some(prefix) = &self.hgrm {
            let tags = hgrm_tags(runs);
            for (run, tag) in runs.iter().zip(&tags) {
                match hgrm::write(prefix, tag.as_deref(), run.result) {
                    Ok(files) => {
                        for f in files {
                            println!("  spectrum      {}", f.display());
                        }
                    }
                    Err(e) => {
                        eprintln!("throng: --hgrm {}: {e:#}", prefix.display());
                        ok = false;
                    }
                }
            }
        }
        ok
    }

    /// [`Views::write`], then the exit code: `code` when all was
    /// written, else 1 (a run's own failure keeps its code).
    pub fn finish(&self, runs: &[html::Run], code: ExitCode) -> ExitCode {
        if self.write(runs) || code != ExitCode::SUCCESS {
            code
        } else {
            ExitCode::from(1)
        }
    }
}

/// The tag in the names of each run's `.hgrm` files: none for one run;
/// for several, each label made a file name (or its number in the list
/// when labels would collide).
fn hgrm_tags(runs: &[html::Run]) -> Vec<Option<String>> {
    if runs.len() < 2 {
        return vec![None; runs.len()];
    }
    let tags: Vec<String> = runs.iter().map(|r| file_word(&r.label)).collect();
    let unique = tags.iter().collect::<std::collections::BTreeSet<_>>().len() == tags.len();
    if unique && tags.iter().all(|t| !t.is_empty()) {
        tags.into_iter().map(Some).collect()
    } else {
        (1..=runs.len()).map(|i| Some(i.to_string())).collect()
    }
}

/// A label as a word of a file name: "tcp (recycle 100)" is
/// "tcp-recycle-100".
fn file_word(label: &str) -> String {
    let mut word = String::new();
    for c in label.chars() {
        if c.is_ascii_alphanumeric() || c == '_' {
            word.push(c);
        } else if !word.is_empty() && !word.ends_with('-') {
            word.push('-');
        }
    }
    word.trim_end_matches('-').to_string()
}

/// The live view: a progress bar on a terminal, one plain line per second
/// otherwise, nothing when quiet.
pub enum LiveView {
    Bar(ProgressBar),
    Lines,
    Quiet,
    /// A child of --processes: JSON lines on stdout for the parent; with
    /// the figures of a parent's --metrics endpoint, they follow each
    /// second.
    Child(Option<std::sync::Arc<std::sync::Mutex<RunFigures>>>),
}

impl LiveView {
    pub fn new(quiet: bool, target: u64) -> LiveView {
        if quiet {
            return LiveView::Quiet;
        }
        if !io::stderr().is_terminal() {
            return LiveView::Lines;
        }
        let bar = ProgressBar::with_draw_target(Some(target), ProgressDrawTarget::stderr());
        bar.set_style(
            ProgressStyle::with_template("{elapsed:>4} [{bar:30}] {pos}/{len} established  {msg}")
                .expect("a valid template")
                .progress_chars("=> "),
        );
        LiveView::Bar(bar)
    }
}

impl Live for LiveView {
    fn second(&mut self, s: &Sample, target: u64) {
        let push = s.push_received.map(|got| {
            format!(
                "  push received {got}/s  lost {}  jitter p99 {}",
                s.push_lost.unwrap_or(0),
                s.push_jitter_p99_us.map_or("-".into(), human_us)
            )
        });
        let traffic = s.sent.map(|sent| {
            let lat = match (s.p50_us, s.p99_us) {
                (Some(a), Some(b)) => format!("  p50 {}  p99 {}", human_us(a), human_us(b)),
                _ => String::new(),
            };
            format!(
                "  target {}/s  sent {sent}  answered {}  timeouts {}  errors {}{lat}",
                s.target.map_or("-".into(), |t| format!("{t:.0}")),
                s.answered.unwrap_or(0),
                s.timed_out.unwrap_or(0),
                s.errors.unwrap_or(0),
            )
        });
        match self {
            LiveView::Bar(bar) => match traffic {
                Some(line) => bar.println(format!("{:>4}s  open {}{line}", s.t, s.connections)),
                None => {
                    bar.set_position(s.established.min(target));
                    bar.set_message(format!(
                        "{}/s  open {}  failed {}",
                        s.established_per_s, s.connections, s.failed
                    ));
                }
            },
            LiveView::Lines => eprintln!(
                "{:>4}s  open {}  established {} (+{}/s)  verified {}  failed {}{}",
                s.t,
                s.connections,
                s.established,
                s.established_per_s,
                s.verified,
                s.failed,
                traffic.or(push).unwrap_or_default()
            ),
            LiveView::Quiet => {}
            LiveView::Child(figures) => {
                crate::child::ChildLine::print_sample(s);
                if let Some(f) = figures {
                    let f = f.lock().unwrap_or_else(|p| p.into_inner()).clone();
                    crate::child::ChildLine::Metrics(Box::new(f)).print();
                }
            }
        }
    }

    fn note(&mut self, line: &str) {
        match self {
            LiveView::Bar(bar) => bar.println(line),
            LiveView::Lines => eprintln!("{line}"),
            LiveView::Quiet | LiveView::Child(_) => {}
        }
    }

    fn ramp_done(&mut self, after: Duration, since_start: Duration, t: &ConnTotals, end: &End) {
        let hold = match end {
            End::Duration { seconds } => format!("holding for {seconds}s"),
            End::Hold => "holding until Ctrl-C".to_string(),
            End::Pause => "holding; press Enter to close".to_string(),
        };
        let line = format!(
            "ramp done in {:.2}s: {} established, {} failed; {hold}",
            after.as_secs_f64(),
            t.established,
            t.failed_total()
        );
        match self {
            LiveView::Bar(bar) => {
                bar.set_position(t.established);
                bar.println(line);
            }
            LiveView::Lines => eprintln!("{line}"),
            // --pause must say it waits even when quiet.
            LiveView::Quiet if *end == End::Pause => eprintln!("{line}"),
            LiveView::Quiet => {}
            LiveView::Child(_) => crate::child::ChildLine::RampDone {
                seconds: after.as_secs_f64(),
                established: t.established,
                failed: t.failed_total(),
                since_start_s: since_start.as_secs_f64(),
            }
            .print(),
        }
    }

    fn finish(&mut self) {
        if let LiveView::Bar(bar) = self {
            bar.finish_and_clear();
        }
    }
}

/// The preflight paragraph: what is about to happen.
pub fn plan_paragraph(sc: &Scenario, ports_per_source: u64) -> String {
    let targets = if sc.embedded_server {
        let mode = if sc.push.is_some() { "push" } else { "echo" };
        format!("{} (embedded {mode} server)", sc.targets[0])
    } else {
        sc.targets
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join(", ")
    };
    let sources = if sc.sources.is_empty() {
        format!("one source address ({ports_per_source} ports)")
    } else {
        let list: Vec<String> = sc.sources.iter().take(4).map(ToString::to_string).collect();
        let more = if sc.sources.len() > 4 { ", ..." } else { "" };
        format!(
            "{} source addresses ({}{more}; {ports_per_source} ports each)",
            sc.sources.len(),
            list.join(", ")
        )
    };
    let ramp = match sc.ramp {
        crate::scenario::Ramp::Rate { per_second } => format!("{per_second}/s"),
        crate::scenario::Ramp::Batch { size, delay_s } => {
            format!("batches of {size} every {delay_s}s")
        }
    };
    let hold = match sc.end {
        End::Duration { seconds } => format!("then hold {seconds} s"),
        End::Hold => "then hold until Ctrl-C".into(),
        End::Pause => "then hold until Enter".into(),
    };
    let mode = match sc.connect_mode {
        crate::domain::ConnectMode::Async => {
            format!("async, up to {} in flight", sc.max_inflight_connects)
        }
        crate::domain::ConnectMode::Sync => "sync, one at a time".into(),
    };
    if let (Some(phases), Some(total)) = (&sc.connections_schedule, sc.schedule_seconds()) {
        return format!(
            "Up to {} connections to {targets} from {sources}, following {} for {total} s \
             (opening at up to {ramp}, closing the oldest first; {mode}, {} worker{}).",
            sc.connections,
            phase_steps(phases),
            sc.workers,
            if sc.workers == 1 { "" } else { "s" },
        );
    }
    let workers = format!(
        "{} worker{}",
        sc.workers,
        if sc.workers == 1 { "" } else { "s" }
    );
    match sc.transport {
        Transport::TcpPerQuery => {
            return format!(
                "A new TCP connection for every query to {targets} from {sources}, up to {} \
                 open at once ({workers}), {hold}.",
                sc.connections,
                hold = hold.trim_start_matches("then ")
            );
        }
        Transport::Udp => {
            return format!(
                "{} connected UDP sockets to {targets} from {sources} ({workers}), {}.",
                sc.connections,
                hold.replace("hold", "run")
            );
        }
        Transport::Tls | Transport::Tcp => {}
    }
    let tls = if sc.transport == Transport::Tls {
        " TLS"
    } else {
        ""
    };
    let mut p = format!(
        "{}{tls} connections to {targets} from {sources}, {ramp} ({mode}, {} worker{}): ramp ≈ {:.1} s, {hold}",
        sc.connections,
        sc.workers,
        if sc.workers == 1 { "" } else { "s" },
        sc.ramp_time().as_secs_f64()
    );
    if let Some(l) = sc.lifetime_s {
        p.push_str(&format!(
            "; each connection lives {l} s{}",
            if sc.reconnect { " and is replaced" } else { "" }
        ));
    }
    if !sc.verify {
        p.push_str("; no verification probe");
    }
    p.push('.');
    p
}

/// --connections-schedule's phases as given: `30s@10k,60s@10k..100k`.
pub(crate) fn phase_steps(phases: &[crate::scenario::Phase]) -> String {
    let steps: Vec<String> = phases
        .iter()
        .map(|p| {
            if p.from == p.to {
                format!("{}s@{}", p.seconds, p.from)
            } else {
                format!("{}s@{}..{}", p.seconds, p.from, p.to)
            }
        })
        .collect();
    steps.join(",")
}

/// The human summary of a run.
pub fn summary(sc: &Scenario, o: &Outcome, out: &mut dyn Write) -> io::Result<()> {
    let t = &o.totals;
    let status = if o.interrupted { " (interrupted)" } else { "" };
    writeln!(
        out,
        "throng client: {:.1}s{status}",
        o.elapsed.as_secs_f64()
    )?;
    for w in &o.overrun {
        writeln!(out, "  OVERRUN: {w}")?;
    }
    match sc.transport {
        Transport::TcpPerQuery => writeln!(
            out,
            "  target        a connection per query, {} at once at most",
            sc.connections
        )?,
        Transport::Udp => writeln!(out, "  target        {} UDP sockets", sc.connections)?,
        _ => writeln!(out, "  target        {} connections", sc.connections)?,
    }
    writeln!(out, "  attempted     {}", t.attempted)?;
    let unverified = if sc.verify {
        format!(" (verified {}, unverified {})", t.verified, t.unverified)
    } else {
        " (not verified: --no-verify)".into()
    };
    writeln!(out, "  established   {}{unverified}", t.established)?;
    if t.probe_rejected > 0 {
        writeln!(
            out,
            "  probe         the server rejected the probe on {} connection(s): {} (it accepted \
             them; give the protocol it speaks: --proto, --http-request, --qname, --message; or \
             --no-verify)",
            t.probe_rejected,
            t.probe_reply.as_deref().unwrap_or("?")
        )?;
    } else if sc.verify && sc.traffic.is_none() && sc.probe.is_none() && sc.push.is_none() {
        writeln!(
            out,
            "  probe         none: --proto raw without --marker cannot tell an answer from \
             other bytes, so connections are not verified"
        )?;
    }
    writeln!(out, "  failed        {}", t.failed_total())?;
    for b in Bucket::ALL {
        let n = t.failed[b as usize];
        if n > 0 {
            writeln!(out, "    {:<15}{n}", b.key())?;
        }
    }
    for (errno, n) in &t.other_errno {
        writeln!(
            out,
            "      errno {errno} ({}): {n}",
            io::Error::from_raw_os_error(*errno)
        )?;
    }
    writeln!(out, "  peak open     {}", o.peak)?;
    match o.ramp_time {
        _ if sc.transport == Transport::TcpPerQuery => {}
        Some(r) => {
            let rate = sc.ramp_established(t) as f64 / r.as_secs_f64().max(1e-9);
            writeln!(
                out,
                "  ramp          {:.2} s, {:.0} connections/s established (asked {:.0}/s)",
                r.as_secs_f64(),
                rate,
                sc.ramp.rate()
            )?;
            if let Some(v) = o
                .verify_time
                .filter(|v| v.as_secs_f64() > r.as_secs_f64() + 0.05)
            {
                writeln!(
                    out,
                    "  verified by   {:.2} s (verification's own time: the ramp's figure above \
                     is establishment's)",
                    v.as_secs_f64()
                )?;
            }
        }
        None if sc.connections_schedule.is_some() => {
            writeln!(
                out,
                "  schedule      {:.1} s",
                sc.schedule_seconds().unwrap_or(0.0)
            )?;
            if (o.peak.max(0) as u64) < sc.connections {
                writeln!(
                    out,
                    "    warning: the schedule asked for {} open connections at its highest; at \
                     most {} were open (held back by the connect rate, {:.0}/s, or by failures \
                     above): the levels it asked were not all reached",
                    sc.connections,
                    o.peak,
                    sc.ramp.rate()
                )?;
            }
        }
        None => writeln!(out, "  ramp          not finished")?,
    }
    let replaced = t.established - t.established_initial.min(t.established);
    if replaced > 0 && sc.transport != Transport::TcpPerQuery && sc.connections_schedule.is_none() {
        writeln!(
            out,
            "  replaced      {replaced} connections established after the ramp's own (not in its \
             rate)"
        )?;
    }
    if let Some(why) = &o.ramp_stopped {
        writeln!(out, "  ramp stopped  {why}")?;
    }
    time_row("connect time", &o.hists.connect_time, "", out)?;
    time_row(
        "in connect()",
        &o.hists.connect_syscall,
        "  (inside the client's kernel)",
        out,
    )?;
    let resumed = format!("  ({} resumed)", t.tls_resumed);
    time_row("tls handshake", &o.hists.tls_handshake, &resumed, out)?;
    writeln!(out, "  closed        {} by throng", t.closed)?;
    if t.peer_closed > 0 {
        writeln!(
            out,
            "  peer closed   {} with nothing in flight: after answering all they were sent, or idle \
             (not failures){}",
            t.peer_closed,
            peer_closed_fate(sc, o)
        )?;
    }
    if let Some(q) = &o.queries {
        let cpu = o.observed.client.as_ref();
        queries_summary(sc, q, &o.hists, (t.failed_total(), cpu), out)?;
        if sc.transport == Transport::TcpPerQuery && !o.hists.service_time.is_empty() {
            let service = o.hists.service_time.mean().max(1.0);
            writeln!(
                out,
                "    connect share  {:.0}% of the mean service time ({} of {}) is the TCP handshake",
                100.0 * o.hists.connect_time.mean() / service,
                human_us(o.hists.connect_time.mean() as u64),
                human_us(service as u64)
            )?;
        }
    }
    if let (Some(p), Some(listen)) = (&o.push, &sc.push) {
        push_summary(sc, listen, p, &o.hists, out)?;
    }
    if let Some(e) = &t.tls_error {
        writeln!(out, "  tls error     {e}")?;
    }
    // Connections the client closed because their bytes could not be
    // framed are counted with resets: say whose bytes they were.
    let garbled = o.push.as_ref().map_or(0, |p| p.malformed)
        + o.queries.as_ref().map_or(0, |q| {
            q.totals.errors[crate::metrics::E_MALFORMED]
                + q.totals.errors[crate::metrics::E_OVERSIZED]
        });
    for b in Bucket::ALL {
        if t.failed[b as usize] > 0 {
            let hint = match b {
                Bucket::Tls => tls_hint(t.tls_error.as_deref()),
                Bucket::Reset if garbled >= t.failed[b as usize] => {
                    "the client closed these connections: the server sent bytes that are not \
                     the protocol asked for (counted malformed or oversized): check --proto (and \
                     --push-format) against what the server speaks"
                }
                Bucket::TimedOut | Bucket::HalfOpen => {
                    &*unaccepted_hint(b, o).unwrap_or_else(|| b.hint().into())
                }
                _ => b.hint(),
            };
            writeln!(out, "  hint ({}): {hint}", b.key())?;
            if b == Bucket::NoFreePort && sc.transport == Transport::TcpPerQuery {
                writeln!(
                    out,
                    "  hint (tcp-per-query): each closed connection keeps its port in TIME_WAIT \
                     for 60 s, so the port range runs dry at (ports x sources) / 60 queries/s: \
                     set net.ipv4.tcp_tw_reuse=1 (sysctl -w) or add source addresses (--source-ip)"
                )?;
            }
        }
    }
    if let Some(c) = &o.observed.client {
        let embedded = if sc.embedded_server {
            " (with the embedded server's: it runs in this process)"
        } else {
            ""
        };
        writeln!(out, "  client cpu    {}{embedded}", cpu_words(c, o))?;
    }
    if let Some(seen) = &o.observed.server {
        writeln!(out, "  server seen   {}", seen.line())?;
    }
    if let Some(h) = retransmit_hint(o) {
        writeln!(out, "  hint (handshake): {h}")?;
    } else if let Some(h) = client_connect_hint(sc, o) {
        writeln!(out, "  hint (client): {h}")?;
    }
    let udp_silent = udp_silence_hint(sc, o);
    if let Some(h) = udp_silent {
        writeln!(out, "  hint (udp): {h}")?;
    }
    if udp_silent.is_some() {
        // Said above, with the causes UDP has.
    } else if t.unverified > 0 && sc.push.is_some() {
        writeln!(
            out,
            "  hint (unverified): {} connection(s) got no message in all their time (more than \
             two periods): the server accepted them and pushed nothing to them. Is it a push \
             server, with this --push-format? (throng server --mode push, or lines with a \
             sequence number first)",
            t.unverified
        )?;
    }
    if let Some(stall) = verification_stall(o) {
        writeln!(out, "  verified      {stall}")?;
    }
    if udp_silent.is_some() || (t.unverified > 0 && sc.push.is_some()) {
        // Said above.
    } else if let Some(cause) = o
        .observed
        .server
        .as_ref()
        .filter(|_| t.unverified > 0)
        .and_then(|s| s.cause(t.unverified))
    {
        writeln!(
            out,
            "  hint (unverified): {} connection(s) were established but never answered: {cause}",
            t.unverified
        )?;
    } else if t.unverified > 0 && t.verified == 0 && t.probe_rejected == 0 {
        // Not one answer: an accept queue drops some connections, not all.
        let what = sc
            .traffic
            .as_ref()
            .map(|t| t.query.name())
            .or(sc.probe.as_ref().map(|q| q.name()))
            .unwrap_or("DNS");
        writeln!(
            out,
            "  hint (unverified): no connection got an answer (to the probe within \
             --connect-timeout, or to any query): the server does not answer {what} queries, or \
             not in time. Give the protocol it speaks (--proto, --http-request, --qname, \
             --message) or --no-verify"
        )?;
    } else if t.unverified > 0 && sc.transport == Transport::Udp {
        // UDP has no accept queue: a socket without an answer is one whose
        // every datagram went unanswered.
        writeln!(
            out,
            "  hint (unverified): {} of the UDP sockets never got an answer to any of their \
             queries while others did: the server dropped what they sent (its rate limiting, \
             or datagrams lost on the way: see the queries' timeouts); --no-verify skips the \
             check",
            t.unverified
        )?;
    } else if let (true, Some(s)) = (t.unverified > 0, &o.observed.server) {
        // Seen, and its queue and fds show no cause: it took them.
        writeln!(
            out,
            "  hint (unverified): {} connection(s) never got an answer (to the probe within \
             --connect-timeout, or with queries to any of them): the server's \
             process ({}, pid {}) had fds to spare and its accept queue (up to {}) never \
             overflowed, so it accepted them and did not answer them (a limit of its own, or \
             it answers some connections only: see its log); --no-verify skips the check",
            t.unverified, s.name, s.pid, s.accept_queue_max
        )?;
    } else if t.unverified > 0 {
        writeln!(
            out,
            "  hint (unverified): some connections never got an answer (to the probe within \
             --connect-timeout, or with queries to any of them): the server may not have accepted \
             them (a full accept queue), or it does not answer this protocol; --no-verify skips \
             the check"
        )?;
    }
    Ok(())
}

/// The timed-out and half-open buckets from what was seen of the server:
/// the cause it showed, or, when it was seen and showed none, the causes
/// that are left. None when it was not seen (the bucket's own words say
/// what to look at).
fn unaccepted_hint(b: Bucket, o: &Outcome) -> Option<String> {
    let seen = o.observed.server.as_ref()?;
    let t = &o.totals;
    let never = t.failed[Bucket::TimedOut as usize] + t.failed[Bucket::HalfOpen as usize];
    if let Some(cause) = seen.cause(never + t.unverified) {
        return Some(cause);
    }
    Some(match b {
        Bucket::TimedOut => format!(
            "SYNs went unanswered, though the server's process ({}, pid {}) had fds to spare \
             ({} of {}) and its accept queue never overflowed: the SYN backlog \
             (net.ipv4.tcp_max_syn_backlog, SYN cookies) or a firewall dropped them",
            seen.name, seen.pid, seen.fds_max, seen.fd_limit
        ),
        _ => format!(
            "the server reset connections before answering anything, though its process ({}, \
             pid {}) had fds to spare and its accept queue never overflowed: it closed them \
             itself (a limit of its own; see its log)",
            seen.name, seen.pid
        ),
    })
}

/// The client's CPU in words: its share of the cores it may use, per
/// answer, and whether it shared them with the server.
fn cpu_words(c: &crate::evidence::ClientCpu, o: &Outcome) -> String {
    let per_answer = if c.cpu_us_per_answer > 0.0 {
        format!(", {:.1} µs per answer", c.cpu_us_per_answer)
    } else {
        String::new()
    };
    let shared = match &o.observed.server {
        Some(s) if c.shares_cores_with_server => format!(
            "; it shares its cores with the server ({}, {:.2} s of CPU)",
            s.name, s.cpu_s
        ),
        _ => String::new(),
    };
    format!(
        "{:.0}% of {} core(s) ({:.2} s){per_answer}{shared}",
        c.cpu_pct, c.cores, c.cpu_s
    )
}

/// A client this busy (% of its cores) may be why queries were late.
pub const CLIENT_BUSY_PCT: f64 = 80.0;

/// What an answer that failed says about the server, for the summary.
fn failed_answer_words(what: &str) -> &'static str {
    match what {
        "REFUSED" => {
            "the server refuses this client: its access control (unbound's access-control, \
             BIND's allow-query), or its rate limiting"
        }
        "SERVFAIL" => {
            "the server failed to answer: an upstream it could not reach, or its own error"
        }
        "FORMERR" => "the server could not parse the query: check --qname, --qtype, --edns",
        "NOTIMP" => "the server does not implement this query (its type or opcode)",
        "mismatch" => "the reply was not the one expected (--validate, a line that is not a pong)",
        h if h.starts_with("http_5") => {
            "the server failed the request or is overloaded (a 5xx: its error log says which)"
        }
        h if h.starts_with("http_4") => {
            "the server rejected the request: check --http-request (path, Host, method)"
        }
        _ => "not a success for this protocol (--ok-rcodes, --ok-status widen what is)",
    }
}

/// Where verification stopped growing while establishment went on: the
/// server's kernel completed handshakes its process never took (a full
/// accept queue that still answers SYNs, a process out of fds).
fn verification_stall(o: &Outcome) -> Option<String> {
    let t = &o.totals;
    if t.unverified == 0 || t.verified == 0 {
        return None;
    }
    let last_growth = o
        .per_second
        .windows(2)
        .rev()
        .find(|w| w[1].verified > w[0].verified)
        .map(|w| &w[1])
        .or(o.per_second.first())?;
    // Grew no more for the seconds after (a ramp done within its first
    // second stalls there too) while more connections were established.
    // (A few unverified among many say nothing of where it stopped: at
    // least one in a hundred established.)
    let last = o.per_second.last()?;
    let many = t.unverified * 100 >= t.established;
    (many && t.established > last_growth.verified && last.t > last_growth.t).then(|| {
        format!(
            "stopped at {} ({} s into the run, none verified in the {} s after) while \
             established went on to {}",
            last_growth.verified,
            last_growth.t,
            last.t - last_growth.t,
            t.established
        )
    })
}

/// What the server's closes did to a run with queries: replaced, or (with
/// --no-reconnect) the connections and rate they took away.
fn peer_closed_fate(sc: &Scenario, o: &Outcome) -> String {
    if sc.traffic.is_none() || sc.transport == Transport::TcpPerQuery {
        return String::new();
    }
    if sc.reconnect || sc.replace_closed {
        return ", each replaced".into();
    }
    let open_at_end = o.per_second.last().map_or(0, |s| s.connections.max(0));
    let first = o.per_second.first().and_then(|s| s.answered).unwrap_or(0);
    let last = o
        .per_second
        .iter()
        .rev()
        .find_map(|s| s.answered)
        .unwrap_or(0);
    format!(
        "; not replaced (--no-reconnect): {open_at_end} of {} open at the end, answered \
         {first}/s in the first second and {last}/s in the last",
        sc.connections
    )
}

/// Above this share of the messages due received, and under this jitter
/// p99, the server kept its period.
const PUSH_KEPT_SHARE: f64 = 0.999;
const PUSH_KEPT_JITTER_US: u64 = 5_000;
/// A client whose workers were busy this share of their time read late.
const PUSH_BUSY: f64 = 0.8;

/// --proto push in words: what arrived, whether the server kept its
/// period, and the times.
fn push_summary(
    sc: &Scenario,
    listen: &crate::scenario::PushListen,
    p: &crate::metrics::PushTotals,
    h: &crate::metrics::Histograms,
    out: &mut dyn Write,
) -> io::Result<()> {
    let share = p.received as f64 / p.expected.max(1) as f64;
    writeln!(
        out,
        "  push          received {} of {} expected ({:.2}%), one every {} a connection",
        p.received,
        p.expected,
        100.0 * share,
        human_us((listen.every_s * 1e6).round() as u64)
    )?;
    let mut odd = Vec::new();
    if p.lost > 0 {
        odd.push(format!(
            "lost {} ({:.2}%) on {} connection(s)",
            p.lost,
            100.0 * p.lost as f64 / p.expected.max(1) as f64,
            p.connections_with_loss
        ));
    }
    for (n, what) in [
        (p.out_of_order, "out of order"),
        (p.duplicates, "duplicates"),
        (p.malformed, "malformed (connection ended)"),
    ] {
        if n > 0 {
            odd.push(format!("{what} {n}"));
        }
    }
    if !odd.is_empty() {
        writeln!(out, "    {}", odd.join(", "))?;
    }
    time_row(
        "  jitter",
        &h.push_jitter,
        "  (arrival gap minus the period)",
        out,
    )?;
    time_row(
        "  gap",
        &h.push_gap,
        "  (between arrivals on a connection)",
        out,
    )?;
    if let Some(clock) = crate::engine::delay_clock(sc, listen) {
        if p.stamps_ahead > 0 {
            writeln!(
                out,
                "    delay       not measured: {} send stamps were ahead of this host's {} \
                 clock: {}",
                p.stamps_ahead,
                clock,
                if clock == "wall" {
                    "the hosts' clocks disagree (--clock-sync trusts that they agree)"
                } else {
                    "the server is not on this host (a forwarded port?)"
                }
            )?;
        } else {
            let from = match clock {
                "wall" => "  (from the send stamp, wall clocks: --clock-sync)",
                _ => "  (from the send stamp; the server is on this host)",
            };
            time_row("  delay", &h.push_delay, from, out)?;
        }
    }
    let jitter_p99 = (!h.push_jitter.is_empty()).then(|| h.push_jitter.value_at_quantile(0.99));
    let kept = share >= PUSH_KEPT_SHARE && jitter_p99.is_none_or(|j| j <= PUSH_KEPT_JITTER_US);
    // A client whose workers never waited read what arrived late: its
    // jitter and delay are its own as much as the server's.
    let busy = p.busy();
    let late_reads = busy >= PUSH_BUSY && !(kept && share >= PUSH_KEPT_SHARE);
    let verdict = if p.expected == 0 {
        "no message was due: the connections did not last a period".to_string()
    } else if late_reads && share >= PUSH_KEPT_SHARE {
        format!(
            "cannot tell whether the server kept its period: {:.2}% arrived, but the client's \
             workers were busy {:.0}% of the time, so arrivals were read late and the jitter \
             (p99 {}) is partly the client's own. Give the client more cores (--processes, \
             another host: throng cluster)",
            100.0 * share,
            100.0 * busy,
            jitter_p99.map_or("-".into(), human_us)
        )
    } else if kept {
        format!(
            "the server kept its period: {:.2}% arrived, jitter p99 {}",
            100.0 * share,
            jitter_p99.map_or("-".into(), human_us)
        )
    } else {
        let why = if share < PUSH_KEPT_SHARE {
            let tcp = sc.transport != Transport::Udp;
            format!(
                "{:.2}% of the messages due arrived{}",
                100.0 * share,
                if tcp {
                    " (over TCP nothing is lost on the way: the server skipped them, sent \
                     them late, fell silent or closed the connections; a throng server's \
                     summary says which)"
                } else {
                    " (over UDP, lost on the way or not sent by the server: a throng \
                     server's summary says how many it sent)"
                }
            )
        } else {
            format!(
                "jitter p99 {} is above {}",
                jitter_p99.map_or("-".into(), human_us),
                human_us(PUSH_KEPT_JITTER_US)
            )
        };
        format!("the server did not keep its period: {why}")
    };
    writeln!(out, "    {verdict}")?;
    if late_reads && share < PUSH_KEPT_SHARE {
        writeln!(
            out,
            "    warning: the client's workers were busy {:.0}% of the time: it read late and \
             its sockets may have filled (then the server skipped messages for it). Measure \
             again with the client on more cores (--processes, another host) before blaming \
             the server",
            100.0 * busy
        )?;
    }
    Ok(())
}

/// The kernel's first retransmission timeout for a SYN, in µs: a handshake
/// whose packet was dropped completes a second or more late.
const SYN_RTO_US: u64 = 1_000_000;

/// Says when the connect-time tail is a retransmitted handshake: p99 at
/// the kernel's 1 s SYN timeout or beyond, far more than the client's own
/// connect() calls took. The client's work cannot add a second; a dropped
/// SYN or final ACK does: a full accept queue or SYN backlog at the server
/// (or a lossy path). Checked before [`client_connect_hint`], so such a
/// tail never reads as the client's.
pub fn retransmit_hint(o: &Outcome) -> Option<String> {
    let (sys, conn) = (&o.hists.connect_syscall, &o.hists.connect_time);
    if conn.is_empty() {
        return None;
    }
    let conn_p99 = conn.value_at_quantile(0.99);
    let sys_p99 = if sys.is_empty() {
        0
    } else {
        sys.value_at_quantile(0.99)
    };
    if conn_p99 < SYN_RTO_US * 9 / 10 || sys_p99 * 4 >= conn_p99 {
        return None;
    }
    let late = 1.0 - conn.quantile_below(SYN_RTO_US * 9 / 10);
    let t = &o.totals;
    let never = t.failed[Bucket::TimedOut as usize] + t.failed[Bucket::HalfOpen as usize];
    // Why the server side dropped it: what was seen of it, or where to
    // look (no fix for a cause not seen).
    let why = match &o.observed.server {
        Some(s) => s.cause(never + t.unverified).unwrap_or_else(|| {
            format!(
                "its process ({}, pid {}) had fds to spare and its accept queue did not \
                 overflow, so the SYN backlog (net.ipv4.tcp_max_syn_backlog) or the path \
                 dropped it",
                s.name, s.pid
            )
        }),
        None => "a full accept queue or SYN backlog, or the path; throng cannot see the \
                 server from here: on it, look at `nstat -az TcpExtListenOverflows \
                 TcpExtListenDrops` and `ss -ltn` (Recv-Q against Send-Q)"
            .into(),
    };
    Some(format!(
        "{:.1}% of the connections took {} or more to establish (p99 {}), while the client's \
         connect() calls took p99 {}: their handshake was retransmitted after the kernel's 1 s \
         timeout. The server side dropped it: {why}",
        100.0 * late,
        human_us(SYN_RTO_US * 9 / 10),
        human_us(conn_p99),
        human_us(sys_p99),
    ))
}

/// Says when the connect times are the client's own: its connect() calls
/// (the kernel searching for a free ephemeral port) were slow, or kept its
/// workers so busy during the ramp that established connections waited for
/// the loop. None when the server side explains them (or nothing does).
pub fn client_connect_hint(sc: &Scenario, o: &Outcome) -> Option<String> {
    let (sys, conn) = (&o.hists.connect_syscall, &o.hists.connect_time);
    if sys.is_empty() || conn.is_empty() {
        return None;
    }
    let conn_p99 = conn.value_at_quantile(0.99);
    let sys_p99 = sys.value_at_quantile(0.99);
    // Under a few milliseconds nobody needs an explanation.
    if conn_p99 < 5_000 {
        return None;
    }
    let cores = std::thread::available_parallelism().map_or(1, |c| c.get());
    let threads = sc.workers.clamp(1, cores) as f64;
    // tcp-per-query connects through the whole run, not in a ramp.
    let (window, during) = match sc.transport {
        Transport::TcpPerQuery => (Some(o.elapsed), "the run"),
        _ => (o.ramp_time, "the ramp"),
    };
    let busy = window.map_or(0.0, |r| {
        sys.mean() * sys.len() as f64 / 1e6 / r.as_secs_f64().max(1e-3) / threads
    });
    let busy_pct = (busy * 100.0).min(100.0);
    let calls = format!(
        "its connect() calls took p99 {} (p50 {}) and kept its workers {busy_pct:.0}% busy \
         during {during}",
        human_us(sys_p99),
        human_us(sys.value_at_quantile(0.5)),
    );
    if sys_p99 >= 1_000 && (sys_p99 * 4 >= conn_p99 || busy >= 0.5) {
        return Some(format!(
            "the connect times are the client's, not the server's: {calls}. That is the \
             client's kernel searching for a free ephemeral port: too many connections share a \
             (source, destination) pair. Add source addresses (--source-ip 127.0.0.0/24 on \
             loopback; `ip addr add` elsewhere) or widen the range (sysctl -w \
             net.ipv4.ip_local_port_range=\"1024 65535\")"
        ));
    }
    if busy >= 0.5 {
        return Some(format!(
            "the connect times include the client's own work: {calls}, so established \
             connections waited for its loop. The client ran at its limit ({:.0}/s asked); for \
             the server's own figure, ramp slower (--connect-rate) or give the client more cores \
             (--workers, --processes, more hosts)",
            sc.ramp.rate()
        ));
    }
    None
}

/// What due queries waited for before they were sent, from the counts
/// of [`crate::metrics::WAIT_CAUSES`]: the server's pace, named with the
/// figures that show it. None when none waited.
pub fn wait_words(
    sc: &Scenario,
    t: &QueryTotals,
    h: &crate::metrics::Histograms,
) -> Option<String> {
    use crate::metrics::{W_SLOT, W_SOCKET, W_WINDOW};
    let total: u64 = t.waited.iter().sum();
    if total == 0 {
        return None;
    }
    let most = (0..t.waited.len())
        .max_by_key(|&i| t.waited[i])
        .unwrap_or(W_WINDOW);
    let n = t.waited[most];
    let mean_us = |h: &hdrhistogram::Histogram<u64>| if h.is_empty() { 0.0 } else { h.mean() };
    Some(match most {
        W_SLOT => {
            let slots = sc.connections.max(1);
            let per_query = mean_us(&h.service_time) + mean_us(&h.connect_time);
            let syscall = mean_us(&h.connect_syscall);
            if per_query > 0.0 && syscall * 2.0 > per_query {
                // Most of a query's time is the client's own connect()
                // (its kernel searching for a free port): not the server.
                return Some(format!(
                    "{n} queries waited for a free tcp-per-query slot (--concurrency {slots}), \
                     and most of a query's {} is the client's own connect() call ({}, its \
                     kernel searching for a free port): give it more source addresses \
                     (--source-ip) or a wider net.ipv4.ip_local_port_range",
                    human_us(per_query.round() as u64),
                    human_us(syscall.round() as u64)
                ));
            }
            let carry = if per_query > 0.0 {
                format!(
                    ": at {} a query (connect and answer, mean) {slots} slot{} carry at most \
                     {:.0}/s (Little's law)",
                    human_us(per_query.round() as u64),
                    if slots == 1 { "" } else { "s" },
                    slots as f64 * 1e6 / per_query
                )
            } else {
                String::new()
            };
            format!(
                "{n} queries waited for a free tcp-per-query slot (--concurrency {slots}){carry}: \
                 the server's time per query sets the pace, not the client. Raise --concurrency \
                 or ask for less"
            )
        }
        W_SOCKET => format!(
            "{n} queries waited behind sockets the server did not read (their send buffers \
             full): the server was not reading what it was sent"
        ),
        _ => {
            let window = match sc.traffic.as_ref().and_then(|t| t.window) {
                Some(w) => format!("--window {w}"),
                None => "window".into(),
            };
            format!(
                "{n} queries waited for room in their connection's {window} (answers still \
                 owed): the server answered slower than they came due"
            )
        }
    })
}

/// The client's loop kept its time while queries were late (its p99 lag
/// under 1 ms, or a quarter of theirs): what they waited for was not the
/// client's loop.
fn loop_kept(h: &crate::metrics::Histograms) -> bool {
    let lag = h.send_lag.value_at_quantile(0.99);
    let loop_lag = h.loop_lag.value_at_quantile(0.99);
    loop_lag <= 1000 || loop_lag * 4 <= lag
}

/// Whether the client's own lateness explains the response times, from
/// the figures: its send lag (and its loop's) set against the service
/// time's tail, and its CPU (`cpu`: a client near its cores' limit, or
/// sharing them with the server, clears neither side). None when it sent
/// on time and was not busy. `not_sent`: queries given up behind full
/// sockets or windows; then the lag is theirs, not the client's.
pub fn lag_warning(
    h: &crate::metrics::Histograms,
    not_sent: u64,
    waited: Option<&str>,
    cpu: Option<&crate::evidence::ClientCpu>,
) -> Option<String> {
    let lag = h.send_lag.value_at_quantile(0.99);
    let loop_lag = h.loop_lag.value_at_quantile(0.99);
    let busy = cpu.filter(|c| c.cpu_pct >= CLIENT_BUSY_PCT);
    let competing =
        cpu.filter(|c| c.shares_cores_with_server && c.with_server_pct >= CLIENT_BUSY_PCT);
    let contended = match (busy, competing) {
        (_, Some(c)) => Some(format!(
            "the client used {:.0}% of its {} core(s), which it shares with the server: the two \
             together kept them {:.0}% busy",
            c.cpu_pct, c.cores, c.with_server_pct
        )),
        (Some(c), None) => Some(format!(
            "the client used {:.0}% of its {} core(s)",
            c.cpu_pct, c.cores
        )),
        _ => None,
    };
    if lag.max(loop_lag) <= 1000 {
        return contended.map(|c| {
            format!(
                "note: {c}; it sent on time, but the times measured include waits for a core on \
                 both sides: run the client on other cores (taskset) or another host to tell \
                 the server's own figure"
            )
        });
    }
    let lags = format!(
        "send lag p99 {}, its loop's p99 {}",
        human_us(lag),
        human_us(loop_lag)
    );
    // The loop kept its time while queries were late: they waited on
    // their connections (a window, a socket, a slot), for the server.
    if let (true, None, Some(w)) = (loop_kept(h), &contended, waited) {
        let never = if not_sent > 0 {
            format!(", and {not_sent} were never sent")
        } else {
            String::new()
        };
        return Some(format!(
            "note: the queries' send lag ({lags}) is time they waited for the server, not the \
             client's: {w}{never}; the wait counts in their response time"
        ));
    }
    if not_sent > 0 {
        return Some(format!(
            "note: queries waited to be sent ({lags}) behind their connections' full sockets \
             or windows, and {not_sent} were never sent: the server did not take them; the \
             wait counts in their response time"
        ));
    }
    if h.service_time.is_empty() {
        return Some(format!(
            "warning: the client sent late ({lags}); with no answer there is no service time \
             to set it against"
        ));
    }
    let service = h.service_time.value_at_quantile(0.99);
    let sharing = cpu.filter(|c| c.shares_cores_with_server);
    if let (true, Some(c)) = (lag * 2 >= service, sharing) {
        Some(format!(
            "warning: the client sent late ({lags}) against a service time p99 of {}, and it \
             shares its {} core(s) with the server (the two kept them {:.0}% busy; the client \
             {:.0}%): each delays the other, so neither side's figure is its own. Run the \
             client on other cores (taskset -c) or another host",
            human_us(service),
            c.cores,
            c.with_server_pct,
            c.cpu_pct
        ))
    } else if lag * 2 >= service {
        Some(format!(
            "warning: the client is the bottleneck: it sent late ({lags}) against a service \
             time p99 of {}: much of the response time is its own delay. Give it more cores \
             (--workers, --processes, more hosts) or ask for less",
            human_us(service)
        ))
    } else if let Some(c) = contended {
        Some(format!(
            "note: the client sent some queries late ({lags}) and {c}: the service time's tail \
             (p99 {}) cannot be put on the server alone; run the client on other cores \
             (taskset) or another host to tell",
            human_us(service)
        ))
    } else if loop_lag * 4 > service {
        // A loop that late reads the answers late too: the service time's
        // tail holds the client's own delay.
        Some(format!(
            "note: the client sent some queries late ({lags}); a loop that late reads the \
             answers late as well, so the service time's tail (p99 {}) holds the client's own \
             delay and cannot be put on the server alone. For the server's own figure, give \
             the client more cores (--workers, --processes, more hosts) or ask for less",
            human_us(service)
        ))
    } else {
        Some(format!(
            "note: the client sent some queries late ({lags}), but the service time's tail \
             (p99 {}) is well above that: the tail is the server's or the network's, not the \
             client's",
            human_us(service)
        ))
    }
}

/// A service-time tail at the delayed-ACK timer (about 40 ms on Linux)
/// while queries were pipelined on connections: the server's replies wait
/// in Nagle's algorithm for the ACK of the previous one (a server that does
/// not set TCP_NODELAY). Says so with both fixes.
pub fn nagle_hint(
    sc: &Scenario,
    q: &crate::engine::QueryOutcome,
    h: &crate::metrics::Histograms,
) -> Option<String> {
    if matches!(sc.transport, Transport::Udp) || h.service_time.is_empty() {
        return None;
    }
    let t = &q.totals;
    let (p50, p99, p999) = (
        h.service_time.value_at_quantile(0.5),
        h.service_time.value_at_quantile(0.99),
        h.service_time.value_at_quantile(0.999),
    );
    // The tail reaches the timer (p99 or p99.9 at 30..=60 ms: an answer
    // waits up to the timer, less when the client's next query carries the
    // ACK sooner), far above the median, and at least one query in a
    // thousand went out behind another.
    let tail = if (30_000..=60_000).contains(&p99) {
        p99
    } else {
        p999
    };
    let near_timer = (30_000..=60_000).contains(&tail) && p50 * 10 < tail;
    // A client whose own loop ran that late read the answers late: the
    // tail is its wait for a core, not the server's Nagle.
    let client_late = h.loop_lag.value_at_quantile(0.99) * 2 >= tail;
    if !near_timer || client_late || t.pipelined * 1000 < t.sent {
        return None;
    }
    Some(format!(
        "the service time's tail (p99 {}, p99.9 {}) reaches the delayed-ACK timer (~40 ms), \
         far above its p50 ({}), and {:.1}% of the queries went out while another was in \
         flight on their \
         connection: the server's replies likely wait in Nagle's algorithm for the ACK of the \
         previous one. On the server set TCP_NODELAY on its sockets; on throng's side send one \
         query at a time per connection (--window 1, or --spread round-robin --arrivals \
         constant)",
        human_us(p99),
        human_us(p999),
        human_us(p50),
        100.0 * t.pipelined as f64 / t.sent.max(1) as f64
    ))
}

/// DNS answers without TC=1 (whole).
fn whole_answers(q: &crate::engine::QueryOutcome) -> u64 {
    q.statuses
        .rcodes
        .iter()
        .sum::<u64>()
        .saturating_sub(q.totals.truncated)
}

/// Over UDP, `truncated` answers of the run's one question while `whole`
/// others of it came whole: the answer fits a datagram, so the server cut
/// them to slow this client (response rate limiting's slip).
fn rate_limited(sc: &Scenario, truncated: u64, whole: u64) -> bool {
    let one_question = match sc.traffic.as_ref().map(|t| &t.query) {
        Some(crate::scenario::Query::Dns { names, qtypes, .. }) => {
            names.len() == 1 && qtypes.len() <= 1
        }
        _ => false,
    };
    sc.transport == Transport::Udp && truncated > 0 && whole > 0 && one_question
}

/// The summary's words for `n` DNS answers with the TC bit set: counted
/// as answered (the server did answer), but cut short, and why, from what
/// the server did: over UDP, answers to the same question that came whole
/// prove the answer fits a datagram, so the server cut the others to slow
/// this client (response rate limiting's "slip", nsd's and BIND's
/// rrl-slip), which no --edns changes; `whole`: DNS answers without TC,
/// `timed_out`: queries it dropped (rate limiting drops the rest).
fn truncated_words(sc: &Scenario, n: u64, whole: u64, timed_out: u64) -> String {
    let cut = format!("{n} answers had TC=1 (counted as answered)");
    if sc.transport != Transport::Udp {
        return format!(
            "{cut}: the server cut them short even over TCP, which carries answers up to 64 KiB whole"
        );
    }
    let dropped = if timed_out > 0 {
        format!(", and {timed_out} queries got no answer at all (dropped)")
    } else {
        String::new()
    };
    if rate_limited(sc, n, whole) {
        format!(
            "{cut}: the same question came whole over UDP {whole} times, so the answer fits a \
             datagram{dropped}: the server truncates to slow this client down (response rate \
             limiting, \"slip\": nsd's rrl-ratelimit, BIND's rate-limit), and a larger --edns \
             changes nothing. Lower the rate, spread it over more source addresses, or exempt \
             this client in the server's rate limiting"
        )
    } else if whole > 0 {
        format!(
            "{cut}, {whole} came whole{dropped}: either some of the names' answers do not fit a \
             UDP datagram (--edns SIZE offers a larger one; over TCP they come whole), or, when \
             the same names also came whole, the server's response rate limiting truncates \
             (\"slip\") to slow this client down"
        )
    } else {
        format!(
            "{cut}, none came whole{dropped}: the answers do not fit a UDP datagram (--edns SIZE \
             offers a larger one; over TCP, --transport tcp, they come whole), or the server's \
             response rate limiting truncates every answer; one query over TCP tells which"
        )
    }
}

/// Over UDP, queries sent and not one datagram back: nothing serves
/// UDP there or a firewall drops the datagrams (the usual causes, first),
/// or the server answers from another address or port than it was asked
/// on, which a connected UDP socket never receives (the kernel drops it).
pub fn udp_silence_hint(sc: &Scenario, o: &Outcome) -> Option<&'static str> {
    let t = &o.queries.as_ref()?.totals;
    let silent = sc.transport == Transport::Udp && t.timed_out > 0 && t.bytes_in == 0;
    silent.then_some(
        "no answer came back over UDP (every query timed out): nothing serves UDP on that \
         address and port, a firewall drops the datagrams, or the server answers from another \
         address or port than it was asked on, which throng's connected UDP sockets never \
         receive (tcpdump on either side shows which)",
    )
}

/// The hint for TLS failures, by the first error's words: a session that
/// broke after its handshake, a server that does not speak TLS, one that
/// refused the handshake or never finished it is not a question of the
/// client's trust.
fn tls_hint(first_error: Option<&str>) -> &'static str {
    use crate::metrics::{AFTER_HANDSHAKE, NOT_TLS, TLS_ALERT, TLS_TIMED_OUT};
    match first_error {
        Some(e) if e.starts_with(AFTER_HANDSHAKE) => {
            "TLS sessions broke after their handshake succeeded (the first error is shown \
             above): the server, or something on the path, sent bytes that are not records of \
             the session; certificates and --sni are not the cause"
        }
        Some(e) if e.starts_with(NOT_TLS) => {
            "the server did not answer the ClientHello with TLS (the first error is shown \
             above): what listens on that port does not speak TLS (a plain TCP port? DNS over \
             TLS is port 853)"
        }
        Some(e) if e.starts_with(TLS_ALERT) => {
            "the server refused the handshake (its alert is shown above): it accepts none of \
             the TLS versions or ciphers offered, or not the name (--sni) or protocol (--alpn) \
             asked, or it wants a client certificate"
        }
        Some(e) if e.starts_with(TLS_TIMED_OUT) => {
            "the server accepted the connections but did not answer the ClientHello in time \
             (nothing, or not all of it, came back within --connect-timeout): what listens on \
             that port may not speak TLS and waits for bytes of its own protocol (a plain TCP \
             port? DNS over TLS is port 853), or it is too busy to finish handshakes (a longer \
             --connect-timeout tells the two apart); certificates and --sni are not the cause"
        }
        _ => Bucket::Tls.hint(),
    }
}

/// One line of connection-time percentiles (nothing when empty).
fn time_row(
    name: &str,
    h: &hdrhistogram::Histogram<u64>,
    tail: &str,
    out: &mut dyn Write,
) -> io::Result<()> {
    if h.is_empty() {
        return Ok(());
    }
    writeln!(
        out,
        "  {name:<14}p50 {}  p90 {}  p99 {}  p99.9 {}  max {}{tail}",
        human_us(h.value_at_quantile(0.5)),
        human_us(h.value_at_quantile(0.9)),
        human_us(h.value_at_quantile(0.99)),
        human_us(h.value_at_quantile(0.999)),
        human_us(h.max())
    )
}

fn latency_row(
    name: &str,
    h: &hdrhistogram::Histogram<u64>,
    out: &mut dyn Write,
) -> io::Result<()> {
    if h.is_empty() {
        return writeln!(out, "    {name:<15}no answers");
    }
    writeln!(
        out,
        "    {name:<15}p50 {}  p90 {}  p99 {}  p99.9 {}  p99.99 {}  max {}  mean {}  stdev {}",
        human_us(h.value_at_quantile(0.5)),
        human_us(h.value_at_quantile(0.9)),
        human_us(h.value_at_quantile(0.99)),
        human_us(h.value_at_quantile(0.999)),
        human_us(h.value_at_quantile(0.9999)),
        human_us(h.max()),
        human_us(h.mean() as u64),
        human_us(h.stdev() as u64),
    )
}

fn mbps(bytes: u64, secs: f64) -> String {
    format!("{:.2} Mbps", bytes as f64 * 8.0 / secs.max(1e-9) / 1e6)
}

/// The query part of the summary (`conns_failed`: connections that
/// failed, whose queries may never have been sent).
fn queries_summary(
    sc: &Scenario,
    q: &crate::engine::QueryOutcome,
    h: &crate::metrics::Histograms,
    (conns_failed, cpu): (u64, Option<&crate::evidence::ClientCpu>),
    out: &mut dyn Write,
) -> io::Result<()> {
    use crate::scenario::Model;
    let t = &q.totals;
    let closed = matches!(
        sc.traffic.as_ref().map(|t| &t.model),
        Some(Model::ClosedLoop { .. })
    );
    let secs = q.seconds.max(1e-9);
    // Achieved is what the server answered; what was sent is beside it.
    let achieved = t.answered as f64 / secs;
    let sent = t.sent as f64 / secs;
    writeln!(out, "  queries       over {secs:.2} s")?;
    if closed {
        writeln!(
            out,
            "    rate        {achieved:.0}/s achieved (answered; closed loop: set by the server), \
             {sent:.0}/s sent"
        )?;
    } else {
        let target = q.target_queries / secs;
        let of = |r: f64| {
            if target > 0.0 {
                r / target * 100.0
            } else {
                100.0
            }
        };
        let (pct, sent_pct) = (of(achieved), of(sent));
        writeln!(
            out,
            "    rate        {achieved:.0}/s achieved (answered) of {target:.0}/s asked ({pct:.1}%); \
             sent {sent:.0}/s ({sent_pct:.1}%)"
        )?;
        // Poisson arrivals: the count over the run varies by about its
        // square root around the target; a shortfall within 3 of those is
        // chance, not the client.
        let poisson = matches!(
            sc.traffic.as_ref().map(|t| &t.model),
            Some(Model::OpenLoop {
                arrivals: crate::domain::Arrivals::Poisson,
                ..
            })
        );
        let expected = q.target_queries;
        let chance = poisson && (expected - t.sent as f64) <= 3.0 * expected.sqrt();
        if sent_pct < 99.0 && chance {
            writeln!(
                out,
                "    (Poisson arrivals: over {secs:.1} s the count varies around the {:.0} asked \
                 with a standard deviation of {:.0}; this shortfall is within three of them, \
                 ±{:.0})",
                expected,
                expected.sqrt(),
                3.0 * expected.sqrt()
            )?;
        } else if sent_pct < 99.0 {
            let not_sent = t.errors[crate::metrics::E_NOT_SENT];
            let window = sc.traffic.as_ref().and_then(|t| t.window);
            let waited = wait_words(sc, t, h).filter(|_| {
                conns_failed == 0 && loop_kept(h) && t.waited.iter().sum::<u64>() * 100 >= t.due
            });
            let why = if let (Some(w), true) = (
                &waited,
                not_sent == 0 || sc.transport == Transport::TcpPerQuery,
            ) {
                format!(": {w}")
            } else if not_sent > 0 && window.is_none() {
                format!(
                    ": {not_sent} queries could not be sent within --timeout, their connections' \
                     sockets full: the server is not reading what it is sent"
                )
            } else if let (true, Some(w)) = (not_sent > 0, window) {
                format!(
                    ": {not_sent} queries could not be sent within --timeout, their connections' \
                     --window {w} full (the server answering too slowly) or their sockets full \
                     (the server not reading)"
                )
            } else if conns_failed > 0 {
                // Not the client's pace: the connections that would have
                // carried the queries were gone.
                ": connections failed (see above), and the queries due on them were not sent".into()
            } else if h.loop_lag.value_at_quantile(0.99) > 1000 {
                " and the client's own loop fell behind its schedule (see loop lag): the client \
                 could not keep up"
                    .into()
            } else {
                ": queries waited for their connection (window full or socket busy)".into()
            };
            writeln!(
                out,
                "    warning: the sent rate is below 99% of the target{why}"
            )?;
        }
        if pct < 99.0 && t.sent > 0 && (t.answered as f64) < 0.99 * t.sent as f64 {
            // Truncated and dropped over UDP, while the same question also
            // came whole: rate limiting (the truncated line says why).
            let limited = t.timed_out > 0 && rate_limited(sc, t.truncated, whole_answers(q));
            let why = if limited {
                "its response rate limiting dropped them (see truncated below)"
            } else {
                "it did not keep up, or does not answer this protocol"
            };
            writeln!(
                out,
                "    warning: the server answered {:.1}% of the queries sent ({} timed out, {} \
                 errors): {why}",
                100.0 * t.answered as f64 / t.sent as f64,
                t.timed_out,
                t.errors_total() - t.errors[crate::metrics::E_NOT_SENT]
            )?;
        }
    }
    writeln!(
        out,
        "    sent {}  answered {}  timed out {}  errors {}  in flight at the end {}",
        t.sent,
        t.answered,
        t.timed_out,
        t.errors_total(),
        q.in_flight
    )?;
    for (i, cause) in crate::metrics::ERROR_CAUSES.iter().enumerate() {
        if t.errors[i] > 0 {
            writeln!(out, "      {cause:<15}{}", t.errors[i])?;
        }
    }
    // Every answer judged: what failed, and what that says.
    let ok_answers = sc
        .traffic
        .as_ref()
        .map(|t| crate::metrics::OkAnswers {
            rcodes: &t.ok_rcodes,
            status: &t.ok_status,
        })
        .unwrap_or_default();
    let failed = q.statuses.failures(ok_answers);
    if t.answered > 0 {
        let bad: u64 = failed.values().sum();
        writeln!(
            out,
            "    answers     {} ok, {bad} failed",
            q.statuses.successes(ok_answers)
        )?;
        for (what, n) in &failed {
            writeln!(out, "      {what:<15}{n}: {}", failed_answer_words(what))?;
        }
    }
    if t.recycled > 0 {
        writeln!(
            out,
            "    recycled    {} connections (--max-queries-per-conn)",
            t.recycled
        )?;
    }
    let rcodes = q.statuses.rcode_map();
    if !rcodes.is_empty() {
        let list: Vec<String> = rcodes.iter().map(|(k, v)| format!("{k} {v}")).collect();
        writeln!(out, "    rcodes      {}", list.join("  "))?;
    }
    if t.truncated > 0 {
        let whole = whole_answers(q);
        writeln!(
            out,
            "    truncated   {}",
            truncated_words(sc, t.truncated, whole, t.timed_out)
        )?;
    }
    let by_qtype = q.statuses.rcodes_by_qtype_map();
    if by_qtype.len() > 1 {
        // Only a query file mixes types; one type would repeat the line above.
        for (qtype, rcodes) in &by_qtype {
            let list: Vec<String> = rcodes.iter().map(|(k, v)| format!("{k} {v}")).collect();
            writeln!(out, "      {qtype:<10}{}", list.join("  "))?;
        }
    }
    let http = q.statuses.http_map();
    if !http.is_empty() {
        let list: Vec<String> = http.iter().map(|(k, v)| format!("{k} {v}")).collect();
        writeln!(out, "    status      {}", list.join("  "))?;
    }
    writeln!(out, "  latency")?;
    if closed {
        latency_row("response", &h.response_time, out)?;
    } else {
        latency_row("response", &h.response_time, out)?;
        latency_row("service", &h.service_time, out)?;
        writeln!(
            out,
            "    (response time counts from when each query should have been sent; service time from when it was)"
        )?;
        latency_row("send lag", &h.send_lag, out)?;
        if t.sent_late > 0 {
            writeln!(
                out,
                "    sent late   {} queries more than 1 ms after their time",
                t.sent_late
            )?;
        }
        let waited = wait_words(sc, t, h).filter(|_| conns_failed == 0);
        if let Some(w) = lag_warning(
            h,
            t.errors[crate::metrics::E_NOT_SENT],
            waited.as_deref(),
            cpu,
        ) {
            writeln!(out, "    {w}")?;
        }
    }
    if let Some(h) = nagle_hint(sc, q, h) {
        writeln!(out, "  hint (nagle): {h}")?;
    }
    writeln!(
        out,
        "  bytes         out {} ({}), in {} ({})",
        human_bytes(t.bytes_out as f64),
        mbps(t.bytes_out, secs),
        human_bytes(t.bytes_in as f64),
        mbps(t.bytes_in, secs),
    )?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::merge::tests::{outcome, slice};

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
        let w = lag_warning(&lags(5_000, 2_000, 50_000), 0, None, None).unwrap();
        assert!(w.contains("is well above that"), "{w}");
    }

    #[test]
    fn a_late_loop_keeps_the_tail_from_being_put_on_the_server() {
        // Regression: a loop 140 ms late beside a 350 ms service tail (its
        // own late reads) was named the server's or the network's.
        let w = lag_warning(&lags(150_000, 140_000, 350_000), 0, None, None).unwrap();
        assert!(w.contains("reads the answers late as well"), "{w}");
        assert!(w.contains("cannot be put on the server alone"), "{w}");
        assert!(!w.contains("the server's or the network's"), "{w}");
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
