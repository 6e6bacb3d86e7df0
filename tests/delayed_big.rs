//! A due bucket larger than one `getChildren` reply could carry (issue "Delayed one-off jobs"):
//! 16 000 submissions due in the same second, every one fired once.
//! In a file of its own: its 16 000 job starts load both cores for a minute or more, which would
//! skew the timing of any test running beside it (test files run one after another).

use crate::support;

use std::time::Duration;

use support::daemon::{DaemonNode, now_ms, schedule_text};
use support::{shared_ensemble, try_wait_for, unique_chroot};

/// Not a failover test: a session that rides out the load. With 2 s, 16 000 runs in a debug
/// build on 2 cores (about 200 a second) starved the lock's liveness checks on the owner's one
/// session, and the lock was lost mid-way.
const SESSION: Duration = Duration::from_secs(10);
const DELAY: Duration = Duration::from_secs(3);
/// Process start, a JVM pause or a busy core on a loaded 2-core machine.
const SLACK: Duration = Duration::from_secs(3);

/// Submissions in the bucket; their ids are as long as allowed (64 characters), the most bytes
/// per name in a listing.
const BIG_BUCKET: usize = 16_000;
/// ZooKeeper's default `jute.maxbuffer`: a Java or Python client refuses a reply above it.
const JUTE_MAXBUFFER: usize = 1024 * 1024;

#[tokio::test]
async fn a_bucket_larger_than_one_listing_reply_could_carry_fires_every_submission_once() {
    // 16 000 submissions due in the same second, with 64-character ids: as one list of children
    // that would be a 1.1 MB reply, past the default jute.maxbuffer. The bucket's shards each
    // list a 256th of it; every submission fires, once.
    let dir = tempfile::tempdir().expect("temp dir");
    let log = dir.path().join("ran");
    let connect = shared_ensemble().connect_string_with_chroot(&unique_chroot("delayed-big"));
    // /bin/sh (dash) is the cheapest shell that can append the id.
    let job = format!(
        "[[job]]\nname = \"close\"\nstarting_deadline = \"10m\"\nhistory = 5\n\
         shell = 'echo $ZKCRON_SUBMISSION_ID >> {}'\n",
        log.display()
    );
    let text = schedule_text(&connect, "d", SESSION, DELAY, &job);
    let node = DaemonNode::start(dir.path(), "b1", &text);
    node.wait_log("owns the lock", SESSION + SLACK).await;

    let config = zkcron::config::load(&node.config).expect("config");
    let client = zkcron::delayed::Delayed::connect(&config)
        .await
        .expect("submitter session");
    // Due a whole second from now, all in it, submitted well before: 16 000 submissions take
    // ~5 s alone on 2 cores, and over 11 s beside a full pool of other tests.
    let due_ms = (now_ms() / 1000 + 20) * 1000;
    let due = chrono::DateTime::from_timestamp_millis(due_ms).expect("in range");
    let id = |i: usize| format!("{i:0>64}");
    for chunk in (0..BIG_BUCKET).collect::<Vec<_>>().chunks(500) {
        let requests = chunk
            .iter()
            .map(|&i| zkcron::delayed::SubmitRequest {
                traceparent: None,
                job: zkcron::JobName::new("close"),
                due,
                id: Some(zkcron::delayed::SubmissionId::parse(&id(i)).expect("id")),
                payload: Vec::new(),
            })
            .collect();
        for receipt in client.submit_many(requests).await {
            receipt.expect("submitted");
        }
    }
    assert!(now_ms() < due_ms, "all submitted before they are due");

    // The layout's promise, read back: no listing under the bucket would outgrow a reply.
    let raw = zookeeper_client::Client::connect(&connect)
        .await
        .expect("raw");
    let lock = zkcron::layout::LockPaths::new("/zkcron", "d");
    let bucket = zkcron::layout::LedgerPaths::new(&lock)
        .delayed
        .due_bucket(zkcron::delayed::DueBucket::of(due_ms));
    let shards = raw.list_children(&bucket).await.expect("bucket listed");
    assert_eq!(shards.len(), 256, "every shard holds some of them");
    let mut listed = 0;
    for shard in &shards {
        let names = raw
            .list_children(&format!("{bucket}/{shard}"))
            .await
            .expect("shard listed");
        let reply: usize = 4 + names.iter().map(|name| 4 + name.len()).sum::<usize>();
        assert!(
            reply * 10 < JUTE_MAXBUFFER,
            "shard {shard}: a {reply}-byte reply"
        );
        listed += names.len();
    }
    assert_eq!(listed, BIG_BUCKET);
    assert!(
        4 + listed * (4 + 64) > JUTE_MAXBUFFER,
        "as one listing it would not fit"
    );

    // Every one runs, once. 16 000 shell starts take this 2-core machine a minute or so beside
    // three ZooKeeper servers; the bound only ends the test.
    let ran = try_wait_for(
        "every submission of the big bucket ran",
        Duration::from_secs(240),
        || {
            let text = std::fs::read_to_string(&log).unwrap_or_default();
            let done = (text.lines().count() >= BIG_BUCKET).then_some(text);
            async move { done }
        },
    )
    .await
    .unwrap_or_else(|not_reached| {
        let ran = std::fs::read_to_string(&log).unwrap_or_default();
        let log = node.log();
        let notable: Vec<&str> = log
            .lines()
            .filter(|line| {
                line.contains("WARN") || line.contains("found=") && !line.contains("found=0")
            })
            .take(40)
            .collect();
        panic!(
            "{not_reached}: {} ran\n{}",
            ran.lines().count(),
            notable.join("\n")
        )
    });
    let mut seen = std::collections::HashSet::new();
    for line in ran.lines() {
        assert!(seen.insert(line.to_owned()), "{line} ran twice");
    }
    assert_eq!(seen.len(), BIG_BUCKET);
    assert!((0..BIG_BUCKET).all(|i| seen.contains(&id(i))));
    assert!(
        !node.log().contains("unreadable"),
        "no submission skipped as unreadable"
    );
}
