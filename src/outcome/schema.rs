//! The JSON Schema of each format throng writes, generated from the types
//! its writer and readers share (schemars, which reads their serde
//! attributes): the result file (`client`, `merge`, `cluster --json`),
//! `limit --json`, `compare --json`, and the server's `--stats-json`
//! line. They are committed under docs/schema/; a test regenerates them
//! and fails on a difference (`THRONG_WRITE_SCHEMAS=1 cargo test --lib
//! schema` rewrites them).

use serde_json::Value;

/// Each format's file name under docs/schema/ and its schema.
pub fn all() -> Vec<(&'static str, Value)> {
    vec![
        (
            "result.schema.json",
            schema::<super::RunResult>("a throng result: client, merge or cluster --json"),
        ),
        (
            "limit.schema.json",
            schema::<super::limit::LimitFile>("throng limit --json"),
        ),
        (
            "compare.schema.json",
            schema::<super::compared::Comparison>("throng compare --json"),
        ),
        (
            "server-stats.schema.json",
            schema::<super::server_second::ServerSecond>("one line of throng server --stats-json"),
        ),
    ]
}

fn schema<T: schemars::JsonSchema>(title: &str) -> Value {
    let mut s = schemars::schema_for!(T).to_value();
    s["title"] = Value::from(title);
    s
}

/// A schema as the file under docs/schema/ holds it.
pub fn text(schema: &Value) -> String {
    serde_json::to_string_pretty(schema).expect("a schema is JSON") + "\n"
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_committed_schemas_are_the_types() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/schema");
        let write = std::env::var_os("THRONG_WRITE_SCHEMAS").is_some();
        for (name, schema) in all() {
            let path = dir.join(name);
            let want = text(&schema);
            if write {
                std::fs::create_dir_all(&dir).unwrap();
                std::fs::write(&path, &want).unwrap();
            }
            let have = std::fs::read_to_string(&path).unwrap_or_default();
            assert!(
                have == want,
                "{} is not the schema of its type; THRONG_WRITE_SCHEMAS=1 cargo test --lib \
                 schema rewrites it (and say what changed in CHANGELOG.md)",
                path.display()
            );
        }
    }
}
