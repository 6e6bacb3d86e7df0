//! Transition tables and properties of the lock machine: one row per transition in DESIGN.md.

use std::time::{Duration, Instant};

use proptest::prelude::*;

use super::*;
use crate::lock::node::OwnerInfo;

const ME: &str = "10.0.0.1";
const PEER: &str = "10.0.0.2";
const MY_SESSION: SessionId = SessionId(0x100);
const OLD_SESSION: SessionId = SessionId(0x50);
const PEER_SESSION: SessionId = SessionId(0x200);
const TIMEOUT: Duration = Duration::from_secs(4);
const DELAY: Duration = Duration::from_secs(10);
const JITTER: Duration = Duration::from_millis(300);

fn info(node_id: &str, releasing: bool) -> OwnerInfo {
    OwnerInfo {
        node_id: NodeId::new(node_id),
        ip: node_id.into(),
        host: "host".into(),
        pid: 1,
        version: "test".into(),
        since_unix_ms: 0,
        releasing,
        schedule: None,
        clock_offset_ms: None,
        clock_standing: None,
        reload: None,
        tags: std::collections::BTreeSet::new(),
        ledger_format: None,
        api: None,
        delayed_store: None,
        delayed_store_reachable: None,
    }
}

fn node(session: SessionId, node_id: &str) -> LockNode {
    LockNode {
        session,
        version: 0,
        info: Some(info(node_id, false)),
    }
}

fn machine() -> LockMachine {
    LockMachine::new(NodeId::new(ME), DELAY, JITTER)
}

/// A machine with a session, as the driver leaves it after `SessionStarted`.
fn connected(t0: Instant) -> LockMachine {
    let mut m = machine();
    assert_eq!(
        m.handle(
            Input::SessionStarted {
                session: MY_SESSION,
                timeout: TIMEOUT
            },
            t0
        ),
        vec![Action::Create]
    );
    m
}

fn owning(t0: Instant, token: i32) -> LockMachine {
    let mut m = connected(t0);
    m.handle(Input::CreateDone(Ok(FencingToken(token))), t0);
    assert_eq!(
        m.state,
        State::Own {
            token: FencingToken(token),
            lock_version: 0
        }
    );
    m
}

fn released(t0: Instant, owner: LockNode) -> LockMachine {
    let mut m = connected(t0);
    m.handle(Input::CreateDone(Err(RequestFailed::NodeExists)), t0);
    m.handle(Input::OwnerRead(Ok(Some(owner))), t0);
    assert!(
        matches!(m.state, State::Released { .. }),
        "setup: released, got {:?}",
        m.state
    );
    m
}

fn waiting(t0: Instant) -> LockMachine {
    let mut m = released(t0, node(PEER_SESSION, PEER));
    m.handle(Input::NodeDeleted, t0);
    m.handle(Input::OwnerRead(Ok(None)), t0);
    assert_eq!(
        m.state,
        State::Waiting {
            contend_at: t0 + DELAY + JITTER,
            yielded: false,
        }
    );
    m
}

fn acquired(token: i32) -> Action {
    Action::Emit(LockEvent::Acquired {
        token: FencingToken(token),
    })
}

fn lost() -> Action {
    Action::Emit(LockEvent::Lost)
}

fn owner_changed(owner: Option<LockNode>) -> Action {
    Action::Emit(LockEvent::OwnerChanged { owner })
}

fn released_state(owner: LockNode) -> State {
    State::Released {
        owner,
        rewritten: false,
        report_at: None,
    }
}

#[test]
fn transitions() {
    let t0 = Instant::now();
    let peer = node(PEER_SESSION, PEER);
    let my_old = node(OLD_SESSION, ME);
    let releasing = LockNode {
        info: Some(info(PEER, true)),
        ..peer.clone()
    };
    let garbage = LockNode {
        info: None,
        ..peer.clone()
    };
    let mut own_node = node(MY_SESSION, ME);
    own_node.version = 3;
    #[rustfmt::skip]
    let cases: Vec<(&str, LockMachine, Input, State, Vec<Action>)> = vec![
        ("start without a session waits", machine(), Input::Start, State::Created, vec![]),
        ("created contends once a session is up", machine(),
            Input::SessionStarted { session: MY_SESSION, timeout: TIMEOUT }, State::Created, vec![Action::Create]),
        ("create succeeds: own with the epoch's token", connected(t0), Input::CreateDone(Ok(FencingToken(7))),
            State::Own { token: FencingToken(7), lock_version: 0 }, vec![acquired(7)]),
        ("create refused: find out who holds it", connected(t0), Input::CreateDone(Err(RequestFailed::NodeExists)),
            State::Created, vec![Action::ReadOwner]),
        ("lost create reply, node is ours: read the token", connected(t0), Input::OwnerRead(Ok(Some(own_node.clone()))),
            State::Verifying { lock_version: 3 }, vec![Action::ReadEpoch]),
        ("a peer holds it: released, owner reported", connected(t0), Input::OwnerRead(Ok(Some(peer.clone()))),
            released_state(peer.clone()), vec![owner_changed(Some(peer.clone()))]),
        ("an ip-equal node of another session is not ours", connected(t0), Input::OwnerRead(Ok(Some(my_old.clone()))),
            released_state(my_old.clone()), vec![owner_changed(Some(my_old.clone()))]),
        ("malformed data is a foreign owner", connected(t0), Input::OwnerRead(Ok(Some(garbage.clone()))),
            released_state(garbage.clone()), vec![owner_changed(Some(garbage.clone()))]),
        ("node gone before we read it: contend again", connected(t0), Input::OwnerRead(Ok(None)),
            State::Created, vec![Action::Create]),
        ("peer's node deleted: wait the delay", released(t0, peer.clone()), Input::NodeDeleted,
            State::Waiting { contend_at: t0 + DELAY + JITTER, yielded: false }, vec![owner_changed(None), Action::ReadOwner]),
        ("our old node deleted: reclaim at once", released(t0, my_old.clone()), Input::NodeDeleted,
            State::Created, vec![Action::Create]),
        ("graceful release: contend at once", released(t0, releasing.clone()), Input::NodeDeleted,
            State::Created, vec![owner_changed(None), Action::Create]),
        ("owner rewrote its node: re-read, remember it", released(t0, peer.clone()), Input::NodeChanged,
            State::Released { owner: peer.clone(), rewritten: true, report_at: None }, vec![Action::ReadOwner]),
        ("released: a new owner is reported", released(t0, peer.clone()), Input::OwnerRead(Ok(Some(my_old.clone()))),
            released_state(my_old.clone()), vec![owner_changed(Some(my_old.clone()))]),
        ("waiting: nothing before the delay", waiting(t0), Input::Tick,
            State::Waiting { contend_at: t0 + DELAY + JITTER, yielded: false }, vec![]),
        ("waiting: someone took it", waiting(t0), Input::NodeChanged,
            State::Waiting { contend_at: t0 + DELAY + JITTER, yielded: false }, vec![Action::ReadOwner]),
        ("waiting: the old owner reclaimed", waiting(t0), Input::OwnerRead(Ok(Some(peer.clone()))),
            released_state(peer.clone()), vec![owner_changed(Some(peer.clone()))]),
        ("own: disconnect stops firing but keeps the lock", owning(t0, 1),
            Input::SessionDisconnected { last_heard: t0 }, State::Own { token: FencingToken(1), lock_version: 0 }, vec![]),
        ("own: node deleted under us", owning(t0, 1), Input::NodeDeleted, State::Created, vec![lost(), Action::Create]),
        ("own: someone else's node found", owning(t0, 1), Input::OwnerRead(Ok(Some(peer.clone()))),
            released_state(peer.clone()), vec![lost(), owner_changed(Some(peer.clone()))]),
        ("own: our node re-read", owning(t0, 1), Input::OwnerRead(Ok(Some(own_node.clone()))),
            State::Own { token: FencingToken(1), lock_version: 3 }, vec![]),
        ("own: session expired", owning(t0, 1), Input::SessionExpired, State::Created, vec![lost()]),
        ("own: reconnected in the same session: re-read", owning(t0, 1), Input::SessionReconnected,
            State::Own { token: FencingToken(1), lock_version: 0 }, vec![Action::ReadOwner]),
        ("own: shutdown releases gracefully", owning(t0, 1), Input::Shutdown,
            State::Stopped, vec![lost(), Action::Release { lock_version: 0 }]),
        ("released: shutdown has nothing to release", released(t0, peer.clone()), Input::Shutdown, State::Stopped, vec![]),
        ("stopped ignores everything", { let mut m = connected(t0); m.handle(Input::Shutdown, t0); m },
            Input::CreateDone(Ok(FencingToken(1))), State::Stopped, vec![]),
        ("a stale create answer outside Created is ignored", released(t0, peer.clone()), Input::CreateDone(Ok(FencingToken(9))),
            released_state(peer.clone()), vec![]),
    ];
    for (name, mut m, input, want_state, want_actions) in cases {
        assert_eq!(m.handle(input, t0), want_actions, "{name}: actions");
        assert_eq!(m.state, want_state, "{name}: state");
    }
}

#[test]
fn epoch_answers() {
    let t0 = Instant::now();
    let verifying = || {
        let mut m = connected(t0);
        m.handle(Input::OwnerRead(Ok(Some(node(MY_SESSION, ME)))), t0);
        m
    };
    let mut m = verifying();
    let names_us = Epoch {
        token: FencingToken(4),
        holder: Some(MY_SESSION),
    };
    assert_eq!(
        m.handle(Input::EpochRead(Ok(names_us)), t0),
        vec![acquired(4)],
        "epoch names our session: own"
    );

    let mut m = verifying();
    let names_peer = Epoch {
        token: FencingToken(4),
        holder: Some(PEER_SESSION),
    };
    assert_eq!(
        m.handle(Input::EpochRead(Ok(names_peer)), t0),
        vec![Action::Release { lock_version: 0 }],
        "token unprovable: give the node up"
    );
    assert_eq!(
        m.handle(Input::ReleaseDone(Ok(())), t0),
        vec![Action::Create],
        "then contend afresh"
    );

    let mut m = verifying();
    let unparsable = Epoch {
        token: FencingToken(4),
        holder: None,
    };
    assert!(
        !m.handle(Input::EpochRead(Ok(unparsable)), t0)
            .contains(&acquired(4)),
        "unparsable epoch proves nothing"
    );
}

#[test]
fn disconnected_owner_reports_lost_at_last_heard_plus_timeout() {
    let t0 = Instant::now();
    let mut m = owning(t0, 1);
    assert!(m.may_fire());
    let last_heard = t0 + Duration::from_millis(500);
    m.handle(
        Input::SessionDisconnected { last_heard },
        t0 + Duration::from_secs(2),
    );
    assert!(!m.may_fire(), "a disconnected owner cannot prove ownership");
    assert_eq!(
        m.next_deadline(),
        Some(last_heard + TIMEOUT),
        "Lost is due one session timeout after the server last answered"
    );
    m.handle(
        Input::SessionDisconnected {
            last_heard: t0 + Duration::from_secs(3),
        },
        t0 + Duration::from_secs(3),
    );
    assert_eq!(
        m.next_deadline(),
        Some(last_heard + TIMEOUT),
        "a second report never moves the deadline later"
    );
    assert_eq!(
        m.handle(Input::Tick, last_heard + TIMEOUT - Duration::from_millis(1)),
        vec![],
        "not before"
    );
    assert_eq!(m.handle(Input::Tick, last_heard + TIMEOUT), vec![lost()]);
    assert_eq!(
        m.next_deadline(),
        None,
        "nothing to time while disconnected and not owning"
    );
}

#[test]
fn session_survives_a_reported_loss_then_takes_a_fresh_token() {
    let t0 = Instant::now();
    let mut m = owning(t0, 5);
    m.handle(Input::SessionDisconnected { last_heard: t0 }, t0);
    assert_eq!(m.handle(Input::Tick, t0 + TIMEOUT), vec![lost()]);
    let t1 = t0 + TIMEOUT + Duration::from_secs(1);
    assert_eq!(
        m.handle(Input::SessionReconnected, t1),
        vec![Action::Create],
        "contend again"
    );
    assert_eq!(
        m.handle(Input::CreateDone(Err(RequestFailed::NodeExists)), t1),
        vec![Action::ReadOwner]
    );
    assert_eq!(
        m.handle(Input::OwnerRead(Ok(Some(node(MY_SESSION, ME)))), t1),
        vec![Action::ReadEpoch]
    );
    let epoch = Epoch {
        token: FencingToken(5),
        holder: Some(MY_SESSION),
    };
    assert_eq!(
        m.handle(Input::EpochRead(Ok(epoch)), t1),
        vec![Action::Bump { lock_version: 0 }],
        "token 5 was announced and lost already: a re-acquisition needs a new one"
    );
    assert_eq!(
        m.handle(Input::BumpDone(Ok(FencingToken(6))), t1),
        vec![acquired(6)]
    );
}

#[test]
fn expired_owner_reclaims_with_a_new_session() {
    let t0 = Instant::now();
    let mut m = owning(t0, 1);
    assert_eq!(m.handle(Input::SessionExpired, t0), vec![lost()]);
    assert_eq!(m.handle(Input::Start, t0), vec![], "no session, no request");
    let new_session = Input::SessionStarted {
        session: SessionId(0x999),
        timeout: TIMEOUT,
    };
    assert_eq!(
        m.handle(new_session, t0),
        vec![Action::Create],
        "new session: contend at once"
    );
    assert_eq!(
        m.handle(Input::CreateDone(Ok(FencingToken(2))), t0),
        vec![acquired(2)]
    );
}

#[test]
fn waiting_contends_after_the_delay_and_rechecks_after_reconnect() {
    let t0 = Instant::now();
    let due = t0 + DELAY + JITTER;
    let mut m = waiting(t0);
    assert_eq!(m.next_deadline(), Some(due));
    assert_eq!(m.handle(Input::Tick, due), vec![Action::Create]);

    let mut m = waiting(t0);
    m.handle(Input::SessionDisconnected { last_heard: t0 }, t0);
    assert_eq!(m.next_deadline(), None, "no contending while disconnected");
    assert_eq!(
        m.handle(Input::SessionReconnected, due),
        vec![Action::ReadOwner],
        "watches died: re-read first"
    );
    assert_eq!(
        m.handle(Input::OwnerRead(Ok(None)), due),
        vec![Action::Create],
        "still free and due: contend"
    );
}

#[test]
fn rewritten_node_that_vanished_was_a_graceful_release() {
    let t0 = Instant::now();
    let mut m = released(t0, node(PEER_SESSION, PEER));
    m.handle(Input::NodeChanged, t0);
    assert_eq!(
        m.handle(Input::OwnerRead(Ok(None)), t0),
        vec![owner_changed(None), Action::Create],
        "the owner marked its node and deleted it before we re-read: contend at once"
    );
}

#[test]
fn a_change_that_is_not_a_release_mark_leaves_the_takeover_delay_in_place() {
    // Chaos suite, garbage in the lock node: someone writes into the owner's node; the owner
    // crashes later. Its deletion is not a handoff.
    let t0 = Instant::now();
    let mut m = released(t0, node(PEER_SESSION, PEER));
    m.handle(Input::NodeChanged, t0);
    let garbage = LockNode {
        session: PEER_SESSION,
        version: 1,
        info: None,
    };
    m.handle(Input::OwnerRead(Ok(Some(garbage))), t0);
    assert_eq!(
        m.handle(Input::NodeDeleted, t0),
        vec![owner_changed(None), Action::ReadOwner]
    );
    assert_eq!(
        m.next_deadline(),
        Some(t0 + DELAY + JITTER),
        "waits the delay"
    );
}

#[test]
fn a_squatter_removed_by_an_operator_is_contended_for_at_once() {
    let t0 = Instant::now();
    let squatter = LockNode {
        session: SessionId::PERSISTENT,
        version: 0,
        info: None,
    };
    let mut m = released(t0, squatter);
    assert_eq!(
        m.handle(Input::NodeDeleted, t0),
        vec![owner_changed(None), Action::Create],
        "a persistent node owned nothing: no takeover delay"
    );
}

#[test]
fn squatter_is_never_owned_and_is_reported_at_a_bounded_rate() {
    let t0 = Instant::now();
    let squatter = LockNode {
        session: SessionId::PERSISTENT,
        version: 0,
        info: None,
    };
    let mut m = released(t0, squatter.clone());
    assert_eq!(m.next_deadline(), Some(t0 + SQUATTER_REPORT_INTERVAL));
    assert_eq!(
        m.handle(Input::Tick, t0 + Duration::from_secs(1)),
        vec![],
        "not again within the interval"
    );
    let later = t0 + SQUATTER_REPORT_INTERVAL;
    assert_eq!(
        m.handle(Input::Tick, later),
        vec![owner_changed(Some(squatter))]
    );
    assert_eq!(m.next_deadline(), Some(later + SQUATTER_REPORT_INTERVAL));
    assert!(!m.may_fire());
}

#[test]
fn refused_requests_back_off_instead_of_looping() {
    let t0 = Instant::now();
    let mut m = connected(t0);
    assert_eq!(
        m.handle(Input::CreateDone(Err(RequestFailed::NoAuth)), t0),
        vec![]
    );
    assert_eq!(m.next_deadline(), Some(t0 + MIN_BACKOFF));
    assert_eq!(
        m.handle(Input::Tick, t0 + MIN_BACKOFF),
        vec![Action::Create]
    );
    let t1 = t0 + MIN_BACKOFF;
    m.handle(Input::CreateDone(Err(RequestFailed::NoAuth)), t1);
    assert_eq!(
        m.next_deadline(),
        Some(t1 + MIN_BACKOFF * 2),
        "backoff doubles"
    );
    for _ in 0..40 {
        let at = m.next_deadline().unwrap();
        m.handle(Input::Tick, at);
        m.handle(Input::CreateDone(Err(RequestFailed::NoAuth)), at);
    }
    let at = m.next_deadline().unwrap();
    m.handle(Input::Tick, at);
    m.handle(Input::CreateDone(Err(RequestFailed::NoAuth)), at);
    assert_eq!(
        m.next_deadline(),
        Some(at + MAX_BACKOFF),
        "backoff is capped"
    );
}

#[test]
fn spurious_ticks_change_nothing() {
    let t0 = Instant::now();
    for mut m in [
        machine(),
        connected(t0),
        owning(t0, 1),
        released(t0, node(PEER_SESSION, PEER)),
        waiting(t0),
    ] {
        let before = m.state.clone();
        assert_eq!(m.handle(Input::Tick, t0), vec![], "{before:?}");
        assert_eq!(m.state, before);
    }
}

// ---- property test: random event sequences, invariants after every step ----

/// Inputs whose answers are not tied to one of our requests; answers get their tokens from a
/// monotone counter below, as ZooKeeper's epoch version is.
#[derive(Debug, Clone)]
enum Step {
    Fact(Input),
    CreateOk,
    BumpOk,
    EpochNamesSession(i64),
    /// Our current session's node / epoch data, whichever session that is when applied: random
    /// ids alone rarely meet the lost-reply and re-acquisition paths.
    OwnerReadMine,
    EpochNamesMine,
}

fn any_session() -> impl Strategy<Value = SessionId> {
    (0i64..4).prop_map(SessionId)
}

fn any_node() -> impl Strategy<Value = Option<LockNode>> {
    let info = prop_oneof![
        Just(None),
        (prop_oneof![Just(ME), Just(PEER)], any::<bool>())
            .prop_map(|(id, rel)| Some(info(id, rel))),
    ];
    proptest::option::of(
        (any_session(), 0i32..3, info).prop_map(|(session, version, info)| LockNode {
            session,
            version,
            info,
        }),
    )
}

fn any_failure() -> impl Strategy<Value = RequestFailed> {
    prop_oneof![
        Just(RequestFailed::NodeExists),
        Just(RequestFailed::NoNode),
        Just(RequestFailed::BadVersion),
        Just(RequestFailed::NoAuth),
        Just(RequestFailed::Connection),
    ]
}

fn any_step() -> impl Strategy<Value = Step> {
    prop_oneof![
        Just(Step::Fact(Input::Start)),
        (1i64..4).prop_map(|id| Step::Fact(Input::SessionStarted {
            session: SessionId(id),
            timeout: TIMEOUT
        })),
        Just(Step::Fact(Input::SessionReconnected)),
        (0u64..5000).prop_map(|ago| Step::Fact(Input::SessionDisconnected {
            // Resolved against `now` when applied; see `resolve`.
            last_heard: base() + Duration::from_millis(ago),
        })),
        Just(Step::Fact(Input::SessionExpired)),
        Just(Step::CreateOk),
        any_failure().prop_map(|e| Step::Fact(Input::CreateDone(Err(e)))),
        any_node().prop_map(|n| Step::Fact(Input::OwnerRead(Ok(n)))),
        any_failure().prop_map(|e| Step::Fact(Input::OwnerRead(Err(e)))),
        (0i64..4).prop_map(Step::EpochNamesSession),
        Just(Step::OwnerReadMine),
        Just(Step::EpochNamesMine),
        Just(Step::BumpOk),
        any_failure().prop_map(|e| Step::Fact(Input::BumpDone(Err(e)))),
        Just(Step::Fact(Input::ReleaseDone(Ok(())))),
        Just(Step::Fact(Input::NodeDeleted)),
        Just(Step::Fact(Input::NodeChanged)),
        Just(Step::Fact(Input::Tick)),
        Just(Step::Fact(Input::FenceFailed)),
        Just(Step::Fact(Input::Yield)),
        any::<bool>().prop_map(|skewed| Step::Fact(Input::ClockJudged { skewed })),
        any::<bool>().prop_map(|kept_out| Step::Fact(Input::StoreJudged { kept_out })),
        any::<bool>().prop_map(|contend| Step::Fact(Input::Placement { contend })),
        Just(Step::Fact(Input::Shutdown)),
    ]
}

/// A fixed origin for generated instants; the property re-bases them on its own clock.
fn base() -> Instant {
    use std::sync::OnceLock;
    static BASE: OnceLock<Instant> = OnceLock::new();
    *BASE.get_or_init(Instant::now)
}

/// What the property tracks beside the machine.
struct Observer {
    held: bool,
    last_token: Option<FencingToken>,
    /// When the connection of a holding machine dropped, by the property's own reckoning.
    disconnected_at: Option<Instant>,
    /// The last clock verdict fed in: skewed, the machine never contends.
    skewed: bool,
    /// The last placement fed in: placed elsewhere, the machine never contends.
    aside: bool,
    /// The last store verdict fed in: kept out, the machine never contends.
    kept_out: bool,
}

impl Observer {
    fn check(
        &mut self,
        m: &LockMachine,
        input: &Input,
        actions: &[Action],
        now: Instant,
    ) -> Result<(), TestCaseError> {
        for action in actions {
            match action {
                Action::Create => {
                    prop_assert!(!self.skewed, "contends with a skewed clock: {input:?}");
                    prop_assert!(!self.aside, "contends while placed elsewhere: {input:?}");
                    prop_assert!(
                        !self.kept_out,
                        "contends while a member keeps the queue where we cannot read it: {input:?}"
                    );
                }
                Action::Emit(LockEvent::Acquired { token }) => {
                    prop_assert!(!self.held, "Acquired twice without a Lost between");
                    prop_assert!(
                        self.last_token.is_none_or(|last| *token > last),
                        "token {token} does not exceed {:?}",
                        self.last_token
                    );
                    let proof = match input {
                        Input::CreateDone(Ok(_)) | Input::BumpDone(Ok(_)) => true,
                        Input::EpochRead(Ok(epoch)) => {
                            epoch.holder.is_some() && epoch.holder == m.session()
                        }
                        _ => false,
                    };
                    prop_assert!(
                        proof,
                        "Own without a create or proof in this session: {input:?}"
                    );
                    prop_assert!(m.session().is_some(), "Own without a session");
                    self.held = true;
                    self.last_token = Some(*token);
                }
                Action::Emit(LockEvent::Lost | LockEvent::HandedOver) => {
                    prop_assert!(self.held, "Lost without Acquired");
                    self.held = false;
                }
                _ => {}
            }
        }
        prop_assert_eq!(
            self.held,
            matches!(m.state(), LockState::Own { .. }),
            "events and state disagree"
        );
        prop_assert!(
            !m.may_fire() || (self.held && m.connected()),
            "may fire while not an owner or disconnected"
        );
        if let Some(at) = self.disconnected_at {
            prop_assert!(
                !(self.held && now > at + TIMEOUT),
                "still owning {:?} after the disconnect",
                now - at
            );
        }
        Ok(())
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1000))]
    #[test]
    fn lock_invariants_hold_for_any_event_sequence(steps in proptest::collection::vec((any_step(), 0u64..6000), 0..200)) {
        let mut m = machine();
        let mut now = base() + Duration::from_secs(100);
        let mut epoch = 0;
        let mut obs = Observer { held: false, last_token: None, disconnected_at: None, skewed: false, aside: false, kept_out: false };
        for (step, ms) in steps {
            let target = now + Duration::from_millis(ms);
            // The driver feeds Tick at every deadline, so do we, before the next fact arrives.
            let mut ticks = 0;
            while let Some(at) = m.next_deadline().filter(|at| *at <= target) {
                now = now.max(at);
                let actions = m.handle(Input::Tick, now);
                obs.check(&m, &Input::Tick, &actions, now)?;
                ticks += 1;
                prop_assert!(ticks < 1000, "timer loop: deadline {at:?} does not move");
            }
            now = target;
            let input = match step {
                Step::Fact(Input::SessionDisconnected { last_heard }) => {
                    // Re-base: the server was last heard at most 5 s ago.
                    let ago = last_heard - base();
                    Input::SessionDisconnected { last_heard: now.checked_sub(ago).unwrap_or(now) }
                }
                Step::Fact(input) => input,
                Step::CreateOk => { epoch += 1; Input::CreateDone(Ok(FencingToken(epoch))) }
                Step::BumpOk => { epoch += 1; Input::BumpDone(Ok(FencingToken(epoch))) }
                Step::EpochNamesSession(id) => Input::EpochRead(Ok(Epoch { token: FencingToken(epoch), holder: Some(SessionId(id)) })),
                Step::OwnerReadMine => Input::OwnerRead(Ok(Some(node(m.session().unwrap_or(SessionId(1)), ME)))),
                Step::EpochNamesMine => Input::EpochRead(Ok(Epoch { token: FencingToken(epoch), holder: m.session() })),
            };
            match &input {
                Input::SessionDisconnected { last_heard } if m.connected() => obs.disconnected_at = Some(*last_heard),
                Input::SessionReconnected | Input::SessionStarted { .. } | Input::SessionExpired => obs.disconnected_at = None,
                Input::ClockJudged { skewed } => obs.skewed = *skewed,
                Input::Placement { contend } => obs.aside = !*contend,
                Input::StoreJudged { kept_out } => obs.kept_out = *kept_out,
                _ => {}
            }
            let actions = m.handle(input.clone(), now);
            let requests = actions.iter().filter(|a| !matches!(a, Action::Emit(_))).count();
            prop_assert!(requests <= 1, "more than one request in one step: {actions:?}");
            prop_assert!(actions.last().is_none_or(|a| requests == 0 || !matches!(a, Action::Emit(_))), "request not last: {actions:?}");
            obs.check(&m, &input, &actions, now)?;
        }
    }
}

#[test]
fn shutdown_while_verifying_releases_our_node() {
    let t0 = Instant::now();
    let mut m = connected(t0);
    let mut ours = node(MY_SESSION, ME);
    ours.version = 2;
    m.handle(Input::OwnerRead(Ok(Some(ours))), t0);
    assert_eq!(
        m.handle(Input::Shutdown, t0),
        vec![Action::Release { lock_version: 2 }],
        "peers need not wait out a node whose token we never learned"
    );
}

#[test]
fn a_failed_release_is_retried_after_a_backoff_not_at_once() {
    let t0 = Instant::now();
    let mut m = connected(t0);
    m.handle(Input::OwnerRead(Ok(Some(node(MY_SESSION, ME)))), t0);
    let names_peer = Epoch {
        token: FencingToken(4),
        holder: Some(PEER_SESSION),
    };
    m.handle(Input::EpochRead(Ok(names_peer)), t0);
    assert_eq!(
        m.handle(Input::ReleaseDone(Err(RequestFailed::Connection)), t0),
        vec![]
    );
    assert_eq!(m.next_deadline(), Some(t0 + MIN_BACKOFF));
    assert_eq!(
        m.handle(Input::Tick, t0 + MIN_BACKOFF),
        vec![Action::Create]
    );
}

#[test]
fn a_failed_fence_stops_firing_and_reverifies_the_token() {
    let t0 = Instant::now();
    let mut m = owning(t0, 3);
    assert_eq!(
        m.handle(Input::FenceFailed, t0),
        vec![lost(), Action::ReadEpoch]
    );
    assert!(!m.may_fire());
    let operator_wrote = Epoch {
        token: FencingToken(9),
        holder: None,
    };
    assert_eq!(
        m.handle(Input::EpochRead(Ok(operator_wrote)), t0),
        vec![Action::Release { lock_version: 0 }],
        "an epoch we did not write proves nothing: give the node up and contend afresh"
    );
}

#[test]
fn an_epoch_that_went_backwards_is_bumped_past_our_last_token() {
    let t0 = Instant::now();
    let mut m = owning(t0, 7);
    m.handle(Input::SessionExpired, t0);
    m.handle(
        Input::SessionStarted {
            session: SessionId(0x999),
            timeout: TIMEOUT,
        },
        t0,
    );
    // Someone deleted and recreated the epoch: our next acquisition reads token 1.
    assert_eq!(
        m.handle(Input::CreateDone(Ok(FencingToken(1))), t0),
        vec![Action::Bump { lock_version: 0 }]
    );
    assert_eq!(
        m.handle(Input::BumpDone(Ok(FencingToken(2))), t0),
        vec![Action::Bump { lock_version: 0 }]
    );
    assert_eq!(
        m.handle(Input::BumpDone(Ok(FencingToken(8))), t0),
        vec![acquired(8)],
        "only a larger token is announced"
    );
}

#[test]
fn a_yield_releases_gracefully_and_stays_out_until_a_peer_takes_it_or_the_delay_passes() {
    let t0 = base();
    let mut m = owning(t0, 3);
    assert_eq!(
        m.handle(Input::Yield, t0),
        vec![
            Action::Emit(LockEvent::HandedOver),
            Action::Release { lock_version: 0 }
        ],
        "a handover, not a loss: logged at info (issue 31)"
    );
    assert!(!m.may_fire());
    // Our own releasing mark fires our watch: our node is not taken back.
    assert_eq!(m.handle(Input::NodeChanged, t0), vec![Action::ReadOwner]);
    let ours = LockNode {
        version: 1,
        ..node(MY_SESSION, ME)
    };
    assert_eq!(m.handle(Input::OwnerRead(Ok(Some(ours))), t0), vec![]);
    assert_eq!(
        m.handle(Input::ReleaseDone(Ok(())), t0),
        vec![Action::ReadOwner],
        "released: watch for the peer that takes it"
    );
    assert_eq!(m.handle(Input::OwnerRead(Ok(None)), t0), vec![]);
    assert_eq!(m.next_deadline(), Some(t0 + DELAY + JITTER));
    // A peer takes it.
    let peer = node(PEER_SESSION, PEER);
    assert_eq!(m.handle(Input::NodeChanged, t0), vec![Action::ReadOwner]);
    assert_eq!(
        m.handle(Input::OwnerRead(Ok(Some(peer.clone()))), t0),
        vec![owner_changed(Some(peer.clone()))]
    );
    assert_eq!(m.state, released_state(peer));

    // Alone: nobody takes it, so we contend again after the takeover delay.
    let mut alone = owning(t0, 3);
    alone.handle(Input::Yield, t0);
    alone.handle(Input::ReleaseDone(Ok(())), t0);
    alone.handle(Input::OwnerRead(Ok(None)), t0);
    assert_eq!(alone.handle(Input::Tick, t0 + DELAY), vec![]);
    assert_eq!(
        alone.handle(Input::Tick, t0 + DELAY + JITTER),
        vec![Action::Create]
    );
    assert_eq!(
        alone.handle(Input::CreateDone(Ok(FencingToken(4))), t0 + DELAY + JITTER),
        vec![acquired(4)],
        "a fresh token: the yield was a real handover"
    );
}

#[test]
fn a_yield_is_ignored_unless_we_own_and_are_connected() {
    let t0 = base();
    let mut follower = released(t0, node(PEER_SESSION, PEER));
    assert_eq!(follower.handle(Input::Yield, t0), vec![]);
    let mut disconnected = owning(t0, 3);
    disconnected.handle(
        Input::SessionDisconnected { last_heard: t0 },
        t0 + Duration::from_millis(10),
    );
    assert_eq!(disconnected.handle(Input::Yield, t0), vec![]);
    // A release that failed keeps the lock: the next read proves it ours by session.
    let mut failed = owning(t0, 3);
    failed.handle(Input::Yield, t0);
    assert_eq!(
        failed.handle(Input::ReleaseDone(Err(RequestFailed::Connection)), t0),
        vec![]
    );
    assert!(
        failed.next_deadline().is_some(),
        "read again after a backoff"
    );
}

/// Issue 24: a node whose clock is off the fleet's stays out of contention, hands the lock over
/// when it owns it, and contends again once its clock agrees.
#[test]
fn a_member_that_keeps_the_queue_in_postgres_keeps_a_zookeeper_node_out_and_takes_over_from_it() {
    let t0 = base();
    let kept_out = Input::StoreJudged { kept_out: true };
    // An owner kept out hands over as on a release request.
    let mut owner = owning(t0, 3);
    assert_eq!(
        owner.handle(kept_out.clone(), t0),
        vec![
            Action::Emit(LockEvent::HandedOver),
            Action::Release { lock_version: 0 }
        ]
    );
    owner.handle(Input::ReleaseDone(Ok(())), t0);
    owner.handle(Input::OwnerRead(Ok(None)), t0);
    assert_eq!(
        owner.handle(Input::Tick, t0 + DELAY + JITTER),
        vec![Action::ReadOwner],
        "nobody took it, and it does not take it back while kept out"
    );
    owner.handle(Input::OwnerRead(Ok(None)), t0 + DELAY + JITTER);
    assert_eq!(
        owner.handle(Input::StoreJudged { kept_out: false }, t0 + DELAY * 2),
        vec![Action::Create],
        "contends again once no member keeps it out"
    );
}

#[test]
fn a_skewed_clock_keeps_the_node_out_of_contention_and_hands_the_lock_over() {
    let t0 = base();
    let skewed = Input::ClockJudged { skewed: true };
    let agreed = Input::ClockJudged { skewed: false };

    // The owner leaves: a skewed peer waits out the delay, then does not contend.
    let mut peer = waiting(t0);
    assert_eq!(peer.handle(skewed.clone(), t0), vec![]);
    assert_eq!(
        peer.handle(Input::Tick, t0 + DELAY + JITTER),
        vec![Action::ReadOwner],
        "followed, not contended for"
    );
    assert_eq!(peer.state, State::Created);
    peer.handle(Input::OwnerRead(Ok(None)), t0 + DELAY + JITTER);
    assert_eq!(
        peer.handle(skewed.clone(), t0 + DELAY * 2),
        vec![],
        "still skewed"
    );
    assert_eq!(
        peer.handle(agreed.clone(), t0 + DELAY * 2),
        vec![Action::Create],
        "contends once its clock agrees"
    );

    // An owner judged skewed hands over as on a release request.
    let mut owner = owning(t0, 3);
    assert_eq!(
        owner.handle(skewed.clone(), t0),
        vec![
            Action::Emit(LockEvent::HandedOver),
            Action::Release { lock_version: 0 }
        ]
    );
    assert!(!owner.may_fire());
    owner.handle(Input::ReleaseDone(Ok(())), t0);
    owner.handle(Input::OwnerRead(Ok(None)), t0);
    assert_eq!(
        owner.handle(Input::Tick, t0 + DELAY + JITTER),
        vec![Action::ReadOwner],
        "nobody took it, and it does not take it back while skewed (it follows the lock)"
    );
    assert_eq!(
        owner.handle(Input::OwnerRead(Ok(None)), t0 + DELAY + JITTER),
        vec![],
        "and nothing more until the lock changes"
    );
    // A failed create's retry waits for the clock too.
    let mut retrying = connected(t0);
    retrying.handle(Input::CreateDone(Err(RequestFailed::Connection)), t0);
    retrying.handle(skewed, t0);
    let retry_at = retrying.next_deadline().expect("a retry is due");
    assert_eq!(retrying.handle(Input::Tick, retry_at), vec![]);
    assert_eq!(retrying.handle(agreed, retry_at), vec![Action::Create]);
}

/// Issue 19: a node the balancer places elsewhere does not contend for a free lock, keeps a lock
/// it owns (a move is a release asked of it), and contends at once when placed here.
#[test]
fn a_node_placed_elsewhere_stays_out_of_contention_and_keeps_what_it_owns() {
    let t0 = base();
    let aside = Input::Placement { contend: false };
    let here = Input::Placement { contend: true };

    let mut peer = waiting(t0);
    assert_eq!(peer.handle(aside.clone(), t0), vec![]);
    assert_eq!(
        peer.handle(Input::Tick, t0 + DELAY + JITTER),
        vec![Action::ReadOwner],
        "not contended for, but followed"
    );
    assert_eq!(peer.state, State::Created, "free, and not contended for");
    assert_eq!(
        peer.handle(Input::OwnerRead(Ok(None)), t0 + DELAY + JITTER),
        vec![]
    );
    assert_eq!(
        peer.handle(here.clone(), t0 + DELAY * 2),
        vec![Action::Create],
        "contends at once when placed here"
    );

    // A graceful release seen while placed elsewhere: not contended for either.
    let mut other = connected(t0);
    other.handle(aside.clone(), t0);
    let releasing = LockNode {
        info: Some(info("peer", true)),
        ..node(SessionId(9), "peer")
    };
    other.handle(Input::OwnerRead(Ok(Some(releasing))), t0);
    assert_eq!(
        other.handle(Input::NodeDeleted, t0),
        vec![owner_changed(None), Action::ReadOwner],
        "no Create"
    );

    let mut owner = owning(t0, 3);
    assert_eq!(owner.handle(aside.clone(), t0), vec![], "an owner keeps it");
    assert!(owner.may_fire());

    let mut retrying = connected(t0);
    retrying.handle(Input::CreateDone(Err(RequestFailed::Connection)), t0);
    retrying.handle(aside, t0);
    let retry_at = retrying.next_deadline().expect("a retry is due");
    assert_eq!(retrying.handle(Input::Tick, retry_at), vec![]);
    assert_eq!(retrying.handle(here, retry_at), vec![Action::Create]);
}

/// Issue 19: a node kept out of a group still follows its owner, so a crashed owner's node is
/// waited out (the takeover delay) by the node the balancer places there after the crash — as by
/// any contender — while a handoff's marked deletion still lets it go at once.
#[test]
fn a_node_placed_after_an_owners_crash_still_waits_out_the_takeover_delay() {
    let t0 = base();
    let aside = Input::Placement { contend: false };
    let here = Input::Placement { contend: true };
    let mut m = machine();
    m.handle(aside.clone(), t0);
    m.handle(Input::Start, t0);
    assert_eq!(
        m.handle(
            Input::SessionStarted {
                session: MY_SESSION,
                timeout: TIMEOUT
            },
            t0
        ),
        vec![Action::ReadOwner],
        "kept out: no Create, but the owner is read"
    );
    m.handle(Input::OwnerRead(Ok(Some(node(PEER_SESSION, PEER)))), t0);
    assert!(matches!(m.state, State::Released { .. }), "{:?}", m.state);
    // The owner's session expires: its node goes, then the balancer places us on the group.
    let crashed = t0 + Duration::from_secs(1);
    m.handle(Input::NodeDeleted, crashed);
    m.handle(Input::OwnerRead(Ok(None)), crashed);
    assert_eq!(
        m.handle(here.clone(), crashed),
        vec![],
        "placed here, but the crashed owner's node is waited out first"
    );
    assert_eq!(
        m.handle(Input::Tick, crashed + DELAY + JITTER),
        vec![Action::Create]
    );

    // Kept out while a free lock gets an owner: the creation is followed too.
    let mut m = machine();
    m.handle(aside.clone(), t0);
    m.handle(Input::Start, t0);
    m.handle(
        Input::SessionStarted {
            session: MY_SESSION,
            timeout: TIMEOUT,
        },
        t0,
    );
    assert_eq!(
        m.handle(Input::OwnerRead(Ok(None)), t0),
        vec![],
        "watching, idle"
    );
    assert_eq!(m.handle(Input::NodeChanged, t0), vec![Action::ReadOwner]);
    let releasing = LockNode {
        info: Some(info("peer", true)),
        ..node(PEER_SESSION, PEER)
    };
    m.handle(Input::OwnerRead(Ok(Some(releasing))), t0);
    let handed = t0 + Duration::from_secs(2);
    assert_eq!(
        m.handle(Input::NodeDeleted, handed),
        vec![owner_changed(None), Action::ReadOwner],
        "a handoff while kept out: followed, not contended for"
    );
    m.handle(Input::OwnerRead(Ok(None)), handed);
    assert_eq!(
        m.handle(here, handed),
        vec![Action::Create],
        "a handoff is not waited out"
    );
}
