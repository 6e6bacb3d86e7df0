//! Issue 53: a node whose clock is off the servers' takes over alone and is corrected to their
//! clock (`ensemble_clock`). The correction is a step of the clock it fires by; the ticks it
//! declined by its own clock before, still ahead by the servers', must not be lost.

use super::*;

/// Every tick `m` claims to start or to record, answered at once; every start run and ended.
/// Returns (tick ms, status) of each tick claimed, in order: a record of a gap of the
/// per-second job stands for each of its ticks.
fn drive(m: &mut FireMachine, actions: Vec<Action>, now: DateTime<Utc>) -> Vec<(i64, RunStatus)> {
    let mut seen = Vec::new();
    drive_with(m, actions, now, |claim| {
        let to = ms_of(claim);
        let from = claim
            .record
            .missed_from_unix_ms
            .map_or(to, |from| from - t(0).timestamp_millis());
        let status = claim.record.status;
        seen.extend((from / 1000..=to / 1000).map(|s| (s * 1000, status)));
        ok(claim)
    });
    seen
}

/// Feeds every timer expiry up to `until_ms`, driving what each asks for.
fn drive_timer(m: &mut FireMachine, until_ms: i64) -> Vec<(i64, RunStatus)> {
    let mut seen = Vec::new();
    while let Some(at) = m.next_deadline().filter(|at| ms(*at) <= until_ms) {
        let actions = m.handle(Input::Tick, at);
        seen.extend(drive(m, actions, at));
    }
    seen
}

/// A member whose clock is `ahead_ms` off the servers' declines the ticks by its own clock
/// while the owner fires them; the owner dies after recording `last_recorded`; at `alone` (the
/// servers' time) the member is corrected, then it owns the lock. Returns the ticks it claims
/// from then on through `until`, each with the status it claims.
fn lone_takeover(
    ahead_ms: i64,
    last_recorded: i64,
    alone: i64,
    until: i64,
) -> Vec<(i64, RunStatus)> {
    let mut m = machine(&job("a", EVERY_SECOND, ""));
    m.handle(Input::Lock(LockInput::Changed(follower())), t(0));
    // Declined by its own clock, `ahead_ms` off the servers'.
    run_timer(&mut m, alone + ahead_ms);
    let step = chrono::Duration::milliseconds(-ahead_ms);
    m.handle(Input::ClockStepped { by: step }, t(alone));
    let actions = m.handle(
        Input::Lock(LockInput::Changed(owner(TOKEN))),
        t(alone + 100),
    );
    let mut seen = drive(&mut m, actions, t(alone + 100));
    let record = stored("a", last_recorded, "n2", 6, RunStatus::Succeeded);
    let actions = m.handle(listed("a", &[record]), t(alone + 110));
    seen.extend(drive(&mut m, actions, t(alone + 110)));
    seen.extend(drive_timer(&mut m, until));
    seen
}

/// Every tick after `last_recorded` through `through` is claimed once, in order, to run or
/// to be recorded.
fn every_tick_accounted(seen: &[(i64, RunStatus)], last_recorded: i64, through: i64) {
    let ticks: Vec<i64> = seen.iter().map(|(tick, _)| *tick).collect();
    let wanted: Vec<i64> = (last_recorded / 1000 + 1..=through / 1000)
        .map(|s| s * 1000)
        .collect();
    assert_eq!(
        ticks
            .iter()
            .filter(|tick| **tick <= through)
            .copied()
            .collect::<Vec<_>>(),
        wanted,
        "every tick once, in order: {seen:?}"
    );
}

#[test]
fn a_member_15_s_ahead_corrected_then_owning_loses_no_tick() {
    let seen = lone_takeover(15_000, 7_000, 10_000, 40_000);
    every_tick_accounted(&seen, 7_000, 40_000);
}

#[test]
fn a_member_10_min_behind_corrected_then_owning_loses_no_tick() {
    let seen = lone_takeover(-600_000, 607_000, 610_000, 640_000);
    every_tick_accounted(&seen, 607_000, 640_000);
}
