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
use std::time::{Duration, Instant};

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use zookeeper_client::{Client, EventType, SessionState, WatchedEvent};

use crate::ids::FencingToken;
use crate::layout::LockPaths;

use crate::lock::clock_schedule::{ClockCheck, ClockSchedule, ClockStep};
use crate::lock::clock_watch;
use crate::lock::machine::{Action, Input, LockEvent, LockMachine, LockState, LockStatus};
use crate::lock::node::ScheduleHash;
use crate::lock::take_back::TakeBack;
use crate::zk::{self, ZkSettings};

use connection::{Connection, now, open_session};
use requests::WatchFuture;

pub use connection::DriverError;
pub use settings::{Heard, LockRole, LockSettings};

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
    /// The balancer's word on whether this node contends for this lock (`Input::Placement`).
    Placement { contend: bool },
}

/// What the lock driver tells the rest of zkcron, on one ordered stream: a status is never seen
/// before the event or the session that led to it (DESIGN.md "Data flow").
#[derive(Debug, Clone)]
pub enum LockUpdate {
    /// The session requests go through from now on; `None` while no session is up. It is the
    /// transport for claims and records, not lock state: the status says whether to use it.
    Session(Option<Client>),
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
    // Ours to change: a reload publishes a new schedule fingerprint in the member node.
    let mut owned = settings.clone();
    let settings = &mut owned;
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
    let mut verdicts = match &settings.role {
        LockRole::Group { verdict } => Some(verdict.clone()),
        LockRole::Member { .. } => None,
    };
    let member = matches!(settings.role, LockRole::Member { .. });
    let mut conn: Option<Connection> = None;
    let mut watch: Option<WatchFuture> = None;
    let mut timer = Box::pin(tokio::time::sleep(Duration::ZERO));
    let mut silence = Box::pin(tokio::time::sleep(Duration::ZERO));
    let mut silenced: Option<Silenced> = None;
    let mut published = LockStatus::default();
    // Taking back a session the client gave up on; the machine meanwhile counts it disconnected.
    let mut take_back = TakeBack::new(zk);
    // The clock check: it also publishes our member node (a new schedule fingerprint at once).
    let mut clock = ClockSchedule::new(settings.clock.clone(), member);
    // The lock was handed over and nobody has taken it yet: the next owner is whom it went to.
    let mut handed_over = false;
    loop {
        // An action's answer goes straight back in, so actions run in the order the machine chose.
        // Published after every step and before any request, so firing never goes on under a
        // status the machine has already left (a Lost waiting behind a slow request).
        publish(updates, &mut published, &machine, conn.as_ref());
        while let Some(action) = pending.pop_front() {
            say_whom_to(&mut handed_over, &action, &settings.paths);
            if let Some(answer) =
                execute(conn.as_ref(), settings, action, &mut watch, updates).await
            {
                pending.extend(machine.handle(answer, now()));
                publish(updates, &mut published, &machine, conn.as_ref());
            }
        }
        let Some(live) = conn.as_mut() else {
            let Some(new) = open_session(zk, settings, shutdown).await? else {
                break;
            };
            tracing::info!(session = %new.session, timeout = ?new.timeout, "zookeeper session established");
            let started = Input::SessionStarted {
                session: new.session,
                timeout: new.timeout,
            };
            let _ = updates.send(LockUpdate::Session(Some(new.client.clone())));
            conn = Some(new);
            clock.session_began();
            pending.extend(machine.handle(started, now()));
            continue;
        };
        let deadline = machine.next_deadline();
        if let Some(at) = deadline {
            timer.as_mut().reset(at.into());
        }
        if machine.connected() {
            silenced = None;
        }
        let silence_at = match silenced {
            Some(Silenced { next_look, .. }) => Some(next_look),
            None if machine.connected() && matches!(machine.state(), LockState::Own { .. }) => {
                Some(live.last_heard() + live.timeout)
            }
            None => None,
        };
        if let Some(at) = silence_at {
            silence.as_mut().reset(at.into());
        }
        let mut resumed = None;
        let input = tokio::select! {
            biased; // a stopping owner releases before it looks at anything else
            () = shutdown.cancelled() => break,
            // Looked at first after a stall: see `silence_input`.
            () = &mut silence, if silence_at.is_some() => silence_input(live, &mut silenced),
            state = live.states.changed(), if !take_back.active() => match state {
                // The client gave up (~1.4 × the timeout without an answer); the servers may still
                // hold the session, and with it our lock and member nodes.
                SessionState::Expired => {
                    tracing::warn!(session = %live.session, "no answer from zookeeper for longer than the session timeout; taking the session back if the servers still hold it");
                    take_back.start(live.client.session().clone());
                    None
                }
                state => session_input(state, live),
            },
            outcome = take_back.outcome() => {
                resumed = Some(outcome);
                None
            }
            event = fired(&mut watch) => {
                watch = None;
                watch_input(&event)
            }
            () = &mut timer, if deadline.is_some() => Some(Input::Tick),
            changed = clock_verdict(&mut verdicts) => match changed {
                Some(skewed) => Some(Input::ClockJudged { skewed }),
                None => {
                    verdicts = None;
                    None
                }
            },
            step = clock.next() => match step {
                ClockStep::CheckDue => {
                    clock.start(check_clock(live, settings, clock.offset_ms()));
                    None
                }
                ClockStep::Read(reading) => clock.judged(reading, live.timeout).map(|verdict| {
                    if let LockRole::Member { verdict: to_groups, .. } = &settings.role {
                        to_groups.send_replace(verdict.skewed);
                    }
                    Input::ClockJudged { skewed: verdict.skewed }
                }),
            },
            Some(command) = commands.recv() => {
                let order = Order { machine: &machine, settings, member, live, clock: &mut clock };
                order.input(command)
            }
        };
        let input = match resumed {
            Some(outcome) => {
                let (back, input) = taken_back(outcome, zk, settings, updates);
                if let Some(back) = back {
                    conn = Some(back);
                    clock.session_began();
                }
                input
            }
            None => input,
        };
        let Some(input) = input else { continue };
        if input == Input::SessionExpired {
            take_back.stop();
            conn = None;
            watch = None;
            let _ = updates.send(LockUpdate::Session(None));
        }
        pending.extend(machine.handle(input, now()));
    }
    let ended = Ended {
        settings,
        updates,
        published: &mut published,
        member,
    };
    ended.release(&mut machine, conn, &mut watch).await;
    Ok(())
}

/// What the driver's end needs: the lock released (peers contend at once) and our member
/// node deleted.
struct Ended<'a> {
    settings: &'a LockSettings,
    updates: &'a mpsc::UnboundedSender<LockUpdate>,
    published: &'a mut LockStatus,
    member: bool,
}

impl Ended<'_> {
    async fn release(
        self,
        machine: &mut LockMachine,
        conn: Option<Connection>,
        watch: &mut Option<WatchFuture>,
    ) {
        let Ended {
            settings,
            updates,
            published,
            member,
        } = self;
        let release = machine.handle(Input::Shutdown, now());
        // Stop firing before the release's round trips.
        publish(updates, published, machine, conn.as_ref());
        for action in release {
            if action == Action::Emit(LockEvent::Lost) {
                // Given up on purpose, not lost: say so at info, not as a warning.
                tracing::info!(path = settings.paths.lock, "lock given up for shutdown");
                let _ = updates.send(LockUpdate::Event(LockEvent::Lost));
                continue;
            }
            execute(conn.as_ref(), settings, action, watch, updates).await;
        }
        publish(updates, published, machine, None);
        if let Some(live) = conn.filter(|_| member) {
            let member = settings.paths.member(&settings.me.node_id);
            // Deleting it ourselves, rather than leaving it to the session close, lets a restart of
            // this node register at once.
            let deleted =
                tokio::time::timeout(live.request_timeout(), live.client.delete(&member, None))
                    .await;
            if !matches!(deleted, Ok(Ok(()))) {
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
            LockCommand::Schedule(_) if !member => None,
            LockCommand::Schedule(hash) => {
                settings.me.schedule = Some(Box::new(hash));
                // Published by the clock check's write, now or right after the one out.
                if clock.publish_soon() {
                    clock.start(check_clock(live, settings, clock.offset_ms()));
                }
                None
            }
        }
    }
}

/// What a take-back came to: the session back on a new client, or expired; and the machine's
/// input.
fn taken_back(
    outcome: zk::Resumed,
    zk: &ZkSettings,
    settings: &LockSettings,
    updates: &mpsc::UnboundedSender<LockUpdate>,
) -> (Option<Connection>, Option<Input>) {
    match outcome {
        zk::Resumed::Session(client) => {
            let states = client.state_watcher();
            let back = Connection::start(client, states, zk.acls(), settings);
            tracing::info!(session = %back.session, "zookeeper session taken back: the servers still held it");
            let _ = updates.send(LockUpdate::Session(Some(back.client.clone())));
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

/// Starts a clock check: our member node is rewritten with what `settings.me` says now and our
/// latest offset estimate. A failure is logged at the check's end: the next one comes soon.
fn check_clock(
    live: &Connection,
    settings: &mut LockSettings,
    offset_ms: Option<i64>,
) -> ClockCheck {
    settings.me.clock_offset_ms = offset_ms;
    Box::pin(clock_watch::read(
        live.client.clone(),
        settings.paths.member(&settings.me.node_id),
        settings.me.to_bytes(),
        settings.paths.members.clone(),
        settings.me.node_id.clone(),
        live.request_timeout(),
    ))
}

/// The member lock's next clock verdict, for a named group's lock; `None` once the member lock
/// has stopped. Pends forever for the member lock itself.
async fn clock_verdict(verdicts: &mut Option<tokio::sync::watch::Receiver<bool>>) -> Option<bool> {
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

/// Pends until the armed watch fires; forever when none is armed.
async fn fired(watch: &mut Option<WatchFuture>) -> WatchedEvent {
    match watch.as_mut() {
        Some(future) => future.await,
        None => std::future::pending().await,
    }
}

fn watch_input(event: &WatchedEvent) -> Option<Input> {
    match event.event_type {
        EventType::NodeDeleted => Some(Input::NodeDeleted),
        EventType::NodeCreated | EventType::NodeDataChanged => Some(Input::NodeChanged),
        // Terminal session states reach us through the state watcher too.
        EventType::Session | EventType::NodeChildrenChanged => None,
    }
}

fn session_input(state: SessionState, conn: &Connection) -> Option<Input> {
    tracing::info!(session = %conn.session, ?state, "zookeeper session state changed");
    match state {
        SessionState::SyncConnected => Some(Input::SessionReconnected),
        // We never ask for read-only sessions; a read-only server cannot prove ownership anyway.
        SessionState::Disconnected | SessionState::ConnectedReadOnly => {
            Some(Input::SessionDisconnected {
                last_heard: conn.last_heard(),
            })
        }
        SessionState::AuthFailed => {
            tracing::error!(session = %conn.session, "zookeeper authentication failed; reconnecting with backoff");
            Some(Input::SessionExpired)
        }
        SessionState::Expired | SessionState::Closed => Some(Input::SessionExpired),
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
