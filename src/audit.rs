//! The audit trail's entry (issue 34): every operator action — a pause, a resume, a trigger, a
//! release, a backfill, a cancel, reschedule or retry of a submission — recorded once with
//! when, what, its arguments, who, where from and how it ended. Submits are not: programs make
//! thousands a second, and each keeps its own record.
//!
//! Owns: the entry's format and who acts (`Actor`).
//! Must not: act on anything, decide what an entry says (`command`'s door does, in one place),
//! or store it (`ledger::audit` writes, reads and prunes the trail).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// One operator action.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuditEntry {
    /// The rules it was written by (`formats`); absent when 1.
    #[serde(
        default = "crate::formats::first",
        skip_serializing_if = "crate::formats::is_first"
    )]
    pub format: u32,
    pub at_unix_ms: i64,
    /// What was asked: `pause`, `resume`, `trigger`, `release`, `backfill`, `cancel`,
    /// `reschedule`, `retry`.
    pub action: String,
    /// The job it named, if it named one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job: Option<String>,
    /// What else it named: a submission id, a lock group, a reason, ticks.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub args: BTreeMap<String, String>,
    /// Who: an HTTP token's name (and its peer), or the Unix user and host of a CLI.
    pub by: String,
    /// Where from: `cli`, `http`, `api` (a program using the Rust API).
    pub from: String,
    /// How it ended: `ok`, or what refused it.
    pub result: String,
}

impl AuditEntry {
    /// `action` done now by `actor`, naming `job` and `args`, and how it `ended`.
    pub fn now(
        action: &str,
        job: Option<&crate::ids::JobName>,
        args: Vec<(&str, String)>,
        actor: (&str, &str),
        ended: Result<(), &dyn std::error::Error>,
    ) -> Self {
        Self {
            format: crate::formats::first(),
            at_unix_ms: chrono::Utc::now().timestamp_millis(),
            action: action.to_owned(),
            job: job.map(ToString::to_string),
            args: args
                .into_iter()
                .map(|(key, value)| (key.to_owned(), value))
                .collect(),
            by: actor.0.to_owned(),
            from: actor.1.to_owned(),
            result: ended.map_or_else(crate::report::error_chain, |()| "ok".to_owned()),
        }
    }
}

/// Who acts and through what, for the entries a client records.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Actor {
    pub by: String,
    pub from: String,
}

impl Actor {
    /// The Unix user and host running this command line.
    pub fn cli() -> Self {
        Self {
            by: crate::control::requester(),
            from: "cli".to_owned(),
        }
    }

    /// A program using the library API, as the Unix user and host running it.
    pub fn api() -> Self {
        Self {
            by: crate::control::requester(),
            from: "api".to_owned(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_entry_of_format_1_is_written_without_its_format_and_reads_back() {
        let entry = AuditEntry {
            format: 1,
            at_unix_ms: 1_795_000_000_000,
            action: "pause".into(),
            job: Some("nightly".into()),
            args: BTreeMap::from([("reason".into(), "db migration".into())]),
            by: "alice@ops-1".into(),
            from: "cli".into(),
            result: "ok".into(),
        };
        let data = serde_json::to_vec(&entry).unwrap();
        assert!(!String::from_utf8_lossy(&data).contains("format"));
        assert_eq!(serde_json::from_slice::<AuditEntry>(&data).unwrap(), entry);
    }
}
