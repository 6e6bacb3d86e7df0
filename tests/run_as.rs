//! A job's `user` (issue 35 §3), with a real user of this host (`nobody`): the process runs as
//! that user, with its groups and `HOME`, `USER` and `LOGNAME`, whether it starts at once or
//! through a prepared launcher; a daemon that cannot switch users says so at start and exits 2.
//! As root (CI) the switch itself is tested; the refusal is tested by running the daemon as
//! `nobody` through `setpriv`.

use std::collections::BTreeMap;
use std::ffi::CString;
use std::path::PathBuf;
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use nix::unistd::{Gid, User, getgrouplist};
use tokio_util::sync::CancellationToken;
use zkcron::run::{JobSpec, Launcher, Program, RunAs, RunContext, RunOutcome, RunReport};
use zkcron::runner::{prepare, run, run_prepared};
use zkcron::{FencingToken, JobName, NodeId};

/// Every Debian host has it, with no home: a user no test can confuse with root.
fn nobody() -> RunAs {
    let user = User::from_name("nobody")
        .ok()
        .flatten()
        .expect("the user nobody exists on this host");
    let name = CString::new("nobody").expect("no NUL");
    let groups = getgrouplist(&name, user.gid).expect("nobody's groups");
    RunAs {
        name: user.name,
        uid: user.uid.as_raw(),
        gid: user.gid.as_raw(),
        groups: groups.into_iter().map(Gid::as_raw).collect(),
        home: user.dir,
    }
}

fn who_am_i(user: RunAs, launcher: Launcher) -> JobSpec {
    JobSpec {
        name: JobName::new("whoami"),
        program: Program::Shell(
            "echo \"uid=$(id -u) gid=$(id -g) groups=$(id -G) home=$HOME user=$USER logname=$LOGNAME\""
                .to_owned(),
        ),
        working_dir: None,
        env: BTreeMap::new(),
        timeout: None,
        kill_grace: Duration::from_secs(1),
        launcher,
        user: Some(Arc::new(user)),
    }
}

fn ctx() -> RunContext {
    RunContext {
        run_id: "whoami-1".to_owned(),
        scheduled_at: DateTime::<Utc>::from_timestamp_millis(1_795_314_600_000).expect("in range"),
        node: NodeId::new("10.0.0.5"),
        fencing_token: FencingToken(1),
        attempt: 1,
        resumed: false,
        backfill: false,
        submission: None,
        parent_runs: Vec::new(),
        trace: None,
    }
}

fn said(report: &RunReport) -> BTreeMap<String, String> {
    assert_eq!(
        report.outcome,
        RunOutcome::Exited { code: 0 },
        "{}",
        report.output
    );
    report
        .output
        .split_whitespace()
        .filter_map(|pair| pair.split_once('='))
        .map(|(key, value)| (key.to_owned(), value.to_owned()))
        .collect()
}

#[tokio::test]
async fn a_job_runs_as_its_user_with_its_groups_and_login_variables_either_way() {
    let user = nobody();
    if let Some(why) = zkcron::runner::cannot_run_as(&user) {
        // Not root here: what a daemon would say at start (the next test shows it does).
        assert!(why.contains("CAP_SETUID"), "{why}");
        eprintln!("not root: the switch itself is tested where tests run as root (CI)");
        return;
    }
    let groups: Vec<String> = user.groups.iter().map(u32::to_string).collect();
    let expected = BTreeMap::from([
        ("uid".to_owned(), user.uid.to_string()),
        ("gid".to_owned(), user.gid.to_string()),
        ("groups".to_owned(), groups.join(" ")),
        ("home".to_owned(), user.home.display().to_string()),
        ("user".to_owned(), "nobody".to_owned()),
        ("logname".to_owned(), "nobody".to_owned()),
    ]);

    let at_once = who_am_i(user.clone(), Launcher::Direct);
    let report = run(&at_once, &ctx(), CancellationToken::new()).await;
    assert_eq!(said(&report), expected, "started at once");

    let launcher = Launcher::Binary(PathBuf::from(env!("CARGO_BIN_EXE_zkcron")));
    let prepared_job = who_am_i(user, launcher);
    let prepared = prepare(&prepared_job, &ctx(), None);
    assert!(prepared.pid().is_some(), "a launcher waits");
    let report = run_prepared(
        &prepared_job,
        &ctx(),
        CancellationToken::new(),
        prepared,
        None,
    )
    .await;
    assert_eq!(said(&report), expected, "started by a prepared launcher");
}

#[test]
fn a_daemon_that_cannot_switch_users_says_so_at_start_and_exits_2() {
    let dir = tempfile::tempdir().expect("temp dir");
    // Readable by nobody, who runs the daemon here.
    let mode = std::os::unix::fs::PermissionsExt::from_mode(0o755);
    std::fs::set_permissions(dir.path(), mode).expect("chmod");
    let config = dir.path().join("zkcron.toml");
    std::fs::write(
        &config,
        "[zookeeper]\nconnect = \"127.0.0.1:1\"\n[lock]\nname = \"users\"\n\
         [[job]]\nname = \"backup\"\nschedule = \"@daily\"\ncommand = [\"/bin/true\"]\nuser = \"root\"\n",
    )
    .expect("write the schedule");
    let as_nobody = nix::unistd::geteuid().is_root();
    let mut command = if as_nobody {
        let mut command = Command::new("setpriv");
        command
            .args(["--reuid=nobody", "--regid=nogroup", "--clear-groups", "--"])
            .arg(env!("CARGO_BIN_EXE_zkcron"));
        command
    } else {
        Command::new(env!("CARGO_BIN_EXE_zkcron"))
    };
    let output = command
        .args(["run", "--config"])
        .arg(&config)
        .output()
        .expect("run zkcron");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("job \"backup\" runs as user \"root\"")
            && stderr.contains("without CAP_SETUID and CAP_SETGID"),
        "{stderr}"
    );
}

#[test]
fn a_job_never_gets_the_daemons_ambient_capabilities() {
    if !nix::unistd::geteuid().is_root() {
        eprintln!("not root: no capabilities to hand on");
        return;
    }
    // A launcher holding CAP_SETUID and CAP_SETGID as ambient capabilities, as a daemon run as
    // another user with AmbientCapabilities= does; its job must hold none.
    let output = Command::new("setpriv")
        .args([
            "--inh-caps=+setuid,+setgid",
            "--ambient-caps=+setuid,+setgid",
            "--",
        ])
        .arg(env!("CARGO_BIN_EXE_zkcron"))
        .arg(zkcron::runner::LAUNCHER_ARG)
        .arg(std::process::id().to_string())
        .args(["now", "0", "-", "/bin/sh", "-c"])
        .arg("grep CapAmb /proc/self/status")
        .output()
        .expect("run the launcher under setpriv");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{output:?}");
    let ambient: Vec<&str> = stdout
        .lines()
        .filter_map(|line| line.strip_prefix("CapAmb:"))
        .map(str::trim)
        .collect();
    assert_eq!(
        ambient.first(),
        Some(&"0000000000000000"),
        "the job's: {stdout}"
    );
}
