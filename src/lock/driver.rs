//! Runs a [`LockMachine`] against ZooKeeper.
//!
//! Owns: the session lifecycle (connect with backoff, register the member node, take back a
//! session the client gave up on but the servers may still hold, reconnect with a new session
//! after an expiry), executing the machine's actions as ZooKeeper requests, feeding
//! replies, watch events, session states and timer expiries back in, and the heartbeat that tells
//! when the server last answered us. Its parts: what it is given (`settings`), the session and
//! its heartbeat (`connection`), the machine's requests (`requests`).
//! Must not: decide policy — when to contend, wait, retry or give up is the machine's call.

mod connection;
mod requests;
mod settings;

use std::collections::VecDeque;
use std::pin::Pin;
use std::time::{Duration, Instant};

use tokio::sync::mpsc;
use tokio::time::Sleep;
use tokio_util::sync::CancellationToken;

use crate::ids::FencingToken;
use crate::layout::LockPaths;

use crate::ensemble::ZkSettings;
use crate::ledger::Ledger;
use crate::lock::clock_schedule::{ClockCheck, ClockSchedule, ClockStep};
use crate::lock::clock_watch;
use crate::lock::machine::{Action, Input, LockEvent, LockMachine, LockState, LockStatus};
use crate::lock::node::{DelayedStoreKind, ReloadNote, ScheduleHash, kept_out_by_store};
use crate::lock::take_back::TakeBack;
use crate::zk::{self, NodeEvent, SessionEvent};

use connection::{Connection, now, open_session};
use requests::WatchFuture;

pub use connection::DriverError;
pub use settings::{Heard, LockRole, LockSettings, MemberVerdict};

/// What the fire side asks of the lock driver.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LockCommand {
    /// A tick claim with this token failed its epoch check: if it is still our token, the
    /// machine verifies it again.
    FenceFailed(FencingToken),
    /// Hand the lock over on an operator's request (`zkcron release`), claims withdrawn.
    Yield,
    /// The schedule was reloaded: publish its fingerprint in our member node (`drift`).
    Schedule(ScheduleHash),
    /// A reload ended, applied or refused: publish it in our member node (the event stream).
    Reloaded(Box<ReloadNote>),
    /// The balancer's word on whether this node contends for this lock (`Input::Placement`).
    Placement { contend: bool },
}

/// What the lock driver tells the rest of zkcron, on one ordered stream: a status is never seen
/// before the event or the session that led to it (DESIGN.md "Data flow").
#[derive(Debug, Clone)]
pub enum LockUpdate {
    /// The session requests go through from now on; `None` while no session is up. It is the
    /// transport for claims and records, not lock state: the status says whether to use it.
    Session(Option<Ledger>),
    /// The machine's event, in the order it emitted them (logged by the driver already).
    Event(LockEvent),
    /// The lock's status after a step that changed it.
    Status(LockStatus),
}

/// Runs the lock until `shutdown` is cancelled, then releases it gracefully (peers contend at
/// once) and deletes our member node. Sessions, events and status changes go to `updates`, in
/// order. `commands` carries what the fire side asks: re-verify a token whose claim failed its
/// epoch check, hand the lock over.
///
/// # Errors
/// Only a duplicate `node_id` stops it; ZooKeeper failures are retried with backoff.
pub async fn run(
    zk: &ZkSettings,
    settings: &LockSettings,
    shutdown: &CancellationToken,
    updates: &mpsc::UnboundedSender<LockUpdate>,
    commands: &mut mpsc::UnboundedReceiver<LockCommand>,
) -> Result<(), DriverError> {
    let mut driver = Driver::new(zk, settings, updates);
    loop {
        driver.perform_pending().await;
        if driver.conn.is_none() {
            let Some(new) = open_session(zk, &driver.settings, shutdown).await? else {
                break;
            };
            driver.session_opened(new);
            continue;
        }
        let Some(wake) = driver.wait(shutdown, commands).await else {
            break;
        };
        if let Some(input) = driver.input_for(wake) {
            driver.feed(input);
        }
    }
    driver.end().await;
    Ok(())
}

/// What woke the driver's loop, other than a shutdown.
enum Wake {
    /// The owner's silence check is due (see `silence_input`).
    Silence,
    State(SessionEvent),
    TakenBack(zk::Resumed),
    Watch(Option<NodeEvent>),
    Deadline,
    /// The member lock's clock verdict, for a named group's lock; `None` once it has stopped.
    Verdict(Option<MemberVerdict>),
    Clock(ClockStep),
    Command(LockCommand),
}

/// The state of one driver's loop: the machine, the session it runs on and what the loop waits
/// for.
struct Driver<'a> {
    /// Ours to change: a reload publishes a new schedule fingerprint in the member node.
    settings: LockSettings,
    updates: &'a mpsc::UnboundedSender<LockUpdate>,
    machine: LockMachine,
    /// The machine's actions not performed yet, in its order.
    pending: VecDeque<Action>,
    /// The member lock registers the node and checks its clock; a named group's does neither.
    member: bool,
    /// A named group's lock follows the member lock's clock verdict.
    verdicts: Option<tokio::sync::watch::Receiver<MemberVerdict>>,
    conn: Option<Connection>,
    watch: Option<WatchFuture>,
    timer: Pin<Box<Sleep>>,
    silence: Pin<Box<Sleep>>,
    silenced: Option<Silenced>,
    published: LockStatus,
    /// Taking back a session the client gave up on; the machine meanwhile counts it disconnected.
    take_back: TakeBack<'a>,
    /// The clock check: it also publishes our member node (a new schedule fingerprint at once).
    clock: ClockSchedule,
    /// The lock was handed over and nobody has taken it yet: the next owner is whom it went to.
    handed_over: bool,
    /// A live member keeps the delayed queue in PostgreSQL while we keep it in ZooKeeper.
    store_kept_out: bool,
}

impl<'a> Driver<'a> {
    fn new(
        zk: &'a ZkSettings,
        settings: &LockSettings,
        updates: &'a mpsc::UnboundedSender<LockUpdate>,
    ) -> Self {
        let settings = settings.clone();
        let mut machine = LockMachine::new(
            settings.me.node_id.clone(),
            settings.takeover_delay,
            settings.jitter,
        );
        let mut pending = VecDeque::new();
        if settings.role.placed() {
            pending.extend(machine.handle(Input::Placement { contend: false }, now()));
        }
        pending.extend(machine.handle(Input::Start, now()));
        let verdicts = match &settings.role {
            LockRole::Group { verdict } => Some(verdict.clone()),
            LockRole::Member { .. } => None,
        };
        let member = matches!(settings.role, LockRole::Member { .. });
        Self {
            updates,
            machine,
            pending,
            member,
            verdicts,
            conn: None,
            watch: None,
            timer: Box::pin(tokio::time::sleep(Duration::ZERO)),
            silence: Box::pin(tokio::time::sleep(Duration::ZERO)),
            silenced: None,
            published: LockStatus::default(),
            take_back: TakeBack::new(zk),
            clock: ClockSchedule::new(settings.clock.clone(), member),
            settings,
            handed_over: false,
            store_kept_out: false,
        }
    }

    /// Performs the pending actions: an action's answer goes straight back in, so actions run in
    /// the order the machine chose.
    async fn perform_pending(&mut self) {
        // Published after every step and before any request, so firing never goes on under a
        // status the machine has already left (a Lost waiting behind a slow request).
        self.publish();
        while let Some(action) = self.pending.pop_front() {
            say_whom_to(&mut self.handed_over, &action, &self.settings.paths);
            let conn = self.conn.as_ref();
            if let Some(answer) =
                execute(conn, &self.settings, action, &mut self.watch, self.updates).await
            {
                self.pending.extend(self.machine.handle(answer, now()));
                self.publish();
            }
        }
    }

    fn publish(&mut self) {
        let conn = self.conn.as_ref();
        publish(self.updates, &mut self.published, &self.machine, conn);
    }

    fn session_opened(&mut self, new: Connection) {
        tracing::info!(session = %new.session, timeout = ?new.timeout, "zookeeper session established");
        let started = Input::SessionStarted {
            session: new.session,
            timeout: new.timeout,
        };
        let _ = self.updates.send(LockUpdate::Session(Some(
            self.settings.ledger_on(new.zk.clone()),
        )));
        self.conn = Some(new);
        self.clock.session_began();
        self.pending.extend(self.machine.handle(started, now()));
    }

    /// Waits, with a session up, for what comes next; `None` on shutdown.
    async fn wait(
        &mut self,
        shutdown: &CancellationToken,
        commands: &mut mpsc::UnboundedReceiver<LockCommand>,
    ) -> Option<Wake> {
        let deadline = self.machine.next_deadline();
        if let Some(at) = deadline {
            self.timer.as_mut().reset(at.into());
        }
        let silence_at = self.silence_at();
        if let Some(at) = silence_at {
            self.silence.as_mut().reset(at.into());
        }
        let wake = tokio::select! {
            biased; // a stopping owner releases before it looks at anything else
            () = shutdown.cancelled() => return None,
            // Looked at first after a stall: see `silence_input`.
            () = &mut self.silence, if silence_at.is_some() => Wake::Silence,
            state = state_change(self.conn.as_mut()), if !self.take_back.active() => {
                Wake::State(state)
            }
            outcome = self.take_back.outcome() => Wake::TakenBack(outcome),
            event = fired(&mut self.watch) => Wake::Watch(event),
            () = &mut self.timer, if deadline.is_some() => Wake::Deadline,
            changed = clock_verdict(&mut self.verdicts) => Wake::Verdict(changed),
            step = self.clock.next() => Wake::Clock(step),
            Some(command) = commands.recv() => Wake::Command(command),
        };
        Some(wake)
    }

    /// When to look whether a connected owner still hears from the servers (see
    /// `silence_input`), if it is to.
    fn silence_at(&mut self) -> Option<Instant> {
        if self.machine.connected() {
            self.silenced = None;
        }
        match self.silenced {
            Some(Silenced { next_look, .. }) => Some(next_look),
            None if self.machine.connected()
                && matches!(self.machine.state(), LockState::Own { .. }) =>
            {
                self.conn
                    .as_ref()
                    .map(|live| live.last_heard() + live.timeout)
            }
            None => None,
        }
    }

    /// The machine's input for what woke the loop, if it has one.
    fn input_for(&mut self, wake: Wake) -> Option<Input> {
        // The loop waits only with a session up.
        let live = self.conn.as_ref()?;
        match wake {
            Wake::Silence => silence_input(live, &mut self.silenced),
            // The client gave up (~1.4 × the timeout without an answer); the servers may still
            // hold the session, and with it our lock and member nodes.
            Wake::State(SessionEvent::Expired) => {
                tracing::warn!(session = %live.session, "no answer from zookeeper for longer than the session timeout; taking the session back if the servers still hold it");
                self.take_back.start(live.zk.resumable());
                None
            }
            Wake::State(state) => session_input(state, live),
            Wake::TakenBack(outcome) => {
                let (back, input) = taken_back(outcome, &self.settings, self.updates);
                if let Some(back) = back {
                    self.conn = Some(back);
                    self.clock.session_began();
                }
                input
            }
            Wake::Watch(event) => {
                self.watch = None;
                if event == Some(NodeEvent::Deleted) {
                    self.clock.owner_gone();
                }
                watch_input(event)
            }
            Wake::Deadline => Some(Input::Tick),
            Wake::Verdict(Some(verdict)) => {
                if verdict.store_kept_out != self.store_kept_out {
                    self.store_kept_out = verdict.store_kept_out;
                    let judged = Input::StoreJudged {
                        kept_out: verdict.store_kept_out,
                    };
                    self.pending.extend(self.machine.handle(judged, now()));
                }
                Some(Input::ClockJudged {
                    skewed: verdict.skewed,
                })
            }
            Wake::Verdict(None) => {
                self.verdicts = None;
                None
            }
            Wake::Clock(ClockStep::CheckDue) => {
                let check = check_clock(live, &mut self.settings, &self.clock);
                self.clock.start(check);
                None
            }
            Wake::Clock(ClockStep::Read(reading)) => {
                if let Ok(read) = &reading {
                    let by = kept_out_by_store(read.mine(), read.stores()).cloned();
                    if by.is_some() != self.store_kept_out {
                        self.store_kept_out = by.is_some();
                        let in_postgres = read
                            .mine()
                            .is_some_and(|mine| mine.kind == DelayedStoreKind::Postgres);
                        match (&by, in_postgres) {
                            (Some(by), false) => {
                                tracing::warn!(member = %by, "this node keeps the delayed queue in ZooKeeper and member {by} keeps it in PostgreSQL ([delayed] store): standing aside from the lock while it lives");
                            }
                            (Some(by), true) => {
                                tracing::warn!(member = %by, "this node cannot read the delayed store in PostgreSQL and member {by} can: standing aside from the lock while it can");
                            }
                            (None, false) => tracing::info!(
                                "no live member keeps the delayed queue in PostgreSQL any more: contending again"
                            ),
                            (None, true) => tracing::info!(
                                "this node reads the delayed store again, or no member can: contending again"
                            ),
                        }
                        let judged = Input::StoreJudged {
                            kept_out: by.is_some(),
                        };
                        self.pending.extend(self.machine.handle(judged, now()));
                        if let LockRole::Member { verdict, .. } = &self.settings.role {
                            let kept_out = by.is_some();
                            verdict.send_modify(|sent| sent.store_kept_out = kept_out);
                        }
                    }
                }
                let verdict = self.clock.judged(reading, live.timeout)?;
                if let LockRole::Member {
                    verdict: to_groups, ..
                } = &self.settings.role
                {
                    to_groups.send_modify(|to_groups| to_groups.skewed = verdict.skewed);
                }
                Some(Input::ClockJudged {
                    skewed: verdict.skewed,
                })
            }
            Wake::Command(command) => {
                let order = Order {
                    machine: &self.machine,
                    settings: &mut self.settings,
                    member: self.member,
                    live,
                    clock: &mut self.clock,
                };
                order.input(command)
            }
        }
    }

    /// Hands `input` to the machine; an expired session is dropped first, with its watch and
    /// any take-back.
    fn feed(&mut self, input: Input) {
        if input == Input::SessionExpired {
            self.take_back.stop();
            self.conn = None;
            self.watch = None;
            let _ = self.updates.send(LockUpdate::Session(None));
        }
        self.pending.extend(self.machine.handle(input, now()));
    }

    /// The driver's end: the lock released (peers contend at once) and our member node deleted.
    async fn end(mut self) {
        let release = self.machine.handle(Input::Shutdown, now());
        // Stop firing before the release's round trips.
        self.publish();
        for action in release {
            if action == Action::Emit(LockEvent::Lost) {
                // Given up on purpose, not lost: say so at info, not as a warning.
                tracing::info!(
                    path = self.settings.paths.lock,
                    "lock given up for shutdown"
                );
                let _ = self.updates.send(LockUpdate::Event(LockEvent::Lost));
                continue;
            }
            let conn = self.conn.as_ref();
            execute(conn, &self.settings, action, &mut self.watch, self.updates).await;
        }
        publish(self.updates, &mut self.published, &self.machine, None);
        if let Some(live) = self.conn.take().filter(|_| self.member) {
            let member = self.settings.paths.member(&self.settings.me.node_id);
            // Deleting it ourselves, rather than leaving it to the session close, lets a restart of
            // this node register at once.
            let deleted = live
                .zk
                .bounded_by(live.request_timeout())
                .delete(crate::tally::WriteKind::Member, &member, None)
                .await;
            if deleted.is_err() {
                tracing::debug!(
                    path = member,
                    "member node not deleted on shutdown; it goes with the session"
                );
            }
        }
    }
}

/// A command from the fire side, as the loop gets it.
struct Order<'a> {
    machine: &'a LockMachine,
    settings: &'a mut LockSettings,
    member: bool,
    live: &'a Connection,
    clock: &'a mut ClockSchedule,
}

impl Order<'_> {
    /// The machine's input for `command`, if it has one.
    fn input(self, command: LockCommand) -> Option<Input> {
        let Order {
            machine,
            settings,
            member,
            live,
            clock,
        } = self;
        match command {
            LockCommand::FenceFailed(token) => {
                (machine.state() == LockState::Own { token }).then_some(Input::FenceFailed)
            }
            LockCommand::Yield => {
                tracing::info!(
                    path = settings.paths.lock,
                    "handing the lock over on request"
                );
                Some(Input::Yield)
            }
            LockCommand::Placement { contend } => Some(Input::Placement { contend }),
            // Only the member lock publishes the member node.
            LockCommand::Schedule(_) | LockCommand::Reloaded(_) if !member => None,
            LockCommand::Schedule(hash) => {
                settings.me.schedule = Some(Box::new(hash));
                publish_member(live, settings, clock);
                None
            }
            LockCommand::Reloaded(note) => {
                settings.me.reload = Some(note);
                publish_member(live, settings, clock);
                None
            }
        }
    }
}

/// What a take-back came to: the session back on a new client, or expired; and the machine's
/// input.
fn taken_back(
    outcome: zk::Resumed,
    settings: &LockSettings,
    updates: &mpsc::UnboundedSender<LockUpdate>,
) -> (Option<Connection>, Option<Input>) {
    match outcome {
        zk::Resumed::Session(session) => {
            let states = session.states();
            let back = Connection::start(session, states, settings);
            tracing::info!(session = %back.session, "zookeeper session taken back: the servers still held it");
            let _ = updates.send(LockUpdate::Session(Some(
                settings.ledger_on(back.zk.clone()),
            )));
            (Some(back), Some(Input::SessionReconnected))
        }
        zk::Resumed::Expired => {
            tracing::info!("the session had expired on the servers; opening a new one");
            (None, Some(Input::SessionExpired))
        }
        // Tried again by the take-back itself, never reported.
        zk::Resumed::NoAnswer(_) => (None, None),
    }
}

/// Our member data changed: published by the clock check's write, now or right after the one
/// out.
fn publish_member(live: &Connection, settings: &mut LockSettings, clock: &mut ClockSchedule) {
    if clock.publish_soon() {
        clock.start(check_clock(live, settings, clock));
    }
}

/// Starts a clock check: our member node is rewritten with what `settings.me` says now, our
/// latest offset estimate and the last verdict. A failure is logged at the check's end: the
/// next one comes soon.
fn check_clock(
    live: &Connection,
    settings: &mut LockSettings,
    clock: &ClockSchedule,
) -> ClockCheck {
    settings.me.clock_offset_ms = clock.offset_ms();
    settings.me.clock_standing = clock.standing();
    let check = clock_watch::Check {
        member: settings.paths.member(&settings.me.node_id),
        me: settings.me.clone(),
        members_dir: settings.paths.members.clone(),
        store: settings.delayed_store.clone(),
    };
    Box::pin(clock_watch::read(
        live.zk.bounded_by(live.request_timeout()),
        check,
        live.request_timeout(),
    ))
}

/// The member lock's next clock verdict, for a named group's lock; `None` once the member lock
/// has stopped. Pends forever for the member lock itself.
async fn clock_verdict(
    verdicts: &mut Option<tokio::sync::watch::Receiver<MemberVerdict>>,
) -> Option<MemberVerdict> {
    let Some(verdicts) = verdicts.as_mut() else {
        return std::future::pending().await;
    };
    verdicts.changed().await.ok()?;
    Some(*verdicts.borrow_and_update())
}

/// Sends the status if it changed since the last one sent.
fn publish(
    updates: &mpsc::UnboundedSender<LockUpdate>,
    published: &mut LockStatus,
    machine: &LockMachine,
    conn: Option<&Connection>,
) {
    let status = machine.status(conn.is_some());
    if status != *published {
        *published = status;
        // The receiver is gone only when the daemon is stopping; the lock still releases.
        let _ = updates.send(LockUpdate::Status(status));
    }
}

/// An owner found silent for a whole session timeout while its client still counted itself
/// connected.
#[derive(Debug, Clone, Copy)]
struct Silenced {
    /// The last answer before the silence.
    last_heard: Instant,
    /// When to look whether an answer came since.
    next_look: Instant,
}

/// An owner that has heard nothing from any server for a whole session timeout cannot prove it
/// still owns, whatever its client says: after a SIGSTOP, a suspended VM or a stalled host the
/// client has noticed nothing yet, and its own verdict can take seconds more. The machine is told
/// the session is disconnected since the last answer (it reports Lost at once), so a woken owner
/// stops firing before it looks at anything else. The servers may still hold the session (a stall
/// just short of their expiry): when the heartbeat is answered again in the same session, that
/// is a reconnect.
fn silence_input(live: &Connection, silenced: &mut Option<Silenced>) -> Option<Input> {
    let last_heard = live.last_heard();
    let now = now();
    let look_again = now + live.timeout / 6;
    match *silenced {
        None if now.saturating_duration_since(last_heard) < live.timeout => None,
        None => {
            tracing::warn!(
                session = %live.session,
                silent_ms = now.saturating_duration_since(last_heard).as_millis(),
                "no answer from zookeeper for a whole session timeout: ownership unprovable"
            );
            *silenced = Some(Silenced {
                last_heard,
                next_look: look_again,
            });
            Some(Input::SessionDisconnected { last_heard })
        }
        Some(before) if last_heard > before.last_heard => {
            tracing::info!(session = %live.session, "zookeeper answers again in the same session");
            Some(Input::SessionReconnected)
        }
        Some(before) => {
            *silenced = Some(Silenced {
                next_look: look_again,
                ..before
            });
            None
        }
    }
}

/// The session's next state; pends forever without a session.
async fn state_change(conn: Option<&mut Connection>) -> SessionEvent {
    match conn {
        Some(live) => live.states.changed().await,
        None => std::future::pending().await,
    }
}

/// Pends until the armed watch fires; forever when none is armed.
async fn fired(watch: &mut Option<WatchFuture>) -> Option<NodeEvent> {
    match watch.as_mut() {
        Some(future) => future.await,
        None => std::future::pending().await,
    }
}

fn watch_input(event: Option<NodeEvent>) -> Option<Input> {
    match event? {
        NodeEvent::Deleted => Some(Input::NodeDeleted),
        NodeEvent::Created | NodeEvent::DataChanged => Some(Input::NodeChanged),
        // Terminal session states reach us through the state watcher too.
        NodeEvent::ChildrenChanged => None,
    }
}

fn session_input(state: SessionEvent, conn: &Connection) -> Option<Input> {
    tracing::info!(session = %conn.session, ?state, "zookeeper session state changed");
    match state {
        SessionEvent::SyncConnected => Some(Input::SessionReconnected),
        // We never ask for read-only sessions; a read-only server cannot prove ownership anyway.
        SessionEvent::Disconnected => Some(Input::SessionDisconnected {
            last_heard: conn.last_heard(),
        }),
        SessionEvent::AuthFailed => {
            tracing::error!(session = %conn.session, "zookeeper authentication failed; reconnecting with backoff");
            Some(Input::SessionExpired)
        }
        SessionEvent::Expired | SessionEvent::Closed => Some(Input::SessionExpired),
    }
}

/// Carries out one action; returns its answer for the machine (`None` for events).
async fn execute(
    conn: Option<&Connection>,
    settings: &LockSettings,
    action: Action,
    watch: &mut Option<WatchFuture>,
    updates: &mpsc::UnboundedSender<LockUpdate>,
) -> Option<Input> {
    if let Action::Emit(event) = action {
        log_event(&event, &settings.paths);
        // The receiver is gone only when the daemon is stopping; the lock still releases.
        let _ = updates.send(LockUpdate::Event(event));
        return None;
    }
    requests::perform(conn, settings, action, watch).await
}
/// After a handover, names the node that took the lock, at info (issue 31: a deliberate
/// handover was logged as a lost lock, and nothing said where the lock went).
fn say_whom_to(handed_over: &mut bool, action: &Action, paths: &LockPaths) {
    match action {
        Action::Emit(LockEvent::HandedOver) => *handed_over = true,
        Action::Emit(LockEvent::Acquired { .. }) => *handed_over = false,
        Action::Emit(LockEvent::OwnerChanged { owner: Some(node) }) if *handed_over => {
            *handed_over = false;
            let to = node
                .node_id()
                .map_or_else(|| "a foreign node".to_owned(), |id| id.to_string());
            tracing::info!(path = paths.lock, to, "lock handed over to {to}");
        }
        _ => {}
    }
}

fn log_event(event: &LockEvent, paths: &LockPaths) {
    match event {
        LockEvent::Acquired { token } => {
            tracing::info!(path = paths.lock, token = token.0, "lock acquired")
        }
        LockEvent::Lost => tracing::warn!(path = paths.lock, "lock lost"),
        // Whom to: the owner that takes it, logged as "lock handed over to" when it does.
        LockEvent::HandedOver => {
            tracing::info!(
                path = paths.lock,
                "lock handed over: released for a peer to take"
            )
        }
        LockEvent::OwnerChanged { owner: None } => {
            tracing::info!(path = paths.lock, "lock owner gone")
        }
        LockEvent::OwnerChanged { owner: Some(node) } if node.is_squatter() => tracing::error!(
            path = paths.lock,
            "a persistent node squats the lock path: no zkcron node can own this lock until an operator deletes it"
        ),
        LockEvent::OwnerChanged { owner: Some(node) } => match &node.info {
            Some(info) => tracing::info!(
                path = paths.lock,
                node_id = %info.node_id, ip = info.ip, host = info.host, session = %node.session,
                "lock held by another node"
            ),
            None => {
                tracing::info!(path = paths.lock, session = %node.session, "lock held by a foreign node")
            }
        },
    }
}
