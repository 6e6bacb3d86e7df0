//! `zkcron run`: wiring the lock, the fire queue and the runner into a daemon.
//!
//! Owns: owner-gated firing (only the lock owner fires, after proving ownership for the tick),
//! the on_locked/on_lost policy, schedule reloads, and the shutdown order: stop firing → release
//! the lock (peers take over at once) → stop running jobs within their grace → exit.
//! Must not: contain logic that belongs to the lock machine, the ledger, the schedule or the
//! runner; it only connects them.

mod fire_queue;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use chrono::{DateTime, Utc};
use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::config::{self, Config, JobConfig, OnLost};
use crate::ids::{FencingToken, JobName, NodeId};
use crate::lock::LockEvent;
use crate::lock::driver::{self, DriverError, LockPaths, LockSettings, LockView};
use crate::lock::node::OwnerInfo;
use crate::report::error_chain;
use crate::runner::{self, RunContext};
use fire_queue::FireQueue;

/// The ownership proof is sent this long before a tick, so that its round trip (a write through
/// the ensemble's log) does not delay the fire.
const PROOF_AHEAD: Duration = Duration::from_millis(100);
/// A proof that has not returned by the tick delays the fire, up to this long; then the tick is
/// not fired (we cannot show we own the lock).
const PROOF_LATE_LIMIT: Duration = Duration::from_secs(2);
/// A tick whose time passed longer ago than this (the process was stopped or starved) is not
/// fired late; it is logged as missed.
const MISSED_AFTER: Duration = Duration::from_secs(1);
/// Sleep at most this long at once, so a wall-clock step (NTP, suspend) is noticed in time.
const MAX_SLEEP: Duration = Duration::from_secs(30);

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
    let mut driver = tokio::spawn({
        let lock_shutdown = lock_shutdown.clone();
        async move { driver::run(&zk, &lock, &lock_shutdown, &events_tx, &view_tx).await }
    });

    let firing = Firing {
        epoch_path: paths.epoch,
        node: settings.me.node_id.clone(),
        running: Running::default(),
        tracker: TaskTracker::new(),
        stop_firing: CancellationToken::new(),
        stop_runs: CancellationToken::new(),
    };
    let mut jobs: Vec<Arc<JobConfig>> = config.jobs.iter().cloned().map(Arc::new).collect();
    let mut current = config;
    let mut last_tick: Option<DateTime<Utc>> = None;
    let mut queue = FireQueue::new(&jobs, Utc::now());
    let mut ready = false;
    tracing::info!(jobs = jobs.len(), node_id = %settings.me.node_id, "zkcron started");

    let exit = loop {
        let wake = queue.next_tick().map(|tick| tick - PROOF_AHEAD);
        let sleep_for = wake.map_or(MAX_SLEEP, |wake| until(wake).min(MAX_SLEEP));
        tokio::select! {
            biased;
            () = shutdown.cancelled() => break Ok(()),
            joined = &mut driver => break driver_exit(joined),
            Some(event) = events.recv() => firing.on_lock_event(&event),
            Some(()) = reloads.recv() => {
                if let Some(new) = reload(&settings.config_path, &current) {
                    jobs = new.jobs.iter().cloned().map(Arc::new).collect();
                    let after = last_tick.map_or_else(Utc::now, |last| last.max(Utc::now()));
                    queue = FireQueue::new(&jobs, after);
                    current = new;
                }
            }
            Ok(()) = view.changed(), if !ready => {
                if view.borrow().connected {
                    ready = true;
                    notify_systemd(&[sd_notify::NotifyState::Ready]);
                }
            }
            () = tokio::time::sleep(sleep_for) => {
                if wake.is_some_and(|wake| Utc::now() >= wake) {
                    if let Some((tick, due)) = queue.pop_tick(Utc::now()) {
                        last_tick = Some(tick);
                        firing.spawn_tick(tick, due, view.clone());
                    }
                }
            }
        }
    };

    // Stop firing, then hand the lock over at once, then stop the jobs within their grace.
    // systemd reads STOPPING=1 as "beginning its shutdown".
    notify_systemd(&[sd_notify::NotifyState::Stopping]);
    firing.stop_firing.cancel();
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
    firing.tracker.close();
    firing.tracker.wait().await;
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

/// Runs alive on this node, by job.
#[derive(Debug, Clone, Default)]
struct Running(Arc<Mutex<HashMap<JobName, RunSlot>>>);

#[derive(Debug)]
struct RunSlot {
    cancel: CancellationToken,
    on_lost: OnLost,
}

impl Running {
    fn slots(&self) -> std::sync::MutexGuard<'_, HashMap<JobName, RunSlot>> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Everything a tick needs to fire.
#[derive(Clone)]
struct Firing {
    epoch_path: String,
    node: NodeId,
    running: Running,
    tracker: TaskTracker,
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
                for (job, slot) in self.running.slots().iter() {
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

    fn spawn_tick(
        &self,
        tick: DateTime<Utc>,
        due: Vec<Arc<JobConfig>>,
        view: watch::Receiver<LockView>,
    ) {
        let firing = self.clone();
        self.tracker
            .spawn(async move { firing.fire_tick(tick, due, view).await });
    }

    /// Proves ownership ahead of the tick, then starts the due jobs at the tick.
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
        let proof = crate::ledger::prove_ownership(&client, &self.epoch_path, token);
        tokio::select! {
            () = self.stop_firing.cancelled() => return,
            () = tokio::time::sleep(until(tick)) => {}
        }
        let proved = tokio::select! {
            () = self.stop_firing.cancelled() => return,
            proved = tokio::time::timeout(PROOF_LATE_LIMIT, proof) => proved,
        };
        match proved {
            Ok(Ok(())) => {}
            Ok(Err(err)) => {
                tracing::warn!(%tick, error = %error_chain(&err), "not firing: ownership not proved");
                return;
            }
            Err(_) => {
                tracing::warn!(%tick, limit = ?PROOF_LATE_LIMIT, "not firing: ownership proof did not return");
                return;
            }
        }
        // A Lost between the proof and now wins: the proof is only as fresh as its send.
        let still = view.borrow().clone();
        if !still.may_fire || still.token != Some(token) {
            tracing::warn!(%tick, "not firing: the lock was lost after the proof");
            return;
        }
        for job in due {
            self.start_run(job, tick, token);
        }
    }

    fn start_run(&self, job: Arc<JobConfig>, tick: DateTime<Utc>, token: FencingToken) {
        let name = job.spec.name.clone();
        let cancel = self.stop_runs.child_token();
        {
            let mut slots = self.running.slots();
            if slots.contains_key(&name) {
                tracing::warn!(job = %name, %tick, "previous run still running on this node: tick skipped");
                return;
            }
            slots.insert(
                name.clone(),
                RunSlot {
                    cancel: cancel.clone(),
                    on_lost: job.on_lost,
                },
            );
        }
        let context = RunContext {
            run_id: format!("{name}-{}", tick.timestamp_millis()),
            scheduled_at: tick,
            node: self.node.clone(),
            fencing_token: token,
            attempt: 1,
            resumed: false,
        };
        let running = self.running.clone();
        self.tracker.spawn(async move {
            runner::run(&job.spec, &context, cancel).await;
            running.slots().remove(&name);
        });
    }
}
