//! Calendars (`except`, `only`, issue 36): the ticks a job's calendars skip are recorded
//! `skipped` once per run, at its first tick, naming the calendar; the others run; catch-up
//! never runs a skipped tick.

use super::*;

/// Every minute at :00, except 00:02 to 00:05 (2030-01-01 is in UTC).
fn minutely_except_a_window() -> String {
    format!(
        "[[calendar]]\nname = \"quiet\"\nhours = [\"00:02-00:05\"]\n{}",
        job("m", "0 * * * * *", "except = [\"quiet\"]")
    )
}

/// Every claim the timer sends up to `until_ms`, each answered as granted.
fn claims_until(m: &mut FireMachine, until_ms: i64) -> Vec<TickClaim> {
    let mut sent = Vec::new();
    while let Some(at) = m.next_deadline().filter(|at| ms(*at) <= until_ms) {
        for claim in claims(&m.handle(Input::Tick, at)) {
            m.handle(ok(&claim), at);
            sent.push(claim);
        }
    }
    sent
}

#[test]
fn a_run_of_skipped_ticks_is_one_record_at_its_first_tick_naming_the_calendar() {
    let mut m = owning(&minutely_except_a_window());
    let sent = claims_until(&mut m, 6 * 60_000);
    let at: Vec<(i64, RunStatus)> = sent
        .iter()
        .map(|c| {
            (
                c.record.scheduled_unix_ms - t(0).timestamp_millis(),
                c.record.status,
            )
        })
        .collect();
    assert_eq!(
        at,
        [
            (60_000, RunStatus::Running),
            (120_000, RunStatus::Skipped),
            (300_000, RunStatus::Running),
            (360_000, RunStatus::Running),
        ],
        "00:02, 00:03 and 00:04 are one record; {sent:?}"
    );
    let skipped = &sent[1].record;
    assert_eq!(skipped.missed_ticks, Some(3));
    assert_eq!(
        skipped.skipped_through_unix_ms,
        Some(t(240_000).timestamp_millis())
    );
    assert_eq!(
        skipped.error.as_deref(),
        Some("skipped by calendar \"quiet\" (except)")
    );
}

#[test]
fn only_keeps_the_ticks_its_calendar_covers() {
    let tables = format!(
        "[[calendar]]\nname = \"open\"\nhours = [\"00:02-00:04\"]\n{}",
        job("m", "0 * * * * *", "only = [\"open\"]")
    );
    let mut m = owning(&tables);
    let sent = claims_until(&mut m, 5 * 60_000);
    let runs: Vec<i64> = sent
        .iter()
        .filter(|c| c.record.status != RunStatus::Skipped)
        .map(|c| c.record.scheduled_unix_ms - t(0).timestamp_millis())
        .collect();
    assert_eq!(runs, [120_000, 180_000], "{sent:?}");
    let skipped: Vec<(i64, Option<u64>)> = sent
        .iter()
        .filter(|c| c.record.status == RunStatus::Skipped)
        .map(|c| {
            (
                c.record.scheduled_unix_ms - t(0).timestamp_millis(),
                c.record.missed_ticks,
            )
        })
        .collect();
    assert_eq!(
        skipped[0],
        (60_000, Some(1)),
        "00:01 alone, before the window"
    );
    assert_eq!(skipped[1].0, 240_000, "from 00:04 on, to the next opening");
    assert_eq!(
        sent[0].record.error.as_deref(),
        Some("outside calendar \"open\" (only)")
    );
}

#[test]
fn catch_up_never_runs_a_tick_its_calendar_skips_and_records_the_run_once() {
    let mut m = machine(&minutely_except_a_window());
    // A follower until 00:04:30, when it gains the lock; the owner before it recorded 00:01 and
    // died. 00:02 to 00:04 were skipped by the calendar, not missed: recorded once, as the
    // owner would have at 00:02, and never run.
    run_timer(&mut m, 270_000);
    let acquired = m.handle(Input::Lock(LockInput::Changed(owner(TOKEN))), t(270_000));
    assert!(
        acquired.contains(&Action::CatchUp(CatchUpAction::ListRecords(JobName::new(
            "m"
        ))))
    );
    let recorded = stored("m", 60_000, "n2", 6, RunStatus::Succeeded);
    let caught = m.handle(listed("m", &[recorded]), t(270_000));
    let [skipped] = &claims(&caught)[..] else {
        panic!("one record of the skipped run: {caught:?}");
    };
    assert_eq!(
        (
            skipped.record.scheduled_unix_ms - t(0).timestamp_millis(),
            skipped.record.status,
            skipped.record.missed_ticks,
            skipped.record.skipped_through_unix_ms,
        ),
        (
            120_000,
            RunStatus::Skipped,
            Some(3),
            Some(t(240_000).timestamp_millis())
        )
    );
    assert!(
        skipped
            .record
            .error
            .as_deref()
            .unwrap_or("")
            .contains("quiet"),
        "{skipped:?}"
    );
    m.handle(ok(skipped), t(270_010));
    let next = claims_until(&mut m, 5 * 60_000);
    assert_eq!(
        next.iter()
            .map(|c| (
                c.record.scheduled_unix_ms - t(0).timestamp_millis(),
                c.record.status
            ))
            .collect::<Vec<_>>(),
        [(300_000, RunStatus::Running)]
    );
}

#[test]
fn a_run_recorded_by_the_owner_before_is_not_recorded_again_by_catch_up() {
    let mut m = machine(&minutely_except_a_window());
    run_timer(&mut m, 270_000);
    m.handle(Input::Lock(LockInput::Changed(owner(TOKEN))), t(270_000));
    let mut before = stored("m", 120_000, "n2", 6, RunStatus::Skipped);
    before.missed_ticks = Some(3);
    before.skipped_through_unix_ms = Some(t(240_000).timestamp_millis());
    let ran = stored("m", 60_000, "n2", 6, RunStatus::Succeeded);
    let caught = m.handle(listed("m", &[ran, before]), t(270_000));
    assert!(claims(&caught).is_empty(), "recorded already: {caught:?}");
}

/// The records the timer claims up to `until_ms`, left unanswered: ticks that come while the
/// job's listing is out.
fn claimed_by_the_timer(m: &mut FireMachine, until_ms: i64) -> Vec<TickClaim> {
    let mut sent = Vec::new();
    while let Some(at) = m.next_deadline().filter(|at| ms(*at) <= until_ms) {
        sent.extend(claims(&m.handle(Input::Tick, at)));
    }
    sent
}

/// A follower gains the lock at 00:02:30, in the calendar's window, and 00:03 comes before
/// its listing does: the tick waits for the listing, whatever it says.
fn owner_whose_listing_is_out_at_a_skipped_tick() -> FireMachine {
    let mut m = machine(&minutely_except_a_window());
    run_timer(&mut m, 150_000);
    let acquired = m.handle(Input::Lock(LockInput::Changed(owner(TOKEN))), t(150_000));
    assert!(
        acquired.contains(&Action::CatchUp(CatchUpAction::ListRecords(JobName::new(
            "m"
        )))),
        "{acquired:?}"
    );
    let early = claimed_by_the_timer(&mut m, 180_000);
    assert!(
        early.is_empty(),
        "00:03 is not recorded before the listing says what the owner before recorded: {early:?}"
    );
    m
}

/// The skipped run of `tick_ms`'s, through 00:04, as the owner before us recorded it at 00:02.
fn skipped_run_recorded_before(tick_ms: i64) -> RunRecord {
    let mut before = stored("m", tick_ms, "n2", 6, RunStatus::Skipped);
    before.missed_ticks = Some(3);
    before.skipped_through_unix_ms = Some(t(240_000).timestamp_millis());
    before
}

/// (instant, status, ticks it stands for, through) of each record claimed.
fn skipped_runs(sent: &[TickClaim]) -> Vec<(i64, RunStatus, Option<u64>, Option<i64>)> {
    sent.iter()
        .map(|c| {
            (
                c.record.scheduled_unix_ms - t(0).timestamp_millis(),
                c.record.status,
                c.record.missed_ticks,
                c.record
                    .skipped_through_unix_ms
                    .map(|through| through - t(0).timestamp_millis()),
            )
        })
        .collect()
}

/// A skipped tick that comes between a gained lock and the job's listing is not recorded a
/// second time when the owner before recorded its run, named by the run's earlier first tick
/// (seen in tests/calendars.rs: after a kill -9, the next owner wrote a second `skipped`
/// record for a tick the killed owner's record stood for).
#[test]
fn a_skipped_tick_due_before_the_listing_is_not_recorded_again_when_the_owner_before_did() {
    let mut m = owner_whose_listing_is_out_at_a_skipped_tick();
    let ran = stored("m", 60_000, "n2", 6, RunStatus::Succeeded);
    let caught = m.handle(
        listed("m", &[ran, skipped_run_recorded_before(120_000)]),
        t(181_000),
    );
    assert!(
        claims(&caught).is_empty(),
        "00:03 is the owner before's record's: {caught:?}"
    );
    let next = claims_until(&mut m, 5 * 60_000);
    assert_eq!(
        skipped_runs(&next),
        [(300_000, RunStatus::Running, None, None)],
        "00:04 too; 00:05 runs"
    );
}

/// ... and when no record stands for it, it is recorded once after the listing: by the
/// listing's own record of the run (the job has records), or held and recorded then (a job
/// without records, whose catch-up plans nothing).
#[test]
fn a_skipped_tick_due_before_the_listing_is_recorded_once_after_it_when_nobody_did() {
    for (records, want) in [
        (
            vec![stored("m", 60_000, "n2", 6, RunStatus::Succeeded)],
            (120_000, RunStatus::Skipped, Some(3), Some(240_000)),
        ),
        (
            vec![],
            (180_000, RunStatus::Skipped, Some(2), Some(240_000)),
        ),
    ] {
        let mut m = owner_whose_listing_is_out_at_a_skipped_tick();
        let caught = m.handle(listed("m", &records), t(181_000));
        let sent = claims(&caught);
        assert_eq!(
            skipped_runs(&sent),
            [want],
            "listing {records:?}: {caught:?}"
        );
        m.handle(ok(&sent[0]), t(181_010));
        let next = claims_until(&mut m, 5 * 60_000);
        assert_eq!(
            skipped_runs(&next),
            [(300_000, RunStatus::Running, None, None)],
            "listing {records:?}: 00:04 is the record's"
        );
    }
}

/// A failed listing keeps the skipped ticks held until the relist answers: recorded at the
/// failure, with nothing known of the owner before, a run it recorded would be recorded twice.
#[test]
fn skipped_ticks_held_wait_for_the_relist_when_the_listing_fails() {
    let mut m = owner_whose_listing_is_out_at_a_skipped_tick();
    let failed = Input::CatchUp(CatchUpInput::Listed {
        job: JobName::new("m"),
        result: Err("no answer in time".into()),
    });
    let answered = m.handle(failed, t(181_000));
    assert!(claims(&answered).is_empty(), "{answered:?}");
    let again = t(181_000) + chrono::Duration::from_std(RELIST_AFTER).expect("small");
    let relisted = but_delayed(m.handle(Input::Tick, again));
    assert_eq!(
        relisted,
        vec![Action::CatchUp(CatchUpAction::ListRecords(JobName::new(
            "m"
        )))]
    );
    let ran = stored("m", 60_000, "n2", 6, RunStatus::Succeeded);
    let caught = m.handle(
        listed("m", &[ran, skipped_run_recorded_before(120_000)]),
        again,
    );
    assert!(
        claims(&caught).is_empty(),
        "the owner before recorded 00:03: {caught:?}"
    );
    let next = claims_until(&mut m, 5 * 60_000);
    assert_eq!(
        skipped_runs(&next),
        [(300_000, RunStatus::Running, None, None)]
    );
}
