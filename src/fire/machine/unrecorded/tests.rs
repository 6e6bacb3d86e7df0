use super::*;
use crate::ids::NodeId;

fn config(name: &str) -> Arc<JobConfig> {
    let table =
        format!("[[job]]\nname = \"{name}\"\nschedule = \"* * * * * *\"\nshell = \"true\"\n");
    let jobs = crate::config::jobs_for_test(&table);
    Arc::clone(&jobs[0])
}

fn missed(config: &JobConfig, tick_ms: i64) -> RunRecord {
    let mut record = RunRecord::claimed(
        &config.spec.name,
        tick_ms,
        (&NodeId::new("n"), "127.0.0.1"),
        FencingToken(1),
        tick_ms,
    );
    record.status = RunStatus::Missed;
    record.error = Some(format!("its claim failed: quota ({tick_ms})"));
    record
}

fn at(ms: i64) -> DateTime<Utc> {
    DateTime::from_timestamp_millis(ms).expect("instant")
}

/// `record` sent and refused at `now_ms`.
fn refused(unrecorded: &mut Unrecorded, config: &Arc<JobConfig>, tick_ms: i64, now_ms: i64) {
    let record = missed(config, tick_ms);
    unrecorded.sending(config, &record);
    unrecorded.answered(&config.spec.name, tick_ms, true, at(now_ms));
}

#[test]
fn refused_ticks_in_a_row_are_one_gap_but_never_over_a_tick_claimed_between() {
    let a = config("a");
    let mut unrecorded = Unrecorded::default();
    for tick in [1000, 2000, 3000] {
        refused(&mut unrecorded, &a, tick, tick + 100);
    }
    assert_eq!(unrecorded.owed_ticks(&a.spec.name), [(1000, 3000, 3)]);
    unrecorded.claimed(&a.spec.name, 4000, at(4100));
    refused(&mut unrecorded, &a, 5000, 5100);
    refused(&mut unrecorded, &a, 6000, 6100);
    assert_eq!(
        unrecorded.owed_ticks(&a.spec.name),
        [(1000, 3000, 3), (5000, 6000, 2)],
        "4 s ran: the gaps stay apart"
    );
    let due = unrecorded.due(at(6200), FencingToken(9));
    assert_eq!(due.len(), 2);
    let gap = &due[0].record;
    assert_eq!(
        (
            gap.missed_from_unix_ms,
            gap.scheduled_unix_ms,
            gap.missed_ticks
        ),
        (Some(1000), 3000, Some(3))
    );
    assert_eq!(
        gap.fencing_token,
        FencingToken(9),
        "written under the lock held now"
    );
    assert_eq!(
        gap.error.as_deref(),
        Some("its claim failed: quota (1000)"),
        "the gap says why its first tick was not run"
    );
}

#[test]
fn what_is_owed_goes_at_once_after_a_claim_went_through_and_backs_off_while_refused() {
    let a = config("a");
    let mut unrecorded = Unrecorded::default();
    assert_eq!(unrecorded.next_deadline(), None);
    refused(&mut unrecorded, &a, 1000, 1000);
    assert_eq!(unrecorded.next_deadline(), Some(at(2000)), "1 s");
    assert!(unrecorded.due(at(1999), FencingToken(1)).is_empty());
    let mut now = 2000;
    let mut waits = Vec::new();
    for _ in 0..7 {
        let due = unrecorded.due(at(now), FencingToken(1));
        assert_eq!(due.len(), 1, "due at {now}");
        assert_eq!(unrecorded.next_deadline(), None, "out: nothing else due");
        let tick = due[0].record.scheduled_unix_ms;
        unrecorded.sending(&a, &due[0].record);
        unrecorded.answered(&a.spec.name, tick, true, at(now));
        let next = unrecorded
            .next_deadline()
            .expect("owed again")
            .timestamp_millis();
        waits.push(next - now);
        now = next;
    }
    assert_eq!(waits, [2000, 4000, 8000, 16000, 30000, 30000, 30000]);
    // A claim that goes through 10 ms after the last refusal: the owed gap goes then, not 30 s
    // later, and the backoff starts over.
    let now = now - 30_000;
    unrecorded.claimed(&a.spec.name, 200_000, at(now + 10));
    assert_eq!(unrecorded.next_deadline(), Some(at(now + 10)));
    let due = unrecorded.due(at(now + 10), FencingToken(1));
    assert_eq!(due.len(), 1);
    let tick = due[0].record.scheduled_unix_ms;
    unrecorded.sending(&a, &due[0].record);
    unrecorded.answered(&a.spec.name, tick, false, at(now + 20));
    assert_eq!(unrecorded.next_deadline(), None, "written: nothing owed");
    assert!(unrecorded.owed_ticks(&a.spec.name).is_empty());
}

#[test]
fn only_a_scheduled_ticks_own_missed_or_skipped_record_is_owed() {
    let a = config("a");
    let mut unrecorded = Unrecorded::default();
    let mut submission = missed(&a, 1000);
    submission.submission_id =
        Some(crate::delayed::submission::SubmissionId::parse("x").expect("id"));
    let mut claimed = missed(&a, 2000);
    claimed.status = RunStatus::Claimed;
    for record in [submission, claimed] {
        unrecorded.sending(&a, &record);
        unrecorded.answered(&a.spec.name, record.scheduled_unix_ms, true, at(3000));
    }
    assert!(unrecorded.owed_ticks(&a.spec.name).is_empty());
    assert_eq!(unrecorded.next_deadline(), None);
    // Answered by another record or owner standing for it: not owed either.
    let record = missed(&a, 4000);
    unrecorded.sending(&a, &record);
    unrecorded.answered(&a.spec.name, 4000, false, at(4100));
    assert!(unrecorded.owed_ticks(&a.spec.name).is_empty());
    // Lost: what is owed is the next owner's to record.
    refused(&mut unrecorded, &a, 5000, 5100);
    unrecorded.left_to_the_next_owner();
    assert!(unrecorded.owed_ticks(&a.spec.name).is_empty());
    assert_eq!(unrecorded.next_deadline(), None);
}

#[test]
fn a_gap_sent_again_and_refused_is_not_stretched_over_a_tick_claimed_while_it_was_out() {
    let a = config("a");
    let mut unrecorded = Unrecorded::default();
    refused(&mut unrecorded, &a, 1000, 1100);
    let due = unrecorded.due(at(2100), FencingToken(1));
    assert_eq!(due.len(), 1);
    unrecorded.sending(&a, &due[0].record);
    // While the gap is out again, 2 s runs; then the gap and 3 s are refused.
    unrecorded.claimed(&a.spec.name, 2000, at(2200));
    unrecorded.answered(&a.spec.name, 1000, true, at(2300));
    refused(&mut unrecorded, &a, 3000, 3100);
    assert_eq!(
        unrecorded.owed_ticks(&a.spec.name),
        [(1000, 1000, 1), (3000, 3000, 1)],
        "2 s ran: the gaps stay apart"
    );
}

/// Issue 53's soak: a tick's claim went unanswered, a later tick was claimed once the session
/// answered again, and the lock was lost before the first was settled. Its `missed` record,
/// with no lock to send it under, was dropped, and the later record hid the tick from the next
/// owner's catch-up: neither run nor recorded. It is kept, and written under the token of this
/// node's next turn as owner.
#[test]
fn a_tick_a_later_claim_hides_is_kept_over_a_lost_lock_and_written_at_the_next_turn() {
    let a = config("a");
    let mut unrecorded = Unrecorded::default();
    unrecorded.claimed(&a.spec.name, 14_000, at(14_800));
    unrecorded.left_to_the_next_owner();
    unrecorded.owe_without_a_lock(&a, &missed(&a, 13_000), at(15_660));
    // After the newest claim: the next owner's catch-up finds it.
    unrecorded.owe_without_a_lock(&a, &missed(&a, 16_000), at(16_100));
    assert_eq!(unrecorded.owed_ticks(&a.spec.name), [(13_000, 13_000, 1)]);
    unrecorded.reconnected(at(18_210));
    let due = unrecorded.due(at(18_210), FencingToken(18));
    let ticks: Vec<(i64, FencingToken)> = due
        .iter()
        .map(|owed| (owed.record.scheduled_unix_ms, owed.record.fencing_token))
        .collect();
    assert_eq!(ticks, [(13_000, FencingToken(18))]);
}

/// What a lost lock leaves to the next owner: the owed ticks after the job's newest claim,
/// which its catch-up finds; those before it stay owed here, and nothing is due meanwhile.
#[test]
fn a_lost_lock_leaves_to_the_next_owner_only_what_its_catch_up_finds() {
    let a = config("a");
    let mut unrecorded = Unrecorded::default();
    refused(&mut unrecorded, &a, 1000, 1100);
    unrecorded.claimed(&a.spec.name, 2000, at(2100));
    refused(&mut unrecorded, &a, 3000, 3100);
    assert_eq!(
        unrecorded.owed_ticks(&a.spec.name),
        [(1000, 1000, 1), (3000, 3000, 1)]
    );
    unrecorded.left_to_the_next_owner();
    assert_eq!(unrecorded.owed_ticks(&a.spec.name), [(1000, 1000, 1)]);
    assert_eq!(unrecorded.next_deadline(), None);
}
