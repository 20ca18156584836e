//! The launcher examples in deploy/ stay valid: the Kubernetes manifest is
//! YAML of an Indexed Job whose arguments throng accepts (no shell), and the Slurm
//! script is valid bash whose tasks slice by SLURM_PROCID (--segment auto).

use std::process::Command;

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
        assert!(a.start_at.is_some());
        assert_eq!(a.run_id.as_deref(), Some("job-uid-1234"));
        assert_eq!(a.json.as_deref(), Some(std::path::Path::new("/results")));
    }
    let mounts = &c["volumeMounts"][0]["mountPath"];
    assert_eq!(mounts.as_str(), Some("/results"));
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
