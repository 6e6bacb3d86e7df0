//! Broadcast jobs (`broadcast = true`, issue 36): every member runs each tick once, claimed
//! per node under its membership, never before it joined nor late; the owner sweeps each tick
//! for the members that did not claim it; a broadcast never goes through the owner's claim path.

use super::*;
use crate::lock::node::LiveMember;

fn broadcast(extra: &str) -> String {
    job(
        "everywhere",
        EVERY_SECOND,
        &format!("broadcast = true\n{extra}"),
    )
}

/// A connected member that is not the owner, a member since `since_ms`.
fn member_since(tables: &str, since_ms: i64) -> FireMachine {
    let mut m = machine(tables);
    let actions = m.handle(Input::Lock(LockInput::Changed(follower())), t(0));
    assert_eq!(
        actions,
        vec![Action::Broadcast(BroadcastAction::ReadMembership)],
        "the membership is read"
    );
    let read = Input::Broadcast(BroadcastInput::MembershipRead(Ok(Some(t(since_ms)))));
    assert_eq!(
        m.handle(read, t(0)),
        vec![Action::Broadcast(BroadcastAction::CloseOwn {
            jobs: vec![JobName::new("everywhere")],
            before: t(since_ms),
            alive: Vec::new(),
        })],
        "what an earlier membership left open is closed"
    );
    m
}

fn broadcast_claims(actions: &[Action]) -> Vec<(ClaimId, RunRecord)> {
    actions
        .iter()
        .filter_map(|a| match a {
            Action::Claims(ClaimAction::Claim(TickClaim {
                id,
                record,
                fence: Fence::Member,
                ..
            })) => Some((*id, record.clone())),
            _ => None,
        })
        .collect()
}

/// The ticks whose sweep began: their members are read.
fn sweeps(actions: &[Action]) -> Vec<i64> {
    actions
        .iter()
        .filter_map(|a| match a {
            Action::Broadcast(BroadcastAction::ReadMembers { tick, .. }) => Some(ms(*tick)),
            _ => None,
        })
        .collect()
}

/// The ticks swept: what the ledger holds of each is read.
fn swept(actions: &[Action]) -> Vec<i64> {
    actions
        .iter()
        .filter_map(|a| match a {
            Action::Broadcast(BroadcastAction::ReadTick { tick, .. }) => Some(ms(*tick)),
            _ => None,
        })
        .collect()
}

/// The sweep's `missed` records sent on the claim path (fenced by the epoch: the owner's).
fn sweep_claims(actions: &[Action]) -> Vec<TickClaim> {
    claims(actions)
        .into_iter()
        .filter(|claim| claim.fence == Fence::Epoch && claim.record.broadcast)
        .collect()
}

/// What the ledger holds of a tick: the members with a record of it, and those live now.
fn tick_records(recorded: &[&str], live: &[&str], records: usize) -> Result<TickRecords, String> {
    Ok(TickRecords {
        recorded: recorded.iter().map(|node| NodeId::new(*node)).collect(),
        live: live.iter().map(|node| NodeId::new(*node)).collect(),
        records,
    })
}

/// A member of a tick's instant, as the driver reads it.
fn live(node: &str) -> LiveMember {
    LiveMember {
        node_id: NodeId::new(node),
        ip: "10.0.0.2".into(),
        tags: std::collections::BTreeSet::new(),
        since_unix_ms: -60_000,
    }
}

/// The driver's answer to a sweep's member reading.
fn members_read(tick_ms: i64, members: Vec<LiveMember>) -> Input {
    Input::Broadcast(BroadcastInput::MembersRead {
        job: JobName::new("everywhere"),
        tick: t(tick_ms),
        result: Ok(members),
    })
}

/// The driver's answer to a sweep's reading of its tick.
fn tick_read(tick_ms: i64, result: Result<TickRecords, String>) -> Input {
    Input::Broadcast(BroadcastInput::TickRead {
        job: JobName::new("everywhere"),
        tick: t(tick_ms),
        result,
    })
}

/// The ledger's answer to a claim.
fn claim_answer(claim: &TickClaim, result: Result<(), ClaimRefused>) -> Input {
    let result = result.map(|()| Box::new(granted(claim)));
    Input::Claims(ClaimInput::Done {
        id: claim.id,
        result,
    })
}

/// The ledger's answer to a broadcast claim that succeeded.
fn claimed(id: ClaimId, record: &RunRecord) -> Input {
    Input::Claims(ClaimInput::Done {
        id,
        result: Ok(Box::new(granted_broadcast(record))),
    })
}

/// Its claim granted at 760 ms, ahead of its tick at 1 s: the run is prepared, and started
/// through the claim path at its instant. Its claim and start.
fn granted_and_started(m: &mut FireMachine, id: ClaimId, record: &RunRecord) -> (Claim, Action) {
    let prepared = m.handle(claimed(id, record), t(760));
    assert!(
        matches!(&prepared[..], [Action::Runs(RunAction::Prepare { not_before, .. })] if *not_before == t(1_000)),
        "prepared ahead of its instant: {prepared:?}"
    );
    let actions = timer_actions(m, 1_000);
    let (claim, _) = only_start(&actions);
    let start = actions
        .into_iter()
        .find(|a| matches!(a, Action::Runs(RunAction::Start { .. })))
        .expect("a start");
    (claim, start)
}

/// Runs the timer to `until_ms` and collects every action.
fn timer_actions(m: &mut FireMachine, until_ms: i64) -> Vec<Action> {
    let mut out = Vec::new();
    while let Some(at) = m.next_deadline().filter(|at| ms(*at) <= until_ms) {
        out.extend(m.handle(Input::Tick, at));
    }
    out
}

#[test]
fn a_member_runs_each_tick_under_its_own_name_without_the_lock() {
    let mut m = member_since(&broadcast(""), -60_000);
    let actions = timer_actions(&mut m, 1_000);
    let found = broadcast_claims(&actions);
    let [(id, record)] = &found[..] else {
        panic!("one broadcast claim in {actions:?}");
    };
    let (id, record) = (*id, record.clone());
    assert_eq!(record.scheduled_unix_ms, t(1_000).timestamp_millis());
    assert!(record.broadcast);
    assert_eq!(record.node_id, NodeId::new("n1"));
    assert!(record.run_id.ends_with("~n1"), "{}", record.run_id);
    assert!(
        claims(&actions)
            .iter()
            .all(|claim| claim.fence == Fence::Member),
        "fenced by its membership, not the epoch"
    );
    let (claim, start) = granted_and_started(&mut m, id, &record);
    assert!(matches!(
        start,
        Action::Runs(RunAction::Start { not_before, record: StartWrite::InClaim, ref context, .. })
            if not_before == t(1_000) && context.scheduled_at == t(1_000)
    ));
    let actions = m.handle(
        ended(&claim, RunOutcome::Exited { code: 0 }, t(1_000)),
        t(1_010),
    );
    let [finished] = records_written(&actions)[..] else {
        panic!("one final record in {actions:?}");
    };
    assert_eq!(finished.record.status, RunStatus::Succeeded);
    assert_eq!(m.handle(written(finished), t(1_020)), vec![]);
    assert_eq!(m.running(), 0, "the owner's runs are not counted");
}

#[test]
fn a_node_runs_no_tick_from_before_it_joined_nor_a_late_one() {
    let mut m = member_since(&broadcast(""), 1_500);
    let actions = timer_actions(&mut m, 1_000);
    assert!(
        broadcast_claims(&actions).is_empty(),
        "joined after 1 s: {actions:?}"
    );
    let actions = timer_actions(&mut m, 2_000);
    let ticks: Vec<i64> = broadcast_claims(&actions)
        .iter()
        .map(|(_, r)| r.scheduled_unix_ms - t(0).timestamp_millis())
        .collect();
    assert_eq!(ticks, vec![2_000]);
    // Starved past the late-tick rule: the owner's sweep records it missed.
    let actions = m.handle(Input::Tick, t(4_500));
    assert!(broadcast_claims(&actions).is_empty(), "late: {actions:?}");
}

#[test]
fn only_a_node_with_the_required_tags_runs_it() {
    let tables = broadcast("requires = [\"gpu\"]");
    let mut m = machine(&tables);
    let actions = m.handle(Input::Lock(LockInput::Changed(follower())), t(0));
    assert_eq!(
        actions,
        vec![],
        "no broadcast job runs here: no membership to read"
    );
    assert!(broadcast_claims(&timer_actions(&mut m, 2_000)).is_empty());
    let tags = std::collections::BTreeSet::from(["gpu".to_owned(), "eu".to_owned()]);
    let mut m = machine(&tables).with_node_tags(tags, t(0));
    assert_eq!(
        m.handle(Input::Lock(LockInput::Changed(follower())), t(0)),
        vec![Action::Broadcast(BroadcastAction::ReadMembership)]
    );
    m.handle(
        Input::Broadcast(BroadcastInput::MembershipRead(Ok(Some(t(-60_000))))),
        t(0),
    );
    assert_eq!(broadcast_claims(&timer_actions(&mut m, 2_000)).len(), 2);
}

#[test]
fn the_owner_sweeps_each_tick_after_its_grace_and_a_follower_never() {
    let mut follower = member_since(&broadcast(""), -60_000);
    assert!(sweeps(&timer_actions(&mut follower, 10_000)).is_empty());
    let mut m = owning(&broadcast(""));
    let before = sweeps(&timer_actions(&mut m, 999));
    let back = i64::try_from(crate::fire::machine::sweeps::SWEEP_BACK_TICKS).expect("small");
    let expected: Vec<i64> = (1 - back..=0).map(|tick| tick * 1_000).collect();
    assert_eq!(
        before, expected,
        "the new owner looks back at the ticks its predecessor may not have swept, no further"
    );
    let actions = timer_actions(&mut m, 1_000);
    assert_eq!(
        sweeps(&actions),
        vec![1_000],
        "at its start, its members are read"
    );
    assert!(sweeps(&timer_actions(&mut m, 1_999)).is_empty());
    m.handle(members_read(1_000, vec![live("b")]), t(1_999));
    assert!(
        swept(&timer_actions(&mut m, 5_999)).is_empty(),
        "not swept before SWEEP_AFTER past its start"
    );
    assert_eq!(
        swept(&timer_actions(&mut m, 6_000)),
        vec![1_000],
        "looked at SWEEP_AFTER past its start"
    );
    // b, a member at the tick's instant, has no record of it: it is owed one, `missed`, sent
    // through the claim path under the owner's token like any gap's record.
    let actions = m.handle(tick_read(1_000, tick_records(&[], &["b"], 3)), t(6_000));
    let [owed] = &sweep_claims(&actions)[..] else {
        panic!("one missed record in {actions:?}");
    };
    assert_eq!(owed.record.node_id, NodeId::new("b"));
    assert_eq!(owed.record.status, RunStatus::Missed);
    assert_eq!(owed.record.fencing_token, TOKEN);
    assert_eq!(owed.mode, ClaimMode::Create);
    // One with a record (its own claim, or a record of an earlier sweep) owes nothing.
    let mut m = owning(&broadcast(""));
    timer_actions(&mut m, 1_000);
    m.handle(members_read(1_000, vec![live("b"), live("n1")]), t(1_000));
    timer_actions(&mut m, 6_000);
    let read = tick_records(&["b", "n1"], &["b", "n1"], 3);
    assert!(sweep_claims(&m.handle(tick_read(1_000, read), t(6_000))).is_empty());
}

#[test]
fn a_sweep_closes_the_runs_of_members_gone_and_prunes_by_ticks() {
    let mut m = owning(&broadcast(""));
    timer_actions(&mut m, 1_000);
    m.handle(members_read(1_000, vec![live("b"), live("c")]), t(1_000));
    timer_actions(&mut m, 6_000);
    let actions = m.handle(
        tick_read(1_000, tick_records(&["b", "c"], &["b"], 500)),
        t(6_000),
    );
    assert!(
        actions.contains(&Action::Broadcast(BroadcastAction::CloseGone {
            job: JobName::new("everywhere"),
            through: t(1_000),
            nodes: vec![NodeId::new("c")],
        })),
        "c, a member at the tick and gone since, has its open runs closed: {actions:?}"
    );
    assert!(
        actions.contains(&Action::Prune {
            job: JobName::new("everywhere"),
            keep: crate::layout::Keep::Ticks(m_history(&broadcast(""))),
            remember: std::time::Duration::ZERO,
        }),
        "the records of the ticks beyond its history go: {actions:?}"
    );
}

/// The soak of 2026-12-02 evening: a prune's count of records followed the members of the
/// tick it swept, so with two of four members away the job kept half the ticks its history
/// promised. Now it is asked for only once the records could hold more than `history` ticks of
/// the most members a tick had, and it keeps ticks.
#[test]
fn members_away_ask_for_no_prune_that_would_keep_fewer_ticks() {
    let mut m = owning(&broadcast(""));
    let history = m_history(&broadcast(""));
    let pruned = |actions: &[Action]| {
        actions
            .iter()
            .any(|action| matches!(action, Action::Prune { .. }))
    };
    timer_actions(&mut m, 1_000);
    m.handle(
        members_read(1_000, vec![live("b"), live("c"), live("n1")]),
        t(1_000),
    );
    timer_actions(&mut m, 6_000);
    let all = tick_records(&["b", "c", "n1"], &["b", "c", "n1"], 2 * history);
    assert!(!pruned(&m.handle(tick_read(1_000, all), t(6_000))));
    timer_actions(&mut m, 2_000);
    m.handle(members_read(2_000, vec![live("n1")]), t(2_000));
    timer_actions(&mut m, 7_000);
    // Two ticks' worth per member of a three-member fleet: more than one member's history, not
    // more than three members'.
    let alone = tick_records(&["n1"], &["n1"], 2 * history + 1);
    let actions = m.handle(tick_read(2_000, alone), t(7_000));
    assert!(!pruned(&actions), "{actions:?}");
    // Beyond three members' history: the ticks beyond `history` go.
    timer_actions(&mut m, 3_000);
    m.handle(members_read(3_000, vec![live("n1")]), t(3_000));
    timer_actions(&mut m, 8_000);
    let beyond = tick_records(&["n1"], &["n1"], 3 * history + 1);
    let actions = m.handle(tick_read(3_000, beyond), t(8_000));
    assert!(pruned(&actions), "{actions:?}");
}

/// A job's `history` as the schedule gives it.
fn m_history(tables: &str) -> usize {
    crate::config::jobs_for_test(tables)[0].history
}

#[test]
fn a_failed_sweep_is_sent_again_three_times_at_most_and_not_once_the_lock_moved() {
    let mut m = owning(&broadcast(""));
    timer_actions(&mut m, 2_000);
    for tick in [1_000, 2_000] {
        m.handle(members_read(tick, vec![live("b")]), t(2_000));
    }
    let failed = || Err("no answer".to_owned());
    assert_eq!(swept(&timer_actions(&mut m, 6_000)), vec![1_000]);
    m.handle(tick_read(1_000, failed()), t(6_000));
    assert_eq!(swept(&timer_actions(&mut m, 7_999)), vec![2_000]);
    // The record 2 000 owes b finds the lock moved: the next owner sweeps that tick.
    let actions = m.handle(tick_read(2_000, tick_records(&[], &["b"], 3)), t(7_000));
    let [owed] = &sweep_claims(&actions)[..] else {
        panic!("one missed record in {actions:?}");
    };
    m.handle(claim_answer(owed, Err(ClaimRefused::NotOwner)), t(7_000));
    assert_eq!(
        swept(&timer_actions(&mut m, 8_000)),
        vec![1_000],
        "again 2 s after a failure"
    );
    // Read, but its record not written: a failure too.
    let actions = m.handle(tick_read(1_000, tick_records(&[], &["b"], 3)), t(8_000));
    let [owed] = &sweep_claims(&actions)[..] else {
        panic!("one missed record in {actions:?}");
    };
    let lost = Err(ClaimRefused::Failed("connection loss".into()));
    m.handle(claim_answer(owed, lost), t(8_000));
    assert_eq!(
        swept(&timer_actions(&mut m, 10_000)),
        vec![1_000],
        "the third attempt"
    );
    m.handle(tick_read(1_000, failed()), t(10_000));
    let later: Vec<i64> = swept(&timer_actions(&mut m, 20_000))
        .into_iter()
        .filter(|tick| *tick <= 2_000)
        .collect();
    assert!(
        later.is_empty(),
        "no fourth attempt, and none after the lock moved: {later:?}"
    );
}

#[test]
fn a_tick_whose_members_were_not_read_is_not_swept_by_this_owner() {
    let mut m = owning(&broadcast(""));
    timer_actions(&mut m, 1_000);
    let unread = Input::Broadcast(BroadcastInput::MembersRead {
        job: JobName::new("everywhere"),
        tick: t(1_000),
        result: Err("no answer".into()),
    });
    m.handle(unread, t(1_000));
    let ticks = swept(&timer_actions(&mut m, 20_000));
    assert!(!ticks.contains(&1_000), "{ticks:?}");
}

#[test]
fn a_broadcast_job_never_goes_through_the_owners_claim_path() {
    let tables = format!("{}{}", broadcast(""), job("once", EVERY_SECOND, ""));
    let mut m = machine(&tables);
    let actions = m.handle(Input::Lock(LockInput::Changed(owner(TOKEN))), t(0));
    let listed: Vec<&Action> = actions
        .iter()
        .filter(|a| matches!(a, Action::CatchUp(CatchUpAction::ListRecords(_))))
        .collect();
    assert_eq!(
        listed,
        vec![&Action::CatchUp(CatchUpAction::ListRecords(JobName::new(
            "once"
        )))]
    );
    m.handle(
        Input::CatchUp(CatchUpInput::Listed {
            job: JobName::new("once"),
            result: Ok(JobRecords::default()),
        }),
        t(0),
    );
    m.handle(
        Input::Broadcast(BroadcastInput::MembershipRead(Ok(Some(t(-60_000))))),
        t(0),
    );
    let actions = timer_actions(&mut m, 1_000);
    let owners: Vec<String> = claims(&actions)
        .iter()
        .filter(|claim| claim.fence == Fence::Epoch)
        .map(|c| c.record.job.to_string())
        .collect();
    assert_eq!(owners, vec!["once"]);
    assert_eq!(
        broadcast_claims(&actions).len(),
        1,
        "the owner runs it as a member too"
    );
}

#[test]
fn forbid_records_a_tick_skipped_while_this_nodes_run_is_alive() {
    let mut m = member_since(&broadcast(""), -60_000);
    let actions = timer_actions(&mut m, 1_000);
    let (id, record) = broadcast_claims(&actions)[0].clone();
    m.handle(claimed(id, &record), t(760));
    let actions = timer_actions(&mut m, 2_000);
    let found = broadcast_claims(&actions);
    let [(id, record)] = &found[..] else {
        panic!("one claim in {actions:?}");
    };
    let (id, record) = (*id, record.clone());
    assert_eq!(record.status, RunStatus::Skipped);
    assert!(
        record
            .error
            .as_deref()
            .unwrap_or("")
            .contains("still running on this node")
    );
    assert!(
        starts(&m.handle(claimed(id, &record), t(1_760))).is_empty(),
        "a record only"
    );
    let mut allow = member_since(&broadcast("concurrency = \"allow\""), -60_000);
    let (id, record) = broadcast_claims(&timer_actions(&mut allow, 1_000))[0].clone();
    allow.handle(claimed(id, &record), t(760));
    let found = broadcast_claims(&timer_actions(&mut allow, 2_000));
    let [(_, record)] = &found[..] else {
        panic!("one claim");
    };
    assert_eq!(
        record.status,
        RunStatus::Running,
        "runs overlap with allow (a claim at the tick's instant says `running`)"
    );
}

#[test]
fn a_refused_claim_starts_nothing() {
    let mut m = member_since(&broadcast(""), -60_000);
    let (id, _) = broadcast_claims(&timer_actions(&mut m, 1_000))[0].clone();
    for why in [ClaimRefused::AlreadyClaimed, ClaimRefused::NotOwner] {
        let refused = Input::Claims(ClaimInput::Done {
            id,
            result: Err(why),
        });
        assert_eq!(m.handle(refused, t(760)), vec![]);
    }
}

#[test]
fn a_new_connection_reads_the_membership_again() {
    let mut m = member_since(&broadcast(""), -60_000);
    let lost = LockStatus {
        connected: false,
        ..follower()
    };
    assert_eq!(
        m.handle(Input::Lock(LockInput::Changed(lost)), t(100)),
        vec![]
    );
    assert_eq!(
        m.handle(Input::Lock(LockInput::Changed(follower())), t(200)),
        vec![Action::Broadcast(BroadcastAction::ReadMembership)]
    );
    // A new session: a new member znode, after the tick at 1 s; the runs of the old one left
    // open are closed, but for those still alive here.
    let actions = m.handle(
        Input::Broadcast(BroadcastInput::MembershipRead(Ok(Some(t(1_200))))),
        t(300),
    );
    assert!(
        matches!(&actions[..], [Action::Broadcast(BroadcastAction::CloseOwn { before, .. })] if *before == t(1_200)),
        "{actions:?}"
    );
    assert!(broadcast_claims(&timer_actions(&mut m, 1_000)).is_empty());
    // Not there yet: read again a second later.
    let mut m = machine(&broadcast(""));
    m.handle(Input::Lock(LockInput::Changed(follower())), t(0));
    assert_eq!(
        m.handle(
            Input::Broadcast(BroadcastInput::MembershipRead(Ok(None))),
            t(0)
        ),
        vec![]
    );
    assert_eq!(timer_actions(&mut m, 999), vec![]);
    assert!(
        timer_actions(&mut m, 1_000).contains(&Action::Broadcast(BroadcastAction::ReadMembership))
    );
}

#[test]
fn the_stop_ends_the_broadcast_runs_and_waits_for_their_records() {
    let mut m = member_since(&broadcast(""), -60_000);
    let (id, record) = broadcast_claims(&timer_actions(&mut m, 1_000))[0].clone();
    let (claim, _) = granted_and_started(&mut m, id, &record);
    let actions = m.handle(Input::Shutdown, t(1_100));
    assert!(
        actions.contains(&Action::Lock(LockAction::HandOver)),
        "{actions:?}"
    );
    let actions = m.handle(Input::Lock(LockInput::Released), t(1_200));
    assert_eq!(
        actions,
        vec![Action::Runs(RunAction::Cancel {
            run_id: claim.record.run_id.clone()
        })]
    );
    let actions = m.handle(ended(&claim, RunOutcome::Cancelled, t(1_000)), t(1_300));
    let [finished] = records_written(&actions)[..] else {
        panic!("its final record in {actions:?}");
    };
    assert!(
        !actions.contains(&Action::Stopped),
        "its record is not written yet"
    );
    assert_eq!(m.handle(written(finished), t(1_400)), vec![Action::Stopped]);
}

#[test]
fn a_final_record_not_written_is_sent_again() {
    let mut m = member_since(&broadcast(""), -60_000);
    let (id, record) = broadcast_claims(&timer_actions(&mut m, 1_000))[0].clone();
    let (claim, _) = granted_and_started(&mut m, id, &record);
    let actions = m.handle(
        ended(&claim, RunOutcome::Exited { code: 3 }, t(1_000)),
        t(1_300),
    );
    let finished = records_written(&actions)[0].clone();
    let failed = Input::Claims(ClaimInput::RecordWritten {
        run_id: finished.record.run_id.clone(),
        write: RecordWrite::Failed,
    });
    assert_eq!(m.handle(failed, t(1_400)), vec![]);
    let again: Vec<RunRecord> = records_written(&timer_actions(&mut m, 2_400))
        .into_iter()
        .map(|claim| claim.record.clone())
        .collect();
    assert_eq!(again, vec![finished.record]);
}

#[test]
fn a_disabled_broadcast_runs_nowhere_and_is_swept_by_nobody() {
    let mut m = owning(&broadcast("enabled = false"));
    m.handle(
        Input::Broadcast(BroadcastInput::MembershipRead(Ok(Some(t(-60_000))))),
        t(0),
    );
    let actions = timer_actions(&mut m, 10_000);
    assert!(broadcast_claims(&actions).is_empty(), "{actions:?}");
    assert!(sweeps(&actions).is_empty(), "{actions:?}");
}

#[test]
fn a_lost_lock_leaves_the_broadcast_runs_alone_and_stops_the_sweeps() {
    let tables = broadcast("on_lost = \"cancel\"");
    let mut m = owning(&tables);
    m.handle(
        Input::Broadcast(BroadcastInput::MembershipRead(Ok(Some(t(-60_000))))),
        t(0),
    );
    let actions = timer_actions(&mut m, 1_000);
    let (id, record) = broadcast_claims(&actions)[0].clone();
    let (claim, _) = granted_and_started(&mut m, id, &record);
    // Another node acquired: this one is a member like the others.
    let actions = m.handle(Input::Lock(LockInput::Changed(follower())), t(1_200));
    assert!(
        !actions.contains(&Action::Runs(RunAction::Cancel {
            run_id: claim.record.run_id.clone()
        })),
        "a broadcast run is the node's own, whoever owns the lock: {actions:?}"
    );
    let actions = timer_actions(&mut m, 10_000);
    assert!(
        sweeps(&actions).is_empty(),
        "only the owner sweeps: {actions:?}"
    );
    assert!(
        broadcast_claims(&actions).len() >= 8,
        "the member goes on running its ticks: {actions:?}"
    );
}

#[test]
fn a_reload_that_adds_a_broadcast_reads_the_membership_and_sweeps_only_from_its_next_tick() {
    let plain = job("once", EVERY_SECOND, "");
    let mut m = owning(&plain);
    let with_broadcast = jobs(&format!("{plain}{}", broadcast("")));
    let actions = m.handle(Input::Reloaded(with_broadcast), t(10_500));
    assert!(
        actions.contains(&Action::Broadcast(BroadcastAction::ReadMembership)),
        "the first broadcast job here needs the membership: {actions:?}"
    );
    m.handle(
        Input::Broadcast(BroadcastInput::MembershipRead(Ok(Some(t(-60_000))))),
        t(10_500),
    );
    let actions = timer_actions(&mut m, 11_000);
    assert_eq!(
        sweeps(&actions),
        vec![11_000],
        "no look back over ticks from before the job existed: {actions:?}"
    );
    assert_eq!(broadcast_claims(&actions).len(), 1);
}

/// Found by the one road's property test: a node that gained the lock while it stopped began
/// sweeping back over the last minute, whose sweeps its stop never sends — a deadline left in
/// the past, which wakes the driver at once for ever.
#[test]
fn a_stopping_node_sweeps_nothing_even_if_it_gains_the_lock() {
    let mut m = machine(&broadcast(""));
    m.handle(Input::Shutdown, t(30_000));
    m.handle(Input::Lock(LockInput::Changed(owner(TOKEN))), t(30_000));
    let actions = m.handle(Input::Tick, t(30_000));
    assert!(sweeps(&actions).is_empty(), "{actions:?}");
    assert!(
        m.next_deadline().is_none_or(|at| at > t(30_000)),
        "a deadline left behind: {:?}",
        m.next_deadline()
    );
}

/// A member's claim whose answer never comes (ZooKeeper lost it, and its read back waits for a
/// session) holds the stop no longer than the owner's claims do: the handover's limit.
#[test]
fn a_stop_waits_for_a_members_claim_no_longer_than_the_handovers_limit() {
    let mut m = member_since(&broadcast(""), -60_000);
    assert_eq!(broadcast_claims(&timer_actions(&mut m, 1_000)).len(), 1);
    let actions = m.handle(Input::Shutdown, t(800));
    assert!(
        !actions.contains(&Action::Lock(LockAction::HandOver)),
        "the claim out is waited for: {actions:?}"
    );
    let limit = i64::try_from(WITHDRAW_LIMIT.as_millis()).expect("small");
    let actions = timer_actions(&mut m, 800 + limit);
    assert!(
        actions.contains(&Action::Lock(LockAction::HandOver)),
        "handed over at the limit: {actions:?}"
    );
    let actions = m.handle(Input::Lock(LockInput::Released), t(800 + limit));
    assert!(
        actions.contains(&Action::Stopped),
        "stopped without its answer: {actions:?}"
    );
}

/// A member's run claimed and prepared, not yet started, is recorded `skipped` when the stop
/// begins, not at its instant.
#[test]
fn a_members_claimed_run_is_recorded_skipped_when_the_stop_begins() {
    let mut m = member_since(&broadcast(""), -60_000);
    let (id, record) = broadcast_claims(&timer_actions(&mut m, 1_000))[0].clone();
    m.handle(claimed(id, &record), t(760));
    let actions = m.handle(Input::Shutdown, t(800));
    let [skipped] = records_written(&actions)[..] else {
        panic!("its record in {actions:?}");
    };
    assert_eq!(skipped.record.status, RunStatus::Skipped);
    assert!(
        actions.contains(&Action::Runs(RunAction::Unprepare {
            run_id: record.run_id.clone()
        })),
        "its prepared process goes: {actions:?}"
    );
    assert!(
        !actions.contains(&Action::Stopped),
        "its record is not written yet"
    );
    m.handle(Input::Lock(LockInput::Released), t(900));
    assert_eq!(m.handle(written(skipped), t(1_000)), vec![Action::Stopped]);
}
