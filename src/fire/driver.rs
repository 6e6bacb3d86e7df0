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
mod broadcast;
mod chains;
mod control;
mod delayed;
mod delayed_store;
mod departed;
pub use departed::Departed;
mod drift;
mod formats;
pub use formats::FleetFormat;
mod housekeeping;
mod leases;
mod listing;
mod observe;
mod records;
mod refusals;
mod runs;
mod session;

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::machine::{
    Action, BroadcastAction, CatchUpAction, CatchUpInput, ChainsAction, ClaimAction, ClaimInput,
    ControlAction, DelayedAction, Fence, FireMachine, Input, LockAction, LockInput, RunAction,
};
use crate::config::JobConfig;
use crate::ids::{JobName, NodeId};
use crate::layout::ControlPaths;
use crate::layout::LedgerPaths;
use crate::layout::LockPaths;
use crate::ledger::Ledger;
use crate::ledger::group::GroupCommit;
use crate::lock::driver::DriverError;
use crate::lock::driver::LockCommand;
use crate::lock::driver::LockUpdate;
use crate::metrics::Metrics;
use crate::view::NodeView;

/// Sleep at most this long at once, so a wall-clock step (NTP, suspend) is noticed in time.
const MAX_SLEEP: Duration = Duration::from_secs(30);
/// How long a handover waits for the lock driver to release the lock: its requests are bounded
/// by the session's request timeout, a few of them in a row.
const RELEASE_LIMIT: Duration = Duration::from_secs(10);
/// A deadline the machine left in the past after a Tick is woken for no more often than this.
const SPIN_FLOOR: chrono::Duration = chrono::Duration::milliseconds(20);
/// This many inputs (a startup or a reload with thousands of jobs, a catch-up) followed by
/// [`QUIET_AFTER_BURST`] without any: the heap they used is given back (`heap`).
const BURST: usize = 1000;
// Short: a node that can fire wakes every second to read the delayed submissions due.
const QUIET_AFTER_BURST: Duration = Duration::from_millis(200);
/// After a change of the lock, every quiet spell gives back what the inputs since the last one
/// used, for this long: a catch-up's answers (one listing a job) can pause for longer than
/// [`QUIET_AFTER_BURST`] on a busy host or a cold server, and the part after the pause is rarely
/// a [`BURST`] of its own.
const SETTLING: Duration = Duration::from_secs(30);

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
    /// Where the runs' whole output is kept on this host, with `[output]` (shared by every
    /// group).
    pub outputs: Option<Arc<crate::output_store::OutputStore>>,
    /// Where the runs' spans go, with `[telemetry]` (shared by every group).
    pub telemetry: Option<Arc<crate::telemetry::Telemetry>>,
    /// Where failure notices go out (shared by every group).
    pub notifier: Arc<crate::notify::Notifier>,
    /// The ledger format the members read (shared by every group; the default group's driver
    /// keeps it up to date).
    pub fleet: Arc<FleetFormat>,
    /// The members this node saw leave, and until when (shared by every group; the default
    /// group's members watch keeps it), for the broadcast sweeps.
    pub departed: Arc<Departed>,
    /// The clock to schedule by: this node's, or the servers' when it is alone and off them
    /// (shared by every group; the default group's clock check corrects it).
    pub clock: Arc<crate::ensemble_clock::EnsembleClock>,
    /// `[audit] keep`: the default group's owner prunes the trail's older days.
    pub audit_keep: std::time::Duration,
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
    lock: LockTask,
    mut reloads: mpsc::UnboundedReceiver<Vec<Arc<JobConfig>>>,
    shutdown: CancellationToken,
) -> Result<(), DriverError> {
    let (answers, mut answered) = mpsc::unbounded_channel();
    let mut io = Io::new(settings, lock.commands.clone(), answers);
    // Ready once the schedule is loaded and the node is trying: like any client of a remote
    // service, a node whose ZooKeeper is down at boot starts and keeps trying (and /readyz and
    // `zkcron status` say "not connected"), instead of holding `systemctl start` until the
    // unit's start timeout kills it into a restart loop (issue 24).
    notify_systemd(&[sd_notify::NotifyState::Ready]);
    let mut stopping = false;
    let mut lock = LockLink::new(lock);
    let mut pending: VecDeque<Input> = VecDeque::new();
    let mut trim = Trim::new();
    let mut alarm = alarm::Alarm::new();
    let clock = Arc::clone(&io.settings.clock);
    let mut steps = alarm::Steps::new(Arc::clone(&clock));
    let mut wakes = Wakes::default();
    let metrics = Arc::clone(&io.settings.metrics);
    let group_name = io.settings.group_name.clone();
    let mut observer = observe::Observer::new(&metrics, &group_name, io.settings.member_duties);
    loop {
        let wake_at = wakes.wake_at(&machine, clock.now());
        let input = tokio::select! {
            biased;
            () = shutdown.cancelled(), if !stopping => Input::Shutdown,
            update = lock.task.updates.recv(), if lock.updates_open => {
                let Some(input) = io.lock_update(update, &mut observer, &mut trim, &mut lock) else {
                    continue;
                };
                input
            }
            joined = &mut lock.task.handle, if lock.alive => lock.ended(joined),
            // The release is a few bounded requests; a lock driver stuck elsewhere must not hold
            // the stop for ever: the lock then goes with the session as the process exits.
            () = lock.release_limit.as_mut(), if lock.handing_over && lock.alive => {
                lock.release_overdue()
            }
            Some(jobs) = reloads.recv() => Input::Reloaded(jobs),
            Some(answer) = answered.recv() => answer,
            () = tokio::time::sleep(QUIET_AFTER_BURST), if trim.due() => {
                trim.give_back();
                continue;
            }
            () = alarm.at(&clock, wake_at) => Input::Tick,
        };
        wakes.fed(&input, clock.now());
        trim.counted();
        if let Some(by) = steps.stepped() {
            pending.push_back(Input::ClockStepped { by });
        }
        pending.push_back(input);
        while let Some(input) = pending.pop_front() {
            wakes.handling(&input);
            if matches!(input, Input::Shutdown) {
                if stopping {
                    continue;
                }
                stopping = true;
                // systemd reads STOPPING=1 as "beginning its shutdown".
                notify_systemd(&[sd_notify::NotifyState::Stopping]);
            }
            if let Input::Claims(ClaimInput::RunEnded { claim, .. })
            | Input::Claims(ClaimInput::RunNotStarted { claim, .. }) = &input
            {
                io.runs.ended(&claim.record.run_id);
                io.leases.give_back(&claim.record.run_id, &io.session.tasks);
            }
            observer.input(&input);
            for action in machine.handle(input, clock.now()) {
                observer.action(&action);
                match action {
                    Action::Lock(LockAction::Yield) => {
                        let _ = lock.task.commands.send(LockCommand::Yield);
                    }
                    Action::Lock(LockAction::HandOver) => lock.hand_over(&mut pending),
                    Action::Stopped => {
                        io.stopped().await;
                        return lock.result;
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

/// When the loop wakes for the machine, and the guard against a deadline it leaves behind.
#[derive(Default)]
struct Wakes {
    /// When the last Tick was fed: a deadline at or before it is one the Tick did not act on.
    ticked_at: Option<DateTime<Utc>>,
    spin_said: bool,
}

impl Wakes {
    fn wake_at(&mut self, machine: &FireMachine, now: DateTime<Utc>) -> DateTime<Utc> {
        let latest = now + MAX_SLEEP;
        let wake_at = machine.next_deadline().map_or(latest, |at| at.min(latest));
        if self.ticked_at.is_none_or(|ticked| wake_at > ticked) {
            return wake_at;
        }
        // A machine bug, but never a busy loop: one spinning task starves the tasks queued
        // behind it on its worker, the lock driver among them (issue 31).
        if !std::mem::replace(&mut self.spin_said, true) {
            tracing::error!(deadline = %wake_at, "the fire machine left a deadline it does not act on; waking at most every {SPIN_FLOOR:?}");
        }
        now + SPIN_FLOOR
    }

    /// The input the loop woke with.
    fn fed(&mut self, input: &Input, now: DateTime<Utc>) {
        self.ticked_at = matches!(input, Input::Tick).then_some(now);
    }

    /// An input about to be handled: any but a Tick may set a deadline that has passed, which
    /// the next Tick acts on.
    fn handling(&mut self, input: &Input) {
        if !matches!(input, Input::Tick) {
            self.ticked_at = None;
        }
    }
}

/// Giving the heap back once quiet: after a burst of inputs (a startup or a reload with
/// thousands of jobs, a catch-up), and after every spell of inputs for [`SETTLING`] after each
/// change of the lock (its inputs are few with few jobs: the startup, an acquisition and its
/// catch-up, which can come in several spells).
struct Trim {
    handled: usize,
    settling_until: Option<tokio::time::Instant>,
}

impl Trim {
    /// Settling, as after a change of the lock: the startup's inputs are the first spell.
    fn new() -> Self {
        let mut trim = Self {
            handled: 0,
            settling_until: None,
        };
        trim.unsettle();
        trim
    }

    fn due(&self) -> bool {
        self.handled >= BURST || (self.handled > 0 && self.settling())
    }

    fn settling(&self) -> bool {
        self.settling_until
            .is_some_and(|until| tokio::time::Instant::now() < until)
    }

    fn counted(&mut self) {
        self.handled += 1;
    }

    /// What a change of the lock brings (a session, catch-up) is given back once quiet.
    fn unsettle(&mut self) {
        self.settling_until = Some(tokio::time::Instant::now() + SETTLING);
    }

    fn give_back(&mut self) {
        let started = std::time::Instant::now();
        crate::heap::give_back();
        let ms = started.elapsed().as_millis();
        tracing::debug!(
            inputs = self.handled,
            ms,
            "free heap given back after a burst"
        );
        self.handled = 0;
    }
}

/// The lock driver as the fire driver sees it: its updates, its end, the handover.
struct LockLink {
    task: LockTask,
    alive: bool,
    updates_open: bool,
    handing_over: bool,
    result: Result<(), DriverError>,
    release_limit: std::pin::Pin<Box<tokio::time::Sleep>>,
}

impl LockLink {
    fn new(task: LockTask) -> Self {
        Self {
            task,
            alive: true,
            updates_open: true,
            handing_over: false,
            result: Ok(()),
            release_limit: Box::pin(tokio::time::sleep(RELEASE_LIMIT)),
        }
    }

    /// The machine handed the lock over: the lock driver releases it within [`RELEASE_LIMIT`].
    fn hand_over(&mut self, pending: &mut VecDeque<Input>) {
        self.handing_over = true;
        let limit = tokio::time::Instant::now() + RELEASE_LIMIT;
        self.release_limit.as_mut().reset(limit);
        self.task.release.cancel();
        if !self.alive {
            pending.push_back(Input::Lock(LockInput::Released));
        }
    }

    /// The lock driver ended: released as asked, or on its own (the node stops).
    fn ended(&mut self, joined: Result<Result<(), DriverError>, tokio::task::JoinError>) -> Input {
        self.alive = false;
        self.result = joined.unwrap_or_else(|err| {
            tracing::error!(error = %err, "lock driver task failed");
            Ok(())
        });
        if self.handing_over {
            Input::Lock(LockInput::Released)
        } else {
            Input::Shutdown
        }
    }

    fn release_overdue(&mut self) -> Input {
        tracing::warn!(limit = ?RELEASE_LIMIT, "the lock was not released in time; stopping without it (it goes with the session)");
        self.task.handle.abort();
        self.alive = false;
        Input::Lock(LockInput::Released)
    }
}

/// What performing actions needs; holds no policy. Each concern performs its own actions on
/// the current session: the ledger's (`records`), the runs (`runs`), catch-up's listings
/// (`listing`), the delayed store (`delayed`), steering (`control`), the limits (`leases`).
struct Io {
    settings: FireSettings,
    session: session::Session,
    lock_commands: mpsc::UnboundedSender<LockCommand>,
    /// Stops the current session's watches (new submissions, `control/`).
    watch: Option<CancellationToken>,
    records: records::Records,
    runs: runs::Runs,
    /// Catch-up listings, a bounded number at a time.
    lister: listing::Lister,
    /// The leases this node's runs hold of cluster-wide limits.
    leases: leases::Leases,
}

impl Io {
    fn new(
        settings: FireSettings,
        lock_commands: mpsc::UnboundedSender<LockCommand>,
        answers: mpsc::UnboundedSender<Input>,
    ) -> Self {
        let lister = listing::Lister::start(
            settings.ledger.clone(),
            settings.group.clone(),
            answers.clone(),
        );
        let records = records::Records {
            paths: settings.ledger.clone(),
            view: settings.view.clone(),
            pruning: Default::default(),
            fleet: Arc::clone(&settings.fleet),
            refusals: refusals::Refusals::new(Arc::clone(&settings.metrics)),
            spans: settings
                .telemetry
                .clone()
                .map(|t| (t, settings.group_name.clone())),
        };
        Io {
            session: session::Session {
                client: None,
                group: None,
                answers,
                tasks: TaskTracker::new(),
            },
            lock_commands,
            watch: None,
            records,
            runs: runs::Runs::new(
                (Arc::clone(&settings.deliveries), settings.outputs.clone()),
                Arc::clone(&settings.clock),
                settings
                    .telemetry
                    .clone()
                    .map(|t| (t, settings.group_name.clone())),
            ),
            lister,
            leases: leases::Leases::new(Arc::clone(&settings.metrics)),
            settings,
        }
    }

    /// What an update of the lock driver means here; `None`: nothing for the machine.
    fn lock_update(
        &mut self,
        update: Option<LockUpdate>,
        observer: &mut observe::Observer<'_>,
        trim: &mut Trim,
        lock: &mut LockLink,
    ) -> Option<Input> {
        match update {
            Some(LockUpdate::Session(client)) => {
                self.settings
                    .view
                    .send_modify(|view| view.client.clone_from(&client));
                self.session_changed(client);
                None
            }
            Some(LockUpdate::Event(event)) => {
                // Logged by the lock driver.
                observer.event(&event);
                if let Some(telemetry) = &self.settings.telemetry {
                    telemetry.lock_event(&event, &self.settings.group_name, Utc::now());
                }
                None
            }
            Some(LockUpdate::Status(status)) => {
                observer.status(&status, self.session.client.is_some());
                trim.unsettle();
                self.settings.view.send_modify(|view| view.lock = status);
                Some(Input::Lock(LockInput::Changed(status)))
            }
            None => {
                lock.updates_open = false;
                None
            }
        }
    }

    /// The machine stopped: the runs' last writes go out, then the session's queues end.
    async fn stopped(&mut self) {
        self.session.group = None;
        self.session.tasks.close();
        // Prunes and log reads still out; each is bounded by REQUEST_LIMIT.
        let out = self.session.tasks.wait();
        if tokio::time::timeout(session::REQUEST_LIMIT, out)
            .await
            .is_err()
        {
            tracing::warn!("requests still out at exit; their answers are dropped");
        }
    }

    /// A new session (or none): the watches follow it.
    fn session_changed(&mut self, client: Option<Ledger>) {
        if let Some(stop) = self.watch.take() {
            stop.cancel();
        }
        if let Some(client) = &client {
            self.watch = Some(self.watch_session(client));
        }
        self.session.group = client.clone().map(|client| {
            let (group, lanes) = GroupCommit::new(&client);
            self.session.tasks.spawn(lanes);
            group
        });
        self.session.client = client;
    }

    /// Starts the watches of `client`'s session; the token stops them.
    fn watch_session(&self, client: &Ledger) -> CancellationToken {
        let stop = CancellationToken::new();
        let answers = &self.session.answers;
        if client.delayed_in_postgres() {
            delayed_store::listen(client.clone(), answers.clone(), stop.clone());
        } else {
            delayed::watch(
                client.clone(),
                self.settings.ledger.delayed.clone(),
                answers.clone(),
                stop.clone(),
            );
        }
        chains::watch(
            client.clone(),
            self.settings.ledger.clone(),
            answers.clone(),
            stop.clone(),
        );
        control::watch(
            client.clone(),
            self.settings.control.clone(),
            self.settings.me.clone(),
            answers.clone(),
            stop.clone(),
        );
        if self.settings.member_duties {
            drift::DriftWatch {
                client: client.clone(),
                group: self.settings.group.clone(),
                me: self.settings.me.clone(),
                metrics: Arc::clone(&self.settings.metrics),
                view: self.settings.view.subscribe(),
                fleet: Arc::clone(&self.settings.fleet),
                departed: Arc::clone(&self.settings.departed),
                stop: stop.clone(),
            }
            .spawn();
            housekeeping::spawn(
                client.clone(),
                self.settings.ledger.delayed.clone(),
                (
                    crate::layout::AuditPaths::new(&self.settings.group),
                    self.settings.audit_keep,
                ),
                Arc::clone(&self.settings.metrics),
                self.settings.view.subscribe(),
                stop.clone(),
            );
        }
        stop
    }

    /// Carries out one action through the concern it belongs to; an answer that needs no I/O
    /// is returned at once, the others come back through `answers` when their task ends.
    fn perform(&mut self, action: Action) -> Option<Input> {
        let s = &self.session;
        match action {
            Action::Claims(action) => return self.claims(action),
            Action::Runs(action) => self.runner(action),
            Action::CatchUp(action) => return self.catch_up(action),
            Action::Prune {
                job,
                keep,
                remember,
            } => _ = self.records.prune(s, job, keep, remember),
            Action::Chains(action) => return self.chains(action),
            Action::Delayed(action) => return self.delayed(action),
            Action::Lock(LockAction::FenceFailed(token)) => {
                let _ = self.lock_commands.send(LockCommand::FenceFailed(token));
            }
            Action::Notify(notice) => self.settings.notifier.send(*notice),
            Action::Control(ControlAction::RemoveBackfill(name)) => {
                control::remove_backfill(s, &self.settings.control, name);
            }
            Action::Control(ControlAction::PauseJob { job, reason }) => {
                control::pause(s, &self.settings.control, job, reason);
            }
            Action::Broadcast(action) => return self.broadcast(action),
            Action::Lock(LockAction::HandOver | LockAction::Yield) | Action::Stopped => {}
        }
        None
    }

    /// A request of the claim path to the ledger: a member's claim goes alone, fenced by its
    /// member znode; every other through the session's group commit.
    fn claims(&mut self, action: ClaimAction) -> Option<Input> {
        let s = &self.session;
        match action {
            ClaimAction::Claim(claim) if claim.fence == Fence::Member => {
                let member = self.settings.group.member(&self.settings.me);
                self.records.claim_as_member(s, claim, member)
            }
            ClaimAction::Claim(claim) => self.records.claim(s, claim),
            ClaimAction::WriteRecord(claim) => self.records.write(s, claim),
            ClaimAction::Withdraw { id, claim } => self.records.withdraw(s, id, claim),
            ClaimAction::ReleaseGuard(claim) => self.records.release_guard(s, claim),
            ClaimAction::TakeGuard(claim) => self.records.take_guard(s, claim),
            ClaimAction::DropRetry { record, version } => {
                self.records.drop_retry(s, record, version);
                None
            }
            ClaimAction::TakeLeases { id, run_id, limits } => self.take_leases(id, run_id, limits),
            ClaimAction::GiveBackLeases { run_id } => {
                self.leases.give_back(&run_id, &s.tasks);
                None
            }
        }
    }

    /// A request of the claim path to the runner.
    fn runner(&mut self, action: RunAction) {
        let s = &self.session;
        match action {
            RunAction::Prepare {
                spec,
                context,
                not_before,
            } => self.runs.prepare(s, spec, context, not_before),
            RunAction::Unprepare { run_id } => self.runs.unprepare(&run_id),
            RunAction::Start {
                spec,
                claim,
                context,
                record,
                not_before,
            } => self.runs.start(s, spec, claim, context, record, not_before),
            RunAction::Cancel { run_id } => self.runs.cancel(&run_id),
        }
    }

    /// A request of catch-up: the jobs' records made ready, listed, an open one marked.
    fn catch_up(&mut self, action: CatchUpAction) -> Option<Input> {
        let s = &self.session;
        match action {
            CatchUpAction::PrepareJobs(jobs) => {
                self.records.prepare_jobs(s, jobs);
                None
            }
            CatchUpAction::ListRecords(job) => self.list(job),
            CatchUpAction::MarkInterrupted {
                record,
                version,
                closes,
            } => self.records.mark(s, record, version, closes),
        }
    }

    /// A request about the chain marks; a child's submit takes its parent's mark.
    fn chains(&self, action: ChainsAction) -> Option<Input> {
        let (s, paths) = (&self.session, &self.settings.ledger);
        match action {
            ChainsAction::ListMarks(job) => chains::list(s, paths, job),
            ChainsAction::DropMarks { job, marks } => {
                chains::drop_marks(s, paths, &job, &marks);
                None
            }
            ChainsAction::SubmitChild {
                job,
                mark,
                id,
                submission,
                token,
            } => {
                let child = chains::Child { job, mark, id };
                chains::submit_child(s, paths, child, submission, token)
            }
        }
    }

    /// A request of the delayed queue.
    fn delayed(&self, action: DelayedAction) -> Option<Input> {
        let (s, paths) = (&self.session, &self.settings.ledger.delayed);
        match action {
            DelayedAction::Scan {
                generation,
                wanted,
                after,
                through,
                ahead_to,
                clean_before,
            } => {
                let range = delayed::ScanRange {
                    after,
                    through,
                    ahead_to,
                    clean_before,
                };
                return delayed::scan(s, paths, generation, wanted, range);
            }
            DelayedAction::ReadSubmission { id } => {
                return delayed::read_submission(s, paths, id, Duration::ZERO);
            }
            DelayedAction::ReadSubmissionAfter { id, after } => {
                return delayed::read_submission(s, paths, id, after);
            }
            DelayedAction::RemoveEmptyBucket(bucket) => {
                delayed::remove_if_empty(s, paths, delayed::PastDue::Bucket(bucket));
            }
            DelayedAction::RemoveEmptyDay(day) => {
                delayed::remove_if_empty(s, paths, delayed::PastDue::Day(day));
            }
        }
        None
    }

    /// A broadcast job's request: a member's own runs, or the owner's sweeps.
    fn broadcast(&self, action: BroadcastAction) -> Option<Input> {
        let (s, group, me) = (&self.session, &self.settings.group, &self.settings.me);
        match action {
            BroadcastAction::ReadMembership => broadcast::read_membership(s, group, me),
            BroadcastAction::ReadMembers { job, tick } => {
                let departed = &self.settings.departed;
                self.records
                    .read_sweep_members(s, group, departed, job, tick)
            }
            BroadcastAction::ReadTick { job, tick } => {
                self.records.read_broadcast_tick(s, group, job, tick)
            }
            BroadcastAction::CloseGone {
                job,
                through,
                nodes,
            } => {
                self.records.close_gone_broadcasts(s, job, through, nodes);
                None
            }
            BroadcastAction::CloseOwn {
                jobs,
                before,
                alive,
            } => {
                self.records
                    .close_own_broadcasts(s, me, jobs, before, alive);
                None
            }
        }
    }

    fn list(&self, job: JobName) -> Option<Input> {
        let Some(client) = self.session.client.clone() else {
            let result = Err(session::Session::no_session());
            return Some(Input::CatchUp(CatchUpInput::Listed { job, result }));
        };
        let token = self.settings.view.borrow().lock.token;
        self.lister.list(client, job, token);
        None
    }

    fn take_leases(
        &mut self,
        id: crate::fire::machine::ClaimId,
        run_id: String,
        limits: Vec<crate::config::LimitConfig>,
    ) -> Option<Input> {
        let Some(client) = self.session.client.clone() else {
            let failed = limits.first().map(|limit| limit.name.clone());
            return Some(Input::Claims(ClaimInput::LeasesTaken {
                id,
                run_id,
                failed,
            }));
        };
        let taker = leases::Taker {
            client,
            paths: &self.settings.ledger,
            me: &self.settings.me,
            tasks: &self.session.tasks,
            answers: &self.session.answers,
        };
        self.leases.take(taker, id, run_id, limits);
        None
    }
}

/// Tells systemd (`Type=notify`) of a state; not under systemd, nothing happens.
pub fn notify_systemd(state: &[sd_notify::NotifyState<'_>]) {
    if let Err(err) = sd_notify::notify(state) {
        tracing::warn!(error = %err, "cannot notify systemd");
    }
}
