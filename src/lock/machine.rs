//! The lock state machine: Created, Own, Released, Waiting (DESIGN.md "The lock").
//!
//! Owns: every decision about the lock — when to contend, when we own it (proved by our session
//! id in `ephemeral_owner`, never by an IP or node id), when it is lost, how long peers wait before
//! taking over, when a failed request is retried.
//! Must not: do I/O, read a clock, spawn or sleep. Facts come in as [`Input`], commands go out as
//! [`Action`], and `now` is passed in, so every transition is a plain function call in tests.
//! `lock::driver` turns actions into ZooKeeper requests and their replies back into inputs.

use std::time::{Duration, Instant};

use crate::ids::{FencingToken, NodeId, SessionId};
use crate::lock::node::LockNode;

/// First pause after a failed request; doubles per consecutive failure up to [`MAX_BACKOFF`].
const MIN_BACKOFF: Duration = Duration::from_millis(100);
const MAX_BACKOFF: Duration = Duration::from_secs(10);
/// A squatting persistent node is reported again this often, so the error stays visible in the
/// log without flooding it.
const SQUATTER_REPORT_INTERVAL: Duration = Duration::from_secs(60);

/// A fact the machine learns: a session change, a reply to one of its actions, a watch, a timer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Input {
    /// The driver is running; contend as soon as a session is up.
    Start,
    /// A new session is established (the first, or one after an expiry) and our member node is
    /// registered. `timeout` is the negotiated session timeout.
    SessionStarted {
        session: SessionId,
        timeout: Duration,
    },
    /// The same session is connected again after a disconnect.
    SessionReconnected,
    /// The connection dropped. `last_heard` is when the server last answered us: the server
    /// counts the session timeout from about then, so we do too.
    SessionDisconnected { last_heard: Instant },
    /// The session is gone (the server said so, or the client gave up on it).
    SessionExpired,
    /// Answer to [`Action::Create`]: the fencing token of our new acquisition, or why not.
    CreateDone(Result<FencingToken, RequestFailed>),
    /// Answer to [`Action::ReadOwner`]: the lock node (`None`: absent), with a watch armed on it.
    OwnerRead(Result<Option<LockNode>, RequestFailed>),
    /// Answer to [`Action::ReadEpoch`].
    EpochRead(Result<Epoch, RequestFailed>),
    /// Answer to [`Action::Bump`]: the new fencing token.
    BumpDone(Result<FencingToken, RequestFailed>),
    /// Answer to [`Action::Release`].
    ReleaseDone(Result<(), RequestFailed>),
    /// The watched lock node was deleted.
    NodeDeleted,
    /// The watched lock node was created or its data changed.
    NodeChanged,
    /// [`LockMachine::next_deadline`] has passed. A spurious tick changes nothing.
    Tick,
    /// A tick claim made with our token failed its epoch check while we hold the lock node: the
    /// epoch was changed behind our back (an operator). Verify the token again.
    FenceFailed,
    /// The daemon is stopping: release gracefully so peers contend at once.
    Shutdown,
    /// An operator asked us to hand the lock over (`zkcron release`): release gracefully so
    /// peers contend at once, and stay out of contention for the takeover delay unless a peer
    /// takes it (a lone node takes it back then: no tick is lost for a maintenance request).
    Yield,
    /// This node's clock was judged against the other members' (`lock::clock`), as it is every
    /// so often. Skewed: it does not contend, and hands the lock over if it owns it; no longer
    /// skewed: it contends again.
    ClockJudged { skewed: bool },
    /// Whether a live member keeps the delayed queue where this node cannot read it (in
    /// PostgreSQL, while this node keeps it in ZooKeeper: `lock::node::kept_out_by_store`). Kept
    /// out, it does not contend, and hands the lock over if it owns it, as a skewed clock does.
    StoreJudged { kept_out: bool },
    /// Where the groups' balancer (`groups::balance`) places this node for this lock. `false`:
    /// another node should own it, so this one does not contend (an owner keeps the lock: a
    /// move is a release asked of it, a handoff); `true`: it contends when the lock is free.
    /// A lock nobody places contends as before groups existed.
    Placement { contend: bool },
}

/// Why a request failed, as far as the machine's decisions go (the driver logs the details).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RequestFailed {
    NodeExists,
    NoNode,
    BadVersion,
    NoAuth,
    /// Connection loss, timeout or a closed session: the request may or may not have happened.
    Connection,
    Other,
}

/// The epoch node as read back: its version is the latest acquisition's token.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Epoch {
    pub token: FencingToken,
    /// The session named in the epoch's data; `None` when the data did not parse.
    pub holder: Option<SessionId>,
}

/// A command for the driver. Each request action is answered by exactly one input.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// One multi-op: create the ephemeral lock node and bump the epoch's version.
    /// Answered by [`Input::CreateDone`].
    Create,
    /// Read the lock node and arm a watch on it (a data watch if present, an exists watch if not).
    /// Answered by [`Input::OwnerRead`].
    ReadOwner,
    /// Read the epoch node. Answered by [`Input::EpochRead`].
    ReadEpoch,
    /// One multi-op: check our lock node's version and bump the epoch, for a fresh token while we
    /// keep our node. Answered by [`Input::BumpDone`].
    Bump { lock_version: i32 },
    /// Mark our lock node as releasing, then delete it. Answered by [`Input::ReleaseDone`].
    Release { lock_version: i32 },
    /// Tell the daemon.
    Emit(LockEvent),
}

/// What the rest of zkcron hears from the lock.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LockEvent {
    /// We own the lock (on_locked). The token is strictly larger than any token before it.
    Acquired { token: FencingToken },
    /// We no longer own the lock, or can no longer prove it (on_lost).
    Lost,
    /// We gave the lock up on purpose — a release request, a clock judged skewed — and release
    /// it for a peer to take at once. Firing stops as for [`LockEvent::Lost`] (on_lost).
    HandedOver,
    /// Someone else holds the lock now (`None`: nobody). A squatting persistent node is reported
    /// again every minute while it stays.
    OwnerChanged { owner: Option<LockNode> },
}

/// A summary of the machine's state, for status output and tests.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LockState {
    Created,
    Own { token: FencingToken },
    Released { owner: LockNode },
    Waiting { contend_at: Instant },
    Stopped,
}

/// Data that exists in one state only lives in that variant.
#[derive(Debug, Clone, PartialEq, Eq)]
enum State {
    /// We want the lock and contend whenever a session is up.
    Created,
    /// A sub-state of Created: a node of our session holds the lock (a create whose reply was
    /// lost); we are reading the epoch to learn its token.
    Verifying {
        lock_version: i32,
    },
    Own {
        token: FencingToken,
        lock_version: i32,
    },
    /// Someone else holds it; `rewritten` records that its data changed, which an owner does only
    /// to mark a graceful release.
    Released {
        owner: LockNode,
        rewritten: bool,
        report_at: Option<Instant>,
    },
    /// The owner's node is gone; we contend at `contend_at` unless someone takes it first.
    /// `yielded`: it was ours, released on request, so our own node is not reclaimed.
    Waiting {
        contend_at: Instant,
        yielded: bool,
    },
    Stopped,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Session {
    id: SessionId,
    timeout: Duration,
    /// `Some(lost_at)` while disconnected: an owner reports Lost at that instant.
    disconnected: Option<Instant>,
}

/// The lock of one zkcron node. See the module docs.
#[derive(Debug, Clone)]
pub struct LockMachine {
    me: NodeId,
    takeover_delay: Duration,
    jitter: Duration,
    state: State,
    session: Option<Session>,
    /// A failed request to send again once its backoff has passed (and we are connected).
    retry: Option<(Instant, Action)>,
    failures: u32,
    /// The largest token we have announced, so that a re-acquisition never repeats one.
    last_token: Option<FencingToken>,
    /// Our clock is too far off the other members': we stay out of contention.
    clock_skewed: bool,
    /// The balancer prefers another node for this lock: we stay out of contention.
    standing_aside: bool,
    /// A live member keeps the delayed queue where we cannot read it.
    store_kept_out: bool,
}

/// Where the lock stands, as the rest of zkcron needs it: sent after every step that changes it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LockStatus {
    /// Our fencing token while we own the lock, connected or not.
    pub token: Option<FencingToken>,
    /// We own the lock *and* are connected: a run may start once its claim succeeds
    /// ([`LockMachine::may_fire`]).
    pub may_fire: bool,
    /// A session is up and connected.
    pub connected: bool,
}

impl LockMachine {
    /// A machine for node `me`. `jitter` is added to the takeover delay so that many peers do not
    /// contend at the same instant; the caller draws it, so tests are deterministic.
    pub fn new(me: NodeId, takeover_delay: Duration, jitter: Duration) -> Self {
        Self {
            me,
            takeover_delay,
            jitter,
            state: State::Created,
            session: None,
            retry: None,
            failures: 0,
            last_token: None,
            clock_skewed: false,
            standing_aside: false,
            store_kept_out: false,
        }
    }

    /// Feeds one fact; returns the commands it implies, in order. At most one of them is a
    /// request (and it comes last), so its answer is the next input.
    pub fn handle(&mut self, input: Input, now: Instant) -> Vec<Action> {
        let mut out = Vec::new();
        self.step(input, now, &mut out);
        out
    }

    /// When to feed [`Input::Tick`]; `None` means no timer is needed.
    pub fn next_deadline(&self) -> Option<Instant> {
        let session = self.session?;
        if let Some(lost_at) = session.disconnected {
            // Disconnected: only an owner's Lost deadline can make us act.
            return matches!(self.state, State::Own { .. }).then_some(lost_at);
        }
        let state_deadline = match &self.state {
            State::Waiting { contend_at, .. } => Some(*contend_at),
            State::Released { report_at, .. } => *report_at,
            _ => None,
        };
        let retry_deadline = self.retry.as_ref().map(|(at, _)| *at);
        match (state_deadline, retry_deadline) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// True only while we own the lock *and* are connected: a disconnected owner cannot prove
    /// ownership, so it fires nothing new (DESIGN.md "The lock").
    pub fn may_fire(&self) -> bool {
        matches!(self.state, State::Own { .. }) && self.connected()
    }

    /// The current state, summarised.
    pub fn state(&self) -> LockState {
        match &self.state {
            State::Created | State::Verifying { .. } => LockState::Created,
            State::Own { token, .. } => LockState::Own { token: *token },
            State::Released { owner, .. } => LockState::Released {
                owner: owner.clone(),
            },
            State::Waiting { contend_at, .. } => LockState::Waiting {
                contend_at: *contend_at,
            },
            State::Stopped => LockState::Stopped,
        }
    }

    /// Our current session, if one is established.
    pub fn session(&self) -> Option<SessionId> {
        self.session.map(|s| s.id)
    }

    /// A session is established and not disconnected.
    pub fn connected(&self) -> bool {
        self.session.is_some_and(|s| s.disconnected.is_none())
    }

    /// Where the lock stands for the rest of zkcron; `session_up`: the driver holds a session.
    pub fn status(&self, session_up: bool) -> LockStatus {
        let token = match self.state() {
            LockState::Own { token } => Some(token),
            _ => None,
        };
        LockStatus {
            token,
            may_fire: self.may_fire(),
            connected: session_up && self.connected(),
        }
    }

    fn step(&mut self, input: Input, now: Instant, out: &mut Vec<Action>) {
        if self.state == State::Stopped {
            return;
        }
        match input {
            Input::Start => self.contend_if_created(out),
            Input::SessionStarted { session, timeout } => {
                self.session_started(session, timeout, out)
            }
            Input::SessionReconnected => self.reconnected(out),
            Input::SessionDisconnected { last_heard } => {
                if let Some(session) = self.session.as_mut() {
                    // A second report never moves the deadline later.
                    let lost_at = last_heard.min(now) + session.timeout;
                    session.disconnected.get_or_insert(lost_at);
                }
                // The server may have been silent for a whole timeout already.
                self.tick(now, out);
            }
            Input::SessionExpired => self.expired(out),
            Input::CreateDone(result) => self.create_done(result, now, out),
            Input::OwnerRead(Ok(node)) => self.observe(node, now, out),
            Input::OwnerRead(Err(_)) => self.retry_later(Action::ReadOwner, now),
            Input::EpochRead(result) => self.epoch_read(result, now, out),
            Input::BumpDone(result) => self.bump_done(result, now, out),
            // Yielded: watch for the peer that takes it.
            Input::ReleaseDone(Ok(())) if self.yielded() => out.push(Action::ReadOwner),
            Input::ReleaseDone(Ok(())) => self.contend_if_created(out),
            // Not released: still ours, as the next read proves by session.
            Input::ReleaseDone(Err(_)) if self.yielded() => {
                tracing::warn!("the lock could not be handed over; keeping it");
                self.state = State::Created;
                self.retry_later(Action::ReadOwner, now);
            }
            // A release that failed is retried as a contention after a backoff, never in a loop.
            Input::ReleaseDone(Err(_)) => self.retry_later(Action::Create, now),
            Input::NodeDeleted => self.node_deleted(now, out),
            Input::NodeChanged => self.node_changed(out),
            Input::Tick => self.tick(now, out),
            Input::FenceFailed => self.fence_failed(out),
            Input::Shutdown => self.shutdown(out),
            Input::Yield => self.yield_lock(now, out),
            Input::ClockJudged { skewed } => self.clock_judged(skewed, now, out),
            Input::StoreJudged { kept_out } => {
                self.store_kept_out = kept_out;
                if kept_out {
                    self.yield_lock(now, out);
                } else {
                    self.contend_if_created(out);
                }
            }
            Input::Placement { contend } => {
                self.standing_aside = !contend;
                if contend {
                    self.contend_if_created(out);
                }
            }
        }
    }

    fn clock_judged(&mut self, skewed: bool, now: Instant, out: &mut Vec<Action>) {
        self.clock_skewed = skewed;
        if skewed {
            // Handed over as on an operator's request: peers contend at once.
            self.yield_lock(now, out);
        } else {
            self.contend_if_created(out);
        }
    }

    fn yielded(&self) -> bool {
        matches!(self.state, State::Waiting { yielded: true, .. })
    }

    fn yield_lock(&mut self, now: Instant, out: &mut Vec<Action>) {
        let State::Own { lock_version, .. } = self.state else {
            return; // not ours to hand over
        };
        if !self.connected() {
            return; // a release cannot go out; the fire side fires again after its limit
        }
        out.push(Action::Emit(LockEvent::HandedOver));
        self.state = State::Waiting {
            contend_at: now + self.takeover_delay + self.jitter,
            yielded: true,
        };
        out.push(Action::Release { lock_version });
    }

    fn session_started(&mut self, id: SessionId, timeout: Duration, out: &mut Vec<Action>) {
        if matches!(self.state, State::Own { .. }) {
            // The driver always reports an expiry first; a new session without one still means
            // the old session's ownership is unprovable.
            out.push(Action::Emit(LockEvent::Lost));
            self.state = State::Created;
        }
        self.session = Some(Session {
            id,
            timeout,
            disconnected: None,
        });
        self.retry = None;
        self.failures = 0;
        match self.state {
            State::Created | State::Verifying { .. } => self.contend(out),
            // Watches died with the old session: look again.
            _ => out.push(Action::ReadOwner),
        }
    }

    fn reconnected(&mut self, out: &mut Vec<Action>) {
        let Some(session) = self.session.as_mut() else {
            return;
        };
        session.disconnected = None;
        self.retry = None;
        match self.state {
            State::Created | State::Verifying { .. } => self.contend(out),
            // Nothing is delivered while disconnected and watches are one-shot: re-read, re-arm.
            _ => out.push(Action::ReadOwner),
        }
    }

    fn expired(&mut self, out: &mut Vec<Action>) {
        self.session = None;
        self.retry = None;
        match self.state {
            // The token died with the session: any claim with it now fails (DESIGN.md "The lock").
            State::Own { .. } => {
                out.push(Action::Emit(LockEvent::Lost));
                self.state = State::Created;
            }
            State::Verifying { .. } => self.state = State::Created,
            _ => {}
        }
    }

    fn create_done(
        &mut self,
        result: Result<FencingToken, RequestFailed>,
        now: Instant,
        out: &mut Vec<Action>,
    ) {
        // Only Created sends Create, and only while connected; an answer in another state, or one
        // that arrives after the connection dropped, is stale and ignored: a node it made is found
        // by the next read, by session, once we are connected again.
        if self.state != State::Created || !self.connected() {
            return;
        }
        match result {
            Ok(token) => {
                self.failures = 0;
                // A fresh node has data version 0.
                self.become_owner(token, 0, out);
            }
            // Someone holds it, perhaps our own session if the reply to an earlier create was
            // lost: find out who, by session.
            Err(RequestFailed::NodeExists) => out.push(Action::ReadOwner),
            Err(_) => self.retry_later(Action::Create, now),
        }
    }

    /// What the lock node looks like now, from a read that armed a watch.
    fn observe(&mut self, node: Option<LockNode>, now: Instant, out: &mut Vec<Action>) {
        self.failures = 0;
        let my_session = self.session.map(|s| s.id);
        let kept_out = !self.may_contend();
        match (&mut self.state, node) {
            // Ours, proved by session: still owned.
            (State::Own { lock_version, .. }, Some(node)) if Some(node.session) == my_session => {
                *lock_version = node.version;
            }
            // Ours, being released on request (its releasing mark fired our watch): the
            // deletion follows.
            (State::Waiting { yielded: true, .. }, Some(node))
                if Some(node.session) == my_session => {}
            // Ours, but not (yet) known as ours: a lost create reply. Learn the token.
            (_, Some(node)) if Some(node.session) == my_session => {
                self.state = State::Verifying {
                    lock_version: node.version,
                };
                out.push(Action::ReadEpoch);
            }
            (State::Own { .. }, Some(node)) => {
                out.push(Action::Emit(LockEvent::Lost));
                self.become_released(node, now, out);
            }
            (State::Own { .. }, None) => {
                out.push(Action::Emit(LockEvent::Lost));
                self.contend(out);
            }
            (
                State::Released {
                    owner, rewritten, ..
                },
                Some(node),
            ) if owner.session == node.session => {
                // Still there after a change: it was a release mark only if it says so. Anything
                // else (an operator's or a tool's write) must not turn the owner's later crash
                // into a handoff without the takeover delay.
                *rewritten = node.info.as_ref().is_some_and(|info| info.releasing);
                *owner = node;
            }
            (_, Some(node)) => self.become_released(node, now, out),
            // The node vanished while our watch was being re-armed: the same as a deletion.
            (State::Released { .. }, None) => self.node_deleted(now, out),
            (State::Waiting { contend_at, .. }, None) => {
                if now >= *contend_at {
                    self.contend(out);
                }
            }
            // Kept out: the read armed a watch for the node's creation; nothing to do until then.
            (State::Created, None) if kept_out => {}
            (State::Created | State::Verifying { .. }, None) => self.contend(out),
            (State::Stopped, None) => {}
        }
    }

    /// The version of our lock node being verified, while connected (reconnecting re-contends
    /// from Verifying).
    fn verifying(&self) -> Option<i32> {
        let State::Verifying { lock_version } = self.state else {
            return None;
        };
        self.connected().then_some(lock_version)
    }

    fn epoch_read(
        &mut self,
        result: Result<Epoch, RequestFailed>,
        now: Instant,
        out: &mut Vec<Action>,
    ) {
        let Some(lock_version) = self.verifying() else {
            return;
        };
        let my_session = self.session.map(|s| s.id);
        match result {
            Ok(epoch) if epoch.holder.is_some() && epoch.holder == my_session => {
                if self.last_token.is_some_and(|last| epoch.token <= last) {
                    // We already announced this token and then reported Lost (a long disconnect
                    // the session survived): take a fresh one so tokens only grow.
                    out.push(Action::Bump { lock_version });
                } else {
                    self.become_owner(epoch.token, lock_version, out);
                }
            }
            Ok(_) => {
                // Our node, but the epoch names another session: the token cannot be proved.
                // Give the node up and contend afresh rather than own without a fence.
                tracing::warn!(
                    "lock node is ours but the epoch names another session; releasing it"
                );
                self.state = State::Created;
                out.push(Action::Release { lock_version });
            }
            Err(_) => {
                self.state = State::Created;
                self.retry_later(Action::ReadOwner, now);
            }
        }
    }

    fn bump_done(
        &mut self,
        result: Result<FencingToken, RequestFailed>,
        now: Instant,
        out: &mut Vec<Action>,
    ) {
        let Some(lock_version) = self.verifying() else {
            return;
        };
        match result {
            Ok(token) => self.become_owner(token, lock_version, out),
            // Our node changed or vanished between the read and the bump: look again.
            Err(RequestFailed::BadVersion | RequestFailed::NoNode) => {
                self.state = State::Created;
                out.push(Action::ReadOwner);
            }
            Err(_) => {
                self.state = State::Created;
                self.retry_later(Action::ReadOwner, now);
            }
        }
    }

    fn node_deleted(&mut self, now: Instant, out: &mut Vec<Action>) {
        match &self.state {
            State::Own { .. } => {
                // Deleted under a live session (an operator, or expiry on its way): we cannot
                // prove ownership any more.
                out.push(Action::Emit(LockEvent::Lost));
                self.contend(out);
            }
            // Our own earlier session or process owned it: reclaim at once (DESIGN.md "Waiting").
            State::Released { owner, .. } if owner.node_id() == Some(&self.me) => self.contend(out),
            // A persistent squatter ran nothing: its removal by an operator is the signal to go.
            State::Released { owner, .. } if owner.is_squatter() => {
                out.push(Action::Emit(LockEvent::OwnerChanged { owner: None }));
                self.contend(out);
            }
            // A graceful handoff: the owner marked its node before deleting it.
            State::Released {
                owner, rewritten, ..
            } if *rewritten || owner.info.as_ref().is_some_and(|info| info.releasing) => {
                out.push(Action::Emit(LockEvent::OwnerChanged { owner: None }));
                self.contend(out);
            }
            // A peer's node vanished (crash or expiry): give it the takeover delay to reclaim.
            State::Released { .. } => {
                out.push(Action::Emit(LockEvent::OwnerChanged { owner: None }));
                self.state = State::Waiting {
                    contend_at: now + self.takeover_delay + self.jitter,
                    yielded: false,
                };
                out.push(Action::ReadOwner);
            }
            State::Waiting { .. } => out.push(Action::ReadOwner),
            State::Created | State::Verifying { .. } | State::Stopped => {}
        }
    }

    fn node_changed(&mut self, out: &mut Vec<Action>) {
        let kept_out = !self.may_contend();
        match &mut self.state {
            State::Released { rewritten, .. } => {
                *rewritten = true;
                out.push(Action::ReadOwner);
            }
            State::Own { .. } | State::Waiting { .. } => out.push(Action::ReadOwner),
            // Kept out and following the owner: someone created the node.
            State::Created if kept_out => out.push(Action::ReadOwner),
            State::Created | State::Verifying { .. } | State::Stopped => {}
        }
    }

    fn tick(&mut self, now: Instant, out: &mut Vec<Action>) {
        let Some(session) = self.session else { return };
        if let Some(lost_at) = session.disconnected {
            // An isolated client hears of its expiry only when it reconnects, so we judge by our
            // own clock: past the session timeout the server may have expired us (promise 1).
            if now >= lost_at && matches!(self.state, State::Own { .. }) {
                out.push(Action::Emit(LockEvent::Lost));
                self.state = State::Created;
            }
            return;
        }
        match &mut self.state {
            State::Waiting { contend_at, .. } if now >= *contend_at => {
                self.retry = None;
                return self.contend(out);
            }
            State::Released {
                owner,
                report_at: Some(at),
                ..
            } if now >= *at => {
                *at = now + SQUATTER_REPORT_INTERVAL;
                out.push(Action::Emit(LockEvent::OwnerChanged {
                    owner: Some(owner.clone()),
                }));
            }
            _ => {}
        }
        if self.retry.as_ref().is_some_and(|(at, _)| now >= *at) {
            match self.retry.take() {
                // Stays Created: it contends once the clock agrees again, or it is placed here.
                Some((_, Action::Create)) if !self.may_contend() => {}
                Some((_, action)) => out.push(action),
                None => {}
            }
        }
    }

    fn shutdown(&mut self, out: &mut Vec<Action>) {
        match self.state {
            State::Own { lock_version, .. } => {
                out.push(Action::Emit(LockEvent::Lost));
                if self.connected() {
                    out.push(Action::Release { lock_version });
                }
            }
            // Our node, token not yet known: release it too, so peers need not wait it out.
            State::Verifying { lock_version } if self.connected() => {
                out.push(Action::Release { lock_version })
            }
            _ => {}
        }
        self.state = State::Stopped;
        self.retry = None;
    }

    fn contend_if_created(&mut self, out: &mut Vec<Action>) {
        if self.state == State::Created && self.retry.is_none() {
            self.contend(out);
        }
    }

    /// Goes to Created and, when connected and neither our clock nor the balancer keeps us out,
    /// sends the acquiring multi-op.
    fn contend(&mut self, out: &mut Vec<Action>) {
        self.state = State::Created;
        if !self.connected() {
            return;
        }
        if self.may_contend() {
            self.retry = None;
            out.push(Action::Create);
        } else {
            // Kept out, we still follow the owner: a crashed owner's node must be waited out
            // (the takeover delay) by whoever is placed on its group later, exactly as by a
            // contender; only a handoff's marked deletion lets the next one go at once.
            out.push(Action::ReadOwner);
        }
    }

    /// Neither our clock nor the balancer keeps us out.
    fn may_contend(&self) -> bool {
        !self.clock_skewed && !self.standing_aside && !self.store_kept_out
    }

    fn fence_failed(&mut self, out: &mut Vec<Action>) {
        if let State::Own { lock_version, .. } = self.state {
            // Our token no longer passes the fence: we cannot fire, so say so, and re-learn it.
            tracing::warn!(
                "our fencing token no longer matches the epoch; verifying the lock again"
            );
            out.push(Action::Emit(LockEvent::Lost));
            self.state = State::Verifying { lock_version };
            if self.connected() {
                out.push(Action::ReadEpoch);
            }
        }
    }

    fn become_owner(&mut self, token: FencingToken, lock_version: i32, out: &mut Vec<Action>) {
        if self.last_token.is_some_and(|last| token <= last) {
            // The epoch went backwards (deleted and recreated): bump until tokens grow again,
            // so no holder of an older, larger token can be mistaken for a newer one.
            tracing::warn!(
                token = token.0,
                "the epoch's version went backwards; bumping it past our last token"
            );
            self.state = State::Verifying { lock_version };
            out.push(Action::Bump { lock_version });
            return;
        }
        self.state = State::Own {
            token,
            lock_version,
        };
        self.last_token = Some(self.last_token.map_or(token, |last| last.max(token)));
        out.push(Action::Emit(LockEvent::Acquired { token }));
    }

    fn become_released(&mut self, owner: LockNode, now: Instant, out: &mut Vec<Action>) {
        let report_at = owner
            .is_squatter()
            .then_some(now + SQUATTER_REPORT_INTERVAL);
        let rewritten = owner.info.as_ref().is_some_and(|info| info.releasing);
        out.push(Action::Emit(LockEvent::OwnerChanged {
            owner: Some(owner.clone()),
        }));
        self.state = State::Released {
            owner,
            rewritten,
            report_at,
        };
    }

    /// Schedules `action` again after a doubling backoff, so a refused request (NoAuth, an ACL)
    /// never turns into a hot loop.
    fn retry_later(&mut self, action: Action, now: Instant) {
        let backoff = MIN_BACKOFF
            .saturating_mul(1 << self.failures.min(16))
            .min(MAX_BACKOFF);
        self.failures = self.failures.saturating_add(1);
        self.retry = Some((now + backoff, action));
    }
}

#[cfg(test)]
mod tests;
