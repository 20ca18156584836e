//! docs/result.md against the committed JSON Schemas (docs/schema/, made
//! from the types by `throng::outcome::schema`): every key a section's
//! table documents is in the schema of what the section describes, and
//! every key of that schema is named in its section.

mod common;

use std::collections::BTreeSet;

use serde_json::Value;

fn doc() -> String {
    std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/result.md")).unwrap()
}

fn schema(format: &str) -> Value {
    let path = format!(
        "{}/docs/schema/{format}.schema.json",
        env!("CARGO_MANIFEST_DIR")
    );
    serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap()
}

/// The section of the page under the heading `title` (to the next `## `).
fn section<'a>(doc: &'a str, title: &str) -> &'a str {
    let head = format!("\n## {title}\n");
    let start = doc
        .find(&head)
        .unwrap_or_else(|| panic!("docs/result.md has no section '## {title}'"))
        + head.len();
    let end = doc[start..].find("\n## ").map_or(doc.len(), |e| start + e);
    &doc[start..end]
}

/// Every word in backticks in `text`, cut at its first `.`, `[` or space
/// (`failed.<bucket>` and `causes[].code` name `failed` and `causes`).
fn named(text: &str) -> BTreeSet<String> {
    text.split('`')
        .skip(1)
        .step_by(2)
        .filter_map(|w| w.split(['.', '[', ' ', '=', '<', '>']).next())
        .filter(|w| !w.is_empty())
        .map(String::from)
        .collect()
}

/// Every identifier inside backticks in `text` (`{load, pass}` and
/// `causes[].label` name each of their words).
fn words(text: &str) -> BTreeSet<String> {
    text.split('`')
        .skip(1)
        .step_by(2)
        .flat_map(|w| w.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_')))
        .filter(|w| !w.is_empty())
        .map(String::from)
        .collect()
}

/// The keys of the first column of the section's first table.
fn tabled(text: &str) -> BTreeSet<String> {
    let rows = text
        .lines()
        .skip_while(|l| !l.starts_with("| key"))
        .skip(2)
        .take_while(|l| l.starts_with('|'));
    rows.flat_map(|r| named(r.split('|').nth(1).unwrap_or("")))
        .collect()
}

/// The schema node at `path` (property names; `[]` for an array's items)
/// from `root`, its `$ref`s, `anyOf`s (an Option) and `allOf`s followed.
fn at<'a>(root: &'a Value, path: &[&str]) -> Vec<&'a Value> {
    let mut nodes = resolve(root, root);
    for step in path {
        let mut next = Vec::new();
        for n in nodes {
            let child = match *step {
                "[]" => n.get("items"),
                key => n.get("properties").and_then(|p| p.get(key)),
            };
            if let Some(c) = child {
                next.extend(resolve(root, c));
            }
        }
        nodes = next;
    }
    assert!(!nodes.is_empty(), "the schema has no {path:?}");
    nodes
}

fn resolve<'a>(root: &'a Value, v: &'a Value) -> Vec<&'a Value> {
    let mut out = Vec::new();
    if let Some(r) = v.get("$ref").and_then(Value::as_str) {
        let name = r.trim_start_matches("#/$defs/");
        out.extend(resolve(root, &root["$defs"][name]));
    }
    for k in ["anyOf", "allOf", "oneOf"] {
        for alt in v.get(k).and_then(Value::as_array).into_iter().flatten() {
            out.extend(resolve(root, alt));
        }
    }
    out.push(v);
    out
}

fn keys(nodes: &[&Value]) -> BTreeSet<String> {
    nodes
        .iter()
        .filter_map(|n| n.get("properties").and_then(Value::as_object))
        .flat_map(|p| p.keys().cloned())
        .collect()
}

#[test]
fn docs_result_md_and_the_schemas_name_the_same_keys() {
    let doc = doc();
    let result = schema("result");
    let limit = schema("limit");
    let compare = schema("compare");
    let stats = schema("server-stats");
    // Each section, and the schema nodes whose keys it documents.
    let sections: Vec<(&str, Vec<&Value>)> = vec![
        ("Top level", at(&result, &[])),
        ("`environment`", at(&result, &["environment"])),
        ("`connections`", at(&result, &["connections"])),
        ("`queries`", at(&result, &["queries"])),
        ("`latency`", at(&result, &["latency"])),
        ("`dns`", at(&result, &["dns"])),
        ("`push`", at(&result, &["push"])),
        ("`per_second[]`", at(&result, &["per_second", "[]"])),
        (
            "`slice` and `parts[]`",
            [at(&result, &["slice"]), at(&result, &["parts", "[]"])].concat(),
        ),
        ("`checks[]`", at(&result, &["checks", "[]"])),
        (
            "`verdict`",
            [
                at(&result, &["verdict"]),
                at(&result, &["verdict", "causes", "[]"]),
            ]
            .concat(),
        ),
        ("`client`", at(&result, &["client"])),
        ("`server_seen`", at(&result, &["server_seen"])),
        ("`scenario`", at(&result, &["scenario"])),
        (
            "`throng limit --json`",
            [
                at(&limit, &[]),
                at(&limit, &["limit"]),
                at(&limit, &["steps", "[]"]),
            ]
            .concat(),
        ),
        (
            "`throng compare --json`",
            [at(&compare, &[]), at(&compare, &["runs", "[]"])].concat(),
        ),
        ("The server's `--stats-json` line", at(&stats, &[])),
    ];
    // (The reading of the page: a table's keys, and the words of prose.)
    assert!(tabled(section(&doc, "`connections`")).contains("failed"));
    assert!(words(section(&doc, "`latency`")).contains("send_lag_us"));
    let mut wrong = Vec::new();
    for (title, nodes) in &sections {
        let text = section(&doc, title);
        let schema_keys = keys(nodes);
        for k in tabled(text) {
            if !schema_keys.contains(&k) {
                wrong.push(format!(
                    "{title}: `{k}` is documented; the schema has no such key"
                ));
            }
        }
        let said = words(text);
        for k in &schema_keys {
            if !said.contains(k) {
                wrong.push(format!(
                    "{title}: `{k}` is in the schema; the section never names it"
                ));
            }
        }
    }
    assert!(wrong.is_empty(), "docs/result.md: {wrong:#?}");
}

/// A result of a real run is valid by its schema (every result a test
/// reads is: tests/common's parse_result), and one whose key has the
/// wrong type, or lacks a key the type requires, is not.
#[test]
fn a_result_is_checked_against_its_schema() {
    let (code, out, v, _) =
        common::client("schema-run", &["-c", "2", "-r", "20", "-T", "1s"], false);
    assert_eq!(code, 0, "{out}");
    common::conforms("result", &v);
    let mut bad = v.clone();
    bad["connections"]["established"] = Value::from("two");
    let mut lacking = v.clone();
    lacking.as_object_mut().unwrap().remove("connections");
    for broken in [bad, lacking] {
        let caught = std::panic::catch_unwind(|| common::conforms("result", &broken));
        let e = caught.expect_err("a broken result passed its schema");
        let text = e.downcast_ref::<String>().cloned().unwrap_or_default();
        assert!(text.contains("not a valid result"), "{text}");
    }
}
