//! `throng cluster`'s flags and the client arguments after `--`, checked
//! here and turned into a [`ClusterConfig`]: the hosts read from their
//! file, the checks parsed, the client's figures the launcher needs.

use super::ClusterArgs;
use crate::cluster::ssh::{parse_hosts, ClusterConfig};
use crate::limit::LimitConfig;
use crate::usage::UsageError;

impl ClusterArgs {
    /// The cluster run these flags ask for; a usage error for a hosts
    /// file that does not read, client arguments that do not parse here
    /// (as they would not there), or a flag each host is given by cluster.
    pub fn config(&self) -> anyhow::Result<ClusterConfig> {
        let a = self;
        let text = std::fs::read_to_string(&a.hosts)
            .map_err(|e| UsageError(format!("--hosts {}: {e}", a.hosts.display())))?;
        let hosts = parse_hosts(&text)
            .map_err(|e| UsageError(format!("--hosts {}: {e}", a.hosts.display())))?;
        // The client arguments must parse here as they will there.
        let client = super::client_args(&a.client_args)
            .map_err(|e| UsageError(format!("the client arguments after --: {e}")))?;
        for (set, flag) in [
            (client.segment.is_some(), "--segment"),
            (client.start_at.is_some(), "--start-at"),
            (client.json.is_some(), "--json"),
            (client.views.html.is_some(), "--html"),
            (client.views.hgrm.is_some(), "--hgrm"),
            (client.views.server_stats.is_some(), "--server-stats"),
            (client.control.is_some(), "--control"),
            (client.pause, "--pause"),
        ] {
            if set {
                return Err(UsageError(format!(
                    "{flag} is throng cluster's to set (each host gets its own); remove it from the client arguments"
                ))
                .into());
            }
        }
        if client.targets.is_empty() {
            return Err(UsageError(
                "the client arguments need a target HOST:PORT: the embedded server would be on each load host".into(),
            )
            .into());
        }
        let views = a.views.views();
        views.check().map_err(UsageError)?;
        // Checks run on the merged result: cluster's own, else the client's.
        let given = if a.check.is_empty() {
            &client.check
        } else {
            &a.check
        };
        let traffic = client.traffic()?;
        let checks = crate::report::check::parse_all(
            given,
            traffic.is_some(),
            client.proto == crate::domain::Proto::Push,
            client.verify && !client.no_verify,
            client.connections_schedule.is_some(),
        )
        .map_err(UsageError)?;
        Ok(ClusterConfig {
            hosts,
            ssh_options: a.ssh_option.clone(),
            binary: a.binary.clone(),
            copy_binary: a.copy_binary,
            remote_dir: a.remote_dir.clone(),
            start_in: a.start_in,
            max_clock_offset: a.max_clock_offset,
            json: a.json.clone(),
            views,
            quiet: a.quiet,
            checks,
            client_args: a.client_args.clone(),
            connections: client.connections,
            drain_s: traffic.map_or(0.0, |t| t.drain_s),
            max_failures: client.max_failures,
            run_id_given: client.run_id.is_some(),
        })
    }
}

impl ClusterArgs {
    /// `throng cluster ... -- limit ...`: the search after `-- limit`, its
    /// --json and --html cluster's where it gives none; a usage error for
    /// arguments that do not parse, cluster's --check, --hgrm or
    /// --server-stats, or no target.
    pub fn limit_config(&self) -> anyhow::Result<LimitConfig> {
        let c = self;
        let usage = |m: &str| -> anyhow::Error { UsageError(m.into()).into() };
        let a = super::limit_args(&c.client_args[1..])
            .map_err(|e| UsageError(format!("the limit arguments after --: {e}")))?;
        if !c.check.is_empty() {
            return Err(usage(
                "a search's checks go with its other arguments: move --check after `-- limit`",
            ));
        }
        if c.views.hgrm.is_some() || c.views.server_stats.is_some() {
            return Err(usage(
                "a search writes --json and --html (its curve); drop --hgrm and --server-stats",
            ));
        }
        if a.client.targets.is_empty() {
            return Err(usage(
                "the limit arguments need a target HOST:PORT: the embedded server would be on \
                 each load host",
            ));
        }
        let mut cfg = a.config()?;
        // cluster's --json and --html are the search's, unless limit's are given.
        if cfg.client.json.is_none() {
            cfg.client.json = c.json.clone();
        }
        if cfg.client.views.html.is_none() {
            cfg.client.views.html = c.views.html.clone();
        }
        Ok(cfg)
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use crate::cli::{Cli, Command};

    /// The error (or the hosts) of `throng cluster --hosts FILE -- args`,
    /// FILE holding `hosts`.
    fn config(hosts: &str, args: &[&str]) -> Result<usize, String> {
        let file = std::env::temp_dir().join(format!(
            "throng-cluster-config-{}-{}",
            std::process::id(),
            args.join("_").replace(['/', ':'], "-")
        ));
        std::fs::write(&file, hosts).unwrap();
        let mut argv = vec!["throng", "cluster", "--hosts", file.to_str().unwrap(), "--"];
        argv.extend(args);
        let Command::Cluster(a) = Cli::parse_from(argv).command else {
            unreachable!()
        };
        let got = a.config().map(|c| c.hosts.len());
        let _ = std::fs::remove_file(&file);
        got.map_err(|e| {
            assert!(e.downcast_ref::<crate::usage::UsageError>().is_some());
            e.to_string()
        })
    }

    #[test]
    fn builds_from_hosts_and_client_arguments() {
        assert_eq!(config("a\nb:2222\n", &["127.0.0.1:53", "-c", "10"]), Ok(2));
    }

    #[test]
    fn refuses_what_each_host_is_given() {
        let e = config("a\n", &["127.0.0.1:53", "--segment", "1/2"]).unwrap_err();
        assert!(e.contains("--segment is throng cluster's to set"), "{e}");
    }

    #[test]
    fn refuses_client_arguments_without_a_target() {
        let e = config("a\n", &["-c", "10"]).unwrap_err();
        assert!(e.contains("need a target HOST:PORT"), "{e}");
    }

    #[test]
    fn refuses_a_hosts_file_without_hosts() {
        let e = config("# none\n", &["127.0.0.1:53"]).unwrap_err();
        assert!(e.contains("no hosts in the file"), "{e}");
    }

    /// `cluster -- limit`: cluster's --json and --html are the search's
    /// unless the search gives its own; its client flags come through.
    #[test]
    fn a_limit_under_cluster_takes_clusters_files() {
        let parse = |words: &[&str]| {
            let argv = ["throng", "cluster"].iter().chain(words);
            match crate::cli::Cli::try_parse_from(argv).unwrap().command {
                crate::cli::Command::Cluster(c) => c.limit_config(),
                _ => unreachable!(),
            }
        };
        let cfg = parse(&[
            "--hosts",
            "h",
            "--json",
            "c.json",
            "--html",
            "c.html",
            "--",
            "limit",
            "127.0.0.1:1",
            "--find",
            "rate",
            "--no-verify",
            "--html",
            "l.html",
        ])
        .unwrap();
        assert_eq!(cfg.find, crate::limit::Find::Rate);
        assert_eq!(cfg.client.json, Some("c.json".into()));
        assert_eq!(cfg.client.views.html, Some("l.html".into()));
        assert!(!cfg.client.verify);
        let no_target = parse(&["--hosts", "h", "--", "limit", "--find", "rate"]);
        assert!(no_target.unwrap_err().to_string().contains("need a target"));
    }
}
