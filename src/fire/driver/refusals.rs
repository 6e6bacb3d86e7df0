//! The alarm while ZooKeeper refuses this node's claims and records (issue 53): a quota on the
//! lock root exceeded (`zookeeper.enforceQuota`), an ACL that lets it read but not create.
//! Nothing runs meanwhile, and the ticks are recorded `missed` once writes are taken again
//! (the fire machine's `unrecorded`); the operator must learn it at once, and what to do.
//!
//! Owns: that alarm — its log lines and `zkcron_writes_refused`. Must not: decide anything
//! about the runs or retry anything.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::ledger::StandingRefusal;
use crate::metrics::Metrics;

/// What the alarm says while writes are refused (with the fix beside it).
const REFUSED: &str = "ZooKeeper refuses this node's claims and records: nothing runs \
    until it takes them again, and the ticks are then recorded missed";
/// What it says once they are taken again.
const TAKEN_AGAIN: &str = "ZooKeeper takes this node's writes again";

/// While refusals go on, said again this often, with how many.
const SAY_AGAIN_AFTER: Duration = Duration::from_secs(60);

/// See the module docs. Cloning shares the alarm.
#[derive(Clone)]
pub(super) struct Refusals {
    metrics: Arc<Metrics>,
    state: Arc<Mutex<State>>,
}

#[derive(Default)]
struct State {
    /// Since when writes are refused, and how many so far; `None` while they are taken.
    since: Option<(Instant, u64)>,
    last_said: Option<Instant>,
}

impl Refusals {
    pub fn new(metrics: Arc<Metrics>) -> Self {
        Self {
            metrics,
            state: Arc::default(),
        }
    }

    /// A claim or record on `path` was refused with `why` (`error`: the ensemble's answer).
    pub fn refused(&self, path: &str, why: StandingRefusal, error: &str) {
        let Ok(mut state) = self.state.lock() else {
            return;
        };
        let now = Instant::now();
        let (since, count) = state.since.get_or_insert((now, 0));
        *count += 1;
        let (since, count) = (*since, *count);
        let say = state
            .last_said
            .is_none_or(|said| now.duration_since(said) >= SAY_AGAIN_AFTER);
        if !say {
            return;
        }
        state.last_said = Some(now);
        drop(state);
        self.metrics.writes_refused(true);
        let fix = match why {
            StandingRefusal::Quota => {
                "a ZooKeeper quota on the lock root is exceeded: `listquota <root>` in zkCli.sh \
                 shows it; raise it (`setquota`) or remove it (`delquota`)"
            }
            StandingRefusal::Acl => {
                "this node's ZooKeeper identity may read but not write there: check \
                 `zookeeper.auth` and the nodes' ACL (`getAcl` in zkCli.sh)"
            }
        };
        tracing::error!(
            path,
            error,
            fix,
            refused = count,
            for_s = since.elapsed().as_secs(),
            "{REFUSED}"
        );
    }

    /// A claim or record was taken: writes go through (again).
    pub fn taken(&self) {
        let Ok(mut state) = self.state.lock() else {
            return;
        };
        let Some((since, count)) = state.since.take() else {
            return;
        };
        state.last_said = None;
        drop(state);
        self.metrics.writes_refused(false);
        tracing::info!(
            refused = count,
            for_s = since.elapsed().as_secs(),
            "{TAKEN_AGAIN}"
        );
    }
}
