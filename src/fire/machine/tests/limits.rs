//! Cluster-wide limits (issue 19): a run whose job names limits starts only once it holds a
//! lease of each. The driver waits in each limit's queue; the machine bounds the wait by the
//! job's `starting_deadline` and gives it up then, recording the tick `missed`.

use super::*;

const LIMITED: &str = "[[limit]]\nname = \"db\"\nmax = 1\n";

fn limited_job(extra: &str) -> String {
    format!(
        "{LIMITED}{}",
        job("a", "0 * * * * *", &format!("limits = [\"db\"]\n{extra}"))
    )
}

/// The claimed tick's lease request, and its run id.
fn asks_for_leases(actions: &[Action]) -> (ClaimId, String) {
    let asks: Vec<(ClaimId, String)> = actions
        .iter()
        .filter_map(|action| match action {
            Action::Claims(ClaimAction::TakeLeases { id, run_id, limits }) => {
                assert_eq!(limits.len(), 1);
                assert_eq!((limits[0].name.as_str(), limits[0].max), ("db", 1));
                Some((*id, run_id.clone()))
            }
            _ => None,
        })
        .collect();
    assert_eq!(asks.len(), 1, "one lease request in {actions:?}");
    asks[0].clone()
}

fn taken(id: ClaimId, run_id: &str, failed: Option<&str>) -> Input {
    Input::Claims(ClaimInput::LeasesTaken {
        id,
        run_id: run_id.to_owned(),
        failed: failed.map(str::to_owned),
    })
}

fn gives_back(actions: &[Action], run_id: &str) -> bool {
    actions.iter().any(
        |a| matches!(a, Action::Claims(ClaimAction::GiveBackLeases { run_id: r }) if r == run_id),
    )
}

/// A claimed tick of job `a` (limited) at 60 s, its lease asked for at its instant.
fn asking(extra: &str) -> (FireMachine, ClaimId, String) {
    let mut m = owning(&limited_job(extra));
    let claim = only_claim(&m.handle(Input::Tick, t(59_750)));
    m.handle(ok(&claim), t(59_751));
    let at_tick = m.handle(Input::Tick, t(60_000));
    assert!(
        starts(&at_tick).is_empty(),
        "no start before the lease: {at_tick:?}"
    );
    let (id, run_id) = asks_for_leases(&at_tick);
    (m, id, run_id)
}

#[test]
fn a_limited_run_starts_once_it_holds_its_lease_however_late() {
    let (mut m, id, run_id) = asking("");
    // The wait is the driver's: nothing is asked again meanwhile, and the late-tick rule does
    // not apply to it.
    let meanwhile = but_delayed(m.handle(Input::Tick, t(70_000)));
    assert!(
        meanwhile.iter().all(|a| !matches!(
            a,
            Action::Claims(ClaimAction::TakeLeases { .. })
                | Action::Claims(ClaimAction::WriteRecord(_))
        )),
        "{meanwhile:?}"
    );
    let started = m.handle(taken(id, &run_id, None), t(75_000));
    let (run, _) = only_start(&started);
    assert_eq!(run.record.run_id, run_id);
    assert_eq!(run.record.scheduled_unix_ms, t(60_000).timestamp_millis());
    assert_eq!(
        run.sent.status,
        RunStatus::Claimed,
        "a run that waits for its lease is claimed, not running, until it starts"
    );
    assert!(
        matches!(
            started[..],
            [Action::Runs(RunAction::Start {
                record: StartWrite::Beside,
                ..
            })]
        ),
        "so its start says running: {started:?}"
    );
}

#[test]
fn a_wait_past_the_starting_deadline_is_given_up_and_recorded_missed() {
    let (mut m, _, run_id) = asking("starting_deadline = \"5s\"");
    let deadline = m.next_deadline().expect("the wait's end");
    assert!(deadline > t(65_000) && deadline <= t(65_010), "{deadline}");
    let actions = m.handle(Input::Tick, deadline);
    let missed = actions
        .iter()
        .find_map(|a| match a {
            Action::Claims(ClaimAction::WriteRecord(claim)) => Some(claim),
            _ => None,
        })
        .expect("a missed record");
    assert_eq!(missed.record.status, RunStatus::Missed);
    assert!(
        missed
            .record
            .error
            .as_deref()
            .is_some_and(|e| e.contains("limits stayed full")),
        "{missed:?}"
    );
    assert!(
        gives_back(&actions, &run_id),
        "the wait is given up: {actions:?}"
    );
    assert!(starts(&actions).is_empty());
}

#[test]
fn a_failed_take_is_asked_again_after_a_pause() {
    let (mut m, id, run_id) = asking("");
    assert_eq!(m.handle(taken(id, &run_id, Some("db")), t(60_010)), vec![]);
    assert_eq!(m.next_deadline(), Some(t(62_010)));
    let again = m.handle(Input::Tick, t(62_010));
    assert_eq!(asks_for_leases(&again).0, id);
}

#[test]
fn a_lease_held_by_a_run_that_will_not_start_is_given_back() {
    let (mut m, id, run_id) = asking("");
    // The lock is lost while the wait goes on: the wait is given up at once.
    let lost = m.handle(
        Input::Lock(LockInput::Changed(LockStatus::default())),
        t(60_005),
    );
    assert!(gives_back(&lost, &run_id), "{lost:?}");
    // Leases that came anyway go straight back.
    let answered = m.handle(taken(id, &run_id, None), t(60_010));
    assert!(starts(&answered).is_empty());
    assert!(gives_back(&answered, &run_id), "{answered:?}");
}

#[test]
fn a_claim_waiting_for_its_lease_is_withdrawn_when_the_lock_is_handed_over() {
    let (mut m, _, run_id) = asking("");
    let released = m.handle(Input::Control(ControlInput::ReleaseRequested), t(60_005));
    assert!(
        released
            .iter()
            .any(|a| matches!(a, Action::Claims(ClaimAction::Withdraw { claim, .. }) if claim.record.run_id == run_id)),
        "given back to the next owner, with its guard: {released:?}"
    );
    assert!(gives_back(&released, &run_id), "{released:?}");
}

#[test]
fn a_chained_runs_wait_for_its_lease_counts_from_its_claim_not_its_parents_instant() {
    let tables = format!(
        "{LIMITED}{}[[job]]\nname = \"load\"\nafter = [\"extract\"]\nshell = \"true\"\n\
         limits = [\"db\"]\nstarting_deadline = \"5s\"\n",
        job("extract", EVERY_SECOND, "")
    );
    let mut m = owning(&tables);
    // extract's run at 1 s ended long ago; its mark is read at 60 s.
    let mark = crate::run::FoundMark {
        name: crate::layout::MarkName::of_tick(
            t(1_000).timestamp_millis(),
            &JobName::new("extract"),
        ),
        mark: crate::run::ChainMark::of("extract-1000", RunStatus::Succeeded),
    };
    let listed = Input::Chains(ChainsInput::MarksListed {
        job: JobName::new("load"),
        result: Ok(vec![mark]),
    });
    let claim = only_claim(&m.handle(listed, t(60_000)));
    let asked = m.handle(ok(&claim), t(60_010));
    let (_, run_id) = asks_for_leases(&asked);
    // Every deadline up to `until_ms` (extract's ticks among them), as the driver would feed.
    let mut until = |until_ms: i64| {
        let mut out = Vec::new();
        while let Some(at) = m.next_deadline().filter(|at| ms(*at) <= until_ms) {
            out.extend(m.handle(Input::Tick, at));
        }
        out
    };
    let waiting = until(65_000);
    assert!(
        !gives_back(&waiting, &run_id),
        "still waiting up to starting_deadline after its claim: {waiting:?}"
    );
    let given_up = until(65_100);
    assert!(
        gives_back(&given_up, &run_id),
        "given up once starting_deadline after its claim passed: {given_up:?}"
    );
}
