//! The reports people look at: `--html` and `throng report` pages from
//! real runs (the client against `throng server` on loopback, over TCP
//! and over UDP, with the server's `--stats-json`; a push run against
//! `throng server --mode push`), checked as text (every chart, the
//! scenario, the figures, well-formed, nothing to fetch) and in a real
//! browser (headless Chromium draws them: the screenshot has the charts'
//! colours, the console no error); `--hgrm` spectra read back against the
//! JSON, a push run's among them, and what `--hgrm` says of a run without
//! any; a report that cannot be written after a run loses nothing of the
//! run; a `throng limit --json` file's curve (written by the test, no
//! search run) as text and as a page, and reported alone. Chromium is
//! Debian's `chromium` package: a failure in CI when missing, a loud skip
//! elsewhere.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use common::{output, program, server, temp_dir, Parts, RunResult, BIN};
use serde_json::Value;

/// `throng` with the words of `line` (split at spaces), each `@` among
/// them the next of `paths`, whole: (exit code, stdout, stderr).
fn throng(line: &str, paths: &[&Path]) -> (i32, String, String) {
    let mut paths = paths.iter();
    let mut cmd = Command::new(BIN);
    for word in line.split_whitespace() {
        match word {
            "@" => cmd.arg(paths.next().expect("a path for each @")),
            w => cmd.arg(w),
        };
    }
    assert!(paths.next().is_none(), "more paths than @ in {line}");
    output(&mut cmd)
}

/// [`throng`], which must exit 0: its stdout and stderr.
#[track_caller]
fn throng_ok(line: &str, paths: &[&Path]) -> (String, String) {
    let (code, out, err) = throng(line, paths);
    assert_eq!(code, 0, "throng {line}: {out}\n{err}");
    (out, err)
}

/// `throng server <args>`, and a fresh directory `name` for a run
/// against it.
fn server_and_dir(args: &[&str], name: &str) -> (common::Server, PathBuf) {
    (server(args), temp_dir(name))
}

/// Each chart `id` of `page` has a legend entry `<run> <what>` for each
/// of `runs`.
fn assert_legend_per_run(page: &str, charts: &[(&str, &str)], runs: &[&str], name: &str) {
    for (id, what) in charts {
        let svg = chart(page, id);
        for run in runs {
            assert!(
                svg.contains(&format!(">\n{run} {what}\n</text>")),
                "{name}: {id}: no legend entry for {run}"
            );
        }
    }
}

/// Two real runs against one server: over TCP (with --html, --hgrm and
/// --server-stats) and over UDP.
struct Measured {
    dir: PathBuf,
    tcp: RunResult,
    tcp_html: String,
    udp: RunResult,
}

/// Queries of each run: the run ends once they are answered.
const QUERIES: u64 = 800;

/// The runs, made once for the tests of this file.
fn measured() -> &'static Measured {
    static RUNS: OnceLock<Measured> = OnceLock::new();
    RUNS.get_or_init(|| {
        let dir = temp_dir("report");
        let stats = dir.join("server.jsonl");
        let srv = server(&["--udp", "--stats-json", stats.to_str().unwrap()]);
        let addr = srv.addr.to_string();
        let queries = QUERIES.to_string();
        // `extra`: more words, with `@` for each of `paths`.
        let run = |transport: &str, extra: &str, paths: &[&Path]| {
            let json = dir.join(format!("{transport}.json"));
            let line = format!(
                "client {addr} -c 20 --connect-rate 200 -r 400 --queries {queries} -T 4 \
                 --proto echo --transport {transport} -q --processes 1 --json @ {extra}"
            );
            let (out, _) = throng_ok(&line, &[&[json.as_path()], paths].concat());
            (common::outcome(&json), out)
        };
        let html = dir.join("tcp.html");
        let (tcp, out) = run(
            "tcp",
            "--html @ --hgrm @ --server-stats @",
            &[&html, &dir.join("tcp"), &stats],
        );
        assert!(
            out.contains(&format!("report        {}", html.display())),
            "{out}"
        );
        let (udp, _) = run("udp", "", &[]);
        srv.stop();
        let tcp_html = std::fs::read_to_string(&html).unwrap();
        Measured {
            dir,
            tcp,
            tcp_html,
            udp,
        }
    })
}

/// Checks that `page` is well-formed: every element closed in order (the
/// void ones of HTML excepted), no stray `<` in text, and nothing to fetch.
fn assert_well_formed(page: &str) {
    const VOID: &[&str] = &["meta", "br", "hr", "img", "input", "link"];
    let mut stack: Vec<String> = Vec::new();
    let mut rest = page;
    while let Some(at) = rest.find('<') {
        let tag = &rest[at + 1..];
        let end = tag.find('>').expect("a tag without its '>'");
        let body = &tag[..end];
        rest = &tag[end + 1..];
        assert!(!body.contains('<'), "a '<' inside a tag: <{body}>");
        if body.starts_with('!') {
            continue;
        }
        if let Some(name) = body.strip_prefix('/') {
            let open = stack
                .pop()
                .unwrap_or_else(|| panic!("</{name}> closes nothing"));
            assert_eq!(open, name.trim(), "</{name}> closes <{open}>");
            continue;
        }
        let name = body
            .split(|c: char| c.is_whitespace() || c == '/')
            .next()
            .unwrap()
            .to_string();
        assert!(
            !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric()),
            "not a tag: <{body}>"
        );
        if !body.ends_with('/') && !VOID.contains(&name.as_str()) {
            stack.push(name);
        }
    }
    assert!(stack.is_empty(), "never closed: {stack:?}");
    // Nothing fetched when opened: no script, no link to a resource; the
    // one URL is SVG's namespace name (never fetched).
    for bad in ["<script", " src=", " href=", "@import", "url("] {
        assert!(!page.contains(bad), "the page holds {bad}");
    }
    let urls = page.matches("http").count();
    let namespaces = page.matches("xmlns=\"http://www.w3.org/2000/svg\"").count();
    assert_eq!(urls, namespaces, "a URL other than SVG's namespace");
}

/// The chart `id`'s SVG.
fn chart<'a>(page: &'a str, id: &str) -> &'a str {
    let start = page
        .find(&format!("<div class=\"chart\" id=\"{id}\">"))
        .unwrap_or_else(|| panic!("no chart {id}"));
    let len = page[start..].find("</div>").unwrap();
    let c = &page[start..start + len];
    assert!(c.contains("<svg") && c.contains("</svg>"), "{id}: no SVG");
    c
}

/// Chromium's screenshot of `page` (1200x3000) and its log; None when
/// Chromium is not installed (and not in CI).
fn screenshot(page: &Path) -> Option<(Vec<[u8; 3]>, u32, u32, String)> {
    let chromium = program("chromium", "chromium")?;
    let png = page.with_extension("png");
    let profile = page.with_extension("profile");
    let mut child = common::Daemon(
        Command::new(chromium)
            .args(["--headless", "--no-sandbox", "--disable-gpu"])
            .args([
                "--enable-logging=stderr",
                "--v=0",
                "--window-size=1200,3000",
                // Every tile rasterized before the capture, and the
                // capture after the page's load settles (virtual time):
                // without them a loaded machine's capture missed charts
                // not yet painted.
                "--run-all-compositor-stages-before-draw",
                "--virtual-time-budget=5000",
            ])
            .arg(format!("--user-data-dir={}", profile.display()))
            .arg(format!("--screenshot={}", png.display()))
            .arg(format!("file://{}", page.display()))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start chromium"),
    );
    let mut err = child.stderr.take().unwrap();
    let log = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = std::io::Read::read_to_string(&mut err, &mut s);
        s
    });
    let deadline = Instant::now() + Duration::from_secs(120);
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("chromium took more than 120 s");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let log = log.join().unwrap();
    let _ = std::fs::remove_dir_all(&profile);
    let decoder = png::Decoder::new(std::fs::File::open(&png).expect("a screenshot"));
    let mut reader = decoder.read_info().unwrap();
    let mut buf = vec![0; reader.output_buffer_size()];
    let info = reader.next_frame(&mut buf).unwrap();
    assert_eq!(info.bit_depth, png::BitDepth::Eight);
    let step = info.color_type.samples();
    assert!(step >= 3, "{:?}", info.color_type);
    let pixels = buf[..info.buffer_size()]
        .chunks(step)
        .map(|p| [p[0], p[1], p[2]])
        .collect();
    Some((pixels, info.width, info.height, log))
}

/// Rows of the image (of 100 px bands) that hold a pixel near `colour`,
/// and how many such pixels in all.
fn where_drawn(pixels: &[[u8; 3]], width: u32, colour: [u8; 3]) -> (Vec<usize>, usize) {
    let near = |p: &[u8; 3]| (0..3).all(|i| p[i].abs_diff(colour[i]) <= 12);
    let mut bands = Vec::new();
    let mut count = 0;
    for (row, line) in pixels.chunks(width as usize).enumerate() {
        let here = line.iter().filter(|p| near(p)).count();
        count += here;
        if here > 0 && bands.last() != Some(&(row / 100)) {
            bands.push(row / 100);
        }
    }
    (bands, count)
}

const BLUE: [u8; 3] = [31, 119, 180];
const ORANGE: [u8; 3] = [255, 127, 14];
const GREEN: [u8; 3] = [44, 160, 44];

/// The browser drew the page: not blank, the charts' colours in several
/// places down the page, and no console error.
fn assert_drawn(page: &Path, colours: &[([u8; 3], usize)]) {
    let Some((pixels, width, height, log)) = screenshot(page) else {
        return;
    };
    assert_eq!((width, height), (1200, 3000));
    let white = pixels.iter().filter(|p| **p == [255, 255, 255]).count();
    assert!(white < pixels.len(), "a blank screenshot");
    for &(c, least) in colours {
        let (bands, count) = where_drawn(&pixels, width, c);
        // Lines and bars of that colour in `least` charts at least (a
        // chart is four bands tall).
        assert!(count > 500, "{c:?}: {count} pixels");
        let mut charts = bands.clone();
        charts.dedup_by(|a, b| *a <= *b + 3);
        assert!(charts.len() >= least, "{c:?} drawn only in bands {bands:?}");
    }
    for bad in ["Uncaught", ":CONSOLE("] {
        let lines: Vec<&str> = log.lines().filter(|l| l.contains(bad)).collect();
        assert!(lines.is_empty(), "console: {lines:?}");
    }
}

#[test]
fn a_runs_report_has_every_chart_the_scenario_and_its_figures() {
    let m = measured();
    let page = &m.tcp_html;
    assert_eq!(m.tcp.q().sent, QUERIES);
    assert_eq!(m.tcp.q().answered, QUERIES);
    assert_well_formed(page);
    for (id, title) in [
        ("rates", "Queries per second"),
        (
            "latency",
            "Response and service time per second (log scale)",
        ),
        ("ramp", "the server&apos;s accepts and listen queue"),
        ("spectrum", "Percentile spectrum"),
        ("outcomes", "Connections by outcome"),
        ("connect", "Connect time p99 per second"),
    ] {
        let svg = chart(page, id);
        assert!(svg.contains(title), "{id}: no title '{title}'");
        assert!(svg.contains("<path") || svg.contains("<polyline") || svg.contains("<rect"));
    }
    // Each series of the single run in its legend; the server's too.
    for (id, entries) in [
        (
            "rates",
            &["target", "sent", "answered", "timeouts (right axis)"][..],
        ),
        (
            "latency",
            &["p50", "p99", "max", "service p50", "service p99"],
        ),
        (
            "ramp",
            &[
                "open",
                "established/s (right axis)",
                "server accepted/s (right axis)",
                "ListenOverflows/s (right axis)",
                "ListenDrops/s (right axis)",
            ],
        ),
        ("spectrum", &["response time", "service time"]),
    ] {
        let svg = chart(page, id);
        for e in entries {
            assert!(
                svg.contains(&format!(">\n{e}\n</text>")),
                "{id}: no legend '{e}'"
            );
        }
    }
    // The scenario in words.
    let addr = &m.tcp.scenario.target_names[0];
    for words in [
        format!("<th>targets</th><td>{addr}</td>"),
        "<th>transport</th><td>TCP, persistent connections</td>".into(),
        "<th>connections</th><td>20, opened at 200/s</td>".into(),
        "<th>protocol</th><td>echo, 64 bytes</td>".into(),
        "open loop, 400 queries/s over all connections, Poisson arrivals".into(),
    ] {
        assert!(page.contains(&words), "no '{words}'");
    }
    // The summary's figures, as measured.
    let p99 = m.tcp.lat().response_time_us.p99;
    for (row, value) in [
        ("queries sent", QUERIES.to_string()),
        ("answered", format!("{QUERIES} (100.00%)")),
        ("established", "20".into()),
        ("response time p99", human_us(p99)),
    ] {
        assert!(
            page.contains(&format!(
                "<tr><th>{row}</th><td class=\"n\">{value}</td></tr>"
            )),
            "{row}: not {value}"
        );
    }
    // The default check's verdict.
    assert!(page.contains("<td class=\"pass\">PASS</td><td>queries.ok&gt;=99%</td>"));
    assert!(page.contains("throng client: "), "the summary as printed");
    // Blue: sent, p50, open connections, the spectrum, the outcome bars;
    // green: answered, established per second.
    assert_drawn(&m.dir.join("tcp.html"), &[(BLUE, 4), (GREEN, 2)]);
}

/// `crate::units::human_us`, as the page writes times.
fn human_us(us: u64) -> String {
    match us {
        u if u >= 1_000_000 => format!("{:.2} s", u as f64 / 1e6),
        u if u >= 1_000 => format!("{:.1} ms", u as f64 / 1e3),
        u => format!("{u} µs"),
    }
}

#[test]
fn two_results_overlay_with_a_legend_entry_each() {
    let m = measured();
    let page = m.dir.join("both.html");
    let (tcp, udp) = (m.dir.join("tcp.json"), m.dir.join("udp.json"));
    throng_ok("report @ @ --html @", &[&tcp, &udp, &page]);
    let text = std::fs::read_to_string(&page).unwrap();
    assert_well_formed(&text);
    let charts = [
        ("rates", "answered"),
        ("latency", "p99"),
        ("ramp", "open"),
        ("spectrum", "response"),
    ];
    assert_legend_per_run(&text, &charts, &["tcp", "udp"], "both.html");
    // Side by side: a column per run, the transports in words.
    assert!(text.contains("<tr><th></th><th>tcp</th><th>udp</th></tr>"));
    assert!(text.contains("UDP, a connected socket per connection"));
    let sent = |r: &RunResult| r.q().sent.to_string();
    assert!(text.contains(&format!(
        "<tr><th>queries sent</th><td class=\"n\">{}</td><td class=\"n\">{}</td></tr>",
        sent(&m.tcp),
        sent(&m.udp)
    )));
    // A colour per run in every chart.
    assert_drawn(&page, &[(BLUE, 4), (ORANGE, 4)]);
}

#[test]
fn compare_puts_the_transports_side_by_side_and_report_reads_its_file() {
    let dir = temp_dir("report-compare");
    let (json, html, again) = (
        dir.join("cmp.json"),
        dir.join("cmp.html"),
        dir.join("again.html"),
    );
    throng_ok(
        "compare --transports udp,tcp --rate 300 --queries 450 -c 3 --warmup 0 --json @ --html @",
        &[&json, &html],
    );
    throng_ok("report @ --html @", &[&json, &again]);
    for page in [&html, &again] {
        let text = std::fs::read_to_string(page).unwrap();
        assert_well_formed(&text);
        assert!(text.contains("<tr><th></th><th>udp</th><th>tcp</th></tr>"));
        let charts = [
            ("rates", "answered"),
            ("latency", "p99"),
            ("spectrum", "response"),
        ];
        let name = page.display().to_string();
        assert_legend_per_run(&text, &charts, &["udp", "tcp"], &name);
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// (value µs, percentile, total count) rows and the footer of a .hgrm.
fn hgrm(path: &Path) -> (Vec<(u64, f64, u64)>, Vec<String>) {
    let text = std::fs::read_to_string(path).unwrap();
    let mut lines = text.lines();
    assert_eq!(
        lines.next().unwrap(),
        "       Value     Percentile TotalCount 1/(1-Percentile)"
    );
    assert_eq!(lines.next().unwrap(), "");
    let mut rows = Vec::new();
    let mut footer = Vec::new();
    for l in lines {
        if l.starts_with("#[") {
            footer.push(l.to_string());
            continue;
        }
        let f: Vec<&str> = l.split_whitespace().collect();
        let ms: f64 = f[0].parse().unwrap();
        rows.push((
            (ms * 1000.0).round() as u64,
            f[1].parse().unwrap(),
            f[2].parse().unwrap(),
        ));
    }
    (rows, footer)
}

#[test]
fn hgrm_spectra_read_back_as_the_jsons_percentiles() {
    let m = measured();
    let latency = m.tcp.lat();
    for (file, l) in [
        ("tcp.response.hgrm", &latency.response_time_us),
        ("tcp.service.hgrm", &latency.service_time_us),
    ] {
        let (rows, footer) = hgrm(&m.dir.join(file));
        let count = l.count;
        let h = throng::metrics::decode_histogram(&l.hdr).unwrap();
        assert_eq!(rows.last().unwrap().1, 1.0);
        assert_eq!(rows.last().unwrap().2, count);
        // Every row is the histogram's value at its percentile, in ms to
        // the microsecond: the count up to it is the row's TotalCount, at
        // least its percentile of all, and the count below it short of it.
        let all = count as f64;
        for &(us, q, total) in &rows {
            assert_eq!(
                us,
                h.highest_equivalent(us),
                "{file} at {q}: not a bucket's top"
            );
            assert_eq!(h.count_between(0, us), total, "{file} at {q}");
            assert!(total as f64 >= q * all * (1.0 - 1e-12), "{file} at {q}");
            let below = h.count_between(0, h.lowest_equivalent(us).saturating_sub(1));
            assert!(
                (below as f64) < q * all * (1.0 + 1e-12) || q == 0.0,
                "{file} at {q}"
            );
        }
        // p99 lies between the rows around 99% (the spectrum's ticks):
        // the value of the first row at or past it, and of the one before.
        let p99 = l.p99;
        let at = rows.iter().position(|r| r.1 >= 0.99).unwrap();
        assert!(
            rows[at - 1].0 <= p99 && p99 <= rows[at].0,
            "{file}: p99 {p99} µs outside {:?}..{:?}",
            rows[at - 1],
            rows[at]
        );
        assert_eq!(p99, h.value_at_quantile(0.99));
        let max = l.max as f64 / 1000.0;
        assert_eq!(
            footer[1],
            format!("#[Max     = {max:>12.3}, Total count    = {count:>12}]")
        );
        assert!(footer[0].starts_with("#[Mean    = "), "{footer:?}");
        assert!(footer[2].starts_with("#[Buckets = "), "{footer:?}");
    }
}

/// Issue 29: a push run's report drew its connections only, and `--hgrm`
/// on it wrote nothing, silently. A real push run (20 connections, 10 ms,
/// 2 s against `throng server --mode push`), then `throng report --html
/// --hgrm` of its result.
#[test]
fn a_push_runs_report_draws_its_messages_and_hgrm_writes_its_spectra() {
    let (srv, dir) = server_and_dir(&["--mode", "push", "--every", "10ms"], "report-push");
    let json = dir.join("push.json");
    let line = format!(
        "client {} --proto push --every 10ms -c 20 -T 2s -q --json @",
        srv.addr
    );
    let (code, out, err) = throng(&line, &[&json]);
    srv.stop();
    assert_eq!(code, 0, "{out}\n{err}");
    let r = common::outcome(&json);
    let p = r.push();
    assert!(p.received >= 20 * 180, "{p:?}");
    let (html, prefix) = (dir.join("push.html"), dir.join("push"));
    let (out, err) = throng_ok("report @ --html @ --hgrm @", &[&json, &html, &prefix]);
    assert!(err.is_empty(), "{err}");
    let page = std::fs::read_to_string(&html).unwrap();
    assert_well_formed(&page);
    for (id, title, entries) in [
        (
            "push-rates",
            "Push messages per second: received, and lost",
            &["received", "lost (right axis)"][..],
        ),
        (
            "push-times",
            "Push jitter and one-way delay p99 per second (log scale)",
            &["jitter p99", "delay p99"],
        ),
        (
            "push-spectrum",
            "Push percentile spectrum: jitter (solid) and one-way delay (dashed)",
            &["jitter", "one-way delay"],
        ),
    ] {
        let svg = chart(&page, id);
        assert!(svg.contains(title), "{id}: no title '{title}'");
        for e in entries {
            assert!(
                svg.contains(&format!(">\n{e}\n</text>")),
                "{id}: no legend '{e}'"
            );
        }
    }
    assert!(!page.contains("id=\"rates\"") && !page.contains("connections only"));
    // The figures, as measured.
    let pct = 100.0 * p.received as f64 / p.expected as f64;
    let jitter = &p.jitter_us;
    for (row, value) in [
        (
            "push received",
            format!("{} of {} expected ({pct:.2}%)", p.received, p.expected),
        ),
        (
            "push jitter p50 / p99 / p99.9 / max",
            [jitter.p50, jitter.p99, jitter.p999, jitter.max]
                .map(human_us)
                .join(" / "),
        ),
    ] {
        assert!(
            page.contains(&format!(
                "<tr><th>{row}</th><td class=\"n\">{value}</td></tr>"
            )),
            "{row}: not {value}"
        );
    }
    assert!(page.contains("<th>protocol</th><td>push: a message every 10.0 ms"));
    // A spectrum per push histogram, its total count the result's: the
    // delay's is every message received.
    let delay = p.delay_us.as_ref().expect("a delay on loopback");
    assert_eq!(delay.count, p.received);
    for (what, l) in [
        ("push_gap", &p.gap_us),
        ("push_jitter", jitter),
        ("push_delay", delay),
    ] {
        let file = dir.join(format!("push.{what}.hgrm"));
        assert!(
            out.contains(&format!("spectrum      {}", file.display())),
            "{out}"
        );
        let (rows, footer) = hgrm(&file);
        assert_eq!(rows.last().unwrap().2, l.count, "{what}");
        assert_eq!(rows.last().unwrap().0, l.max, "{what}");
        assert!(
            footer[1].ends_with(&format!("Total count    = {:>12}]", l.count)),
            "{what}: {footer:?}"
        );
    }
    assert!(!dir.join("push.response.hgrm").exists());
    // Blue: the jitter spectrum, open connections, connect p99, the
    // outcome bars; green: received and established per second; orange:
    // the jitter p99 per second.
    assert_drawn(&html, &[(BLUE, 3), (GREEN, 2), (ORANGE, 1)]);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A result with no spectrum at all (connections only): `--hgrm` says so
/// and why, writes nothing, and is no failure (exit 0, as before).
#[test]
fn hgrm_of_a_run_without_spectra_says_why() {
    let (srv, dir) = server_and_dir(&[], "report-no-spectra");
    let json = dir.join("c.json");
    let line = format!("client {} -c 5 -T 1 -q --json @", srv.addr);
    throng_ok(&line, &[&json]);
    srv.stop();
    let (out, err) = throng_ok("report @ --hgrm @", &[&json, &dir.join("c")]);
    assert!(
        err.contains("no spectrum: the run sent no queries and received no push messages"),
        "{err}"
    );
    assert!(!out.contains("spectrum "), "{out}");
    assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 1);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_report_that_cannot_be_written_loses_nothing_of_the_run() {
    let dir = temp_dir("report-unwritable");
    let json = dir.join("r.json");
    // A directory where the page should go: the rename onto it fails
    // after the run.
    let html = dir.join("taken");
    std::fs::create_dir(&html).unwrap();
    let (code, out, err) = throng(
        "client -c 5 -r 50 -T 1 --proto echo -q --json @ --html @",
        &[&json, &html],
    );
    assert_eq!(code, 3, "{out}\n{err}");
    assert!(err.contains("the HTML report was not written"), "{err}");
    assert!(out.contains("throng client: ") && out.contains("check         PASS"));
    assert!(common::outcome(&json).q().answered > 0);
    // A merge too, and a server's stats that are not stats.
    let bad = dir.join("stats.jsonl");
    std::fs::write(&bad, "not json\n").unwrap();
    let merged = dir.join("m.json");
    let (code, _, err) = throng(
        "merge @ --json @ --html @ --server-stats @",
        &[&json, &merged, &dir.join("m.html"), &bad],
    );
    assert_eq!(code, 3);
    assert!(err.contains("line 1"), "{err}");
    assert!(merged.exists() && !dir.join("m.html").exists());
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_run_in_processes_reports_the_merge_of_its_slices() {
    let (srv, dir) = server_and_dir(&[], "report-processes");
    let html = dir.join("p.html");
    let line = format!(
        "client {} -c 20 -r 200 -T 1 --proto echo -q --processes 2 --html @ --hgrm @",
        srv.addr
    );
    throng_ok(&line, &[&html, &dir.join("p")]);
    let page = std::fs::read_to_string(&html).unwrap();
    assert_well_formed(&page);
    assert!(page.contains("<th>merged</th><td>2 results ("), "{page}");
    assert!(page.contains("<th>established</th><td class=\"n\">20</td>"));
    assert!(dir.join("p.response.hgrm").exists() && dir.join("p.service.hgrm").exists());
    drop(srv);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn report_usage_errors_exit_2() {
    let dir = temp_dir("report-usage");
    let junk = dir.join("junk.json");
    std::fs::write(&junk, "{\"hello\": 1}").unwrap();
    let html = dir.join("x.html");
    // (the command, `@` the paths in order; the words of its error)
    for (line, paths, says) in [
        (
            "report @ --html @",
            &[&junk, &html][..],
            "not a throng result",
        ),
        ("report @", &[&junk], "not a throng result"),
        (
            "report @ --html /nonexistent/x.html",
            &[&junk],
            "does not exist",
        ),
        (
            "client --html /nonexistent/x.html -T 1",
            &[],
            "does not exist",
        ),
    ] {
        let paths: Vec<&Path> = paths.iter().map(|p| p.as_path()).collect();
        let (code, out, err) = throng(line, &paths);
        assert_eq!(code, 2, "{line}: {out}\n{err}");
        assert!(err.contains(says), "{line}: {err}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// A `throng limit --json` file as a rate search writes one (written here:
/// no search is run): 1000/s and 2000/s pass, 4000/s fails, 3000/s fails,
/// 2500/s passes held and again fresh (the confirming run).
fn limit_file(dir: &Path) -> PathBuf {
    let result = |ok: u64, due: u64, p50: u64, p99: u64| {
        serde_json::json!({
            "connections": {"target": 50, "established": 50, "verified": 50,
                            "unverified": 0, "failed": {"any": 0}, "peak": 50,
                            "peer_closed": 0},
            "queries": {"due": due, "sent": due, "answered": ok, "ok": ok, "errors": 0,
                        "timed_out": due - ok, "rate_target": 1.0, "rate_achieved": 1.0},
            "latency": {"response_time_us": {"count": ok, "p50": p50, "p90": p99,
                        "p99": p99, "p999": p99, "max": p99, "mean": p50}},
            "server_seen": null, "client": null, "duration_s": 10.0,
        })
    };
    let step = |load: f64, pass: bool, held: bool, r: Value| {
        serde_json::json!({"load": load, "pass": pass, "exit_code": if pass { 0 } else { 1 },
                           "client_limited": false, "held": held, "result": r})
    };
    let v = serde_json::json!({
        "limit": {"axis": "rate", "value": 2500.0, "lower": 2500.0, "upper": 3000.0,
                  "stable": true, "client_limited": false,
                  "reason": "ListenOverflows +12: the accept queue overflowed",
                  "evidence": ["throng (pid 9): 80 fds of its 1024 at most"]},
        "steps": [
            step(1000.0, true, true, result(10000, 10000, 80, 300)),
            step(2000.0, true, true, result(20000, 20000, 90, 400)),
            step(4000.0, false, true, result(30000, 40000, 50_000, 900_000)),
            step(3000.0, false, false, result(29000, 30000, 2_000, 40_000)),
            step(2500.0, true, false, result(25000, 25000, 120, 700)),
            step(2500.0, true, false, result(25000, 25000, 110, 650)),
        ],
    });
    let path = dir.join("limit.json");
    std::fs::write(&path, v.to_string()).unwrap();
    path
}

#[test]
fn report_draws_a_limit_files_curve_as_text_and_as_a_page() {
    let dir = temp_dir("report-limit");
    let limit = limit_file(&dir);
    let (out, _) = throng_ok("report @", &[&limit]);
    let loads: Vec<&str> = out
        .lines()
        .filter(|l| l.trim_start().starts_with(|c: char| c.is_ascii_digit()))
        .map(|l| l.split_whitespace().next().unwrap())
        .collect();
    assert_eq!(
        loads,
        ["1000/s", "2000/s", "2500/s", "2500/s", "3000/s", "4000/s"],
        "{out}"
    );
    assert!(out.contains("limit         between 2500/s (pass) and 3000/s (fail)"));
    assert!(out.contains("why           ListenOverflows +12"), "{out}");
    let line_4k = out.lines().find(|l| l.contains("4000/s")).unwrap();
    for want in ["FAIL", "held", "75.00%", "50.0 ms", "900.0 ms"] {
        assert!(line_4k.contains(want), "{want}: {line_4k}");
    }

    let html = dir.join("limit.html");
    let (out, _) = throng_ok("report @ --html @", &[&limit, &html]);
    assert!(out.contains(&format!("report        {}", html.display())));
    let page = std::fs::read_to_string(&html).unwrap();
    assert_well_formed(&page);
    let curve = chart(&page, "curve");
    assert!(
        curve.contains("limit: 2500/s (the highest pass)"),
        "{curve}"
    );
    assert!(curve.contains("the lowest failure: 3000/s"));
    // A marker a step and series (p50, p99, answered): the failures
    // hollow, and the key's two.
    let hollow = curve
        .split("<circle")
        .skip(1)
        .filter(|c| c[..c.find('>').unwrap()].contains("fill=\"none\""))
        .count();
    assert_eq!(curve.matches("<circle").count(), 6 * 3 + 2);
    assert_eq!(hollow, 2 * 3 + 1);
    assert!(page.contains("between 2500/s (pass) and 3000/s (fail)"));
    assert!(page.contains("80 fds of its 1024"));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_limit_file_is_reported_alone() {
    let dir = temp_dir("report-limit-mixed");
    let limit = limit_file(&dir);
    let other = dir.join("client.json");
    std::fs::write(&other, "{\"connections\": {}}").unwrap();
    let html = dir.join("x.html");
    for files in [[&other, &limit], [&limit, &other]] {
        let (code, out, err) = throng("report @ @ --html @", &[files[0], files[1], &html]);
        assert_eq!(code, 2, "{out}\n{err}");
        assert!(
            err.contains(&format!(
                "{}: a `throng limit --json` file is reported alone",
                limit.display()
            )),
            "{err}"
        );
        assert!(
            err.contains(&format!("run `throng report {}", limit.display())),
            "{err}"
        );
    }
    let (code, _, err) = throng("report @ --hgrm @", &[&limit, &dir.join("x")]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("drop --hgrm"), "{err}");
    assert!(!html.exists());
    let _ = std::fs::remove_dir_all(&dir);
}
