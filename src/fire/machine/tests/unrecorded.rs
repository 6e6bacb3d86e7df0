//! Issue 53: ticks whose `missed` records the ledger refused (a quota exceeded) are recorded
//! once it takes writes again — each once, none over a tick that ran.

use super::*;

fn quota() -> ClaimRefused {
    ClaimRefused::Failed("refused: quota exceeded".to_owned())
}

/// Drives what `actions` ask for at `now`: every claim refused while `refusing`, else taken
/// (and kept in `taken`); every start run and ended.
fn drive(
    m: &mut FireMachine,
    actions: Vec<Action>,
    now: DateTime<Utc>,
    refusing: bool,
    taken: &mut Vec<RunRecord>,
) {
    drive_with(m, actions, now, |claim| {
        if refusing {
            refused(claim, quota())
        } else {
            taken.push(claim.record.clone());
            ok(claim)
        }
    });
}

/// Feeds every timer expiry up to `until_ms`, driving what each asks for.
fn drive_timer(m: &mut FireMachine, until_ms: i64, refusing: bool, taken: &mut Vec<RunRecord>) {
    while let Some(at) = m.next_deadline().filter(|at| ms(*at) <= until_ms) {
        let actions = m.handle(Input::Tick, at);
        drive(m, actions, at, refusing, taken);
    }
}

/// Each tick (relative ms) a taken record stands for, with its status.
fn ticks_of(taken: &[RunRecord]) -> Vec<(i64, RunStatus)> {
    let base = t(0).timestamp_millis();
    let mut ticks: Vec<(i64, RunStatus)> = taken
        .iter()
        .flat_map(|record| {
            let last = record.scheduled_unix_ms - base;
            let first = record.missed_from_unix_ms.map_or(last, |from| from - base);
            (first / 1000..=last / 1000).map(move |s| (s * 1000, record.status))
        })
        .collect();
    ticks.sort_unstable_by_key(|(tick, _)| *tick);
    ticks
}

#[test]
fn ticks_refused_by_the_ledger_are_recorded_missed_once_it_takes_writes_again() {
    let mut m = owning(&job("a", EVERY_SECOND, ""));
    let mut taken = Vec::new();
    // Ticks 1 to 10 s: each claim refused, claimed once more, recorded missed — refused too —
    // and the owed gap tried again on its backoff, refused.
    drive_timer(&mut m, 10_500, true, &mut taken);
    assert!(taken.is_empty());
    assert!(
        m.next_deadline().is_some_and(|at| ms(at) <= 11_000),
        "the next tick, or the owed records' next try"
    );
    // Writes taken again from 10.5 s: the next tick's claim goes through, and the owed ticks
    // go with it.
    drive_timer(&mut m, 15_500, false, &mut taken);
    let ticks = ticks_of(&taken);
    let missed: Vec<i64> = ticks
        .iter()
        .filter(|(_, status)| *status == RunStatus::Missed)
        .map(|(tick, _)| *tick)
        .collect();
    let run: Vec<i64> = ticks
        .iter()
        .filter(|(_, status)| *status != RunStatus::Missed)
        .map(|(tick, _)| *tick)
        .collect();
    assert_eq!(
        missed,
        (1..=10).map(|s| s * 1000).collect::<Vec<_>>(),
        "every refused tick recorded missed, once: {taken:#?}"
    );
    assert_eq!(run, (11..=15).map(|s| s * 1000).collect::<Vec<_>>());
    assert!(
        taken.len() < 10,
        "the refused ticks go as gaps, not a record each: {}",
        taken.len()
    );
    assert!(
        taken.iter().all(|record| record.status != RunStatus::Missed
            || record
                .error
                .as_deref()
                .is_some_and(|why| why.contains("quota"))),
        "a gap says why: {taken:#?}"
    );
}

#[test]
fn owed_ticks_are_left_to_the_next_owner_when_the_lock_moves() {
    let mut m = owning(&job("a", EVERY_SECOND, ""));
    let mut taken = Vec::new();
    drive_timer(&mut m, 3_500, true, &mut taken);
    let actions = m.handle(Input::Lock(LockInput::Changed(follower())), t(3_600));
    drive(&mut m, actions, t(3_600), false, &mut taken);
    drive_timer(&mut m, 10_000, false, &mut taken);
    assert!(
        taken.is_empty(),
        "a follower writes no gap: the next owner's catch-up does ({taken:#?})"
    );
}
