//! A run's key: what made it due — one of its job's instants, or a submission — on which node
//! for a broadcast, and which attempt. Every producer's run is named by one, and the claim path
//! keeps at most one claim out per run (`fire::machine::claims`).
//!
//! Owns: the key, and how a record names it.
//! Must not: know how a run is claimed, started or stored.

use crate::delayed::submission::SubmissionId;
use crate::ids::{JobName, NodeId};

use super::RunRecord;

/// What made a run due.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Due {
    /// One of the job's instants (ms since the epoch): a tick, its catch-up, its backfill or a
    /// chained run after it.
    Tick(i64),
    /// A submission, whatever its due time (a reschedule moves it, not the run).
    Submission(SubmissionId),
}

/// One run of a job through its lifecycle (due → claimed → started → ended, or missed,
/// skipped, cancelled), and which attempt of it.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RunKey {
    pub job: JobName,
    pub due: Due,
    /// The member whose run of a broadcast tick it is; `None` for every other run.
    pub node: Option<NodeId>,
    pub attempt: u32,
}

impl RunKey {
    /// The key `record` is the record of.
    pub fn of(record: &RunRecord) -> Self {
        let due = match &record.submission_id {
            Some(id) => Due::Submission(id.clone()),
            None => Due::Tick(record.scheduled_unix_ms),
        };
        Self {
            job: record.job.clone(),
            due,
            node: record.broadcast.then(|| record.node_id.clone()),
            attempt: record.attempt,
        }
    }

    /// The run, whichever its attempt: an attempt is claimed only once the one before it has
    /// ended, so at most one attempt of a run has a claim out.
    #[must_use]
    pub fn run(&self) -> Self {
        Self {
            attempt: 0,
            ..self.clone()
        }
    }

    /// The run of submission `id` of `job`, whichever its attempt.
    pub fn of_submission(job: &JobName, id: &SubmissionId) -> Self {
        Self {
            job: job.clone(),
            due: Due::Submission(id.clone()),
            node: None,
            attempt: 0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ids::FencingToken;

    #[test]
    fn a_record_names_its_run_and_its_attempt() {
        let node = NodeId::new("n1");
        let mut record = RunRecord::claimed(
            &JobName::new("j"),
            60_000,
            (&node, "10.0.0.1"),
            FencingToken(3),
            0,
        );
        record.attempt = 2;
        let tick = RunKey::of(&record);
        assert_eq!(tick.due, Due::Tick(60_000));
        assert_eq!((tick.node.clone(), tick.attempt), (None, 2));
        assert_eq!(tick.run().attempt, 0);

        record.broadcast = true;
        assert_eq!(RunKey::of(&record).node, Some(node));

        let id = SubmissionId::parse("order-7").expect("a valid id");
        record.broadcast = false;
        record.submission_id = Some(id.clone());
        let submitted = RunKey::of(&record);
        assert_eq!(submitted.due, Due::Submission(id.clone()));
        assert_eq!(
            submitted.run(),
            RunKey::of_submission(&JobName::new("j"), &id)
        );
    }
}
