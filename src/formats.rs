//! The versions of the documents zkcron stores in ZooKeeper, and what a reader does with a
//! document written by a newer zkcron (docs/UPGRADING.md "Stored formats").
//!
//! The rules, for every JSON document:
//! - Its `format` (absent: 1) says which rules wrote it. Within a format a writer may add a field
//!   that a reader of the same format may ignore; a field a reader must not ignore (it changes
//!   what the document promises) takes the next format.
//! - A reader keeps the fields it does not know when it rewrites a document (a run record's next
//!   attempt, a submission moved or remembered), so an older node never drops what a newer one
//!   wrote.
//! - A document of a newer format than the reader's is read for what it can show, never
//!   rewritten and never deleted as garbage: it is left for a node that knows its format. The
//!   reader says so once per kind of document and format, not once per document.
//!
//! Owns: the format each document is written in, reading a document's format, the notice.
//! Must not: read or write ZooKeeper, or know any document's other fields.

use std::collections::HashSet;
use std::sync::Mutex;

use serde::Deserialize;

/// A run record's format (`run::RunRecord`).
pub const RUN_RECORD: u32 = 1;
/// A backfill request's format (`control::BackfillRequest`).
pub const BACKFILL_REQUEST: u32 = 1;
/// A chain mark's format (`run::ChainMark`).
pub const CHAIN_MARK: u32 = 1;

/// The `format` of a JSON document, 1 when it has none: `None` when the data is not a JSON
/// object at all.
pub fn format_of(data: &[u8]) -> Option<u32> {
    #[derive(Deserialize)]
    struct Format {
        #[serde(default = "first")]
        format: u32,
    }
    serde_json::from_slice::<Format>(data)
        .ok()
        .map(|read| read.format)
}

/// The format of a document that has none: the first.
pub fn first() -> u32 {
    1
}

/// Whether `format` is the first, for `skip_serializing_if`: a document of format 1 is written
/// as it was before formats were numbered, byte for byte.
#[allow(clippy::trivially_copy_pass_by_ref)] // serde's skip_serializing_if passes a reference
pub fn is_first(format: &u32) -> bool {
    *format == 1
}

/// Says that a document of `kind` at `path` was written in `format`, newer than this zkcron
/// knows, and is left as it is: at warn the first time for that kind and format in this
/// process, at debug after (an owner meets the same records at every catch-up).
pub fn newer_found(kind: &'static str, format: u32, path: &str) {
    static SAID: Mutex<Option<HashSet<(&'static str, u32)>>> = Mutex::new(None);
    let first_time = SAID
        .lock()
        .map(|mut said| said.get_or_insert_with(HashSet::new).insert((kind, format)))
        .unwrap_or(true);
    if first_time {
        tracing::warn!(
            kind,
            format,
            path,
            "written by a newer zkcron; left as it is for a node that knows its format (said once for this kind and format)"
        );
    } else {
        tracing::debug!(
            kind,
            format,
            path,
            "written by a newer zkcron; left as it is"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_document_without_a_format_is_of_the_first_and_garbage_has_none() {
        assert_eq!(format_of(br#"{"job":"a"}"#), Some(1));
        assert_eq!(format_of(br#"{"format":3,"job":{"new":"shape"}}"#), Some(3));
        assert_eq!(format_of(b"\xff"), None);
        assert_eq!(format_of(b"[1,2]"), None);
        assert!(is_first(&1) && !is_first(&2));
    }
}
