//! `zkcron run`: wiring the lock, the fire queue and the runner into a daemon.
//!
//! Owns: owner-gated firing (only the lock owner fires, and only ticks it claimed in ZooKeeper),
//! the on_locked/on_lost policy, concurrency, retries, schedule reloads, and the shutdown order:
//! stop firing and withdraw unstarted claims → release the lock (peers take over at once) → stop
//! running jobs within their grace → exit.
//! Must not: contain logic that belongs to the lock machine, the ledger, the schedule or the
//! runner; it only connects them.

mod catch_up;
mod fire_queue;

use std::collections::{HashMap, VecDeque};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use chrono::{DateTime, Utc};
use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use zookeeper_client::Client;

use crate::config::{self, Concurrency, Config, JobConfig, OnLost};
use crate::ids::{FencingToken, JobName};
use crate::ledger::record::{RunRecord, RunStatus};
use crate::ledger::{self, Claim, ClaimError, LedgerPaths};
use crate::lock::LockEvent;
use crate::lock::driver::{self, DriverError, LockPaths, LockSettings, LockView};
use crate::lock::node::OwnerInfo;
use crate::report::error_chain;
use crate::runner::{self, RunContext, RunOutcome};
use fire_queue::FireQueue;

/// A claim that has not returned by its tick delays the fire, up to this long; then the tick is
/// not fired (we cannot show it is ours) and stays claimed or unclaimed as ZooKeeper decided.
const CLAIM_LATE_LIMIT: Duration = Duration::from_secs(2);
/// A tick whose time passed longer ago than this (the process was stopped or starved) is not
/// fired late; it is logged as missed.
const MISSED_AFTER: Duration = Duration::from_secs(1);
/// Sleep at most this long at once, so a wall-clock step (NTP, suspend) is noticed in time.
const MAX_SLEEP: Duration = Duration::from_secs(30);
/// How long a stopping owner waits for its claimed, unstarted ticks to be withdrawn.
const WITHDRAW_LIMIT: Duration = Duration::from_secs(2);

/// Why the daemon stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum DaemonError {
    #[error(transparent)]
    Lock(#[from] DriverError),
    #[error("lock driver task failed")]
    DriverPanicked(#[source] tokio::task::JoinError),
}

/// What `run` needs besides the schedule.
#[derive(Debug, Clone)]
pub struct DaemonSettings {
    /// Re-read on every reload request.
    pub config_path: PathBuf,
    /// This process's identity in the lock group.
    pub me: OwnerInfo,
    /// Drawn by the caller (up to a tenth of the takeover delay, at most 1 s).
    pub jitter: Duration,
}

/// Runs until `shutdown` is cancelled; a message on `reloads` re-reads the schedule file.
///
/// # Errors
/// The lock could not run (a duplicate node_id); ZooKeeper outages are waited out.
pub async fn run(
    config: Config,
    settings: DaemonSettings,
    shutdown: CancellationToken,
    mut reloads: mpsc::UnboundedReceiver<()>,
) -> Result<(), DaemonError> {
    let zk = config.zookeeper.settings();
    let paths = LockPaths::new(&config.lock.root, &config.lock.name);
    let lock = LockSettings {
        paths: paths.clone(),
        me: settings.me.clone(),
        takeover_delay: config.lock.takeover_delay,
        jitter: settings.jitter,
    };
    let (events_tx, mut events) = mpsc::unbounded_channel();
    let (view_tx, mut view) = watch::channel(LockView::default());
    let lock_shutdown = CancellationToken::new();
    let (fence_failed, mut fence_failures) = mpsc::unbounded_channel();
    let mut driver = tokio::spawn({
        let lock_shutdown = lock_shutdown.clone();
        async move {
            driver::run(
                &zk,
                &lock,
                &lock_shutdown,
                &events_tx,
                &view_tx,
                &mut fence_failures,
            )
            .await
        }
    });

    let firing = Firing {
        ledger: LedgerPaths::new(&paths),
        members: paths.members.clone(),
        fence_failed,
        acls: config.zookeeper.settings().acls(),
        me: settings.me.clone(),
        running: Running::default(),
        ticks: TaskTracker::new(),
        runs: TaskTracker::new(),
        stop_firing: CancellationToken::new(),
        stop_runs: CancellationToken::new(),
    };
    let mut jobs: Vec<Arc<JobConfig>> = config.jobs.iter().cloned().map(Arc::new).collect();
    let mut current = config;
    let mut last_tick: Option<DateTime<Utc>> = None;
    let mut queue = FireQueue::new(&jobs, Utc::now());
    // Ticks popped while this node could not fire; re-fired if it acquires the lock in time.
    let mut declined: VecDeque<(DateTime<Utc>, Vec<Arc<JobConfig>>)> = VecDeque::new();
    let mut ready = false;
    let mut could_fire = false;
    // A wall-clock offset; a value beyond chrono's range is treated as "no lead".
    let claim_ahead = chrono::Duration::from_std(current.lock.claim_ahead).unwrap_or_default();
    tracing::info!(jobs = jobs.len(), node_id = %settings.me.node_id, "zkcron started");

    let exit = loop {
        let wake = queue.next_tick().map(|tick| tick - claim_ahead);
        let sleep_for = wake.map_or(MAX_SLEEP, |wake| until(wake).min(MAX_SLEEP));
        tokio::select! {
            biased;
            () = shutdown.cancelled() => break Ok(()),
            joined = &mut driver => break driver_exit(joined),
            Some(event) = events.recv() => {
                firing.on_lock_event(&event);
                if matches!(event, LockEvent::Acquired { .. }) {
                    // A tick popped just before we acquired (a handoff) is still ours to fire:
                    // its claim keeps it at most once.
                    for (tick, due) in declined.drain(..).filter(|(tick, _)| Utc::now() <= *tick + MISSED_AFTER) {
                        firing.spawn_tick(tick, due, view.clone());
                    }
                }
            }
            Some(()) = reloads.recv() => {
                if let Some(new) = reload(&settings.config_path, &current) {
                    jobs = new.jobs.iter().cloned().map(Arc::new).collect();
                    let after = last_tick.map_or_else(Utc::now, |last| last.max(Utc::now()));
                    queue = FireQueue::new(&jobs, after);
                    current = new;
                    firing.prepare_jobs(&jobs, &view);
                }
            }
            Ok(()) = view.changed() => {
                let now_view = view.borrow().clone();
                if !ready && now_view.connected {
                    ready = true;
                    notify_systemd(&[sd_notify::NotifyState::Ready]);
                }
                // Acquired, or back from an outage: resolve what was left open, fire what was missed.
                if now_view.may_fire && !could_fire {
                    let firing = firing.clone();
                    let (jobs, view) = (jobs.clone(), view.clone());
                    firing.ticks.clone().spawn(firing.catch_up(jobs, view));
                }
                could_fire = now_view.may_fire;
            }
            () = tokio::time::sleep(sleep_for) => {
                if wake.is_some_and(|wake| Utc::now() >= wake) {
                    if let Some((tick, due)) = queue.pop_tick(Utc::now()) {
                        last_tick = Some(tick);
                        declined.retain(|(old, _)| Utc::now() <= *old + MISSED_AFTER);
                        if view.borrow().may_fire {
                            firing.spawn_tick(tick, due, view.clone());
                        } else {
                            tracing::debug!(%tick, "not the owner (or disconnected): not firing");
                            declined.push_back((tick, due));
                        }
                    }
                }
            }
        }
    };

    // Stop firing, then hand the lock over at once, then stop the jobs within their grace.
    // systemd reads STOPPING=1 as "beginning its shutdown".
    notify_systemd(&[sd_notify::NotifyState::Stopping]);
    firing.stop_firing.cancel();
    // Claimed but unstarted ticks are given back while we still own the lock, so the peer we
    // hand over to fires them (a planned handoff loses no tick).
    firing.ticks.close();
    if tokio::time::timeout(WITHDRAW_LIMIT, firing.ticks.wait())
        .await
        .is_err()
    {
        tracing::warn!(limit = ?WITHDRAW_LIMIT, "claimed ticks not all withdrawn before the handoff");
    }
    lock_shutdown.cancel();
    if !driver.is_finished() {
        if let Err(err) = driver
            .await
            .map_err(DaemonError::DriverPanicked)
            .and_then(|r| Ok(r?))
        {
            tracing::warn!(error = %error_chain(&err), "lock release on shutdown failed");
        }
    }
    firing.stop_runs.cancel();
    firing.runs.close();
    firing.runs.wait().await;
    tracing::info!("zkcron stopped");
    exit
}

fn driver_exit(
    joined: Result<Result<(), DriverError>, tokio::task::JoinError>,
) -> Result<(), DaemonError> {
    match joined {
        Ok(result) => Ok(result?),
        Err(err) => Err(DaemonError::DriverPanicked(err)),
    }
}

/// Time from now until `at` on the wall clock (zero if past).
fn until(at: DateTime<Utc>) -> Duration {
    (at - Utc::now()).to_std().unwrap_or(Duration::ZERO)
}

fn notify_systemd(state: &[sd_notify::NotifyState<'_>]) {
    if let Err(err) = sd_notify::notify(state) {
        tracing::warn!(error = %err, "cannot notify systemd");
    }
}

/// Re-reads the schedule; on any problem keeps the current one and says why.
fn reload(path: &std::path::Path, current: &Config) -> Option<Config> {
    match config::load(path) {
        Ok(new) => {
            if new.zookeeper != current.zookeeper || new.lock != current.lock {
                tracing::warn!(
                    path = %path.display(),
                    "[zookeeper] and [lock] changes take effect only after a restart; jobs are reloaded"
                );
            }
            let enabled = new.jobs.iter().filter(|job| job.enabled).count();
            tracing::info!(path = %path.display(), jobs = new.jobs.len(), enabled, "schedule reloaded");
            Some(new)
        }
        Err(err) => {
            tracing::error!(
                path = %path.display(),
                error = %error_chain(&err),
                "reload failed; keeping the current schedule"
            );
            None
        }
    }
}

/// Runs alive on this node, by run id.
#[derive(Debug, Clone, Default)]
struct Running(Arc<Mutex<HashMap<String, RunSlot>>>);

#[derive(Debug)]
struct RunSlot {
    job: JobName,
    cancel: CancellationToken,
    /// Cancelled by the run's task when the process has ended.
    ended: CancellationToken,
    on_lost: OnLost,
}

impl Running {
    fn slots(&self) -> std::sync::MutexGuard<'_, HashMap<String, RunSlot>> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Whether a run of `job` is alive on this node.
    fn alive(&self, job: &JobName) -> bool {
        self.slots().values().any(|slot| &slot.job == job)
    }

    /// Cancels this node's runs of `job` (concurrency = replace) and waits, up to `within`, for
    /// them to end. Returns whether they did.
    async fn replace(&self, job: &JobName, within: Duration) -> bool {
        let ended: Vec<CancellationToken> = self
            .slots()
            .values()
            .filter(|slot| &slot.job == job)
            .map(|slot| {
                slot.cancel.cancel();
                slot.ended.clone()
            })
            .collect();
        let all_ended = async {
            for ended in ended {
                ended.cancelled().await;
            }
        };
        tokio::time::timeout(within, all_ended).await.is_ok()
    }
}

/// Everything a tick needs to fire.
#[derive(Clone)]
struct Firing {
    ledger: LedgerPaths,
    /// `<root>/<lock>/members`, to tell whether an interrupted run's node is still alive.
    members: String,
    /// Tells the lock driver that a claim with our token failed its epoch check.
    fence_failed: mpsc::UnboundedSender<FencingToken>,
    acls: zookeeper_client::Acls<'static>,
    me: OwnerInfo,
    running: Running,
    /// Ticks being claimed and fired; drained (claims withdrawn) before the lock is released.
    ticks: TaskTracker,
    /// Runs; stopped after the lock is released.
    runs: TaskTracker,
    stop_firing: CancellationToken,
    stop_runs: CancellationToken,
}

impl Firing {
    fn on_lock_event(&self, event: &LockEvent) {
        match event {
            LockEvent::Acquired { token } => {
                tracing::info!(token = token.0, "this node owns the lock: firing jobs")
            }
            // on_lost: cancel what must not run without the lock; let `finish` jobs end.
            LockEvent::Lost => {
                for slot in self.running.slots().values() {
                    let job = &slot.job;
                    if slot.on_lost == OnLost::Cancel {
                        tracing::warn!(job = %job, "lock lost: cancelling the running job (on_lost = cancel)");
                        slot.cancel.cancel();
                    } else {
                        tracing::info!(job = %job, "lock lost: letting the running job finish (on_lost = finish)");
                    }
                }
            }
            LockEvent::OwnerChanged { .. } => {}
        }
    }

    /// Creates new jobs' record parents now, if we can fire, so their first claims are quick.
    fn prepare_jobs(&self, jobs: &[Arc<JobConfig>], view: &watch::Receiver<LockView>) {
        let snapshot = view.borrow().clone();
        let (true, Some(client)) = (snapshot.may_fire, snapshot.client) else {
            return;
        };
        let names: Vec<JobName> = jobs
            .iter()
            .filter(|job| job.enabled)
            .map(|job| job.spec.name.clone())
            .collect();
        let (paths, acls) = (self.ledger.clone(), self.acls);
        self.ticks.spawn(async move {
            if let Err(err) = ledger::ensure_parents(&client, &paths, names.iter(), acls).await {
                tracing::warn!(error = %error_chain(&err), "cannot create the run record parents; first claims will");
            }
        });
    }

    fn spawn_tick(
        &self,
        tick: DateTime<Utc>,
        due: Vec<Arc<JobConfig>>,
        view: watch::Receiver<LockView>,
    ) {
        let firing = self.clone();
        self.ticks
            .spawn(async move { firing.fire_tick(tick, due, view).await });
    }

    /// Claims the tick for every due job ahead of time, then starts the claimed ones at the tick.
    async fn fire_tick(
        self,
        tick: DateTime<Utc>,
        due: Vec<Arc<JobConfig>>,
        view: watch::Receiver<LockView>,
    ) {
        let snapshot = view.borrow().clone();
        let (true, Some(client), Some(token)) =
            (snapshot.may_fire, snapshot.client, snapshot.token)
        else {
            tracing::debug!(%tick, "not the owner (or disconnected): not firing");
            return;
        };
        if Utc::now() > tick + MISSED_AFTER {
            let jobs: Vec<&str> = due.iter().map(|job| job.spec.name.as_str()).collect();
            tracing::warn!(%tick, ?jobs, "tick missed: its time passed while this node could not fire");
            return;
        }
        // Every claim is on the wire before we sleep, so no fire waits on ZooKeeper.
        let claims: Vec<_> = due
            .iter()
            .map(|job| {
                let record = self.new_record(&job.spec.name, tick, token);
                let guarded = job.concurrency == Concurrency::Forbid;
                ledger::claim(&client, &self.ledger, record, guarded, self.acls)
            })
            .collect();
        // One deadline for the whole tick: claims were sent together, they are waited for together.
        let deadline = tokio::time::Instant::now() + until(tick) + CLAIM_LATE_LIMIT;
        let stopped = tokio::select! {
            biased;
            () = self.stop_firing.cancelled() => true,
            () = tokio::time::sleep(until(tick)) => false,
        };
        let mut pending = due.into_iter().zip(claims);
        if stopped {
            return self.withdraw_all(&client, pending, deadline).await;
        }
        while let Some((job, claim)) = pending.next() {
            // A claim that has not returned by the tick delays the fire rather than skipping it.
            let claimed = tokio::time::timeout_at(deadline, claim).await;
            let claim = match claimed {
                Ok(Ok(claim)) => claim,
                Ok(Err(ClaimError::RunAlive { .. })) => {
                    match self.claim_after_run_alive(&client, &job, tick, token).await {
                        Some(claim) => claim,
                        None => continue,
                    }
                }
                Ok(Err(ClaimError::AlreadyClaimed {
                    job,
                    scheduled_unix_ms,
                })) => {
                    self.log_claimed_by(&client, job, scheduled_unix_ms);
                    continue;
                }
                Ok(Err(ClaimError::NotOwner { token })) => {
                    tracing::warn!(job = %job.spec.name, %tick, token = token.0, "not firing: the epoch has moved past our token");
                    // Still the lock node's holder in our own eyes: let the lock re-verify.
                    let _ = self.fence_failed.send(token);
                    continue;
                }
                Ok(Err(err)) => {
                    tracing::warn!(job = %job.spec.name, %tick, error = %error_chain(&err), "not firing: tick not claimed");
                    continue;
                }
                Err(_) => {
                    tracing::warn!(job = %job.spec.name, %tick, limit = ?CLAIM_LATE_LIMIT, "not firing: the claim did not return");
                    continue;
                }
            };
            if self.stop_firing.is_cancelled() {
                self.withdraw(&client, &claim).await;
                return self.withdraw_all(&client, pending, deadline).await;
            }
            // A Lost between the claim and now wins; the claimed record stays for the next owner.
            let still = view.borrow().clone();
            if !still.may_fire || still.token != Some(token) {
                tracing::warn!(job = %job.spec.name, %tick, "not firing: the lock was lost after the claim");
                continue;
            }
            // Woken from a freeze (SIGSTOP, a VM pause) the view can still look like ownership for
            // a moment: a tick this late is not started.
            if Utc::now() > tick + MISSED_AFTER {
                tracing::warn!(job = %job.spec.name, %tick, "not firing: the claimed tick is too late to start");
                continue;
            }
            if job.concurrency == Concurrency::Replace && self.running.alive(&job.spec.name) {
                let within = job.spec.kill_grace + Duration::from_secs(1);
                if !self.running.replace(&job.spec.name, within).await {
                    tracing::warn!(job = %job.spec.name, %tick, "replaced run did not end within its grace; starting anyway");
                }
            }
            self.start_run(job, claim, client.clone(), view.clone(), false);
        }
    }

    /// A guarded claim found a run of the job alive. If it is this node's own previous run and it
    /// has ended by the tick, claim once more (a tick is skipped only if a run is really alive at
    /// its time); otherwise record the tick as skipped.
    async fn claim_after_run_alive(
        &self,
        client: &Client,
        job: &JobConfig,
        tick: DateTime<Utc>,
        token: FencingToken,
    ) -> Option<Claim> {
        let name = &job.spec.name;
        // One more round trip: if the guard was our own previous run's, it has been released.
        if !self.running.alive(name) {
            let record = self.new_record(name, tick, token);
            match ledger::claim(client, &self.ledger, record, true, self.acls).await {
                Ok(claim) => return Some(claim),
                Err(ClaimError::RunAlive { .. }) => {}
                Err(err) => {
                    tracing::warn!(job = %name, %tick, error = %error_chain(&err), "not firing: tick not claimed");
                    return None;
                }
            }
        }
        let reason = if self.running.alive(name) {
            "a run of the job is still alive on this node (concurrency = forbid)"
        } else {
            "a run of the job is alive on another node (concurrency = forbid)"
        };
        tracing::warn!(job = %name, %tick, reason, "tick skipped");
        let mut record = self.new_record(name, tick, token);
        record.status = RunStatus::Skipped;
        record.error = Some(reason.to_owned());
        if let Err(err) = ledger::claim(client, &self.ledger, record, false, self.acls).await {
            tracing::warn!(job = %name, %tick, error = %error_chain(&err), "skipped tick not recorded");
        }
        None
    }

    /// Withdraws every claim of a tick this stopping node will not fire.
    async fn withdraw_all<F>(
        &self,
        client: &Client,
        pending: impl Iterator<Item = (Arc<JobConfig>, F)>,
        deadline: tokio::time::Instant,
    ) where
        F: Future<Output = Result<Claim, ClaimError>>,
    {
        for (_, claim) in pending {
            if let Ok(Ok(claim)) = tokio::time::timeout_at(deadline, claim).await {
                self.withdraw(client, &claim).await;
            }
        }
    }

    async fn withdraw(&self, client: &Client, claim: &Claim) {
        match ledger::withdraw(client, &self.ledger, claim).await {
            Ok(()) => tracing::info!(path = claim.path, "claimed tick withdrawn for the handoff"),
            Err(err) => {
                tracing::warn!(path = claim.path, error = %error_chain(&err), "claimed tick not withdrawn")
            }
        }
    }

    /// Logs who holds a tick we could not claim, off the firing path.
    fn log_claimed_by(&self, client: &Client, job: JobName, scheduled_unix_ms: i64) {
        let path = self.ledger.record(&job, scheduled_unix_ms);
        let client = client.clone();
        self.ticks.spawn(async move {
            let read = tokio::time::timeout(Duration::from_secs(2), ledger::read_record(&client, &path)).await;
            let by = read.ok().flatten().map(|record| record.node_id.to_string());
            tracing::warn!(job = %job, tick = scheduled_unix_ms, claimed_by = by.as_deref().unwrap_or("?"), "not firing: tick already claimed");
        });
    }

    fn new_record(&self, job: &JobName, tick: DateTime<Utc>, token: FencingToken) -> RunRecord {
        let now = Utc::now().timestamp_millis();
        RunRecord::claimed(
            job,
            tick.timestamp_millis(),
            (&self.me.node_id, &self.me.ip),
            token,
            now,
        )
    }

    /// Starts a claimed run; returns a token cancelled once the run has ended and its record and
    /// guard are written.
    fn start_run(
        &self,
        job: Arc<JobConfig>,
        claim: Claim,
        client: Client,
        view: watch::Receiver<LockView>,
        resumed: bool,
    ) -> CancellationToken {
        let name = job.spec.name.clone();
        let tick = claim.record.scheduled_unix_ms;
        let cancel = self.stop_runs.child_token();
        let ended = CancellationToken::new();
        let run_id = claim.record.run_id.clone();
        let slot = RunSlot {
            job: name.clone(),
            cancel: cancel.clone(),
            ended: ended.clone(),
            on_lost: job.on_lost,
        };
        self.running.slots().insert(run_id.clone(), slot);
        let context = RunContext {
            run_id: claim.record.run_id.clone(),
            scheduled_at: DateTime::from_timestamp_millis(tick).unwrap_or_else(Utc::now),
            node: self.me.node_id.clone(),
            fencing_token: claim.record.fencing_token,
            attempt: claim.record.attempt,
            resumed,
        };
        let running = self.running.clone();
        let ledger_paths = self.ledger.clone();
        let ended_by_task = ended.clone();
        let firing = self.clone();
        self.runs.spawn(async move {
            // The process starts at once; the record says `running` a round trip later.
            let mut started = claim.clone();
            started.record.status = RunStatus::Running;
            started.record.started_unix_ms = Some(Utc::now().timestamp_millis());
            let (report, started) = tokio::join!(runner::run(&job.spec, &context, cancel), async {
                write_record(view.clone(), client.clone(), started).await
            });
            let mut finished = started;
            finish_record(&mut finished.record, &report);
            let current = view.borrow().client.clone().unwrap_or_else(|| client.clone());
            if let Err(err) = ledger::finish(&client, &current, &mut finished).await {
                tracing::warn!(status = ?finished.record.status, error = %error_chain(&err), "run record not updated");
            }
            // Only now, with the guard released, is the run gone as far as the cluster can tell.
            running.slots().remove(&run_id);
            ended_by_task.cancel();
            if retry_due(&finished.record, job.retries) {
                firing.retry(job, finished, view).await;
            } else {
                prune(view, client, &ledger_paths, &name, job.history).await;
            }
        });
        ended
    }

    /// Tries a failed or timed-out run again as its next attempt, after `retry_backoff` doubled
    /// per attempt — if this node still owns the lock then (the record is re-claimed under our
    /// current token, so a retry is at most once like any tick).
    async fn retry(&self, job: Arc<JobConfig>, failed: Claim, view: watch::Receiver<LockView>) {
        let attempt = failed.record.attempt;
        let backoff = job
            .retry_backoff
            .saturating_mul(1 << attempt.saturating_sub(1).min(16));
        tracing::info!(job = %job.spec.name, run_id = failed.record.run_id, attempt, retry_in = ?backoff, "run failed; retrying");
        tokio::select! {
            () = self.stop_firing.cancelled() => return,
            () = tokio::time::sleep(backoff) => {}
        }
        let snapshot = view.borrow().clone();
        let (true, Some(token), Some(current)) =
            (snapshot.may_fire, snapshot.token, snapshot.client)
        else {
            tracing::warn!(job = %job.spec.name, run_id = failed.record.run_id, "retry not started: this node no longer owns the lock");
            return;
        };
        let me = (&self.me.node_id, self.me.ip.as_str());
        let next = failed
            .record
            .next_attempt(me, token, Utc::now().timestamp_millis());
        let guarded = job.concurrency == Concurrency::Forbid;
        match ledger::reclaim(
            &current,
            &self.ledger,
            next,
            failed.version,
            guarded,
            self.acls,
        )
        .await
        {
            Ok(claim) => {
                self.start_run(job, claim, current, view, false);
            }
            Err(err) => {
                tracing::warn!(job = %job.spec.name, error = %error_chain(&err), "retry not started")
            }
        }
    }
}

/// Writes a claimed record (compare-and-set on its version) with the current session's client,
/// which may be newer than the one that claimed it, or else with the claiming one — which this
/// task keeps alive, so a run that ends after the daemon released the lock is still recorded.
/// Returns the claim with its new version.
async fn write_record(
    view: watch::Receiver<LockView>,
    claiming: Client,
    mut claim: Claim,
) -> Claim {
    let client = view.borrow().client.clone().unwrap_or(claiming);
    if let Err(err) = ledger::update(&client, &mut claim).await {
        tracing::warn!(status = ?claim.record.status, error = %error_chain(&err), "run record not updated");
    }
    claim
}

/// Keeps the job's newest `keep` records; a failure is logged and retried after the next run.
async fn prune(
    view: watch::Receiver<LockView>,
    claiming: Client,
    paths: &LedgerPaths,
    job: &JobName,
    keep: usize,
) {
    let client = view.borrow().client.clone().unwrap_or(claiming);
    match ledger::prune(&client, paths, job, keep).await {
        Ok(0) => {}
        Ok(deleted) => tracing::debug!(job = %job, deleted, keep, "old run records pruned"),
        Err(err) => {
            tracing::warn!(job = %job, error = %error_chain(&err), "pruning run records failed")
        }
    }
}

/// Whether a finished run is tried again: it failed or timed out, and attempts remain.
fn retry_due(record: &RunRecord, retries: u32) -> bool {
    matches!(record.status, RunStatus::Failed | RunStatus::TimedOut) && record.attempt <= retries
}

/// The record's end, from the runner's report.
fn finish_record(record: &mut RunRecord, report: &runner::RunReport) {
    let started = report.started_at.timestamp_millis();
    let duration = i64::try_from(report.duration.as_millis()).unwrap_or(i64::MAX);
    record.started_unix_ms = Some(started);
    record.finished_unix_ms = Some(started.saturating_add(duration));
    (record.status, record.exit_code, record.signal, record.error) = match &report.outcome {
        RunOutcome::Exited { code: 0 } => (RunStatus::Succeeded, Some(0), None, None),
        RunOutcome::Exited { code } => (RunStatus::Failed, Some(*code), None, None),
        RunOutcome::Signaled { signal } => (RunStatus::Failed, None, Some(*signal), None),
        RunOutcome::TimedOut => (RunStatus::TimedOut, None, None, None),
        RunOutcome::Cancelled => (RunStatus::Cancelled, None, None, None),
        RunOutcome::FailedToStart { error } | RunOutcome::WaitFailed { error } => {
            (RunStatus::Failed, None, None, Some(error.clone()))
        }
    };
}
