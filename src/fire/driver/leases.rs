//! The leases of cluster-wide limits held by this node's runs (issue 19): waited for when the
//! fire machine asks, given back when it says the run will not start (a wait is given up) or
//! when the run ends.
//!
//! Owns: which leases each run holds or waits for, and the requests that take and give them
//! back.
//! Must not: decide how long a run waits (the fire machine gives the wait up at its deadline).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::config::LimitConfig;
use crate::fire::machine::{ClaimId, ClaimInput, Input};
use crate::ids::NodeId;
use crate::layout::LedgerPaths;
use crate::ledger::Ledger;
use crate::ledger::limits::{self, Lease, LeaseHolder, LimitError};
use crate::metrics::Metrics;
use crate::report::error_chain;

/// Per run: the leases held (each with its limit's name), or the wait still going on.
#[derive(Debug)]
enum RunLeases {
    Waiting(CancellationToken),
    Held(Ledger, Vec<(String, Lease)>),
}

/// The leases of this node's runs, by run id; counted in the metrics as they come and go.
#[derive(Debug, Clone)]
pub(super) struct Leases {
    runs: Arc<Mutex<HashMap<String, RunLeases>>>,
    metrics: Arc<Metrics>,
}

/// What taking needs besides the run.
pub(super) struct Taker<'a> {
    pub client: Ledger,
    pub paths: &'a LedgerPaths,
    pub me: &'a NodeId,
    pub tasks: &'a TaskTracker,
    pub answers: &'a mpsc::UnboundedSender<Input>,
}

impl Leases {
    pub(super) fn new(metrics: Arc<Metrics>) -> Self {
        Self {
            runs: Arc::default(),
            metrics,
        }
    }

    /// Waits for a lease of each of `limits` for `run_id`, in name order, then answers
    /// [`ClaimInput::LeasesTaken`]; a failed one gives back those taken and answers with its name. A
    /// wait given up ([`Leases::give_back`]) gives back those taken and answers nothing.
    pub(super) fn take(
        &self,
        taker: Taker<'_>,
        id: ClaimId,
        run_id: String,
        limits: Vec<LimitConfig>,
    ) {
        let cancel = CancellationToken::new();
        self.lock()
            .insert(run_id.clone(), RunLeases::Waiting(cancel.clone()));
        let runs = Arc::clone(&self.runs);
        let holder = LeaseHolder {
            run_id: run_id.clone(),
            node_id: taker.me.clone(),
        };
        let dirs: Vec<(String, String, usize)> = limits
            .into_iter()
            .map(|limit| (taker.paths.limit(&limit.name), limit.name, limit.max))
            .collect();
        let (client, answers) = (taker.client, taker.answers.clone());
        let metrics = Arc::clone(&self.metrics);
        taker.tasks.spawn(async move {
            let mut taken = Vec::new();
            let mut failed = None;
            for (dir, name, max) in dirs {
                metrics.limit_waiting(&name, 1);
                let acquired = limits::acquire(&client, &dir, max, &holder, &cancel).await;
                metrics.limit_waiting(&name, -1);
                match acquired {
                    Ok(lease) => {
                        metrics.limit_held(&name, 1);
                        taken.push((name, lease));
                    }
                    Err(LimitError::GivenUp { .. }) => {
                        give_back_all(&client, &taken, &metrics).await;
                        return;
                    }
                    Err(err) => {
                        tracing::warn!(limit = name, error = %error_chain(&err), "lease not taken");
                        failed = Some(name);
                        break;
                    }
                }
            }
            // Given up just as the last lease came: it goes back like a failure, unanswered.
            let still_wanted = {
                let mut runs = runs.lock().unwrap_or_else(PoisonError::into_inner);
                let wanted = matches!(runs.get(&run_id), Some(RunLeases::Waiting(_)));
                if wanted && failed.is_none() {
                    runs.insert(
                        run_id.clone(),
                        RunLeases::Held(client.clone(), taken.clone()),
                    );
                } else {
                    runs.remove(&run_id);
                }
                wanted
            };
            if failed.is_some() || !still_wanted {
                give_back_all(&client, &taken, &metrics).await;
                if !still_wanted {
                    return;
                }
            }
            let _ = answers.send(Input::Claims(ClaimInput::LeasesTaken {
                id,
                run_id,
                failed,
            }));
        });
    }

    /// Gives back what `run_id` holds, or gives its wait up; nothing if it has none.
    pub(super) fn give_back(&self, run_id: &str, tasks: &TaskTracker) {
        match self.lock().remove(run_id) {
            Some(RunLeases::Waiting(cancel)) => cancel.cancel(),
            Some(RunLeases::Held(client, leases)) => {
                let metrics = Arc::clone(&self.metrics);
                tasks.spawn(async move { give_back_all(&client, &leases, &metrics).await });
            }
            None => {}
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, RunLeases>> {
        self.runs.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Gives `leases` back; one whose delete fails goes with this node's session all the same.
async fn give_back_all(client: &Ledger, leases: &[(String, Lease)], metrics: &Metrics) {
    for (limit, lease) in leases {
        if let Err(err) = limits::give_back(client, lease).await {
            tracing::warn!(limit, error = %error_chain(&err), "lease not given back; it goes with this node's session");
        }
        metrics.limit_held(limit, -1);
    }
}
