//! Helpers shared by the integration tests: run the built binary, read the
//! address it bound from its banner, stop it with a signal.

#![allow(dead_code)]

pub mod harness;
pub mod lab;

#[allow(unused_imports)]
pub use harness::{
    all_answered, ends, exits, lost_with_its_connection, says, sent_balances, start, Client, Ran,
};

use std::io::{BufRead, BufReader, Read};
use std::net::SocketAddr;
use std::process::{Child, ChildStderr, ChildStdout, Command, ExitStatus, Stdio};

use serde_json::Value;

pub const BIN: &str = env!("CARGO_BIN_EXE_throng");

/// A `throng server` child process.
pub struct Server {
    pub child: Child,
    pub addr: SocketAddr,
    pub banner: Vec<String>,
    stdout: BufReader<ChildStdout>,
    pub stderr: Option<BufReader<ChildStderr>>,
}

/// Starts `throng server --listen 127.0.0.1:0 <args>` and waits for its
/// banner (the readiness signal: it is printed once every socket is bound).
pub fn server(args: &[&str]) -> Server {
    server_with(Command::new(BIN).arg("server"), args)
}

/// [`server`] under `ulimit -n nofile`, a hard limit it cannot raise:
/// CAP_SYS_RESOURCE is dropped from its bounding set (setpriv), so that
/// even as root it lives with the limit given.
pub fn server_with_nofile(nofile: u32, args: &[&str]) -> Server {
    let setpriv = program("setpriv", "util-linux").expect("setpriv drops CAP_SYS_RESOURCE");
    let mut cmd = Command::new(setpriv);
    let line = format!("ulimit -n {nofile} && exec \"$0\" \"$@\"");
    cmd.args(["--bounding-set=-sys_resource", "--inh-caps=-sys_resource"])
        .args(["sh", "-c", &line, BIN, "server"]);
    server_with(&mut cmd, args)
}

/// The elastic server (--processes auto, one worker a process) with
/// `nofile` fds a process, planned for `max_connections`.
pub fn elastic_server(nofile: u32, max_connections: &str, extra: &[&str]) -> Server {
    let mut args = vec![
        "--processes",
        "auto",
        "--workers",
        "1",
        "--max-connections",
        max_connections,
    ];
    args.extend(extra);
    server_with_nofile(nofile, &args)
}

/// Same, through a prepared command (for `sh -c 'ulimit ...; exec ...'`).
pub fn server_with(cmd: &mut Command, args: &[&str]) -> Server {
    let mut cmd_args = vec!["--listen", "127.0.0.1:0"];
    if !args.iter().any(|a| *a == "--workers" || *a == "-w") {
        cmd_args.extend(["--workers", "2"]);
    }
    if !args.contains(&"--processes") {
        cmd_args.extend(["--processes", "1"]);
    }
    cmd_args.extend(args);
    let mut child = cmd
        .args(&cmd_args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn throng server");
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let mut banner = Vec::new();
    let mut addr = None;
    loop {
        let mut line = String::new();
        if stdout.read_line(&mut line).unwrap() == 0 {
            let mut err = String::new();
            child
                .stderr
                .take()
                .unwrap()
                .read_to_string(&mut err)
                .unwrap();
            panic!("server exited before its banner: {banner:?}\n{err}");
        }
        let line = line.trim_end().to_string();
        if let Some(rest) = line.strip_prefix("listening on ") {
            if addr.is_none() {
                addr = Some(rest.split(' ').next().unwrap().parse().unwrap());
            }
        }
        let last = line.starts_with("listen backlog");
        banner.push(line);
        if last {
            break;
        }
    }
    let stderr = Some(BufReader::new(child.stderr.take().unwrap()));
    Server {
        child,
        addr: addr.expect("no 'listening on' line"),
        banner,
        stdout,
        stderr,
    }
}

impl Server {
    pub fn pid(&self) -> i32 {
        self.child.id() as i32
    }

    /// Sends SIGTERM and returns the exit status and the rest of stdout
    /// (the final summary).
    pub fn stop(mut self) -> (ExitStatus, String) {
        signal(self.pid(), libc::SIGTERM);
        let mut rest = String::new();
        self.stdout.read_to_string(&mut rest).unwrap();
        let status = self.child.wait().unwrap();
        (status, rest)
    }

    /// VmRSS of the server, in kB.
    pub fn rss_kb(&self) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid())).unwrap();
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|v| v.parse().ok())
            .unwrap()
    }

    /// User + system CPU time of the server, in clock ticks.
    pub fn cpu_ticks(&self) -> u64 {
        let stat = std::fs::read_to_string(format!("/proc/{}/stat", self.pid())).unwrap();
        // Fields after the command name (which may hold spaces) in parens.
        let rest = &stat[stat.rfind(')').unwrap() + 2..];
        let f: Vec<&str> = rest.split_whitespace().collect();
        f[11].parse::<u64>().unwrap() + f[12].parse::<u64>().unwrap()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

pub fn signal(pid: i32, sig: i32) {
    // SAFETY: kill() with a pid we spawned; no memory is involved.
    let rc = unsafe { libc::kill(pid, sig) };
    assert_eq!(rc, 0, "kill({pid}, {sig})");
}

/// Raises this test process's soft fd limit to its hard limit.
pub fn raise_fd_limit() -> u64 {
    let mut r = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit read and write the rlimit we own.
    unsafe {
        libc::getrlimit(libc::RLIMIT_NOFILE, &mut r);
        r.rlim_cur = r.rlim_max;
        libc::setrlimit(libc::RLIMIT_NOFILE, &r);
    }
    r.rlim_cur
}

/// Runs `throng <args>` to completion: (exit code, stdout, stderr).
pub fn run(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(BIN)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("run throng");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Runs `f` on a thread inside a new, private network namespace with its
/// loopback up, so the test may set `net.*` sysctls there without touching
/// the host. Processes spawned from `f` inherit the namespace. Returns None
/// (after saying so loudly) where namespaces cannot be made; in CI that is
/// a failure.
pub fn in_netns<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> Option<T> {
    std::thread::spawn(move || {
        // SAFETY: unshare affects only this thread's namespaces.
        if unsafe { libc::unshare(libc::CLONE_NEWNET) } != 0 {
            let e = std::io::Error::last_os_error();
            skip(
                &format!("cannot create a network namespace here: {e}"),
                "run as root, or with CAP_SYS_ADMIN",
            );
            return None;
        }
        let up = Command::new("ip")
            .args(["link", "set", "lo", "up"])
            .status()
            .expect("`ip` (iproute2) is needed to bring loopback up");
        assert!(up.success());
        Some(f())
    })
    .join()
    .unwrap()
}

/// Sets a sysctl of the calling thread's network namespace.
pub fn set_sysctl(name: &str, value: &str) {
    let path = format!("/proc/sys/{}", name.replace('.', "/"));
    std::fs::write(&path, value).unwrap_or_else(|e| panic!("{path}: {e}"));
}

/// Runs a command to completion: (exit code, stdout, stderr).
pub fn output(cmd: &mut Command) -> (i32, String, String) {
    let out = cmd.stdin(Stdio::null()).output().expect("run command");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Runs `throng client <args> -q --json F [--rtt-log L]`; returns
/// (code, stdout and stderr, json, rtt log text): a [`Client`] run for
/// arguments made at run time.
pub fn client(name: &str, args: &[&str], log: bool) -> (i32, String, Value, String) {
    let mut c = Client::new(name).args(args);
    if log {
        c = c.rtt_log();
    }
    let r = c.run();
    (r.code, r.out, r.json, r.rtt_log)
}

/// A result's text parsed, its books checked: every result a test reads
/// passes through here (`throng::report::accounting`), so a figure that does
/// not add up fails the test that produced it.
pub fn parse_result(text: &str) -> Value {
    let v: Value = serde_json::from_str(text).unwrap();
    conforms("result", &v);
    let wrong = throng::report::accounting::imbalances(&v);
    assert!(
        wrong.is_empty(),
        "the result's books do not balance: {wrong:#?}"
    );
    v
}

/// Asserts that `v` is valid by the committed JSON Schema of its format
/// (docs/schema/FORMAT.schema.json: result, limit, compare, server-stats),
/// every violation named with its place.
pub fn conforms(format: &str, v: &Value) {
    use std::collections::HashMap;
    use std::sync::{Mutex, OnceLock};
    static VALIDATORS: OnceLock<Mutex<HashMap<String, std::sync::Arc<jsonschema::Validator>>>> =
        OnceLock::new();
    let validator = VALIDATORS
        .get_or_init(Mutex::default)
        .lock()
        .unwrap()
        .entry(format.to_string())
        .or_insert_with(|| {
            let path = format!(
                "{}/docs/schema/{format}.schema.json",
                env!("CARGO_MANIFEST_DIR")
            );
            let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
            let schema: Value = serde_json::from_str(&text).unwrap();
            std::sync::Arc::new(jsonschema::validator_for(&schema).expect("a valid schema"))
        })
        .clone();
    let wrong: Vec<String> = validator
        .iter_errors(v)
        .map(|e| format!("{}: {e}", e.instance_path()))
        .collect();
    assert!(
        wrong.is_empty(),
        "not a valid {format} by docs/schema/{format}.schema.json: {wrong:#?}"
    );
}

/// A `throng limit --json` file, valid by its schema, as its type.
pub fn read_limit(path: impl AsRef<std::path::Path>) -> throng::outcome::limit::LimitFile {
    let p = path.as_ref();
    let text = std::fs::read_to_string(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    let v: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    conforms("limit", &v);
    serde_json::from_value(v).unwrap_or_else(|e| panic!("not a limit file: {e}: {text}"))
}

/// A `throng compare --json` file, valid by its schema, each run's result
/// read through [`parse_result`].
pub fn read_compare(path: impl AsRef<std::path::Path>) -> Value {
    let p = path.as_ref();
    let text = std::fs::read_to_string(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    let v: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    conforms("compare", &v);
    for r in v["runs"].as_array().into_iter().flatten() {
        if !r["result"].is_null() {
            parse_result(&r["result"].to_string());
        }
    }
    v
}

/// A result file read back through [`parse_result`].
pub fn read_result(path: impl AsRef<std::path::Path>) -> Value {
    let p = path.as_ref();
    let t = std::fs::read_to_string(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    parse_result(&t)
}

/// A fresh temporary directory for one test.
pub fn temp_dir(name: &str) -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("throng-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// A test peer on 127.0.0.1:0: `serve` runs on its own thread for every
/// connection accepted. Returns the address.
pub fn peer(serve: impl Fn(std::net::TcpStream) + Send + Sync + Copy + 'static) -> SocketAddr {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    std::thread::spawn(move || {
        for s in l.incoming() {
            let Ok(s) = s else { return };
            std::thread::spawn(move || serve(s));
        }
    });
    addr
}

/// Reads lines until one contains `needle` (the readiness signal of a
/// live view); panics if the stream ends first.
pub fn wait_for_line(r: &mut impl BufRead, needle: &str) -> String {
    let mut line = String::new();
    while !line.contains(needle) {
        line.clear();
        assert!(
            r.read_line(&mut line).unwrap() > 0,
            "ended before a line with '{needle}'"
        );
    }
    line
}

/// Starts `cmd` with piped stdio; returns it (killed on drop) with its
/// stderr as lines.
pub fn spawn_piped(cmd: &mut Command) -> (Daemon, BufReader<ChildStderr>) {
    let mut child = Daemon(
        cmd.stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn"),
    );
    let err = BufReader::new(child.stderr.take().unwrap());
    (child, err)
}

/// The address on `ip` a server's banner says it listens on.
pub fn banner_addr(srv: &Server, ip: &str) -> String {
    let prefix = format!("listening on {ip}:");
    srv.banner
        .iter()
        .find_map(|l| l.strip_prefix(&prefix))
        .map(|p| format!("{ip}:{}", p.split(' ').next().unwrap()))
        .unwrap_or_else(|| panic!("no listener on {ip}: {:?}", srv.banner))
}

/// Says loudly that a test is skipped, for `why`, and what installs it
/// (`fix`); a failure under CI, which installs everything a test needs.
/// Each skip is also appended to the file THRONG_TEST_SKIPS names (when
/// set): `.ci/run` counts them and fails on any.
pub fn skip(why: &str, fix: &str) {
    let line = format!("SKIPPED {}: {why} ({fix})", test_name());
    if let Some(log) = std::env::var_os("THRONG_TEST_SKIPS") {
        use std::io::Write;
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(log)
            .expect("THRONG_TEST_SKIPS names a writable file");
        writeln!(f, "{line}").unwrap();
    }
    assert!(
        std::env::var_os("CI").is_none(),
        "{why}: needed in CI ({fix}); .ci/run provides it"
    );
    eprintln!("{line}");
}

/// The running test's name (its thread's, as the test harness names it).
fn test_name() -> String {
    std::thread::current().name().unwrap_or("?").to_string()
}

/// The program, or None after saying loudly that the test is skipped (a
/// failure in CI, which installs it).
pub fn program(name: &str, package: &str) -> Option<std::path::PathBuf> {
    let p = which(name);
    if p.is_none() {
        skip(
            &format!("{name} is not installed"),
            &format!("apt-get install {package}"),
        );
    }
    p
}

/// A python3 that imports `websockets` (Debian's, then the one on PATH),
/// or None after saying loudly that the test is skipped (a failure in CI,
/// which installs python3-websockets).
pub fn python_websockets() -> Option<std::path::PathBuf> {
    for p in ["/usr/bin/python3", "python3"] {
        let ok = Command::new(p)
            .args(["-c", "import websockets"])
            .output()
            .is_ok_and(|o| o.status.success());
        if ok {
            return Some(p.into());
        }
    }
    skip(
        "no python3 with the websockets module",
        "apt-get install python3-websockets",
    );
    None
}

/// The path of a program on PATH (or /usr/sbin).
pub fn which(name: &str) -> Option<std::path::PathBuf> {
    std::env::var_os("PATH")
        .iter()
        .flat_map(std::env::split_paths)
        .chain([std::path::PathBuf::from("/usr/sbin")])
        .map(|d| d.join(name))
        .find(|p| p.is_file())
}

pub use throng::outcome::RunResult;

/// A result as its typed schema: the JSON a test holds, read back by the
/// type that wrote it (its books checked when it was read).
pub fn typed(v: &Value) -> RunResult {
    throng::outcome::parse(&v.to_string()).unwrap_or_else(|e| panic!("not a result: {e}: {v}"))
}

/// A result file read back through [`read_result`], as its typed schema.
pub fn outcome(path: impl AsRef<std::path::Path>) -> RunResult {
    typed(&read_result(path))
}

/// The parts of a typed result a test expects to be there.
pub trait Parts {
    /// `queries` (a run with traffic).
    fn q(&self) -> &throng::outcome::Queries;
    /// `latency` (a run with traffic).
    fn lat(&self) -> &throng::outcome::LatencyResult;
    /// `dns` (a DNS run).
    fn dns(&self) -> &throng::outcome::Dns;
    /// `push` (--proto push).
    fn push(&self) -> &throng::outcome::PushResult;
    /// Query errors, every cause summed (timeouts apart).
    fn errors(&self) -> u64;
    /// Every failed connection, all buckets.
    fn failed_total(&self) -> u64;
}

impl Parts for RunResult {
    fn q(&self) -> &throng::outcome::Queries {
        self.queries.as_ref().expect("a result with queries")
    }
    fn lat(&self) -> &throng::outcome::LatencyResult {
        self.latency.as_ref().expect("a result with latency")
    }
    fn dns(&self) -> &throng::outcome::Dns {
        self.dns.as_ref().expect("a result with dns")
    }
    fn push(&self) -> &throng::outcome::PushResult {
        self.push.as_ref().expect("a result with push")
    }
    fn errors(&self) -> u64 {
        self.q().errors.values().sum()
    }
    fn failed_total(&self) -> u64 {
        self.connections.failed.values().sum()
    }
}

/// tests/peers/ws_server.py (a WebSocket echo or push server on Python's
/// `websockets`), bound: its port read from its first line.
pub struct PyServer {
    child: Child,
    out: BufReader<ChildStdout>,
    pub port: u16,
}

impl PyServer {
    pub fn start(py: &std::path::Path, args: &[&str]) -> PyServer {
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/peers/ws_server.py");
        let mut child = Command::new(py)
            .arg(script)
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("start the python server");
        let mut out = BufReader::new(child.stdout.take().unwrap());
        let mut line = String::new();
        out.read_line(&mut line).unwrap();
        let port = line
            .trim()
            .strip_prefix("listening ")
            .unwrap_or_else(|| panic!("not a port line: {line:?}"))
            .parse()
            .unwrap();
        PyServer { child, out, port }
    }

    /// Closes its stdin (it stops) and returns what it counted, as it
    /// wrote it.
    pub fn counts_text(mut self) -> String {
        drop(self.child.stdin.take());
        let mut rest = String::new();
        self.out.read_to_string(&mut rest).unwrap();
        self.child.wait().unwrap();
        rest
    }

    /// What it counted, by name.
    pub fn counts(self) -> std::collections::HashMap<String, u64> {
        self.counts_text()
            .lines()
            .filter_map(|l| l.split_once(' '))
            .map(|(k, v)| (k.to_string(), v.trim().parse().unwrap()))
            .collect()
    }
}

impl Drop for PyServer {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// The number that follows `words` in `text` (a count a message names).
#[allow(dead_code)]
pub fn count_after(text: &str, words: &str) -> Option<u64> {
    text.split(words).nth(1)?.split(' ').next()?.parse().ok()
}

/// A port free for both TCP and UDP on 127.0.0.1 right now.
pub fn free_port() -> u16 {
    loop {
        let t = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = t.local_addr().unwrap().port();
        if std::net::UdpSocket::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
}

/// Waits until a TCP port accepts (nginx says nothing when it is ready).
pub fn wait_listening(port: u16) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            std::time::Instant::now() < deadline,
            "nothing listens on {port}"
        );
        std::thread::yield_now();
    }
}

/// A daemon we started; killed (by its pid) when the test ends, a
/// panicking one too.
pub struct Daemon(pub Child);

impl Drop for Daemon {
    fn drop(&mut self) {
        // (A child already waited for is not signalled: std keeps its
        // status, and kill() then returns at once.)
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Daemon {
    /// Child::wait_with_output, the guard kept until the child is waited
    /// for: everything it writes to its piped stdout and stderr, then its
    /// status.
    pub fn wait_with_output(mut self) -> std::io::Result<std::process::Output> {
        let (out, err) = (self.0.stdout.take(), self.0.stderr.take());
        let err = std::thread::spawn(move || {
            let mut buf = Vec::new();
            if let Some(mut e) = err {
                e.read_to_end(&mut buf).map(|_| buf)
            } else {
                Ok(buf)
            }
        });
        let mut stdout = Vec::new();
        if let Some(mut o) = out {
            o.read_to_end(&mut stdout)?;
        }
        let stderr = err.join().expect("the stderr reader")?;
        let status = self.0.wait()?;
        Ok(std::process::Output {
            status,
            stdout,
            stderr,
        })
    }
}

/// A process this test made (a child's child), SIGKILLed on drop.
pub struct KillOnDrop(pub i32);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        // SAFETY: kill() of a pid this test made; gone already, it fails
        // harmlessly (ESRCH).
        unsafe { libc::kill(self.0, libc::SIGKILL) };
    }
}

impl std::ops::Deref for Daemon {
    type Target = Child;
    fn deref(&self) -> &Child {
        &self.0
    }
}

impl std::ops::DerefMut for Daemon {
    fn deref_mut(&mut self) -> &mut Child {
        &mut self.0
    }
}

/// redis-server on a free port with `args` (no persistence), listening;
/// with redis-cli's path and the port. None (said loudly; a failure in
/// CI) where either is not installed.
pub fn redis_server(args: &[&str]) -> Option<(Daemon, std::path::PathBuf, u16)> {
    let (Some(redis), Some(cli)) = (
        program("redis-server", "redis-server"),
        program("redis-cli", "redis-tools"),
    ) else {
        return None;
    };
    let port = free_port();
    let d = Daemon(
        Command::new(&redis)
            .args([
                "--port",
                &port.to_string(),
                "--save",
                "",
                "--appendonly",
                "no",
            ])
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn redis-server"),
    );
    wait_listening(port);
    Some((d, cli, port))
}

/// One DNS message read off a TCP stream (behind its length); None at its
/// end or on an error.
pub fn read_dns(s: &mut impl Read) -> Option<Vec<u8>> {
    let mut len = [0u8; 2];
    s.read_exact(&mut len).ok()?;
    let mut msg = vec![0; usize::from(u16::from_be_bytes(len))];
    s.read_exact(&mut msg).ok()?;
    Some(msg)
}

/// `m` behind its TCP length.
pub fn framed(m: &[u8]) -> Vec<u8> {
    let mut f = (m.len() as u16).to_be_bytes().to_vec();
    f.extend_from_slice(m);
    f
}
