//! The run record stored at `<root>/<lock>/runs/<job>/<tick_ms>` (docs/ARCHITECTURE.md
//! "ZooKeeper layout"; its node names are `layout`'s).
//!
//! Owns: the record's JSON format, its status lifecycle, and parsing untrusted record data: a
//! record of a newer format than ours (`formats`) is never handed out as one that may be
//! rewritten, and the fields we do not know ride along in every rewrite.
//! Must not: do I/O.

use serde::{Deserialize, Serialize};

use super::RunTrace;
use crate::delayed::submission::SubmissionId;
use crate::ids::{FencingToken, JobName, NodeId};

/// Why a broadcast tick is recorded `missed` for a node (and the metrics' `broadcast_node`).
pub const MISSED_BY_A_MEMBER: &str = "a live member that did not claim the tick in time";

/// Where a run is in its life. `Claimed` → `Running` → one of the ends; `Interrupted` and
/// `Skipped` are written by the node that finds them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RunStatus {
    /// The tick is ours; the process has not started yet.
    Claimed,
    Running,
    Succeeded,
    Failed,
    TimedOut,
    Cancelled,
    /// Its owner died or lost its session while it was claimed or running.
    Interrupted,
    /// Not run, for the reason in `error` (e.g. a run of the job was still alive).
    Skipped,
    /// A gap nobody fired: this record stands for `missed_ticks` ticks from
    /// `missed_from_unix_ms` to its own tick, for the reason in `error` (no owner, ZooKeeper
    /// unreachable, the `misfire` policy, beyond `starting_deadline`).
    Missed,
}

impl RunStatus {
    /// As records spell it (`timed_out`).
    pub fn as_str(self) -> &'static str {
        match self {
            RunStatus::Claimed => "claimed",
            RunStatus::Running => "running",
            RunStatus::Succeeded => "succeeded",
            RunStatus::Failed => "failed",
            RunStatus::TimedOut => "timed_out",
            RunStatus::Cancelled => "cancelled",
            RunStatus::Interrupted => "interrupted",
            RunStatus::Skipped => "skipped",
            RunStatus::Missed => "missed",
        }
    }

    /// The status records spell `text`; `None` for any other text.
    pub fn parse(text: &str) -> Option<Self> {
        [
            RunStatus::Claimed,
            RunStatus::Running,
            RunStatus::Succeeded,
            RunStatus::Failed,
            RunStatus::TimedOut,
            RunStatus::Cancelled,
            RunStatus::Interrupted,
            RunStatus::Skipped,
            RunStatus::Missed,
        ]
        .into_iter()
        .find(|status| status.as_str() == text)
    }

    /// True once nothing will change the record any more (except a retry or rerun).
    pub fn is_final(self) -> bool {
        !matches!(self, RunStatus::Claimed | RunStatus::Running)
    }
}

/// One parent's run that a chained run follows: named in the child's record, so that `history`
/// shows where a child came from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ParentRun {
    pub job: JobName,
    pub run_id: String,
    /// How it ended.
    pub status: RunStatus,
    /// Its trace, where telemetry is on: the child's run span links to its span (issue 52).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "super::trace::lenient"
    )]
    pub trace: Option<RunTrace>,
}

/// One tick of one job, as recorded in ZooKeeper.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunRecord {
    pub job: JobName,
    pub run_id: String,
    pub node_id: NodeId,
    pub ip: String,
    pub fencing_token: FencingToken,
    pub scheduled_unix_ms: i64,
    pub claimed_unix_ms: i64,
    #[serde(default)]
    pub started_unix_ms: Option<i64>,
    #[serde(default)]
    pub finished_unix_ms: Option<i64>,
    pub status: RunStatus,
    #[serde(default)]
    pub exit_code: Option<i32>,
    #[serde(default)]
    pub signal: Option<i32>,
    pub attempt: u32,
    /// Why it could not start, was skipped, missed, or was interrupted.
    #[serde(default)]
    pub error: Option<String>,
    /// A `missed` record: the first tick of the gap it stands for (its own tick is the last).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub missed_from_unix_ms: Option<i64>,
    /// A `missed` record, or a calendar's `skipped` one: how many ticks the gap holds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub missed_ticks: Option<u64>,
    /// A `skipped` record of a calendar, named by the first tick of the run of ticks it skips:
    /// the last of them (issue 36).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub skipped_through_unix_ms: Option<i64>,
    /// The run of a delayed submission: its id (`scheduled_unix_ms` is its due time).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub submission_id: Option<SubmissionId>,
    /// A manual trigger (`zkcron trigger`): who asked.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requested_by: Option<String>,
    /// A failed or timed-out run that will be tried again: when its next attempt is due. Written
    /// in the same record as the failure, so the promise lives in the ledger and the next owner
    /// keeps it (issue 24).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_at_unix_ms: Option<i64>,
    /// An HTTP target's answer: its status code (issue 23).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub http_status: Option<u16>,
    /// What the run said: the last `OUTPUT_KEPT` bytes of a process's stdout and stderr, or the
    /// start of a failed delivery's response body (at most `RESPONSE_KEPT` bytes); which runs
    /// keep it is the job's `keep_output`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output: Option<String>,
    /// A past tick run by `zkcron backfill`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub backfill: bool,
    /// A backfilled run that makes its children's runs (`zkcron backfill --with-children`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub with_children: bool,
    /// One node's run of a broadcast job's tick (`broadcast`): its record is named by the tick
    /// and the node (`<tick>~<node>`), claimed under a check of the node's member znode, not of
    /// the epoch (issue 36).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub broadcast: bool,
    /// A chained run (`after`): the parents' runs it follows, at their shared instant.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub parents: Vec<ParentRun>,
    /// The submission's pending marker names its job (`<id>~<job>`, lock groups): a withdrawn
    /// claim puts that marker back, not `<id>`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub marker_names_job: bool,
    /// A submission's run claimed without an `open/` marker (the ledger's format 2): while it is
    /// open — not final, or promising a retry — its record alone says so, and a next owner finds
    /// it among the job's records. Without it, an open run has its marker (format 1).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub open_by_record: bool,
    /// The run's trace, chosen at its first claim where telemetry is on and kept by every
    /// attempt (issue 52).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "super::trace::lenient"
    )]
    pub trace: Option<RunTrace>,
    /// What the run's span links to, as W3C `traceparent`s: its submitter's context (issue 52).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub links: Vec<String>,
    /// The rules it was written by (`formats::RUN_RECORD`); absent in the stored data when 1.
    #[serde(
        default = "crate::formats::first",
        skip_serializing_if = "crate::formats::is_first"
    )]
    pub format: u32,
    /// Fields a newer zkcron added within this format, kept as they are through our rewrites.
    #[serde(flatten)]
    pub unknown: serde_json::Map<String, serde_json::Value>,
}

/// Why stored data is not a run record this zkcron may rewrite.
#[derive(Debug, thiserror::Error)]
pub enum RecordError {
    /// Not a run record: foreign or corrupted data.
    #[error("not a run record: {0}")]
    Unreadable(#[from] serde_json::Error),
    /// Written by a newer zkcron in a format this one does not know: left as it is. `readable`
    /// is what could be read of it, for display only.
    #[error(
        "a run record of format {format}, newer than this zkcron's {}",
        crate::formats::RUN_RECORD
    )]
    Newer {
        format: u32,
        readable: Option<Box<RunRecord>>,
    },
}

impl RunRecord {
    /// A fresh claim of `job`'s tick at `scheduled_unix_ms` by `node` under `token`: attempt 1.
    pub fn claimed(
        job: &JobName,
        scheduled_unix_ms: i64,
        node: (&NodeId, &str),
        token: FencingToken,
        now_unix_ms: i64,
    ) -> Self {
        Self {
            job: job.clone(),
            run_id: format!("{job}-{scheduled_unix_ms}"),
            node_id: node.0.clone(),
            ip: node.1.to_owned(),
            fencing_token: token,
            scheduled_unix_ms,
            claimed_unix_ms: now_unix_ms,
            started_unix_ms: None,
            finished_unix_ms: None,
            status: RunStatus::Claimed,
            exit_code: None,
            signal: None,
            attempt: 1,
            error: None,
            missed_from_unix_ms: None,
            missed_ticks: None,
            skipped_through_unix_ms: None,
            submission_id: None,
            requested_by: None,
            retry_at_unix_ms: None,
            http_status: None,
            output: None,
            backfill: false,
            with_children: false,
            broadcast: false,
            parents: Vec::new(),
            marker_names_job: false,
            open_by_record: false,
            trace: None,
            links: Vec::new(),
            format: crate::formats::RUN_RECORD,
            unknown: serde_json::Map::new(),
        }
    }

    /// The pending marker of this run's submission, named as it was written; `None` for a
    /// tick's run.
    pub fn marker(&self, paths: &crate::layout::DelayedPaths) -> Option<String> {
        let id = self.submission_id.as_ref()?;
        Some(paths.pending(self.scheduled_unix_ms, id, self.marker_job()))
    }

    /// The last line its kept output has that is not blank, for a one-line summary.
    pub fn last_output_line(&self) -> Option<&str> {
        self.output
            .as_deref()?
            .lines()
            .rev()
            .find(|line| !line.trim().is_empty())
    }

    /// The job, when its submission's marker names it.
    pub fn marker_job(&self) -> Option<&JobName> {
        self.marker_names_job.then_some(&self.job)
    }

    /// The same run, claimed again for its next attempt (a retry, or the rerun of an interrupted
    /// run): same job, tick and run id; our node and token; nothing of the last attempt's end.
    /// A record still `claimed` never started (a submission's is `running` before its process
    /// starts): it is taken over as the same attempt. What the run is stays: a backfill stays a
    /// backfill, and fields a newer zkcron added stay as they were.
    pub fn next_attempt(
        &self,
        node: (&NodeId, &str),
        token: FencingToken,
        now_unix_ms: i64,
    ) -> Self {
        let started = self.status != RunStatus::Claimed;
        Self {
            attempt: self.attempt + u32::from(started),
            run_id: self.run_id.clone(),
            submission_id: self.submission_id.clone(),
            requested_by: self.requested_by.clone(),
            marker_names_job: self.marker_names_job,
            // Kept open the way it was claimed: a next owner looks for it there.
            open_by_record: self.open_by_record,
            backfill: self.backfill,
            // A chained run's retry follows the same parents, and a backfill's retry still makes
            // its children's runs.
            with_children: self.with_children,
            parents: self.parents.clone(),
            broadcast: self.broadcast,
            // Every attempt continues the run's trace.
            trace: self.trace,
            links: self.links.clone(),
            unknown: self.unknown.clone(),
            ..Self::claimed(&self.job, self.scheduled_unix_ms, node, token, now_unix_ms)
        }
    }

    /// A fresh claim of submission `id` of `job`, due at `due_unix_ms`: attempt 1, run id
    /// `<job>-<due_ms>-<id>` (its record's name, so it never equals a tick's run id).
    pub fn claimed_submission(
        job: &JobName,
        due_unix_ms: i64,
        id: &SubmissionId,
        node: (&NodeId, &str),
        token: FencingToken,
        now_unix_ms: i64,
    ) -> Self {
        Self {
            run_id: format!(
                "{job}-{}",
                crate::layout::submission_node_name(due_unix_ms, id)
            ),
            submission_id: Some(id.clone()),
            ..Self::claimed(job, due_unix_ms, node, token, now_unix_ms)
        }
    }

    /// Submission `id`'s record once it is cancelled before it started, in either store.
    pub fn cancelled_before_start(
        submission: &crate::delayed::submission::Submission,
        id: &SubmissionId,
        now_unix_ms: i64,
    ) -> Self {
        Self {
            status: RunStatus::Cancelled,
            attempt: 0,
            finished_unix_ms: Some(now_unix_ms),
            error: Some("cancelled before it started".to_owned()),
            ..Self::claimed_submission(
                &submission.job,
                submission.due_unix_ms,
                id,
                (&NodeId::new("-"), ""),
                FencingToken(0),
                now_unix_ms,
            )
        }
    }

    /// Where this record is stored: a tick's or a submission's record.
    pub fn path(&self, paths: &crate::layout::LedgerPaths) -> String {
        match &self.submission_id {
            Some(id) => paths.submission_record(&self.job, self.scheduled_unix_ms, id),
            None if self.broadcast => {
                paths.broadcast_record(&self.job, self.scheduled_unix_ms, &self.node_id)
            }
            None => paths.record(&self.job, self.scheduled_unix_ms),
        }
    }

    /// `node`'s claim of broadcast job `job`'s tick at `scheduled_unix_ms`: its run id names
    /// the node, since every member runs the tick.
    pub fn claimed_broadcast(
        job: &JobName,
        scheduled_unix_ms: i64,
        node: (&NodeId, &str),
        token: FencingToken,
        now_unix_ms: i64,
    ) -> Self {
        Self {
            run_id: format!(
                "{job}-{}",
                crate::layout::broadcast_node_name(scheduled_unix_ms, node.0)
            ),
            broadcast: true,
            ..Self::claimed(job, scheduled_unix_ms, node, token, now_unix_ms)
        }
    }

    /// The owner's sweep's record of a broadcast tick that live member `node`, a member since
    /// before it, did not claim in time: `missed`, under the owner's `token`.
    pub fn missed_by_member(
        job: &JobName,
        scheduled_unix_ms: i64,
        node: (&NodeId, &str),
        token: FencingToken,
        now_unix_ms: i64,
    ) -> Self {
        Self {
            status: RunStatus::Missed,
            finished_unix_ms: Some(now_unix_ms),
            error: Some(MISSED_BY_A_MEMBER.to_owned()),
            ..Self::claimed_broadcast(job, scheduled_unix_ms, node, token, now_unix_ms)
        }
    }

    /// Serialises for the znode; cannot fail for this plain struct.
    pub fn to_bytes(&self) -> Vec<u8> {
        serde_json::to_vec(self).unwrap_or_default()
    }

    /// Parses a record read from ZooKeeper, to act on: rewrite it, resume it, prune it.
    ///
    /// # Errors
    /// The data is not a record we write (foreign or corrupted): log it with its path and skip
    /// it. Or it was written in a newer format ([`RecordError::Newer`]): leave it as it is.
    pub fn parse(data: &[u8]) -> Result<Self, RecordError> {
        match serde_json::from_slice::<Self>(data) {
            Ok(record) if record.format <= crate::formats::RUN_RECORD => Ok(record),
            Ok(record) => Err(RecordError::Newer {
                format: record.format,
                readable: Some(Box::new(record)),
            }),
            Err(err) => match crate::formats::format_of(data) {
                Some(format) if format > crate::formats::RUN_RECORD => Err(RecordError::Newer {
                    format,
                    readable: None,
                }),
                _ => Err(RecordError::Unreadable(err)),
            },
        }
    }

    /// Parses a record to show it (`status`, `history`, the console): one of a newer format as
    /// far as it reads.
    ///
    /// # Errors
    /// As [`RunRecord::parse`], but a newer record that reads is `Ok`.
    pub fn parse_to_show(data: &[u8]) -> Result<Self, RecordError> {
        match Self::parse(data) {
            Err(RecordError::Newer {
                readable: Some(record),
                ..
            }) => Ok(*record),
            parsed => parsed,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record() -> RunRecord {
        RunRecord::claimed(
            &JobName::new("nightly"),
            1000,
            (&NodeId::new("n1"), "10.0.0.1"),
            FencingToken(3),
            750,
        )
    }

    /// Issue 52: every attempt continues the run's trace, whoever claims it; a trace that is
    /// not one is dropped, not the record.
    #[test]
    fn every_attempt_keeps_the_runs_trace_and_a_bad_one_costs_only_itself() {
        let mut first = record();
        first.status = RunStatus::Failed;
        first.trace = Some(RunTrace::first(9, &first.run_id));
        let next = first.next_attempt((&NodeId::new("n2"), "10.0.0.2"), FencingToken(4), 2000);
        assert_eq!((next.attempt, next.trace), (2, first.trace));
        let stored = serde_json::to_string(&next).expect("serialised");
        assert_eq!(
            RunRecord::parse(stored.as_bytes()).ok().map(|r| r.trace),
            Some(next.trace)
        );
        let bad = stored.replace(&next.trace.map(|t| t.stored()).unwrap_or_default(), "nope");
        let read = RunRecord::parse(bad.as_bytes()).expect("still a record");
        assert_eq!((read.trace, read.attempt), (None, 2));
        assert!(
            !serde_json::to_string(&record())
                .expect("serialised")
                .contains("trace")
        );
    }

    #[test]
    fn a_next_attempt_keeps_the_run_and_forgets_the_last_end() {
        let failed = RunRecord {
            status: RunStatus::Failed,
            exit_code: Some(3),
            error: Some("x".into()),
            open_by_record: true,
            ..record()
        };
        let next = failed.next_attempt((&NodeId::new("n2"), "10.0.0.2"), FencingToken(4), 2000);
        assert_eq!(
            (next.run_id.as_str(), next.scheduled_unix_ms, next.attempt),
            ("nightly-1000", 1000, 2)
        );
        assert_eq!(
            (next.node_id.as_str(), next.fencing_token, next.status),
            ("n2", FencingToken(4), RunStatus::Claimed)
        );
        assert_eq!(
            (next.exit_code, next.error, next.claimed_unix_ms),
            (None, None, 2000)
        );
        assert!(next.open_by_record, "kept open the way it was claimed");
    }

    #[test]
    fn records_round_trip_and_status_is_snake_case() {
        let rec = record();
        let bytes = rec.to_bytes();
        assert_eq!(RunRecord::parse(&bytes).unwrap(), rec);
        let text = String::from_utf8(bytes).unwrap();
        assert!(text.contains("\"status\":\"claimed\""), "{text}");
        let timed_out = RunRecord {
            status: RunStatus::TimedOut,
            ..record()
        };
        assert!(
            String::from_utf8(timed_out.to_bytes())
                .unwrap()
                .contains("\"timed_out\"")
        );
    }

    #[test]
    fn fields_a_newer_zkcron_added_ride_along_in_a_next_attempt_and_a_backfill_stays_one() {
        let mut stored: serde_json::Value = serde_json::from_slice(
            &RunRecord {
                status: RunStatus::Failed,
                backfill: true,
                with_children: true,
                parents: vec![ParentRun {
                    job: JobName::new("extract"),
                    run_id: "extract-1000".to_owned(),
                    status: RunStatus::Succeeded,
                    trace: None,
                }],
                ..record()
            }
            .to_bytes(),
        )
        .unwrap();
        stored["parent_run_id"] = "extract-1000".into();
        stored["calendar"] = serde_json::json!({"name": "holidays"});
        let stored = RunRecord::parse(&serde_json::to_vec(&stored).unwrap()).unwrap();
        let next = stored.next_attempt((&NodeId::new("n2"), "10.0.0.2"), FencingToken(4), 2000);
        assert!(next.backfill, "a retried backfill tick is still a backfill");
        assert!(next.with_children, "and still makes its children's runs");
        assert_eq!(
            next.parents, stored.parents,
            "a chained run's retry names its parents"
        );
        assert_eq!(next.parents.len(), 1);
        let written: serde_json::Value = serde_json::from_slice(&next.to_bytes()).unwrap();
        assert_eq!(written["parent_run_id"], "extract-1000");
        assert_eq!(written["calendar"]["name"], "holidays");
        assert_eq!(written["attempt"], 2);
        assert!(
            written.get("format").is_none(),
            "format 1 is written as before"
        );
    }

    #[test]
    fn a_record_of_a_newer_format_is_shown_never_handed_out_to_act_on() {
        let mut newer: serde_json::Value = serde_json::from_slice(&record().to_bytes()).unwrap();
        newer["format"] = 2.into();
        let newer = serde_json::to_vec(&newer).unwrap();
        match RunRecord::parse(&newer) {
            Err(RecordError::Newer {
                format: 2,
                readable: Some(record),
            }) => assert_eq!(record.run_id, "nightly-1000"),
            other => panic!("expected a newer, readable record: {other:?}"),
        }
        assert_eq!(RunRecord::parse_to_show(&newer).unwrap().format, 2);

        // A status this zkcron does not know: newer, and nothing of it to show.
        let unknown_status = br#"{"format":3,"job":"nightly","status":"held_by_calendar"}"#;
        assert!(matches!(
            RunRecord::parse(unknown_status),
            Err(RecordError::Newer {
                format: 3,
                readable: None
            })
        ));
        assert!(RunRecord::parse_to_show(unknown_status).is_err());
        // The same without a newer format is plain garbage.
        assert!(matches!(
            RunRecord::parse(br#"{"job":"nightly","status":"held_by_calendar"}"#),
            Err(RecordError::Unreadable(_))
        ));
    }

    #[test]
    fn foreign_data_is_refused_not_panicked_on() {
        assert!(RunRecord::parse(b"{\"job\":1}").is_err());
        assert!(RunRecord::parse(b"\xff").is_err());
    }

    #[test]
    fn only_claimed_and_running_are_open() {
        assert!(!RunStatus::Claimed.is_final() && !RunStatus::Running.is_final());
        assert!(RunStatus::Succeeded.is_final() && RunStatus::Interrupted.is_final());
    }
}
