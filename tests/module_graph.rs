//! The module graph flows one way: no import closes a circle between the
//! top-level modules of src/ (cli, client, cluster, ...), and flags stay in
//! cli. Read from the sources, so it needs no build of its own.
//!
//! The rules, as this test reads them:
//!
//! - A top-level module is `src/X.rs` or `src/X/`; lib.rs and main.rs are
//!   the crate root, above everything (`crate::UsageError`, the root's
//!   re-export of `usage`'s, counts as no edge).
//! - Module A uses B when code in A names `crate::B` (also inside
//!   `crate::{B, ...}`), or reaches B through as many `super::` as A's file
//!   is deep (`super::super::B` from src/a/b.rs).
//! - Comments are skipped, and so are `#[cfg(test)]` modules: tests may
//!   reach anywhere, like the integration tests.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// A use of module `to`: where it is written.
#[derive(Debug, Clone)]
struct Use {
    to: String,
    at: String,
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// The file's module path under src/: `src/client/preflight.rs` is
/// [client, preflight], `src/server/mod.rs` is [server].
fn module_path(src: &Path, file: &Path) -> Vec<String> {
    let rel = file.strip_prefix(src).unwrap().with_extension("");
    let mut parts: Vec<String> = rel
        .iter()
        .map(|c| c.to_string_lossy().into_owned())
        .collect();
    if parts.last().is_some_and(|p| p == "mod") {
        parts.pop();
    }
    parts
}

/// The code of a file without comments and without `#[cfg(test)]` modules
/// (rustfmt's layout: the module's closing brace is the first line at its
/// indentation that is `}`), as (line number, text) pairs.
fn code_lines(text: &str) -> Vec<(usize, String)> {
    let lines: Vec<&str> = text.lines().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        let line = lines[i];
        let trimmed = line.trim_start();
        if trimmed.starts_with("#[cfg(test)]")
            && lines
                .get(i + 1)
                .map(|n| n.trim_start().trim_start_matches("pub(crate) "))
                .is_some_and(|n| n.starts_with("mod ") && n.ends_with('{'))
        {
            let indent = &line[..line.len() - trimmed.len()];
            let end = format!("{indent}}}");
            i += 2;
            while i < lines.len() && lines[i] != end {
                i += 1;
            }
            i += 1;
            continue;
        }
        let code = match line.find("//") {
            // A `//` inside a string ("http://") cuts the line short: at
            // worst a use on the rest of that line goes unseen.
            Some(c) => &line[..c],
            None => line,
        };
        out.push((i + 1, code.to_string()));
        i += 1;
    }
    out
}

fn ident_at(s: &str) -> String {
    s.chars()
        .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
        .collect()
}

/// The top-level modules named on one line of code in a file at `depth`.
fn named(line: &str, depth: usize) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = line;
    while let Some(p) = rest.find("crate::") {
        let before = rest[..p].chars().last();
        let after = &rest[p + "crate::".len()..];
        rest = after;
        if before.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_' || c == '$') {
            continue;
        }
        if let Some(group) = after.strip_prefix('{') {
            // crate::{a, b::c, d::{e, f}}: the first name of each item at
            // the group's own level.
            let mut level = 0;
            let mut start = true;
            for (k, c) in group.char_indices() {
                match c {
                    '{' => level += 1,
                    '}' if level == 0 => break,
                    '}' => level -= 1,
                    ',' if level == 0 => start = true,
                    c if start && !c.is_whitespace() => {
                        out.push(ident_at(&group[k..]));
                        start = false;
                    }
                    _ => {}
                }
            }
        } else {
            out.push(ident_at(after));
        }
    }
    // super::super::x from a file `depth` deep names the top-level x.
    if depth > 0 {
        let supers = "super::".repeat(depth);
        let mut rest = line;
        while let Some(p) = rest.find(&supers) {
            let before = rest[..p].chars().last();
            let after = &rest[p + supers.len()..];
            rest = after;
            let more = after.starts_with("super::");
            if !more && !before.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':') {
                out.push(ident_at(after));
            }
        }
    }
    out
}

/// Every top-level module of src/ and the modules it uses.
fn graph() -> BTreeMap<String, Vec<Use>> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    files.sort();
    let modules: BTreeSet<String> = files
        .iter()
        .map(|f| module_path(&src, f))
        .filter_map(|p| p.first().cloned())
        .filter(|m| m != "lib" && m != "main")
        .collect();
    let mut g: BTreeMap<String, Vec<Use>> =
        modules.iter().map(|m| (m.clone(), Vec::new())).collect();
    for f in &files {
        let path = module_path(&src, f);
        let Some(from) = path.first().filter(|m| modules.contains(*m)) else {
            continue;
        };
        let text = std::fs::read_to_string(f).unwrap();
        for (n, line) in code_lines(&text) {
            for to in named(&line, path.len()) {
                if modules.contains(&to) && &to != from {
                    let at = format!("src/{}:{n}", f.strip_prefix(&src).unwrap().display());
                    g.get_mut(from).unwrap().push(Use { to, at });
                }
            }
        }
    }
    g
}

/// A circle of modules, each with the line that uses the next, if any.
fn find_circle(g: &BTreeMap<String, Vec<Use>>) -> Option<Vec<(String, String)>> {
    #[derive(Clone, Copy, PartialEq)]
    enum Seen {
        No,
        OnPath,
        Done,
    }
    fn visit(
        m: &str,
        g: &BTreeMap<String, Vec<Use>>,
        seen: &mut BTreeMap<String, Seen>,
        path: &mut Vec<(String, String)>,
    ) -> Option<Vec<(String, String)>> {
        seen.insert(m.to_string(), Seen::OnPath);
        for u in &g[m] {
            path.push((m.to_string(), u.at.clone()));
            match seen[&u.to] {
                Seen::OnPath => {
                    let start = path.iter().position(|(x, _)| *x == u.to).unwrap();
                    return Some(path[start..].to_vec());
                }
                Seen::No => {
                    if let Some(c) = visit(&u.to, g, seen, path) {
                        return Some(c);
                    }
                }
                Seen::Done => {}
            }
            path.pop();
        }
        seen.insert(m.to_string(), Seen::Done);
        None
    }
    let mut seen: BTreeMap<String, Seen> = g.keys().map(|k| (k.clone(), Seen::No)).collect();
    for m in g.keys() {
        if seen[m] == Seen::No {
            if let Some(c) = visit(m, g, &mut seen, &mut Vec::new()) {
                return Some(c);
            }
        }
    }
    None
}

/// A circle's uses, a line each: `  a -> b at <where a uses b>`.
fn circle_lines(circle: &[(String, String)]) -> String {
    circle
        .iter()
        .enumerate()
        .map(|(i, (m, at))| {
            let next = &circle[(i + 1) % circle.len()].0;
            format!("  {m} -> {next} at {at}")
        })
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn no_import_closes_a_circle_between_top_level_modules() {
    let g = graph();
    for m in ["cli", "client", "engine", "scenario", "server", "domain"] {
        assert!(g.contains_key(m), "no module {m} found in src/: {g:?}");
    }
    if let Some(circle) = find_circle(&g) {
        let names: Vec<&str> = circle.iter().map(|(m, _)| m.as_str()).collect();
        panic!(
            "the imports close a circle: {} -> {}\n{}\nmove what both need below both \
             (see the module map in src/lib.rs)",
            names.join(" -> "),
            names[0],
            circle_lines(&circle)
        );
    }
}

#[test]
fn the_bottom_layer_uses_nothing_of_throngs() {
    let g = graph();
    for m in ["domain", "units"] {
        let uses: Vec<String> = g[m]
            .iter()
            .map(|u| format!("{} at {}", u.to, u.at))
            .collect();
        assert!(uses.is_empty(), "{m} is the bottom layer but uses {uses:?}");
    }
}

#[test]
fn flags_stay_in_cli() {
    // Only cli (and main, which parses) names clap outside of tests: the
    // rest takes plain values, so a flag's spelling cannot reach a schema.
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let mut found = Vec::new();
    for f in &files {
        let path = module_path(&src, f);
        if path.first().is_some_and(|m| m == "cli" || m == "main") {
            continue;
        }
        let text = std::fs::read_to_string(f).unwrap();
        for (n, line) in code_lines(&text) {
            if line.contains("clap::") || line.contains("ValueEnum") {
                found.push(format!(
                    "src/{}:{n}",
                    f.strip_prefix(&src).unwrap().display()
                ));
            }
        }
    }
    assert!(found.is_empty(), "clap outside cli: {found:?}");
}

#[test]
fn the_reader_sees_grouped_and_relative_uses() {
    assert_eq!(named("use crate::cli::ClientArgs;", 1), ["cli"]);
    assert_eq!(
        named("use crate::{engine::{Live, Sample}, report, sys::x};", 1),
        ["engine", "report", "sys"]
    );
    assert_eq!(
        named("let x = super::super::units::human(1.0);", 2),
        ["units"]
    );
    assert!(named("let x = super::scenario::Query::Ping;", 2).is_empty());
    assert!(named("let x = $crate::foo; my_crate::bar", 1).is_empty());
    let code = code_lines("use crate::a; // crate::b\n#[cfg(test)]\nmod tests {\n    use crate::c;\n}\nuse crate::d;\n");
    let seen: Vec<String> = code.iter().flat_map(|(_, l)| named(l, 1)).collect();
    assert_eq!(seen, ["a", "d"]);
}

/// The engine's parts named on one line of code in a file `depth` below
/// src/engine/ (1: src/engine/x.rs, 2: src/engine/proto/x.rs): a
/// `super::` path that climbs exactly to engine/, or `crate::engine::`.
fn engine_parts(line: &str, depth: usize) -> Vec<String> {
    let mut out = Vec::new();
    for (prefix, exact) in [
        ("super::".repeat(depth), true),
        ("crate::engine::".into(), false),
    ] {
        for (p, _) in line.match_indices(prefix.as_str()) {
            let before = line[..p].chars().last();
            let after = &line[p + prefix.len()..];
            let climbs_more = exact && after.starts_with("super::");
            let inside = before.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':');
            if !climbs_more && !inside {
                out.push(ident_at(after));
            }
        }
    }
    out
}

/// The files of src/engine/ (engine/proto/ one part, `proto`) and the
/// parts each uses.
fn engine_graph() -> BTreeMap<String, Vec<Use>> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let engine = src.join("engine");
    let mut files = Vec::new();
    rust_files(&engine, &mut files);
    files.sort();
    let part_of = |f: &Path| -> (String, usize) {
        let rel = f.strip_prefix(&engine).unwrap();
        let first = rel.iter().next().unwrap().to_string_lossy().into_owned();
        let depth = rel.iter().count();
        (first.trim_end_matches(".rs").to_string(), depth)
    };
    let parts: BTreeSet<String> = files
        .iter()
        .map(|f| part_of(f).0)
        .filter(|p| p != "mod")
        .collect();
    let mut g: BTreeMap<String, Vec<Use>> = parts.iter().map(|p| (p.clone(), Vec::new())).collect();
    for f in &files {
        let (from, depth) = part_of(f);
        if from == "mod" {
            continue;
        }
        let text = std::fs::read_to_string(f).unwrap();
        for (n, line) in code_lines(&text) {
            for to in engine_parts(&line, depth) {
                if parts.contains(&to) && to != from {
                    let at = format!("src/{}:{n}", f.strip_prefix(&src).unwrap().display());
                    g.get_mut(&from).unwrap().push(Use { to, at });
                }
            }
        }
    }
    g
}

#[test]
fn no_import_closes_a_circle_between_the_engines_files() {
    let g = engine_graph();
    for p in [
        "worker",
        "io",
        "traffic",
        "handshake",
        "connections",
        "proto",
    ] {
        assert!(g.contains_key(p), "no part {p} found in src/engine/: {g:?}");
    }
    assert!(
        g["io"]
            .iter()
            .any(|u| u.to == "traffic" || u.to == "handshake"),
        "the reader sees no use in io.rs: {:?}",
        g["io"]
    );
    if let Some(circle) = find_circle(&g) {
        panic!(
            "the engine's files import each other in a circle:\n{}\na part hands the \
             other what it needs as an argument, or returns what the worker routes",
            circle_lines(&circle)
        );
    }
}

#[test]
fn the_engine_reader_sees_its_siblings() {
    assert_eq!(
        engine_parts("use super::conn::{ConnEnd, Flags};", 1),
        ["conn"]
    );
    assert!(engine_parts("use super::super::units::x;", 1).is_empty());
    assert_eq!(
        engine_parts("use super::super::transport::ClientTransport;", 2),
        ["transport"]
    );
    assert_eq!(
        engine_parts("x: crate::engine::handshake::Handshake", 1),
        ["handshake"]
    );
    assert!(engine_parts("use super::{Frame, Status};", 2).is_empty());
}
