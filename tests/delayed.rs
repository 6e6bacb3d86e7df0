//! Delayed submissions against a real ZooKeeper, through the library API (`zkcron::delayed`):
//! idempotent submits, conflicts, cancel before start, listing in due order past garbage nodes,
//! a submission written with the raw client the way another language would, and an unreachable
//! ZooKeeper (issue "Delayed one-off jobs").

use crate::support;

use std::path::Path;
use std::time::Duration;

use chrono::{DateTime, Utc};
use zookeeper_client::{Acls, Client, CreateMode};

use support::daemon::schedule_text;
use support::shared_ensemble;
use support::zk_cluster::try_wait_for;
use zkcron::JobName;
use zkcron::audit::Actor;
use zkcron::command::{Command, CommandError, Door, Outcome};
use zkcron::config::{self, Config};
use zkcron::delayed::client::SubmissionState;
use zkcron::delayed::{Delayed, DelayedError, SubmissionId, SubmitRequest};
use zkcron::layout::{DelayedPaths, LockPaths};
use zkcron::ledger::submissions::{SubmissionError, Submitted};
use zkcron::run::RunStatus;

const JOBS: &str = "[[job]]\nname = \"close-order\"\nshell = \"cat\"\n\n\
                    [[job]]\nname = \"publish\"\nshell = \"cat\"\nstarting_deadline = \"1m\"\n";

fn config(connect: &str) -> Config {
    let text = schedule_text(
        connect,
        "g",
        Duration::from_secs(10),
        Duration::from_secs(10),
        JOBS,
    );
    config::parse(Path::new("test.toml"), &text, &|_| None).expect("valid schedule")
}

async fn connect(test: &str) -> (Delayed, String) {
    let connect = shared_ensemble()
        .isolated_connect_string(test)
        .await
        .expect("chroot");
    let delayed = Delayed::connect(&config(&connect))
        .await
        .expect("connected");
    (delayed, connect)
}

fn at(unix_ms: i64) -> DateTime<Utc> {
    DateTime::from_timestamp_millis(unix_ms).expect("in range")
}

fn request(job: &str, due: DateTime<Utc>, id: Option<&str>, payload: &[u8]) -> SubmitRequest {
    SubmitRequest {
        traceparent: None,
        job: JobName::new(job),
        due,
        id: id.map(|id| SubmissionId::parse(id).expect("valid id")),
        payload: payload.to_vec(),
    }
}

fn in_an_hour() -> DateTime<Utc> {
    Utc::now() + chrono::Duration::hours(1)
}

#[tokio::test]
async fn a_submit_under_the_same_id_is_a_no_op_and_a_different_request_is_refused() {
    let (delayed, _) = connect("delayed-idempotent").await;
    let due = in_an_hour();
    let first = delayed
        .submit(request(
            "close-order",
            due,
            Some("order-42"),
            b"{\"order\":42}",
        ))
        .await
        .expect("submitted");
    assert_eq!(
        (first.id.as_str(), first.outcome),
        ("order-42", Submitted::Created)
    );
    let again = delayed
        .submit(request(
            "close-order",
            due,
            Some("order-42"),
            b"{\"order\":42}",
        ))
        .await
        .expect("the same request again");
    assert_eq!(again.outcome, Submitted::AlreadyThere);

    let later = due + chrono::Duration::seconds(1);
    for different in [
        request("close-order", due, Some("order-42"), b"{\"order\":43}"),
        request("close-order", later, Some("order-42"), b"{\"order\":42}"),
        request("publish", due, Some("order-42"), b"{\"order\":42}"),
    ] {
        let err = delayed.submit(different).await.expect_err("a conflict");
        assert!(
            matches!(&err, DelayedError::Submission(SubmissionError::Conflict { id }) if id.as_str() == "order-42"),
            "{err:?}"
        );
        assert!(err.is_refusal());
    }
    // Nothing of the refused requests was written: one pending submission, as first asked.
    let pending = delayed.list(None, 10).await.expect("listed");
    assert_eq!(pending.len(), 1);
    assert_eq!(pending[0].submission.payload, b"{\"order\":42}");
    assert_eq!(pending[0].submission.due_unix_ms, due.timestamp_millis());
}

#[tokio::test]
async fn generated_ids_differ_and_each_submission_is_pending() {
    let (delayed, _) = connect("delayed-generated").await;
    let due = in_an_hour();
    let a = delayed
        .submit(request("close-order", due, None, b""))
        .await
        .expect("a");
    let b = delayed
        .submit(request("close-order", due, None, b""))
        .await
        .expect("b");
    assert_ne!(a.id, b.id);
    for id in [&a.id, &b.id] {
        let (submission, state) = delayed.show(id).await.expect("read").expect("exists");
        assert_eq!(state, SubmissionState::Pending);
        assert_eq!(submission.job.as_str(), "close-order");
    }
    assert_eq!(delayed.list(None, 10).await.expect("listed").len(), 2);
}

#[tokio::test]
async fn a_cancelled_submission_leaves_its_record_and_cannot_be_cancelled_twice() {
    let (delayed, connect_string) = connect("delayed-cancel").await;
    // Operators cancel through the door, which records it (tests/audit.rs).
    let door = Door::connect(&config(&connect_string))
        .await
        .expect("connected");
    let cancel = |id: &SubmissionId| {
        let command = Command::Cancel { id: id.clone() };
        async {
            match door.execute(command, &Actor::api()).await {
                Ok(Outcome::Cancelled(submission)) => Ok(submission),
                Ok(other) => panic!("a cancel's outcome, got {other:?}"),
                Err(CommandError::Delayed(err)) => Err(err),
                Err(err) => panic!("a delayed error, got {err:?}"),
            }
        }
    };
    let id = SubmissionId::parse("publish-article-7").expect("valid");
    delayed
        .submit(request("publish", in_an_hour(), Some(id.as_str()), b"7"))
        .await
        .expect("submitted");
    let cancelled = cancel(&id).await.expect("cancelled");
    assert_eq!(cancelled.payload, b"7");

    let (_, state) = delayed.show(&id).await.expect("read").expect("exists");
    let SubmissionState::Recorded(record) = state else {
        panic!("expected a record, got {state:?}");
    };
    assert_eq!(record.status, RunStatus::Cancelled);
    assert_eq!(record.submission_id.as_ref(), Some(&id));
    assert!(delayed.list(None, 10).await.expect("listed").is_empty());

    let err = cancel(&id).await.expect_err("not pending");
    assert!(
        matches!(&err, DelayedError::Submission(SubmissionError::NotPending { status, .. }) if status == "cancelled"),
        "{err:?}"
    );
    let unknown = SubmissionId::parse("never-submitted").expect("valid");
    let err = cancel(&unknown).await.expect_err("unknown");
    assert!(
        matches!(
            err,
            DelayedError::Submission(SubmissionError::NotFound { .. })
        ),
        "{err:?}"
    );
    // The same id again after a cancel: it is not pending, and it is not run.
    let again = delayed
        .submit(request(
            "publish",
            at(cancelled.due_unix_ms),
            Some(id.as_str()),
            b"7",
        ))
        .await
        .expect("answered");
    assert_eq!(again.outcome, Submitted::AlreadyThere);
    assert!(delayed.list(None, 10).await.expect("listed").is_empty());
}

#[tokio::test]
async fn the_list_is_in_due_order_across_seconds_and_days_and_skips_garbage() {
    let (delayed, connect) = connect("delayed-list").await;
    let base = in_an_hour().timestamp_millis() / 1000 * 1000;
    // Submitted out of order, over two seconds of one day and one a day later.
    let dues = [
        ("c", base + 86_400_000, "close-order"),
        ("b", base + 1_500, "publish"),
        ("a2", base + 7, "close-order"),
        ("a1", base + 3, "close-order"),
    ];
    for (id, due, job) in dues {
        delayed
            .submit(request(job, at(due), Some(id), b""))
            .await
            .expect("submitted");
    }
    // Garbage another client left: a foreign day, second, shard, id and unreadable data.
    let raw = Client::connect(&connect).await.expect("raw session");
    let paths = DelayedPaths::new(&LockPaths::new("/zkcron", "g"));
    let open = CreateMode::Persistent.with_acls(Acls::anyone_all());
    let day = base / 86_400_000;
    let second = base % 86_400_000 / 1000;
    for garbage in [
        format!("{}/notaday", paths.due),
        format!("{}/{day}/nosecond", paths.due),
        format!("{}/{day}/{second}/zz", paths.due),
        format!("{}/{day}/{second}/00/bad!id", paths.due),
    ] {
        raw.mkdir(&garbage, &open).await.expect("garbage");
    }
    let corrupt = SubmissionId::parse("corrupt").expect("valid");
    raw.mkdir(&paths.submission(&corrupt), &open)
        .await
        .expect("garbage submission");
    raw.mkdir(&paths.pending(base + 5, &corrupt, None), &open)
        .await
        .expect("its marker");

    let ids = |list: Vec<zkcron::delayed::client::Pending>| {
        list.into_iter()
            .map(|p| p.id.as_str().to_owned())
            .collect::<Vec<_>>()
    };
    assert_eq!(
        ids(delayed.list(None, 10).await.expect("listed")),
        ["a1", "a2", "b", "c"]
    );
    assert_eq!(
        ids(delayed
            .list(Some(&JobName::new("close-order")), 10)
            .await
            .expect("listed")),
        ["a1", "a2", "c"]
    );
    assert_eq!(
        ids(delayed.list(None, 2).await.expect("listed")),
        ["a1", "a2"]
    );
}

#[tokio::test]
async fn a_submission_written_with_the_raw_client_as_documented_is_read_back() {
    let (delayed, connect) = connect("delayed-raw").await;
    // What a Java or Python service does (docs/DELAYED.md): one multi with two creates, the
    // shard being zlib.crc32(id) % 256 in two lowercase hex digits.
    let raw = Client::connect(&connect).await.expect("raw session");
    let open = CreateMode::Persistent.with_acls(Acls::anyone_all());
    let due = in_an_hour().timestamp_millis();
    let (day, second) = (due / 86_400_000, due % 86_400_000 / 1000);
    let shard = format!("{:02x}", crc32fast::hash(b"order-42") % 256);
    let node = format!("/zkcron/g/delayed/ids/{shard}/order-42");
    let marker = format!("/zkcron/g/delayed/due/{day}/{second}/{shard}/order-42");
    for parent in [
        format!("/zkcron/g/delayed/ids/{shard}"),
        format!("/zkcron/g/delayed/due/{day}/{second}/{shard}"),
    ] {
        raw.mkdir(&parent, &open).await.expect("parent");
    }
    let data = format!(
        "{{\"v\":1,\"job\":\"close-order\",\"due_unix_ms\":{due},\"submitted_unix_ms\":{due}}}\npayload bytes"
    );
    let mut multi = raw.new_multi_writer();
    multi.add_create(&node, data.as_bytes(), &open).expect("op");
    multi.add_create(&marker, b"", &open).expect("op");
    multi.commit().await.expect("submitted by hand");

    let id = SubmissionId::parse("order-42").expect("valid");
    // Another session's write shows on this one once its server has applied it: ZooKeeper
    // orders each session's own view, and another's only within its timeliness bound (CI once
    // read from a follower a moment behind). 5 s: a follower lags by milliseconds.
    let read_back = try_wait_for(
        "the raw submission read back",
        Duration::from_secs(5),
        || {
            let (delayed, id) = (&delayed, id.clone());
            async move { delayed.show(&id).await.expect("read") }
        },
    );
    let (submission, state) = read_back.await.expect("found");
    assert_eq!(state, SubmissionState::Pending);
    assert_eq!(
        (submission.job.as_str(), submission.due_unix_ms),
        ("close-order", due)
    );
    assert_eq!(submission.payload, b"payload bytes");
}

#[tokio::test]
async fn an_unreachable_zookeeper_is_named_and_nothing_is_written() {
    let port = support::closed_port();
    let mut config = config(&format!("127.0.0.1:{port}"));
    config.zookeeper.connect_timeout = Duration::from_millis(500);
    let err = Delayed::connect(&config).await.expect_err("unreachable");
    let text = err.to_string();
    assert!(text.contains(&format!("127.0.0.1:{port}")), "{text}");
    assert!(matches!(err, DelayedError::Unreachable(_)), "{err:?}");
    assert!(!err.is_refusal());
}

#[tokio::test]
async fn many_submissions_go_in_batches_and_a_taken_id_in_a_batch_is_told_apart() {
    let (delayed, _) = connect("delayed-many").await;
    let due = in_an_hour();
    delayed
        .submit(request("close-order", due, Some("m-5"), b"five"))
        .await
        .expect("submitted alone first");
    let requests: Vec<SubmitRequest> = (0..300)
        .map(|n| {
            let at = due + chrono::Duration::milliseconds(n * 37);
            let payload = if n == 5 {
                b"five".to_vec()
            } else {
                vec![b'x'; 4096]
            };
            let mut r = request("close-order", at, Some(&format!("m-{n}")), &payload);
            if n == 5 {
                r.due = due;
            }
            if n == 7 {
                r.job = JobName::new("nope");
            }
            r
        })
        .collect();
    let results = delayed.submit_many(requests).await;
    assert_eq!(results.len(), 300);
    assert!(
        matches!(&results[7], Err(DelayedError::UnknownJob { .. })),
        "{:?}",
        results[7]
    );
    assert_eq!(
        results[5].as_ref().map(|r| r.outcome).ok(),
        Some(Submitted::AlreadyThere),
        "the resubmit in the batch is a no-op"
    );
    let created = results
        .iter()
        .filter(|r| matches!(r, Ok(receipt) if receipt.outcome == Submitted::Created))
        .count();
    assert_eq!(created, 298);
    let pending = delayed.list(None, 1000).await.expect("listed");
    assert_eq!(pending.len(), 299, "298 new and the one submitted alone");
    assert!(
        pending
            .windows(2)
            .all(|w| w[0].submission.due_unix_ms <= w[1].submission.due_unix_ms),
        "in due order"
    );
}

#[tokio::test]
async fn submitters_racing_to_open_the_same_new_buckets_all_get_their_submissions_in() {
    // Both sessions open the same 50 new seconds at once: whichever multi-op makes a parent
    // first, the other finds it there (in its read or in its multi) and still submits all.
    let (first, connect) = connect("delayed-race").await;
    let second = Delayed::connect(&config(&connect))
        .await
        .expect("second submitter");
    let due = in_an_hour();
    let batch = |prefix: &str| -> Vec<SubmitRequest> {
        (0..200)
            .map(|n| {
                let at = due + chrono::Duration::milliseconds((n % 50) * 1000);
                request("close-order", at, Some(&format!("{prefix}-{n}")), b"p")
            })
            .collect()
    };
    let (a, b) = tokio::join!(
        first.submit_many(batch("a")),
        second.submit_many(batch("b"))
    );
    for result in a.iter().chain(&b) {
        assert!(
            matches!(result, Ok(receipt) if receipt.outcome == Submitted::Created),
            "{result:?}"
        );
    }
    // And a third batch into the same seconds, from the first session (its parents known now).
    let c = first.submit_many(batch("c")).await;
    assert!(c.iter().all(Result::is_ok), "{c:?}");
    let pending = first.list(None, 1000).await.expect("listed");
    assert_eq!(pending.len(), 600);
}

#[tokio::test]
async fn a_large_batch_of_small_submissions_each_opening_new_buckets_fits_its_multi_ops() {
    // 3000 with long ids and no payload, each in a second of its own: every one brings two
    // parents into its multi-op. Counted by payload alone, they would make one request past
    // ZooKeeper's 1 MB packet limit, which the server answers by closing the connection.
    let (delayed, _) = connect("delayed-wide").await;
    let due = in_an_hour();
    let requests: Vec<SubmitRequest> = (0..3000)
        .map(|n| {
            let at = due + chrono::Duration::seconds(n);
            request("close-order", at, Some(&format!("{n:0>64}")), b"")
        })
        .collect();
    let results = delayed.submit_many(requests).await;
    let failed: Vec<_> = results.iter().filter(|r| r.is_err()).take(3).collect();
    assert!(failed.is_empty(), "{failed:?}");
    assert_eq!(delayed.list(None, 5000).await.expect("listed").len(), 3000);
}
