//! The fire machine's housekeeping clocks: when each job's old records are pruned (once a tenth
//! of its `history` has been recorded since the last prune, and at most once per [`PRUNE_EVERY`],
//! however many runs end meanwhile), and when a job whose catch-up listing failed is listed
//! again.
//!
//! Owns: the last prune, the records made since and the prune put off per job, with what it keeps
//! ([`Retention`]); the relist times.
//! Must not: decide whether this node may prune or list (the router asks only while it fires
//! and is not stopping), or do I/O.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use chrono::{DateTime, Utc};

use super::protocol::Action;
use crate::config::JobConfig;
use crate::ids::JobName;
use crate::layout::Keep;

/// A job's old records are pruned at most this often (`history`).
const PRUNE_EVERY: Duration = Duration::from_millis(500);
/// A failed catch-up listing is tried again after this long.
pub(super) const RELIST_AFTER: Duration = Duration::from_secs(5);

/// What a job keeps of its finished runs: its newest `history` records, and each pruned
/// submission's id for `dedup_window` after its run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Retention {
    keep: usize,
    remember: Duration,
}

impl Retention {
    pub fn of(config: &JobConfig) -> Self {
        Self {
            keep: config.history,
            remember: config.dedup_window,
        }
    }
}

/// Records of a job made (runs ended, ticks recorded skipped or missed) before its records are
/// pruned again: a tenth of its `history`, at least one. Its records then stand at most a tenth
/// over `history`, and a job keeping the default 100 lists them once every ten runs, not at
/// each (a listing a run, for a job firing every second, was a fifth of what its owner asked
/// ZooKeeper).
fn records_per_prune(keep: usize) -> usize {
    (keep / 10).max(1)
}

fn prune_every() -> chrono::Duration {
    chrono::Duration::from_std(PRUNE_EVERY).unwrap_or_default()
}

#[derive(Debug, Default)]
pub(super) struct Housekeeping {
    /// Each job's prunes so far.
    pruned: HashMap<JobName, Pruned>,
    /// Prunes put off until [`PRUNE_EVERY`] has passed: when, and how many records to keep.
    prune_later: BTreeMap<JobName, (DateTime<Utc>, Retention)>,
    /// Jobs whose catch-up listing failed, and when to list them again: what a dead owner left
    /// open (a claimed submission it never started, a run to mark interrupted) must not wait
    /// for the next change of the lock.
    relist_at: BTreeMap<JobName, DateTime<Utc>>,
}

/// A job's prunes so far.
#[derive(Debug)]
struct Pruned {
    /// When its old records were last pruned.
    at: Option<DateTime<Utc>>,
    /// Its records made since.
    recorded_since: usize,
}

impl Housekeeping {
    /// A record of `job` was made: prunes its old records once [`records_per_prune`] were
    /// made since the last prune, now or once [`PRUNE_EVERY`] has passed since it: one listing
    /// and batched deletes however many runs end meanwhile.
    pub fn prune(
        &mut self,
        job: &JobName,
        retention: Retention,
        now: DateTime<Utc>,
        out: &mut Vec<Action>,
    ) {
        // A job not pruned yet by this node is pruned at its first record: what an earlier
        // owner left unpruned is not known here.
        let pruned = self.pruned.entry(job.clone()).or_insert(Pruned {
            at: None,
            recorded_since: records_per_prune(retention.keep) - 1,
        });
        pruned.recorded_since += 1;
        self.prune_when_due(job, retention, now, out);
    }

    /// Prunes `job` if enough of its records were made since the last prune and its period is over;
    /// puts it off to the end of the period otherwise.
    fn prune_when_due(
        &mut self,
        job: &JobName,
        retention: Retention,
        now: DateTime<Utc>,
        out: &mut Vec<Action>,
    ) {
        let Some(pruned) = self.pruned.get_mut(job) else {
            return;
        };
        if pruned.recorded_since < records_per_prune(retention.keep) {
            return;
        }
        match pruned.at {
            Some(last) if now - last < prune_every() => {
                self.prune_later
                    .insert(job.clone(), (last + prune_every(), retention));
            }
            _ => {
                *pruned = Pruned {
                    at: Some(now),
                    recorded_since: 0,
                };
                self.prune_later.remove(job);
                out.push(Action::Prune {
                    job: job.clone(),
                    keep: Keep::Records(retention.keep),
                    remember: retention.remember,
                });
            }
        }
    }

    /// The prunes put off whose time has come.
    pub fn prunes_due(&mut self, now: DateTime<Utc>, out: &mut Vec<Action>) {
        let due: Vec<(JobName, Retention)> = self
            .prune_later
            .iter()
            .filter(|(_, (at, _))| *at <= now)
            .map(|(job, (_, retention))| (job.clone(), *retention))
            .collect();
        for (job, retention) in due {
            self.prune_when_due(&job, retention, now, out);
        }
    }

    /// `job`'s listing failed: listed again after [`RELIST_AFTER`].
    pub fn relist_later(&mut self, job: &JobName, now: DateTime<Utc>) {
        let again = chrono::Duration::from_std(RELIST_AFTER).unwrap_or_default();
        self.relist_at.insert(job.clone(), now + again);
    }

    /// `job`'s listing failed and it waits to be listed again.
    pub fn relist_pending(&self, job: &JobName) -> bool {
        self.relist_at.contains_key(job)
    }

    /// The jobs whose wait to be listed again is over, taken out.
    pub fn relists_due(&mut self, now: DateTime<Utc>) -> Vec<JobName> {
        let due: Vec<JobName> = self
            .relist_at
            .iter()
            .filter(|(_, at)| **at <= now)
            .map(|(job, _)| job.clone())
            .collect();
        for job in &due {
            self.relist_at.remove(job);
        }
        due
    }

    /// A new acquisition lists every job anyway.
    pub fn forget_relists(&mut self) {
        self.relist_at.clear();
    }

    /// Stopping: the next owner prunes and lists.
    pub fn stop(&mut self) {
        self.prune_later.clear();
        self.relist_at.clear();
    }

    pub fn next_deadline(&self) -> Option<DateTime<Utc>> {
        let prunes = self.prune_later.values().map(|(at, _)| *at);
        prunes.chain(self.relist_at.values().copied()).min()
    }

    /// The wall clock stepped by `by`: the waits keep their length. The last prunes move too:
    /// left behind a step back, they would put every prune off by the step's length.
    pub fn clock_stepped(&mut self, by: chrono::Duration) {
        for at in self
            .pruned
            .values_mut()
            .filter_map(|pruned| pruned.at.as_mut())
        {
            *at += by;
        }
        for (at, _) in self.prune_later.values_mut() {
            *at += by;
        }
        for at in self.relist_at.values_mut() {
            *at += by;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(ms: i64) -> DateTime<Utc> {
        DateTime::from_timestamp_millis(ms).expect("in range")
    }

    const KEEP: Retention = Retention {
        keep: 3,
        remember: Duration::from_secs(60),
    };

    #[test]
    fn prunes_of_a_job_come_at_most_once_per_period_and_the_last_one_waits_for_it() {
        let (mut house, job, mut out) = (Housekeeping::default(), JobName::new("a"), Vec::new());
        house.prune(&job, KEEP, at(1_000), &mut out);
        house.prune(&job, KEEP, at(1_100), &mut out);
        house.prune(&job, KEEP, at(1_200), &mut out);
        assert_eq!(out.len(), 1, "one prune, the others put off: {out:?}");
        assert_eq!(house.next_deadline(), Some(at(1_500)));
        house.prunes_due(at(1_499), &mut out);
        assert_eq!(out.len(), 1);
        house.clock_stepped(chrono::Duration::milliseconds(-1_000));
        house.prunes_due(at(500), &mut out);
        assert_eq!(out.len(), 2, "its wait kept its length across the step");
        assert_eq!(house.next_deadline(), None);
    }

    #[test]
    fn a_job_keeping_a_hundred_records_is_pruned_at_its_first_record_then_once_every_ten() {
        let (mut house, job, mut out) = (Housekeeping::default(), JobName::new("a"), Vec::new());
        let keep = Retention { keep: 100, ..KEEP };
        house.prune(&job, keep, at(0), &mut out);
        assert_eq!(
            out,
            vec![Action::Prune {
                job: job.clone(),
                keep: Keep::Records(100),
                remember: KEEP.remember,
            }],
            "the first record prunes: what an earlier owner left is not known"
        );
        for second in 1..=9 {
            house.prune(&job, keep, at(second * 1_000), &mut out);
        }
        assert_eq!(out.len(), 1, "nine records more: none pruned");
        assert_eq!(house.next_deadline(), None, "and none put off");
        house.prune(&job, keep, at(10_000), &mut out);
        assert_eq!(out.len(), 2, "the tenth prunes");
        for second in 11..=19 {
            house.prune(&job, keep, at(second * 1_000), &mut out);
        }
        assert_eq!(out.len(), 2, "counted again from the prune");
        house.prune(&job, keep, at(20_000), &mut out);
        assert_eq!(out.len(), 3);
    }

    #[test]
    fn a_failed_listing_is_listed_again_after_its_wait_unless_forgotten() {
        let (mut house, job) = (Housekeeping::default(), JobName::new("a"));
        house.relist_later(&job, at(0));
        let wait = i64::try_from(RELIST_AFTER.as_millis()).expect("small");
        assert_eq!(house.relists_due(at(wait - 1)), Vec::<JobName>::new());
        assert_eq!(house.relists_due(at(wait)), vec![job.clone()]);
        assert_eq!(
            house.relists_due(at(wait)),
            Vec::<JobName>::new(),
            "taken out"
        );
        house.relist_later(&job, at(0));
        house.forget_relists();
        assert_eq!(house.next_deadline(), None);
    }
}
