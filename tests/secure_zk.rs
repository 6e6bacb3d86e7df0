//! Secure ZooKeeper end to end (issue "Operate it"): a real server with a Netty TLS client port
//! and a throwaway CA, one that requires SASL DIGEST-MD5; real `zkcron run`s that fire through
//! them, and nodes with the wrong CA or password that say why they cannot connect, without
//! spinning.

mod support;

use std::path::Path;
use std::time::Duration;

use support::ZkEnsemble;
use support::daemon::{DaemonNode, RECORD_FIRE, read_fires, schedule_text, zkcron_ok};
use support::tls::TestPki;
use support::{try_wait_for, unique_chroot, wait_for};

const SESSION: Duration = Duration::from_secs(2);
const DELAY: Duration = Duration::from_secs(3);
const START: Duration = Duration::from_secs(15);

fn tls_schedule(connect: &str, ca: &Path, pki: &TestPki, jobs: &str) -> String {
    let text = schedule_text(connect, "tls", SESSION, DELAY, jobs);
    text.replacen(
        "[lock]",
        &format!(
            "tls = {{ ca = \"{}\", cert = \"{}\", key = \"{}\" }}\n\n[lock]",
            ca.display(),
            pki.client_cert.display(),
            pki.client_key.display()
        ),
        1,
    )
}

/// CPU time (user + system) of process `pid` so far, in clock ticks.
fn cpu_ticks(pid: nix::unistd::Pid) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("the node's stat");
    let after_name = stat.rsplit_once(')').map_or("", |(_, rest)| rest);
    let fields: Vec<&str> = after_name.split_whitespace().collect();
    // utime and stime are the 14th and 15th fields; the state (3rd) is the first after the name.
    fields[11].parse::<u64>().expect("utime") + fields[12].parse::<u64>().expect("stime")
}

#[tokio::test]
async fn a_node_fires_through_a_tls_only_client_port_and_the_wrong_ca_is_named_without_spinning() {
    let pki = TestPki::new();
    let ensemble = ZkEnsemble::start_tls(1, &pki.server, &pki.ca).expect("a TLS ZooKeeper");
    let dir = tempfile::tempdir().expect("temp dir");
    let fires = dir.path().join("fires.log");
    let jobs = format!(
        "[[job]]\nname = \"tick\"\nschedule = \"* * * * * *\"\nshell = '{RECORD_FIRE}{}'\n",
        fires.display()
    );
    let connect = format!(
        "{}{}",
        ensemble.secure_connect_string(),
        unique_chroot("tls")
    );
    let good = DaemonNode::start(
        dir.path(),
        "good",
        &tls_schedule(&connect, &pki.ca, &pki, &jobs),
    );
    try_wait_for("a fire over TLS", START, || {
        let fired = read_fires(&fires).iter().any(|f| f.node == "good");
        async move { fired.then_some(()) }
    })
    .await
    .unwrap_or_else(|not_reached| panic!("{not_reached}\n{}", good.log_tail()));
    let status = zkcron_ok(&["status"], &good.config);
    assert!(status.contains("owner:         good"), "{status}");

    // The wrong CA: a clear error naming the server and the cause, logged with backoff.
    let wrong = DaemonNode::start(
        dir.path(),
        "wrong",
        &tls_schedule(&connect, &pki.other_ca, &pki, &jobs),
    );
    wrong
        .wait_log("TLS handshake with zookeeper at 127.0.0.1:", START)
        .await;
    assert!(
        wrong
            .log()
            .contains("the server's certificate is not accepted (UnknownIssuer)"),
        "{}",
        wrong.log_tail()
    );
    // No hot loop: over the next 5 s the failing node uses a small part of one core. A loop
    // without backoff would use all of it; each attempt costs a handshake or two.
    let window = Duration::from_secs(5);
    let attempts_before = wrong.log().matches("zookeeper connect failed").count();
    let before = cpu_ticks(wrong.pid());
    tokio::time::sleep(window).await;
    let used = cpu_ticks(wrong.pid()) - before;
    let ticks_per_second = 100; // USER_HZ on Linux
    assert!(
        used * 100 < 10 * ticks_per_second * window.as_secs(),
        "{used} ticks of CPU in {window:?}: under 10 % of a core"
    );
    let attempts = wrong.log().matches("zookeeper connect failed").count() - attempts_before;
    assert!(
        attempts <= 5,
        "{attempts} attempts in {window:?}: backed off"
    );
    assert!(
        !read_fires(&fires).iter().any(|f| f.node == "wrong"),
        "a node that cannot connect fires nothing"
    );
    drop((good, wrong, ensemble));
}

#[tokio::test]
async fn a_node_authenticates_with_sasl_digest_md5_and_one_without_it_or_with_a_wrong_password_is_refused()
 {
    let ensemble = ZkEnsemble::start_sasl(1, "zkcron", "s3cret").expect("a SASL ZooKeeper");
    let dir = tempfile::tempdir().expect("temp dir");
    let password = dir.path().join("zk-password");
    std::fs::write(&password, "s3cret\n").expect("password file");
    let fires = dir.path().join("fires.log");
    let jobs = format!(
        "[[job]]\nname = \"tick\"\nschedule = \"* * * * * *\"\nshell = '{RECORD_FIRE}{}'\n",
        fires.display()
    );
    let connect = format!("{}{}", ensemble.connect_string(), unique_chroot("sasl"));
    let plain = schedule_text(&connect, "sasl", SESSION, DELAY, &jobs);
    let with_sasl = plain.replacen(
        "[lock]",
        &format!(
            "sasl = {{ mechanism = \"digest-md5\", username = \"zkcron\", password_file = \"{}\" }}\n\n[lock]",
            password.display()
        ),
        1,
    );
    let good = DaemonNode::start(dir.path(), "good", &with_sasl);
    wait_for("a fire with SASL", START, || {
        let fired = read_fires(&fires).iter().any(|f| f.node == "good");
        async move { fired.then_some(()) }
    })
    .await;
    assert!(zkcron_ok(&["status"], &good.config).contains("owner:         good"));

    // Without SASL the server closes the session: a one-shot command fails with the address.
    let unauthenticated = dir.path().join("plain.toml");
    std::fs::write(&unauthenticated, &plain).expect("schedule file");
    let refused = std::process::Command::new(env!("CARGO_BIN_EXE_zkcron"))
        .args(["status", "--config"])
        .arg(&unauthenticated)
        .output()
        .expect("run zkcron");
    assert_eq!(refused.status.code(), Some(6), "{refused:?}");
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(
        stderr.contains("zookeeper at 127.0.0.1:") && stderr.contains("authentication failed"),
        "{stderr}"
    );
    // A wrong password: the same clear refusal, at once.
    std::fs::write(&password, "wrong\n").expect("password file");
    let wrong = dir.path().join("wrong.toml");
    std::fs::write(&wrong, &with_sasl).expect("schedule file");
    let refused = std::process::Command::new(env!("CARGO_BIN_EXE_zkcron"))
        .args(["status", "--config"])
        .arg(&wrong)
        .output()
        .expect("run zkcron");
    assert_eq!(refused.status.code(), Some(6), "{refused:?}");
    assert!(
        String::from_utf8_lossy(&refused.stderr).contains("authentication failed"),
        "{refused:?}"
    );
    drop((good, ensemble));
}
