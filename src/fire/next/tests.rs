//! The next-run answer: calendars' skipped ticks are never a next run, jitter gives the start,
//! pauses and `enabled` stop the live answer, and a rule that skips for ever says so.

use super::*;

fn job(tables: &str) -> std::sync::Arc<JobConfig> {
    crate::config::jobs_for_test(tables)
        .into_iter()
        .next()
        .expect("one job")
}

fn at(text: &str) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(text)
        .expect("an instant")
        .with_timezone(&Utc)
}

const HOLIDAYS: &str =
    "[[calendar]]\nname = \"holidays\"\ndates = [\"2026-12-24\", \"2026-12-25\"]\n";

#[test]
fn a_tick_a_calendar_skips_is_never_the_next_run() {
    let job = job(&format!(
        "{HOLIDAYS}[[job]]\nname = \"j\"\nschedule = \"0 0 9 * * *\"\nexcept = [\"holidays\"]\nshell = \"true\"\n"
    ));
    let (runs, short) = runs_after(&job, at("2026-12-23T10:00:00Z"), 2);
    let ticks: Vec<DateTime<Utc>> = runs.iter().map(|run| run.tick).collect();
    assert_eq!(
        ticks,
        [at("2026-12-26T09:00:00Z"), at("2026-12-27T09:00:00Z")],
        "the 24th and 25th are skipped"
    );
    assert_eq!(short, None);
    assert_eq!(
        next_run(&job, false, at("2026-12-23T10:00:00Z")).map(|run| run.tick),
        Ok(at("2026-12-26T09:00:00Z"))
    );
}

#[test]
fn a_per_second_job_kept_to_office_hours_runs_next_on_monday_morning() {
    let job = job(
        "[[calendar]]\nname = \"office\"\nhours = [\"09:00-17:00\"]\nweekdays = [\"mon\", \"tue\", \"wed\", \"thu\", \"fri\"]\n\
         timezone = \"Europe/Berlin\"\n\
         [[job]]\nname = \"j\"\nschedule = \"* * * * * *\"\nonly = [\"office\"]\nshell = \"true\"\n",
    );
    // Friday 2026-12-04, 17:00 in Berlin (16:00 UTC): the next run is Monday 09:00 there.
    let run = next_run(&job, false, at("2026-12-04T16:00:00Z")).expect("a run");
    assert_eq!(run.tick, at("2026-12-07T08:00:00Z"));
    assert_eq!(run.starts, run.tick, "no jitter");
}

#[test]
fn the_start_carries_the_jitter_and_the_live_answer_knows_pauses_and_enabled() {
    let jittered = job(
        "[[job]]\nname = \"j\"\nschedule = \"0 * * * * *\"\njitter = \"30s\"\nshell = \"true\"\n",
    );
    let run = next_run(&jittered, false, at("2026-12-04T16:00:30Z")).expect("a run");
    assert_eq!(run.tick, at("2026-12-04T16:01:00Z"));
    assert_eq!(run.starts, jittered.start_of(run.tick));
    assert_eq!(
        next_run(&jittered, true, at("2026-12-04T16:00:30Z")),
        Err(NoRun::Paused)
    );
    let disabled = job(
        "[[job]]\nname = \"j\"\nschedule = \"0 * * * * *\"\nenabled = false\nshell = \"true\"\n",
    );
    assert_eq!(
        next_run(&disabled, false, at("2026-12-04T16:00:30Z")),
        Err(NoRun::Disabled)
    );
    let (runs, _) = runs_after(&disabled, at("2026-12-04T16:00:30Z"), 1);
    assert_eq!(
        runs.len(),
        1,
        "the file's answer lists a disabled job's ticks"
    );
    let on_demand = job("[[job]]\nname = \"j\"\nshell = \"true\"\n");
    assert_eq!(
        runs_after(&on_demand, at("2026-12-04T16:00:30Z"), 3),
        (Vec::new(), Some(NoRun::OnDemand))
    );
}

#[test]
fn a_rule_that_skips_every_tick_says_how_far_it_looked() {
    // `only` a date that has passed: every tick ahead is skipped.
    let job = job("[[calendar]]\nname = \"once\"\ndates = [\"2020-01-01\"]\n\
         [[job]]\nname = \"j\"\nschedule = \"0 0 * * * *\"\nonly = [\"once\"]\nshell = \"true\"\n");
    let from = at("2026-12-04T16:00:00Z");
    match next_run(&job, false, from) {
        Err(NoRun::SkippedUntil(until)) => {
            assert!(
                until > from + chrono::Duration::days(365),
                "looked years ahead: {until}"
            );
        }
        other => panic!("skipped for ever, got {other:?}"),
    }
}
