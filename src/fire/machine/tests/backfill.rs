//! Backfill (issue 20): an operator's request for past ticks goes into the job's backlog, and
//! its ticks are claimed in order through the one claim path — one already recorded is refused
//! by the claim, and the next one goes.

use super::*;
use crate::control::BackfillRequest;

fn request(ticks_ms: &[i64]) -> Input {
    Input::Control(ControlInput::BackfillsRead(vec![(
        "req-0000000001".to_owned(),
        BackfillRequest {
            with_children: false,
            job: JobName::new("a"),
            ticks: ticks_ms
                .iter()
                .map(|ms| t(*ms).timestamp_millis())
                .collect(),
            by: "ops@host".to_owned(),
            at_unix_ms: 0,
        },
    )]))
}

#[test]
fn a_backfill_runs_its_ticks_in_order_each_once_through_the_claim_path() {
    // Every hour: nothing of its own comes due while the backfill runs.
    let mut m = owning(&job("a", "0 0 * * * *", ""));
    let actions = m.handle(request(&[-240_000, -180_000, -120_000]), t(1_000));
    assert!(
        actions.contains(&Action::Control(ControlAction::RemoveBackfill(
            "req-0000000001".to_owned()
        ))),
        "taken, so removed: {actions:?}"
    );
    let first = only_claim(&actions);
    assert_eq!(
        (
            first.record.scheduled_unix_ms,
            first.record.backfill,
            first.mode
        ),
        (t(-240_000).timestamp_millis(), true, ClaimMode::Create),
        "the oldest first, as a fresh claim: a recorded tick is refused by ZooKeeper"
    );
    // Already recorded (it ran meanwhile): refused, and the next one goes.
    let refused = m.handle(
        Input::Claims(ClaimInput::Done {
            id: first.id,
            result: Err(ClaimRefused::AlreadyClaimed),
        }),
        t(1_010),
    );
    let second = only_claim(&refused);
    assert_eq!(
        second.record.scheduled_unix_ms,
        t(-180_000).timestamp_millis()
    );
    let (run, context) = only_start(&m.handle(ok(&second), t(1_020)));
    assert!(context.backfill, "ZKCRON_BACKFILL=1");
    assert!(!context.resumed);
    assert_eq!(
        context.scheduled_at,
        t(-180_000),
        "ZKCRON_SCHEDULED_AT is the tick"
    );
    let finished = end_run(
        &mut m,
        ended(&run, RunOutcome::Exited { code: 0 }, t(2_000)),
        t(2_000),
    );
    let third = only_claim(&m.handle(written(&finished), t(2_001)));
    assert_eq!(
        third.record.scheduled_unix_ms,
        t(-120_000).timestamp_millis(),
        "one after another: the next once the one before has ended"
    );
}

#[test]
fn a_backfill_seen_before_this_node_may_fire_is_taken_when_it_may() {
    let mut m = machine(&job("a", "0 0 * * * *", ""));
    assert!(
        m.handle(request(&[-120_000]), t(100)).is_empty(),
        "not the owner: the owner takes it"
    );
    let mut taken = Vec::new();
    for action in m.handle(Input::Lock(LockInput::Changed(owner(TOKEN))), t(200)) {
        if let Action::CatchUp(CatchUpAction::ListRecords(job)) = action {
            let listed = Input::CatchUp(CatchUpInput::Listed {
                job,
                result: Ok(JobRecords::default()),
            });
            taken.extend(m.handle(listed, t(201)));
        } else {
            taken.push(action);
        }
    }
    assert!(
        taken.contains(&Action::Control(ControlAction::RemoveBackfill(
            "req-0000000001".to_owned()
        )))
    );
    let claim = only_claim(&taken);
    assert_eq!(
        claim.record.scheduled_unix_ms,
        t(-120_000).timestamp_millis()
    );
}

/// A later tick has started, and the backfilled one still runs: backfills are out of order
/// with the job's own ticks by nature, in order among themselves.
#[test]
fn a_backfilled_tick_starts_after_a_later_tick_has() {
    let mut m = owning(&job("a", "0 * * * * *", ""));
    let claim = only_claim(&m.handle(Input::Tick, t(59_750)));
    m.handle(ok(&claim), t(59_751));
    let (run, _) = only_start(&m.handle(Input::Tick, t(60_000)));
    let finished = end_run(
        &mut m,
        ended(&run, RunOutcome::Exited { code: 0 }, t(60_000)),
        t(60_100),
    );
    m.handle(written(&finished), t(60_101));
    let backfill = only_claim(&m.handle(request(&[-120_000]), t(61_000)));
    let (started, context) = only_start(&m.handle(ok(&backfill), t(61_001)));
    assert_eq!(
        started.record.scheduled_unix_ms,
        t(-120_000).timestamp_millis()
    );
    assert!(context.backfill);
}
