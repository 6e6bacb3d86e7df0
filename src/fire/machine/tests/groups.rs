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
    m.handle(Input::PausesRead(Pauses::new()), t(0));
    for action in m.handle(Input::LockChanged(owner(TOKEN)), t(0)) {
        if let Action::ListRecords(job) = action {
            let listed = Input::RecordsListed {
                job,
                result: Ok(JobRecords::default()),
            };
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

#[test]
fn a_groups_machine_fires_only_its_own_jobs() {
    let tables = format!(
        "{}{}{}",
        job("in-a", "* * * * * *", "group = \"a\""),
        job("in-b", "* * * * * *", "group = \"b\""),
        job("plain", "* * * * * *", "")
    );
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
        moved.contains(&Action::ListRecords(JobName::new("mover"))),
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
    assert!(!added.contains(&Action::ListRecords(JobName::new("new"))));
}
