//! The CLI's one JSON convention (docs/API.md, "One JSON convention"): every one-shot `--json`
//! prints one document, whose `format` says which version of it a reader has. Streams would be
//! JSON Lines; no command streams yet.
//!
//! Owns: putting the version into a document and printing it. Must not shape what a command
//! reports: each command builds its own fields.

use serde_json::Value;

use super::error::CliError;

/// Prints `fields`, a JSON object, as one document of version `format`.
pub fn print_document(format: u32, fields: Value) -> Result<(), CliError> {
    super::error::print_lines(&[versioned(format, fields).to_string()])
}

/// `fields` with `format` set; a value that is not an object is wrapped as `{"value": …}` so
/// that a reader always finds the version.
fn versioned(format: u32, fields: Value) -> Value {
    let mut document = match fields {
        Value::Object(map) => map,
        other => {
            let mut map = serde_json::Map::new();
            map.insert("value".to_owned(), other);
            map
        }
    };
    document.insert("format".to_owned(), Value::from(format));
    Value::Object(document)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_document_carries_its_version_beside_its_fields() {
        let document = versioned(1, json!({"job": "a", "runs": []}));
        assert_eq!(document, json!({"format": 1, "job": "a", "runs": []}));
    }

    #[test]
    fn a_document_that_sets_its_own_version_is_given_the_one_asked_for() {
        let document = versioned(2, json!({"format": 1}));
        assert_eq!(document["format"], 2);
    }
}
