//! The catch-up part on its own, without the router.

use super::*;

const TOKEN: FencingToken = FencingToken(7);

/// 2030-01-01T00:00:00Z plus `s` seconds.
fn at(s: i64) -> DateTime<Utc> {
    DateTime::from_timestamp(1_893_456_000 + s, 0).expect("in range")
}

/// Job `report`, every minute, with `extra` keys.
fn report(extra: &str) -> Arc<JobConfig> {
    let table = format!(
        "[[job]]\nname = \"report\"\nschedule = \"0 * * * * *\"\nshell = \"true\"\n{extra}\n"
    );
    Arc::clone(&crate::config::jobs_for_test(&table)[0])
}

fn me() -> Me {
    Me {
        node_id: NodeId::new("n1"),
        ip: "10.0.0.1".into(),
        trace_seed: None,
    }
}

fn ground<'a>(
    me: &'a Me,
    config: &'a Arc<JobConfig>,
    runs: &'a Runs,
    now: DateTime<Utc>,
) -> Ground<'a> {
    Ground {
        me,
        token: TOKEN,
        config,
        runs,
        claims: Box::leak(Box::default()),
        unrecorded: Box::leak(Box::default()),
        schedule_since: DateTime::<Utc>::MIN_UTC,
        newest_tick: None,
        first_handled: None,
        outage: None,
        calendar_through: None,
        now,
    }
}

/// A record of tick `tick` by node `node` under `token`, in `status`.
fn record(tick: DateTime<Utc>, node: &str, token: i32, status: RunStatus) -> RunRecord {
    let job = JobName::new("report");
    let node = NodeId::new(node);
    let ms = tick.timestamp_millis();
    let mut record = RunRecord::claimed(&job, ms, (&node, "10.0.0.2"), FencingToken(token), ms);
    record.status = status;
    record
}

fn listing(records: Vec<RunRecord>) -> JobRecords {
    JobRecords {
        ticks: records.iter().map(|r| r.scheduled_unix_ms).collect(),
        newest: records.into_iter().map(|r| (r, 3)).collect(),
        ..JobRecords::default()
    }
}

fn ticks(items: impl IntoIterator<Item = Item>) -> Vec<(DateTime<Utc>, FireReason)> {
    items
        .into_iter()
        .map(|item| (item.tick, item.reason))
        .collect()
}

fn missed(records: &[RecordOnly]) -> Vec<(i64, u64, String)> {
    records
        .iter()
        .map(|written| match written {
            RecordOnly::Create(r) | RecordOnly::Again(r, _) => {
                assert_eq!(r.status, RunStatus::Missed);
                let from = r.missed_from_unix_ms.expect("a gap's first tick");
                let error = r.error.clone().unwrap_or_default();
                (
                    from / 1000 - 1_893_456_000,
                    r.missed_ticks.unwrap_or(0),
                    error,
                )
            }
        })
        .collect()
}

#[test]
fn missed_ticks_start_per_misfire_within_the_deadline_and_the_rest_are_one_gap() {
    let (me, runs) = (me(), Runs::default());
    let done = record(at(0), "n2", 3, RunStatus::Succeeded);
    let cases = [
        // Ticks at 60, 120 and 180 s were missed; now is 210 s.
        (
            "misfire = \"run_all\"\nstarting_deadline = \"1h\"",
            vec![60, 120, 180],
            vec![],
        ),
        (
            "misfire = \"run_once\"\nstarting_deadline = \"1h\"",
            vec![180],
            vec![(60, 2)],
        ),
        (
            "misfire = \"skip\"\nstarting_deadline = \"1h\"",
            vec![],
            vec![(60, 3)],
        ),
        // The tick at 60 s is past the 100 s deadline: a gap of its own.
        (
            "misfire = \"run_all\"\nstarting_deadline = \"100s\"",
            vec![120, 180],
            vec![(60, 1)],
        ),
    ];
    for (keys, started, gaps) in cases {
        let config = report(keys);
        let mut catch_up = CatchUp::default();
        assert!(catch_up.awaits_listing());
        let ground = ground(&me, &config, &runs, at(210));
        let listed = catch_up.listed(&ground, listing(vec![done.clone()]), Vec::new());
        assert!(
            listed.marks.is_empty() && listed.retries.is_empty(),
            "{keys}"
        );
        assert_eq!(listed.latest, Some(at(0)));
        let found: Vec<(i64, u64)> = missed(&listed.records)
            .into_iter()
            .map(|(from, count, error)| {
                assert!(error.contains("no node owned the lock"), "{error}");
                (from, count)
            })
            .collect();
        assert_eq!(found, gaps, "{keys}");
        assert!(catch_up.decided() && !catch_up.awaits_listing());
        let want: Vec<_> = started
            .into_iter()
            .map(|s| (at(s), FireReason::CaughtUp))
            .collect();
        let job = JobName::new("report");
        assert_eq!(ticks(catch_up.into_backlog(&job)), want, "{keys}");
    }
}

#[test]
fn a_brand_new_job_catches_up_nothing_and_a_started_tick_covers_older_ones() {
    let (me, runs, config) = (me(), Runs::default(), report("misfire = \"run_all\""));
    let mut catch_up = CatchUp::default();
    let listed = catch_up.listed(
        &ground(&me, &config, &runs, at(210)),
        listing(vec![]),
        vec![],
    );
    assert!(listed.records.is_empty() && listed.latest.is_none());
    assert_eq!(catch_up.into_backlog(&JobName::new("report")).count(), 0);

    let mut catch_up = CatchUp::default();
    let mut started_here = ground(&me, &config, &runs, at(210));
    started_here.newest_tick = Some(at(120));
    started_here.first_handled = Some(at(180));
    let done = record(at(0), "n2", 3, RunStatus::Succeeded);
    catch_up.listed(&started_here, listing(vec![done]), vec![]);
    let backlog = ticks(catch_up.into_backlog(&JobName::new("report")));
    assert_eq!(
        backlog,
        vec![],
        "60 and 120 covered by 120, 180 handled on time"
    );
}

#[test]
fn a_gap_during_an_outage_says_zookeeper_was_unreachable() {
    let (me, runs) = (me(), Runs::default());
    let config = report("misfire = \"skip\"");
    let mut cut_off = ground(&me, &config, &runs, at(210));
    cut_off.outage = Some((at(50), Some(at(200))));
    let mut catch_up = CatchUp::default();
    let done = record(at(0), "n2", 3, RunStatus::Succeeded);
    let listed = catch_up.listed(&cut_off, listing(vec![done]), vec![]);
    let gaps = missed(&listed.records);
    assert_eq!(gaps.len(), 1);
    assert!(
        gaps[0].2.starts_with("zookeeper was unreachable"),
        "{gaps:?}"
    );
}

#[test]
fn open_runs_of_older_tokens_are_marked_and_rerun_before_the_missed_ticks() {
    let (me, runs) = (me(), Runs::default());
    let config =
        report("on_interrupted = \"rerun\"\nmisfire = \"run_all\"\nstarting_deadline = \"1h\"");
    let open = record(at(0), "n2", 3, RunStatus::Running);
    let ours_now = record(at(60), "n2", TOKEN.0, RunStatus::Running);
    let mut catch_up = CatchUp::default();
    let ground = ground(&me, &config, &runs, at(150));
    let listed = catch_up.listed(&ground, listing(vec![open.clone(), ours_now]), vec![]);
    let [
        Action::CatchUp(CatchUpAction::MarkInterrupted {
            record,
            version: 3,
            closes: false,
        }),
    ] = &listed.marks[..]
    else {
        panic!("one mark, of the older token's run: {:?}", listed.marks);
    };
    assert_eq!(
        (record.run_id.as_str(), record.status),
        (open.run_id.as_str(), RunStatus::Interrupted)
    );
    assert!(!catch_up.decided(), "the mark is out");

    let told = catch_up.marked(record.clone(), Ok(4), true, at(151));
    assert_eq!(
        told.map(|(r, again)| (r.status, again)),
        Some((RunStatus::Interrupted, true))
    );
    assert!(catch_up.decided());
    let backlog: Vec<Item> = catch_up.into_backlog(&JobName::new("report")).collect();
    assert_eq!(
        ticks(backlog.iter().cloned()),
        vec![(at(0), FireReason::Rerun), (at(120), FireReason::CaughtUp)]
    );
    assert_eq!(
        backlog[0].again.as_ref().map(|(_, v)| *v),
        Some(4),
        "rerun at the marked version"
    );
}

#[test]
fn a_mark_refused_is_no_rerun_and_a_forbid_guard_proves_a_run_alive() {
    let (me, runs) = (me(), Runs::default());
    let config = report("on_interrupted = \"rerun\"\nconcurrency = \"forbid\"");
    let open = record(at(0), "n2", 3, RunStatus::Running);
    let mut guarded = listing(vec![open.clone()]);
    guarded.guard_holder = Some(open.run_id.clone());
    let mut catch_up = CatchUp::default();
    let listed = catch_up.listed(&ground(&me, &config, &runs, at(30)), guarded, vec![]);
    assert!(listed.marks.is_empty(), "its guard says it is alive");

    let mut catch_up = CatchUp::default();
    catch_up.listed(
        &ground(&me, &config, &runs, at(30)),
        listing(vec![open.clone()]),
        vec![],
    );
    assert_eq!(
        catch_up.marked(open, Err("changed".into()), true, at(31)),
        None
    );
    assert!(catch_up.decided());
    assert_eq!(catch_up.into_backlog(&JobName::new("report")).count(), 0);
}

#[test]
fn a_promised_retry_is_kept_or_past_its_deadline_recorded_missed() {
    let (me, runs) = (me(), Runs::default());
    let config = report("starting_deadline = \"100s\"");
    let mut failed = record(at(0), "n2", 3, RunStatus::Failed);
    failed.retry_at_unix_ms = Some(at(30).timestamp_millis());
    let mut catch_up = CatchUp::default();
    let listed = catch_up.listed(
        &ground(&me, &config, &runs, at(40)),
        listing(vec![failed.clone()]),
        vec![],
    );
    let [retry] = &listed.retries[..] else {
        panic!("one retry kept: {listed:?}");
    };
    assert_eq!((retry.at, retry.version, retry.resumed), (at(30), 3, true));

    let mut catch_up = CatchUp::default();
    let listed = catch_up.listed(
        &ground(&me, &config, &runs, at(200)),
        listing(vec![failed]),
        vec![],
    );
    assert!(listed.retries.is_empty());
    // First, before the gaps of the ticks missed since.
    let Some(RecordOnly::Again(missed, 3)) = listed.records.first() else {
        panic!("the attempt recorded missed over the stored record: {listed:?}");
    };
    assert_eq!((missed.status, missed.attempt), (RunStatus::Missed, 2));
}

#[test]
fn a_stall_is_one_gap_up_to_now_and_late_held_ticks_one_more() {
    let (me, config) = (me(), report(""));
    let stalled = stalled_gap(&me, TOKEN, &config, at(60), at(250));
    assert_eq!(
        (
            stalled.missed_from_unix_ms,
            stalled.scheduled_unix_ms,
            stalled.missed_ticks
        ),
        (
            Some(at(60).timestamp_millis()),
            at(240).timestamp_millis(),
            Some(4)
        )
    );
    assert_eq!(
        late_held(&me, TOKEN, &config, &[], at(250)).map(|r| r.run_id),
        None
    );
    let held = late_held(&me, TOKEN, &config, &[at(60), at(120)], at(250)).expect("a gap");
    assert_eq!((held.missed_ticks, held.fencing_token), (Some(2), TOKEN));
}

/// Issue 53: a tick whose `missed` record a node could not write before it claimed a later one
/// and lost the lock is found behind the job's newest record by the next owner's catch-up, and
/// recorded — once, and never where a record, a record this node owes, or an older schedule
/// stands for it.
#[test]
fn ticks_behind_the_newest_record_that_no_record_stands_for_are_recorded_missed() {
    let (me, runs) = (me(), Runs::default());
    let config = report("");
    let ran = |s| record(at(s), "n2", 3, RunStatus::Succeeded);
    // 60 and 120 have no record; the gap recorded at 240 stands for 180 and 240; 300 ran.
    let mut gap = record(at(240), "n2", 3, RunStatus::Missed);
    gap.missed_from_unix_ms = Some(at(180).timestamp_millis());
    gap.missed_ticks = Some(2);
    let records = vec![ran(0), gap, ran(300)];
    let holes = |ground: &Ground<'_>, listing: JobRecords| {
        let listed = CatchUp::default().listed(ground, listing, vec![]);
        for written in &listed.records {
            let RecordOnly::Create(record) = written else {
                panic!("a new record: {written:?}");
            };
            let last = record.scheduled_unix_ms / 1000 - 1_893_456_000;
            assert!(matches!(last, 60..=120), "named by its last tick: {last}");
        }
        missed(&listed.records)
            .into_iter()
            .map(|(from, count, error)| {
                assert!(error.contains("a later one ran"), "{error}");
                (from, count)
            })
            .collect::<Vec<_>>()
    };
    let now = at(310);
    assert_eq!(
        holes(&ground(&me, &config, &runs, now), listing(records.clone())),
        vec![(60, 2)],
        "one record for the run of two; nothing where the gap's record stands"
    );

    let mut reloaded = ground(&me, &config, &runs, now);
    reloaded.schedule_since = at(90);
    assert_eq!(
        holes(&reloaded, listing(records.clone())),
        vec![(120, 1)],
        "a tick before this node fired this schedule is not looked for"
    );

    let mut unrecorded = Unrecorded::default();
    let job = JobName::new("report");
    unrecorded.claimed(&job, at(300).timestamp_millis(), now);
    let mut owed = record(at(60), "n1", TOKEN.0, RunStatus::Missed);
    owed.missed_from_unix_ms = Some(at(60).timestamp_millis());
    unrecorded.owe_without_a_lock(&config, &owed, now);
    let mut owing = ground(&me, &config, &runs, now);
    owing.unrecorded = &unrecorded;
    assert_eq!(
        holes(&owing, listing(records.clone())),
        vec![(120, 1)],
        "a tick this node owes a record of is its own to write"
    );

    let mut unread = listing(records);
    unread.ticks.push(at(150).timestamp_millis());
    assert_eq!(
        holes(&ground(&me, &config, &runs, now), unread),
        vec![],
        "below a record not read, what stands for what is unknown"
    );
}
