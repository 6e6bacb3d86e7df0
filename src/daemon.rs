//! `zkcron run`: wiring the lock driver, the fire machine and its driver into a daemon.
//!
//! Owns: starting the two drivers with their channels, turning reload requests into a re-read
//! schedule, and the start and stop log lines.
//! Must not: contain policy — the lock machine decides about the lock, the fire machine about
//! firing (including the stop order), and the drivers only perform.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use chrono::Utc;
use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;

use crate::config::{self, Config, JobConfig};
use crate::drift;
use crate::fire::FireMachine;
use crate::fire::driver::{self as fire_driver, FireSettings, LockTask};
use crate::fire::machine::Me;
use crate::http::{BindError, HttpState};
use crate::layout::ControlPaths;
use crate::layout::LedgerPaths;
use crate::layout::LockPaths;
use crate::lock::clock_watch::ClockSettings;
use crate::lock::driver::{self, DriverError, Heard, LockCommand, LockSettings};
use crate::lock::node::OwnerInfo;
use crate::metrics::Metrics;
use crate::report::error_chain;
use crate::run::Launcher;
use crate::view::NodeView;

/// Why the daemon stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum DaemonError {
    #[error(transparent)]
    Lock(#[from] DriverError),
    #[error(transparent)]
    Http(#[from] BindError),
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
    /// How every job's process is made (the binary's own launcher for `zkcron run`).
    pub launcher: Launcher,
}

/// Runs until `shutdown` is cancelled; a message on `reloads` re-reads the schedule file.
///
/// # Errors
/// The lock could not run (a duplicate node_id); ZooKeeper outages are waited out.
pub async fn run(
    mut config: Config,
    settings: DaemonSettings,
    shutdown: CancellationToken,
    reloads: mpsc::UnboundedReceiver<()>,
) -> Result<(), DaemonError> {
    let zk = config.zookeeper.settings();
    let paths = LockPaths::new(&config.lock.root, &config.lock.name);
    let heard = Arc::new(Heard::default());
    let metrics = Arc::new(Metrics::new());
    let (view, view_rx) = watch::channel(NodeView::default());
    // Bound before anything else starts: a taken port fails the start, not a running node.
    with_launcher(&mut config, &settings.launcher);
    let config = Arc::new(config);
    let jobs = config.jobs.clone();
    let (jobs_tx, jobs_rx) = mpsc::unbounded_channel();
    let (loaded_tx, loaded) = watch::channel(Arc::clone(&config));
    let http = match config.http.clone() {
        Some(http) => {
            let state = HttpState {
                metrics: Arc::clone(&metrics),
                view: view_rx,
                config: loaded,
                token: http.token,
                tokens: Arc::new(http.tokens),
                me: settings.me.node_id.clone(),
                heard: Arc::clone(&heard),
            };
            Some(crate::http::start(http.listen, state, shutdown.child_token()).await?)
        }
        None => None,
    };
    let lock = LockSettings {
        paths: paths.clone(),
        me: OwnerInfo {
            schedule: Some(drift::fingerprint(jobs.iter().map(Arc::as_ref))),
            ..settings.me.clone()
        },
        takeover_delay: config.lock.takeover_delay,
        jitter: settings.jitter,
        heard: Arc::clone(&heard),
        clock: ClockSettings {
            max_offset: config.lock.max_clock_offset,
            metrics: Some(Arc::clone(&metrics)),
        },
    };
    let (updates_tx, updates) = mpsc::unbounded_channel();
    let (commands, mut received) = mpsc::unbounded_channel();
    let commands_for_reload = commands.clone();
    let release = CancellationToken::new();
    let handle = tokio::spawn({
        let release = release.clone();
        async move { driver::run(&zk, &lock, &release, &updates_tx, &mut received).await }
    });
    let lock_task = LockTask {
        handle,
        release,
        updates,
        commands,
    };
    let fire = FireSettings {
        ledger: LedgerPaths::new(&paths),
        group: paths.clone(),
        control: ControlPaths::new(&paths),
        me: settings.me.node_id.clone(),
        acls: config.zookeeper.settings().acls(),
        metrics: Arc::clone(&metrics),
        view,
    };
    let me = Me {
        node_id: settings.me.node_id.clone(),
        ip: settings.me.ip.clone(),
    };
    let machine = FireMachine::new(me, config.lock.claim_ahead, &jobs, Utc::now());
    let reloader = tokio::spawn(reload_on_request(
        settings.config_path.clone(),
        config,
        settings.launcher.clone(),
        reloads,
        Reloaded {
            jobs: jobs_tx,
            loaded: loaded_tx,
            lock: commands_for_reload,
        },
    ));
    tracing::info!(jobs = jobs.len(), node_id = %settings.me.node_id, "zkcron started");
    let result = fire_driver::run(machine, fire, lock_task, jobs_rx, shutdown).await;
    reloader.abort();
    if let Some(http) = http {
        // The listener stops with the shutdown token; its handlers are bounded by their requests.
        let _ = tokio::time::timeout(Duration::from_secs(2), http).await;
    }
    tracing::info!("zkcron stopped");
    Ok(result?)
}

/// The schedule's jobs, shared by the fire machine, the reloader and the HTTP API.
type Jobs = Vec<Arc<JobConfig>>;

/// Sets how every job's process is made. Each job is still only `config`'s, so this changes it
/// in place: one copy of each job lives on.
fn with_launcher(config: &mut Config, launcher: &Launcher) {
    for job in &mut config.jobs {
        Arc::make_mut(&mut Arc::make_mut(job).spec).launcher = launcher.clone();
    }
}

/// Re-reads the schedule on every request and passes its jobs on; a broken file keeps the
/// current schedule.
async fn reload_on_request(
    path: PathBuf,
    mut current: Arc<Config>,
    launcher: Launcher,
    mut requests: mpsc::UnboundedReceiver<()>,
    to: Reloaded,
) {
    while let Some(()) = requests.recv().await {
        if let Some(mut new) = reload(&path, &current) {
            with_launcher(&mut new, &launcher);
            let hash = drift::fingerprint(new.jobs.iter().map(Arc::as_ref));
            let _ = to.lock.send(LockCommand::Schedule(hash));
            let jobs = new.jobs.clone();
            current = Arc::new(new);
            // Only the HTTP API reads it, when it is on.
            to.loaded.send_replace(Arc::clone(&current));
            if to.jobs.send(jobs).is_err() {
                return;
            }
        }
    }
}

/// Where a reloaded schedule goes.
struct Reloaded {
    /// The fire machine.
    jobs: mpsc::UnboundedSender<Jobs>,
    /// The HTTP API.
    loaded: watch::Sender<Arc<Config>>,
    /// The member node's schedule fingerprint.
    lock: mpsc::UnboundedSender<LockCommand>,
}

/// Re-reads the schedule; on any problem keeps the current one and says why.
fn reload(path: &std::path::Path, current: &Config) -> Option<Config> {
    match config::load(path) {
        Ok(new) => {
            if new.zookeeper != current.zookeeper
                || new.lock != current.lock
                || new.http != current.http
            {
                tracing::warn!(
                    path = %path.display(),
                    "[zookeeper], [lock] and [http] changes take effect only after a restart; jobs are reloaded"
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
