//! `throng cluster` with load hosts whose wall clocks are off the
//! controller's (libfaketime in their ssh sessions, their monotonic clock
//! left true, as a host's skewed clock is): a host inside
//! --max-clock-offset runs its share on the controller's time.

mod common;

use std::process::Command;
use std::time::{Duration, Instant};

use common::lab::{have_ssh_and_faketime, keys, ssh_options, Lab, FAKETIME};
use common::{in_netns, typed, Parts, BIN};

/// Four load hosts, one 5 s ahead of the controller and one 5 s behind,
/// --max-clock-offset 10s: all four are released together, each runs its
/// -T by its own monotonic clock, and the run ends in about its -T with
/// all four shares merged (none waited for, none killed); stopped
/// mid-run, every host stops at once and its share is merged.
#[test]
fn hosts_off_the_controllers_clock_run_on_its_time() {
    if !have_ssh_and_faketime() {
        return;
    }
    in_netns(|| {
        let mut lab = Lab::new(5);
        let d = lab.dir.clone();
        keys(&d);
        lab.sshd(1);
        lab.sshd(2);
        for (i, skew) in [(3, "-5s"), (4, "+5s")] {
            lab.sshd_with(
                i,
                &format!(
                    "SetEnv LD_PRELOAD={FAKETIME} FAKETIME={skew} \
                     FAKETIME_DONT_FAKE_MONOTONIC=1\n"
                ),
                None,
            );
        }
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", &lab.ns(0), BIN, "server"]);
        let srv = common::server_with(&mut cmd, &["--listen", "198.18.0.1:0"]);
        let target = common::banner_addr(&srv, "198.18.0.1");
        let hosts = d.join("hosts");
        std::fs::write(
            &hosts,
            "root@198.18.0.2\nroot@198.18.0.3\nroot@198.18.0.4\nroot@198.18.0.5\n",
        )
        .unwrap();
        let json = d.join("skewed.json");
        let mut args: Vec<String> = [
            "cluster",
            "--hosts",
            hosts.to_str().unwrap(),
            "--binary",
            BIN,
            "--max-clock-offset",
            "10s",
            "--json",
            json.to_str().unwrap(),
        ]
        .map(String::from)
        .to_vec();
        args.extend(ssh_options(&d));
        args.extend(["--", &target, "-c", "400", "-r", "2000", "-T", "4s", "-q"].map(String::from));
        let t = Instant::now();
        let (code, out, err) = common::output(Command::new(BIN).args(&args));
        let took = t.elapsed();
        assert_eq!(code, 0, "{out}\n{err}");
        // The offsets are measured and shown: "root@198.18.0.5 +4999.9 ms".
        let offset_ms = |host: &str| -> f64 {
            let at = out
                .find(&format!("{host} "))
                .unwrap_or_else(|| panic!("{out}"));
            out[at + host.len() + 1..]
                .split(' ')
                .next()
                .and_then(|n| n.parse().ok())
                .unwrap_or_else(|| panic!("no offset of {host}: {out}"))
        };
        for (host, skew) in [("root@198.18.0.4", -5000.0), ("root@198.18.0.5", 5000.0)] {
            let ms = offset_ms(host);
            assert!((ms - skew).abs() < 100.0, "{host} {ms} ms: {out}");
        }
        let r = typed(&common::read_result(&json));
        assert_eq!(r.parts.len(), 4, "{out}");
        assert!(!r.partial, "{:?}\n{out}", r.missing);
        assert_eq!(r.connections.established, 400, "{out}");
        // Every share ran its 4 s: its own length, whatever its wall clock.
        for p in &r.parts {
            let s = p.slice.as_ref().unwrap();
            let ran = s.wall.end_unix_s - s.wall.start_unix_s;
            assert!((3.9..6.0).contains(&ran), "a share ran {ran:.2} s: {out}");
        }
        // On the controller's clock the four sent together: the merged
        // traffic is about 4 s long, its rate what the four sent in it.
        let (from, to) = r.slice.as_ref().unwrap().wall.traffic().unwrap();
        assert!(
            (3.9..4.5).contains(&(to - from)),
            "traffic over {:.2} s: {out}",
            to - from
        );
        assert!(!out.contains("did not send at the same time"), "{out}");
        assert!(r.q().rate_achieved > 1800.0, "{out}");
        // The run ends in about its -T: the sessions, the clocks and the
        // release take a few seconds; nothing waits out a host's skew.
        assert!(took < Duration::from_secs(15), "{took:?}\n{out}\n{err}");

        // The stop: a Ctrl-C at the controller 2 s into a 30 s run stops
        // every host over its session at once, the skewed ones too, and
        // their shares are merged as measured until then.
        let interrupted = d.join("interrupted.json");
        let at = args.iter().position(|a| a == "--json").unwrap() + 1;
        args[at] = interrupted.display().to_string();
        let t_at = args.iter().position(|a| a == "4s").unwrap();
        args[t_at] = "30s".into();
        args.retain(|a| a != "-q");
        let (mut child, mut err) = common::spawn_piped(Command::new(BIN).args(&args));
        // A second of every host shown: all four are running.
        common::wait_for_line(&mut err, "open");
        common::wait_for_line(&mut err, "open");
        let t = Instant::now();
        common::signal(child.id() as i32, libc::SIGINT);
        let rest: Vec<String> = std::io::BufRead::lines(err).map_while(Result::ok).collect();
        let status = child.wait().unwrap();
        let took = t.elapsed();
        assert_eq!(status.code(), Some(130), "{rest:?}");
        assert!(took < Duration::from_secs(8), "{took:?}: {rest:?}");
        let r = typed(&common::read_result(&interrupted));
        assert!(r.interrupted, "{rest:?}");
        assert_eq!(r.parts.len(), 4, "{:?}\n{rest:?}", r.missing);
        assert!(!r.partial, "{:?}", r.missing);
        let (status, _) = srv.stop();
        assert!(status.success());
        drop(lab);
    });
}
