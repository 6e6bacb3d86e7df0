//! `zkcron submit` and `zkcron delayed list|show|cancel` as an operator runs them, against a real
//! ZooKeeper: what they print, and their exit codes (0 done, 1 failure, 2 refused).

use crate::support;

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use support::daemon::schedule_text;
use support::shared_ensemble;

const JOBS: &str = "[[job]]\nname = \"close-order\"\nshell = \"cat\"\nstarting_deadline = \"1m\"\n\n\
                    [[job]]\nname = \"nightly\"\nschedule = \"@daily\"\nshell = \"true\"\n";

struct Cli {
    _dir: tempfile::TempDir,
    config: PathBuf,
}

impl Cli {
    async fn new(test: &str) -> Self {
        let connect = shared_ensemble()
            .isolated_connect_string(test)
            .await
            .expect("chroot");
        Self::at(&connect)
    }

    fn at(connect: &str) -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        let config = dir.path().join("zkcron.toml");
        let text = schedule_text(
            connect,
            "g",
            Duration::from_secs(10),
            Duration::from_secs(10),
            JOBS,
        );
        std::fs::write(&config, text).expect("schedule file");
        Self { _dir: dir, config }
    }

    fn run(&self, args: &[&str]) -> Output {
        self.run_with_stdin(args, &[])
    }

    fn run_with_stdin(&self, args: &[&str], stdin: &[u8]) -> Output {
        let config = self.config.to_str().expect("utf-8 temp path");
        let (command, rest) = match args {
            ["delayed", sub, rest @ ..] => (vec!["delayed", sub, "--config", config], rest),
            [first, rest @ ..] => (vec![*first, "--config", config], rest),
            [] => (vec![], args),
        };
        let mut child = Command::new(env!("CARGO_BIN_EXE_zkcron"))
            .args(command.iter().chain(rest))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("run zkcron");
        if let Some(mut input) = child.stdin.take() {
            std::io::Write::write_all(&mut input, stdin).expect("stdin");
        }
        child.wait_with_output().expect("zkcron output")
    }

    fn dir(&self) -> &Path {
        self._dir.path()
    }
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[track_caller]
fn assert_exit(output: &Output, code: i32, stderr_has: &str) {
    let stderr = text(&output.stderr);
    assert_eq!(
        output.status.code(),
        Some(code),
        "stdout: {}\nstderr: {stderr}",
        text(&output.stdout)
    );
    assert!(stderr.contains(stderr_has), "stderr: {stderr}");
}

#[tokio::test]
async fn submit_prints_the_id_and_a_resubmit_says_nothing_changed() {
    let cli = Cli::new("cli-submit").await;
    let first = cli.run(&[
        "submit",
        "close-order",
        "--in",
        "1h",
        "--id",
        "order-42",
        "--payload",
        "{\"order\":42}",
    ]);
    assert_exit(&first, 0, "");
    assert_eq!(text(&first.stdout), "order-42\n");

    let again = cli.run(&[
        "submit",
        "close-order",
        "--in",
        "1h",
        "--id",
        "order-42",
        "--payload",
        "{\"order\":42}",
    ]);
    // `--in 1h` again is a different due time by the time it runs: a conflict, exit 2.
    assert_exit(
        &again,
        2,
        "already exists with a different job, due time or payload",
    );

    let due = "2030-01-01T10:00:00Z";
    let fixed = [
        "submit",
        "close-order",
        "--at",
        due,
        "--id",
        "order-43",
        "--payload-stdin",
    ];
    assert_exit(&cli.run_with_stdin(&fixed, b"43"), 0, "");
    let same = cli.run_with_stdin(&fixed, b"43");
    assert_exit(
        &same,
        0,
        "already exists with this same request; nothing changed",
    );
    assert_eq!(text(&same.stdout), "order-43\n");
    assert_exit(
        &cli.run_with_stdin(&fixed, b"44"),
        2,
        "different job, due time or payload",
    );

    let generated = cli.run(&["submit", "close-order", "--in", "2h"]);
    assert_exit(&generated, 0, "");
    let id = text(&generated.stdout).trim().to_owned();
    assert_eq!(id.len(), 24, "a generated id: {id}");

    let list = cli.run(&["delayed", "list"]);
    assert_exit(&list, 0, "");
    let listed = text(&list.stdout);
    let order: Vec<usize> = ["order-42", id.as_str(), "order-43"]
        .iter()
        .map(|id| {
            listed
                .find(id)
                .unwrap_or_else(|| panic!("{id} listed:\n{listed}"))
        })
        .collect();
    assert!(
        order.windows(2).all(|w| w[0] < w[1]),
        "due order:\n{listed}"
    );
    assert!(listed.contains("2030-01-01 10:00:00 +00:00"), "{listed}");
}

#[tokio::test]
async fn refused_submissions_say_why_and_exit_2() {
    let cli = Cli::new("cli-refused").await;
    assert_exit(
        &cli.run(&["submit", "close-ordr", "--in", "1m"]),
        2,
        "job \"close-ordr\" is not declared in the schedule file; declared: close-order, nightly",
    );
    let big = cli.dir().join("big");
    std::fs::write(&big, vec![b'x'; 64 * 1024 + 1]).expect("payload file");
    let big = big.to_str().expect("utf-8");
    assert_exit(
        &cli.run(&["submit", "close-order", "--in", "1m", "--payload-file", big]),
        2,
        "has more than 65536 bytes",
    );
    let limit = cli.dir().join("limit");
    std::fs::write(&limit, vec![b'x'; 64 * 1024]).expect("payload file");
    let limit = limit.to_str().expect("utf-8");
    assert_exit(
        &cli.run(&[
            "submit",
            "close-order",
            "--in",
            "1m",
            "--payload-file",
            limit,
        ]),
        0,
        "",
    );

    let past = (chrono::Utc::now() - chrono::Duration::seconds(120)).to_rfc3339();
    assert_exit(
        &cli.run(&["submit", "close-order", "--at", &past]),
        2,
        "beyond job \"close-order\"'s starting_deadline (60s)",
    );
    let recent = (chrono::Utc::now() - chrono::Duration::seconds(5)).to_rfc3339();
    assert_exit(&cli.run(&["submit", "close-order", "--at", &recent]), 0, "");
    assert_exit(
        &cli.run(&["submit", "close-order", "--at", "2030-01-01 10:00"]),
        2,
        "has no UTC offset: say which zone it is in with --timezone",
    );
    assert_exit(
        &cli.run(&[
            "submit",
            "close-order",
            "--at",
            "2030-01-01 10:00",
            "--timezone",
            "Europe/Berlin",
            "--id",
            "bad/id",
        ]),
        2,
        "--id: a submission id may hold letters, digits",
    );
    assert_exit(&cli.run(&["submit", "close-order"]), 2, "--at");
}

#[tokio::test]
async fn cancel_before_the_start_and_show_say_where_a_submission_is() {
    let cli = Cli::new("cli-cancel").await;
    let submit = [
        "submit",
        "close-order",
        "--at",
        "2030-01-01T10:00:00+01:00",
        "--id",
        "o-7",
        "--payload",
        "abc",
    ];
    assert_exit(&cli.run(&submit), 0, "");
    let show = cli.run(&["delayed", "show", "o-7"]);
    assert_exit(&show, 0, "");
    let shown = text(&show.stdout);
    for line in [
        "job        close-order",
        "due        2030-01-01 09:00:00 +00:00",
        "payload    3 bytes",
        "state      pending",
    ] {
        assert!(shown.contains(line), "{line:?} in:\n{shown}");
    }
    let cancel = cli.run(&["delayed", "cancel", "o-7"]);
    assert_exit(&cancel, 0, "");
    assert!(
        text(&cancel.stdout)
            .starts_with("cancelled o-7 (close-order, due 2030-01-01 09:00:00 +00:00)")
    );
    assert_exit(
        &cli.run(&["delayed", "cancel", "o-7"]),
        2,
        "can no longer be cancelled: it is cancelled",
    );
    assert_exit(
        &cli.run(&["delayed", "cancel", "o-8"]),
        2,
        "no submission o-8",
    );
    let shown = text(&cli.run(&["delayed", "show", "o-7"]).stdout);
    assert!(shown.contains("state      cancelled"), "{shown}");
    let listed = text(&cli.run(&["delayed", "list"]).stdout);
    let recent = listed.split("RECENT").nth(1).unwrap_or_default();
    assert!(
        recent.contains("o-7") && recent.contains("cancelled before it started"),
        "{listed}"
    );
    let pending = listed.split("RECENT").next().unwrap_or_default();
    assert!(!pending.contains("o-7"), "{listed}");
}

#[tokio::test]
async fn an_unreachable_zookeeper_exits_1_naming_the_address() {
    let port = support::closed_port();
    let cli = Cli::at(&format!("127.0.0.1:{port}"));
    let output = cli.run(&["submit", "close-order", "--in", "1m"]);
    assert_exit(
        &output,
        1,
        &format!("cannot reach zookeeper at 127.0.0.1:{port}"),
    );
    assert!(
        output.stdout.is_empty(),
        "no id printed for nothing submitted"
    );
}

/// Issue 18: `echo '{"order":42}' | zkcron submit … --id order-42` submitted 0 bytes without a
/// word. `--payload-file -` reads standard input; a piped input that no option asks for is named
/// on stderr with how to send it.
#[tokio::test]
async fn a_piped_payload_is_read_with_payload_file_dash_and_never_dropped_silently() {
    let cli = Cli::new("cli-stdin").await;
    let due = "2030-01-01T10:00:00Z";
    let piped = cli.run_with_stdin(
        &[
            "submit",
            "close-order",
            "--at",
            due,
            "--id",
            "order-44",
            "--payload-file",
            "-",
        ],
        b"{\"order\":44}",
    );
    assert_exit(&piped, 0, "");
    assert!(
        !text(&piped.stderr).contains("not read"),
        "stdin was read: {}",
        text(&piped.stderr)
    );
    let show = cli.run(&["delayed", "show", "order-44"]);
    assert_exit(&show, 0, "");
    assert!(
        text(&show.stdout).contains("payload    12 bytes"),
        "the piped bytes are the payload:\n{}",
        text(&show.stdout)
    );

    let ignored = cli.run_with_stdin(
        &["submit", "close-order", "--at", due, "--id", "order-45"],
        b"{\"order\":45}",
    );
    assert_exit(
        &ignored,
        0,
        "standard input was not read: the submission has no payload",
    );
    assert!(
        text(&ignored.stderr).contains("--payload-file -"),
        "says how to send it: {}",
        text(&ignored.stderr)
    );
    let show = cli.run(&["delayed", "show", "order-45"]);
    assert!(
        text(&show.stdout).contains("payload    0 bytes"),
        "{}",
        text(&show.stdout)
    );

    // A service or cron job starts commands with stdin on /dev/null: nothing to say then.
    let quiet = Command::new(env!("CARGO_BIN_EXE_zkcron"))
        .args(["submit", "--config"])
        .arg(&cli.config)
        .args(["close-order", "--at", due, "--id", "order-46"])
        .stdin(Stdio::null())
        .output()
        .expect("run zkcron");
    assert_exit(&quiet, 0, "");
    assert!(
        !text(&quiet.stderr).contains("not read"),
        "{}",
        text(&quiet.stderr)
    );
}

/// Issue 24: `ZKCRON_CONFIG=… zkcron status` needs no flag.
#[tokio::test]
async fn status_reads_the_schedule_file_zkcron_config_names() {
    let cli = Cli::new("cli-env").await;
    let status = Command::new(env!("CARGO_BIN_EXE_zkcron"))
        .arg("status")
        .env("ZKCRON_CONFIG", &cli.config)
        .stdin(Stdio::null())
        .output()
        .expect("run zkcron");
    // No daemon: nobody owns the group (exit 4), and the report is printed all the same.
    assert_exit(&status, 4, "no owner");
    assert!(
        text(&status.stdout).contains("close-order"),
        "the jobs of the file ZKCRON_CONFIG names:\n{}",
        text(&status.stdout)
    );
}
