//! `zkcron check` on good and bad schedule files: exit codes, and messages that name the file,
//! the line and the key (issue "Schedule and fire", config tests).

use std::process::{Command, Output};

const HEAD: &str = r#"[zookeeper]
connect = "127.0.0.1:2181/apps"

[lock]
name = "billing"
"#;

fn check(text: &str) -> (Output, String) {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("zkcron.toml");
    std::fs::write(&path, text).expect("write config");
    let output = Command::new(env!("CARGO_BIN_EXE_zkcron"))
        .args(["check", path.to_str().expect("utf-8 temp path")])
        .env_remove("ZKCRON_TEST_SECRET")
        .output()
        .expect("run zkcron check");
    (output, path.display().to_string())
}

/// A job table with `extra` lines appended; the job starts on line 7.
fn job(extra: &str) -> String {
    format!("{HEAD}\n[[job]]\nname = \"report\"\n{extra}\n")
}

#[test]
fn bad_configs_are_refused_with_line_and_key() {
    #[rustfmt::skip]
    let cases: Vec<(&str, String, usize, &str)> = vec![
        // (what, file text, line of the problem, words the message must contain)
        ("toml syntax error", format!("{HEAD}oops = \n"), 6, "string values must be quoted"),
        ("unknown top-level key", format!("{HEAD}[extra]\nx = 1\n"), 6, "unknown key `extra`; expected `zookeeper`"),
        ("unknown key in a job", job("schedule = \"* * * * * *\"\nshell = \"true\"\nretrys = 3"), 11, "job \"report\": retrys: unknown key `retrys` (did you mean `retries`?)"),
        ("missing lock name", "[zookeeper]\nconnect = \"a:1\"\n[lock]\nroot = \"/x\"\n".into(), 3, "[lock]: missing key `name`"),
        ("bad duration", format!("{HEAD}takeover_delay = \"10 parsecs\"\n"), 6, "lock.takeover_delay: expected a duration"),
        ("zero session timeout", HEAD.replace("/apps\"", "/apps\"\nsession_timeout = \"0s\""), 3, "zookeeper.session_timeout: must be longer than zero"),
        ("bad connect string", HEAD.replace("127.0.0.1:2181/apps", "127.0.0.1:2181/apps/"), 2, "zookeeper.connect: invalid zookeeper connect string"),
        ("bad cron field", job("schedule = \"0 61 * * * *\"\nshell = \"true\""), 9, "job \"report\": schedule: minute"),
        ("too few cron fields", job("schedule = \"* * *\"\nshell = \"true\""), 9, "job \"report\": schedule:"),
        ("unknown time zone", job("schedule = \"@daily\"\ntimezone = \"Mars/Olympus\"\nshell = \"true\""), 10, "job \"report\": timezone"),
        ("duplicate job name", format!("{}\n[[job]]\nname = \"report\"\nschedule = \"@daily\"\nshell = \"true\"\n", job("schedule = \"@daily\"\nshell = \"true\"")), 13, "job \"report\": duplicate job name"),
        ("both command and shell", job("schedule = \"@daily\"\ncommand = [\"/bin/true\"]\nshell = \"true\""), 11, "set either command or shell"),
        ("neither command nor shell", job("schedule = \"@daily\""), 7, "expected command (an argv array), shell or http"),
        ("empty command", job("schedule = \"@daily\"\ncommand = []"), 10, "job \"report\": command: expected a non-empty argv array"),
        ("bad job name", job("schedule = \"@daily\"\nshell = \"true\"").replace("name = \"report\"", "name = \"my report!\""), 8, "job \"my report!\": name"),
        ("bad on_lost", job("schedule = \"@daily\"\nshell = \"true\"\non_lost = \"ignore\""), 11, "job \"report\": on_lost: expected `cancel` or `finish`, not \"ignore\""),
        ("relative working_dir", job("schedule = \"@daily\"\nshell = \"true\"\nworking_dir = \"tmp\""), 11, "job \"report\": working_dir: expected an absolute path"),
        ("bad job timeout", job("schedule = \"@daily\"\nshell = \"true\"\ntimeout = \"soon\""), 11, "job \"report\": timeout: expected a duration"),
        ("auth and auth_env both", HEAD.replace("/apps\"", "/apps\"\nauth = \"u:p\"\nauth_env = \"X\""), 4, "zookeeper.auth_env: set one of auth_file, auth_env and auth, not several"),
        ("auth_env unset", HEAD.replace("/apps\"", "/apps\"\nauth_env = \"ZKCRON_TEST_SECRET\""), 3, "environment variable ZKCRON_TEST_SECRET is not set"),
        ("creator acl without auth", HEAD.replace("/apps\"", "/apps\"\nacl = \"creator\""), 3, "zookeeper.acl: \"creator\" needs credentials"),
        ("bad lock root", format!("{HEAD}root = \"zkcron\"\n"), 6, "lock.root: expected an absolute znode path"),
        ("wrong type", format!("{HEAD}node_id = 5\n"), 6, "lock.node_id: expected a string (in quotes), not a number (5)"),
        ("history beyond one listing", job("schedule = \"@daily\"\nshell = \"true\"\nhistory = 5001"), 11, "job \"report\": history: expected a number of runs to keep, from 1 to 5000"),
        ("max_running of zero", job("shell = \"true\"\nmax_running = 0"), 10, "job \"report\": max_running: expected how many runs may be open at once, from 1 to 1000"),
        ("http beside a command", job("command = [\"/bin/true\"]\nhttp = { url = \"http://127.0.0.1:1/x\" }"), 9, "job \"report\": command: set one of command, shell or http"),
        ("http url of another scheme", job("http = { url = \"ftp://files/x\" }"), 9, "job \"report\": http.url: expected an http:// or https:// URL, not ftp://"),
        ("http url with credentials", job("http = { url = \"http://u:p@orders/x\" }"), 9, "credentials do not belong in the URL"),
        ("http url unparsable", job("http = { url = \"orders/close\" }"), 9, "http.url: expected a URL like"),
        ("http bad method", job("http = { url = \"http://orders/x\", method = \"GE T\" }"), 9, "job \"report\": http.method: expected an HTTP method"),
        ("http contract header", job("http = { url = \"http://orders/x\", headers = { \"Zkcron-Job\" = \"x\" } }"), 9, "Zkcron-Job is set by zkcron for every request"),
        ("http header from an unset variable", job("http = { url = \"http://orders/x\", headers_from_env = { Authorization = \"ZKCRON_TEST_UNSET\" } }"), 9, "http.headers_from_env.Authorization: environment variable ZKCRON_TEST_UNSET is not set"),
        ("http header set twice", job("http = { url = \"http://orders/x\", headers = { A = \"1\" }, headers_from_file = { a = \"/etc/hostname\" } }"), 9, "header a is set in http.headers already"),
        ("http missing ca file", job("http = { url = \"https://orders/x\", ca_file = \"/nonexistent/ca.pem\" }"), 9, "http.ca_file: cannot read /nonexistent/ca.pem"),
        ("http client cert without key", job("http = { url = \"https://orders/x\", client_cert = \"/etc/hostname\" }"), 9, "set both client_cert and client_key"),
        ("http bad version", job("http = { url = \"http://orders/x\", version = \"3\" }"), 9, "http.version: expected \"auto\", \"http1\" or \"http2\""),
        ("http unknown key", job("http = { url = \"http://orders/x\", verb = \"POST\" }"), 9, "job \"report\": http: unknown key `verb`"),
        ("unknown user", job("shell = \"true\"\nuser = \"zkcron-no-such-user\""), 10, "job \"report\": user: no user \"zkcron-no-such-user\" on this host"),
        ("user beside http", job("user = \"root\"\nhttp = { url = \"http://orders/x\" }"), 9, "job \"report\": user: applies to a process; this job's target is http"),
        ("working_dir beside http", job("working_dir = \"/tmp\"\nhttp = { url = \"http://orders/x\" }"), 9, "job \"report\": working_dir: applies to a process; this job's target is http"),
        ("on_failure program missing", job("shell = \"true\"\non_failure = [\"/nonexistent/page\", \"--team\", \"ops\"]"), 10, "job \"report\": on_failure: cannot use /nonexistent/page"),
        ("on_failure program not on PATH", job("shell = \"true\"\non_failure = [\"zkcron-no-such-pager\"]"), 10, "no executable \"zkcron-no-such-pager\" on PATH"),
        ("on_failure webhook of another scheme", job("shell = \"true\"\non_failure_webhook = { url = \"ftp://hooks/x\" }"), 10, "on_failure_webhook.url: expected an http:// or https:// URL"),
        ("on_failure webhook token unset", job("shell = \"true\"\non_failure_webhook = { url = \"http://hooks/x\", token_env = \"ZKCRON_TEST_UNSET\" }"), 10, "on_failure_webhook.token_env: environment variable ZKCRON_TEST_UNSET is not set"),
        ("notify unknown", job("shell = \"true\"\nnotify = \"sometimes\""), 10, "job \"report\": notify: expected `final` or `every_attempt`, not \"sometimes\""),
        ("pause_after_failures negative", job("shell = \"true\"\npause_after_failures = -1"), 10, "pause_after_failures: expected a number of failed runs in a row"),
        ("defaults with a missing hook", format!("{HEAD}[defaults]\non_failure = [\"/nonexistent/page\"]\n"), 7, "defaults.on_failure: cannot use /nonexistent/page"),
        ("jitter as long as the interval", job("schedule = \"*/10 * * * * *\"\nshell = \"true\"\njitter = \"10s\""), 11, "jitter: must be shorter than the time between two ticks (10s)"),
        ("jitter without a schedule", job("shell = \"true\"\njitter = \"5s\""), 10, "jitter: applies to a schedule's ticks; this job has none"),
        ("keep_output unknown", job("shell = \"true\"\nkeep_output = \"some\""), 10, "job \"report\": keep_output: expected `failed`, `always` or `never`, not \"some\""),
        ("retry_backoff_max below the backoff", job("shell = \"true\"\nretry_backoff = \"1m\"\nretry_backoff_max = \"30s\""), 11, "retry_backoff_max: must not be shorter than retry_backoff (1m)"),
    ];
    assert!(cases.len() >= 15);
    for (what, text, line, words) in cases {
        let (output, path) = check(&text);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{what}: exit code\n{stderr}");
        assert!(
            stderr.contains(&format!("{path}:{line}:")),
            "{what}: names {path}:{line}:\n{stderr}"
        );
        assert!(stderr.contains(words), "{what}: says {words:?}\n{stderr}");
    }
}

#[test]
fn all_problems_are_reported_at_once() {
    let text = job(
        "schedule = \"0 61 * * * *\"\ntimezone = \"Nowhere/Land\"\nshell = \"true\"\ntimeout = \"x\"",
    );
    let (output, _) = check(&text);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2));
    for key in ["timezone", "timeout"] {
        assert!(
            stderr.contains(&format!("job \"report\": {key}")),
            "reports {key}\n{stderr}"
        );
    }
}

#[test]
fn parse_level_and_validation_problems_are_all_told_in_one_pass_and_no_secret_shows() {
    let text = format!(
        "{HEAD}takeover_dely = \"10s\"\n\n\
         [[job]]\nname = \"backup\"\nschedule = \"0 0 3 * * *\"\ncommand = \"/usr/bin/backup --full\"\n\
         timout = \"1h\"\n\n\
         [[job]]\nname = \"report\"\nschedule = \"0 61 * * * *\"\nshell = \"report\"\nkill_grace = 10\n\
         concurrency = \"never\"\n\n\
         [[job]]\nname = \"hook\"\nhttp = {{ url = \"https://ops:hunter2@hooks.example.com/run\" }}\n\n\
         [[job]]\nname = \"typo\"\nschedule = \"@daily\"\nshell = \"true\"\nauth = ops:hunter3\n"
    );
    let (output, path) = check(&text);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    let expected = [
        (
            6,
            "lock.takeover_dely: unknown key `takeover_dely` (did you mean `takeover_delay`?)",
        ),
        (
            11,
            "job \"backup\": command: expected an argv array like [\"/usr/bin/backup\", \"--full\"]",
        ),
        (
            12,
            "job \"backup\": timout: unknown key `timout` (did you mean `timeout`?)",
        ),
        (16, "job \"report\": schedule: minute"),
        (
            18,
            "job \"report\": kill_grace: expected a duration like \"10s\"",
        ),
        (
            19,
            "job \"report\": concurrency: expected `forbid`, `allow` or `replace`, not \"never\"",
        ),
        (
            23,
            "job \"hook\": http.url: credentials do not belong in the URL",
        ),
        (29, "job \"typo\": auth: unknown key `auth`"),
        (29, "string values must be quoted"),
    ];
    for (line, says) in expected {
        assert!(
            stderr.contains(&format!("{path}:{line}:")) && stderr.contains(says),
            "line {line} says {says:?}:\n{stderr}"
        );
    }
    // Each problem once: the job whose command was refused is not also told it has none.
    assert_eq!(
        stderr.matches(&format!("{path}:")).count(),
        expected.len(),
        "{stderr}"
    );
    assert!(!stderr.contains("hunter"), "a password shows:\n{stderr}");
}

#[test]
fn drop_ins_beside_the_file_are_read_in_name_order_and_named_where_they_set_something() {
    let dir = tempfile::tempdir().expect("temp dir");
    let main = dir.path().join("zkcron.toml");
    std::fs::write(
        &main,
        format!("{HEAD}\n[[job]]\nname = \"shared\"\nschedule = \"@daily\"\nshell = \"true\"\n"),
    )
    .expect("write");
    let drop_ins = dir.path().join("zkcron.d");
    std::fs::create_dir(&drop_ins).expect("mkdir");
    std::fs::write(
        drop_ins.join("10-host.toml"),
        "[lock]\nnode_id = \"db-1\"\n\n[[job]]\nname = \"local\"\nschedule = \"@hourly\"\nshell = \"true\"\n",
    )
    .expect("write");
    // Not a drop-in: only `*.toml` files are.
    std::fs::write(
        drop_ins.join("10-host.toml~"),
        "[lock]\nnode_id = \"stale\"\n",
    )
    .expect("write");
    let run = |file: &std::path::Path| {
        Command::new(env!("CARGO_BIN_EXE_zkcron"))
            .arg("check")
            .arg(file)
            .output()
            .expect("run zkcron check")
    };
    let output = run(&main);
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(stdout.contains("valid, 2 job(s)"), "{stdout}");
    let host = drop_ins.join("10-host.toml");
    assert!(
        stdout.contains(&format!(
            "drop-in {}: lock.node_id, [[job]] \"local\"",
            host.display()
        )),
        "{stdout}"
    );

    // Set again by a later drop-in: it wins, as systemd's drop-ins do, and `check` says what
    // it overrides.
    let later = drop_ins.join("20-later.toml");
    std::fs::write(&later, "[lock]\nnode_id = \"db-2\"\n").expect("write");
    let output = run(&main);
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{stdout}");
    assert!(
        stdout.contains(&format!(
            "drop-in {}: lock.node_id (overrides {}:2)",
            later.display(),
            host.display()
        )),
        "{stdout}"
    );
}

#[test]
fn a_good_file_lists_each_job_with_its_next_three_fire_times() {
    let text = format!(
        "{HEAD}\n[[job]]\nname = \"nightly\"\nschedule = \"0 30 2 * * *\"\ntimezone = \"Europe/Berlin\"\n\
         command = [\"/bin/true\"]\n\n[[job]]\nname = \"often\"\nschedule = \"*/5 * * * *\"\nshell = \"true\"\n\
         enabled = false\n"
    );
    let (output, _) = check(&text);
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(stdout.contains("nightly"), "{stdout}");
    let berlin_fires = stdout
        .lines()
        .filter(|l| {
            l.contains("02:30:00") && l.contains("+01:00")
                || l.contains("02:30:00") && l.contains("+02:00")
        })
        .count();
    assert_eq!(
        berlin_fires, 3,
        "three fire times in the job's own zone\n{stdout}"
    );
    assert!(
        stdout.contains("often") && stdout.contains("disabled"),
        "disabled jobs are shown as such\n{stdout}"
    );
}

#[test]
fn check_shows_the_defaults_and_each_job_fires_in_the_default_zone() {
    let text = format!(
        "{HEAD}\n[defaults]\ntimezone = \"Asia/Tokyo\"\nretries = 2\n\n\
         [[job]]\nname = \"nightly\"\nschedule = \"0 30 2 * * *\"\ncommand = [\"/bin/true\"]\n"
    );
    let (output, _) = check(&text);
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{stdout}");
    assert!(
        stdout.contains(
            "[defaults], for every job that does not set its own: timezone = \"Asia/Tokyo\", retries = 2"
        ),
        "{stdout}"
    );
    let tokyo_fires = stdout
        .lines()
        .filter(|l| l.contains("02:30:00 +09:00"))
        .count();
    assert_eq!(tokyo_fires, 3, "{stdout}");
}

#[test]
fn a_missing_file_is_a_usage_error_naming_it() {
    let output = Command::new(env!("CARGO_BIN_EXE_zkcron"))
        .args(["check", "/nonexistent/zkcron.toml"])
        .output()
        .expect("run zkcron check");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("no schedule file at /nonexistent/zkcron.toml")
            && stderr.contains("--config FILE or ZKCRON_CONFIG"),
        "what to do is said: {stderr}"
    );
}

#[test]
fn the_shipped_example_is_valid_and_shows_an_on_demand_job() {
    let example = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/zkcron.toml");
    let output = Command::new(env!("CARGO_BIN_EXE_zkcron"))
        .args(["check", example])
        .output()
        .expect("run zkcron check");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        stdout.contains("close-order  on demand (no schedule: fires when submitted)"),
        "{stdout}"
    );
}

/// Issue 24: on a host with the packaged file no flag is needed; `ZKCRON_CONFIG` overrides the
/// default, `--config` overrides both, and `check`'s own FILE overrides `--config`.
#[test]
fn the_schedule_file_is_config_else_zkcron_config_else_the_packaged_path() {
    let dir = tempfile::tempdir().expect("temp dir");
    let good = dir.path().join("good.toml");
    let bad = dir.path().join("bad.toml");
    std::fs::write(&good, job("schedule = \"@hourly\"\nshell = \"true\"")).expect("write");
    std::fs::write(&bad, job("schedule = \"@hourly\"")).expect("write");
    let zkcron = |args: &[&std::ffi::OsStr], env: Option<&std::path::Path>| {
        let mut command = Command::new(env!("CARGO_BIN_EXE_zkcron"));
        command.args(args).env_remove("ZKCRON_CONFIG");
        if let Some(path) = env {
            command.env("ZKCRON_CONFIG", path);
        }
        command.output().expect("run zkcron")
    };
    let check = std::ffi::OsStr::new("check");
    let flag = std::ffi::OsStr::new("--config");

    let by_flag = zkcron(&[check, flag, good.as_os_str()], Some(&bad));
    assert_eq!(
        by_flag.status.code(),
        Some(0),
        "--config wins over ZKCRON_CONFIG: {by_flag:?}"
    );
    assert!(String::from_utf8_lossy(&by_flag.stdout).contains("report"));

    let by_env = zkcron(&[check], Some(&good));
    assert_eq!(
        by_env.status.code(),
        Some(0),
        "ZKCRON_CONFIG is read: {by_env:?}"
    );

    let by_file = zkcron(&[check, bad.as_os_str(), flag, good.as_os_str()], None);
    assert_eq!(
        by_file.status.code(),
        Some(2),
        "check's FILE wins: {by_file:?}"
    );
    assert!(String::from_utf8_lossy(&by_file.stderr).contains("bad.toml"));

    let by_default = zkcron(&[check], None);
    let stderr = String::from_utf8_lossy(&by_default.stderr);
    if !std::path::Path::new("/etc/zkcron/zkcron.toml").exists() {
        assert_eq!(by_default.status.code(), Some(2), "{stderr}");
        assert!(
            stderr.contains("no schedule file at /etc/zkcron/zkcron.toml"),
            "{stderr}"
        );
    }
}

/// Issue 24: `check` (the unit's ExecStartPre) warns about what would keep a job from starting on
/// this host — a file may be checked on another host, so warnings; `--strict` makes them errors.
#[test]
fn a_command_or_working_dir_missing_on_this_host_is_a_warning_and_with_strict_an_error() {
    let text = format!(
        "{HEAD}\n[[job]]\nname = \"report\"\nschedule = \"@daily\"\ncommand = [\"/nonexistent/report\"]\n\
         working_dir = \"/nonexistent/dir\"\n\n[[job]]\nname = \"fine\"\nschedule = \"@daily\"\n\
         command = [\"true\"]\nworking_dir = \"/\"\n"
    );
    let (output, path) = check(&text);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(0), "warnings only: {stderr}");
    for words in [
        format!("warning: {path}:10:11: job \"report\": command: \"/nonexistent/report\""),
        format!("warning: {path}:11:15: job \"report\": working_dir: /nonexistent/dir"),
    ] {
        assert!(stderr.contains(&words), "{words:?} in {stderr}");
    }
    assert!(
        !stderr.contains("\"fine\""),
        "a command on PATH and a real directory: {stderr}"
    );

    let dir = tempfile::tempdir().expect("temp dir");
    let file = dir.path().join("strict.toml");
    std::fs::write(&file, &text).expect("write");
    let strict = Command::new(env!("CARGO_BIN_EXE_zkcron"))
        .args(["check", "--strict"])
        .arg(&file)
        .output()
        .expect("run zkcron check --strict");
    let stderr = String::from_utf8_lossy(&strict.stderr);
    assert_eq!(strict.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("2 problem(s)"), "{stderr}");

    // The file alone says nothing about this host.
    let lint = Command::new(env!("CARGO_BIN_EXE_zkcron"))
        .args(["check", "--lint"])
        .arg(&file)
        .output()
        .expect("run zkcron check --lint");
    let stderr = String::from_utf8_lossy(&lint.stderr);
    assert_eq!(lint.status.code(), Some(0), "{stderr}");
    assert!(!stderr.contains("warning"), "{stderr}");
}

/// `zkcron check --json FILE`: its exit code and its document.
fn check_json(text: &str) -> (Option<i32>, serde_json::Value) {
    let dir = tempfile::tempdir().expect("temp dir");
    let file = dir.path().join("zkcron.toml");
    std::fs::write(&file, text).expect("write");
    let output = Command::new(env!("CARGO_BIN_EXE_zkcron"))
        .args(["check", "--json"])
        .arg(&file)
        .output()
        .expect("run zkcron check --json");
    let document = serde_json::from_slice(&output.stdout).unwrap_or_else(|err| {
        panic!(
            "one JSON document ({err}): {}\n{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        )
    });
    (output.status.code(), document)
}

#[test]
fn check_json_gives_ci_every_problem_located_and_each_jobs_next_fires() {
    let (code, bad) = check_json(&job(
        "schedule = \"@daily\"\nshell = \"true\"\nkill_grace = 10\nretrys = 2",
    ));
    assert_eq!(code, Some(2), "{bad}");
    assert_eq!(bad["valid"], false);
    let problems = bad["problems"].as_array().expect("problems");
    // Issue 51 §6: the table, the job and the key are fields of their own; `context` keeps
    // the text form.
    let told: Vec<(i64, &str, &str, &str, &str)> = problems
        .iter()
        .map(|p| {
            (
                p["line"].as_i64().unwrap_or(0),
                p["table"].as_str().unwrap_or(""),
                p["name"].as_str().unwrap_or(""),
                p["key"].as_str().unwrap_or(""),
                p["context"].as_str().unwrap_or(""),
            )
        })
        .collect();
    assert_eq!(
        told,
        [
            (
                11,
                "job",
                "report",
                "kill_grace",
                "job \"report\": kill_grace"
            ),
            (12, "job", "report", "retrys", "job \"report\": retrys")
        ],
        "{bad}"
    );
    assert!(problems.iter().all(|p| p["severity"] == "error"), "{bad}");

    let (code, good) = check_json(&format!(
        "{HEAD}\n[defaults]\nretries = 1\n\n[[job]]\nname = \"nightly\"\nschedule = \"0 30 2 * * *\"\n\
         timezone = \"Europe/Berlin\"\ncommand = [\"/nonexistent/report\"]\n\n\
         [[job]]\nname = \"deliver\"\ncommand = [\"/bin/cat\"]\n"
    ));
    assert_eq!(code, Some(0), "{good}");
    assert_eq!(good["valid"], true);
    assert_eq!(good["defaults"], serde_json::json!(["retries = 1"]));
    let warning = &good["problems"][0];
    assert_eq!(
        (
            &warning["severity"],
            &warning["line"],
            &warning["name"],
            &warning["key"]
        ),
        (
            &serde_json::json!("warning"),
            &serde_json::json!(14),
            &serde_json::json!("nightly"),
            &serde_json::json!("command")
        ),
        "{good}"
    );
    let nightly = &good["jobs"][0];
    assert_eq!(nightly["timezone"], "Europe/Berlin");
    let next = nightly["next"].as_array().expect("next fires");
    assert_eq!(next.len(), 3, "{good}");
    assert!(
        next.iter().all(|fire| fire["at"]
            .as_str()
            .is_some_and(|at| at.contains("T02:30:00+0"))),
        "{good}"
    );
    assert_eq!(good["jobs"][1]["schedule"], serde_json::Value::Null);
    assert_eq!(good["jobs"][1]["next"], serde_json::json!([]));
}

/// `check --explain` over a spring-forward and a fall-back (issue 20): where Kubernetes CronJob
/// ran `0 2 * * *` twice (kubernetes/kubernetes#121594, Europe/Berlin, 2023-10-29) zkcron fires
/// once, and a fixed time in the spring gap is moved to its end.
#[test]
fn check_explain_names_the_gap_the_repeat_and_what_fires() {
    let text = format!(
        "{HEAD}\n[[job]]\nname = \"restore\"\nschedule = \"0 2 * * *\"\ntimezone = \"Europe/Berlin\"\n\
         shell = \"true\"\n\n[[job]]\nname = \"often\"\nschedule = \"0 */30 * * * *\"\n\
         timezone = \"Europe/Berlin\"\nshell = \"true\"\n"
    );
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("zkcron.toml");
    std::fs::write(&path, text).expect("write config");
    let explain = |args: &[&str]| {
        let output = Command::new(env!("CARGO_BIN_EXE_zkcron"))
            .arg("check")
            .arg(&path)
            .args(args)
            .output()
            .expect("run zkcron check");
        (
            output.status.code(),
            String::from_utf8_lossy(&output.stdout).into_owned(),
            String::from_utf8_lossy(&output.stderr).into_owned(),
        )
    };
    let (code, autumn, _) = explain(&[
        "--explain",
        "restore",
        "--from",
        "2023-10-28",
        "--count",
        "3",
    ]);
    assert_eq!(code, Some(0), "{autumn}");
    assert!(
        autumn.contains("2023-10-29 02:00:00 +02:00  (2023-10-29 00:00:00 UTC)  first pass of a repeated time")
            && autumn.contains("clocks go back, +02:00 to +01:00: wall times 02:00:00 to 02:59:59 happen twice; 02:00:00 fires once, on the first pass (+02:00)")
            && !autumn.contains("2023-10-29 02:00:00 +01:00"),
        "once, on the first pass:\n{autumn}"
    );
    let (_, spring, _) = explain(&["--explain", "--from", "2027-03-28 01:00", "--count", "3"]);
    assert!(
        spring.contains("2027-03-28 03:00:00 +02:00  (2027-03-28 01:00:00 UTC)  moved: 02:00:00 does not exist this day"),
        "the fixed time moves to the gap's end:\n{spring}"
    );
    assert!(
        spring.contains("skipped: 02:00:00, 02:30:00 (2 tick(s))"),
        "the wildcard job skips the gap:\n{spring}"
    );
    let (code, _, stderr) = explain(&["--explain", "nope"]);
    assert_eq!(code, Some(2));
    assert!(stderr.contains("no job named \"nope\""), "{stderr}");
    let (code, _, stderr) = explain(&["--explain", "--from", "2027-03-28 02:30"]);
    assert_eq!(code, Some(2));
    assert!(
        stderr.contains("does not exist in Europe/Berlin"),
        "{stderr}"
    );
}

#[test]
fn commands_that_read_no_schedule_do_not_offer_config_in_their_help() {
    let help = |args: &[&str]| {
        let output = Command::new(env!("CARGO_BIN_EXE_zkcron"))
            .args(args)
            .arg("--help")
            .output()
            .expect("run zkcron --help");
        String::from_utf8_lossy(&output.stdout).into_owned()
    };
    for command in ["generate", "http-token", "lock-demo"] {
        let shown = help(&[command]);
        assert!(
            !shown.contains("--config"),
            "zkcron {command} --help:\n{shown}"
        );
    }
    for command in ["status", "check", "pause"] {
        let shown = help(&[command]);
        assert!(
            shown.contains("--config"),
            "zkcron {command} --help:\n{shown}"
        );
    }
}

/// A calendar window through both DST changes of a year (issue 36): `only = ["night"]` with
/// `hours = ["01:00-04:00"]` in Europe/Berlin keeps the wall times 01:00 to 03:59 — two hours of
/// elapsed time in spring, four in autumn, the repeated hour on both passes.
#[test]
fn check_explain_marks_the_ticks_a_calendar_window_skips_through_dst() {
    let text = format!(
        "{HEAD}\n[[calendar]]\nname = \"night\"\ntimezone = \"Europe/Berlin\"\nhours = [\"01:00-04:00\"]\n\n\
         [[job]]\nname = \"nightly\"\nschedule = \"0 30 * * * *\"\ntimezone = \"Europe/Berlin\"\n\
         only = [\"night\"]\nshell = \"true\"\n"
    );
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("zkcron.toml");
    std::fs::write(&path, text).expect("write config");
    let explain = |from: &str| {
        let output = Command::new(env!("CARGO_BIN_EXE_zkcron"))
            .arg("check")
            .arg(&path)
            .args(["--explain", "nightly", "--from", from, "--count", "6"])
            .output()
            .expect("run zkcron check");
        assert_eq!(output.status.code(), Some(0));
        String::from_utf8_lossy(&output.stdout).into_owned()
    };
    let runs = |text: &str| -> Vec<String> {
        text.lines()
            .filter(|line| line.starts_with("  20") && !line.contains("not run"))
            .map(|line| line.trim()[..26].to_owned())
            .collect()
    };
    let spring = explain("2026-03-29");
    assert_eq!(
        runs(&spring),
        ["2026-03-29 01:30:00 +01:00", "2026-03-29 03:30:00 +02:00"],
        "{spring}"
    );
    assert!(
        spring.contains("2026-03-29 04:30:00 +02:00  (2026-03-29 02:30:00 UTC)  not run: outside calendar \"night\" (only)"),
        "{spring}"
    );
    let autumn = explain("2026-10-25");
    assert_eq!(
        runs(&autumn),
        [
            "2026-10-25 01:30:00 +02:00",
            "2026-10-25 02:30:00 +02:00",
            "2026-10-25 02:30:00 +01:00",
            "2026-10-25 03:30:00 +01:00"
        ],
        "{autumn}"
    );
}

/// Issue 51 §7: a password written in the schedule is refused where group or others may read
/// the file (as ssh refuses such a private key), naming the key, the line and the fix; in a
/// private file it is a warning; `auth_file` reads it from a file of its own.
#[test]
fn an_inline_secret_is_refused_in_a_file_others_may_read_and_auth_file_reads_one() {
    use std::os::unix::fs::PermissionsExt as _;
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("zkcron.toml");
    let set_mode = |path: &std::path::Path, mode: u32| {
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).expect("chmod");
    };
    let check = |path: &std::path::Path, json: bool| {
        let mut command = Command::new(env!("CARGO_BIN_EXE_zkcron"));
        command.arg("check");
        if json {
            command.arg("--json");
        }
        command.arg(path).output().expect("run zkcron check")
    };
    std::fs::write(
        &path,
        HEAD.replace("/apps\"", "/apps\"\nauth = \"ops:hunter3\""),
    )
    .expect("write");
    set_mode(&path, 0o644);
    let open = check(&path, false);
    let stderr = String::from_utf8_lossy(&open.stderr);
    assert_eq!(open.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "error: {}:3: zookeeper.auth: a secret in a file that group or others may read (mode 0644): name a file of mode 0600 with auth_file",
            path.display()
        )),
        "{stderr}"
    );
    assert!(
        !stderr.contains("hunter3"),
        "the secret is never shown: {stderr}"
    );
    let json = check(&path, true);
    assert_eq!(json.status.code(), Some(2));
    let document: serde_json::Value = serde_json::from_slice(&json.stdout).expect("JSON");
    assert_eq!(document["valid"], false);
    assert_eq!(document["problems"][0]["key"], "auth", "{document}");

    set_mode(&path, 0o600);
    let private = check(&path, false);
    let stderr = String::from_utf8_lossy(&private.stderr);
    assert_eq!(private.status.code(), Some(0), "{stderr}");
    assert!(
        stderr.contains("warning:") && stderr.contains("zookeeper.auth"),
        "{stderr}"
    );

    let secret = dir.path().join("zk-auth");
    std::fs::write(&secret, "ops:hunter3\n").expect("write the secret");
    std::fs::write(
        &path,
        HEAD.replace(
            "/apps\"",
            &format!(
                "/apps\"\nauth_file = \"{}\"\nacl = \"creator\"",
                secret.display()
            ),
        ),
    )
    .expect("write");
    set_mode(&path, 0o644);
    let from_file = check(&path, false);
    let stderr = String::from_utf8_lossy(&from_file.stderr);
    assert_eq!(from_file.status.code(), Some(0), "{stderr}");
    assert!(!stderr.contains("zookeeper.auth"), "{stderr}");
}

/// Issue 51 §8: `zkcron init` writes a starting file that `check` accepts, where the other
/// commands read it, and never over an operator's file without `--force`; a missing file's
/// error points at it.
#[test]
fn init_writes_a_starting_file_check_accepts_and_never_replaces_one() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("etc/zkcron.toml");
    let zkcron = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_zkcron"))
            .args(args)
            .arg("--config")
            .arg(&path)
            .output()
            .expect("run zkcron")
    };
    let missing = zkcron(&["check"]);
    assert_eq!(missing.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&missing.stderr).contains("zkcron init"),
        "{missing:?}"
    );
    let written = zkcron(&[
        "init",
        "--connect",
        "zk1:2181,zk2:2181/apps",
        "--name",
        "billing",
    ]);
    assert!(written.status.success(), "{written:?}");
    let checked = zkcron(&["check"]);
    let stdout = String::from_utf8_lossy(&checked.stdout);
    assert!(
        checked.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&checked.stderr)
    );
    assert!(stdout.contains("valid, 1 job(s)"), "{stdout}");
    let text = std::fs::read_to_string(&path).expect("the file");
    assert!(
        text.contains("connect = \"zk1:2181,zk2:2181/apps\"")
            && text.contains("name = \"billing\"")
    );

    std::fs::write(&path, "# the operator's own\n").expect("write");
    let again = zkcron(&["init"]);
    assert_eq!(again.status.code(), Some(2), "{again:?}");
    assert!(
        String::from_utf8_lossy(&again.stderr).contains("--force"),
        "{again:?}"
    );
    assert_eq!(
        std::fs::read_to_string(&path).expect("the file"),
        "# the operator's own\n"
    );
    assert!(zkcron(&["init", "--force"]).status.success());
    assert!(zkcron(&["check"]).status.success());
}
