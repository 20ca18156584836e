//! What an installed throng brings with it: the completion scripts parse in
//! their shells (bash always; zsh and fish where installed) and complete the
//! verbs, and `throng man` is one page that man(1) renders without warning,
//! with a section for every verb `throng --help` lists. man (man-db) fails
//! in CI when missing and skips loudly elsewhere.

mod common;

use std::io::Write;
use std::process::{Command, Stdio};

use common::{output, program, run, temp_dir};

/// The verbs `throng --help` lists (all but `help`).
fn verbs() -> Vec<String> {
    let (code, out, err) = run(&["--help"]);
    assert_eq!(code, 0, "{err}");
    let list: Vec<String> = out
        .lines()
        .skip_while(|l| !l.starts_with("Commands:"))
        .skip(1)
        .take_while(|l| l.starts_with("  "))
        // (A description wrapped to its next line is indented further.)
        .filter(|l| !l.starts_with("   "))
        .filter_map(|l| l.split_whitespace().next())
        .filter(|v| *v != "help")
        .map(String::from)
        .collect();
    assert!(list.len() >= 8, "{out}");
    list
}

/// `throng completions SHELL` written to a file; the file's path.
fn script(shell: &str, dir: &std::path::Path) -> std::path::PathBuf {
    let (code, out, err) = run(&["completions", shell]);
    assert_eq!(code, 0, "{shell}: {err}");
    assert!(out.contains("throng"), "{shell}: {out}");
    let path = dir.join(format!("throng.{shell}"));
    std::fs::write(&path, out).unwrap();
    path
}

#[test]
fn bash_completion_parses_and_completes_the_verbs() {
    let Some(bash) = program("bash", "bash") else {
        return;
    };
    let dir = temp_dir("completion-bash");
    let file = script("bash", &dir);
    let (code, _, err) = output(Command::new(&bash).arg("-n").arg(&file));
    assert_eq!(code, 0, "bash -n: {err}");
    // What bash offers after `throng c<TAB>`, then after `throng client --tr<TAB>`.
    let complete = |words: &str, cword: usize| {
        let (code, out, err) = output(Command::new(&bash).arg("-c").arg(format!(
            "source {}; COMP_WORDS=({words}); COMP_CWORD={cword}; COMP_LINE='{words}'; \
             COMP_POINT=${{#COMP_LINE}}; \
             _throng throng \"${{COMP_WORDS[COMP_CWORD]}}\" \"${{COMP_WORDS[COMP_CWORD-1]}}\"; \
             printf '%s\\n' \"${{COMPREPLY[@]}}\"",
            file.display()
        )));
        assert_eq!(code, 0, "{words}: {err}");
        out
    };
    let offered = complete("throng c", 1);
    for verb in ["client", "cluster", "compare", "completions"] {
        assert!(offered.lines().any(|l| l == verb), "{verb}: {offered}");
    }
    assert!(!offered.lines().any(|l| l == "server"), "{offered}");
    let offered = complete("throng client --tr", 2);
    assert!(offered.lines().any(|l| l == "--transport"), "{offered}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn zsh_and_fish_completions_parse() {
    let dir = temp_dir("completion-zsh-fish");
    for shell in ["zsh", "fish"] {
        let file = script(shell, &dir);
        // .ci/run installs both: under CI a missing shell fails.
        let Some(prog) = program(shell, shell) else {
            continue;
        };
        let (code, _, err) = output(Command::new(prog).arg("-n").arg(&file));
        assert_eq!(code, 0, "{shell} -n: {err}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn completions_name_an_unknown_shell() {
    let (code, _, err) = run(&["completions", "tcsh"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("bash"), "the shells are listed: {err}");
}

/// `man -l` on the page, from a file or from stdin ("-"); its text.
fn man(page: &[u8], from_stdin: bool, dir: &std::path::Path) -> Option<String> {
    let man = program("man", "man-db")?;
    let mut cmd = Command::new(man);
    cmd.args(["--warnings", "-l"])
        .env("MANPAGER", "cat")
        .env("MANWIDTH", "100")
        .env_remove("MAN_KEEP_FORMATTING")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    if from_stdin {
        cmd.arg("-");
    } else {
        let file = dir.join("throng.1");
        std::fs::write(&file, page).unwrap();
        cmd.arg(file);
    }
    let mut child = cmd.spawn().unwrap();
    let mut stdin = child.stdin.take().unwrap();
    if from_stdin {
        stdin.write_all(page).unwrap();
    }
    drop(stdin);
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "man -l: {err}");
    // groff's warnings (man --warnings) name a broken page.
    assert!(err.trim().is_empty(), "man -l warned: {err}");
    Some(String::from_utf8_lossy(&out.stdout).into_owned())
}

#[test]
fn man_page_renders_with_every_verb() {
    let (code, page, err) = run(&["man"]);
    assert_eq!(code, 0, "{err}");
    assert!(page.starts_with(".TH THRONG 1 "), "{page}");
    let dir = temp_dir("man");
    let Some(text) = man(page.as_bytes(), false, &dir) else {
        return;
    };
    for heading in ["NAME", "SYNOPSIS", "COMMANDS", "EXIT STATUS", "ENVIRONMENT"] {
        assert!(text.lines().any(|l| l == heading), "{heading}:\n{text}");
    }
    // Words apart from the spaces that justify them.
    let words = text.split_whitespace().collect::<Vec<_>>().join(" ");
    for verb in verbs() {
        let heading = format!("THRONG {}", verb.to_uppercase());
        assert!(text.lines().any(|l| l == heading), "{heading}:\n{text}");
        let synopsis = format!("throng {verb} [");
        assert!(words.contains(&synopsis), "{synopsis}:\n{text}");
    }
    // Flags of the verbs, under their help headings.
    for flag in [
        "--connections",
        "--transport",
        "--mode",
        "--hosts",
        "--apply",
    ] {
        assert!(text.contains(flag), "{flag}:\n{text}");
    }
    assert!(text.contains("Traffic options"), "{text}");
    // The internal flag of --processes' children stays out.
    assert!(!text.contains("--child"), "{text}");
    // And read from stdin, as the verb's help suggests.
    let piped = man(page.as_bytes(), true, &dir).unwrap();
    assert_eq!(piped, text);
    let _ = std::fs::remove_dir_all(&dir);
}
