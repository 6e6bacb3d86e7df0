//! Lock groups (issue 19): a group's machine fires its own jobs of the whole schedule, leaves
//! the others' submissions to their owners, and catches up a job that moves in.

use super::*;

const GROUPS: &str = "[[group]]\nname = \"a\"\n[[group]]\nname = \"b\"\n";

/// A machine of group `group` that owns its lock with nothing to catch up.
fn owning_group(group: Option<&str>, tables: &str) -> FireMachine {
    let jobs = jobs(&format!("{GROUPS}{tables}"));
    let mut m = FireMachine::for_group(
        me(),
        group.map(str::to_owned),
        Duration::from_millis(250),
        &jobs,
        t(0),
    );
    m.handle(
        Input::Control(ControlInput::PausesRead(Pauses::new())),
        t(0),
    );
    for action in m.handle(Input::Lock(LockInput::Changed(owner(TOKEN))), t(0)) {
        if let Action::CatchUp(CatchUpAction::ListRecords(job)) = action {
            let listed = Input::CatchUp(CatchUpInput::Listed {
                job,
                result: Ok(JobRecords::default()),
            });
            m.handle(listed, t(0));
        }
    }
    m
}

fn claimed_jobs(m: &mut FireMachine, until_ms: i64) -> Vec<String> {
    let mut jobs = Vec::new();
    while let Some(at) = m.next_deadline().filter(|at| ms(*at) <= until_ms) {
        for claim in claims(&m.handle(Input::Tick, at)) {
            jobs.push(claim.record.job.to_string());
        }
    }
    jobs.sort();
    jobs.dedup();
    jobs
}

/// `in-a` in group a, `in-b` in group b, `plain` in the default group.
fn one_job_in_each_group() -> String {
    format!(
        "{}{}{}",
        job("in-a", "* * * * * *", "group = \"a\""),
        job("in-b", "* * * * * *", "group = \"b\""),
        job("plain", "* * * * * *", "")
    )
}

#[test]
fn a_groups_machine_fires_only_its_own_jobs() {
    let tables = one_job_in_each_group();
    assert_eq!(
        claimed_jobs(&mut owning_group(Some("a"), &tables), 3_000),
        ["in-a"]
    );
    assert_eq!(
        claimed_jobs(&mut owning_group(None, &tables), 3_000),
        ["plain"],
        "the default group fires the jobs without a group"
    );
}

#[test]
fn a_job_that_moves_in_is_caught_up_and_one_that_moves_out_stops() {
    let before = format!(
        "{}{}",
        job("mover", "* * * * * *", "group = \"b\""),
        job("stay", "* * * * * *", "group = \"a\"")
    );
    let after = before.replace("group = \"b\"", "group = \"a\"");
    let mut a = owning_group(Some("a"), &before);
    let moved = a.handle(Input::Reloaded(jobs(&format!("{GROUPS}{after}"))), t(100));
    assert!(
        moved.contains(&Action::CatchUp(CatchUpAction::ListRecords(JobName::new(
            "mover"
        )))),
        "caught up: its old group may not have fired it while the nodes disagreed: {moved:?}"
    );
    let mut b = owning_group(Some("b"), &before);
    b.handle(Input::Reloaded(jobs(&format!("{GROUPS}{after}"))), t(100));
    assert_eq!(claimed_jobs(&mut b, 3_000), Vec::<String>::new());
    // A brand-new job is not caught up (it has nothing to catch up on).
    let mut fresh = owning_group(Some("a"), &before);
    let added = fresh.handle(
        Input::Reloaded(jobs(&format!(
            "{GROUPS}{before}{}",
            job("new", "* * * * * *", "group = \"a\"")
        ))),
        t(100),
    );
    assert!(
        !added.contains(&Action::CatchUp(CatchUpAction::ListRecords(JobName::new(
            "new"
        ))))
    );
}

#[test]
fn a_groups_machine_reads_the_markers_of_its_own_jobs_and_those_that_name_none() {
    let tables = one_job_in_each_group();
    let bucket = DueBucket::of(500);
    let created = |id: &str, job: Option<&str>| {
        Input::Delayed(DelayedInput::Created {
            bucket,
            id: SubmissionId::parse(id).expect("an id"),
            job: job.map(JobName::new),
        })
    };
    let reads = |m: &mut FireMachine, id: &str, job: Option<&str>| {
        let wanted = SubmissionId::parse(id).expect("an id");
        m.handle(created(id, job), t(10)).contains(&Action::Delayed(
            DelayedAction::ReadSubmission { id: wanted },
        ))
    };
    let mut a = owning_group(Some("a"), &tables);
    assert!(reads(&mut a, "s1", Some("in-a")));
    assert!(
        !reads(&mut a, "s2", Some("in-b")),
        "another group's: not read"
    );
    assert!(
        !reads(&mut a, "s3", Some("plain")),
        "the default group's: not read"
    );
    assert!(!reads(&mut a, "s4", Some("undeclared")));
    assert!(
        reads(&mut a, "s5", None),
        "a marker without its job must be read to know"
    );
    let mut default = owning_group(None, &tables);
    assert!(reads(&mut default, "s6", Some("plain")));
    assert!(!reads(&mut default, "s7", Some("in-a")));
    assert!(
        reads(&mut default, "s8", Some("undeclared")),
        "the default group keeps what the schedule does not declare"
    );
}
