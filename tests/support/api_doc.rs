//! docs/API.md's JSON examples held against what the commands print (issue 51 §6), so that the
//! two cannot drift apart.
//!
//! Owns: finding the examples (each a ```json block under a `<!-- example: NAME -->` line) and
//! comparing a real document's shape with one.
//! Must not: run commands (each test runs its own).

use std::collections::BTreeMap;

use serde_json::Value;

/// docs/API.md's examples by name.
pub fn examples() -> BTreeMap<String, Value> {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/docs/API.md");
    let text = std::fs::read_to_string(path).expect("docs/API.md is readable");
    let mut found = BTreeMap::new();
    let mut lines = text.lines();
    while let Some(line) = lines.next() {
        let Some(name) = line
            .trim()
            .strip_prefix("<!-- example: ")
            .and_then(|rest| rest.strip_suffix(" -->"))
        else {
            continue;
        };
        let opening = lines.next().map(str::trim);
        assert_eq!(
            opening,
            Some("```json"),
            "example {name:?}: a ```json block follows"
        );
        let block: Vec<&str> = lines.by_ref().take_while(|l| l.trim() != "```").collect();
        let example = serde_json::from_str(&block.join("\n"))
            .unwrap_or_else(|err| panic!("example {name:?} is not JSON: {err}"));
        assert!(
            found.insert(name.to_owned(), example).is_none(),
            "example {name:?} twice"
        );
    }
    found
}

/// Where `real` differs from `example`, one sentence each; empty when it matches.
///
/// What matches: every field `real` prints is in the example (nothing undocumented), and the
/// document's own fields are all printed (nested fields may be optional: a record's
/// `submission_id`). An object with a `"…"` field may hold fields it does not show. `null` on
/// either side, or `"…"` in the example, stands for any value; scalars match scalars (a key's
/// value may be a number or a string); an array's elements each match one of the example's.
pub fn differences(example: &Value, real: &Value) -> Vec<String> {
    let mut found = Vec::new();
    compare("", example, real, true, &mut found);
    found
}

fn compare(at: &str, example: &Value, real: &Value, whole: bool, found: &mut Vec<String>) {
    match (example, real) {
        (Value::Null, _) | (_, Value::Null) => {}
        (Value::String(elided), _) if elided == "…" => {}
        (Value::Object(shown), Value::Object(printed)) => {
            let open = shown.contains_key("…");
            for (key, value) in printed {
                match shown.get(key) {
                    Some(example) => compare(&format!("{at}.{key}"), example, value, false, found),
                    None if open => {}
                    None => found.push(format!("{at}.{key} is printed but not in the example")),
                }
            }
            if whole {
                for key in shown.keys().filter(|key| *key != "…") {
                    if !printed.contains_key(key) {
                        found.push(format!("{at}.{key} is in the example but not printed"));
                    }
                }
            }
        }
        (Value::Array(shown), Value::Array(printed)) => {
            if shown.is_empty() {
                return;
            }
            for (index, element) in printed.iter().enumerate() {
                let attempts: Vec<Vec<String>> = shown
                    .iter()
                    .map(|example| {
                        let mut differs = Vec::new();
                        compare(
                            &format!("{at}[{index}]"),
                            example,
                            element,
                            false,
                            &mut differs,
                        );
                        differs
                    })
                    .collect();
                if attempts.iter().all(|differs| !differs.is_empty()) {
                    found.extend(
                        attempts
                            .into_iter()
                            .min_by_key(Vec::len)
                            .unwrap_or_default(),
                    );
                }
            }
        }
        (Value::Object(_) | Value::Array(_), _) | (_, Value::Object(_) | Value::Array(_)) => {
            found.push(format!("{at}: the example shows {example}, printed {real}"));
        }
        _ => {}
    }
}
