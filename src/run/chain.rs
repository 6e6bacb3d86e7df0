//! What links a chained run (`after`) to its parents: the mark a parent's final record leaves
//! for each of its children, and the parents' runs a child's record names.
//!
//! Owns: the mark's stored format (a small JSON document at
//! `after/<child>/<instant>~<parent>`, named by `layout::MarkName`); a child's record names its
//! parents' runs with `record::ParentRun`.
//! Must not: decide whether a child runs (the fire machine does) or touch ZooKeeper.

use serde::{Deserialize, Serialize};

use crate::layout::MarkName;
use crate::run::record::RunStatus;

/// What a parent's final record leaves for a child: the parent's run and how it ended. The
/// child's group owner reads it; whether the child runs is the child's `after_status`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChainMark {
    pub run_id: String,
    pub status: RunStatus,
    /// The rules it was written by (`formats::CHAIN_MARK`); absent in the stored data when 1.
    #[serde(
        default = "crate::formats::first",
        skip_serializing_if = "crate::formats::is_first"
    )]
    pub format: u32,
}

impl ChainMark {
    /// The mark of a parent's run that ended as `status`.
    pub fn of(run_id: &str, status: RunStatus) -> Self {
        Self {
            run_id: run_id.to_owned(),
            status,
            format: crate::formats::CHAIN_MARK,
        }
    }

    /// The znode data; cannot fail for this plain struct.
    pub fn to_bytes(&self) -> Vec<u8> {
        serde_json::to_vec(self).unwrap_or_default()
    }

    /// Parses a mark read from ZooKeeper (untrusted: log it with its path and skip it).
    ///
    /// # Errors
    /// Not a chain mark.
    pub fn parse(data: &[u8]) -> Result<Self, serde_json::Error> {
        serde_json::from_slice(data)
    }
}

/// One mark found under `after/<child>`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FoundMark {
    pub name: MarkName,
    pub mark: ChainMark,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_mark_is_written_without_its_format_when_first_and_read_back() {
        let mark = ChainMark::of("extract-1", RunStatus::Failed);
        let bytes = mark.to_bytes();
        assert_eq!(bytes, br#"{"run_id":"extract-1","status":"failed"}"#);
        assert_eq!(ChainMark::parse(&bytes).ok(), Some(mark));
        assert!(ChainMark::parse(b"garbage").is_err());
    }
}
