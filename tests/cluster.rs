//! `throng cluster` over real OpenSSH: a server host and three load hosts
//! in network namespaces of this test (tests/common/lab.rs).

mod common;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{ChildStderr, Command};

use common::lab::{have_ssh, have_ssh_and_faketime, keys, sh, ssh_options, Lab, FAKETIME};
use common::{in_netns, temp_dir, typed, Daemon, Parts, Server, BIN};
use throng::domain::RunIdFrom;
use throng::outcome::limit::{LimitFile, StepResult};

/// A lab of `hosts` hosts, its keys made, sshd started on each of `load`.
fn lab_with_sshd(hosts: usize, load: impl IntoIterator<Item = usize>) -> Lab {
    let mut lab = Lab::new(hosts);
    keys(&lab.dir);
    for i in load {
        lab.sshd(i);
    }
    lab
}

/// A throng server on host 0 (198.18.0.1), run under `wrap` (a command
/// and its flags that exec the rest, or none): the server and its address.
fn server_on_host0(lab: &Lab, wrap: &[&str]) -> (Server, String) {
    let mut cmd = Command::new("ip");
    cmd.args(["netns", "exec", &lab.ns(0)])
        .args(wrap)
        .args([BIN, "server"]);
    let srv = common::server_with(&mut cmd, &["--listen", "198.18.0.1:0"]);
    let target = common::banner_addr(&srv, "198.18.0.1");
    (srv, target)
}

/// Writes the lab's hosts file (`d/hosts`): `lines`, as given.
fn hosts_file(d: &Path, lines: &str) {
    std::fs::write(d.join("hosts"), lines).unwrap();
}

/// `cluster --hosts d/hosts <opts> <the lab's ssh options> -- <command>`.
fn cluster_args(d: &Path, opts: &[&str], command: &[&str]) -> Vec<String> {
    let hosts = d.join("hosts");
    let mut a: Vec<String> = ["cluster", "--hosts", hosts.to_str().unwrap()]
        .into_iter()
        .chain(opts.iter().copied())
        .map(String::from)
        .collect();
    a.extend(ssh_options(d));
    a.push("--".into());
    a.extend(command.iter().map(|s| s.to_string()));
    a
}

/// `throng <args>` started, its live view read until a line shows `host`
/// with connections open: the process and the rest of its stderr.
fn start_until_open(args: &[String], host: &str) -> (Daemon, BufReader<ChildStderr>) {
    let (child, mut err) = common::spawn_piped(Command::new(BIN).args(args));
    let mut line = String::new();
    while !line.contains(host) || !line.contains("open") {
        line.clear();
        assert!(err.read_line(&mut line).unwrap() > 0, "cluster ended early");
    }
    (child, err)
}

/// Sends `sig` to every process of lab host `i` (its sshd sessions too).
fn signal_host(lab: &Lab, i: usize, sig: i32) {
    let pids = Command::new("ip")
        .args(["netns", "pids", &lab.ns(i)])
        .output()
        .unwrap();
    for pid in String::from_utf8_lossy(&pids.stdout).split_whitespace() {
        common::signal(pid.parse().unwrap(), sig);
    }
}

/// Waits for a [`start_until_open`] run's end (its stderr drained): its
/// exit code and stdout.
fn finish(mut child: Daemon, err: BufReader<ChildStderr>) -> (Option<i32>, String) {
    std::thread::spawn(move || for _ in err.lines() {});
    let mut out = String::new();
    std::io::Read::read_to_string(child.stdout.as_mut().unwrap(), &mut out).unwrap();
    (child.wait().unwrap().code(), out)
}

/// `throng cluster ... -- limit`: a search whose steps are cluster runs
/// of two load hosts against a throng server under a 600-fd limit on a
/// third: each step's result merges both hosts, and the limit found is
/// within 5% of what the server's fds allow, named.
#[test]
fn a_search_of_cluster_runs_finds_a_servers_fd_limit() {
    if !have_ssh() {
        return;
    }
    in_netns(|| {
        let lab = lab_with_sshd(3, 1..3);
        let d = lab.dir.clone();
        let (srv, target) = server_on_host0(&lab, &["prlimit", "--nofile=600"]);
        let open = std::fs::read_dir(format!("/proc/{}/fd", srv.pid()))
            .unwrap()
            .count() as f64;
        let allowed = 600.0 - open;
        hosts_file(&d, "root@198.18.0.2\nroot@198.18.0.3\n");
        let json = d.join("limit.json");
        let search: Vec<&str> = ["limit", &target]
            .into_iter()
            .chain("--find connections -c 100 --step-time 1s --connect-timeout 1s".split(' '))
            .collect();
        let args = cluster_args(
            &d,
            &["--binary", BIN, "--json", json.to_str().unwrap()],
            &search,
        );
        let (code, out, err) = common::output(Command::new(BIN).args(&args));
        assert_eq!(code, 0, "{out}\n{err}");
        assert!(out.contains("`throng cluster` run"), "{out}");
        let file: LimitFile = common::read_limit(&json);
        let value = file.limit.value.unwrap();
        assert!(
            (value - allowed).abs() <= 0.05 * allowed,
            "found {value}, its fds allow {allowed}: {out}"
        );
        for s in &file.steps {
            assert!(!s.held, "{out}");
            let Some(StepResult::Run(r)) = &s.result else {
                panic!("a step without a client result: {out}");
            };
            assert_eq!(r.parts.len(), 2, "{out}");
            // A pass: both hosts held their connections together (for
            // most of its second).
            let together = r.slice.as_ref().unwrap().wall.held_together_s().unwrap();
            assert!(!s.pass || together >= 0.5, "{together} s: {out}");
            common::parse_result(&serde_json::to_string(r).unwrap());
        }
        drop(srv);
        drop(lab);
    });
}

#[test]
fn cluster_over_openssh_merges_hosts_and_names_failures() {
    if !have_ssh() {
        return;
    }
    in_netns(|| {
        let mut lab = lab_with_sshd(4, 1..4);
        let d = lab.dir.clone();
        // Host 0 is the server.
        let (srv, target) = server_on_host0(&lab, &[]);
        hosts_file(
            &d,
            "# load hosts\nroot@198.18.0.2\nroot@198.18.0.3\nroot@198.18.0.4:22\n",
        );
        // The first run copies the binary to each host; the second uses
        // the one on the (shared) disk.
        let remote = d.join("remote");
        let copy = ["--copy-binary", "--remote-dir", remote.to_str().unwrap()];
        let binary = ["--binary", BIN];
        let json = d.join("merged.json");
        let html = d.join("merged.html");
        // The merged run's report and spectra, written by cluster itself.
        let hgrm = d.join("merged");
        let mut opts = vec![
            "--html",
            html.to_str().unwrap(),
            "--hgrm",
            hgrm.to_str().unwrap(),
            "--json",
            json.to_str().unwrap(),
        ];
        opts.extend(copy);
        let args = cluster_args(
            &d,
            &opts,
            &[&target, "-c", "300", "--closed-loop", "-T", "2s"],
        );
        let (code, out, err) = common::output(Command::new(BIN).args(&args));
        assert_eq!(code, 0, "{out}\n{err}");
        let r = typed(&common::read_result(&json));
        assert_eq!(r.connections.established, 300, "{out}");
        assert_eq!(r.parts.len(), 3);
        assert!(!r.partial);
        // One run: cluster gave every host the same id.
        let id = &r.slice.as_ref().unwrap().run_id;
        for p in &r.parts {
            let s = p.slice.as_ref().unwrap();
            assert_eq!((&s.run_id, s.run_id_from), (id, RunIdFrom::Flag));
        }
        let page = std::fs::read_to_string(&html).unwrap();
        assert!(
            page.contains(
                "<th>merged</th><td>3 results (root@198.18.0.2, root@198.18.0.3, \
                 root@198.18.0.4:22) measured on 1 host"
            ),
            "the report names the hosts merged"
        );
        assert!(page.contains("id=\"spectrum\""));
        for (f, latency) in [
            ("merged.response.hgrm", &r.lat().response_time_us),
            ("merged.service.hgrm", &r.lat().service_time_us),
        ] {
            let text = std::fs::read_to_string(d.join(f)).unwrap();
            let count = latency.count;
            let total = format!("Total count    = {count:>12}]");
            assert!(text.contains(&total), "{f}: {text}");
        }
        let answered = r.q().answered;
        let sent = r.q().sent;
        let ((_, requests), summary) = stopped_counts(srv);
        assert!(summary.contains("accepted 300, closed 300"), "{summary}");
        // Closed loop: each connection's first query verifies it (no
        // probe), and the drain waits for the last ones: every query sent
        // was answered and counted, and the server counted the same.
        assert_eq!((requests, answered), (sent, sent), "{out}");

        // A host that cannot be reached stops the run before any load,
        // named.
        let (srv, target) = server_on_host0(&lab, &[]);
        hosts_file(&d, "root@198.18.0.2\nroot@198.18.0.3\nroot@198.18.0.9\n");
        let json = d.join("refused.json");
        let mut opts = vec!["--start-in", "8s", "--json", json.to_str().unwrap()];
        opts.extend(binary);
        let args = cluster_args(&d, &opts, &[&target, "-c", "30", "-T", "1s"]);
        let (code, out, err) = common::output(Command::new(BIN).args(&args));
        assert_eq!(code, 2, "{out}\n{err}");
        assert!(
            err.contains("refused before any load") && err.contains("host root@198.18.0.9"),
            "{err}"
        );
        assert!(!err.contains("host root@198.18.0.2 "), "{err}");
        assert!(!json.exists());

        // `-c C --closed-loop -T T` from the hosts, with the binary on
        // the disk: the arguments, and the result's file (`name`.json).
        let closed_loop = |name: &str, c: &str, t: &str| {
            let json = d.join(format!("{name}.json"));
            let opts = [&binary[..], &["--json", json.to_str().unwrap()]].concat();
            let args = cluster_args(&d, &opts, &[&target, "-c", c, "--closed-loop", "-T", t]);
            (args, json)
        };

        // A host killed mid-run: named, its share missing, exit 3.
        hosts_file(&d, "root@198.18.0.2\nroot@198.18.0.3\nroot@198.18.0.4\n");
        let (args, json) = closed_loop("partial", "150", "6s");
        let (child, err) = start_until_open(&args, "root@198.18.0.3");
        // Kill everything of the second load host (its sshd session too).
        signal_host(&lab, 2, libc::SIGKILL);
        let (code, out) = finish(child, err);
        assert_eq!(code, Some(3), "{out}");
        assert!(out.contains("PARTIAL: host root@198.18.0.3"), "{out}");
        let r = common::outcome(&json);
        assert!(r.partial);
        assert!(!r.interrupted);
        assert_eq!(r.parts.len(), 2);
        assert!(r.connections.established >= 100, "{out}");

        // Ctrl-C: the stop goes to every host over its session at once;
        // each ends its run and gives its result, but for a frozen one,
        // which is named, its share missing.
        lab.sshd(2);
        let (args, json) = closed_loop("stopped", "90", "60s");
        let (child, err) = start_until_open(&args, "root@198.18.0.4");
        signal_host(&lab, 2, libc::SIGSTOP);
        let asked = std::time::Instant::now();
        common::signal(child.id() as i32, libc::SIGINT);
        let (code, out) = finish(child, err);
        assert_eq!(code, Some(130), "{out}");
        assert!(asked.elapsed().as_secs() < 40, "{out}");
        assert!(
            out.contains("PARTIAL: host root@198.18.0.3") && out.contains("its share is missing"),
            "{out}"
        );
        let r = common::outcome(&json);
        assert!(r.interrupted && r.partial, "{out}");
        assert_eq!(r.parts.len(), 2);
        assert_eq!(r.connections.established, 60, "{out}");
        drop(srv);
        drop(lab);
    });
}

/// The server's count of what it accepted and answered, from its summary.
fn server_counts(summary: &str) -> (u64, u64) {
    let after = |word: &str| -> u64 {
        summary
            .lines()
            .find_map(|l| l.trim().strip_prefix(word))
            .and_then(|r| r.trim_start().split([' ', ',']).next())
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("no {word} in {summary}"))
    };
    let accepted = summary
        .split("accepted ")
        .nth(1)
        .and_then(|r| r.split([',', ' ']).next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no accepted in {summary}"));
    (accepted, after("requests"))
}

/// Stops the server (it must exit 0): its [`server_counts`], and its
/// summary.
fn stopped_counts(srv: Server) -> ((u64, u64), String) {
    let (status, summary) = srv.stop();
    assert!(status.success(), "{summary}");
    (server_counts(&summary), summary)
}

/// Four load hosts, each checked before any load: one whose ephemeral
/// ports cannot hold its share refuses the run (named, nothing connects);
/// one whose clock runs 5 s ahead (libfaketime) refuses it too, then runs
/// with a larger --max-clock-offset; one that runs another build is
/// refused, both builds named; one whose fd limit is below its share
/// takes it in several processes; the binary is copied stripped, checked
/// by its hash, into --remote-dir.
#[test]
fn a_fleet_is_checked_before_any_load() {
    if !have_ssh_and_faketime() {
        return;
    }
    in_netns(|| {
        let mut lab = lab_with_sshd(5, []);
        let d = lab.dir.clone();
        // Host 1 (198.18.0.2): 200 fds. Host 3 (.4): 50 ephemeral ports.
        // Host 4 (.5): its sessions' clock 5 s ahead.
        lab.sshd_with(1, "", Some(200));
        lab.sshd(2);
        sh(&format!(
            "ip netns exec {} sysctl -q -w net.ipv4.ip_local_port_range='40000 40049'",
            lab.ns(3)
        ));
        lab.sshd(3);
        lab.sshd_with(
            4,
            &format!("SetEnv LD_PRELOAD={FAKETIME} FAKETIME=+5s FAKETIME_DONT_FAKE_MONOTONIC=1\n"),
            None,
        );
        let (srv, target) = server_on_host0(&lab, &[]);
        // The binary each host runs: this one copied, unless --binary.
        let remote = d.join("remote");
        let copy = ["--copy-binary", "--remote-dir", remote.to_str().unwrap()];
        let run = |list: &[&str], extra: &[&str], json: &Path| {
            let text: String = list
                .iter()
                .map(|h| format!("root@198.18.0.{h}\n"))
                .collect();
            hosts_file(&d, &text);
            let mut opts = vec!["--json", json.to_str().unwrap()];
            if !extra.contains(&"--binary") {
                opts.extend(copy);
            }
            opts.extend(extra);
            let a = cluster_args(
                &d,
                &opts,
                &[&target, "-c", "600", "--closed-loop", "-T", "2s"],
            );
            common::output(Command::new(BIN).args(&a))
        };
        let json = d.join("fleet.json");
        // The host without the ports for its share stops the run first.
        let (code, out, err) = run(&["2", "3", "4", "5"], &[], &json);
        assert_eq!(code, 2, "{out}\n{err}");
        assert!(
            err.contains("host root@198.18.0.4 cannot take its share")
                && err.contains("ephemeral ports"),
            "{err}"
        );
        assert!(out.contains("copying throng"), "{out}");
        assert!(!json.exists());
        // The copy is stripped, named by its hash, and runs there.
        let copies: Vec<PathBuf> = std::fs::read_dir(d.join("remote"))
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        assert_eq!(copies.len(), 1, "{copies:?}");
        let size = std::fs::metadata(&copies[0]).unwrap().len();
        assert!(
            size < std::fs::metadata(BIN).unwrap().len(),
            "not stripped: {size}"
        );
        // The skewed clock stops it next, with the fix.
        let (code, out, err) = run(&["2", "3", "5"], &[], &json);
        assert_eq!(code, 2, "{out}\n{err}");
        assert!(
            err.contains("host root@198.18.0.5's clock is")
                && err.contains("ahead of")
                && err.contains("--max-clock-offset"),
            "{err}"
        );
        assert!(out.contains("clock offsets"), "{out}");
        // A host running another build (this binary, its commit changed)
        // is refused before any load, both builds named.
        let other = other_build(&d);
        let (code, out, err) = run(&["3"], &["--binary", other.to_str().unwrap()], &json);
        assert_eq!(code, 2, "{out}\n{err}");
        let theirs = throng::BUILD.replace(commit_of_this_build(), &other_commit());
        assert!(
            err.contains(&format!(
                "host root@198.18.0.3 runs throng {theirs}, this is throng {}",
                throng::BUILD
            )),
            "{err}"
        );
        assert!(!json.exists());
        // A larger bound takes it; the host short of fds runs processes.
        let (code, out, err) = run(&["2", "3", "5"], &["--max-clock-offset", "10s"], &json);
        assert_eq!(code, 0, "{out}\n{err}");
        let first = out
            .lines()
            .find(|l| l.starts_with("host root@198.18.0.2:"))
            .unwrap_or_else(|| panic!("{out}"));
        assert!(first.contains(" processes"), "{first}");
        assert!(
            first.contains("throng ") && first.contains(std::env::consts::ARCH),
            "{first}"
        );
        let r = typed(&common::read_result(&json));
        assert_eq!(r.parts.len(), 3, "{out}");
        assert!(!r.partial, "{out}");
        assert_eq!(r.connections.established, 600, "{out}");
        let answered = r.q().answered;
        let (counts, summary) = stopped_counts(srv);
        // (The refused runs connected nothing: the server counts this
        // run's connections only.)
        assert_eq!(counts, (600, answered), "{summary}");
        drop(lab);
    });
}

/// This build's commit, as `--version` and the hosts' reports carry it.
fn commit_of_this_build() -> &'static str {
    throng::BUILD.split(['(', ')']).nth(1).unwrap()
}

/// Another commit of the same length.
fn other_commit() -> String {
    commit_of_this_build()
        .chars()
        .map(|c| if c == '0' { '1' } else { '0' })
        .collect()
}

/// A copy of this throng in DIR whose build says another commit: every
/// occurrence of the commit's bytes replaced, the binary otherwise the
/// same.
fn other_build(dir: &Path) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let (from, to) = (commit_of_this_build().as_bytes(), other_commit());
    let mut bytes = std::fs::read(BIN).unwrap();
    let mut replaced = 0;
    let mut i = 0;
    while i + from.len() <= bytes.len() {
        if &bytes[i..i + from.len()] == from {
            bytes[i..i + from.len()].copy_from_slice(to.as_bytes());
            replaced += 1;
            i += from.len();
        } else {
            i += 1;
        }
    }
    assert!(replaced > 0, "the commit {from:?} is not in {BIN}");
    let path = dir.join("throng-other-build");
    std::fs::write(&path, bytes).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path
}

/// The time from `throng cluster` to the first connection on 4 load hosts
/// (the binary copied), for each throng in THRONG_CLUSTER_BINS (a comma
/// list; this build without it): printed, for bench/RESULTS.md. A throng
/// with --remote-dir runs twice: its copy sent, then found on the hosts.
/// `cargo test --test cluster time_to_first -- --ignored --nocapture`
/// Ignored in the suite: a measurement, not a check (it asserts no figure
/// and takes about a minute per build compared); its output goes to
/// bench/RESULTS.md.
#[test]
#[ignore]
fn time_to_first_connection_on_four_hosts() {
    if !have_ssh() {
        return;
    }
    let bins: Vec<String> = std::env::var("THRONG_CLUSTER_BINS")
        .map(|v| v.split(',').map(String::from).collect())
        .unwrap_or_else(|_| vec![BIN.to_string()]);
    in_netns(move || {
        let lab = lab_with_sshd(4, 0..4);
        let d = lab.dir.clone();
        // An echo server in the test's namespace that notes its first
        // connection.
        let listener = std::net::TcpListener::bind("198.18.0.254:0").unwrap();
        let target = listener.local_addr().unwrap().to_string();
        let (tx, rx) = std::sync::mpsc::channel::<std::time::Instant>();
        std::thread::spawn(move || {
            for s in listener.incoming() {
                let Ok(s) = s else { break };
                let _ = tx.send(std::time::Instant::now());
                std::thread::spawn(move || {
                    let mut r = s.try_clone().unwrap();
                    let mut w = s;
                    let _ = std::io::copy(&mut r, &mut w);
                });
            }
        });
        hosts_file(
            &d,
            "root@198.18.0.1\nroot@198.18.0.2\nroot@198.18.0.3\nroot@198.18.0.4\n",
        );
        for bin in &bins {
            let help = common::output(Command::new(bin).args(["cluster", "--help"])).1;
            let cached = help.contains("--remote-dir");
            let runs = if cached { 2 } else { 1 };
            for run in 0..runs {
                let remote = d.join("remote");
                let mut opts = vec!["--copy-binary", "--quiet"];
                if cached {
                    opts.extend(["--remote-dir", remote.to_str().unwrap()]);
                }
                let a = cluster_args(
                    &d,
                    &opts,
                    &[&target, "-c", "40", "--closed-loop", "-T", "1s"],
                );
                while rx.try_recv().is_ok() {}
                let t0 = std::time::Instant::now();
                let (code, out, err) = common::output(Command::new(bin).args(&a));
                assert_eq!(code, 0, "{out}\n{err}");
                let first = rx.try_iter().min().expect("a connection");
                let size = std::fs::metadata(bin).unwrap().len();
                println!(
                    "TIME {bin} ({:.0} MB{}): first connection {:.2} s after `throng cluster`",
                    size as f64 / 1e6,
                    match (cached, run) {
                        (false, _) => "",
                        (true, 0) => ", copy sent",
                        (true, _) => ", copy found on the hosts",
                    },
                    (first - t0).as_secs_f64()
                );
            }
        }
        drop(lab);
    });
}

/// A slice run in several processes (a load host past its fd limit) gives
/// that slice's result: the slices of a run in 2 and 3 processes merge
/// into the whole, exactly.
#[test]
fn a_slice_in_several_processes_is_that_slice() {
    let srv = common::server(&[]);
    let target = srv.addr.to_string();
    let d = temp_dir("slice-processes");
    let mut paths = Vec::new();
    for (k, procs) in [("1/2", "2"), ("2/2", "3")] {
        let json = d.join(format!("s{}.json", &k[..1]));
        let (code, out, err) = common::output(Command::new(BIN).args([
            "client",
            &target,
            "-c",
            "101",
            "--closed-loop",
            "-T",
            "1s",
            "-q",
            "--run-id",
            "two-slices",
            "--segment",
            k,
            "--processes",
            procs,
            "--json",
            json.to_str().unwrap(),
        ]));
        assert_eq!(code, 0, "{out}\n{err}");
        assert!(out.contains(&format!("in {procs} processes")), "{out}");
        let r = common::outcome(&json);
        let s = r.slice.as_ref().unwrap();
        assert_eq!(format!("{}/{}", s.index, s.count), k);
        assert_eq!(r.parts.len(), procs.parse::<usize>().unwrap());
        paths.push(json);
    }
    let merged = d.join("merged.json");
    let (code, out, err) = common::output(
        Command::new(BIN)
            .arg("merge")
            .args(&paths)
            .args(["--json", merged.to_str().unwrap()]),
    );
    assert_eq!(code, 0, "{out}\n{err}");
    let r = common::outcome(&merged);
    assert!(!r.partial, "{out}");
    assert_eq!(r.connections.established, 101, "{out}");
    let answered = r.q().answered;
    let (counts, summary) = stopped_counts(srv);
    assert_eq!(counts, (101, answered), "{summary}");
    let _ = std::fs::remove_dir_all(&d);
}
