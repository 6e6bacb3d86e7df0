//! A node meets documents a newer zkcron wrote (issue 34, docs/UPGRADING.md "Stored formats"):
//! a rolled-back fleet's older owner must leave them as they are for the version that wrote
//! them — not mark a newer run interrupted, not resume or drop its promised retry, not claim or
//! delete a newer submission, not take or remove a newer backfill request — and say so in its log.
//! End to end: a real `zkcron run` on a real ensemble. Holds `fault_lock`.
#![allow(
    clippy::await_holding_lock,
    reason = "each #[tokio::test] has its own runtime and thread"
)]

use crate::support;

use std::time::Duration;

use support::daemon::{DaemonNode, RECORD_FIRE, now_ms, read_fires, schedule_text};
use support::{fault_lock, shared_ensemble, wait_for};
use zkcron::delayed::SubmissionId;
use zkcron::ids::JobName;
use zkcron::layout::{ControlPaths, DelayedPaths, LedgerPaths, LockPaths};
use zookeeper_client::{Acls, Client, CreateMode};

const SESSION: Duration = Duration::from_secs(2);
const DELAY: Duration = Duration::from_secs(1);

#[tokio::test]
async fn an_owner_leaves_what_a_newer_version_wrote_as_it_is() {
    let _serial = fault_lock();
    let dir = tempfile::tempdir().expect("temp dir");
    let connect = shared_ensemble()
        .isolated_connect_string("newer")
        .await
        .expect("a chroot of our own");
    let fires = dir.path().join("fires.log");
    let jobs = format!(
        "[[job]]\nname = \"every\"\nschedule = \"* * * * * *\"\nshell = '{RECORD_FIRE}{0}'\n\n\
         [[job]]\nname = \"flaky\"\nschedule = \"0 0 0 1 1 *\"\nshell = '{RECORD_FIRE}{0}'\nretries = 2\n\n\
         [[job]]\nname = \"deliver\"\nshell = '{RECORD_FIRE}{0}'\n",
        fires.display()
    );
    let schedule = schedule_text(&connect, "nf", SESSION, DELAY, &jobs);

    let client = Client::connect(&connect).await.expect("zookeeper session");
    let lock = LockPaths::new("/zkcron", "nf");
    let (ledger, delayed, control) = (
        LedgerPaths::new(&lock),
        DelayedPaths::new(&lock),
        ControlPaths::new(&lock),
    );
    let now = now_ms();
    let (every, flaky) = (JobName::new("every"), JobName::new("flaky"));
    // A run a newer owner left `running` under an old token: an older node would mark it
    // interrupted.
    let tick = now / 1000 * 1000 - 5_000;
    let running = format!(
        r#"{{"format":2,"job":"every","run_id":"every-{tick}","node_id":"newer","ip":"10.0.0.9","fencing_token":0,"scheduled_unix_ms":{tick},"claimed_unix_ms":{tick},"status":"running","attempt":1,"step":"load"}}"#
    );
    // A failed run promising a retry due now: an older node would run it.
    let failed_tick = tick - 60_000;
    let failed = format!(
        r#"{{"format":2,"job":"flaky","run_id":"flaky-{failed_tick}","node_id":"newer","ip":"10.0.0.9","fencing_token":0,"scheduled_unix_ms":{failed_tick},"claimed_unix_ms":{failed_tick},"status":"failed","attempt":1,"retry_at_unix_ms":{now}}}"#
    );
    // A submission due now in a header version this zkcron does not know.
    let id = SubmissionId::parse("from-the-future").expect("id");
    let submission = format!(
        "{{\"v\":2,\"job\":\"deliver\",\"due_unix_ms\":{now},\"submitted_unix_ms\":{now}}}\npayload"
    );
    let backfill = format!(
        r#"{{"format":2,"job":"every","ticks":[{tick}],"by":"newer","at_unix_ms":{now},"with_children":true}}"#
    );
    let written = [
        (ledger.record(&every, tick), running.into_bytes()),
        (ledger.record(&flaky, failed_tick), failed.into_bytes()),
        (ledger.retry_marker(&flaky, failed_tick), Vec::new()),
        (delayed.submission(&id), submission.into_bytes()),
        (delayed.pending(now, &id, None), Vec::new()),
        (
            control.backfill_request("req-0000000000"),
            backfill.into_bytes(),
        ),
    ];
    let options = CreateMode::Persistent.with_acls(Acls::anyone_all());
    for (path, data) in &written {
        let parent = &path[..path.rfind('/').expect("a parent")];
        client.mkdir(parent, &options).await.ok();
        client
            .create(path, data, &options)
            .await
            .expect("write a newer document");
    }

    let node = DaemonNode::start(dir.path(), "older", &schedule);
    // Three ticks of `every` fired: the owner has listed the jobs' records, their promised
    // retries, the due submissions and the backfill requests (each done at the lock's gain).
    wait_for("three fires of every", SESSION * 10, || {
        let fired = read_fires(&fires)
            .iter()
            .filter(|fire| fire.job == "every")
            .count();
        async move { (fired >= 3).then_some(()) }
    })
    .await;

    for (path, data) in &written {
        let (stored, stat) = client
            .get_data(path)
            .await
            .unwrap_or_else(|err| panic!("{path} is still there: {err}\n{}", node.log_tail()));
        assert_eq!(
            String::from_utf8_lossy(&stored),
            String::from_utf8_lossy(data),
            "{path} unchanged"
        );
        assert_eq!(stat.version, 0, "{path} never rewritten");
    }
    let others: Vec<String> = read_fires(&fires)
        .iter()
        .filter(|fire| fire.job != "every" || fire.scheduled_ms == tick)
        .map(|fire| format!("{} {}", fire.job, fire.scheduled_ms))
        .collect();
    assert!(
        others.is_empty(),
        "neither the newer retry, the newer submission nor the newer backfill ran: {others:?}"
    );
    let log = node.log();
    assert!(log.contains("written by a newer zkcron"), "said so:\n{log}");
}
