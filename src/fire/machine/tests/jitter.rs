//! Jitter (issue 20): a tick starts a delay after itself that is a function of the job and the
//! tick, so whichever node owns starts it at the same instant, claim-ahead still works, and
//! `ZKCRON_SCHEDULED_AT` stays the tick.

use super::*;

const JITTERED: &str = "jitter = \"30s\"";

#[test]
fn a_jittered_tick_is_claimed_ahead_of_its_start_and_starts_then() {
    let mut m = owning(&job("a", "0 * * * * *", JITTERED));
    let config = jobs(&job("a", "0 * * * * *", JITTERED))
        .pop()
        .expect("one job");
    // The machine starts at t(0), on a tick whose start is still ahead.
    let start = config.start_of(t(0));
    assert!(start > t(0) && start < t(30_000), "{start}");
    assert_eq!(
        m.next_deadline(),
        Some(start - chrono::Duration::milliseconds(250)),
        "claimed 250 ms ahead of its start, not of its tick"
    );
    let claim = only_claim(&m.handle(Input::Tick, start - chrono::Duration::milliseconds(250)));
    assert_eq!(
        claim.record.scheduled_unix_ms,
        t(0).timestamp_millis(),
        "the record is the tick's"
    );
    let prepared = m.handle(ok(&claim), start - chrono::Duration::milliseconds(249));
    let [
        Action::Runs(RunAction::Prepare {
            not_before,
            context,
            ..
        }),
    ] = prepared.as_slice()
    else {
        panic!("prepared for its start: {prepared:?}");
    };
    assert_eq!(*not_before, start);
    assert_eq!(
        context.scheduled_at,
        t(0),
        "ZKCRON_SCHEDULED_AT is the tick"
    );
    let (run, _) = only_start(&m.handle(Input::Tick, start));
    assert_eq!(run.record.started_unix_ms, Some(start.timestamp_millis()));
}

/// The start is the job's and the tick's alone: a node that takes over computes the same one,
/// and different jobs are spread apart.
#[test]
fn every_node_computes_the_same_start_and_jobs_spread() {
    let on_one = jobs(&job("a", "0 * * * * *", JITTERED)).pop().expect("a");
    let on_other = jobs(&job("a", "0 * * * * *", JITTERED)).pop().expect("a");
    let ticks: Vec<DateTime<Utc>> = (1..=50).map(|m| t(m * 60_000)).collect();
    for tick in &ticks {
        assert_eq!(on_one.start_of(*tick), on_other.start_of(*tick));
    }
    let offsets: std::collections::BTreeSet<i64> = ticks
        .iter()
        .map(|tick| (on_one.start_of(*tick) - *tick).num_milliseconds())
        .collect();
    assert!(
        offsets.len() > 40,
        "offsets vary from tick to tick: {offsets:?}"
    );
    assert!(offsets.iter().all(|ms| (0..30_000).contains(ms)));
    let plain = jobs(&job("a", "0 * * * * *", "")).pop().expect("a");
    assert_eq!(plain.start_of(t(60_000)), t(60_000), "no jitter, no delay");
}
