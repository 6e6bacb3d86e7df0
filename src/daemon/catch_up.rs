//! What a node does when it starts being able to fire — it acquired the lock, or ZooKeeper came
//! back after an outage: resolve runs the previous owner left open, and fire missed ticks.
//!
//! Owns: the `on_interrupted` and `misfire` policies (issue "Exactly once per tick").
//! Must not: fire on-time ticks (the fire queue does) or reach back further than a job's
//! `starting_deadline`; a brand-new job (no records) never backfills.

use std::sync::Arc;

use chrono::{DateTime, Utc};
use tokio::sync::watch;
use zookeeper_client::Client;

use super::{Firing, MISSED_AFTER};
use crate::config::{Concurrency, JobConfig, Misfire, OnInterrupted};
use crate::ids::FencingToken;
use crate::ledger::record::{RunRecord, RunStatus};
use crate::ledger::{self, ClaimError};
use crate::lock::driver::LockView;
use crate::report::error_chain;

/// How many of a job's newest records are looked at for runs left open.
const RESOLVE_WINDOW: usize = 10;

impl Firing {
    /// Resolves open runs and fires missed ticks for every enabled job. Runs as a tick task, so a
    /// stopping node waits for it before it hands the lock over.
    pub(super) async fn catch_up(self, jobs: Vec<Arc<JobConfig>>, view: watch::Receiver<LockView>) {
        let caught_at = Utc::now();
        let snapshot = view.borrow().clone();
        let (true, Some(client), Some(token)) =
            (snapshot.may_fire, snapshot.client, snapshot.token)
        else {
            return;
        };
        let names = jobs
            .iter()
            .filter(|job| job.enabled)
            .map(|job| &job.spec.name);
        if let Err(err) = ledger::ensure_parents(&client, &self.ledger, names, self.acls).await {
            tracing::warn!(error = %error_chain(&err), "cannot create the run record parents; first claims will");
        }
        for job in jobs.into_iter().filter(|job| job.enabled) {
            if self.stop_firing.is_cancelled() {
                return;
            }
            let ticks = match ledger::ticks(&client, &self.ledger, &job.spec.name).await {
                Ok(ticks) => ticks,
                Err(err) => {
                    tracing::warn!(job = %job.spec.name, error = %error_chain(&err), "catch-up: cannot list runs");
                    continue;
                }
            };
            // A brand-new job has no record: nothing was missed, nothing backfills.
            if ticks.is_empty() {
                continue;
            }
            // Progress is judged only up to the catch-up horizon: a tick this node claimed just
            // now (the one it re-fires after a handoff) must not hide the ticks missed before it.
            let horizon = (caught_at - MISSED_AFTER).timestamp_millis();
            let latest = ticks.iter().copied().filter(|&tick| tick <= horizon).max();
            for &tick in ticks.iter().rev().take(RESOLVE_WINDOW) {
                self.resolve_open_run(&client, &job, tick, token, &view)
                    .await;
            }
            if let Some(latest) = latest {
                self.fire_missed(&client, Arc::clone(&job), latest, caught_at, token, &view);
            }
        }
    }

    /// A record a previous owner left `claimed` or `running`, whose run is gone, is marked
    /// interrupted; with `on_interrupted = rerun` we start it again as its next attempt.
    async fn resolve_open_run(
        &self,
        client: &Client,
        job: &Arc<JobConfig>,
        tick: i64,
        token: FencingToken,
        view: &watch::Receiver<LockView>,
    ) {
        let path = self.ledger.record(&job.spec.name, tick);
        let Some((mut record, version)) = ledger::read_versioned(client, &path).await else {
            return;
        };
        // Ours (this token) or finished: nothing to resolve.
        if record.status.is_final()
            || record.fencing_token >= token
            || self.run_alive(client, job, &record).await
        {
            return;
        }
        let previous = record.node_id.clone();
        record.status = RunStatus::Interrupted;
        record.error = Some(format!(
            "node {previous} lost the lock before the run ended"
        ));
        let marked = client
            .set_data(&path, &record.to_bytes(), Some(version))
            .await;
        let Ok(stat) = marked else {
            tracing::warn!(
                path,
                "interrupted run not marked (the record changed meanwhile)"
            );
            return;
        };
        tracing::warn!(job = %job.spec.name, run_id = record.run_id, node = %previous, "run interrupted by the loss of its owner");
        if job.on_interrupted != OnInterrupted::Rerun {
            return;
        }
        let me = (&self.me.node_id, self.me.ip.as_str());
        let rerun = record.next_attempt(me, token, Utc::now().timestamp_millis());
        let guarded = job.concurrency == Concurrency::Forbid;
        match ledger::reclaim(
            client,
            &self.ledger,
            rerun,
            stat.version,
            guarded,
            self.acls,
        )
        .await
        {
            Ok(claim) => {
                tracing::info!(job = %job.spec.name, run_id = claim.record.run_id, attempt = claim.record.attempt, "rerunning the interrupted run");
                self.start_run(Arc::clone(job), claim, client.clone(), view.clone(), true);
            }
            Err(err) => {
                tracing::warn!(path, error = %error_chain(&err), "interrupted run not rerun")
            }
        }
    }

    /// Whether an open record's run may still be alive: its guard names it, it runs here, or (for
    /// jobs without a guard) its node is still a live member that may be finishing it.
    async fn run_alive(&self, client: &Client, job: &JobConfig, record: &RunRecord) -> bool {
        if self.running.slots().contains_key(&record.run_id) {
            return true;
        }
        let holder = ledger::guard_holder(client, &self.ledger, &job.spec.name).await;
        if holder.as_deref() == Some(record.run_id.as_str()) {
            return true;
        }
        if job.concurrency == Concurrency::Forbid || record.node_id == self.me.node_id {
            return false; // the guard is the proof; our own earlier process is gone
        }
        let member = format!("{}/{}", self.members, record.node_id);
        matches!(client.check_stat(&member).await, Ok(Some(_)))
    }

    /// Ticks after the job's latest record, within its `starting_deadline`, per its `misfire`.
    fn fire_missed(
        &self,
        client: &Client,
        job: Arc<JobConfig>,
        latest_ms: i64,
        now: DateTime<Utc>,
        token: FencingToken,
        view: &watch::Receiver<LockView>,
    ) {
        let Ok(deadline) = chrono::Duration::from_std(job.starting_deadline) else {
            return;
        };
        let Some(latest) = DateTime::from_timestamp_millis(latest_ms) else {
            return;
        };
        // On-time ticks of the last moment are the fire queue's (a handoff re-fires them).
        let until = now - MISSED_AFTER;
        let mut missed = Vec::new();
        let mut cursor = latest.max(now - deadline);
        while let Some(next) = job
            .schedule
            .next_after(cursor)
            .filter(|next| *next <= until)
        {
            missed.push(next);
            cursor = next;
        }
        if missed.is_empty() {
            return;
        }
        let chosen = match job.misfire {
            Misfire::Skip => {
                tracing::info!(job = %job.spec.name, missed = missed.len(), "missed ticks skipped (misfire = skip)");
                return;
            }
            Misfire::RunOnce => missed.split_off(missed.len() - 1),
            Misfire::RunAll => missed,
        };
        tracing::info!(job = %job.spec.name, ticks = chosen.len(), policy = ?job.misfire, "catching up missed ticks");
        let firing = self.clone();
        let client = client.clone();
        let view = view.clone();
        self.ticks.spawn(async move {
            // In order, one after another: a catch-up never overlaps itself.
            for tick in chosen {
                if firing.stop_firing.is_cancelled() || !view.borrow().may_fire {
                    return;
                }
                let record = firing.new_record(&job.spec.name, tick, token);
                let guarded = job.concurrency == Concurrency::Forbid;
                match ledger::claim(&client, &firing.ledger, record, guarded, firing.acls).await {
                    Ok(claim) => {
                        let ended = firing.start_run(Arc::clone(&job), claim, client.clone(), view.clone(), true);
                        // A stopping node does not wait for the run (it is stopped with the others).
                        tokio::select! {
                            () = firing.stop_firing.cancelled() => return,
                            () = ended.cancelled() => {}
                        }
                    }
                    Err(ClaimError::AlreadyClaimed { .. }) => {}
                    Err(err) => {
                        tracing::warn!(job = %job.spec.name, %tick, error = %error_chain(&err), "missed tick not caught up");
                    }
                }
            }
        });
    }
}
