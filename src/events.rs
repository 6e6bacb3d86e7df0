//! What happened in a lock group, as events a person or a tool follows live (`zkcron events`,
//! `GET /v1/events`): a run claimed, started, ended, missed or skipped; the owner changed; a
//! member joined or left; a job paused or resumed; and a gap where events were not kept.
//!
//! Every event is read off ZooKeeper, or off the PostgreSQL store's change feed for the runs of
//! submissions kept there, never told by the node that caused it: its id is the zxid of the
//! change (valid on any node, ordered as the ensemble ordered the changes), with the store's
//! position beside it where the queue is kept there (`cursor`), and a run's event says what its
//! record says (for a tick, "claimed" and "started" are one write).
//!
//! Owns: the events' shape, how a run record or a change of the owner, the members or the
//! pauses reads as one, a follower's cursor (`cursor`), and the journal a node keeps of them
//! (`journal`).
//! Must not: read ZooKeeper (`events::hub` does, through the ledger) or answer a request.

pub mod client;
pub mod cursor;
pub mod hub;
pub mod journal;
mod order;

use serde::{Deserialize, Serialize};

use self::cursor::{Cursor, StoreMark};
use crate::run::{RunRecord, RunStatus};

/// What an event says happened.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EventKind {
    /// A run's record was written claimed, not yet started (a submission's before its instant).
    RunClaimed,
    /// A run's record says it is running: a tick's claim and start are one write.
    RunStarted,
    /// A run ended: succeeded, failed, timed out, cancelled or interrupted (`status`).
    RunEnded,
    /// A gap nobody fired is recorded (`detail`: why; the record stands for its ticks).
    RunMissed,
    /// A tick was not run, for the reason in `detail`.
    RunSkipped,
    /// Another node owns the lock, or none does (`node`: the new owner, if any).
    OwnerChanged,
    MemberJoined,
    MemberLeft,
    JobPaused,
    JobResumed,
    /// A member's clock check judged its clock anew (`detail`): off the fleet's, corrected to
    /// the servers', or agreeing again.
    ClockVerdict,
    /// A member reloaded its schedule (`detail`: what changed).
    ReloadApplied,
    /// A member refused its schedule file and runs the one it had (`detail`: why).
    ReloadRefused,
    /// Events after the follower's cursor were not kept by the node serving them (it started
    /// following after it, or kept too few): runs' events were read back from their records,
    /// the others of the range are lost (`detail`).
    Gap,
}

impl EventKind {
    /// As the stream and the JSON spell it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::RunClaimed => "run_claimed",
            Self::RunStarted => "run_started",
            Self::RunEnded => "run_ended",
            Self::RunMissed => "run_missed",
            Self::RunSkipped => "run_skipped",
            Self::OwnerChanged => "owner_changed",
            Self::MemberJoined => "member_joined",
            Self::MemberLeft => "member_left",
            Self::JobPaused => "job_paused",
            Self::JobResumed => "job_resumed",
            Self::ClockVerdict => "clock_verdict",
            Self::ReloadApplied => "reload_applied",
            Self::ReloadRefused => "reload_refused",
            Self::Gap => "gap",
        }
    }

    /// A run's event, kept for good in its record: it can be read back after a restart.
    pub fn of_a_run(self) -> bool {
        matches!(
            self,
            Self::RunClaimed
                | Self::RunStarted
                | Self::RunEnded
                | Self::RunMissed
                | Self::RunSkipped
        )
    }

    fn of_status(status: RunStatus) -> Self {
        match status {
            RunStatus::Claimed => Self::RunClaimed,
            RunStatus::Running => Self::RunStarted,
            RunStatus::Missed => Self::RunMissed,
            RunStatus::Skipped => Self::RunSkipped,
            RunStatus::Succeeded
            | RunStatus::Failed
            | RunStatus::TimedOut
            | RunStatus::Cancelled
            | RunStatus::Interrupted => Self::RunEnded,
        }
    }
}

/// One event.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Event {
    /// The zxid of the change; for a change of a run kept in the PostgreSQL store, the newest
    /// zxid the node had told when it told it.
    pub id: i64,
    /// Where the delayed queue is kept in PostgreSQL: the store's newest change told, this one
    /// or one before it. With `id`, the cursor a follower resumes from ([`Event::cursor`]).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        serialize_with = "cursor::mark_as_text",
        deserialize_with = "cursor::mark_from_text"
    )]
    pub store_mark: Option<StoreMark>,
    pub kind: EventKind,
    /// When it happened, by the servers' clock (the change's `mtime`), in Unix ms.
    pub at_unix_ms: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_id: Option<String>,
    /// The node the event is about: the run's, the new owner, the member.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
    /// A run's status as its record says it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<RunStatus>,
    /// A run's instant (its tick, or a submission's due time), in Unix ms.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scheduled_unix_ms: Option<i64>,
    /// The fencing token it ran (or was recorded) under.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attempt: Option<u32>,
    /// Why: a skipped or missed run's reason, an error, what a gap lost.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
}

impl Event {
    /// An event about no run, with nothing but its kind, id and time.
    pub fn bare(kind: EventKind, id: i64, at_unix_ms: i64) -> Self {
        Self {
            id,
            store_mark: None,
            kind,
            at_unix_ms,
            job: None,
            run_id: None,
            node: None,
            status: None,
            scheduled_unix_ms: None,
            token: None,
            attempt: None,
            detail: None,
        }
    }

    /// What `record`, as written by the change `zxid` at `mtime_ms`, says happened.
    pub fn of_record(record: &RunRecord, zxid: i64, mtime_ms: i64) -> Self {
        Self {
            job: Some(record.job.to_string()),
            run_id: Some(record.run_id.clone()),
            node: Some(record.node_id.to_string()),
            status: Some(record.status),
            scheduled_unix_ms: Some(record.scheduled_unix_ms),
            token: Some(i64::from(record.fencing_token.0)),
            attempt: Some(record.attempt),
            detail: record.error.clone(),
            ..Self::bare(EventKind::of_status(record.status), zxid, mtime_ms)
        }
    }

    /// What a run kept in the PostgreSQL store says after the change the feed read: its
    /// status's event, at the time of its newest step (by the clock of the node that wrote it).
    pub fn of_stored_run(record: &RunRecord) -> Self {
        let at = record
            .finished_unix_ms
            .or(record.started_unix_ms)
            .unwrap_or(record.claimed_unix_ms);
        Self::of_record(record, 0, at)
    }

    /// Where a follower stands once it has this event.
    pub fn cursor(&self) -> Cursor {
        Cursor {
            zxid: self.id,
            store: self.store_mark.clone(),
        }
    }

    /// The gap after `after` (the follower's cursor), up to `kept_from` (where this node's
    /// journal keeps events from, or the cursor itself when it came from another node).
    pub fn gap(after: &Cursor, kept_from: &Cursor, at_unix_ms: i64) -> Self {
        Self {
            detail: Some(format!(
                "events after {after} were not kept on the node serving them (it keeps what it \
                 saw since {kept_from}): the runs' events come from their records, the others \
                 of the range are lost"
            )),
            store_mark: kept_from.store.clone(),
            ..Self::bare(EventKind::Gap, kept_from.zxid, at_unix_ms)
        }
    }

    /// What tells one record from another among runs' events: a broadcast's run has a record
    /// per node.
    pub fn record_key(&self) -> String {
        let part = |part: &Option<String>| part.clone().unwrap_or_default();
        format!(
            "{}/{}/{}",
            part(&self.job),
            part(&self.run_id),
            part(&self.node)
        )
    }

    /// One line for a person: `time kind job run node status detail`.
    pub fn line(&self) -> String {
        let at = chrono::DateTime::from_timestamp_millis(self.at_unix_ms).map_or_else(
            || self.at_unix_ms.to_string(),
            |at| at.to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
        );
        let mut line = format!("{at} {:<13}", self.kind.as_str());
        for part in [&self.job, &self.run_id, &self.node].into_iter().flatten() {
            line.push(' ');
            line.push_str(part);
        }
        if let Some(status) = self.status {
            line.push(' ');
            line.push_str(status.as_str());
        }
        if let Some(token) = self.token {
            line.push_str(&format!(" token={token}"));
        }
        if let Some(detail) = &self.detail {
            line.push_str(": ");
            line.push_str(detail);
        }
        line
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_records_status_reads_as_its_event() {
        assert_eq!(
            EventKind::of_status(RunStatus::Running),
            EventKind::RunStarted
        );
        assert_eq!(
            EventKind::of_status(RunStatus::Interrupted),
            EventKind::RunEnded
        );
        assert_eq!(
            EventKind::of_status(RunStatus::Skipped),
            EventKind::RunSkipped
        );
        assert!(EventKind::RunMissed.of_a_run());
        assert!(!EventKind::OwnerChanged.of_a_run());
        let event = Event::bare(EventKind::MemberLeft, 7, 1_000);
        let json = serde_json::to_string(&event).unwrap_or_default();
        assert_eq!(json, r#"{"id":7,"kind":"member_left","at_unix_ms":1000}"#);
    }
}
