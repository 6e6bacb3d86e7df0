//! The commands an operator runs from a shell read only what they use (issue 35 §1): a schedule
//! whose daemon-only secrets, files and programs are missing on this host still serves `status`,
//! `history`, `pause`, `resume`, `submit` and `delayed`, against a real ZooKeeper; the daemon
//! and `zkcron check` still refuse it, naming each key; `zkcron check --lint` checks the file
//! alone. What reaching ZooKeeper takes stays required by every command.

use crate::support;

use std::path::Path;
use std::process::{Command, Output};
use std::time::Duration;

use support::daemon::{assert_exit, schedule_text};
use support::{shared_ensemble, unique_chroot};

/// Unset in every test process: the variables the schedule names.
const UNSET_TOKEN: &str = "ZKCRON_TEST_CLIENT_UNSET_TOKEN";
const UNSET_HEADER: &str = "ZKCRON_TEST_CLIENT_UNSET_HEADER";
const UNSET_AUTH: &str = "ZKCRON_TEST_CLIENT_UNSET_AUTH";

/// Every daemon-only value this host lacks: an HTTP tokens file, a webhook's token, a program
/// run on failure, a target's header from a variable and from a file, and its CA file.
fn daemon_only(missing: &Path) -> String {
    let missing = missing.display();
    format!(
        "[http]\nlisten = \"127.0.0.1:0\"\ntokens_file = \"{missing}/tokens\"\n\n\
         [defaults]\non_failure = [\"{missing}/notify\"]\n\
         on_failure_webhook = {{ url = \"https://hooks.example.com/zkcron\", token_env = \"{UNSET_TOKEN}\" }}\n\n\
         [[job]]\nname = \"report\"\nschedule = \"@daily\"\ncommand = [\"/bin/true\"]\n\n\
         [[job]]\nname = \"deliver\"\n\
         http = {{ url = \"https://orders.example.com/close\", \
         headers_from_env = {{ X-Api-Key = \"{UNSET_HEADER}\" }}, \
         headers_from_file = {{ Authorization = \"{missing}/bearer\" }}, \
         ca_file = \"{missing}/ca.pem\" }}\n"
    )
}

fn zkcron(args: &[&str], config: &Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_zkcron"))
        .args(args)
        .arg("--config")
        .arg(config)
        .env_remove(UNSET_TOKEN)
        .env_remove(UNSET_HEADER)
        .env_remove(UNSET_AUTH)
        .output()
        .expect("run zkcron")
}

#[track_caller]
#[test]
fn client_commands_need_none_of_the_daemons_secrets_files_or_programs() {
    let dir = tempfile::tempdir().expect("temp dir");
    let missing = dir.path().join("not-here");
    let connect = shared_ensemble().connect_string_with_chroot(&unique_chroot("client-commands"));
    let text = schedule_text(
        &connect,
        "client",
        Duration::from_secs(4),
        Duration::from_secs(3),
        &daemon_only(&missing),
    );
    let config = dir.path().join("zkcron.toml");
    std::fs::write(&config, text).expect("write the schedule");

    // No daemon runs: the report, and the exit code that says nobody owns the group.
    let said = assert_exit(&zkcron(&["status"], &config), 4);
    assert!(
        said.contains("report") && said.contains("deliver") && said.contains("no owner"),
        "{said}"
    );
    assert_exit(&zkcron(&["history", "report"], &config), 0);
    assert_exit(
        &zkcron(&["pause", "report", "--reason", "maintenance"], &config),
        0,
    );
    let said = assert_exit(&zkcron(&["status", "--json"], &config), 4);
    assert!(said.contains("maintenance"), "the pause was made: {said}");
    assert_exit(&zkcron(&["resume", "report"], &config), 0);
    let id = assert_exit(
        &zkcron(
            &["submit", "deliver", "--in", "1h", "--payload", "42"],
            &config,
        ),
        0,
    );
    let said = assert_exit(&zkcron(&["delayed", "list"], &config), 0);
    assert!(said.contains(id.trim()), "{id} pending in {said}");
    let shown = zkcron(&["delayed", "show", id.trim(), "--json"], &config);
    assert_exit(&shown, 0);
    let shown: serde_json::Value = serde_json::from_slice(&shown.stdout).expect("one JSON object");
    assert_eq!(
        (&shown["state"], &shown["job"], &shown["payload_bytes"]),
        (
            &serde_json::json!("pending"),
            &serde_json::json!("deliver"),
            &serde_json::json!(2)
        ),
        "{shown}"
    );
    assert_exit(&zkcron(&["delayed", "cancel", id.trim()], &config), 0);
    // Cancelled an hour ahead of its due time: recorded, but not a last run in the future.
    let report = zkcron(&["status", "--json"], &config);
    let report: serde_json::Value = serde_json::from_slice(&report.stdout).expect("one object");
    let deliver = report["jobs"]
        .as_array()
        .and_then(|jobs| jobs.iter().find(|job| job["name"] == "deliver"))
        .cloned()
        .expect("deliver in the report");
    assert_eq!(deliver["last"], serde_json::Value::Null, "{deliver}");
    let planned = zkcron(
        &[
            "backfill",
            "report",
            "--from",
            "2026-01-01T00:00:00Z",
            "--to",
            "2026-01-03T00:00:00Z",
            "--dry-run",
            "--json",
        ],
        &config,
    );
    assert_exit(&planned, 0);
    let planned: serde_json::Value =
        serde_json::from_slice(&planned.stdout).expect("one JSON object");
    assert_eq!(
        planned["ticks"].as_array().map(Vec::len),
        Some(3),
        "{planned}"
    );
    assert_eq!(planned["requested"], 0, "{planned}");
    // A job neither in the schedule nor in the ledger is refused, as pause refuses it.
    let said = assert_exit(&zkcron(&["history", "no-such-job"], &config), 2);
    assert!(said.contains("no job named \"no-such-job\""), "{said}");

    // The daemon and the full check still need every one of them, and name each key.
    for args in [&["check"][..], &["run"][..]] {
        let said = assert_exit(&zkcron(args, &config), 2);
        for key in [
            "http.tokens_file",
            "defaults.on_failure",
            "defaults.on_failure_webhook.token_env",
            "job \"deliver\": http.headers_from_env",
            "job \"deliver\": http.headers_from_file",
            "job \"deliver\": http.ca_file",
        ] {
            assert!(said.contains(key), "zkcron {args:?} names {key}: {said}");
        }
    }
    // The file alone: valid, nothing on this host looked up.
    let said = assert_exit(&zkcron(&["check", "--lint"], &config), 0);
    assert!(said.contains("valid, 2 job(s)"), "{said}");
    assert!(said.contains("nothing on this host"), "{said}");
}

#[test]
fn what_reaching_zookeeper_takes_is_required_by_every_command_but_the_lint() {
    let dir = tempfile::tempdir().expect("temp dir");
    let text = schedule_text(
        "127.0.0.1:1",
        "client",
        Duration::from_secs(4),
        Duration::from_secs(3),
        "[[job]]\nname = \"report\"\nschedule = \"@daily\"\ncommand = [\"/bin/true\"]\n",
    )
    .replacen(
        "[zookeeper]\n",
        &format!("[zookeeper]\nauth_env = \"{UNSET_AUTH}\"\n"),
        1,
    );
    let config = dir.path().join("zkcron.toml");
    std::fs::write(&config, text).expect("write the schedule");
    for args in [&["status"][..], &["pause", "report"][..], &["check"][..]] {
        let said = assert_exit(&zkcron(args, &config), 2);
        assert!(
            said.contains("zookeeper.auth_env") && said.contains(UNSET_AUTH),
            "zkcron {args:?}: {said}"
        );
    }
    assert_exit(&zkcron(&["check", "--lint"], &config), 0);
}
