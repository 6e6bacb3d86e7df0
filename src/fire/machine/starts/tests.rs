//! The claim path on its own: what it sends, and what it hands back to the router (`Follow`),
//! with a `Ctx` made here instead of the router's.

use std::time::Duration;

use super::*;
use crate::fire::machine::chains::Chains;
use crate::fire::machine::housekeeping::Housekeeping;
use crate::fire::machine::jobs::Jobs;
use crate::fire::machine::notices::Streaks;
use crate::fire::machine::protocol::{Me, RecordWrite, TickClaim};
use crate::fire::machine::steering::Steering;
use crate::ids::{FencingToken, NodeId, SessionId};
use crate::lock::LockStatus;
use crate::run::{RunOutcome, RunReport};

const TOKEN: FencingToken = FencingToken(7);

fn at(s: i64) -> DateTime<Utc> {
    DateTime::from_timestamp(1_893_456_000 + s, 0).expect("in range")
}

/// The lent parts a test owns; `ctx` lends them for one call.
struct Lent {
    me: Me,
    jobs: Jobs,
    steering: Steering,
    chains: Chains,
    streaks: Streaks,
    housekeeping: Housekeeping,
    lock: LockStatus,
    out: Vec<Action>,
}

impl Lent {
    fn new(extra: &str) -> Self {
        let table = format!(
            "[[job]]\nname = \"report\"\nschedule = \"0 * * * * *\"\nshell = \"true\"\n{extra}\n"
        );
        Self {
            me: Me {
                node_id: NodeId::new("n1"),
                ip: "10.0.0.1".into(),
                trace_seed: None,
            },
            jobs: Jobs::of(
                &crate::config::jobs_for_test(&table),
                DateTime::<Utc>::MIN_UTC,
            ),
            steering: Steering::default(),
            chains: Chains::default(),
            streaks: Streaks::default(),
            housekeeping: Housekeeping::default(),
            lock: LockStatus {
                token: Some(TOKEN),
                may_fire: true,
                connected: true,
            },
            out: Vec::new(),
        }
    }

    /// Runs `f` with a `Ctx` at `now`; the actions sent and the follow-ups handed back.
    fn call<R>(
        &mut self,
        now: DateTime<Utc>,
        f: impl FnOnce(&mut Ctx<'_>) -> R,
    ) -> (R, Vec<Action>, Vec<Follow>) {
        let mut ctx = Ctx {
            me: &self.me,
            lock: self.lock,
            jobs: &mut self.jobs,
            steering: &self.steering,
            chains: &self.chains,
            stopping: false,
            streaks: &mut self.streaks,
            housekeeping: &mut self.housekeeping,
            now,
            out: &mut self.out,
            follows: Vec::new(),
        };
        let result = f(&mut ctx);
        let follows = ctx.follows;
        (result, std::mem::take(&mut self.out), follows)
    }
}

fn job() -> JobName {
    JobName::new("report")
}

fn granted(claim: &TickClaim) -> Claim {
    Claim {
        path: format!("/runs/{}", claim.record.run_id),
        version: 0,
        record: claim.record.clone(),
        guard: None,
        open: None,
        children: Vec::new(),
        payload: None,
        session: SessionId(1),
        sent: claim.record.clone(),
    }
}

fn report(outcome: RunOutcome, started: DateTime<Utc>) -> RunReport {
    RunReport {
        outcome,
        started_at: started,
        duration: Duration::from_millis(5),
        retry_after: None,
        output: String::new(),
    }
}

#[test]
fn a_backlog_items_run_hands_back_release_held_at_its_start_and_advance_at_its_end() {
    let (mut lent, mut starts) = (Lent::new(""), Starts::default());
    let item = Item::tick(at(60), FireReason::CaughtUp);
    let ((), sent, follows) = lent.call(at(61), |ctx| starts.claim_item(ctx, &job(), item, true));
    let [Action::Claims(ClaimAction::Claim(claim))] = &sent[..] else {
        panic!("one claim: {sent:?}");
    };
    assert!(follows.is_empty());

    let (answered, sent, follows) = lent.call(at(61), |ctx| {
        starts.claim_done(ctx, claim.id, Ok(granted(claim)))
    });
    assert_eq!(answered, None, "not a submission");
    let [Action::Runs(RunAction::Start { claim: started, .. })] = &sent[..] else {
        panic!("started at once (caught up): {sent:?}");
    };
    assert_eq!(
        follows,
        vec![Follow::ReleaseHeld(job())],
        "its last backlog item started"
    );
    assert_eq!((starts.running(), starts.open_runs_of(&job())), (1, 1));

    let outcome = RunOutcome::Exited { code: 0 };
    let ((), sent, follows) = lent.call(at(62), |ctx| {
        starts.run_ended(ctx, started.clone(), &report(outcome, at(61)))
    });
    let [Action::Claims(ClaimAction::WriteRecord(finished))] = &sent[..] else {
        panic!("the final record: {sent:?}");
    };
    assert!(
        follows.is_empty(),
        "nothing for the router before the record is stored"
    );

    let run_id = finished.record.run_id.clone();
    let ((), sent, follows) = lent.call(at(62), |ctx| {
        starts.record_written(ctx, &run_id, RecordWrite::Written(1))
    });
    assert!(
        sent.iter()
            .any(|action| matches!(action, Action::Prune { .. })),
        "kept to its history: {sent:?}"
    );
    assert_eq!(follows, vec![Follow::Advance(job()), Follow::Stopped]);
    assert_eq!(starts.running(), 0);
}

#[test]
fn a_claim_refused_or_lost_to_the_lock_settles_and_hands_back_the_handover_check() {
    let (mut lent, mut starts) = (Lent::new(""), Starts::default());
    let item = Item::tick(at(60), FireReason::OnTime);
    let (_, sent, _) = lent.call(at(59), |ctx| starts.claim_item(ctx, &job(), item, true));
    let [Action::Claims(ClaimAction::Claim(claim))] = &sent[..] else {
        panic!("one claim: {sent:?}");
    };
    let refusal = Err(ClaimRefused::AlreadyClaimed);
    let (_, sent, follows) = lent.call(at(59), |ctx| starts.claim_done(ctx, claim.id, refusal));
    assert!(sent.is_empty(), "someone else's tick: {sent:?}");
    assert_eq!(follows, vec![Follow::Advance(job()), Follow::HandOver]);

    // Claimed ahead of its tick, then the lock goes before the tick comes.
    let item = Item::tick(at(120), FireReason::OnTime);
    let (_, sent, _) = lent.call(at(119), |ctx| starts.claim_item(ctx, &job(), item, false));
    let [Action::Claims(ClaimAction::Claim(claim))] = &sent[..] else {
        panic!("one claim: {sent:?}");
    };
    let (_, sent, _) = lent.call(at(119), |ctx| {
        starts.claim_done(ctx, claim.id, Ok(granted(claim)))
    });
    assert!(
        matches!(&sent[..], [Action::Runs(RunAction::Prepare { .. })]),
        "prepared for its instant: {sent:?}"
    );
    lent.lock.may_fire = false;
    let (_, sent, follows) = lent.call(at(120), |ctx| starts.claim_due(ctx, claim.id));
    assert!(
        sent.iter()
            .any(|a| matches!(a, Action::Runs(RunAction::Unprepare { .. }))),
        "its prepared process goes: {sent:?}"
    );
    assert!(
        !sent
            .iter()
            .any(|a| matches!(a, Action::Runs(RunAction::Start { .. })))
    );
    assert_eq!(
        follows,
        vec![Follow::HandOver],
        "not in a backlog: nothing to advance"
    );
    assert_eq!(starts.open_runs_of(&job()), 0);
}

#[test]
fn a_tick_behind_the_ledger_or_of_a_paused_job_is_not_claimed_to_start() {
    let (mut lent, mut starts) = (Lent::new(""), Starts::default());
    if let Some(state) = lent.jobs.get_mut(&job()) {
        state.raise_newest_tick(at(60));
    }
    let item = Item::tick(at(60), FireReason::OnTime);
    let (_, sent, follows) = lent.call(at(59), |ctx| starts.claim_item(ctx, &job(), item, false));
    assert!(
        sent.is_empty() && follows.is_empty(),
        "at the newest recorded tick: {sent:?}"
    );

    let pause = crate::control::Pause {
        reason: None,
        by: "alice".to_owned(),
        since_unix_ms: 0,
    };
    lent.steering
        .pauses_read(crate::control::Pauses::from([(job(), pause)]));
    let item = Item::tick(at(120), FireReason::OnTime);
    let (_, sent, _) = lent.call(at(119), |ctx| starts.claim_item(ctx, &job(), item, false));
    let [Action::Claims(ClaimAction::Claim(TickClaim { record, .. }))] = &sent[..] else {
        panic!("one record-only claim: {sent:?}");
    };
    assert_eq!(record.status, RunStatus::Skipped);
    assert_eq!(
        starts.open_runs_of(&job()),
        0,
        "a record that starts nothing does not count"
    );
}
