//! `throng tune`: the table, the JSON, and --apply inside a private network
//! namespace (only that namespace's net.* settings change).

mod common;

use std::process::Command;

use common::{in_netns, output, BIN};

#[test]
fn table_names_every_limit_and_the_commands() {
    let (code, out, err) = output(Command::new(BIN).args(["tune", "-c", "1m"]));
    assert_eq!(code, 0, "{err}");
    for needle in [
        "RLIMIT_NOFILE",
        "fs.nr_open",
        "fs.file-max",
        "net.core.somaxconn",
        "net.ipv4.tcp_max_syn_backlog",
        "net.ipv4.ip_local_port_range",
        "net.ipv4.tcp_tw_reuse",
        "net.ipv4.tcp_syncookies",
        "nf_conntrack_max",
        "kernel memory",
        "NOTRACK",
    ] {
        assert!(out.contains(needle), "{needle} missing:\n{out}");
    }
    let (code, out, _) =
        output(Command::new(BIN).args(["tune", "-c", "50k", "--json", "--role", "client"]));
    assert_eq!(code, 0);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["connections"], 50_000);
    assert!(v["checks"]
        .as_array()
        .unwrap()
        .iter()
        .all(|c| c["status"].is_string()));
    assert!(
        v["kernel_bytes_per_connection"].is_u64() || v["kernel_bytes_per_connection"].is_null()
    );
}

#[test]
fn a_plan_past_eighty_percent_of_memory_needs_change() {
    // Three million connections, both ends on this host: more kernel
    // memory than 80% of what is available here, and more fds than
    // fs.file-max allows on these machines.
    let (code, out, _) = output(Command::new(BIN).args(["tune", "-c", "3m", "--json"]));
    assert_eq!(code, 0);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let row = |name: &str| {
        v["checks"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["setting"] == name)
            .unwrap_or_else(|| panic!("{name} missing: {out}"))
            .clone()
    };
    let mem = row("kernel memory");
    // "<MiB> ...": the figure first.
    let mib = |key: &str| -> u64 {
        let text = mem[key].as_str().unwrap();
        text.split(' ').next().unwrap().parse().unwrap()
    };
    let (avail, need) = (mib("current"), mib("needed"));
    assert!(
        mem["needed"].as_str().unwrap().contains("at most 80%"),
        "{mem}"
    );
    let expected = if need * 10 > avail * 8 {
        "needs_change"
    } else {
        "ok"
    };
    assert_eq!(mem["status"], expected, "{mem}");
    // 6,000,000 ends at a few kB each are past 80% of 24 GiB.
    if avail < 20_000 {
        assert_eq!(mem["status"], "needs_change", "{mem}");
    }
    let files = row("fs.file-max");
    let max: u64 = files["current"].as_str().unwrap().parse().unwrap();
    if max < 6_000_000 {
        assert_eq!(files["status"], "needs_change", "{files}");
        assert!(v["apply_now"].to_string().contains("fs.file-max"), "{v}");
    }
}

#[test]
fn apply_changes_only_this_namespaces_net_settings() {
    in_netns(|| {
        common::set_sysctl("net.core.somaxconn", "1024");
        common::set_sysctl("net.ipv4.ip_local_port_range", "40000 40999");
        let (code, out, err) = output(Command::new(BIN).args(["tune", "-c", "50k", "--apply"]));
        assert_eq!(code, 0, "{out}\n{err}");
        for applied in [
            "applied: net.core.somaxconn: 1024 -> 65535",
            "applied: net.ipv4.ip_local_port_range: 40000 40999 -> 1024 65535",
        ] {
            assert!(out.contains(applied), "{applied}: {out}");
        }
        assert!(!out.contains("applied: fs."), "{out}");
        let read = |n: &str| std::fs::read_to_string(format!("/proc/sys/{n}")).unwrap();
        assert_eq!(read("net/core/somaxconn").trim(), "65535");
        assert_eq!(
            read("net/ipv4/ip_local_port_range")
                .split_whitespace()
                .collect::<Vec<_>>(),
            ["1024", "65535"]
        );
    });
    // The host's own settings did not move.
    let host = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range").unwrap();
    assert_ne!(host.split_whitespace().next(), Some("1024"));
}

#[test]
fn apply_without_root_is_refused() {
    let Some(setpriv) = common::which("setpriv") else {
        common::skip("setpriv is not installed", "apt-get install util-linux");
        return;
    };
    let (code, _, err) = output(Command::new(setpriv).args([
        "--reuid=65534",
        "--regid=65534",
        "--clear-groups",
        BIN,
        "tune",
        "--apply",
    ]));
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("needs root"), "{err}");
}

/// `tune --measure` in a namespace with a 2,000-port range: it measures
/// until the knee or 90% of the range, keeps the curve, and plans follow
/// it while the port range is the one it was measured under.
#[test]
fn a_measured_connect_curve_is_kept_and_followed() {
    let cache = common::temp_dir("tune-measure");
    let c = cache.clone();
    in_netns(move || {
        common::set_sysctl("net.ipv4.ip_local_port_range", "40000 41999");
        let tune = |args: &[&str]| {
            output(
                Command::new(BIN)
                    .arg("tune")
                    .args(args)
                    .env("XDG_CACHE_HOME", &c),
            )
        };
        let (code, out, err) = tune(&["--measure", "--json"]);
        assert_eq!(code, 0, "{out}\n{err}");
        let v: serde_json::Value = serde_json::from_str(&out).unwrap();
        assert_eq!(v["port_range"], serde_json::json!([40000, 41999]), "{out}");
        let up_to = v["measured_up_to"].as_u64().unwrap();
        assert!(up_to <= 1800, "past 90% of the range: {out}");
        let points = v["points"].as_array().unwrap();
        let counts: Vec<u64> = points
            .iter()
            .map(|p| p["connections"].as_u64().unwrap())
            .collect();
        assert_eq!(counts.last(), Some(&up_to), "{out}");
        // A point a fiftieth of the range.
        assert_eq!(v["bucket"], 50, "{out}");
        assert!(counts.windows(2).all(|w| w[1] == w[0] + 50), "{out}");
        let fast = match v["knee"].as_u64() {
            Some(k) => {
                assert!(k < up_to && k % 50 == 0, "{out}");
                k - k / 10
            }
            None => {
                let by = v["stopped_by"].as_str().unwrap_or_default();
                assert!(by.contains("90% of the 2000-port range"), "{out}");
                up_to.min(1500)
            }
        };
        let kept = c.join("throng/connect-curve.json");
        assert!(kept.is_file(), "{}", kept.display());
        // The plan for 10,000 connections rests on it.
        let (code, out, _) = tune(&["-c", "10k"]);
        assert_eq!(code, 0);
        let sources = 10_000u64.div_ceil(fast);
        assert!(
            out.contains(&format!("need {sources} source address(es)"))
                && out.contains("measured on this host"),
            "{fast} a pair: {out}"
        );
        // Another range: the curve no longer applies.
        common::set_sysctl("net.ipv4.ip_local_port_range", "40000 43999");
        let (_, out, _) = tune(&["-c", "10k"]);
        assert!(out.contains("need 10 source address(es)"), "{out}");
        assert!(!out.contains("measured on this host"), "{out}");
    });
    let _ = std::fs::remove_dir_all(&cache);
}
