//! What a user touches first: output that goes where it is asked, a closed
//! pipe that ends the printing and not the run, exit codes that mean one
//! thing, `throng report FILE` that prints the summary.

mod common;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

use common::{temp_dir, Client, Parts, BIN};

/// The short run of the embedded server the tests here make: `throng
/// client` and its flags.
const A_RUN: [&str; 7] = ["client", "-c", "10", "-r", "100", "-T", "1s"];

/// [`A_RUN`], its result to `json`.
fn a_run_to(json: &str) -> Vec<&str> {
    [&A_RUN[..], &["--json", json]].concat()
}

/// Runs throng with `args`, its stdout a pipe whose reader is gone before
/// it starts (every write to it fails with EPIPE): its exit code and
/// stderr.
fn with_stdout_closed(args: &[&str]) -> (i32, String) {
    let (r, w) = std::io::pipe().unwrap();
    drop(r);
    let out = Command::new(BIN)
        .args(args)
        .stdin(Stdio::null())
        .stdout(w)
        .stderr(Stdio::piped())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    (out.status.code().unwrap_or(-1), err)
}

/// A run's result to read back (a short client run of the embedded
/// server), and what the run printed.
fn a_run(dir: &std::path::Path) -> (std::path::PathBuf, String) {
    let json = dir.join("r.json");
    let (code, out, err) = common::run(&a_run_to(json.to_str().unwrap()));
    assert_eq!(code, 0, "{out}\n{err}");
    (json, out)
}

/// Every command with its stdout closed, as `| head -1` leaves it: no
/// panic, no "Broken pipe", its own exit code, its results written.
#[test]
fn a_closed_stdout_ends_the_printing_not_the_run() {
    let dir = temp_dir("surface-closed");
    let (json, _) = a_run(&dir);
    let r = json.to_str().unwrap();
    let merged = dir.join("m.json");
    let again = dir.join("again.json");
    let limit = "limit --find connections -c 10 --max 20 --step-time 1s";
    let runs: Vec<Vec<&str>> = vec![
        a_run_to(again.to_str().unwrap()),
        vec!["merge", r, "--json", merged.to_str().unwrap()],
        vec!["report", r],
        limit.split(' ').collect(),
        vec!["tune", "--connections", "1000"],
        vec!["man"],
        vec!["completions", "bash"],
        vec!["client", "-h"],
        vec!["client", "--help"],
        vec!["--version"],
    ];
    for args in &runs {
        let (code, err) = with_stdout_closed(args);
        assert_eq!(code, 0, "{args:?}: {err}");
        assert!(!err.contains("panicked"), "{args:?}: {err}");
        assert!(!err.contains("Broken pipe"), "{args:?}: {err}");
    }
    assert!(common::outcome(&again).verdict.unwrap().pass);
    assert!(common::outcome(&merged).verdict.unwrap().pass);
    let _ = std::fs::remove_dir_all(&dir);
}

/// `throng client | head -1`: the reader leaves after the first line, the
/// run goes on to its end and writes its result.
#[test]
fn a_reader_that_leaves_early_does_not_fail_the_run() {
    let dir = temp_dir("surface-head");
    let json = dir.join("r.json");
    let mut child = common::Daemon(
        Command::new(BIN)
            .args(a_run_to(json.to_str().unwrap()))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let mut first = String::new();
    let mut stdout = BufReader::new(child.0.stdout.take().unwrap());
    stdout.read_line(&mut first).unwrap();
    assert!(!first.is_empty());
    // (The reader is dropped here: the rest of stdout goes nowhere.)
    drop(stdout);
    let ended = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&ended.stderr);
    assert_eq!(ended.status.code(), Some(0), "{err}");
    assert!(
        !err.contains("panicked") && !err.contains("Broken pipe"),
        "{err}"
    );
    assert!(common::outcome(&json).verdict.unwrap().pass);
    let _ = std::fs::remove_dir_all(&dir);
}

/// With stderr closed the run also ends as it would.
#[test]
fn a_closed_stderr_ends_the_run_as_it_would() {
    let (r, w) = std::io::pipe().unwrap();
    drop(r);
    let out = Command::new(BIN)
        .args(A_RUN)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(w)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{text}");
    assert!(text.contains("verdict       PASS"), "{text}");
}

/// `--json -`: the result is stdout's only content; the words go to
/// stderr.
#[test]
fn json_dash_is_stdout() {
    let dir = temp_dir("surface-dash");
    let out = Command::new(BIN)
        .current_dir(&dir)
        .args(a_run_to("-"))
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let r = throng::outcome::parse(&stdout).unwrap_or_else(|e| panic!("{e}: {stdout}"));
    assert!(r.verdict.unwrap().pass);
    assert!(stderr.contains("verdict       PASS"), "{stderr}");
    assert!(!dir.join("-").exists(), "a file named -");
    let _ = std::fs::remove_dir_all(&dir);
}

/// A FIFO given to --json is written in place, never renamed over (a
/// device or /dev/stdout alike); a regular file is replaced whole.
#[test]
fn json_to_a_fifo_writes_in_place() {
    let dir = temp_dir("surface-fifo");
    let (json, _) = a_run(&dir);
    let fifo = dir.join("fifo");
    let made = Command::new("mkfifo").arg(&fifo).status().unwrap();
    assert!(made.success());
    let reader = {
        let fifo = fifo.clone();
        std::thread::spawn(move || std::fs::read_to_string(fifo).unwrap())
    };
    let (code, out, err) = common::run(&[
        "merge",
        json.to_str().unwrap(),
        "--json",
        fifo.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{out}\n{err}");
    let text = reader.join().unwrap();
    assert!(throng::outcome::parse(&text).is_ok(), "{text}");
    use std::os::unix::fs::FileTypeExt;
    let kind = std::fs::symlink_metadata(&fifo).unwrap().file_type();
    assert!(kind.is_fifo(), "replaced: {kind:?}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// A result that cannot be written (a full device) is exit code 3, not 1
/// (the code of a failed check); the summary was printed first.
#[test]
fn results_not_written_exit_3() {
    let (code, out, err) = common::run(&a_run_to("/dev/full"));
    assert_eq!(code, 3, "{out}\n{err}");
    assert!(out.contains("verdict       PASS"), "{out}");
    assert!(err.contains("/dev/full"), "{err}");
}

/// `throng report FILE` with no output flag prints the run's summary, the
/// same words the run printed.
#[test]
fn report_of_a_file_prints_its_summary() {
    let dir = temp_dir("surface-report");
    let (json, ran) = a_run(&dir);
    let (code, reported, err) = common::run(&["report", json.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    let summary = &ran[ran.find("throng client:").expect("a summary")..];
    assert_eq!(reported, summary);
    let _ = std::fs::remove_dir_all(&dir);
}

/// `--version` names the build: the version, the commit and the date.
#[test]
fn version_names_the_build() {
    let (code, out, _) = common::run(&["--version"]);
    assert_eq!(code, 0);
    let want = format!("throng {} (commit ", env!("CARGO_PKG_VERSION"));
    assert!(out.starts_with(&want), "{out}");
    let commit = out[want.len()..].split(',').next().unwrap();
    assert!(
        commit == "unknown"
            || (commit.len() == 12 && commit.chars().all(|c| c.is_ascii_hexdigit())),
        "{out}"
    );
    assert!(out.contains(", built 20"), "{out}");
}

/// Negative counts and rates get throng's own message (not clap's "use
/// '-- -5'", which makes -5 a target).
#[test]
fn negative_counts_and_rates_say_so() {
    for (args, said) in [
        (["client", "-c", "-5"], "a count cannot be negative"),
        (["client", "-r", "-1"], "a rate cannot be negative"),
    ] {
        let (code, _, err) = common::run(&args);
        assert_eq!(code, 2, "{err}");
        assert!(err.contains(said), "{err}");
        assert!(!err.contains("'-- -"), "{err}");
    }
}

/// An unknown --check key names the nearest.
#[test]
fn an_unknown_check_key_suggests_the_nearest() {
    let (code, _, err) = common::run(&["client", "--check", "queries.answred>=99%"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("did you mean 'queries.answered'?"), "{err}");
}

/// Flags users bring from wrk, oha and dnsperf are refused with throng's
/// own flag.
#[test]
fn peer_flags_name_throngs() {
    for (flag, ours) in [
        ("-d", "-T DURATION"),
        ("-z", "-T DURATION"),
        ("-H", "--http-request"),
        ("-Q", "-r RATE"),
        ("-t", "--workers"),
        ("-n", "--queries"),
    ] {
        let (code, _, err) = common::run(&["client", flag, "1"]);
        assert_eq!(code, 2, "{flag}: {err}");
        assert!(err.contains(ours), "{flag}: {err}");
    }
}

/// Each example of `--help` and the manual page, run as a shell runs it:
/// its target a server here of the kind it names (throng's own for HTTP,
/// DNS and echo; redis-server for Redis), its holds cut to 1 s, a million
/// connections to 2,000, the searches bounded by --max. The cluster one
/// needs load hosts (tests/cluster.rs runs cluster over network
/// namespaces): it is parsed here, not run.
#[test]
fn every_example_runs() {
    let http = common::server(&["--mode", "http"]);
    let dns = common::server(&["--mode", "dns"]);
    let echo = common::server(&["--mode", "echo"]);
    let redis = common::redis_server(&[]);
    let redis_port = redis.as_ref().map_or(0, |r| r.2);
    let dir = temp_dir("surface-examples");
    std::fs::rename(a_run(&dir).0, dir.join("run.json")).unwrap();
    for (cmd, _) in throng::cli::EXAMPLES {
        let line = cmd
            .replace("-T 30s", "-T 1s")
            .replace("-T 5m", "-T 1s")
            .replace("-c 1m", "-c 2000")
            .replace("127.0.0.1:8080", &http.addr.to_string())
            .replace("127.0.0.1:9000", &echo.addr.to_string())
            .replace("127.0.0.1:6379", &format!("127.0.0.1:{redis_port}"));
        let line = match line.as_str() {
            "throng client" => "throng client -T 1s".to_string(),
            l if l.starts_with("throng cluster") => {
                let args = shell_words(l);
                throng::cli::command()
                    .try_get_matches_from(&args)
                    .unwrap_or_else(|e| panic!("{l}: {e}"));
                continue;
            }
            l if l.starts_with("throng limit") && l.contains("6379") && redis.is_none() => continue,
            l if l.starts_with("throng limit") => format!("{l} --max 400 --step-time 1s"),
            l => l.to_string(),
        };
        let line = line.replace("127.0.0.1:53", &dns.addr.to_string());
        let out = Command::new("sh")
            .current_dir(&dir)
            .arg("-c")
            .arg(line.replacen("throng", BIN, 1))
            .stdin(Stdio::null())
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(0), "{line}: {err}");
    }
    assert!(dir.join("run.html").exists());
    let _ = std::fs::remove_dir_all(&dir);
}

/// The words of a command line without quotes (the examples' quotes hold
/// no spaces but the one of the cluster's, which has none).
fn shell_words(line: &str) -> Vec<String> {
    line.split_whitespace()
        .map(|w| w.trim_matches('\'').to_string())
        .collect()
}

/// `-h` fits one screen, the common flags first; help is at most 100
/// columns when not a terminal; `--help` ends with the examples.
#[test]
fn help_fits_one_screen() {
    for verb in ["client", "limit"] {
        let (code, short, _) = common::run(&[verb, "-h"]);
        assert_eq!(code, 0);
        assert!(short.lines().count() <= 40, "{short}");
        assert!(short.contains("--help"), "{short}");
        let (_, long, _) = common::run(&[verb, "--help"]);
        assert!(long.contains("Examples:\n  throng client\n"), "{long}");
        for text in [&short, &long] {
            let widest = text.lines().map(|l| l.chars().count()).max().unwrap();
            assert!(widest <= 100, "{widest} columns");
        }
    }
    let (_, short, _) = common::run(&["client", "-h"]);
    let options = &short[short.find("Options:").expect("options")..];
    let at = |flag: &str| {
        options
            .find(flag)
            .unwrap_or_else(|| panic!("no {flag}: {short}"))
    };
    let order = [
        "-c, --connections",
        "-r, --rate",
        "-T, --duration",
        "--proto",
        "--closed-loop",
    ];
    for w in order.windows(2) {
        assert!(at(w[0]) < at(w[1]), "{short}");
    }
    assert!(!short.contains("--source-ip"), "{short}");
}

/// A URL target sets the protocol, the port and the path: every request
/// of `http://HOST:PORT/PATH` is answered 200 by an HTTP server.
#[test]
fn a_url_target_is_taken_like_wrks() {
    let http = common::server(&["--mode", "http"]);
    let url = format!("http://{}/index.html?x=1", http.addr);
    let (r, out) = Client::new("url-target")
        .arg(&url)
        .flags("-c 5 -r 100 -T 1s")
        .ok();
    let proto = r.scenario.traffic.as_ref().unwrap().proto;
    assert_eq!(proto, throng::domain::Proto::Http, "{out}");
    let ok = r.q().http_status.get("200").copied().unwrap_or(0);
    assert_eq!(ok, r.q().answered, "{out}");
    assert!(ok > 0, "{out}");
    let (code, _, err) = common::run(&["client", &url, "--proto", "echo"]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("--proto http") && err.contains("--proto echo"),
        "{err}"
    );
}

/// README's sizes of the release binary (as built, and stripped) are
/// within 10% of a release build's: this one's, or in a debug build the
/// one THRONG_RELEASE_BIN names (`.ci/run` builds it first); with neither,
/// a skip.
#[test]
fn readmes_binary_sizes_are_true() {
    let release = match std::env::var("THRONG_RELEASE_BIN") {
        Ok(path) => path,
        Err(_) if !cfg!(debug_assertions) => BIN.to_string(),
        Err(_) => {
            return common::skip(
                "a debug build, and THRONG_RELEASE_BIN names no release build",
                "cargo build --release; THRONG_RELEASE_BIN=target/release/throng",
            )
        }
    };
    let readme =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md")).unwrap();
    let mb = |after: &str| -> f64 {
        let rest =
            &readme[readme.find(after).unwrap_or_else(|| panic!("no '{after}'")) + after.len()..];
        let n: String = rest
            .trim_start()
            .chars()
            .take_while(|c| c.is_ascii_digit() || *c == '.')
            .collect();
        n.parse::<f64>().unwrap() * 1e6
    };
    let (built, stripped) = (mb("has no debug info:"), mb("`strip` takes it\nto"));
    let dir = temp_dir("surface-sizes");
    let out = dir.join("throng");
    assert!(Command::new("strip")
        .arg("-o")
        .arg(&out)
        .arg(&release)
        .status()
        .unwrap()
        .success());
    for (said, path) in [
        (built, std::path::Path::new(&release)),
        (stripped, out.as_path()),
    ] {
        let real = std::fs::metadata(path).unwrap().len() as f64;
        assert!(
            (real / said - 1.0).abs() <= 0.1,
            "README says {said}, {} is {real}",
            path.display()
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}
