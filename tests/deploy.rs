//! The launcher examples in deploy/ stay valid: the Kubernetes manifest is
//! YAML of an Indexed Job whose command line throng accepts, and the Slurm
//! script is valid bash that slices by SLURM_PROCID.

use std::process::Command;

use clap::Parser;
use yaml_rust2::YamlLoader;

/// Expands a shell command line the way the pod's `sh -c` would, with the
/// given environment, and returns its words.
fn words(cmd: &str, env: &[(&str, &str)]) -> Vec<String> {
    let rest = cmd.trim().strip_prefix("exec ").expect("exec throng ...");
    let out = Command::new("sh")
        .arg("-c")
        .arg(format!("set -- {rest}; printf '%s\\n' \"$@\""))
        .envs(env.iter().copied())
        .output()
        .unwrap();
    assert!(out.status.success());
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(String::from)
        .collect()
}

#[test]
fn kubernetes_indexed_job_runs_one_segment_per_pod() {
    let text = std::fs::read_to_string("deploy/kubernetes/throng-job.yaml").unwrap();
    let docs = YamlLoader::load_from_str(&text).expect("valid YAML");
    let job = &docs[0];
    assert_eq!(job["kind"].as_str(), Some("Job"));
    assert_eq!(job["spec"]["completionMode"].as_str(), Some("Indexed"));
    let completions = job["spec"]["completions"].as_i64().unwrap();
    let c = &job["spec"]["template"]["spec"]["containers"][0];
    let env: Vec<(String, String)> = c["env"]
        .as_vec()
        .unwrap()
        .iter()
        .map(|e| {
            (
                e["name"].as_str().unwrap().into(),
                e["value"].as_str().unwrap().into(),
            )
        })
        .collect();
    let segments = env.iter().find(|(k, _)| k == "SEGMENTS").unwrap();
    assert_eq!(segments.1.parse::<i64>().unwrap(), completions);
    let cmd = c["args"][0].as_str().unwrap();
    for index in 0..completions {
        let idx = index.to_string();
        let mut vars: Vec<(&str, &str)> =
            env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        vars.push(("JOB_COMPLETION_INDEX", &idx));
        let argv = words(cmd, &vars);
        assert_eq!(argv[0], "throng");
        let cli = throng::cli::Cli::try_parse_from(&argv).unwrap_or_else(|e| panic!("{e}"));
        let throng::cli::Command::Client(a) = cli.command else {
            panic!("not a client command")
        };
        let seg = a.segment.unwrap();
        assert_eq!(
            (seg.index, seg.count),
            (index as u64 + 1, completions as u64)
        );
        assert!(a.start_at.is_some());
        assert!(a.json.unwrap().starts_with("/results"));
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
    assert!(text.contains("--segment \\$((SLURM_PROCID + 1))/\\$SLURM_NTASKS"));
    assert!(text.contains("--start-at"));
    assert!(text.contains("throng merge"));
}
