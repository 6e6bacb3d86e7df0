//! What links a chained run (`after`) to its parents: the mark a parent's final record leaves
//! for each of its children, and the parents' runs a child's record names.
//!
//! Owns: the mark's stored format (a small JSON document at
//! `after/<child>/<instant>~<parent>`, named by `layout::MarkName`; a submission's run's mark,
//! `<due>-<id>~<parent>`, carries the submission's payload after the document's line, as the
//! submission's own node does); a child's record names its parents' runs with
//! `record::ParentRun`.
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
    /// The parent run's trace, where telemetry is on: its child's span links to it (issue 52;
    /// an older reader ignores it).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "super::trace::lenient"
    )]
    pub trace: Option<super::RunTrace>,
    /// A submission's run: its payload, which its child's submission gets. Stored after the
    /// JSON line (none: no line break).
    #[serde(skip)]
    pub payload: Vec<u8>,
}

impl ChainMark {
    /// The mark of a parent's run that ended as `status`.
    pub fn of(run_id: &str, status: RunStatus) -> Self {
        Self {
            run_id: run_id.to_owned(),
            status,
            format: crate::formats::CHAIN_MARK,
            trace: None,
            payload: Vec::new(),
        }
    }

    /// The znode data: the JSON document, then, for a payload, `\n` and the payload as is (a
    /// compact JSON document holds no line break). Cannot fail for this plain struct.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut bytes = serde_json::to_vec(self).unwrap_or_default();
        if !self.payload.is_empty() {
            bytes.push(b'\n');
            bytes.extend_from_slice(&self.payload);
        }
        bytes
    }

    /// Parses a mark read from ZooKeeper (untrusted: log it with its path and skip it).
    ///
    /// # Errors
    /// Not a chain mark.
    pub fn parse(data: &[u8]) -> Result<Self, serde_json::Error> {
        let (document, payload) = match data.iter().position(|&b| b == b'\n') {
            Some(end) => (&data[..end], &data[end + 1..]),
            None => (data, &[][..]),
        };
        let mut mark: Self = serde_json::from_slice(document)?;
        mark.payload = payload.to_vec();
        Ok(mark)
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

    #[test]
    fn a_submitted_parents_mark_carries_its_payload_bytes_as_they_are() {
        let payload = b"line one\nline two\n\x00\xff".to_vec();
        let mark = ChainMark {
            payload: payload.clone(),
            ..ChainMark::of("order-1-42", RunStatus::Succeeded)
        };
        let bytes = mark.to_bytes();
        assert!(bytes.starts_with(b"{\"run_id\":\"order-1-42\",\"status\":\"succeeded\"}\n"));
        let read = ChainMark::parse(&bytes).expect("a mark");
        assert_eq!(read.payload, payload);
        assert_eq!(read, mark);
    }
}
