use super::*;

/// 2030-01-01T00:00:00Z plus `ms`.
fn at(ms: i64) -> DateTime<Utc> {
    DateTime::from_timestamp_millis(1_893_456_000_000 + ms).expect("in range")
}

fn config(extra: &str) -> Arc<JobConfig> {
    let table = format!("[[job]]\nname = \"mail\"\nshell = \"true\"\n{extra}\n");
    Arc::clone(&crate::config::jobs_for_test(&table)[0])
}

fn submission(job: &str, due_ms: i64) -> Submission {
    Submission {
        job: JobName::new(job),
        due_unix_ms: at(due_ms).timestamp_millis(),
        submitted_unix_ms: at(0).timestamp_millis(),
        payload: b"{}".to_vec(),
        requested_by: None,
        anonymous: true,
        marker_names_job: true,
        retry_of: None,
        traceparent: None,
        after: None,
    }
}

fn id(name: &str) -> SubmissionId {
    SubmissionId::parse(name).expect("a valid id")
}

/// A queue that began firing at t(0) and holds `queued`: (id, job, due ms).
fn queue_of(queued: &[(&str, &str, i64)]) -> DelayedQueue {
    let mut queue = DelayedQueue::default();
    queue.watched(true);
    queue.start(at(0));
    let mail = config("");
    for (name, job, due) in queued {
        let considered = queue.consider(id(name), submission(job, *due), None, Some(&mail), at(0));
        assert_eq!(considered, Considered::Held);
    }
    queue
}

#[test]
fn due_submissions_are_taken_oldest_first_across_jobs_up_to_each_jobs_room() {
    let mut queue = queue_of(&[
        ("a", "mail", 300),
        ("b", "mail", 100),
        ("c", "sms", 200),
        ("d", "sms", 900),
    ]);
    // A scan out: the deadlines below are the submissions' alone.
    queue.tick(at(0), &Wanted::AllBut(Arc::default()), &mut Vec::new());
    let room = |runs| JobRoom {
        runs,
        lead: chrono::Duration::zero(),
    };
    let room = HashMap::from([
        (JobName::new("mail"), room(1)),
        (JobName::new("sms"), room(5)),
    ]);
    let taken: Vec<(String, String)> = queue
        .take_due(at(500), room)
        .into_iter()
        .map(|(job, item)| {
            (
                job.to_string(),
                item.submission.map(|s| s.id).unwrap_or_default(),
            )
        })
        .collect();
    let want = [("mail", "b"), ("sms", "c")].map(|(j, i)| (j.to_owned(), i.to_owned()));
    assert_eq!(taken, want, "a held back by mail's room, d not due");
    assert_eq!(queue.held(), 2);
    let first_due = queue.next_deadline(|_| Some(chrono::Duration::zero()));
    assert_eq!(first_due, Some(at(300)));
    let sms_only = queue.next_deadline(|job| (job.as_str() == "sms").then(chrono::Duration::zero));
    assert_eq!(
        sms_only.filter(|due| *due > at(300)),
        Some(at(900)),
        "a full job wakes no one"
    );
}

#[test]
fn a_submission_is_read_once_and_one_past_its_deadline_is_missed() {
    let mut queue = queue_of(&[("a", "mail", 100)]);
    let mail = config("starting_deadline = \"10s\"");
    let again = queue.consider(id("a"), submission("mail", 100), None, Some(&mail), at(0));
    assert_eq!(
        (again, queue.held()),
        (Considered::Held, 1),
        "known: not queued twice"
    );
    let late = queue.consider(
        id("b"),
        submission("mail", 100),
        None,
        Some(&mail),
        at(20_000),
    );
    assert_eq!(
        late,
        Considered::Missed {
            due: at(100),
            parents: Vec::new()
        }
    );
    let unknown_job = queue.consider(id("c"), submission("gone", 100), None, None, at(0));
    assert_eq!(
        (unknown_job, queue.held()),
        (Considered::Held, 1),
        "kept in ZooKeeper only"
    );
}

#[test]
fn a_submission_moved_while_its_claim_is_out_is_considered_anew_once_the_claim_finds_nothing() {
    let mut queue = queue_of(&[]);
    let mail = config("");
    let moved = queue.consider(
        id("a"),
        submission("mail", 5_000),
        Some(at(100).timestamp_millis()),
        Some(&mail),
        at(0),
    );
    assert_eq!((moved, queue.held()), (Considered::Held, 0));
    assert!(
        queue.claim_answered(&id("a"), false).is_none(),
        "the claim took it"
    );
    queue.consider(
        id("a"),
        submission("mail", 5_000),
        Some(at(100).timestamp_millis()),
        Some(&mail),
        at(0),
    );
    let anew = queue
        .claim_answered(&id("a"), true)
        .expect("its marker had moved");
    assert_eq!(anew.due_unix_ms, at(5_000).timestamp_millis());
}

#[test]
fn scans_follow_the_horizon_and_answers_of_an_older_scan_are_dropped() {
    let mut queue = queue_of(&[]);
    let wanted = Wanted::AllBut(Arc::default());
    let mut out = Vec::new();
    queue.tick(at(0), &wanted, &mut out);
    let Some(Action::Delayed(DelayedAction::Scan {
        generation,
        after: None,
        through,
        ahead_to,
        ..
    })) = out.first().cloned()
    else {
        panic!("a first scan from the oldest bucket: {out:?}");
    };
    assert_eq!(through, DueBucket::of(at(0).timestamp_millis() + 2_000));
    assert_eq!(ahead_to, DueBucket::of(at(0).timestamp_millis() + 60_000));
    let beyond = DueBucket::of(ahead_to.start_ms() + 5_000);
    assert_eq!(
        queue.created(beyond, id("y")),
        None,
        "read when a scan reaches it"
    );
    assert_eq!(
        queue.created(ahead_to, id("z")),
        Some(Action::Delayed(DelayedAction::ReadSubmission {
            id: id("z")
        })),
        "the scan out may have passed it"
    );
    assert!(queue.read(&id("z"), Ok(None)).is_none());
    assert_eq!(
        queue.next_deadline(|_| Some(chrono::Duration::zero())),
        DateTime::from_timestamp_millis(ahead_to.start_ms() + 61_000),
        "one scan out at a time; the bucket the watch saw is removed a minute after its end"
    );
    let answer = |found| {
        Ok(Scanned {
            found,
            through,
            present: vec![],
        })
    };
    assert!(
        queue
            .scanned(generation + 1, answer(vec![]), at(10))
            .is_none(),
        "an older view"
    );
    let found = queue.scanned(
        generation,
        answer(vec![(id("a"), submission("mail", 50))]),
        at(10),
    );
    assert_eq!(found.map(|found| found.len()), Some(1));
    assert_eq!(
        queue.created(through, id("x")),
        Some(Action::Delayed(DelayedAction::ReadSubmission {
            id: id("x")
        }))
    );
    assert_eq!(queue.created(through, id("x")), None, "being read");
    assert!(queue.read(&id("x"), Ok(None)).is_none());
    // The next bucket comes within the horizon as soon as this one ends minus it.
    let next = DateTime::from_timestamp_millis(through.start_ms() + 1_000 - 2_000);
    assert_eq!(
        queue.next_deadline(|_| Some(chrono::Duration::zero())),
        next
    );
    queue.stop();
    assert_eq!(
        queue.next_deadline(|_| Some(chrono::Duration::zero())),
        None,
        "not firing"
    );
}
