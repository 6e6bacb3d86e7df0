//! Final run records that could not be written, written again.
//!
//! A run can end while the session is unusable (a whole ensemble paused, the client given up on
//! the session): its final record's write fails. Dropping it would leave the record `running`
//! and, when the session is taken back, its `running/<job>` guard alive for as long as the
//! session lives — every later tick of a `forbid` job skipped as "a run is alive". So the
//! record is sent again: at once when the session is connected again, otherwise after a
//! doubling backoff, a bounded number of times. Only a write that got no answer is sent again:
//! a record that someone else changed (the next owner marked the run interrupted) stays theirs.
//!
//! Owns: which final records wait to be written again, and when.
//! Must not: write anything (the machine emits `ClaimAction::WriteRecord`, the driver writes).

use std::collections::BTreeMap;

use chrono::{DateTime, TimeDelta, Utc};

use super::protocol::RecordWrite;
use crate::run::Claim;
use crate::run::RunRecord;

/// Attempts in all, the first one included: with the backoff, about 15 s of retries besides
/// the one made at every reconnect.
const MAX_ATTEMPTS: u32 = 6;
const FIRST_BACKOFF: TimeDelta = TimeDelta::milliseconds(500);

#[derive(Debug, Default)]
pub(super) struct Rewrites {
    waiting: BTreeMap<String, Rewrite>,
}

#[derive(Debug)]
struct Rewrite {
    claim: Claim,
    /// Writes sent so far.
    attempts: u32,
    /// When to send it again; `None` while a write is out.
    at: Option<DateTime<Utc>>,
}

impl Rewrites {
    /// The first write of `claim`'s final record failed.
    pub fn first_failed(&mut self, claim: Claim, now: DateTime<Utc>) {
        let run_id = claim.record.run_id.clone();
        let mut rewrite = Rewrite {
            claim,
            attempts: 1,
            at: None,
        };
        rewrite.schedule(now);
        self.waiting.insert(run_id, rewrite);
    }

    /// True if `run_id` is a record written again here: then its answer is taken.
    pub fn owns(&self, run_id: &str) -> bool {
        self.waiting.contains_key(run_id)
    }

    /// The answer to a write sent again: done, refused for good (the driver logged why), or
    /// scheduled once more, or given up. The record, once it is stored.
    pub fn answered(
        &mut self,
        run_id: &str,
        write: RecordWrite,
        now: DateTime<Utc>,
    ) -> Option<RunRecord> {
        let rewrite = self.waiting.get_mut(run_id)?;
        let path = &rewrite.claim.path;
        if write == RecordWrite::Refused {
            self.waiting.remove(run_id);
        } else if let RecordWrite::Written(_) = write {
            tracing::info!(
                path,
                attempts = rewrite.attempts,
                "final run record written after all"
            );
            return self
                .waiting
                .remove(run_id)
                .map(|rewrite| rewrite.claim.record);
        } else if rewrite.attempts >= MAX_ATTEMPTS {
            tracing::error!(
                path,
                status = ?rewrite.claim.record.status,
                attempts = rewrite.attempts,
                "final run record could not be written; it stays as last stored (the next owner marks a run left open interrupted)"
            );
            self.waiting.remove(run_id);
        } else {
            rewrite.schedule(now);
        }
        None
    }

    /// The session is connected again: everything waiting goes now.
    pub fn reconnected(&mut self, now: DateTime<Utc>) {
        for rewrite in self.waiting.values_mut() {
            if rewrite.at.is_some() {
                rewrite.at = Some(now);
            }
        }
    }

    /// The records due to be sent again, marked as out.
    pub fn due(&mut self, now: DateTime<Utc>) -> Vec<Claim> {
        let mut due = Vec::new();
        for rewrite in self.waiting.values_mut() {
            if rewrite.at.is_some_and(|at| at <= now) {
                rewrite.at = None;
                rewrite.attempts += 1;
                let mut claim = rewrite.claim.clone();
                // If an earlier write landed and only its reply was lost, the stored record is
                // this one: `ledger::update` then takes it for our own.
                claim.sent = claim.record.clone();
                due.push(claim);
            }
        }
        due
    }

    /// The wall clock stepped by `by`: each backoff lasts as long as it said.
    pub fn clock_stepped(&mut self, by: TimeDelta) {
        for at in self.waiting.values_mut().filter_map(|r| r.at.as_mut()) {
            *at += by;
        }
    }

    pub fn next_deadline(&self) -> Option<DateTime<Utc>> {
        self.waiting.values().filter_map(|rewrite| rewrite.at).min()
    }

    #[cfg(test)]
    pub fn is_empty(&self) -> bool {
        self.waiting.is_empty()
    }
}

impl Rewrite {
    fn schedule(&mut self, now: DateTime<Utc>) {
        let doublings = self.attempts.saturating_sub(1).min(10);
        self.at = Some(now + FIRST_BACKOFF * 2_i32.pow(doublings));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ids::{FencingToken, JobName, NodeId, SessionId};
    use crate::run::{RunRecord, RunStatus};

    fn claim(run_id: &str) -> Claim {
        let mut record = RunRecord::claimed(
            &JobName::new("j"),
            1000,
            (&NodeId::new("n"), "127.0.0.1"),
            FencingToken(1),
            1000,
        );
        record.run_id = run_id.to_owned();
        record.status = RunStatus::Succeeded;
        Claim {
            path: format!("/runs/j/{run_id}"),
            version: 1,
            sent: record.clone(),
            record,
            guard: Some("/running/j".into()),
            open: None,
            session: SessionId(7),
            children: Vec::new(),
            payload: None,
        }
    }

    fn at(ms: i64) -> DateTime<Utc> {
        DateTime::from_timestamp_millis(ms).expect("instant")
    }

    #[test]
    fn a_failed_final_record_is_sent_again_after_a_doubling_backoff_then_given_up() {
        let mut rewrites = Rewrites::default();
        rewrites.first_failed(claim("r1"), at(0));
        assert_eq!(rewrites.next_deadline(), Some(at(500)));
        assert!(rewrites.due(at(499)).is_empty());
        let mut now = 500;
        let mut gaps = Vec::new();
        for _ in 1..MAX_ATTEMPTS {
            let due = rewrites.due(at(now));
            assert_eq!(due.len(), 1, "due at {now}");
            assert_eq!(rewrites.next_deadline(), None, "out: nothing else due");
            rewrites.answered("r1", RecordWrite::Failed, at(now));
            let Some(next) = rewrites.next_deadline() else {
                break;
            };
            gaps.push(next.timestamp_millis() - now);
            now = next.timestamp_millis();
        }
        assert_eq!(gaps, [1000, 2000, 4000, 8000]);
        assert!(
            rewrites.is_empty(),
            "given up after {MAX_ATTEMPTS} attempts"
        );
    }

    #[test]
    fn a_reconnect_sends_at_once_and_a_success_ends_it() {
        let mut rewrites = Rewrites::default();
        rewrites.first_failed(claim("r1"), at(0));
        rewrites.reconnected(at(100));
        let due = rewrites.due(at(100));
        assert_eq!(due.len(), 1);
        assert_eq!(
            due[0].sent, due[0].record,
            "a landed earlier write is recognised"
        );
        assert!(rewrites.owns("r1"));
        rewrites.answered("r1", RecordWrite::Written(9), at(150));
        assert!(!rewrites.owns("r1"));
        assert!(rewrites.is_empty());
    }
}
