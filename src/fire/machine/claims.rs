//! The claims out or held, by id; per job how many of them will start a run, and which
//! submissions they are for: the fire machine's bookkeeping, pure like the machine itself.
//!
//! The count is what `max_running` bounds (with the runs alive and the retries waiting, which
//! `runs` counts). It is kept as claims come and go, not counted again for every input: with a
//! thousand runs open (a backlog of due submissions) counting took two thirds of the machine's
//! CPU (issue 23's profile). A claim's kind (record-only or not) never changes while it is held
//! here, so the count taken at insert is the one given back at removal.

use std::collections::{BTreeMap, HashMap, HashSet};

use super::{ClaimId, Pending, PendingState};
use crate::ids::JobName;

#[derive(Debug, Default)]
pub(super) struct Claims {
    by_id: BTreeMap<ClaimId, Pending>,
    /// Per job, the claims held here that start a run (not record-only).
    starting: HashMap<JobName, usize>,
    /// The submissions these claims are for: a scan finds each due one once more per second.
    submissions: HashSet<String>,
}

fn starts_a_run(pending: &Pending) -> bool {
    !matches!(pending.state, PendingState::RecordOnly)
}

impl Claims {
    pub fn insert(&mut self, id: ClaimId, pending: Pending) {
        if let Some(submission) = &pending.submission {
            self.submissions.insert(submission.id.clone());
        }
        if starts_a_run(&pending) {
            *self
                .starting
                .entry(pending.config.spec.name.clone())
                .or_default() += 1;
        }
        if let Some(old) = self.by_id.insert(id, pending) {
            self.forget(&old);
        }
    }

    pub fn remove(&mut self, id: &ClaimId) -> Option<Pending> {
        let pending = self.by_id.remove(id)?;
        self.forget(&pending);
        Some(pending)
    }

    fn forget(&mut self, pending: &Pending) {
        if let Some(submission) = &pending.submission {
            self.submissions.remove(&submission.id);
        }
        if !starts_a_run(pending) {
            return;
        }
        let job = &pending.config.spec.name;
        if let Some(count) = self.starting.get_mut(job) {
            *count = count.saturating_sub(1);
            if *count == 0 {
                self.starting.remove(job);
            }
        }
    }

    /// A claim of submission `id` is held here.
    pub fn holds_submission(&self, id: &str) -> bool {
        self.submissions.contains(id)
    }

    /// The claims of `job` held here that start a run.
    pub fn starting_of(&self, job: &JobName) -> usize {
        self.starting.get(job).copied().unwrap_or(0)
    }

    pub fn get(&self, id: &ClaimId) -> Option<&Pending> {
        self.by_id.get(id)
    }

    /// A held claim, to change its state. Its kind must stay what it was: a record-only claim
    /// stays record-only, another never becomes one (see the module's doc).
    pub fn get_mut(&mut self, id: &ClaimId) -> Option<&mut Pending> {
        self.by_id.get_mut(id)
    }

    /// Every held claim, to change its state; the same rule as [`Claims::get_mut`].
    pub fn values_mut(&mut self) -> impl Iterator<Item = &mut Pending> + '_ {
        self.by_id.values_mut()
    }

    pub fn keys(&self) -> impl Iterator<Item = &ClaimId> + '_ {
        self.by_id.keys()
    }

    pub fn values(&self) -> impl Iterator<Item = &Pending> + '_ {
        self.by_id.values()
    }

    pub fn iter(&self) -> impl Iterator<Item = (&ClaimId, &Pending)> + '_ {
        self.by_id.iter()
    }

    /// The count kept against one made afresh: they differ only if a claim changed kind while
    /// held (the tests check after every input).
    #[cfg(test)]
    pub fn counts_agree(&self) -> bool {
        let mut fresh: HashMap<JobName, usize> = HashMap::new();
        for pending in self.by_id.values().filter(|p| starts_a_run(p)) {
            *fresh.entry(pending.config.spec.name.clone()).or_default() += 1;
        }
        let ids: HashSet<String> = self
            .by_id
            .values()
            .filter_map(|p| p.submission.as_ref().map(|s| s.id.clone()))
            .collect();
        fresh == self.starting && ids == self.submissions
    }
}
