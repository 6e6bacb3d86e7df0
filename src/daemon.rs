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
use crate::ensemble_clock::EnsembleClock;
use crate::fire::FireMachine;
use crate::fire::driver::{
    self as fire_driver, Departed, FireSettings, FleetFormat, LockTask, notify_systemd,
};
use crate::fire::machine::Me;
use crate::groups::balance::GroupSpec;
use crate::groups::placement::{PlacedGroup, Placement};
use crate::http::{BindError, HttpState};
use crate::layout::ControlPaths;
use crate::layout::LedgerPaths;
use crate::layout::LockPaths;
use crate::ledger::postgres::PgStore;
use crate::lock::clock_watch::ClockSettings;
use crate::lock::driver::MemberVerdict;
use crate::lock::driver::{self, DriverError, Heard, LockCommand, LockRole, LockSettings};
use crate::lock::node::{DelayedStoreKind, OwnerInfo, ReloadNote, ScheduleHash};
use crate::metrics::Metrics;
use crate::output_store::OutputStore;
use crate::reload::{self, Changes, RELOAD_FORMAT, ReloadAnswer, ReloadOutcome, ReloadRequest};
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
    #[error(transparent)]
    Telemetry(#[from] crate::telemetry::TelemetryError),
    #[error("[delayed] store = \"postgres\": the DSN cannot be used")]
    DelayedStore(#[source] crate::ledger::postgres::StoreError),
    #[error("job {job:?} runs as user {user:?}, and {why}")]
    CannotRunAs {
        job: String,
        user: String,
        why: String,
    },
}

/// The delayed queue's PostgreSQL store, with `[delayed] store = "postgres"`: not connected
/// yet (its first request connects and migrates), so the ticks fire while the database is away.
fn delayed_store(config: &Config, paths: &LockPaths) -> Result<Option<Arc<PgStore>>, DaemonError> {
    let config::DelayedStore::Postgres {
        dsn: Some(dsn),
        tls,
    } = &config.delayed
    else {
        return Ok(None);
    };
    let store = PgStore::configured(dsn.expose(), &paths.dir, tls.as_ref())
        .map_err(DaemonError::DelayedStore)?;
    tracing::info!(store = ?store, "the delayed queue is kept in PostgreSQL");
    Ok(Some(Arc::new(store)))
}

/// The first job whose `user` this daemon cannot become.
fn users_out_of_reach(config: &Config) -> Result<(), DaemonError> {
    for job in &config.jobs {
        let Some(user) = job.spec.user.as_deref() else {
            continue;
        };
        if let Some(why) = crate::runner::cannot_run_as(user) {
            return Err(DaemonError::CannotRunAs {
                job: job.spec.name.to_string(),
                user: user.name.clone(),
                why,
            });
        }
    }
    Ok(())
}

/// What `run` needs besides the schedule.
#[derive(Debug, Clone)]
pub struct DaemonSettings {
    /// Re-read on every reload request.
    pub config_path: PathBuf,
    /// `--node-id`: over `[lock] node_id` of the file at every reload too.
    pub node_id: Option<crate::ids::NodeId>,
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
    // Said at the start, not found at a job's first run.
    users_out_of_reach(&config)?;
    let zk = config.zookeeper.settings();
    let paths = config.lock.paths();
    let delayed_store = delayed_store(&config, &paths)?;
    let heard = Arc::new(Heard::default());
    let metrics = Arc::new(Metrics::new());
    let (view, view_rx) = watch::channel(NodeView::default());
    with_launcher(&mut config, &settings.launcher);
    let config = Arc::new(config);
    let jobs = config.jobs.clone();
    let (loaded_tx, loaded) = watch::channel(Arc::clone(&config));
    let outputs = open_output_store(&config.output).await;
    // Bound before anything else starts: a taken port fails the start, not a running node.
    let http = match config.http.clone() {
        Some(http) => {
            let state = HttpState {
                metrics: Arc::clone(&metrics),
                view: view_rx.clone(),
                config: loaded,
                token: http.token,
                tokens: Arc::new(http.tokens),
                me: settings.me.node_id.clone(),
                heard: Arc::clone(&heard),
                console: Arc::default(),
                events: Arc::default(),
                outputs: outputs.clone(),
                stop: shutdown.child_token(),
            };
            Some(crate::http::start(http.listen, state, shutdown.child_token()).await?)
        }
        None => None,
    };
    let api = http
        .as_ref()
        .map(|(_, bound)| advertised(*bound, &settings.me.ip).into_boxed_str());
    let http = http.map(|(served, _)| served);
    // The schedule's fingerprint (a name and a hash per job) goes to the default group's lock
    // alone, which publishes it in the member node; a copy kept here or given to every group
    // would be one more per group for the node's life (issue 32).
    let me = OwnerInfo {
        schedule: None,
        tags: config.node.tags.clone(),
        api,
        delayed_store: Some(match config.delayed {
            config::DelayedStore::ZooKeeper => DelayedStoreKind::Zookeeper,
            config::DelayedStore::Postgres { .. } => DelayedStoreKind::Postgres,
        }),
        ..settings.me.clone()
    };
    if let Some(outputs) = &outputs {
        tokio::spawn(Arc::clone(outputs).keep_pruning(shutdown.child_token()));
    }
    let mut schedule = Box::new(drift::published(
        jobs.iter().map(Arc::as_ref),
        &config.per_host_jobs,
    ));
    schedule.loaded_unix_ms = Some(Utc::now().timestamp_millis());
    let verdict = Arc::new(watch::Sender::new(MemberVerdict::default()));
    // One set of HTTP clients for the node: every group's deliveries share its pools.
    let deliveries = Arc::new(crate::delivery::Deliveries::new(Arc::clone(&metrics)));
    warm(&deliveries, &jobs);
    let notifier = Arc::new(crate::notify::Notifier::new(Arc::clone(&metrics)));
    let fleet = Arc::new(FleetFormat::default());
    let departed = Arc::new(Departed::default());
    let ensemble = Arc::new(EnsembleClock::default());
    // Built off the runtime's workers: the SDK's batch processor starts a thread of its own.
    let telemetry = match config.telemetry.clone() {
        Some(telemetry) => {
            let node = settings.me.node_id.clone();
            let built = tokio::task::spawn_blocking(move || {
                crate::telemetry::Telemetry::start(&telemetry, &node)
            })
            .await;
            match built {
                Ok(built) => Some(Arc::new(built?)),
                Err(err) => {
                    tracing::error!(error = %err, "telemetry: the exporter's build did not finish; no spans are sent");
                    None
                }
            }
        }
        None => None,
    };
    let wiring = Wiring {
        zk: &zk,
        base: &paths,
        config: &config,
        settings: &settings,
        me: &me,
        jobs: &jobs,
        deliveries: &deliveries,
        notifier: &notifier,
        fleet: &fleet,
        departed: &departed,
        ensemble: &ensemble,
        telemetry: telemetry.as_ref(),
        outputs: outputs.as_ref(),
        delayed_store: delayed_store.as_ref(),
    };
    let member = Shared {
        heard,
        metrics: Arc::clone(&metrics),
        view,
        member_duties: true,
        schedule: Some(schedule),
    };
    let (units, default_task, named) = wiring.start_units(member, &verdict, &shutdown);
    let placement = config
        .grouped()
        .then(|| wiring.start_placement(&units, &metrics, view_rx.clone(), &shutdown));
    let requests = reload_requests(reloads, &shutdown);
    let reloader = tokio::spawn(reload_on_request(
        (settings.config_path.clone(), settings.node_id.clone()),
        config,
        settings.launcher.clone(),
        requests,
        Reloaded {
            units: units
                .iter()
                .map(|unit| (unit.jobs.clone(), unit.commands.clone()))
                .collect(),
            loaded: loaded_tx,
            deliveries: Arc::clone(&deliveries),
        },
    ));
    tracing::info!(jobs = jobs.len(), node_id = %settings.me.node_id, "zkcron started");
    let running = Running {
        default_task,
        named,
        placement,
        reloader,
        http,
        telemetry,
    };
    running.until_stopped().await
}

/// What runs while the daemon does, as it is waited for and stopped.
struct Running {
    /// The default group's fire driver: its end is the daemon's.
    default_task: FireTask,
    named: Vec<FireTask>,
    placement: Option<tokio::task::JoinHandle<()>>,
    reloader: tokio::task::JoinHandle<()>,
    http: Option<tokio::task::JoinHandle<()>>,
    /// Flushed once every run has ended.
    telemetry: Option<Arc<crate::telemetry::Telemetry>>,
}

impl Running {
    /// Waits for the fire drivers to end (the shutdown ends them), then stops the rest.
    async fn until_stopped(self) -> Result<(), DaemonError> {
        let result = self.default_task.await;
        for task in self.named {
            if let Err(err) = task.await {
                tracing::error!(error = %err, "a group's fire driver failed");
            }
        }
        if let Some(placement) = self.placement {
            placement.abort();
        }
        self.reloader.abort();
        if let Some(http) = self.http {
            // The listener stops with the shutdown token; its handlers are bounded by their
            // requests.
            let _ = tokio::time::timeout(Duration::from_secs(2), http).await;
        }
        if let Some(telemetry) = self.telemetry {
            // Blocking, bounded by the exporter's own flush timeout.
            let _ = tokio::task::spawn_blocking(move || telemetry.shutdown()).await;
        }
        tracing::info!("zkcron stopped");
        match result {
            Ok(result) => Ok(result?),
            Err(err) => {
                tracing::error!(error = %err, "the default group's fire driver failed");
                Ok(())
            }
        }
    }
}

/// What every group's unit is made from.
struct Wiring<'a> {
    zk: &'a crate::ensemble::ZkSettings,
    base: &'a LockPaths,
    config: &'a Config,
    settings: &'a DaemonSettings,
    me: &'a OwnerInfo,
    jobs: &'a Jobs,
    deliveries: &'a Arc<crate::delivery::Deliveries>,
    notifier: &'a Arc<crate::notify::Notifier>,
    fleet: &'a Arc<FleetFormat>,
    departed: &'a Arc<Departed>,
    /// The clock every group schedules by (the default group's clock check corrects it).
    ensemble: &'a Arc<EnsembleClock>,
    /// Where the runs' spans go, with `[telemetry]`.
    telemetry: Option<&'a Arc<crate::telemetry::Telemetry>>,
    /// Where the runs' whole output is kept, with `[output]` or systemd's state directory.
    outputs: Option<&'a Arc<OutputStore>>,
    /// Where the default group's delayed queue is kept, with `[delayed] store = "postgres"`.
    delayed_store: Option<&'a Arc<PgStore>>,
}

/// What a unit shares with the node, or keeps to itself.
struct Shared {
    heard: Arc<Heard>,
    metrics: Arc<Metrics>,
    view: watch::Sender<NodeView>,
    member_duties: bool,
    /// The schedule's fingerprint, for the member node: the default group's lock's only.
    schedule: Option<Box<ScheduleHash>>,
}

/// One lock group's lock driver and fire driver, as the daemon steers them.
struct Unit {
    group: Option<String>,
    jobs: mpsc::UnboundedSender<Jobs>,
    commands: mpsc::UnboundedSender<LockCommand>,
}

impl Unit {
    fn placed(&self, base: &LockPaths, config: &Config) -> PlacedGroup {
        let (name, requires, lock, control) = match &self.group {
            None => (
                crate::ids::DEFAULT_GROUP.to_owned(),
                Default::default(),
                base.clone(),
                ControlPaths::new(base),
            ),
            Some(name) => (
                name.clone(),
                config
                    .groups
                    .iter()
                    .find(|g| g.name == *name)
                    .map(|g| g.requires.clone())
                    .unwrap_or_default(),
                base.group(name),
                ControlPaths::of_group(base, name),
            ),
        };
        PlacedGroup {
            spec: GroupSpec { name, requires },
            lock,
            control,
            commands: self.commands.clone(),
        }
    }
}

type FireTask = tokio::task::JoinHandle<Result<(), DriverError>>;

impl Wiring<'_> {
    /// Starts the default group's unit with what it shares with the node (`member`: the member
    /// duties), then each named group's with its own; a named group's lock follows the clock
    /// `verdict` of the default one's. Returns the units and the fire tasks, the default group's
    /// first.
    fn start_units(
        &self,
        member: Shared,
        verdict: &Arc<watch::Sender<MemberVerdict>>,
        shutdown: &CancellationToken,
    ) -> (Vec<Unit>, FireTask, Vec<FireTask>) {
        let metrics = Arc::clone(&member.metrics);
        let (default_unit, default_task) = self.start(
            None,
            LockRole::Member {
                placed: self.config.grouped(),
                verdict: Arc::clone(verdict),
            },
            member,
            shutdown.clone(),
        );
        let mut units = vec![default_unit];
        let mut named = Vec::new();
        for group in &self.config.groups {
            let (private_view, _) = watch::channel(NodeView::default());
            let (unit, task) = self.start(
                Some(group.name.clone()),
                LockRole::Group {
                    verdict: verdict.subscribe(),
                },
                Shared {
                    heard: Arc::new(Heard::default()),
                    metrics: Arc::clone(&metrics),
                    view: private_view,
                    member_duties: false,
                    schedule: None,
                },
                shutdown.clone(),
            );
            units.push(unit);
            named.push(task);
        }
        (units, default_task, named)
    }

    /// Starts placing the groups on the default group's session (`view`).
    fn start_placement(
        &self,
        units: &[Unit],
        metrics: &Arc<Metrics>,
        view: watch::Receiver<NodeView>,
        shutdown: &CancellationToken,
    ) -> tokio::task::JoinHandle<()> {
        let placed = Placement {
            me: self.settings.me.node_id.clone(),
            base: self.base.clone(),
            groups: units
                .iter()
                .map(|unit| unit.placed(self.base, self.config))
                .collect(),
            settle: self.config.lock.rebalance_after,
            takeover_delay: self.config.lock.takeover_delay,
            metrics: Arc::clone(metrics),
        };
        tokio::spawn(placed.run(session_of(view), shutdown.clone()))
    }

    /// Starts the lock driver and the fire driver of `group` (`None`: the default group).
    fn start(
        &self,
        group: Option<String>,
        role: LockRole,
        shared: Shared,
        shutdown: CancellationToken,
    ) -> (Unit, FireTask) {
        let paths = match &group {
            None => self.base.clone(),
            Some(name) => self.base.group(name),
        };
        let control = match &group {
            None => ControlPaths::new(self.base),
            Some(name) => ControlPaths::of_group(self.base, name),
        };
        let lock = LockSettings {
            paths: paths.clone(),
            me: OwnerInfo {
                schedule: shared.schedule,
                ..self.me.clone()
            },
            takeover_delay: self.config.lock.takeover_delay,
            jitter: self.settings.jitter,
            heard: shared.heard,
            clock: ClockSettings {
                max_offset: self.config.lock.max_clock_offset,
                metrics: shared.member_duties.then(|| Arc::clone(&shared.metrics)),
                ensemble: Arc::clone(self.ensemble),
            },
            role,
            // The fleet's one queue, each named group's owner claiming behind its own fence.
            delayed_store: self.delayed_store.map(|store| match &group {
                None => Arc::clone(store),
                Some(_) => Arc::new(store.fenced_by(&paths.dir)),
            }),
        };
        let (updates_tx, updates) = mpsc::unbounded_channel();
        let (commands, mut received) = mpsc::unbounded_channel();
        let release = CancellationToken::new();
        let zk = self.zk.clone();
        let handle = tokio::spawn({
            let release = release.clone();
            async move { driver::run(&zk, &lock, &release, &updates_tx, &mut received).await }
        });
        let lock_task = LockTask {
            handle,
            release,
            updates,
            commands: commands.clone(),
        };
        let fire = FireSettings {
            ledger: LedgerPaths::fenced_by(self.base, &paths),
            group: paths,
            control,
            me: self.settings.me.node_id.clone(),
            metrics: shared.metrics,
            view: shared.view,
            member_duties: shared.member_duties,
            group_name: group
                .clone()
                .unwrap_or_else(|| crate::ids::DEFAULT_GROUP.to_owned()),
            deliveries: Arc::clone(self.deliveries),
            notifier: Arc::clone(self.notifier),
            fleet: Arc::clone(self.fleet),
            departed: Arc::clone(self.departed),
            clock: Arc::clone(self.ensemble),
            audit_keep: self.config.audit.keep,
            telemetry: self.telemetry.cloned(),
            outputs: self.outputs.cloned(),
        };
        let me = Me {
            node_id: self.settings.me.node_id.clone(),
            ip: self.settings.me.ip.clone(),
            trace_seed: self.telemetry.map(|telemetry| telemetry.seed()),
        };
        let machine = FireMachine::for_group(
            me,
            group.clone(),
            self.config.lock.claim_ahead,
            self.jobs,
            Utc::now(),
        )
        .with_node_tags(self.config.node.tags.clone(), Utc::now());
        let (jobs, jobs_rx) = mpsc::unbounded_channel();
        let task = tokio::spawn(fire_driver::run(
            machine, fire, lock_task, jobs_rx, shutdown,
        ));
        (
            Unit {
                group,
                jobs,
                commands,
            },
            task,
        )
    }
}

/// The default group's session, as the placement follows it.
fn session_of(
    mut view: watch::Receiver<NodeView>,
) -> watch::Receiver<Option<crate::ledger::Ledger>> {
    let (tx, rx) = watch::channel(view.borrow().client.clone());
    tokio::spawn(async move {
        while view.changed().await.is_ok() {
            let client = view.borrow_and_update().client.clone();
            tx.send_if_modified(|old| {
                let same = match (old.as_ref(), client.as_ref()) {
                    (Some(a), Some(b)) => a.session() == b.session(),
                    (None, None) => true,
                    _ => false,
                };
                if !same {
                    *old = client;
                }
                !same
            });
            if tx.is_closed() {
                return;
            }
        }
    });
    rx
}

/// Every way a reload is asked for, as one stream: SIGHUP (`signals`, answered in the log
/// alone) and `zkcron reload` on this daemon's socket (answered to the asker too).
fn reload_requests(
    mut signals: mpsc::UnboundedReceiver<()>,
    shutdown: &CancellationToken,
) -> mpsc::UnboundedReceiver<ReloadRequest> {
    let (requests, merged) = mpsc::unbounded_channel();
    if let Err(err) = reload::listener::listen(requests.clone(), shutdown.child_token()) {
        tracing::warn!(
            error = %err,
            socket = %reload::listener::socket_name(std::process::id()),
            "cannot listen for `zkcron reload`; SIGHUP still reloads"
        );
    }
    tokio::spawn(async move {
        while signals.recv().await.is_some() {
            if requests.send(ReloadRequest::unanswered()).is_err() {
                return;
            }
        }
    });
    merged
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
/// current schedule. systemd hears of each reload (`RELOADING=1`, then `READY=1`), and a request
/// that waits for it gets the outcome.
async fn reload_on_request(
    (path, node_id): (PathBuf, Option<crate::ids::NodeId>),
    mut current: Arc<Config>,
    launcher: Launcher,
    mut requests: mpsc::UnboundedReceiver<ReloadRequest>,
    to: Reloaded,
) {
    while let Some(request) = requests.recv().await {
        let mut reloading = vec![sd_notify::NotifyState::Reloading];
        // systemd 253+ (`Type=notify-reload`) takes a reload's start only with its time.
        reloading.extend(sd_notify::NotifyState::monotonic_usec_now().ok());
        notify_systemd(&reloading);
        let outcome = match reload(&path) {
            Ok(mut new) => {
                if node_id.is_some() {
                    new.lock.node_id.clone_from(&node_id);
                }
                let changes = Changes::between(&current, &new);
                with_launcher(&mut new, &launcher);
                let mut hash =
                    drift::published(new.jobs.iter().map(Arc::as_ref), &new.per_host_jobs);
                let loaded_unix_ms = Utc::now().timestamp_millis();
                hash.loaded_unix_ms = Some(loaded_unix_ms);
                let enabled = new.jobs.iter().filter(|job| job.enabled).count();
                tracing::info!(
                    path = %path.display(),
                    jobs = new.jobs.len(),
                    enabled,
                    schedule = %hash.total,
                    changes = %changes.summary(),
                    "schedule reloaded"
                );
                if !changes.after_restart.is_empty() {
                    tracing::warn!(
                        path = %path.display(),
                        sections = %changes.after_restart.join(", "),
                        "these sections changed and take effect only after a restart; jobs are reloaded"
                    );
                }
                let schedule = hash.total.clone();
                let jobs = new.jobs.clone();
                warm(&to.deliveries, &jobs);
                current = Arc::new(new);
                // Only the HTTP API reads it, when it is on.
                to.loaded.send_replace(Arc::clone(&current));
                // Every group's machine gets the whole schedule and fires its own jobs of it, so a
                // job moved between groups leaves one machine and joins another in the same step.
                for (unit_jobs, lock) in &to.units {
                    let _ = lock.send(LockCommand::Schedule(hash.clone()));
                    if unit_jobs.send(jobs.clone()).is_err() {
                        return;
                    }
                }
                ReloadOutcome::Applied {
                    schedule,
                    loaded_unix_ms,
                    changes,
                }
            }
            Err(error) => ReloadOutcome::Refused { error },
        };
        // Published in the member node, for the event stream on any node.
        let note = match &outcome {
            ReloadOutcome::Applied {
                schedule, changes, ..
            } => ReloadNote {
                at_unix_ms: Utc::now().timestamp_millis(),
                applied: true,
                detail: format!("schedule {schedule}: {}", changes.summary()),
            },
            ReloadOutcome::Refused { error } => ReloadNote {
                at_unix_ms: Utc::now().timestamp_millis(),
                applied: false,
                detail: error.clone(),
            },
        };
        for (_, lock) in &to.units {
            let _ = lock.send(LockCommand::Reloaded(Box::new(note.clone())));
        }
        let status = match &outcome {
            ReloadOutcome::Applied { schedule, .. } => format!("schedule {schedule} loaded"),
            ReloadOutcome::Refused { .. } => {
                "reload refused; the schedule before it runs".to_owned()
            }
        };
        notify_systemd(&[
            sd_notify::NotifyState::Ready,
            sd_notify::NotifyState::Status(&status),
        ]);
        if let Some(answer) = request.answer {
            // The asker may have given up; the log has the outcome.
            let _ = answer.send(ReloadAnswer {
                format: RELOAD_FORMAT,
                path: path.clone(),
                outcome,
            });
        }
    }
}

/// Where a reloaded schedule goes.
struct Reloaded {
    /// Each group's fire machine, and its lock (the default group's publishes the schedule's
    /// fingerprint in the member node).
    units: Vec<(
        mpsc::UnboundedSender<Jobs>,
        mpsc::UnboundedSender<LockCommand>,
    )>,
    /// The HTTP API.
    loaded: watch::Sender<Arc<Config>>,
    /// The HTTP clients, made for the reloaded targets before their first run.
    deliveries: Arc<crate::delivery::Deliveries>,
}

/// Makes the clients of `jobs`' HTTP targets, and drops those no target uses, on a blocking
/// thread: reading certificate stores is file I/O.
fn warm(deliveries: &Arc<crate::delivery::Deliveries>, jobs: &Jobs) {
    let (deliveries, jobs) = (Arc::clone(deliveries), jobs.clone());
    tokio::task::spawn_blocking(move || deliveries.warm(jobs.iter().map(|job| job.spec.as_ref())));
}

/// Warns of what the schedule leaves in the open: each secret written in it (`zkcron check`
/// refuses one that group or others may read, but a running fleet is not stopped for it: an
/// upgrade must not stop it), and nodes open to every client of the ensemble.
pub fn warn_of_exposures(config: &Config) {
    if let Some(open) = &config.open_acl {
        tracing::warn!("{}", open.why());
    }
    for secret in &config.inline_secrets {
        let Some(mode) = secret.file_mode() else {
            continue;
        };
        let (_, why) = secret.verdict(mode);
        tracing::warn!(
            file = %secret.file.display(),
            line = secret.line,
            key = secret.key,
            "{why}"
        );
    }
}

/// Re-reads the schedule; on any problem keeps the current one and says why, in the log and
/// in the returned error.
fn reload(path: &std::path::Path) -> Result<Config, String> {
    let refused = |error: String| {
        tracing::error!(
            path = %path.display(),
            error = %error,
            "reload refused; keeping the current schedule"
        );
        error
    };
    let new = config::load(path).map_err(|err| refused(error_chain(&err)))?;
    warn_of_exposures(&new);
    users_out_of_reach(&new).map_err(|err| refused(err.to_string()))?;
    Ok(new)
}

/// The store of the runs' whole output, if this node keeps it (`[output] dir`, or systemd's
/// state directory). One that cannot be opened keeps nothing, and the node runs on: keeping
/// output never stops a run.
async fn open_output_store(config: &crate::config::OutputConfig) -> Option<Arc<OutputStore>> {
    let Some(dir) = crate::output_store::dir_of(config) else {
        tracing::info!(
            "runs' whole output is not kept on this host: set [output] dir (the packaged unit keeps it under its state directory)"
        );
        return None;
    };
    let config = config.clone();
    let opened = tokio::task::spawn_blocking(move || OutputStore::open(&dir, &config)).await;
    match opened {
        Ok(Ok(store)) => {
            tracing::info!(dir = %store.dir().display(), kept = store.kept_bytes(), "runs' whole output kept here");
            Some(Arc::new(store))
        }
        Ok(Err(err)) => {
            tracing::warn!(error = %crate::report::error_chain(&err), "runs' whole output is not kept: the runs go on, with their records' tails only");
            None
        }
        Err(err) => {
            tracing::warn!(error = %err, "runs' whole output is not kept: opening its store did not finish");
            None
        }
    }
}

/// Where the other members reach this node's HTTP API: the address bound, or, for one bound to
/// every interface, this node's IP with the port.
fn advertised(bound: std::net::SocketAddr, ip: &str) -> String {
    match ip.parse::<std::net::IpAddr>() {
        Ok(ip) if bound.ip().is_unspecified() => {
            std::net::SocketAddr::new(ip, bound.port()).to_string()
        }
        _ => bound.to_string(),
    }
}
