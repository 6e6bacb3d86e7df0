//! Secure ZooKeeper end to end (issue "Operate it"): a real server with a Netty TLS client port
//! and a throwaway CA, one that requires SASL DIGEST-MD5; real `zkcron run`s that fire through
//! them, and nodes with the wrong CA or password that say why they cannot connect, without
//! spinning.

use crate::support;

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

/// Issue 51 §7: a fleet that ran its ledger open closes it in place, as docs/UPGRADING.md says,
/// and fires on. With credentials the nodes a node makes are closed by default; `zkcron acl
/// apply` closes those made open before; a `read_acl` identity reads but cannot write; a client
/// without the credentials can neither take the lock nor forge a record; the action is audited.
#[tokio::test]
async fn an_open_ledger_is_closed_in_place_and_the_fleet_fires_on() {
    use zookeeper_client::{Client, CreateMode, Error};
    let dir = tempfile::tempdir().expect("temp dir");
    let credentials = dir.path().join("zk-auth");
    std::fs::write(&credentials, "zkcron:s3cret\n").expect("credentials file");
    let fires = dir.path().join("fires.log");
    let jobs = format!(
        "[[job]]\nname = \"tick\"\nschedule = \"* * * * * *\"\nshell = '{RECORD_FIRE}{}'\n",
        fires.display()
    );
    let connect = support::shared_ensemble().connect_string_with_chroot(&unique_chroot("acl"));
    let plain = schedule_text(&connect, "acl", SESSION, DELAY, &jobs);
    let schedule = |zookeeper: &str| {
        plain.replacen(
            "[lock]",
            &format!(
                "auth_file = \"{}\"\n{zookeeper}\n[lock]",
                credentials.display()
            ),
            1,
        )
    };
    // grafana:dashboard, hashed as ZooKeeper's digest provider does.
    let reader = "digest:grafana:tnSCaFhNhk7ePPfJhwkfvfbHmfM=";
    let fired_by = |node: &'static str, after_ms: i64| {
        let fires = fires.clone();
        move || {
            let fired = read_fires(&fires)
                .iter()
                .any(|f| f.node == node && f.scheduled_ms > after_ms);
            async move { fired.then_some(()) }
        }
    };

    // 0.1.0's way: credentials, and open nodes.
    let mut old = DaemonNode::start(dir.path(), "old", &schedule("acl = \"open\""));
    wait_for("a fire by the open node", START, fired_by("old", 0)).await;
    let warned = support::daemon::zkcron(&["check", "--json"], &old.config);
    assert!(
        String::from_utf8_lossy(&warned.stdout).contains("forge run records"),
        "check warns of open nodes: {warned:?}"
    );

    // The upgrade: the same credentials, the new default, a dashboard's identity to read.
    let closed = schedule(&format!("read_acl = [\"{reader}\"]"));
    let mut new = DaemonNode::start(dir.path(), "new", &closed);
    old.kill();
    let upgraded_ms = support::daemon::now_ms();
    wait_for(
        "a fire by the upgraded node",
        START,
        fired_by("new", upgraded_ms),
    )
    .await;
    let anyone = Client::connect(&connect)
        .await
        .expect("a session without credentials");
    // Reading an ACL takes the right to read: the fleet's credentials read every node's.
    let fleet = Client::connector()
        .with_auth("digest", b"zkcron:s3cret")
        .connect(&connect)
        .await
        .expect("a session with the fleet's credentials");
    let lock_dir = "/zkcron/acl";
    let (opened, _) = fleet.get_acl(lock_dir).await.expect("the directory's ACL");
    assert_eq!(opened[0].scheme(), "world", "made open before: {opened:?}");
    let (own, _) = fleet
        .get_acl(&format!("{lock_dir}/members/new"))
        .await
        .expect("the new node's member node");
    let schemes: Vec<(&str, String)> = own
        .iter()
        .map(|acl| (acl.scheme(), acl.permission().to_string()))
        .collect();
    assert_eq!(
        schemes,
        [("digest", "ALL".to_owned()), ("digest", "READ".to_owned())],
        "made closed, readable by the dashboard: {own:?}"
    );

    // The step: every node already there closed, audited.
    let applied = support::daemon::zkcron(&["acl", "apply", "--json"], &new.config);
    assert!(applied.status.success(), "{applied:?}");
    let applied: serde_json::Value = serde_json::from_slice(&applied.stdout).expect("one document");
    assert_eq!(applied["format"], 1, "{applied}");
    assert!(applied["changed"].as_u64() > Some(3), "{applied}");
    assert_eq!(applied["refused"], serde_json::json!([]), "{applied}");
    let again = support::daemon::zkcron(&["acl", "apply", "--json"], &new.config);
    let again: serde_json::Value = serde_json::from_slice(&again.stdout).expect("one document");
    assert_eq!(again["changed"], 0, "nothing left to close: {again}");
    let audited = zkcron_ok(&["audit", "--json"], &new.config);
    assert!(
        audited.contains("\"action\":\"acl\"") && audited.contains("\"result\":\"ok\""),
        "{audited}"
    );

    // Closed: a client without the credentials takes nothing and forges nothing.
    let epoch = format!("{lock_dir}/epoch");
    assert_eq!(anyone.delete(&epoch, None).await, Err(Error::NoAuth));
    assert_eq!(
        anyone.set_data(&epoch, b"forged", None).await.map(|_| ()),
        Err(Error::NoAuth)
    );
    let squat = CreateMode::Ephemeral.with_acls(zookeeper_client::Acls::anyone_all());
    let forged = anyone
        .create(&format!("{lock_dir}/runs/forged"), b"{}", &squat)
        .await
        .map(|_| ());
    assert!(
        matches!(forged, Err(Error::NoAuth | Error::NoNode)),
        "{forged:?}"
    );
    // The dashboard reads, and only reads.
    let dashboard = Client::connector()
        .with_auth("digest", b"grafana:dashboard")
        .connect(&connect)
        .await
        .expect("the dashboard's session");
    assert!(
        dashboard.get_data(&epoch).await.is_ok(),
        "the dashboard reads"
    );
    assert_eq!(
        dashboard
            .set_data(&epoch, b"forged", None)
            .await
            .map(|_| ()),
        Err(Error::NoAuth)
    );

    // The fleet fires on, and fails over, on closed nodes.
    let _peer = DaemonNode::start(dir.path(), "peer", &closed);
    new.kill();
    let failed_over_ms = support::daemon::now_ms();
    wait_for(
        "a fire after the failover",
        START,
        fired_by("peer", failed_over_ms),
    )
    .await;
}
