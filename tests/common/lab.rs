//! A lab of hosts for the cluster tests: network namespaces of this test
//! (198.18.0.0/24 on veth pairs under a bridge in the test's own
//! namespace), each load host running Debian's sshd with a key generated
//! here.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use super::temp_dir;

pub fn sh(cmd: &str) {
    let st = Command::new("sh").arg("-c").arg(cmd).status().unwrap();
    assert!(st.success(), "{cmd}");
}

/// The hosts of one test; namespaces and daemons go away on drop.
pub struct Lab {
    tag: String,
    pub dir: PathBuf,
    daemons: Vec<Child>,
    hosts: usize,
}

impl Lab {
    pub fn ns(&self, i: usize) -> String {
        format!("{}-{i}", self.tag)
    }

    /// Host i gets 198.18.0.(i+1); the test's namespace is 198.18.0.254.
    pub fn new(hosts: usize) -> Lab {
        // (Unique per lab: the tests of this file run side by side.)
        static LABS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let k = LABS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let tag = format!("thr{}x{k}", std::process::id());
        let dir = temp_dir(&format!("cluster{k}"));
        // sshd's privilege-separation directory (systemd makes it at boot).
        sh("mkdir -p /run/sshd");
        sh("ip link add br0 type bridge && ip addr add 198.18.0.254/24 dev br0 && ip link set br0 up");
        let lab = Lab {
            tag,
            dir,
            daemons: Vec::new(),
            hosts,
        };
        for i in 0..hosts {
            let ns = lab.ns(i);
            sh(&format!(
                "ip netns add {ns} && ip link add v{i} type veth peer name p{i} && \
                 ip link set p{i} master br0 && ip link set p{i} up && \
                 ip link set v{i} netns {ns} && \
                 ip -n {ns} addr add 198.18.0.{}/24 dev v{i} && \
                 ip -n {ns} link set v{i} up && ip -n {ns} link set lo up",
                i + 1
            ));
        }
        lab
    }

    /// Starts sshd on host i, waiting for its "listening" line.
    pub fn sshd(&mut self, i: usize) {
        self.sshd_with(i, "", None);
    }

    /// As [`Lab::sshd`], with more sshd_config lines (`SetEnv` for the
    /// sessions) and an fd limit for everything it starts.
    pub fn sshd_with(&mut self, i: usize, extra: &str, nofile: Option<u32>) {
        let d = &self.dir;
        let conf = d.join(format!("sshd-{i}.conf"));
        std::fs::write(
            &conf,
            format!(
                "Port 22\nListenAddress 198.18.0.{}\nHostKey {}\nAuthorizedKeysFile {}\n\
                 PermitRootLogin prohibit-password\nPasswordAuthentication no\nUsePAM no\n\
                 StrictModes no\nPidFile none\n{extra}",
                i + 1,
                d.join("host_key").display(),
                d.join("id.pub").display()
            ),
        )
        .unwrap();
        let limit = nofile.map(|n| format!("--nofile={n}:{n}"));
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", &self.ns(i)]);
        if let Some(l) = &limit {
            cmd.args(["prlimit", l.as_str()]);
        }
        let mut child = cmd
            .args(["/usr/sbin/sshd", "-D", "-e", "-f"])
            .arg(&conf)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut err = BufReader::new(child.stderr.take().unwrap());
        // Owned by the lab (killed on its drop) before it is waited for.
        self.daemons.push(child);
        super::wait_for_line(&mut err, "listening on");
        std::thread::spawn(move || for _ in err.lines() {});
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        for d in &mut self.daemons {
            let _ = d.kill();
            let _ = d.wait();
        }
        for i in 0..self.hosts {
            let ns = self.ns(i);
            // Whatever still runs in the namespace was started by this test.
            if let Ok(out) = Command::new("ip").args(["netns", "pids", &ns]).output() {
                for pid in String::from_utf8_lossy(&out.stdout).split_whitespace() {
                    if let Ok(pid) = pid.parse::<i32>() {
                        // SAFETY: kill() on a pid inside this test's namespace.
                        unsafe { libc::kill(pid, libc::SIGKILL) };
                    }
                }
            }
            let _ = Command::new("ip").args(["netns", "del", &ns]).status();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

pub fn have(program: &str) -> bool {
    super::which(program).is_some()
}

pub fn ssh_options(dir: &Path) -> Vec<String> {
    [
        format!("IdentityFile={}", dir.join("id").display()),
        "StrictHostKeyChecking=no".into(),
        "UserKnownHostsFile=/dev/null".into(),
        "LogLevel=ERROR".into(),
        "ConnectTimeout=3".into(),
    ]
    .into_iter()
    .flat_map(|o| ["--ssh-option".to_string(), o])
    .collect()
}

/// False (and a loud skip outside CI) without OpenSSH.
pub fn have_ssh() -> bool {
    if have("sshd") && have("ssh") {
        return true;
    }
    super::skip(
        "sshd or ssh is not installed",
        "apt-get install openssh-server openssh-client",
    );
    false
}

/// The lab's keys: the hosts' and the user's.
pub fn keys(d: &Path) {
    sh(&format!(
        "ssh-keygen -q -t ed25519 -N '' -f {0}/host_key && ssh-keygen -q -t ed25519 -N '' -f {0}/id",
        d.display()
    ));
}

/// libfaketime's preload library (Debian's libfaketime).
pub const FAKETIME: &str = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1";

/// False (and a loud skip outside CI) without OpenSSH or libfaketime: a
/// lab with a host whose clock is off.
pub fn have_ssh_and_faketime() -> bool {
    if !have_ssh() {
        return false;
    }
    if !Path::new(FAKETIME).exists() {
        super::skip(
            "libfaketime is not installed",
            "apt-get install libfaketime",
        );
        return false;
    }
    true
}
