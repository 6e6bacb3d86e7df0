//! Runs a [`FireMachine`]: performs its actions against the ledger and the runner (or, for a
//! job whose target is a URL, `delivery`) and feeds the answers, lock updates, reloads and
//! timer expiries back in.
//!
//! Owns: the current ZooKeeper client (from the lock's update stream), one task per request or
//! run, the cancel handle of every run, the processes of prepared runs (and giving them their go
//! as it handles a start), the timer (`alarm`), READY/STOPPING to systemd, and handing the lock
//! over when the machine says so.
//! Must not: decide anything — whether, when and why a run starts or stops is the machine's call.

mod alarm;
mod control;
mod delayed;
mod drift;
mod housekeeping;
mod leases;
mod listing;
mod observe;

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use tokio::sync::{mpsc, oneshot};
use tokio::task::{JoinHandle, JoinSet};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use zookeeper_client::{Acls, Client};

use super::machine::{
    Action, ClaimRefused, FireMachine, Input, JobRecords, RESOLVE_WINDOW, RecordWrite, TickClaim,
};
use crate::config::JobConfig;
use crate::ids::{JobName, NodeId, SessionId};
use crate::layout::ControlPaths;
use crate::layout::LedgerPaths;
use crate::layout::LockPaths;
use crate::ledger::group::GroupCommit;
use crate::ledger::{self, ClaimError, ClaimPlan};
use crate::lock::driver::DriverError;
use crate::lock::driver::LockCommand;
use crate::lock::driver::LockUpdate;
use crate::lock::inspect;
use crate::metrics::Metrics;
use crate::report::error_chain;
use crate::run;
use crate::runner;
use crate::view::NodeView;

/// Sleep at most this long at once, so a wall-clock step (NTP, suspend) is noticed in time.
const MAX_SLEEP: Duration = Duration::from_secs(30);
/// How long a handover waits for the lock driver to release the lock: its requests are bounded
/// by the session's request timeout, a few of them in a row.
const RELEASE_LIMIT: Duration = Duration::from_secs(10);
/// A deadline the machine left in the past after a Tick is woken for no more often than this.
const SPIN_FLOOR: chrono::Duration = chrono::Duration::milliseconds(20);
/// A run recorded `running` before its start (a submission's) tries the write this many times,
/// each bounded by [`REQUEST_LIMIT`], before it is reported as not started.
const START_WRITE_ATTEMPTS: usize = 3;
/// At most this many runs wait prepared at once; more due together are spawned at their
/// instant. Each waiting launcher holds 1.25 MiB of its own (its relocated data, heap and stack:
/// smaps_rollup `Private_Dirty`) for up to `claim_ahead`, so 128 of them are 160 MiB at most;
/// 128 covers issue 10's burst of 100 jobs due on the same second.
const MAX_PREPARED: usize = 128;
/// Reads of many nodes go out this many at a time (see `open_submissions`).
const READ_WINDOW: usize = 256;
/// This many inputs (a startup or a reload with thousands of jobs, a catch-up) followed by
/// [`QUIET_AFTER_BURST`] without any: the heap they used is given back (`heap`).
const BURST: usize = 1000;
// Short: a node that can fire wakes every second to read the delayed submissions due.
const QUIET_AFTER_BURST: Duration = Duration::from_millis(200);

/// A request whose answer has not come by then is answered as failed, so that no listing or
/// final record keeps the machine (or a stop) waiting on an ensemble that does not answer. Not a
/// claim: its outcome decides whether the tick is ours, so it is awaited (and read back when the
/// answer is lost); a stop does not wait for it past its own limit.
const REQUEST_LIMIT: Duration = Duration::from_secs(10);

/// `request`'s output, or `None` (logged) when it took longer than [`REQUEST_LIMIT`].
async fn bounded<T>(what: &str, request: impl Future<Output = T>) -> Option<T> {
    let answer = tokio::time::timeout(REQUEST_LIMIT, request).await;
    if answer.is_err() {
        tracing::warn!(what, limit = ?REQUEST_LIMIT, "zookeeper did not answer in time");
    }
    answer.ok()
}

/// What the machine makes of a claim's definite refusal.
fn refusal(err: &ClaimError) -> ClaimRefused {
    match err {
        ClaimError::NotOwner { .. } => ClaimRefused::NotOwner,
        ClaimError::AlreadyClaimed { .. } => ClaimRefused::AlreadyClaimed,
        ClaimError::RunAlive { .. } => ClaimRefused::RunAlive,
        err @ ClaimError::Zk { .. } => ClaimRefused::Failed(error_chain(err)),
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
            Some(client) if SessionId(client.session_id().0) != session => {
                // The guard went with the session; a record left `claimed` is resolved by the
                // next owner's catch-up, as any run of a dead session.
                let why = format!("{why}; the session ended before the claim could be read back");
                return Err(ClaimRefused::Failed(why));
            }
            Some(client) if !client.state().is_terminated() => client,
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

/// Where the machine's records live.
#[derive(Debug, Clone)]
pub struct FireSettings {
    pub ledger: LedgerPaths,
    /// The lock group's paths, for catch-up to tell live members.
    pub group: LockPaths,
    /// Where pauses and release requests come from.
    pub control: ControlPaths,
    /// This node, as release requests name it.
    pub me: NodeId,
    pub acls: Acls<'static>,
    /// What the node reports (`GET /metrics`).
    pub metrics: Arc<Metrics>,
    /// Where the session and the lock's status are published for the HTTP API.
    pub view: tokio::sync::watch::Sender<NodeView>,
    /// The default group's driver also checks the members' schedules (drift), sweeps the
    /// delayed area and reports the lock in the metrics; a named group's does not (issue 19).
    pub member_duties: bool,
    /// The lock group's name as status and metrics show it (`default` or the `[[group]]`).
    pub group_name: String,
    /// The node's HTTP clients, for jobs whose target is a URL (shared by every group).
    pub deliveries: Arc<crate::delivery::Deliveries>,
    /// Where failure notices go out (shared by every group).
    pub notifier: Arc<crate::notify::Notifier>,
}

/// The lock driver's task, as the fire driver steers it.
#[derive(Debug)]
pub struct LockTask {
    pub handle: JoinHandle<Result<(), DriverError>>,
    /// Cancelled to release the lock (the lock driver's shutdown).
    pub release: CancellationToken,
    pub updates: mpsc::UnboundedReceiver<LockUpdate>,
    /// Tokens whose claims failed their epoch check; handing the lock over on request.
    pub commands: mpsc::UnboundedSender<LockCommand>,
}

/// Runs until the machine has stopped after `shutdown`, or after the lock driver ended.
///
/// # Errors
/// The lock driver stopped with an error (a duplicate node_id); the stop order ran all the same.
pub async fn run(
    mut machine: FireMachine,
    settings: FireSettings,
    mut lock: LockTask,
    mut reloads: mpsc::UnboundedReceiver<Vec<Arc<JobConfig>>>,
    shutdown: CancellationToken,
) -> Result<(), DriverError> {
    let (answers, mut answered) = mpsc::unbounded_channel();
    let lister = listing::Lister::start(
        settings.ledger.clone(),
        settings.group.clone(),
        answers.clone(),
    );
    let leases = leases::Leases::new(Arc::clone(&settings.metrics));
    let mut io = Io {
        client: None,
        answers,
        runs: HashMap::new(),
        tasks: TaskTracker::new(),
        lock_commands: lock.commands.clone(),
        watch: None,
        group: None,
        lister,
        settings,
        prepared: HashMap::new(),
        leases,
    };
    // Ready once the schedule is loaded and the node is trying: like any client of a remote
    // service, a node whose ZooKeeper is down at boot starts and keeps trying (and /readyz and
    // `zkcron status` say "not connected"), instead of holding `systemctl start` until the
    // unit's start timeout kills it into a restart loop (issue 24).
    notify_systemd(&[sd_notify::NotifyState::Ready]);
    let mut stopping = false;
    let mut lock_alive = true;
    let mut updates_open = true;
    let mut handing_over = false;
    let mut release_limit = std::pin::pin!(tokio::time::sleep(RELEASE_LIMIT));
    let mut lock_result = Ok(());
    let mut pending: VecDeque<Input> = VecDeque::new();
    let mut handled_since_trim = 0_usize;
    let mut settled = false;
    let mut alarm = alarm::Alarm::new();
    let mut steps = alarm::Steps::new();
    let metrics = Arc::clone(&io.settings.metrics);
    let group_name = io.settings.group_name.clone();
    let mut observer = observe::Observer::new(&metrics, &group_name, io.settings.member_duties);
    // When the last Tick was fed: a deadline at or before it is one the Tick did not act on.
    let mut ticked_at: Option<DateTime<Utc>> = None;
    let mut spin_said = false;
    loop {
        let latest = Utc::now() + MAX_SLEEP;
        let mut wake_at = machine.next_deadline().map_or(latest, |at| at.min(latest));
        if ticked_at.is_some_and(|ticked| wake_at <= ticked) {
            // A machine bug, but never a busy loop: one spinning task starves the tasks queued
            // behind it on its worker, the lock driver among them (issue 31).
            if !std::mem::replace(&mut spin_said, true) {
                tracing::error!(deadline = %wake_at, "the fire machine left a deadline it does not act on; waking at most every {SPIN_FLOOR:?}");
            }
            wake_at = Utc::now() + SPIN_FLOOR;
        }
        let input = tokio::select! {
            biased;
            () = shutdown.cancelled(), if !stopping => Input::Shutdown,
            update = lock.updates.recv(), if updates_open => match update {
                Some(LockUpdate::Session(client)) => {
                    io.settings.view.send_modify(|view| view.client.clone_from(&client));
                    io.session_changed(client);
                    continue;
                }
                Some(LockUpdate::Event(event)) => {
                    // Logged by the lock driver.
                    observer.event(&event);
                    continue;
                }
                Some(LockUpdate::Status(status)) => {
                    observer.status(&status, io.client.is_some());
                    // What the change brings (a session, catch-up) is given back once quiet.
                    settled = false;
                    io.settings.view.send_modify(|view| view.lock = status);
                    Input::LockChanged(status)
                }
                None => {
                    updates_open = false;
                    continue;
                }
            },
            joined = &mut lock.handle, if lock_alive => {
                lock_alive = false;
                lock_result = match joined {
                    Ok(result) => result,
                    Err(err) => {
                        tracing::error!(error = %err, "lock driver task failed");
                        Ok(())
                    }
                };
                if handing_over { Input::LockReleased } else { Input::Shutdown }
            }
            // The release is a few bounded requests; a lock driver stuck elsewhere must not hold
            // the stop for ever: the lock then goes with the session as the process exits.
            () = release_limit.as_mut(), if handing_over && lock_alive => {
                tracing::warn!(limit = ?RELEASE_LIMIT, "the lock was not released in time; stopping without it (it goes with the session)");
                lock.handle.abort();
                lock_alive = false;
                Input::LockReleased
            }
            Some(jobs) = reloads.recv() => Input::Reloaded(jobs),
            Some(answer) = answered.recv() => answer,
            // After a burst, and once after each change of the lock (its inputs are few with
            // few jobs: the startup, an acquisition and its catch-up).
            () = tokio::time::sleep(QUIET_AFTER_BURST), if handled_since_trim >= BURST || !settled => {
                settled = true;
                let started = std::time::Instant::now();
                crate::heap::give_back();
                tracing::debug!(inputs = handled_since_trim, ms = started.elapsed().as_millis(), "free heap given back after a burst");
                handled_since_trim = 0;
                continue;
            }
            () = alarm.at(wake_at) => Input::Tick,
        };
        ticked_at = matches!(input, Input::Tick).then(Utc::now);
        handled_since_trim += 1;
        if let Some(by) = steps.stepped() {
            pending.push_back(Input::ClockStepped { by });
        }
        pending.push_back(input);
        while let Some(input) = pending.pop_front() {
            if !matches!(input, Input::Tick) {
                // Any other input may set a deadline that has passed; the next Tick acts on it.
                ticked_at = None;
            }
            if matches!(input, Input::Shutdown) {
                if stopping {
                    continue;
                }
                stopping = true;
                // systemd reads STOPPING=1 as "beginning its shutdown".
                notify_systemd(&[sd_notify::NotifyState::Stopping]);
            }
            if let Input::RunEnded { claim, .. } | Input::RunNotStarted { claim, .. } = &input {
                io.runs.remove(&claim.record.run_id);
                io.leases.give_back(&claim.record.run_id, &io.tasks);
            }
            observer.input(&input);
            for action in machine.handle(input, Utc::now()) {
                observer.action(&action);
                match action {
                    Action::YieldLock => {
                        let _ = lock.commands.send(LockCommand::Yield);
                    }
                    Action::HandOver => {
                        handing_over = true;
                        release_limit
                            .as_mut()
                            .reset(tokio::time::Instant::now() + RELEASE_LIMIT);
                        lock.release.cancel();
                        if !lock_alive {
                            pending.push_back(Input::LockReleased);
                        }
                    }
                    Action::Stopped => {
                        // Its queues end once the runs' last writes are out.
                        io.group = None;
                        io.tasks.close();
                        // Prunes and log reads still out; each is bounded by REQUEST_LIMIT.
                        if tokio::time::timeout(REQUEST_LIMIT, io.tasks.wait())
                            .await
                            .is_err()
                        {
                            tracing::warn!("requests still out at exit; their answers are dropped");
                        }
                        return lock_result;
                    }
                    action => {
                        if let Some(answer) = io.perform(action) {
                            pending.push_back(answer);
                        }
                    }
                }
            }
        }
    }
}

/// What performing actions needs; holds no policy.
struct Io {
    settings: FireSettings,
    /// The current session's client; `None` while no session is up.
    client: Option<Client>,
    answers: mpsc::UnboundedSender<Input>,
    /// Cancel handles of the runs alive here.
    runs: HashMap<String, CancellationToken>,
    tasks: TaskTracker,
    lock_commands: mpsc::UnboundedSender<LockCommand>,
    /// Stops the current session's watches (new submissions, `control/`).
    watch: Option<CancellationToken>,
    /// The current session's claims and record writes, grouped into multi-ops under load.
    group: Option<GroupCommit>,
    /// Catch-up listings, a bounded number at a time.
    lister: listing::Lister,
    /// The processes of runs prepared ahead of their instant, by run id (see `runner::prepare`).
    prepared: HashMap<String, oneshot::Receiver<runner::Prepared>>,
    /// The leases this node's runs hold of cluster-wide limits.
    leases: leases::Leases,
}

impl Io {
    /// A new session (or none): the watch for new submissions follows it.
    fn session_changed(&mut self, client: Option<Client>) {
        if let Some(stop) = self.watch.take() {
            stop.cancel();
        }
        if let Some(client) = &client {
            let stop = CancellationToken::new();
            delayed::watch(
                client.clone(),
                self.settings.ledger.delayed.clone(),
                self.settings.acls,
                self.answers.clone(),
                stop.clone(),
            );
            control::watch(
                client.clone(),
                self.settings.control.clone(),
                self.settings.me.clone(),
                self.settings.acls,
                self.answers.clone(),
                stop.clone(),
            );
            if self.settings.member_duties {
                drift::DriftWatch {
                    client: client.clone(),
                    group: self.settings.group.clone(),
                    me: self.settings.me.clone(),
                    metrics: Arc::clone(&self.settings.metrics),
                    view: self.settings.view.subscribe(),
                    stop: stop.clone(),
                }
                .spawn();
                housekeeping::spawn(
                    client.clone(),
                    self.settings.ledger.delayed.clone(),
                    Arc::clone(&self.settings.metrics),
                    self.settings.view.subscribe(),
                    stop.clone(),
                );
            }
            self.watch = Some(stop);
        }
        self.group = client.clone().map(|client| {
            let (group, lanes) = GroupCommit::new(client);
            self.tasks.spawn(lanes);
            group
        });
        self.client = client;
    }

    /// Carries out one action; an answer that needs no I/O is returned at once, the others come
    /// back through `answers` when their task ends.
    fn perform(&mut self, action: Action) -> Option<Input> {
        match action {
            Action::PrepareJobs(jobs) => self.prepare(jobs),
            Action::Claim(claim) => return self.claim(claim),
            Action::ListRecords(job) => return self.list(job),
            Action::MarkInterrupted {
                record,
                version,
                closes,
            } => return self.mark(record, version, closes),
            Action::ScanDelayed {
                generation,
                wanted,
                after,
                through,
                clean_before,
            } => return self.scan(generation, wanted, after, through, clean_before),
            Action::ReadSubmission { id } => return self.read_submission(id),
            Action::RemoveEmptyBucket(bucket) => {
                let client = self.client.clone()?;
                let paths = self.settings.ledger.delayed.clone();
                self.tasks.spawn(async move {
                    let what = paths.due_bucket(bucket);
                    bounded(&what, delayed::remove_bucket(&client, &paths, bucket)).await;
                });
            }
            Action::PrepareRun {
                spec,
                context,
                not_before,
            } => {
                // A delivery has no process to start ahead: its client is made already.
                if matches!(spec.program, run::Program::Http(_)) {
                    return None;
                }
                if self.prepared.len() >= MAX_PREPARED {
                    tracing::debug!(
                        run_id = context.run_id,
                        "not prepared: enough runs wait already"
                    );
                    return None;
                }
                let (send, receive) = oneshot::channel();
                self.prepared.insert(context.run_id.clone(), receive);
                self.tasks.spawn(async move {
                    // Given up meanwhile (the receiver is gone): dropping it ends the process.
                    let _ = send.send(runner::prepare(&spec, &context, Some(not_before)));
                });
            }
            Action::Unprepare { run_id } => {
                self.prepared.remove(&run_id);
            }
            Action::StartRun {
                spec,
                claim,
                context,
                record_first,
                not_before,
            } => {
                let cancel = CancellationToken::new();
                self.runs
                    .insert(claim.record.run_id.clone(), cancel.clone());
                let prepared = match self.prepared.remove(&claim.record.run_id) {
                    None => Process::Spawn,
                    Some(mut coming) => match coming.try_recv() {
                        Ok(mut prepared) => {
                            // Here, not in the run's task: the job starts before anything
                            // else spawned at this instant is polled. A run whose record must
                            // say `running` first gets its go after that write.
                            if !record_first {
                                prepared.go();
                            }
                            Process::Prepared(prepared)
                        }
                        Err(_) => Process::Coming(coming),
                    },
                };
                let (group, answers) = (self.group.clone(), self.answers.clone());
                let run = Run {
                    spec,
                    context,
                    cancel,
                    prepared,
                    not_before,
                    deliveries: Arc::clone(&self.settings.deliveries),
                };
                self.tasks.spawn(async move {
                    let ended = if record_first {
                        run.after_its_record(claim, group).await
                    } else {
                        let (claim, report) = run.beside_its_record(claim, group).await;
                        Input::RunEnded { claim, report }
                    };
                    let _ = answers.send(ended);
                });
            }
            Action::CancelRun { run_id } => {
                if let Some(cancel) = self.runs.get(&run_id) {
                    cancel.cancel();
                }
            }
            Action::WriteRecord(claim) => {
                let Some(group) = self.group.clone() else {
                    tracing::warn!(path = claim.path, status = ?claim.record.status, "run record not updated: no zookeeper session");
                    return Some(Input::RecordWritten {
                        run_id: claim.record.run_id,
                        write: RecordWrite::Failed,
                    });
                };
                let answers = self.answers.clone();
                // A tick's retry promised, or the last of its attempts recorded: its marker is
                // written before, or removed after, the record.
                let tick_retry = claim.record.submission_id.is_none()
                    && (claim.record.retry_at_unix_ms.is_some() || claim.record.attempt > 1);
                let marker = self
                    .client
                    .clone()
                    .filter(|_| tick_retry)
                    .map(|client| (client, self.settings.ledger.clone(), self.settings.acls));
                let promise = marker
                    .clone()
                    .filter(|_| claim.record.retry_at_unix_ms.is_some());
                let kept = marker.filter(|_| claim.record.retry_at_unix_ms.is_none());
                self.tasks.spawn(async move {
                    let mut claim = claim;
                    let path = claim.path.clone();
                    // The marker first: a promise in the ledger always has its marker.
                    if let Some((client, paths, acls)) = &promise {
                        let marked = ledger::promise_retry(client, paths, &claim.record, *acls);
                        if let Some(Err(err)) = bounded(&path, marked).await {
                            tracing::warn!(path, error = %error_chain(&err), "retry marker not written: only the job's newest records show the promise");
                        }
                    }
                    let write = match bounded(&path, group.finish(&mut claim)).await {
                        Some(Ok(())) => {
                            if let Some((client, paths, _)) = &kept {
                                let record = &claim.record;
                                ledger::forget_retry(client, paths, &record.job, record.scheduled_unix_ms).await;
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
                    let _ = answers.send(Input::RecordWritten { run_id, write });
                });
            }
            Action::Withdraw { id, claim } => {
                let Some(client) = self.client.clone() else {
                    return Some(Input::Withdrawn { id });
                };
                let (paths, answers) = (self.settings.ledger.clone(), self.answers.clone());
                let acls = self.settings.acls;
                self.tasks.spawn(async move {
                    match bounded(&claim.path, ledger::withdraw(&client, &paths, &claim, acls)).await {
                        Some(Ok(())) => tracing::info!(path = claim.path, "claimed tick withdrawn for the handoff"),
                        refused => {
                            if let Some(Err(err)) = refused {
                                tracing::warn!(path = claim.path, error = %error_chain(&err), "claimed tick not withdrawn; it stays for the next owner");
                            }
                            bounded(&claim.path, ledger::release_unstarted_guard(&client, &claim)).await;
                        }
                    }
                    let _ = answers.send(Input::Withdrawn { id });
                });
            }
            Action::ReleaseGuard(claim) => {
                let run_id = claim.record.run_id.clone();
                let Some(client) = self.client.clone() else {
                    // Sent again by the machine once a session is up.
                    return Some(Input::GuardReleased {
                        run_id,
                        settled: false,
                    });
                };
                let answers = self.answers.clone();
                self.tasks.spawn(async move {
                    let released = ledger::release_unstarted_guard(&client, &claim);
                    let settled = bounded(&claim.path, released).await.unwrap_or(false);
                    let _ = answers.send(Input::GuardReleased { run_id, settled });
                });
            }
            Action::Prune {
                job,
                keep,
                remember,
            } => {
                let client = self.client.clone()?;
                let paths = self.settings.ledger.clone();
                let remember = ledger::Remember {
                    now_unix_ms: Utc::now().timestamp_millis(),
                    window: remember,
                    acls: self.settings.acls,
                };
                self.tasks.spawn(async move {
                    match bounded(job.as_str(), ledger::prune(&client, &paths, &job, keep, remember)).await {
                        Some(Ok(0)) | None => {}
                        Some(Ok(deleted)) => tracing::debug!(job = %job, deleted, keep, "old run records pruned"),
                        Some(Err(err)) => tracing::warn!(job = %job, error = %error_chain(&err), "pruning run records failed"),
                    }
                });
            }
            Action::TakeLeases { id, run_id, limits } => {
                let Some(client) = self.client.clone() else {
                    let failed = limits.first().map(|limit| limit.name.clone());
                    return Some(Input::LeasesTaken { id, run_id, failed });
                };
                let taker = leases::Taker {
                    client,
                    paths: &self.settings.ledger,
                    me: &self.settings.me,
                    acls: self.settings.acls,
                    tasks: &self.tasks,
                    answers: &self.answers,
                };
                self.leases.take(taker, id, run_id, limits);
            }
            Action::GiveBackLeases { run_id } => self.leases.give_back(&run_id, &self.tasks),
            Action::DropRetry { record, version } => {
                let client = self.client.clone()?;
                let paths = self.settings.ledger.clone();
                self.tasks.spawn(async move {
                    let write = ledger::rewrite_record(&client, &paths, &record, version, true);
                    match bounded(&record.run_id, write).await {
                        Some(Ok(_)) => tracing::info!(job = %record.job, run_id = record.run_id, "dropped retry recorded"),
                        Some(Err(err)) => tracing::warn!(job = %record.job, run_id = record.run_id, error = %error_chain(&err), "dropped retry not recorded; its record still promises it"),
                        None => {}
                    }
                });
            }
            Action::FenceFailed(token) => {
                let _ = self.lock_commands.send(LockCommand::FenceFailed(token));
            }
            Action::Notify(notice) => self.settings.notifier.send(*notice),
            Action::RemoveBackfill(name) => {
                if let Some(client) = self.client.clone() {
                    let paths = self.settings.control.clone();
                    self.tasks.spawn(async move {
                        crate::control::store::remove_backfill(&client, &paths, &name).await;
                    });
                }
            }
            Action::PauseJob { job, reason } => self.pause(job, reason),
            Action::HandOver | Action::YieldLock | Action::Stopped => {}
        }
        None
    }

    /// Pauses `job` as `zkcron pause` would, by `zkcron` itself; the pause comes back through
    /// the watch on `control/`.
    fn pause(&self, job: JobName, reason: String) {
        let Some(client) = self.client.clone() else {
            tracing::error!(job = %job, reason, "cannot pause the job: no ZooKeeper session");
            return;
        };
        let (paths, acls) = (self.settings.control.clone(), self.settings.acls);
        self.tasks.spawn(async move {
            let pause = crate::control::Pause {
                reason: Some(reason),
                by: "zkcron".to_owned(),
                since_unix_ms: Utc::now().timestamp_millis(),
            };
            let paused = crate::control::store::pause(&client, &paths, &job, &pause, acls);
            match bounded(job.as_str(), paused).await {
                Some(Ok(_)) => tracing::warn!(job = %job, reason = pause.reason, "job paused; `zkcron resume` resumes it"),
                Some(Err(err)) => tracing::error!(job = %job, error = %error_chain(&err), "cannot pause the job"),
                None => {}
            }
        });
    }

    fn prepare(&self, jobs: Vec<JobName>) {
        let Some(client) = self.client.clone() else {
            return;
        };
        let (paths, acls) = (self.settings.ledger.clone(), self.settings.acls);
        self.tasks.spawn(async move {
            if let Err(err) = ledger::ensure_parents(&client, &paths, jobs.iter(), acls).await {
                tracing::warn!(error = %error_chain(&err), "cannot create the run record parents; first claims will");
            }
        });
    }

    /// The one claim path: every start, skip and gap record goes through here.
    fn claim(&self, claim: TickClaim) -> Option<Input> {
        let TickClaim {
            id,
            record,
            mode,
            guarded,
        } = claim;
        let (Some(client), Some(group)) = (self.client.clone(), self.group.clone()) else {
            let result = Err(ClaimRefused::Failed("no zookeeper session".into()));
            return Some(Input::ClaimDone { id, result });
        };
        let (paths, acls, answers) = (
            self.settings.ledger.clone(),
            self.settings.acls,
            self.answers.clone(),
        );
        let view = self.settings.view.subscribe();
        self.tasks.spawn(async move {
            let (job, tick) = (record.job.clone(), record.scheduled_unix_ms);
            let path = record.path(&paths);
            let plan = ClaimPlan::new(&paths, record, mode, guarded, acls);
            let session = SessionId(client.session_id().0);
            // Not dropped at a time limit: a claim still queued behind other groups would go
            // out after its read-back had found nothing. Every claim gets an answer, or an
            // error once the connection is lost or the session ends.
            let claimed = group.claim(plan.clone());
            tokio::pin!(claimed);
            let answer = match tokio::time::timeout(REQUEST_LIMIT, &mut claimed).await {
                Ok(answer) => answer,
                Err(_) => {
                    tracing::warn!(path, limit = ?REQUEST_LIMIT, "claim not answered in time; still waiting for its answer");
                    claimed.await
                }
            };
            let result = match answer {
                Err(err) if err.unanswered() => {
                    read_back(view, &plan, session, error_chain(&err)).await
                }
                other => other.map_err(|err| refusal(&err)),
            };
            let already = result == Err(ClaimRefused::AlreadyClaimed);
            let _ = answers.send(Input::ClaimDone { id, result });
            if already {
                // Who holds it, for the log line: after the answer, off the firing path.
                let read = tokio::time::timeout(Duration::from_secs(2), ledger::read_record(&client, &path)).await;
                let by = read.ok().flatten().map(|record| record.node_id.to_string());
                tracing::warn!(job = %job, tick, claimed_by = by.as_deref().unwrap_or("?"), "not firing: tick already claimed");
            }
        });
        None
    }

    fn list(&self, job: JobName) -> Option<Input> {
        let Some(client) = self.client.clone() else {
            let result = Err("no zookeeper session".to_owned());
            return Some(Input::RecordsListed { job, result });
        };
        self.lister.list(client, job);
        None
    }

    fn scan(
        &self,
        generation: u64,
        wanted: crate::fire::machine::Wanted,
        after: Option<crate::delayed::submission::DueBucket>,
        through: crate::delayed::submission::DueBucket,
        clean_before: DateTime<Utc>,
    ) -> Option<Input> {
        let Some(client) = self.client.clone() else {
            let result = Err("no zookeeper session".to_owned());
            return Some(Input::DelayedScanned {
                generation,
                through,
                result,
            });
        };
        let (paths, answers) = (self.settings.ledger.delayed.clone(), self.answers.clone());
        self.tasks.spawn(async move {
            let what = paths.due.clone();
            let began = std::time::Instant::now();
            let scanned = bounded(
                &what,
                delayed::scan(&client, &paths, &wanted, after, through, clean_before),
            );
            let result = scanned
                .await
                .unwrap_or_else(|| Err("no answer in time".into()));
            if let Ok(found) = &result {
                let ms = began.elapsed().as_millis();
                let from_oldest = after.is_none();
                tracing::debug!(found = found.len(), ms, from_oldest, "due buckets read");
            }
            let _ = answers.send(Input::DelayedScanned {
                generation,
                through,
                result,
            });
        });
        None
    }

    fn read_submission(&self, id: crate::delayed::submission::SubmissionId) -> Option<Input> {
        let Some(client) = self.client.clone() else {
            let result = Err("no zookeeper session".to_owned());
            return Some(Input::SubmissionRead { id, result });
        };
        let (paths, answers) = (self.settings.ledger.delayed.clone(), self.answers.clone());
        self.tasks.spawn(async move {
            let read = bounded(id.as_str(), delayed::read_one(&client, &paths, &id));
            let result = read
                .await
                .unwrap_or_else(|| Err("no answer in time".into()));
            let _ = answers.send(Input::SubmissionRead { id, result });
        });
        None
    }

    fn mark(&self, record: crate::run::RunRecord, version: i32, closes: bool) -> Option<Input> {
        let Some(client) = self.client.clone() else {
            let result = Err("no zookeeper session".to_owned());
            return Some(Input::Marked { record, result });
        };
        let (paths, answers) = (self.settings.ledger.clone(), self.answers.clone());
        self.tasks.spawn(async move {
            let marked = bounded(
                &record.run_id,
                ledger::rewrite_record(&client, &paths, &record, version, closes),
            );
            let result = match marked.await {
                Some(result) => result.map_err(|err| error_chain(&err)),
                None => Err("no answer in time".into()),
            };
            let _ = answers.send(Input::Marked { record, result });
        });
        None
    }
}

/// What catch-up needs to know of one job, read in one go.
async fn list_records(
    client: &Client,
    paths: &LedgerPaths,
    group: &LockPaths,
    job: &JobName,
) -> Result<JobRecords, String> {
    let mut ticks = ledger::ticks(client, paths, job)
        .await
        .map_err(|err| error_chain(&err))?;
    let mut newest = Vec::new();
    let mut unreadable = Vec::new();
    for &tick in ticks.iter().rev().take(RESOLVE_WINDOW) {
        let read = ledger::read_versioned_checked(client, &paths.record(job, tick))
            .await
            .map_err(|err| error_chain(&err))?;
        match read {
            Some(read) => newest.push(read),
            None => unreadable.push(tick),
        }
    }
    // Gone, or not ours (logged by the read): it must not stand as the job's latest tick, or a
    // foreign node named `12` makes catch-up record a gap since 1970.
    ticks.retain(|tick| !unreadable.contains(tick));
    promised_retries(client, paths, job, &mut newest).await?;
    // A submission's run is open while its marker is: all of them, not only the newest.
    let mut payloads = HashMap::new();
    for (record, version, payload) in open_submissions(client, paths, job).await? {
        if let (Some(id), Some(payload)) = (&record.submission_id, payload) {
            payloads.insert(id.clone(), payload);
        }
        newest.push((record, version));
    }
    let guard_holder = ledger::guard_holder(client, paths, job).await;
    let live_members = inspect::member_ids(client, group)
        .await
        .map_err(|err| error_chain(&err))?;
    Ok(JobRecords {
        ticks,
        newest,
        guard_holder,
        live_members,
        payloads,
    })
}

/// Adds to `newest` the records of `job`'s ticks marked as promising a retry that are not among
/// them yet, however old; removes the markers of ticks that promise nothing any more.
async fn promised_retries(
    client: &Client,
    paths: &LedgerPaths,
    job: &JobName,
    newest: &mut Vec<(crate::run::RunRecord, i32)>,
) -> Result<(), String> {
    for tick in ledger::promised_retries(client, paths, job)
        .await
        .map_err(|err| error_chain(&err))?
    {
        let known = newest
            .iter()
            .find(|(record, _)| record.submission_id.is_none() && record.scheduled_unix_ms == tick);
        let read = match known {
            Some(known) => Some(known.clone()),
            None => ledger::read_versioned_checked(client, &paths.record(job, tick))
                .await
                .map_err(|err| error_chain(&err))?,
        };
        match read {
            Some((record, version))
                if record.status.is_final() && record.retry_at_unix_ms.is_some() =>
            {
                if known.is_none() {
                    newest.push((record, version));
                }
            }
            // Still running (its retry claimed), or its promise kept or given up: a stale hint,
            // unless the run is not final yet — its final record may promise again.
            Some((record, _)) if !record.status.is_final() => {}
            _ => ledger::forget_retry(client, paths, job, tick).await,
        }
    }
    Ok(())
}

type OpenSubmission = (crate::run::RunRecord, i32, Option<Arc<Vec<u8>>>);

/// The records of `job`'s open submission runs, with their versions and payloads.
async fn open_submissions(
    client: &Client,
    paths: &LedgerPaths,
    job: &JobName,
) -> Result<Vec<OpenSubmission>, String> {
    let parent = paths.delayed.open_of(job);
    let names = match client.list_children(&parent).await {
        Ok(names) => names,
        Err(zookeeper_client::Error::NoNode) => Vec::new(),
        Err(err) => return Err(format!("listing {parent}: {err}")),
    };
    let mut wanted = Vec::new();
    for name in names {
        let parsed = crate::layout::RecordName::parse(&name);
        match parsed.and_then(|n| Some((n.scheduled_unix_ms, n.submission?))) {
            Some(open) => wanted.push(open),
            None => tracing::warn!(
                path = format!("{parent}/{name}"),
                "not an open submission run; skipped"
            ),
        }
    }
    // Thousands may be open after a lost lock: read a window at a time, all of a window out
    // at once, so catch-up takes round trips by the window and the session's queue (which the
    // lock's liveness checks wait in) stays short.
    let mut open = Vec::new();
    for window in wanted.chunks(READ_WINDOW) {
        let mut reads = JoinSet::new();
        for (index, (due, id)) in window.iter().cloned().enumerate() {
            let (client, paths, job) = (client.clone(), paths.clone(), job.clone());
            reads.spawn(async move {
                let path = paths.submission_record(&job, due, &id);
                let record = ledger::read_versioned(&client, &path).await;
                let payload = match ledger::submissions::read(&client, &paths.delayed, &id).await {
                    Ok(Some((submission, _))) => Some(Arc::new(submission.payload)),
                    Ok(None) => None,
                    Err(err) => {
                        tracing::warn!(error = %error_chain(&err), "open submission's payload unreadable");
                        None
                    }
                };
                (index, record.map(|(record, version)| (record, version, payload)))
            });
        }
        let mut read: Vec<Option<OpenSubmission>> = window.iter().map(|_| None).collect();
        while let Some(joined) = reads.join_next().await {
            match joined {
                Ok((index, found)) => read[index] = found,
                Err(err) => return Err(format!("reading open submission runs: {err}")),
            }
        }
        open.extend(read.into_iter().flatten());
    }
    Ok(open)
}

/// A run to start: the machine's [`Action::StartRun`], with its prepared process if one waits.
struct Run {
    spec: Arc<run::JobSpec>,
    context: run::RunContext,
    cancel: CancellationToken,
    prepared: Process,
    not_before: DateTime<Utc>,
    /// Where a run whose target is a URL goes instead of the runner.
    deliveries: Arc<crate::delivery::Deliveries>,
}

/// A run's process, as far as the driver knows at its start.
enum Process {
    /// None was prepared: spawned at the start.
    Spawn,
    /// Prepared (and already given its go, unless it was gone).
    Prepared(runner::Prepared),
    /// Still being prepared: given its go as soon as it is.
    Coming(oneshot::Receiver<runner::Prepared>),
}

impl Run {
    /// The process starts at once; the record says `running` a round trip later.
    async fn beside_its_record(
        self,
        claim: run::Claim,
        group: Option<GroupCommit>,
    ) -> (run::Claim, run::RunReport) {
        let not_before = Some(self.not_before);
        let cancelled = self.cancel.clone();
        let record = async {
            let mut claim = claim;
            // After the job's exec, not beside it: ZooKeeper's servers answering this write
            // would compete with it for a CPU. A run cancelled first never says `running`.
            let held = runner::hold_unless_cancelled(not_before, &cancelled).await;
            if let Some(group) = group.filter(|_| held) {
                let path = claim.path.clone();
                let written = bounded(&path, group.update(&mut claim)).await;
                if let Some(Err(err)) = written {
                    tracing::warn!(status = ?claim.record.status, error = %error_chain(&err), "run record not updated");
                }
            }
            claim
        };
        let (report, claim) = tokio::join!(self.start(), record);
        (claim, report)
    }

    /// The record says `running` first, and the process starts only if that write succeeded (a
    /// submission's run: a record still `claimed` then proves it never ran). Answers
    /// [`Input::RunEnded`], or [`Input::RunNotStarted`] when the write did not go through or the
    /// run was cancelled before it did: a stop never waits on an ensemble that does not answer.
    async fn after_its_record(self, mut claim: run::Claim, group: Option<GroupCommit>) -> Input {
        let mut why = "no zookeeper session".to_owned();
        // Whether a write went out whose answer did not come: the record may say `running`.
        let mut maybe_written = false;
        if let Some(group) = &group {
            let path = claim.path.clone();
            // An ensemble that stalls past REQUEST_LIMIT must not turn a submission into a
            // failed run: the write is sent again (a lost reply of ours is recognised by
            // `update`), unless the run was cancelled meanwhile or someone else changed the
            // record.
            for attempt in 1..=START_WRITE_ATTEMPTS {
                maybe_written = true;
                let written = tokio::select! {
                    written = bounded(&path, group.update(&mut claim)) => written,
                    () = self.cancel.cancelled() => {
                        why = "cancelled before its record was marked running".to_owned();
                        break;
                    }
                };
                match written {
                    Some(Ok(())) => {
                        let report = self.start().await;
                        return Input::RunEnded { claim, report };
                    }
                    Some(Err(err @ ledger::UpdateError::Conflict { .. })) => {
                        why = error_chain(&err);
                        maybe_written = false;
                        break;
                    }
                    Some(Err(err)) => why = error_chain(&err),
                    None => why = "no answer from zookeeper".to_owned(),
                }
                if attempt < START_WRITE_ATTEMPTS {
                    tracing::warn!(path, "run record not marked running yet; sending it again");
                }
            }
        }
        tracing::warn!(job = %claim.record.job, run_id = claim.record.run_id, error = why, "not starting: the run's record could not be marked running first");
        Input::RunNotStarted {
            claim,
            why,
            maybe_written,
        }
    }

    async fn start(self) -> run::RunReport {
        let not_before = Some(self.not_before);
        if let run::Program::Http(target) = &self.spec.program {
            return self
                .deliveries
                .deliver(&self.spec, target, &self.context, self.cancel, not_before)
                .await;
        }
        let prepared = match self.prepared {
            Process::Spawn => runner::Prepared::none(),
            Process::Prepared(prepared) => prepared,
            Process::Coming(coming) => coming.await.unwrap_or_else(|_| runner::Prepared::none()),
        };
        runner::run_prepared(&self.spec, &self.context, self.cancel, prepared, not_before).await
    }
}

fn notify_systemd(state: &[sd_notify::NotifyState<'_>]) {
    if let Err(err) = sd_notify::notify(state) {
        tracing::warn!(error = %err, "cannot notify systemd");
    }
}
