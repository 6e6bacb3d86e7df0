//! Schedule drift end to end (issue "Operate it"): a member with a different schedule is seen
//! by the owner, logged, exported and shown in status; fixing its file and SIGHUP clears it.

use crate::support;

use std::time::Duration;

use nix::sys::signal::Signal;

use support::daemon::{DaemonNode, schedule_text, zkcron_ok};
use support::http::{logged_port, request};
use support::{shared_ensemble, unique_chroot, wait_for};

const SESSION: Duration = Duration::from_secs(2);
const DELAY: Duration = Duration::from_secs(3);
const START: Duration = Duration::from_secs(10);

fn jobs(report_command: &str) -> String {
    format!(
        "[http]\nlisten = \"127.0.0.1:0\"\n\n\
         [[job]]\nname = \"nightly\"\nschedule = \"@daily\"\nshell = \"true\"\n\n\
         [[job]]\nname = \"report\"\nschedule = \"0 */5 * * * *\"\nshell = \"{report_command}\"\n"
    )
}

#[tokio::test]
async fn a_member_with_another_schedule_raises_the_alarm_and_a_reload_clears_it() {
    let dir = tempfile::tempdir().expect("temp dir");
    let connect = shared_ensemble().connect_string_with_chroot(&unique_chroot("drift"));
    let same = schedule_text(&connect, "drift", SESSION, DELAY, &jobs("report --daily"));
    let n1 = DaemonNode::start(dir.path(), "n1", &same);
    n1.wait_log("owns the lock", START).await;
    let port = logged_port(&n1.log()).expect("n1's listener");
    let other = schedule_text(&connect, "drift", SESSION, DELAY, &jobs("report --weekly"));
    let n2 = DaemonNode::start(dir.path(), "n2", &other);

    // Seen as soon as n2 registers (the owner watches the members), well within a session
    // timeout of it; the bound covers n2's start.
    n1.wait_log(
        "schedule drift: these members would fire a different schedule",
        START,
    )
    .await;
    assert!(
        n1.log().contains("n2: jobs report differ"),
        "{}",
        n1.log_tail()
    );
    let status = zkcron_ok(&["status"], &n1.config);
    assert!(
        status.contains("schedule drift: n2: jobs report differ"),
        "{status}"
    );
    let metrics = request(port, "GET", "/metrics", None, None).await;
    assert!(
        metrics.body.contains("zkcron_schedule_drift 1"),
        "{}",
        metrics.body
    );
    assert_eq!(
        n1.log().matches("schedule drift: these members").count(),
        1,
        "logged once per change"
    );

    n2.rewrite(&same);
    n2.signal(Signal::SIGHUP);
    n1.wait_log("schedule drift gone", Duration::from_secs(5))
        .await;
    let status = zkcron_ok(&["status"], &n1.config);
    assert!(!status.contains("schedule drift"), "{status}");
    let cleared = wait_for(
        "the gauge back to 0",
        Duration::from_secs(2),
        || async move {
            let body = request(port, "GET", "/metrics", None, None).await.body;
            body.contains("zkcron_schedule_drift 0").then_some(())
        },
    )
    .await;
    let () = cleared;
    let json: serde_json::Value =
        serde_json::from_str(&zkcron_ok(&["status", "--json"], &n1.config)).expect("JSON");
    assert_eq!(json["schedule_drift"], serde_json::json!([]));
}
