//! The claims part on its own, without the router.

use super::*;
use std::sync::Arc;

use crate::config::JobConfig;
use crate::fire::machine::protocol::{FireReason, Me};
use crate::ids::{NodeId, SessionId};

const TOKEN: FencingToken = FencingToken(7);

fn at(s: i64) -> DateTime<Utc> {
    DateTime::from_timestamp(1_893_456_000 + s, 0).expect("in range")
}

fn me() -> Me {
    Me {
        node_id: NodeId::new("n1"),
        ip: "10.0.0.1".into(),
        trace_seed: None,
    }
}

fn config(name: &str) -> Arc<JobConfig> {
    let table = format!(
        "[[job]]\nname = \"{name}\"\nschedule = \"0 * * * * *\"\nshell = \"true\"\n\
         concurrency = \"forbid\"\n"
    );
    Arc::clone(&crate::config::jobs_for_test(&table)[0])
}

fn pending(job: &str, tick: DateTime<Utc>, state: PendingState) -> Pending {
    Pending {
        config: config(job),
        tick,
        reason: FireReason::OnTime,
        token: TOKEN,
        start_at: tick,
        in_backlog: false,
        submission: None,
        state,
        prepared: false,
        lease: LeaseWait::NotAsked,
        stored: None,
        parents: Vec::new(),
        fence: Fence::Epoch,
    }
}

fn claim_of(pending: &Pending) -> Claim {
    let (record, _) = pending.record_once_more(&me(), TOKEN, pending.tick);
    Claim {
        path: format!("runs/{}", record.run_id),
        version: 0,
        sent: record.clone(),
        record,
        guard: None,
        open: None,
        session: SessionId(1),
        children: Vec::new(),
        payload: None,
    }
}

/// Sends `pending`'s claim and returns its id.
fn send(claims: &mut Claims, pending: Pending) -> ClaimId {
    let (record, mode) = pending.record_once_more(&me(), TOKEN, pending.tick);
    let mut out = Vec::new();
    claims.send(pending, record, mode, &mut out);
    let [Action::Claims(ClaimAction::Claim(TickClaim { id, guarded, .. }))] = out[..] else {
        panic!("one claim sent: {out:?}");
    };
    assert!(guarded, "a forbid job's first claim takes its guard");
    id
}

#[test]
fn a_stop_withdraws_what_is_claimed_keeps_what_is_in_flight_and_drops_what_waits() {
    let mut claims = Claims::default();
    let in_flight = send(
        &mut claims,
        pending("a", at(0), PendingState::InFlight { again: false }),
    );
    let waiting = send(
        &mut claims,
        pending("a", at(60), PendingState::RunAlive { at: at(60) }),
    );
    let mut prepared = pending("b", at(0), PendingState::RecordOnly);
    let claim = claim_of(&prepared);
    prepared.state = PendingState::Claimed(claim.clone());
    prepared.prepared = true;
    prepared.lease = LeaseWait::Held;
    let claimed = send(&mut claims, prepared);
    assert_eq!(claims.outstanding(), 1);
    assert_eq!(claims.waiting_on_guard(&JobName::new("a")), vec![waiting]);

    let mut out = Vec::new();
    claims.withdraw_unstarted(&mut out);
    let run_id = claim.record.run_id.clone();
    assert_eq!(
        out,
        vec![
            Action::Runs(RunAction::Unprepare {
                run_id: run_id.clone()
            }),
            Action::Claims(ClaimAction::GiveBackLeases { run_id }),
            Action::Claims(ClaimAction::Withdraw { id: claimed, claim }),
        ]
    );
    assert!(
        claims.get(&waiting).is_none(),
        "nothing to give back of a wait"
    );
    assert_eq!(
        claims.outstanding(),
        2,
        "the claim in flight and the withdrawal"
    );
    let unanswered = claims.unanswered();
    assert_eq!(unanswered.len(), 2);
    assert!(claims.get(&in_flight).is_some() && unanswered[0].ends_with("claim unanswered"));
}

#[test]
fn a_claimed_run_starts_only_in_time_in_order_and_as_its_concurrency_allows() {
    let claimed = pending("a", at(60), PendingState::InFlight { again: false });
    let claim = claim_of(&claimed);
    let verdict =
        |lock, newest, alive, now| claimed.start_verdict(&claim, lock, newest, alive, now);
    assert_eq!(verdict(true, None, false, at(60)), StartVerdict::Start);
    assert_eq!(verdict(false, None, false, at(60)), StartVerdict::LockLost);
    let late = verdict(true, None, false, at(62));
    assert!(matches!(late, StartVerdict::Missed(why) if why.contains("too late")));
    let overtaken = verdict(true, Some(at(60)), false, at(60));
    assert!(matches!(overtaken, StartVerdict::Missed(why) if why.contains("later tick")));
    assert!(
        matches!(verdict(true, None, true, at(60)), StartVerdict::Skipped(_)),
        "forbid"
    );

    let mut waited = pending("a", at(60), PendingState::InFlight { again: false });
    waited.lease = LeaseWait::Failed {
        at: at(70),
        limit: "db".into(),
    };
    let past_deadline = waited.start_verdict(&claim, true, None, false, at(60 + 3_600));
    assert!(matches!(past_deadline, StartVerdict::Missed(why) if why.contains("\"db\"")));
    waited.lease = LeaseWait::Held;
    assert_eq!(
        waited.start_verdict(&claim, true, None, false, at(600)),
        StartVerdict::Start,
        "a lease holder is not held to the late-tick rule"
    );
}

#[test]
fn a_refused_claim_again_moves_to_the_running_version_once_if_it_may_have_been_written() {
    let mut claims = Claims::default();
    let mut again = pending("a", at(0), PendingState::InFlight { again: false });
    let (record, _) = again.record_once_more(&me(), TOKEN, at(0));
    again.stored = Some((record.clone(), 4));
    let id = send(&mut claims, again);
    assert!(
        !claims.at_its_running_version(id),
        "nothing was maybe written"
    );
    claims.maybe_marked_running(record.run_id.clone(), 5);
    assert!(claims.at_its_running_version(id));
    let stored = claims.get(&id).and_then(|p| p.stored.as_ref());
    assert_eq!(stored.map(|(_, version)| *version), Some(5));
    assert!(!claims.at_its_running_version(id), "once");
    assert!(claims.counts_agree());
}
