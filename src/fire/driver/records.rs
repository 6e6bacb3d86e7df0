//! The fire driver's ledger concern: claims, the records of runs, withdrawals, guards, prunes.
//!
//! Owns: sending the machine's claims (and reading back one whose answer was lost), writing
//! and rewriting records, giving back unstarted claims and their guards, pruning; each answer
//! back to the machine as its input.
//! Must not: decide anything (the machine does), or talk to ZooKeeper but through `ledger`.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::Utc;

use super::formats::FleetFormat;
use super::refusals::Refusals;
use super::session::{REQUEST_LIMIT, Session, bounded};
use crate::fire::machine::{
    CatchUpInput, ClaimId, ClaimInput, ClaimRefused, Input, RecordWrite, TickClaim,
};
use crate::ids::{JobName, SessionId};
use crate::layout::{Keep, LedgerPaths};
use crate::ledger::{self, ClaimError, ClaimPlan};
use crate::report::error_chain;
use crate::run::{self, RunRecord};
use crate::view::NodeView;

/// Per job with a prune out, the prune asked for since (`keep`, `dedup_window`), if any.
pub(super) type Pruning = Arc<Mutex<HashMap<JobName, Option<(Keep, Duration)>>>>;

/// A job's prune out, until dropped (done, or its task dropped with the session).
struct PruneOut {
    job: JobName,
    pruning: Pruning,
    /// Its entry was removed by [`PruneOut::next`].
    done: bool,
}

impl PruneOut {
    /// `None` while a prune of `job` is out already: this one is owed, and goes after it.
    fn of(pruning: &Pruning, job: &JobName, asked: (Keep, Duration)) -> Option<Self> {
        let mut out = pruning.lock().ok()?;
        if let Some(owed) = out.get_mut(job) {
            *owed = Some(asked);
            return None;
        }
        out.insert(job.clone(), None);
        Some(Self {
            job: job.clone(),
            pruning: Arc::clone(pruning),
            done: false,
        })
    }

    /// The prune asked for while this one was out, if any; the job stays out.
    fn owed(&mut self) -> Option<(Keep, Duration)> {
        self.pruning.lock().ok()?.get_mut(&self.job)?.take()
    }

    /// The prune asked for while this one was out, if any (the job stays out for it); else the
    /// job is no longer out, in the same step.
    fn next(&mut self) -> Option<(Keep, Duration)> {
        let mut out = self.pruning.lock().ok()?;
        let owed = out.get_mut(&self.job).and_then(Option::take);
        if owed.is_none() {
            out.remove(&self.job);
            self.done = true;
        }
        owed
    }
}

impl Drop for PruneOut {
    fn drop(&mut self) {
        if !self.done {
            if let Ok(mut out) = self.pruning.lock() {
                out.remove(&self.job);
            }
        }
    }
}

/// `claimed`'s answer, with what it says of ZooKeeper taking this node's writes told to
/// `refusals`.
async fn told_to(
    refusals: &Refusals,
    claimed: impl std::future::Future<Output = Result<run::Claim, ClaimError>>,
) -> Result<run::Claim, ClaimError> {
    let answer = claimed.await;
    match &answer {
        Ok(_) => refusals.taken(),
        Err(err @ ClaimError::Zk { path, .. }) => {
            if let Some(why) = err.standing_refusal() {
                refusals.refused(path, why, &error_chain(err));
            }
        }
        Err(_) => {}
    }
    answer
}

/// What the machine makes of a claim's definite refusal.
pub(super) fn refusal(err: &ClaimError) -> ClaimRefused {
    match err {
        ClaimError::NotOwner { .. } => ClaimRefused::NotOwner,
        ClaimError::AlreadyClaimed { .. } => ClaimRefused::AlreadyClaimed,
        ClaimError::RunAlive { .. } => ClaimRefused::RunAlive,
        err @ (ClaimError::Zk { .. } | ClaimError::Store { .. }) => {
            ClaimRefused::Failed(error_chain(err))
        }
    }
}

/// A claim sent from `session` that got no answer (`why`) may have been applied: its record,
/// its `running/<job>` guard and all. Answered as not claimed, an applied claim would leave the
/// record `claimed` and the guard held by our living session, and every later tick of a
/// `forbid` job skipped as "alive on another node" until the session ends. So the outcome is
/// read back, as often as it takes while the session lives (a read waits for the session to
/// connect again); a claim that was applied comes back as claimed, and the machine starts it,
/// or records why it is too late and releases its guard.
///
/// The session is followed through `view`, not through the client the claim went out on: a
/// client that gave up on its session is replaced by one that took the session back, with the
/// guard (issue 31, defect 3).
/// The answer to a claim sent as `claimed` from `session`. Not dropped at a time limit: a claim
/// still queued behind other groups would go out after its read-back had found nothing. Every
/// claim gets an answer, or an error once the connection is lost or the session ends; one that
/// may have been applied without its answer coming back is read back.
pub(super) async fn settled(
    claimed: impl std::future::Future<Output = Result<run::Claim, ClaimError>>,
    plan: &ClaimPlan,
    view: tokio::sync::watch::Receiver<NodeView>,
    session: SessionId,
) -> Result<run::Claim, ClaimRefused> {
    tokio::pin!(claimed);
    let answer = match tokio::time::timeout(REQUEST_LIMIT, &mut claimed).await {
        Ok(answer) => answer,
        Err(_) => {
            let path = plan.path();
            tracing::warn!(path, limit = ?REQUEST_LIMIT, "claim not answered in time; still waiting for its answer");
            claimed.await
        }
    };
    match answer {
        Err(err) if err.unanswered() => read_back(view, plan, session, error_chain(&err)).await,
        Err(err) if plan.record_vanished(&err) => Err(ClaimRefused::Vanished),
        other => other.map_err(|err| refusal(&err)),
    }
}

async fn read_back(
    mut view: tokio::sync::watch::Receiver<NodeView>,
    plan: &ClaimPlan,
    session: SessionId,
    why: String,
) -> Result<run::Claim, ClaimRefused> {
    /// Between two reads that failed: ZooKeeper is not answering yet.
    const READ_AGAIN_AFTER: Duration = Duration::from_millis(500);
    let path = plan.path();
    tracing::warn!(
        path,
        why,
        "claim unanswered: reading its record back to learn whether it was applied"
    );
    loop {
        let current = view.borrow_and_update().client.clone();
        let client = match current {
            Some(client) if client.session() != session => {
                // The guard went with the session; a record left `claimed` is resolved by the
                // next owner's catch-up, as any run of a dead session.
                let why = format!("{why}; the session ended before the claim could be read back");
                return Err(ClaimRefused::Failed(why));
            }
            Some(client) if !client.has_ended() => client,
            // No session, or a client that gave up on ours: the lock driver takes it back or
            // opens another; the next client says which.
            _ => {
                if view.changed().await.is_err() {
                    let why = format!("{why}; stopped before the claim could be read back");
                    return Err(ClaimRefused::Failed(why));
                }
                continue;
            }
        };
        match bounded(path, plan.read_back(&client, session)).await {
            Some(Ok(Some(claim))) => {
                tracing::info!(path, "the unanswered claim was applied: the tick is ours");
                return Ok(claim);
            }
            Some(Ok(None)) => return Err(ClaimRefused::Failed(why)),
            Some(Err(err @ ClaimError::AlreadyClaimed { .. })) => return Err(refusal(&err)),
            Some(Err(err)) => {
                tracing::debug!(path, error = %error_chain(&err), "claim not read back yet");
                tokio::time::sleep(READ_AGAIN_AFTER).await;
            }
            None => {}
        }
    }
}

/// What performing the ledger's actions needs.
pub(super) struct Records {
    pub paths: LedgerPaths,
    /// Followed by a claim's read-back (see `read_back`).
    pub view: tokio::sync::watch::Sender<NodeView>,
    /// The jobs whose prune is out, with the one asked for meanwhile: a prune of a job never
    /// overlaps its last one. Under load one takes longer than the machine's half second
    /// between them, and two deleting the same records failed each other's multi-ops, which
    /// then went one record at a time.
    pub pruning: Pruning,
    /// How a submission's claimed run shows as open: the format every member reads.
    pub fleet: Arc<FleetFormat>,
    /// Told whether claims are taken or refused until an operator acts (a quota).
    pub refusals: Refusals,
    /// Where a run's span goes once this node wrote its final record, and the group's name.
    pub spans: Option<(Arc<crate::telemetry::Telemetry>, String)>,
}

impl Records {
    /// Creates these jobs' record parents, so that their first claims are quick.
    pub fn prepare_jobs(&self, s: &Session, jobs: Vec<JobName>) {
        let Some(client) = s.client.clone() else {
            return;
        };
        let paths = self.paths.clone();
        s.tasks.spawn(async move {
            if let Err(err) = ledger::ensure_parents(&client, &paths, jobs.iter()).await {
                tracing::warn!(error = %error_chain(&err), "cannot create the run record parents; first claims will");
            }
        });
    }

    /// The one claim path: every start, skip and gap record goes through here.
    pub fn claim(&self, s: &Session, claim: TickClaim) -> Option<Input> {
        let TickClaim {
            id,
            record,
            mode,
            guarded,
            ..
        } = claim;
        let (Some(client), Some(group)) = (s.client.clone(), s.group.clone()) else {
            let result = Err(ClaimRefused::Failed(Session::no_session()));
            return Some(Input::Claims(ClaimInput::Done { id, result }));
        };
        let (paths, answers) = (self.paths.clone(), s.answers.clone());
        let view = self.view.subscribe();
        let open_runs = self.fleet.open_runs();
        let refusals = self.refusals.clone();
        s.tasks.spawn(async move {
            let (job, tick) = (record.job.clone(), record.scheduled_unix_ms);
            let path = record.path(&paths);
            let plan = ClaimPlan::new(&paths, record, mode, guarded, open_runs);
            let session = client.session();
            let claimed = told_to(&refusals, group.claim(plan.clone()));
            let result = settled(claimed, &plan, view, session).await;
            let already = result == Err(ClaimRefused::AlreadyClaimed);
            let result = result.map(Box::new);
            let _ = answers.send(Input::Claims(ClaimInput::Done { id, result }));
            if already {
                // Who holds it, for the log line: after the answer, off the firing path.
                let read = tokio::time::timeout(Duration::from_secs(2), ledger::read_record(&client, &path)).await;
                let by = read.ok().flatten().map(|record| record.node_id.to_string());
                tracing::warn!(job = %job, tick, claimed_by = by.as_deref().unwrap_or("?"), "not firing: tick already claimed");
            }
        });
        None
    }

    /// Rewrites a stored record (catch-up marks a run interrupted, or closes it).
    pub fn mark(
        &self,
        s: &Session,
        record: RunRecord,
        version: i32,
        closes: bool,
    ) -> Option<Input> {
        let Some(client) = s.client.clone() else {
            let result = Err(Session::no_session());
            let record = Box::new(record);
            return Some(Input::CatchUp(CatchUpInput::Marked { record, result }));
        };
        let (paths, answers) = (self.paths.clone(), s.answers.clone());
        let token = self.view.borrow().lock.token;
        s.tasks.spawn(async move {
            let marked = bounded(
                &record.run_id,
                ledger::rewrite_run(&client, &paths, &record, version, closes, token),
            );
            let result = match marked.await {
                Some(result) => result.map_err(|err| error_chain(&err)),
                None => Err("no answer in time".into()),
            };
            let record = Box::new(record);
            let _ = answers.send(Input::CatchUp(CatchUpInput::Marked { record, result }));
        });
        None
    }

    /// Writes a run's final record (with its retry marker first, or removes it after).
    pub fn write(&self, s: &Session, claim: run::Claim) -> Option<Input> {
        let Some(group) = s.group.clone() else {
            tracing::warn!(path = claim.path, status = ?claim.record.status, "run record not updated: no zookeeper session");
            return Some(Input::Claims(ClaimInput::RecordWritten {
                run_id: claim.record.run_id,
                write: RecordWrite::Failed,
            }));
        };
        let answers = s.answers.clone();
        // A tick's retry promised, or the last of its attempts recorded: its marker is
        // written before, or removed after, the record.
        let tick_retry = claim.record.submission_id.is_none()
            && (claim.record.retry_at_unix_ms.is_some() || claim.record.attempt > 1);
        let marker = s
            .client
            .clone()
            .filter(|_| tick_retry)
            .map(|client| (client, self.paths.clone()));
        let promise = marker
            .clone()
            .filter(|_| claim.record.retry_at_unix_ms.is_some());
        let kept = marker.filter(|_| claim.record.retry_at_unix_ms.is_none());
        let marks = ledger::chains::marks_of(&self.paths, &claim);
        let spans = self.spans.clone();
        s.tasks.spawn(async move {
                let mut claim = claim;
                let path = claim.path.clone();
                // The marker first: a promise in the ledger always has its marker.
                if let Some((client, paths)) = &promise {
                    let marked = ledger::promise_retry(client, paths, &claim.record);
                    if let Some(Err(err)) = bounded(&path, marked).await {
                        tracing::warn!(path, error = %error_chain(&err), "retry marker not written: only the job's newest records show the promise");
                    }
                }
                let write = match bounded(&path, group.finish(&mut claim, marks)).await {
                    Some(Ok(())) => {
                        if let Some((client, paths)) = &kept {
                            let record = &claim.record;
                            ledger::forget_retry(client, paths, &record.job, record.scheduled_unix_ms).await;
                        }
                        // The run's last word: its span, unless a retry is promised.
                        if let Some((telemetry, group)) = spans.as_ref().filter(|_| {
                            claim.record.status.is_final() && claim.record.retry_at_unix_ms.is_none()
                        }) {
                            let fired = crate::telemetry::Fired { group };
                            telemetry.run_ended(&claim.record, &fired);
                        }
                        RecordWrite::Written(claim.version)
                    }
                    // A definite answer: logged once here, never sent again.
                    Some(Err(ledger::UpdateError::Conflict { stored, .. })) => {
                        tracing::warn!(path, ours = ?claim.record.status, stored = ?stored, "final run record not written: someone else changed the record (the next owner resolved the run); it stays theirs");
                        RecordWrite::Refused
                    }
                    Some(Err(err)) => {
                        tracing::warn!(status = ?claim.record.status, error = %error_chain(&err), "run record not updated");
                        RecordWrite::Failed
                    }
                    None => RecordWrite::Failed,
                };
                let run_id = claim.record.run_id;
                let _ = answers.send(Input::Claims(ClaimInput::RecordWritten { run_id, write }));
            });
        None
    }

    /// Gives a claimed, unstarted tick back for the handoff.
    pub fn withdraw(&self, s: &Session, id: ClaimId, claim: run::Claim) -> Option<Input> {
        let Some(client) = s.client.clone() else {
            return Some(Input::Claims(ClaimInput::Withdrawn { id }));
        };
        let (paths, answers) = (self.paths.clone(), s.answers.clone());
        s.tasks.spawn(async move {
                match bounded(&claim.path, ledger::withdraw(&client, &paths, &claim)).await {
                    Some(Ok(())) => tracing::info!(path = claim.path, "claimed tick withdrawn for the handoff"),
                    refused => {
                        if let Some(Err(err)) = refused {
                            tracing::warn!(path = claim.path, error = %error_chain(&err), "claimed tick not withdrawn; it stays for the next owner");
                        }
                        bounded(&claim.path, ledger::release_unstarted_guard(&client, &claim)).await;
                    }
                }
                let _ = answers.send(Input::Claims(ClaimInput::Withdrawn { id }));
            });
        None
    }

    /// Releases the guard of a claim that never started.
    pub fn release_guard(&self, s: &Session, claim: run::Claim) -> Option<Input> {
        let run_id = claim.record.run_id.clone();
        let Some(client) = s.client.clone() else {
            // Sent again by the machine once a session is up.
            return Some(Input::Claims(ClaimInput::GuardReleased {
                run_id,
                settled: false,
            }));
        };
        let answers = s.answers.clone();
        s.tasks.spawn(async move {
            let released = ledger::release_unstarted_guard(&client, &claim);
            let settled = bounded(&claim.path, released).await.unwrap_or(false);
            let _ = answers.send(Input::Claims(ClaimInput::GuardReleased { run_id, settled }));
        });
        None
    }

    /// Takes the guard of a run that outlives our hold of the lock.
    pub fn take_guard(&self, s: &Session, claim: run::Claim) -> Option<Input> {
        let run_id = claim.record.run_id.clone();
        let Some(client) = s.client.clone() else {
            // No session: the one that claimed the run is gone, and a guard would have gone
            // with it.
            return Some(Input::Claims(ClaimInput::GuardTaken {
                run_id,
                guard: None,
            }));
        };
        let (paths, answers) = (self.paths.clone(), s.answers.clone());
        s.tasks.spawn(async move {
            let taken = ledger::take_guard(&client, &paths, &claim);
            let guard = match bounded(&claim.path, taken).await {
                Some(Ok(guard)) => guard,
                // The create may be applied all the same, and a guard left behind would keep
                // the job from running anywhere while our session lives (issue 31): taken, as
                // far as the run's final record goes, which deletes it if it is there.
                failed => {
                    let why = match failed {
                        Some(Err(err)) => error_chain(&err),
                        _ => "no answer in time".to_owned(),
                    };
                    tracing::warn!(job = %claim.record.job, run_id, error = why, "guard of a run that outlives the lock maybe not taken: the next owner may start the job beside it");
                    Some(paths.running(&claim.record.job))
                }
            };
            let _ = answers.send(Input::Claims(ClaimInput::GuardTaken { run_id, guard }));
        });
        None
    }

    /// Prunes `job`'s records beyond what `keep` keeps.
    pub fn prune(&self, s: &Session, job: JobName, keep: Keep, remember: Duration) -> Option<()> {
        let client = s.client.clone()?;
        let Some(mut out) = PruneOut::of(&self.pruning, &job, (keep, remember)) else {
            return Some(());
        };
        let paths = self.paths.clone();
        s.tasks.spawn(async move {
            let mut asked = Some((keep, remember));
            while let Some((keep, window)) = asked {
                let remember = ledger::Remember {
                    now_unix_ms: Utc::now().timestamp_millis(),
                    window,
                };
                let pruned = bounded(job.as_str(), ledger::prune(&client, &paths, &job, keep, remember)).await;
                match &pruned {
                    Some(Ok(0)) | None => {}
                    Some(Ok(deleted)) => tracing::debug!(job = %job, deleted, ?keep, "old run records pruned"),
                    Some(Err(err)) => tracing::warn!(job = %job, error = %error_chain(err), "pruning run records failed"),
                }
                // A full batch leaves more behind: a burst's records go now, not with the next
                // runs' ends (at 4000 runs a second two batches a second fell behind).
                let more = matches!(pruned, Some(Ok(deleted)) if deleted >= ledger::PRUNE_BATCH);
                asked = if more {
                    Some(out.owed().unwrap_or((keep, window)))
                } else {
                    out.next()
                };
            }
        });
        Some(())
    }

    /// Records that a promised retry was dropped.
    pub fn drop_retry(&self, s: &Session, record: RunRecord, version: i32) -> Option<()> {
        let client = s.client.clone()?;
        let paths = self.paths.clone();
        let token = self.view.borrow().lock.token;
        s.tasks.spawn(async move {
                let write = ledger::rewrite_run(&client, &paths, &record, version, true, token);
                match bounded(&record.run_id, write).await {
                    Some(Ok(_)) => tracing::info!(job = %record.job, run_id = record.run_id, "dropped retry recorded"),
                    Some(Err(err)) => tracing::warn!(job = %record.job, run_id = record.run_id, error = %error_chain(&err), "dropped retry not recorded; its record still promises it"),
                    None => {}
                }
            });
        Some(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_job_has_one_prune_out_and_the_last_one_asked_meanwhile_goes_after_it() {
        let pruning = Pruning::default();
        let job = JobName::new("a");
        let day = Duration::from_secs(86_400);
        let mut out = PruneOut::of(&pruning, &job, (Keep::Records(100), day)).expect("none out");
        assert!(
            PruneOut::of(&pruning, &job, (Keep::Records(50), day)).is_none(),
            "one at a time"
        );
        assert!(PruneOut::of(&pruning, &job, (Keep::Records(10), day)).is_none());
        assert_eq!(
            out.next(),
            Some((Keep::Records(10), day)),
            "the last one asked goes next"
        );
        assert!(
            PruneOut::of(&pruning, &job, (Keep::Records(20), day)).is_none(),
            "still out"
        );
        assert_eq!(out.owed(), Some((Keep::Records(20), day)));
        assert_eq!(out.next(), None, "nothing owed: done");
        drop(out);
        let again = PruneOut::of(&pruning, &job, (Keep::Records(100), day)).expect("out again");
        drop(again);
        assert!(
            PruneOut::of(&pruning, &job, (Keep::Records(100), day)).is_some(),
            "a dropped prune (its session gone) leaves nothing out"
        );
    }
}
