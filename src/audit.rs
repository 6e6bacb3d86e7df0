//! The audit trail's entry (issue 34): every operator action — a pause, a resume, a trigger, a
//! release, a backfill, a cancel, reschedule or retry of a submission — recorded once with
//! when, what, its arguments, who, where from and how it ended. Submits are not: programs make
//! thousands a second, and each keeps its own record.
//!
//! Owns: the entry's format and who acts (`Actor`; how each part of it is known: `actor`).
//! Must not: act on anything, decide what an entry says (`command`'s door does, in one place),
//! or store it (`ledger::audit` writes, reads and prunes the trail).

pub mod actor;

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

pub use actor::Who;

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
    /// Who, in one line ([`Who::shown`]): the account and host of a command line (and the
    /// login behind `sudo`), or an HTTP token's name and its peer.
    pub by: String,
    /// Where from: `cli`, `http`, `console`, `api` (a program using the Rust API).
    pub from: String,
    /// How `by` is known, part by part, with the ZooKeeper identity of the session that wrote
    /// it; absent in entries written before these were kept.
    #[serde(default, skip_serializing_if = "Who::is_empty")]
    pub who: Who,
    /// How it ended: `ok`, or what refused it.
    pub result: String,
}

impl AuditEntry {
    /// `action` done now by `actor`, naming `job` and `args`, and how it `ended`.
    pub fn now(
        action: &str,
        job: Option<&crate::ids::JobName>,
        args: Vec<(&str, String)>,
        actor: &Actor,
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
            by: actor.by.clone(),
            from: actor.from.clone(),
            who: actor.who.clone(),
            result: ended.map_or_else(crate::report::error_chain, |()| "ok".to_owned()),
        }
    }
}

/// Who acts and through what, for the entries a client records.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Actor {
    /// [`Who::shown`]: what a pause's `by` and a trigger's `requested_by` say.
    pub by: String,
    pub from: String,
    pub who: Who,
}

impl Actor {
    /// `who`, acting from `from`.
    pub fn new(who: Who, from: &str) -> Self {
        Self {
            by: who.shown(),
            from: from.to_owned(),
            who,
        }
    }

    /// The account running this command line, as the kernel knows it.
    pub fn cli() -> Self {
        Self::new(Who::this_process(), "cli")
    }

    /// A program using the library API, as the account running it.
    pub fn api() -> Self {
        Self::new(Who::this_process(), "api")
    }

    /// This actor, writing through a session the servers know as `zookeeper` (where it had
    /// not been said already).
    #[must_use]
    pub fn through_session(mut self, zookeeper: Option<&str>) -> Self {
        if self.who.zookeeper.is_none() {
            self.who.zookeeper = zookeeper.map(str::to_owned);
        }
        self
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
            who: Who::default(),
            result: "ok".into(),
        };
        let data = serde_json::to_vec(&entry).unwrap();
        assert!(!String::from_utf8_lossy(&data).contains("format"));
        assert_eq!(serde_json::from_slice::<AuditEntry>(&data).unwrap(), entry);
    }
}
