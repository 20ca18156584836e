//! The build's identity for `throng --version` and for `cluster`'s check
//! that every host runs the same build: the commit (from git, when the
//! source is a checkout) and the build date (UTC; SOURCE_DATE_EPOCH when
//! set, for reproducible builds).

use std::process::Command;

fn main() {
    let git = |args: &[&str]| {
        Command::new("git")
            .args(args)
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
            .filter(|s| !s.is_empty())
    };
    let commit = git(&["rev-parse", "--short=12", "HEAD"]).unwrap_or_else(|| "unknown".into());
    println!("cargo:rustc-env=THRONG_COMMIT={commit}");
    let epoch = std::env::var("SOURCE_DATE_EPOCH")
        .ok()
        .and_then(|s| s.parse::<i64>().ok());
    let date = match epoch {
        Some(s) => Command::new("date")
            .args(["-u", "-d", &format!("@{s}"), "+%F"])
            .output(),
        None => Command::new("date").args(["-u", "+%F"]).output(),
    };
    let date = date
        .ok()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "unknown".into());
    println!("cargo:rustc-env=THRONG_BUILD_DATE={date}");
    if let Some(dir) = git(&["rev-parse", "--git-dir"]) {
        println!("cargo:rerun-if-changed={dir}/HEAD");
        println!("cargo:rerun-if-changed={dir}/refs/heads");
    }
    println!("cargo:rerun-if-env-changed=SOURCE_DATE_EPOCH");
}
