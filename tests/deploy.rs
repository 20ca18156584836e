//! The launcher examples in deploy/ stay valid: the Kubernetes manifests
//! validate against Kubernetes' schema, the Indexed Job's arguments are
//! throng's (no shell), and its exact command line, with the Job's
//! environment, runs two pods' slices against a local server that meet at
//! the start barrier and merge as the merge Job does; the Slurm script is
//! valid bash whose tasks slice by SLURM_PROCID (--segment auto).

mod common;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use clap::Parser;
use yaml_rust2::YamlLoader;

/// Expands `$(VAR)` in a container's argument as Kubernetes does, from
/// the container's `env`.
fn kube_expand(arg: &str, env: &[(String, String)]) -> String {
    let mut out = arg.to_string();
    for (k, v) in env {
        out = out.replace(&format!("$({k})"), v);
    }
    out
}

#[test]
fn kubernetes_indexed_job_runs_one_segment_per_pod_without_a_shell() {
    let text = std::fs::read_to_string("deploy/kubernetes/throng-job.yaml").unwrap();
    let docs = YamlLoader::load_from_str(&text).expect("valid YAML");
    let job = &docs[0];
    assert_eq!(job["kind"].as_str(), Some("Job"));
    assert_eq!(job["spec"]["completionMode"].as_str(), Some("Indexed"));
    let completions = job["spec"]["completions"].as_i64().unwrap();
    let pod = &job["spec"]["template"]["spec"];
    // Spread over nodes, with the sysctl a load pod needs.
    let spread = &pod["topologySpreadConstraints"][0];
    assert_eq!(
        spread["topologyKey"].as_str(),
        Some("kubernetes.io/hostname")
    );
    let sysctls = pod["securityContext"]["sysctls"].as_vec().unwrap();
    assert!(sysctls
        .iter()
        .any(|s| s["name"].as_str() == Some("net.ipv4.ip_local_port_range")));
    let c = &pod["containers"][0];
    assert_eq!(c["command"][0].as_str(), Some("throng"), "no shell");
    let env: Vec<(String, String)> = c["env"]
        .as_vec()
        .unwrap()
        .iter()
        .map(|e| {
            let value = e["value"]
                .as_str()
                .map(String::from)
                .unwrap_or_else(|| "job-uid-1234".into());
            (e["name"].as_str().unwrap().into(), value)
        })
        .collect();
    let segments = env.iter().find(|(k, _)| k == "THRONG_SEGMENTS").unwrap();
    assert_eq!(segments.1.parse::<i64>().unwrap(), completions);
    let args: Vec<String> = c["args"]
        .as_vec()
        .unwrap()
        .iter()
        .map(|a| kube_expand(a.as_str().unwrap(), &env))
        .collect();
    assert!(args.windows(2).any(|w| w == ["--segment", "auto"]));
    for index in 0..completions {
        let idx = index.to_string();
        // What the pod's --segment auto reads: the Job's index, the env.
        let seg = throng::cluster::launcher::segment_from(&|name| match name {
            "JOB_COMPLETION_INDEX" => Some(idx.clone()),
            _ => env.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone()),
        })
        .unwrap();
        assert_eq!(
            (seg.index, seg.count),
            (index as u64 + 1, completions as u64)
        );
        let mut argv = vec!["throng".to_string()];
        argv.extend(args.iter().map(|a| match a.as_str() {
            "auto" => format!("{}/{}", seg.index, seg.count),
            _ => a.clone(),
        }));
        let cli = throng::cli::Cli::try_parse_from(&argv).unwrap_or_else(|e| panic!("{e}"));
        let throng::cli::Command::Client(a) = cli.command else {
            panic!("not a client command")
        };
        // No date to edit: the pods meet on the results volume.
        assert!(a.start_at.is_none());
        assert_eq!(
            a.start_barrier.as_deref(),
            Some(std::path::Path::new("/results"))
        );
        assert_eq!(a.run_id.as_deref(), Some("job-uid-1234"));
        assert_eq!(a.json.as_deref(), Some(std::path::Path::new("/results")));
    }
    let mounts = &c["volumeMounts"][0]["mountPath"];
    assert_eq!(mounts.as_str(), Some("/results"));
}

const MANIFESTS: [&str; 3] = [
    "deploy/kubernetes/throng-job.yaml",
    "deploy/kubernetes/throng-merge-job.yaml",
    "deploy/kubernetes/throng-results-pvc.yaml",
];

/// kubernetes-validate (PyPI; .ci/run installs it) checks each manifest
/// against the Kubernetes schema, strictly (no unknown field).
#[test]
fn kubernetes_manifests_validate_against_the_schema() {
    let Some(kv) = common::which("kubernetes-validate") else {
        common::skip(
            "kubernetes-validate is not installed",
            "pip install kubernetes-validate",
        );
        return;
    };
    let (code, out, err) = common::output(Command::new(kv).arg("--strict").args(MANIFESTS));
    assert_eq!(code, 0, "{out}\n{err}");
    assert_eq!(out.matches(" passed ").count(), MANIFESTS.len(), "{out}");
    // The volume the pods share is shipped, and shared across nodes.
    let pvc = std::fs::read_to_string(MANIFESTS[2]).unwrap();
    let pvc = &YamlLoader::load_from_str(&pvc).unwrap()[0];
    assert_eq!(
        pvc["spec"]["accessModes"][0].as_str(),
        Some("ReadWriteMany")
    );
    // The image is built from source and runs as a user.
    let file = std::fs::read_to_string("deploy/kubernetes/Containerfile").unwrap();
    assert!(file.contains(" AS build") && file.contains("COPY --from=build"));
    assert!(file.contains("\nUSER 10001"), "{file}");
}

/// The Job's container: its command, arguments and environment, `$(VAR)`
/// expanded; `set` replaces env values (the target, the load).
fn job_command(set: &[(&str, &str)], results: &str) -> Vec<String> {
    let text = std::fs::read_to_string(MANIFESTS[0]).unwrap();
    let job = &YamlLoader::load_from_str(&text).unwrap()[0];
    let c = &job["spec"]["template"]["spec"]["containers"][0];
    let env: Vec<(String, String)> = c["env"]
        .as_vec()
        .unwrap()
        .iter()
        .map(|e| {
            let name = e["name"].as_str().unwrap();
            let value = set
                .iter()
                .find(|(k, _)| *k == name)
                .map(|(_, v)| v.to_string())
                .or_else(|| e["value"].as_str().map(String::from))
                .unwrap_or_else(|| panic!("{name}: no value given"));
            (name.to_string(), value)
        })
        .collect();
    let mut argv = vec![c["command"][0].as_str().unwrap().to_string()];
    argv.extend(
        c["args"]
            .as_vec()
            .unwrap()
            .iter()
            .map(|a| kube_expand(a.as_str().unwrap(), &env).replace("/results", results)),
    );
    argv
}

/// Two pods' slices, run with the Job's exact command line and
/// environment, the second started after the first waits at the barrier:
/// they start together (10 s after the second arrived), and the merge
/// Job's command merges them into one passing run.
#[test]
fn the_jobs_command_line_runs_pods_that_start_together_and_merge() {
    let srv = common::server(&[]);
    let target = common::banner_addr(&srv, "127.0.0.1");
    let dir = common::temp_dir("kube-job");
    let results = dir.to_str().unwrap();
    let run_id = format!("job-uid-{}", std::process::id());
    let set = [
        ("TARGET", target.as_str()),
        ("CONNECTIONS", "20"),
        ("RATE", "200"),
        ("DURATION", "2s"),
        ("THRONG_SEGMENTS", "2"),
        ("RUN_ID", run_id.as_str()),
    ];
    let argv = job_command(&set, results);
    assert_eq!(argv[0], "throng");
    let pod = |index: &str| {
        common::Daemon(
            Command::new(common::BIN)
                .args(&argv[1..])
                .env("JOB_COMPLETION_INDEX", index)
                .env("THRONG_SEGMENTS", "2")
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap(),
        )
    };
    let first = pod("0");
    // The second pod comes once the first waits at the barrier.
    let arrived = dir.join(format!(".start-{run_id}")).join("1");
    let until = Instant::now() + Duration::from_secs(30);
    while !arrived.exists() {
        assert!(Instant::now() < until, "pod 0 never reached the barrier");
        std::thread::sleep(Duration::from_millis(20));
    }
    let second_came = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    let second = pod("1");
    let mut starts = Vec::new();
    for (k, mut p) in [first, second].into_iter().enumerate() {
        let st = p.0.wait().unwrap();
        let mut err = String::new();
        std::io::Read::read_to_string(p.0.stderr.as_mut().unwrap(), &mut err).unwrap();
        assert!(st.success(), "pod {k}: {st}\n{err}");
        let r: serde_json::Value =
            common::read_result(dir.join(format!("segment-{}-of-2.json", k + 1)));
        assert_eq!(r["slice"]["run_id"], run_id.as_str());
        starts.push(r["slice"]["start_unix_s"].as_f64().unwrap());
    }
    assert!(
        (starts[0] - starts[1]).abs() < 0.2,
        "the pods started apart: {starts:?}"
    );
    assert!(
        starts[0] >= second_came + 9.0,
        "started {:.2} s after the second pod came, not the barrier's 10 s",
        starts[0] - second_came
    );
    // The merge Job's command.
    let (code, out, err) = common::output(Command::new(common::BIN).args([
        "merge",
        results,
        "--json",
        &format!("{results}/merged.json"),
    ]));
    assert_eq!(code, 0, "{out}\n{err}");
    let merged: serde_json::Value = common::read_result(dir.join("merged.json"));
    assert_eq!(merged["connections"]["established"], 20, "{out}");
    assert_eq!(merged["verdict"]["pass"], true, "{out}");
    drop(srv);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn slurm_script_is_valid_and_slices_by_procid() {
    let path = "deploy/slurm/throng.sbatch";
    let st = Command::new("bash").args(["-n", path]).status().unwrap();
    assert!(st.success(), "bash -n {path}");
    let text = std::fs::read_to_string(path).unwrap();
    assert!(text.contains("--segment auto"));
    assert!(
        !text.contains("--ntasks-per-node=1"),
        "refuses a one-node cluster"
    );
    assert!(text.contains("--start-at"));
    assert!(text.contains("throng merge"));
}
