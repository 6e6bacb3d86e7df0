//! The audit trail (issue 34): every operator action recorded once, with who, from where and
//! how it ended — through the CLI and through the HTTP API of a real `zkcron run` — read back by
//! `zkcron audit` and `GET /v1/audit`, and pruned a day at a time in batches. Real ZooKeeper.

use crate::support;

use std::path::Path;
use std::time::Duration;

use support::daemon::{DaemonNode, schedule_text, zkcron_ok, zkcron_refused};
use support::http::{logged_port, request};
use support::{shared_ensemble, unique_chroot};
use zkcron::audit::{self, AuditEntry};
use zkcron::layout::{AuditPaths, LockPaths};
use zkcron::ledger::Ledger;
use zkcron::ledger::audit as trail;
use zkcron::zk::{REQUEST_BOUND, Zk};
use zookeeper_client::{Acls, Client};

const SESSION: Duration = Duration::from_secs(2);
const TOKEN: &str = "audit-test-token-0123456789abcdef";
const DELAY: Duration = Duration::from_secs(1);

/// The trail as `zkcron audit --json` prints it.
fn trail(config: &Path, extra: &[&str]) -> Vec<AuditEntry> {
    let mut args = vec!["audit", "--json"];
    args.extend_from_slice(extra);
    support::daemon::document_items(&zkcron_ok(&args, config), "entries")
        .iter()
        .map(|entry| serde_json::from_str(entry).expect("an entry"))
        .collect()
}

#[tokio::test]
async fn every_operator_action_is_recorded_once_with_who_from_where_and_how_it_ended() {
    let dir = tempfile::tempdir().expect("temp dir");
    let chroot = unique_chroot("audit");
    let connect = shared_ensemble().connect_string_with_chroot(&chroot);
    let token = dir.path().join("http.token");
    std::fs::write(&token, format!("{TOKEN}\n")).expect("token file");
    let jobs = format!(
        "[http]\nlisten = \"127.0.0.1:0\"\ntoken_file = \"{}\"\n\n\
         [[job]]\nname = \"nightly\"\nschedule = \"0 0 3 * * *\"\ncommand = [\"/bin/true\"]\n\n\
         [[job]]\nname = \"deliver\"\ncommand = [\"/bin/true\"]\n",
        token.display()
    );
    let text = schedule_text(&connect, "audited", SESSION, DELAY, &jobs);
    let node = DaemonNode::start(dir.path(), "a1", &text);
    let config = node.config.clone();
    node.wait_log("http listener up", Duration::from_secs(10))
        .await;
    let port = logged_port(&node.log()).expect("the listener's port in the log");

    zkcron_ok(&["pause", "nightly", "--reason", "db migration"], &config);
    zkcron_ok(&["resume", "nightly"], &config);
    zkcron_refused(&["pause", "no-such-job"], &config);
    zkcron_ok(
        &["submit", "deliver", "--in", "1h", "--id", "later"],
        &config,
    );
    zkcron_ok(&["delayed", "cancel", "later"], &config);
    let paused = request(
        port,
        "POST",
        "/v1/jobs/nightly/pause",
        Some(TOKEN),
        Some(r#"{"reason":"from http"}"#),
    )
    .await;
    assert_eq!(paused.status, 200, "{paused:?}");
    let forged = request(
        port,
        "POST",
        "/v1/jobs/nightly/resume",
        Some("not-the-token"),
        None,
    )
    .await;
    assert_eq!(forged.status, 401, "{forged:?}");

    let entries = trail(&config, &[]);
    let seen: Vec<(&str, Option<&str>, &str)> = entries
        .iter()
        .map(|entry| {
            (
                entry.action.as_str(),
                entry.job.as_deref(),
                entry.from.as_str(),
            )
        })
        .collect();
    assert_eq!(
        seen,
        [
            ("pause", Some("nightly"), "cli"),
            ("resume", Some("nightly"), "cli"),
            ("pause", Some("no-such-job"), "cli"),
            ("cancel", Some("deliver"), "cli"),
            ("pause", Some("nightly"), "http"),
            ("refused", None, "http"),
        ],
        "each action once, in order, and no submit: {entries:#?}"
    );
    assert_eq!(entries[0].args["reason"], "db migration");
    assert_eq!(entries[0].result, "ok");
    assert!(
        entries[0].by.contains('@'),
        "a CLI names its user and host: {:?}",
        entries[0].by
    );
    assert!(
        entries[2].result.contains("no-such-job"),
        "a refusal says why: {:?}",
        entries[2].result
    );
    assert_eq!(entries[3].args["submission_id"], "later");
    assert!(
        entries[4].by.contains("127.0.0.1"),
        "HTTP names its peer: {:?}",
        entries[4].by
    );
    assert_eq!(
        entries[5].args["request"], "POST /v1/jobs/nightly/resume",
        "a write refused for its token says what was tried"
    );
    assert!(entries[5].result.contains("401"), "{:?}", entries[5].result);
    assert_eq!(
        trail(&config, &["--job", "deliver"]).len(),
        1,
        "--job filters"
    );

    let api = request(port, "GET", "/v1/audit?job=nightly", Some(TOKEN), None).await;
    assert_eq!(api.status, 200, "{api:?}");
    let api: Vec<AuditEntry> = serde_json::from_str(&api.body).expect("entries");
    assert_eq!(api.len(), 3, "{api:#?}");

    // A day's entries go together once the day is older than `keep`, in batched deletes.
    let client = Client::connect(&connect).await.expect("session");
    let zk = Ledger::new(Zk::new(client, &Acls::anyone_all(), REQUEST_BOUND));
    let paths = AuditPaths::new(&LockPaths::new("/zkcron", "audited"));
    let old_day = chrono::Utc::now().timestamp_millis() - 10 * 24 * 3600 * 1000;
    for n in 0..1_200 {
        let entry = AuditEntry {
            at_unix_ms: old_day + n,
            ..entries[0].clone()
        };
        trail::record(&zk, &paths, &entry).await;
    }
    let keep = Duration::from_secs(7 * 24 * 3600);
    let now = chrono::Utc::now().timestamp_millis();
    let pruned = trail::prune(&zk, &paths, keep, now).await.expect("pruned");
    assert_eq!(pruned, 1_200, "the old day, whole");
    let left = trail::read(&zk, &paths, 0).await.expect("read");
    assert_eq!(left.len(), entries.len(), "today's entries stay");
}

/// Issue 50: every `Command` goes through the one door and leaves exactly one entry where the
/// trail keeps it — done or refused — and none for a submit or a dry run. Real ZooKeeper, no
/// daemon: a release is refused (nobody owns the lock), a retry of a pending submission too.
#[tokio::test]
async fn every_command_through_the_door_leaves_one_entry_where_the_trail_keeps_it() {
    use zkcron::command::{Command, Door};
    use zkcron::control::client::BackfillOptions;
    use zkcron::delayed::{SubmissionId, SubmitRequest};

    let chroot = unique_chroot("audit-door");
    let connect = shared_ensemble().connect_string_with_chroot(&chroot);
    let jobs = "[[job]]\nname = \"nightly\"\nschedule = \"0 0 3 * * *\"\ncommand = [\"/bin/true\"]\n\n\
                [[job]]\nname = \"deliver\"\ncommand = [\"/bin/true\"]\n";
    let text = schedule_text(&connect, "door", SESSION, DELAY, jobs);
    let config = zkcron::config::parse(Path::new("door.toml"), &text, &|_| None).expect("valid");
    let door = Door::connect(&config).await.expect("a session");
    let client = Client::connect(&connect).await.expect("session");
    let zk = Ledger::new(Zk::new(client.clone(), &Acls::anyone_all(), REQUEST_BOUND));
    let paths = AuditPaths::new(&LockPaths::new("/zkcron", "door"));
    let actor = audit::Actor {
        by: "alice@ops-1".into(),
        from: "api".into(),
        who: audit::Who::default(),
    };
    let now = chrono::Utc::now();
    let id = |text: &str| SubmissionId::parse(text).expect("an id");
    let submit = |name: &str| {
        Command::Submit(SubmitRequest {
            traceparent: None,
            job: zkcron::JobName::new("deliver"),
            due: now + chrono::Duration::hours(1),
            id: Some(id(name)),
            payload: Vec::new(),
        })
    };
    let backfill = |dry_run| Command::Backfill {
        job: zkcron::JobName::new("nightly"),
        from: now - chrono::Duration::days(2),
        to: now - chrono::Duration::hours(1),
        options: BackfillOptions {
            dry_run,
            ..BackfillOptions::default()
        },
    };
    // (command, entries it leaves, whether it is refused)
    let rows = [
        (submit("a"), 0, false),
        (submit("b"), 0, false),
        (
            Command::Trigger {
                job: zkcron::JobName::new("nightly"),
            },
            1,
            false,
        ),
        (
            Command::Pause {
                job: zkcron::JobName::new("nightly"),
                reason: Some("db migration".into()),
            },
            1,
            false,
        ),
        (
            Command::Resume {
                job: zkcron::JobName::new("nightly"),
            },
            1,
            false,
        ),
        (backfill(true), 0, false),
        (backfill(false), 1, false),
        (
            Command::Release {
                group: None,
                owner: None,
            },
            1,
            true,
        ),
        (Command::Cancel { id: id("a") }, 1, false),
        (
            Command::Reschedule {
                id: id("b"),
                due: now + chrono::Duration::hours(2),
            },
            1,
            false,
        ),
        (
            Command::Retry {
                id: id("b"),
                due: now,
                new_id: None,
            },
            1,
            true,
        ),
        (
            Command::Pause {
                job: zkcron::JobName::new("no-such-job"),
                reason: None,
            },
            1,
            true,
        ),
    ];
    let mut before = trail::read(&zk, &paths, 0).await.expect("read").len();
    for (command, entries, refused) in rows {
        let action = command.action();
        let done = door.execute(command.clone(), &actor).await;
        assert_eq!(done.is_err(), refused, "{command:?}: {done:?}");
        // The door wrote on a session of its own, maybe through another of the three servers:
        // this session's server is brought up to the leader before it reads (CI once read the
        // trail one entry short).
        client.sync("/").await.expect("sync");
        let trail = trail::read(&zk, &paths, 0).await.expect("read");
        assert_eq!(
            trail.len() - before,
            entries,
            "{command:?} left {:?}",
            &trail[before..]
        );
        if let Some(entry) = trail.last().filter(|_| entries == 1) {
            assert_eq!(entry.action, action, "{command:?}");
            assert_eq!(
                (entry.by.as_str(), entry.from.as_str()),
                ("alice@ops-1", "api")
            );
            assert_eq!(
                entry.result == "ok",
                !refused,
                "{command:?}: {}",
                entry.result
            );
        }
        before = trail.len();
    }
}

/// Issue 51: the actor of a command line is the account the kernel names — the real uid's, and
/// the login behind it — never the environment's. `USER=anyone` records the account; the same
/// command as `nobody` records `nobody`; a session logged in as `nobody` that became root
/// (loginuid kept through sudo) records both, `$SUDO_USER` beside as a hint.
#[tokio::test]
async fn the_actor_is_the_account_the_kernel_names_never_the_environments() {
    use std::os::unix::fs::PermissionsExt;
    use std::process::Command;

    let dir = tempfile::tempdir().expect("temp dir");
    let chroot = unique_chroot("audit-actor");
    let connect = shared_ensemble().connect_string_with_chroot(&chroot);
    let jobs =
        "[[job]]\nname = \"nightly\"\nschedule = \"0 0 3 * * *\"\ncommand = [\"/bin/true\"]\n";
    let config = dir.path().join("zkcron.toml");
    std::fs::write(
        &config,
        schedule_text(&connect, "actors", SESSION, DELAY, jobs),
    )
    .expect("schedule");
    // Another account reads the file (and its directory) for the run as `nobody`.
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).expect("chmod");
    std::fs::set_permissions(&config, std::fs::Permissions::from_mode(0o644)).expect("chmod");
    let uid = nix::unistd::getuid();
    let me = nix::unistd::User::from_uid(uid)
        .ok()
        .flatten()
        .map_or_else(|| format!("uid {uid}"), |user| user.name);
    let host = gethostname::gethostname().to_string_lossy().into_owned();
    let binary = env!("CARGO_BIN_EXE_zkcron");
    let run = |command: &mut Command| {
        let output = command
            .arg("--config")
            .arg(&config)
            .env("USER", "anyone")
            .env("LOGNAME", "anyone")
            .output()
            .expect("run zkcron");
        assert!(
            output.status.success(),
            "{command:?}: {}",
            String::from_utf8_lossy(&output.stderr)
        );
    };

    // `$SUDO_USER` unset but where a run says it.
    run(Command::new(binary)
        .args(["pause", "nightly"])
        .env_remove("SUDO_USER"));
    let mut expected = vec![(format!("{me}@{host}"), None)];
    // As another account: only root can switch to it.
    let nobody_can_run = uid.is_root()
        && Command::new("setpriv")
            .args([
                "--reuid=65534",
                "--regid=65534",
                "--clear-groups",
                binary,
                "--version",
            ])
            .output()
            .is_ok_and(|output| output.status.success());
    if nobody_can_run {
        run(Command::new("setpriv")
            .args([
                "--reuid=65534",
                "--regid=65534",
                "--clear-groups",
                binary,
                "resume",
                "nightly",
            ])
            .env_remove("SUDO_USER"));
        expected.push((format!("nobody@{host}"), None));
    } else {
        eprintln!("not checked here: a command run as nobody (needs root and setpriv)");
        run(Command::new(binary)
            .args(["resume", "nightly"])
            .env_remove("SUDO_USER"));
        expected.push((format!("{me}@{host}"), None));
    }
    // A login behind the uid: the kernel keeps it through sudo; setting it needs
    // CAP_AUDIT_CONTROL, which root in a container may lack.
    let login_settable = Command::new("sh")
        .args(["-c", "echo 65534 > /proc/self/loginuid"])
        .output()
        .is_ok_and(|output| output.status.success());
    let login_checked = login_settable && me != "nobody";
    if login_checked {
        run(Command::new("sh")
            .args([
                "-c",
                "echo 65534 > /proc/self/loginuid && exec \"$0\" \"$@\"",
            ])
            .args([binary, "pause", "nightly", "--reason", "as root"])
            .env("SUDO_USER", "nobody"));
        expected.push((
            format!("nobody via sudo as {me}@{host}"),
            Some("nobody".to_owned()),
        ));
    } else {
        eprintln!("not checked here: a login behind the uid (cannot set /proc/self/loginuid)");
    }

    let entries = trail(&config, &[]);
    let seen: Vec<(String, Option<String>)> = entries
        .iter()
        .map(|entry| (entry.by.clone(), entry.who.login.clone()))
        .collect();
    assert_eq!(seen, expected, "{entries:#?}");
    for entry in &entries {
        assert!(!entry.by.contains("anyone"), "{entry:?}");
        assert_eq!(entry.who.host.as_deref(), Some(host.as_str()), "{entry:?}");
        assert_eq!(entry.from, "cli");
    }
    assert_eq!(entries[0].who.account.as_deref(), Some(me.as_str()));
    assert_eq!(entries[0].who.sudo_user_unverified, None);
    if let Some(behind) = entries.iter().find(|entry| entry.who.login.is_some()) {
        assert_eq!(
            behind.who.sudo_user_unverified.as_deref(),
            Some("nobody"),
            "{behind:?}"
        );
    }
    // The pause in force names the same actor: its `by` is the actor's.
    if login_checked {
        let status = support::daemon::zkcron_status(&["--json"], &config);
        assert!(
            status.contains(&format!("nobody via sudo as {me}@{host}")),
            "{status}"
        );
    }
}
