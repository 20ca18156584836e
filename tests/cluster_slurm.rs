//! deploy/slurm/throng.sbatch on a real one-node Slurm (Debian's slurm-wlm
//! and munge): its own munged (key and socket in a temporary directory),
//! slurmctld and slurmd with the CPUs this machine has, in the test's own
//! network namespace; the script's two tasks slice one scenario against a
//! throng server and the merge of their results equals the server's count.

mod common;

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::{in_netns, temp_dir, Parts, BIN};

/// The daemons of the test's Slurm, ended on drop.
struct Daemons(Vec<Child>);

impl Daemons {
    /// Starts `cmd`, its stdio null, as one of them.
    fn start(&mut self, cmd: &mut Command) {
        let child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        self.0.push(child);
    }
}

impl Drop for Daemons {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

fn sh(cmd: &str) {
    let st = Command::new("sh").arg("-c").arg(cmd).status().unwrap();
    assert!(st.success(), "{cmd}");
}

/// False (and a loud skip outside CI) without Slurm and munge.
fn have_slurm() -> bool {
    let missing: Vec<&str> = ["slurmctld", "slurmd", "munged", "sbatch", "sinfo"]
        .into_iter()
        .filter(|p| common::which(p).is_none())
        .collect();
    if missing.is_empty() {
        return true;
    }
    common::skip(
        &format!("{missing:?} not installed"),
        "apt-get install slurm-wlm munge",
    );
    false
}

fn hostname() -> String {
    let out = Command::new("hostname").output().unwrap();
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}

/// The configuration of a one-node Slurm in `d`: no cgroup (the process
/// tracking and task plugins that need none), munge on its own socket.
fn slurm_conf(d: &Path, host: &str, cpus: usize) -> String {
    let p = |f: &str| d.join(f).display().to_string();
    format!(
        "ClusterName=throngtest\n\
         SlurmctldHost={host}(127.0.0.1)\n\
         SlurmctldPort=6817\nSlurmdPort=6818\n\
         AuthType=auth/munge\nCredType=cred/munge\nAuthInfo=socket={sock}\n\
         SlurmUser=root\nSlurmdUser=root\n\
         StateSaveLocation={state}\nSlurmdSpoolDir={spool}\n\
         SlurmctldPidFile={ctldpid}\nSlurmdPidFile={dpid}\n\
         SlurmctldLogFile={ctldlog}\nSlurmdLogFile={dlog}\n\
         ProctrackType=proctrack/linuxproc\nTaskPlugin=task/none\n\
         JobAcctGatherType=jobacct_gather/none\n\
         AccountingStorageType=accounting_storage/none\n\
         SelectType=select/cons_tres\nSelectTypeParameters=CR_CPU\n\
         MpiDefault=none\nReturnToService=2\n\
         NodeName=thrnode NodeHostname={host} NodeAddr=127.0.0.1 CPUs={cpus} State=UNKNOWN\n\
         PartitionName=load Nodes=ALL Default=YES MaxTime=INFINITE State=UP\n",
        sock = p("munge.sock"),
        state = p("state"),
        spool = p("spool"),
        ctldpid = p("slurmctld.pid"),
        dpid = p("slurmd.pid"),
        ctldlog = p("slurmctld.log"),
        dlog = p("slurmd.log"),
    )
}

/// Waits (30 s at most) until `check` holds.
fn wait_for(what: &str, mut check: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !check() {
        assert!(Instant::now() < deadline, "{what} not within 30 s");
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn the_sbatch_script_runs_two_tasks_whose_merge_is_the_servers_count() {
    if !have_slurm() {
        return;
    }
    in_netns(|| {
        // Slurm resolves with AI_ADDRCONFIG: an IPv4 address besides
        // loopback must exist for 127.0.0.1 to resolve.
        sh(
            "ip link add s0 type veth peer name s1 && ip addr add 198.18.7.1/24 dev s0 && \
            ip link set s0 up && ip link set s1 up",
        );
        let d = temp_dir("slurm");
        for sub in ["state", "spool", "results"] {
            std::fs::create_dir_all(d.join(sub)).unwrap();
        }
        sh(&format!(
            "chmod 700 {0} && head -c 1024 /dev/urandom > {0}/munge.key && chmod 400 {0}/munge.key",
            d.display()
        ));
        let mut daemons = Daemons(Vec::new());
        daemons.start(
            Command::new("munged")
                .arg("-F")
                .arg("-f")
                .arg(format!("--key-file={}", d.join("munge.key").display()))
                .arg(format!("--socket={}", d.join("munge.sock").display()))
                .arg(format!("--pid-file={}", d.join("munged.pid").display()))
                .arg(format!("--log-file={}", d.join("munged.log").display()))
                .arg(format!("--seed-file={}", d.join("munge.seed").display())),
        );
        wait_for("munged's socket", || d.join("munge.sock").exists());
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
        let conf = d.join("slurm.conf");
        std::fs::write(&conf, slurm_conf(&d, &hostname(), cpus)).unwrap();
        for (prog, extra) in [
            ("slurmctld", &["-i"][..]),
            ("slurmd", &["-N", "thrnode"][..]),
        ] {
            daemons.start(
                Command::new(prog)
                    .arg("-D")
                    .args(extra)
                    .arg("-f")
                    .arg(&conf)
                    .env("SLURM_CONF", &conf),
            );
        }
        wait_for("the node idle in sinfo", || {
            let out = Command::new("sinfo")
                .args(["-h", "-o", "%T"])
                .env("SLURM_CONF", &conf)
                .output()
                .unwrap();
            String::from_utf8_lossy(&out.stdout).trim() == "idle"
        });
        let srv = common::server(&[]);
        let target = srv.addr.to_string();
        let results = d.join("results").join("run");
        // Two tasks on one node, more than its CPUs allowed (-O) on a
        // machine with one.
        let (code, out, err) = common::output(
            Command::new("sbatch")
                .args(["--wait", "-O", "--ntasks=2", "--output"])
                .arg(d.join("job.out"))
                .arg("deploy/slurm/throng.sbatch")
                .env("SLURM_CONF", &conf)
                .env("THRONG", BIN)
                .env("TARGET", &target)
                .env("LOAD", "-c 60 --closed-loop -T 2s")
                .env("RESULTS", &results)
                .env("START_IN", "4"),
        );
        let job = std::fs::read_to_string(d.join("job.out")).unwrap_or_default();
        assert_eq!(code, 0, "{out}\n{err}\n{job}");
        let merged = common::outcome(results.with_extension("json"));
        assert!(!merged.partial, "{job}");
        assert_eq!(merged.parts.len(), 2, "{job}");
        assert_eq!(merged.connections.established, 60, "{job}");
        let answered = merged.q().answered;
        let (status, summary) = srv.stop();
        assert!(status.success());
        assert!(summary.contains("accepted 60, closed 60"), "{summary}");
        let requests: u64 = summary
            .lines()
            .find_map(|l| l.trim().strip_prefix("requests"))
            .and_then(|r| r.split_whitespace().next())
            .and_then(|n| n.parse().ok())
            .unwrap();
        assert_eq!(requests, answered, "{job}");
        drop(daemons);
        let _ = std::fs::remove_dir_all(&d);
    });
}
