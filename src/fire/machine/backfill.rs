//! Backfill requests (issue 20): past ticks an operator asked to run (`zkcron backfill`), put
//! in their job's backlog in order and claimed through the one claim path, so a tick that has a
//! record by then (it ran meanwhile) is refused by ZooKeeper and not run.
//!
//! Owns: which requests this machine has seen and not taken, handing over the ones for its
//! jobs, and their ticks as backlog items; the machine puts them in the backlog and asks for
//! each taken request to be removed.
//! Must not: check a tick against the ledger itself (the claim does), or start anything but
//! through the backlog, which runs a job's items one after another.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};

use super::protocol::{FireReason, Item};
use crate::control::BackfillRequest;
use crate::ids::JobName;

/// The requests seen under `control/backfill`, by node name, not yet taken.
#[derive(Debug, Default)]
pub(super) struct Backfills {
    waiting: BTreeMap<String, BackfillRequest>,
}

impl Backfills {
    /// The requests waiting now (the driver's watch on `control/`).
    pub(super) fn read(&mut self, requests: Vec<(String, BackfillRequest)>) {
        self.waiting = requests.into_iter().collect();
    }

    /// Takes every request but those for jobs `elsewhere` (another group's to take).
    pub(super) fn take(
        &mut self,
        elsewhere: impl Fn(&JobName) -> bool,
    ) -> Vec<(String, BackfillRequest)> {
        let (theirs, mine) = std::mem::take(&mut self.waiting)
            .into_iter()
            .partition(|(_, request)| elsewhere(&request.job));
        self.waiting = theirs;
        mine.into_iter().collect()
    }
}

/// A request's ticks as its job's backlog items, in the order asked.
pub(super) fn items(request: &BackfillRequest) -> impl Iterator<Item = Item> + '_ {
    request
        .ticks
        .iter()
        .filter_map(|ms| DateTime::<Utc>::from_timestamp_millis(*ms))
        .map(|tick| Item {
            tick,
            reason: FireReason::Backfill {
                with_children: request.with_children,
            },
            again: None,
            submission: None,
            parents: Vec::new(),
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(job: &str, ticks: &[i64]) -> BackfillRequest {
        BackfillRequest {
            with_children: false,
            job: JobName::new(job),
            ticks: ticks.to_vec(),
            by: "alice".to_owned(),
            at_unix_ms: 0,
        }
    }

    #[test]
    fn another_groups_requests_stay_until_that_group_takes_them_and_each_is_taken_once() {
        let mut backfills = Backfills::default();
        backfills.read(vec![
            ("b".to_owned(), request("theirs", &[1_000])),
            ("a".to_owned(), request("mine", &[2_000])),
            ("c".to_owned(), request("unknown", &[3_000])),
        ]);
        let theirs = |job: &JobName| job.as_str() == "theirs";
        let taken: Vec<String> = backfills.take(theirs).into_iter().map(|(n, _)| n).collect();
        assert_eq!(
            taken,
            ["a", "c"],
            "in name order; a job no group fires is taken too"
        );
        assert!(backfills.take(theirs).is_empty(), "taken once");
        let later: Vec<String> = backfills
            .take(|_| false)
            .into_iter()
            .map(|(n, _)| n)
            .collect();
        assert_eq!(later, ["b"], "kept for its own group");
    }

    #[test]
    fn a_requests_ticks_become_backfill_items_in_the_order_asked() {
        let items: Vec<Item> = items(&request("mine", &[1_000, 61_000])).collect();
        let ticks: Vec<i64> = items.iter().map(|i| i.tick.timestamp_millis()).collect();
        assert_eq!(ticks, [1_000, 61_000]);
        assert!(
            items
                .iter()
                .all(|i| matches!(i.reason, FireReason::Backfill { .. }) && i.again.is_none())
        );
    }
}
