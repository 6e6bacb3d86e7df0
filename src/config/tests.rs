//! Unit tests of the schedule file: defaults, secrets, spans. The refusal table runs through the
//! real CLI in tests/config_check.rs.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::time::Duration;

use chrono::{DateTime, Utc};

use super::*;
use crate::run::Program;

const MINIMAL: &str = "[zookeeper]\nconnect = \"zk:2181\"\n[lock]\nname = \"g\"\n";

fn parse_text(text: &str) -> Result<Config, ConfigError> {
    parse(Path::new("t.toml"), text, &|name| match name {
        "ZK_AUTH" => Some("user:s3cret".to_owned()),
        "PG_DSN" => Some("host=db.internal user=zkcron password=s3cret".to_owned()),
        "PG_DSN_TLS" => Some("host=db.internal sslmode=require".to_owned()),
        _ => None,
    })
}

#[test]
fn defaults_are_the_documented_ones() {
    let config = parse_text(&format!(
        "{MINIMAL}[[job]]\nname = \"j\"\nschedule = \"@hourly\"\nshell = \"true\"\n"
    ))
    .expect("valid");
    assert_eq!(config.zookeeper.session_timeout, Duration::from_secs(10));
    assert_eq!(config.zookeeper.connect_timeout, Duration::from_secs(5));
    assert_eq!(config.zookeeper.acl, AclPolicy::Open);
    assert_eq!(config.lock.root, "/zkcron");
    assert_eq!(config.lock.takeover_delay, Duration::from_secs(10));
    assert_eq!(config.lock.node_id, None);
    assert_eq!(
        config.log,
        LogConfig {
            format: LogFormat::Text,
            level: "info".into()
        }
    );
    let job = &config.jobs[0];
    assert_eq!(
        (job.spec.timeout, job.spec.kill_grace),
        (None, Duration::from_secs(10))
    );
    assert_eq!((job.on_lost, job.enabled), (OnLost::Cancel, true));
    assert_eq!(job.timezone, chrono_tz::UTC);
    assert!(job.schedule.is_some());
    assert_eq!((job.history, job.max_running), (100, 256));
    assert_eq!(job.dedup_window, Duration::from_secs(3600));
    assert_eq!(job.spec.program, Program::Shell("true".into()));
}

#[test]
fn a_job_takes_declared_limits_and_an_undeclared_or_bad_one_is_refused_with_its_place() {
    let limits = "[[limit]]\nname = \"db-heavy\"\nmax = 2\n[[limit]]\nname = \"api\"\nmax = 5\n";
    let job = |list: &str| {
        format!("{MINIMAL}{limits}[[job]]\nname = \"j\"\nshell = \"true\"\nlimits = {list}\n")
    };
    let config = parse_text(&job("[\"db-heavy\", \"api\"]")).expect("valid");
    let names: Vec<(&str, usize)> = config.jobs[0]
        .limits
        .iter()
        .map(|l| (l.name.as_str(), l.max))
        .collect();
    assert_eq!(names, [("api", 5), ("db-heavy", 2)], "in name order");
    assert_eq!(config.limits.len(), 2);
    let unknown = parse_text(&job("[\"nope\"]"))
        .expect_err("refused")
        .render();
    assert!(
        unknown.contains("job \"j\": limits: expected a declared [[limit]]: db-heavy, api"),
        "{unknown}"
    );
    let twice = parse_text(&job("[\"api\", \"api\"]"))
        .expect_err("refused")
        .render();
    assert!(twice.contains("named twice"), "{twice}");
    for (bad, says) in [
        (
            "[[limit]]\nname = \"x\"\nmax = 0\n",
            "limit \"x\": max: expected",
        ),
        (
            "[[limit]]\nname = \"a/b\"\nmax = 1\n",
            "limit \"a/b\": name",
        ),
        (
            "[[limit]]\nname = \"x\"\nmax = 1\n[[limit]]\nname = \"x\"\nmax = 2\n",
            "duplicate limit name",
        ),
    ] {
        let err = parse_text(&format!("{MINIMAL}{bad}"))
            .expect_err(bad)
            .render();
        assert!(err.contains(says), "{bad}: {err}");
    }
}

#[test]
fn a_dedup_window_is_from_a_second_to_thirty_days() {
    let with = |window: &str| {
        parse_text(&format!(
            "{MINIMAL}[[job]]\nname = \"j\"\nshell = \"true\"\ndedup_window = \"{window}\"\n"
        ))
    };
    let job = |window| with(window).expect("valid").jobs[0].dedup_window;
    assert_eq!(job("10m"), Duration::from_secs(600));
    assert_eq!(job("30d"), Duration::from_secs(30 * 24 * 3600));
    for refused in ["0s", "500ms", "31d", "soon"] {
        let err = with(refused).expect_err(refused).render();
        assert!(
            err.contains("job \"j\": dedup_window: expected"),
            "{refused}: {err}"
        );
    }
}

#[test]
fn a_job_without_a_schedule_fires_only_when_submitted() {
    let config = parse_text(&format!(
        "{MINIMAL}[[job]]\nname = \"close-order\"\ntimezone = \"Europe/Paris\"\nshell = \"true\"\n"
    ))
    .expect("valid");
    let job = &config.jobs[0];
    assert!(job.schedule.is_none());
    assert_eq!(job.timezone, chrono_tz::Europe::Paris);
    assert_eq!(
        job.concurrency,
        Concurrency::Allow,
        "one submission never skips another"
    );
    let now = DateTime::<Utc>::from_timestamp(1_700_000_000, 0).expect("in range");
    assert_eq!(job.next_tick_after(now), None);
}

#[test]
fn credentials_come_from_the_named_variable_and_never_show() {
    let text = MINIMAL.replace(
        "\"zk:2181\"",
        "\"zk:2181\"\nauth_env = \"ZK_AUTH\"\nacl = \"creator\"",
    );
    let config = parse_text(&text).expect("valid");
    let auth = config.zookeeper.auth.expect("credentials");
    assert_eq!(auth.expose(), "user:s3cret");
    assert!(
        !format!("{auth:?}").contains("s3cret"),
        "Debug hides the secret"
    );

    let bad = MINIMAL.replace("\"zk:2181\"", "\"zk:2181\"\nauth = \"no-colon-s3cret\"");
    let err = parse_text(&bad).expect_err("refused");
    assert!(
        err.render().contains("expected digest credentials"),
        "{}",
        err.render()
    );
    assert!(
        !err.render().contains("no-colon-s3cret"),
        "the message never echoes a secret"
    );
}

#[test]
fn schedule_errors_point_at_the_bad_field() {
    let text =
        format!("{MINIMAL}[[job]]\nname = \"j\"\nschedule = \"0 0 25 * * *\"\nshell = \"true\"\n");
    let err = parse_text(&text).expect_err("refused");
    let rendered = err.render();
    assert!(
        rendered.starts_with("t.toml:7:17: job \"j\": schedule: hour"),
        "{rendered}"
    );
    let caret = rendered.lines().last().expect("caret line");
    assert_eq!(
        caret.find('^'),
        Some(" 7 | ".len() + 16),
        "caret under the hour field\n{rendered}"
    );
    assert!(caret.ends_with("^^"), "as wide as the field\n{rendered}");
}

#[test]
fn every_problem_is_placed_at_once_as_line_col_places_it_alone() {
    let problem = |at: usize| Problem {
        span: Some(at..at + 1),
        context: String::new(),
        message: String::new(),
        secret: false,
    };
    let err = ConfigError {
        path: "t".into(),
        text: "ab\ncdé\n\nx".into(),
        files: Files::default(),
        problems: [0, 2, 3, 4, 5, 6, 7, 8, 9, 10, 10_000]
            .into_iter()
            .map(problem)
            .collect(),
    };
    let alone: Vec<Option<(usize, usize)>> = err
        .problems
        .iter()
        .map(|p| p.span.as_ref().map(|span| err.line_col(span.start)))
        .collect();
    assert_eq!(err.places(), alone);
}

#[test]
fn line_col_never_panics() {
    let err = ConfigError {
        path: "t".into(),
        text: "ab\ncdé\n".into(),
        files: Files::default(),
        problems: vec![],
    };
    // Bytes: a b \n c d é(2 bytes) \n; the 'é' starts at byte 5 and ends at byte 7.
    assert_eq!(err.line_col(0), (1, 1));
    assert_eq!(err.line_col(4), (2, 2));
    assert_eq!(
        err.line_col(5),
        (2, 3),
        "the 'é' itself: columns count chars"
    );
    assert_eq!(err.line_col(7), (2, 4), "the newline after the 'é'");
    assert_eq!(err.line_col(8), (3, 1), "the end of the text");
    // An offset that is no char boundary, or past the end, counts the whole text: the end.
    assert_eq!(err.line_col(6), (3, 1), "inside the two-byte 'é'");
    assert_eq!(err.line_col(10_000), (3, 1), "past the end");
}

#[test]
fn http_is_off_by_default_and_its_token_comes_from_outside_the_file() {
    assert_eq!(parse_text(MINIMAL).expect("valid").http, None);
    let config = parse_text(&format!(
        "{MINIMAL}[http]\nlisten = \"0.0.0.0:9464\"\ntoken_env = \"ZK_AUTH\"\n"
    ))
    .expect("valid");
    let http = config.http.expect("on");
    assert_eq!(http.listen.port(), 9464);
    assert_eq!(
        http.token.map(|t| t.expose().to_owned()).as_deref(),
        Some("user:s3cret")
    );
    let dir = tempfile::tempdir().expect("temp dir");
    let file = dir.path().join("token");
    std::fs::write(&file, "t0ken\n").expect("token file");
    let from_file = parse_text(&format!(
        "{MINIMAL}[http]\nlisten = \"127.0.0.1:0\"\ntoken_file = \"{}\"\n",
        file.display()
    ))
    .expect("valid");
    assert_eq!(
        from_file
            .http
            .and_then(|h| h.token)
            .map(|t| t.expose().to_owned())
            .as_deref(),
        Some("t0ken"),
        "trimmed"
    );
    let loopback =
        parse_text(&format!("{MINIMAL}[http]\nlisten = \"[::1]:9464\"\n")).expect("valid");
    assert_eq!(
        loopback.http.and_then(|h| h.token),
        None,
        "loopback may go without"
    );
}

#[test]
fn http_refusals_name_the_key_and_what_was_expected() {
    let cases = [
        (
            "listen = \"localhost\"",
            "http.listen",
            "expected an address and port",
        ),
        (
            "listen = \"0.0.0.0:9464\"",
            "http.listen",
            "beyond loopback, needs a token",
        ),
        (
            "listen = \"127.0.0.1:1\"\ntoken_env = \"NOPE\"",
            "http.token_env",
            "NOPE is not set",
        ),
        (
            "listen = \"127.0.0.1:1\"\ntoken_file = \"/nonexistent/t\"",
            "http.token_file",
            "cannot read token file /nonexistent/t",
        ),
        (
            "listen = \"127.0.0.1:1\"\ntoken_env = \"ZK_AUTH\"\ntoken_file = \"/t\"",
            "http.token_env",
            "not both",
        ),
        (
            "listen = \"127.0.0.1:1\"\ntoken = \"inline\"",
            "http.token",
            "unknown key `token`",
        ),
    ];
    for (http, key, message) in cases {
        let err = parse_text(&format!("{MINIMAL}[http]\n{http}\n")).expect_err(http);
        let text = err.to_string();
        assert!(
            text.contains(key) && text.contains(message),
            "{http}: {text}"
        );
    }
}

#[test]
fn tls_and_sasl_files_are_read_at_load_and_each_refusal_names_its_key() {
    let dir = tempfile::tempdir().expect("temp dir");
    let not_pem = dir.path().join("not.pem");
    std::fs::write(&not_pem, "hello").expect("write");
    let password = dir.path().join("password");
    std::fs::write(&password, "s3cret\n").expect("write");
    let zk = |extra: &str| {
        format!("[zookeeper]\nconnect = \"zk:2181\"\n{extra}\n[lock]\nname = \"g\"\n")
    };
    let cases = [
        (
            "tls = { ca = \"/nonexistent/ca.pem\" }".to_owned(),
            "zookeeper.tls.ca",
            "cannot read /nonexistent/ca.pem",
        ),
        (
            format!("tls = {{ ca = \"{}\" }}", not_pem.display()),
            "zookeeper.tls",
            "no usable PEM certificate",
        ),
        (
            format!(
                "tls = {{ ca = \"{0}\", cert = \"{0}\" }}",
                not_pem.display()
            ),
            "zookeeper.tls",
            "set both cert and key, or neither",
        ),
        (
            "sasl = { mechanism = \"gssapi\", username = \"u\", password_env = \"ZK_AUTH\" }"
                .to_owned(),
            "zookeeper.sasl.mechanism",
            "expected \"digest-md5\"",
        ),
        (
            "sasl = { mechanism = \"digest-md5\", username = \"u\" }".to_owned(),
            "zookeeper.sasl",
            "exactly one of password_env and password_file",
        ),
        (
            "sasl = { mechanism = \"digest-md5\", username = \"u\", password_env = \"NOPE\" }"
                .to_owned(),
            "zookeeper.sasl.password_env",
            "NOPE is not set",
        ),
    ];
    for (extra, key, message) in cases {
        let err = parse_text(&zk(&extra)).expect_err(&extra);
        let text = err.to_string();
        assert!(
            text.contains(key) && text.contains(message),
            "{extra}: {text}"
        );
    }
    let config = parse_text(&zk(&format!(
        "sasl = {{ mechanism = \"DIGEST-MD5\", username = \"zkcron\", password_file = \"{}\" }}",
        password.display()
    )))
    .expect("valid");
    let sasl = config.zookeeper.sasl.clone().expect("sasl");
    assert_eq!(
        (sasl.username.as_str(), sasl.password.expose()),
        ("zkcron", "s3cret"),
        "the file's trailing newline is not part of the password"
    );
    assert!(!format!("{:?}", config.zookeeper).contains("s3cret"));
}

#[test]
fn named_tokens_are_read_hashed_and_a_bad_line_is_named_by_its_number() {
    let dir = tempfile::tempdir().expect("temp dir");
    let file = dir.path().join("tokens");
    let hash = "ab".repeat(32);
    std::fs::write(
        &file,
        format!("# comment\n\nops write {hash}\ndash read {hash}\n"),
    )
    .expect("tokens file");
    let config = parse_text(&format!(
        "{MINIMAL}[http]\nlisten = \"0.0.0.0:9464\"\ntokens_file = \"{}\"\n",
        file.display()
    ))
    .expect("valid: named tokens may listen beyond loopback");
    let tokens = config.http.expect("on").tokens;
    assert_eq!(
        tokens
            .iter()
            .map(|t| (t.name.as_str(), t.kind, t.sha256[0]))
            .collect::<Vec<_>>(),
        [
            ("ops", TokenKind::Write, 0xab),
            ("dash", TokenKind::Read, 0xab)
        ]
    );
    std::fs::write(&file, format!("ops write {hash}\nops admin {hash}\n")).expect("rewrite");
    let err = parse_text(&format!(
        "{MINIMAL}[http]\nlisten = \"127.0.0.1:1\"\ntokens_file = \"{}\"\n",
        file.display()
    ))
    .expect_err("a bad kind");
    let text = err.render();
    assert!(
        text.contains("http.tokens_file") && text.contains("tokens:2: expected NAME KIND SHA256"),
        "{text}"
    );
}

#[test]
fn a_job_joins_a_declared_group_and_a_node_carries_tags() {
    let groups = "[node]\ntags = [\"eu\", \"big\"]\n[[group]]\nname = \"billing\"\nrequires = [\"big\"]\n[[group]]\nname = \"mail\"\n";
    let job = |group: &str| {
        format!(
            "{MINIMAL}{groups}[[job]]\nname = \"j\"\nshell = \"true\"\n{group}\n[[job]]\nname = \"k\"\nshell = \"true\"\n"
        )
    };
    let config = parse_text(&job("group = \"billing\"")).expect("valid");
    assert!(config.grouped());
    assert_eq!(config.jobs[0].group.as_deref(), Some("billing"));
    assert_eq!(config.jobs[1].group, None, "no group: the default group");
    let names: Vec<&str> = config.groups.iter().map(|g| g.name.as_str()).collect();
    assert_eq!(names, ["billing", "mail"]);
    assert!(config.groups[0].requires.contains("big"));
    assert!(config.groups[1].requires.is_empty());
    assert_eq!(config.node.tags.len(), 2);
    assert_eq!(config.lock.rebalance_after, Duration::from_secs(30));
    let unknown = parse_text(&job("group = \"biling\""))
        .expect_err("refused")
        .render();
    assert!(
        unknown.contains("job \"j\": group: expected a declared [[group]]: billing, mail"),
        "{unknown}"
    );
    let none = parse_text(&format!(
        "{MINIMAL}[[job]]\nname = \"j\"\nshell = \"true\"\ngroup = \"x\"\n"
    ))
    .expect_err("refused")
    .render();
    assert!(none.contains("no [[group]] is declared"), "{none}");
    assert!(!parse_text(MINIMAL).expect("valid").grouped());
    for (bad, says) in [
        ("[[group]]\nname = \"a/b\"\n", "group \"a/b\": name"),
        (
            "[[group]]\nname = \"x\"\n[[group]]\nname = \"x\"\n",
            "duplicate group name",
        ),
        ("[node]\ntags = [\"a\", \"a\"]\n", "node.tags: named twice"),
        (
            "[[group]]\nname = \"default\"\n",
            "\"default\" is the group of the jobs without `group`",
        ),
        (
            "[[group]]\nname = \"x\"\nrequires = [\"\"]\n",
            "group \"x\": requires",
        ),
    ] {
        let err = parse_text(&format!("{MINIMAL}{bad}"))
            .expect_err(bad)
            .render();
        assert!(err.contains(says), "{bad}: {err}");
    }
    let zero = parse_text(&MINIMAL.replace("[lock]\n", "[lock]\nrebalance_after = \"0s\"\n"))
        .expect_err("refused")
        .render();
    assert!(zero.contains("lock.rebalance_after"), "{zero}");
}

#[test]
fn an_http_target_takes_its_headers_from_the_file_the_environment_and_a_file_and_hides_them() {
    let dir = tempfile::tempdir().expect("temp dir");
    let key_file = dir.path().join("key");
    std::fs::write(&key_file, "k-123\n").expect("write the key file");
    let text = format!(
        "{MINIMAL}[[job]]\nname = \"close\"\nhttp = {{ url = \"http://orders:8080/close\", \
         headers = {{ \"Content-Type\" = \"application/json\" }}, \
         headers_from_env = {{ Authorization = \"ZK_AUTH\" }}, \
         headers_from_file = {{ \"X-Api-Key\" = \"{}\" }}, body = \"{{}}\" }}\n",
        key_file.display()
    );
    let config = parse_text(&text).expect("valid");
    let job = &config.jobs[0];
    let Program::Http(target) = &job.spec.program else {
        panic!("an http target: {:?}", job.spec.program);
    };
    assert_eq!(target.method, "POST", "POST unless said");
    assert_eq!(target.url, "http://orders:8080/close");
    assert_eq!(target.body.as_deref(), Some(&b"{}"[..]));
    let headers: Vec<(&str, &str)> = target
        .headers
        .iter()
        .map(|(n, v)| (n.as_str(), v.as_str()))
        .collect();
    assert_eq!(
        headers,
        [
            ("Content-Type", "application/json"),
            ("Authorization", "user:s3cret"),
            ("X-Api-Key", "k-123"),
        ]
    );
    assert!(
        !format!("{:?}", job.spec).contains("s3cret"),
        "a secret header never shows in debug output"
    );
    // A secret that cannot be a header value is refused without being shown.
    std::fs::write(&key_file, "line one\nline two\n").expect("rewrite the key file");
    let refused = parse_text(&text).expect_err("refused").render();
    assert!(
        refused.contains("http.headers_from_file.X-Api-Key"),
        "{refused}"
    );
    assert!(!refused.contains("line one"), "{refused}");
}

#[test]
fn a_load_looks_up_on_this_host_only_what_its_lookups_say() {
    let text = "[zookeeper]\nconnect = \"zk:2181\"\nauth_env = \"ZK_AUTH\"\n\
                sasl = { mechanism = \"digest-md5\", username = \"u\", password_env = \"ZK_PASSWORD\" }\n\
                [lock]\nname = \"g\"\n\
                [http]\nlisten = \"0.0.0.0:8080\"\ntoken_env = \"HTTP_TOKEN\"\n\
                [defaults]\non_failure = [\"/nonexistent/notify\"]\n\
                on_failure_webhook = { url = \"https://hooks.example.com/\", token_env = \"HOOK_TOKEN\" }\n\
                [[job]]\nname = \"j\"\nhttp = { url = \"https://example.com/\", \
                headers_from_env = { X-Key = \"HEADER\" }, ca_file = \"/nonexistent/ca.pem\" }\n";
    let nothing_set = |_: &str| None;
    let contexts = |lookups| {
        let err = parse_with(Path::new("t.toml"), text, &nothing_set, lookups)
            .expect_err("something is missing");
        let mut contexts: Vec<String> = err.problems.into_iter().map(|p| p.context).collect();
        contexts.sort();
        contexts
    };
    assert_eq!(
        contexts(Lookups::All),
        [
            "defaults.on_failure",
            "defaults.on_failure_webhook.token_env",
            "http.token_env",
            "job \"j\": http.ca_file",
            "job \"j\": http.headers_from_env.X-Key",
            "zookeeper.auth_env",
            "zookeeper.sasl.password_env",
        ]
    );
    assert_eq!(
        contexts(Lookups::ZooKeeper),
        ["zookeeper.auth_env", "zookeeper.sasl.password_env"]
    );
    let alone = parse_with(Path::new("t.toml"), text, &nothing_set, Lookups::Nothing)
        .expect("the file alone is valid");
    // What was not looked up is left out, never made up.
    assert_eq!(alone.zookeeper.auth, None);
    assert!(alone.zookeeper.sasl.is_none());
    assert_eq!(alone.http.map(|http| http.token), Some(None));
    let Program::Http(target) = &alone.jobs[0].spec.program else {
        panic!("an http job");
    };
    assert!(target.headers.is_empty(), "{:?}", target.headers);
    // The keys' own checks still run on the file alone.
    let bad = text.replace(
        "0.0.0.0:8080\"\ntoken_env = \"HTTP_TOKEN\"",
        "0.0.0.0:8080\"",
    );
    let err = parse_with(Path::new("t.toml"), &bad, &nothing_set, Lookups::Nothing)
        .expect_err("beyond loopback without a token");
    assert_eq!(err.problems[0].context, "http.listen");
}

#[test]
fn defaults_give_every_job_its_policies_key_by_key_and_a_bad_one_is_told_once() {
    let text = format!(
        "{MINIMAL}[defaults]\ntimezone = \"Europe/Paris\"\ntimeout = \"1h\"\nretries = 2\n\
         retry_backoff = \"1m\"\nretry_backoff_max = \"10m\"\nstarting_deadline = \"2h\"\n\
         history = 7\nkill_grace = \"3s\"\nconcurrency = \"allow\"\nmisfire = \"skip\"\n\
         working_dir = \"/srv\"\nenv = {{ LANG = \"C\", TIER = \"prod\" }}\non_lost = \"finish\"\n\
         keep_output = \"always\"\non_interrupted = \"rerun\"\nmax_running = 3\n\
         dedup_window = \"2h\"\n\
         [[job]]\nname = \"takes\"\nschedule = \"@daily\"\nshell = \"true\"\n\
         [[job]]\nname = \"own\"\nschedule = \"@daily\"\nshell = \"true\"\ntimezone = \"UTC\"\n\
         retries = 0\nhistory = 50\nconcurrency = \"forbid\"\nenv = {{ TIER = \"dev\" }}\n\
         [[job]]\nname = \"hook\"\nhttp = {{ url = \"https://example.com/\" }}\n"
    );
    let config = parse_text(&text).expect("valid");
    let [takes, own, hook] = &config.jobs[..] else {
        panic!("three jobs");
    };
    assert_eq!(takes.timezone, chrono_tz::Europe::Paris);
    assert_eq!(takes.spec.timeout, Some(Duration::from_secs(3600)));
    assert_eq!(takes.spec.kill_grace, Duration::from_secs(3));
    assert_eq!((takes.retries, takes.history, takes.max_running), (2, 7, 3));
    assert_eq!(takes.retry_backoff, Duration::from_secs(60));
    assert_eq!(takes.retry_backoff_max, Duration::from_secs(600));
    assert_eq!(takes.starting_deadline, Duration::from_secs(7200));
    assert_eq!(takes.dedup_window, Duration::from_secs(7200));
    assert_eq!(takes.concurrency, Concurrency::Allow);
    assert_eq!(takes.misfire, Misfire::Skip);
    assert_eq!(takes.on_lost, OnLost::Finish);
    assert_eq!(takes.keep_output, KeepOutput::Always);
    assert_eq!(takes.on_interrupted, OnInterrupted::Rerun);
    assert_eq!(takes.spec.working_dir.as_deref(), Some(Path::new("/srv")));
    assert_eq!(takes.spec.env.get("TIER").map(String::as_str), Some("prod"));
    // A job's own key wins, one key at a time; its env wins variable by variable.
    assert_eq!(own.timezone, chrono_tz::UTC);
    assert_eq!((own.retries, own.history), (0, 50));
    assert_eq!(own.concurrency, Concurrency::Forbid);
    assert_eq!(own.spec.env.get("TIER").map(String::as_str), Some("dev"));
    assert_eq!(own.spec.env.get("LANG").map(String::as_str), Some("C"));
    assert_eq!(own.spec.timeout, Some(Duration::from_secs(3600)));
    // A process's keys are not an HTTP target's.
    assert_eq!(hook.spec.working_dir, None);
    assert!(hook.spec.env.is_empty());
    assert_eq!(hook.retries, 2);
    assert_eq!(
        config.defaults_shown[..3],
        [
            "timezone = \"Europe/Paris\"",
            "timeout = \"1h\"",
            "retries = 2"
        ]
    );

    // A bad default is one problem at its line, however many jobs take it.
    let bad = text
        .replace("history = 7", "history = 0")
        .replace("timezone = \"Europe/Paris\"", "timezone = \"Mars/Olympus\"");
    let err = parse_text(&bad).expect_err("bad defaults");
    let contexts: Vec<&str> = err.problems.iter().map(|p| p.context.as_str()).collect();
    assert_eq!(contexts, ["defaults.timezone", "defaults.history"]);

    // A job's backoff longer than the default's cap is named at the job's key.
    let longer = text.replace("retries = 0\n", "retries = 0\nretry_backoff = \"1h\"\n");
    let err = parse_text(&longer).expect_err("backoff beyond the default cap");
    assert_eq!(err.problems[0].context, "job \"own\": retry_backoff");
    assert!(
        err.problems[0]
            .message
            .contains("[defaults] retry_backoff_max (10m)")
    );
}

#[test]
fn drop_ins_add_per_host_keys_and_jobs_and_override_as_systemds_do() {
    let main = (
        PathBuf::from("/etc/zkcron/zkcron.toml"),
        format!("{MINIMAL}[[job]]\nname = \"shared\"\nschedule = \"@daily\"\nshell = \"true\"\n"),
    );
    let host = (
        PathBuf::from("/etc/zkcron/zkcron.d/10-host.toml"),
        "[lock]\nnode_id = \"db-1\"\n\n[node]\ntags = [\"big\"]\n\n\
         [[job]]\nname = \"local\"\nschedule = \"@hourly\"\nshell = \"true\"\n"
            .to_owned(),
    );
    let config =
        parse_files(vec![main.clone(), host.clone()], &|_| None, Lookups::All).expect("valid");
    assert_eq!(config.lock.name, "g", "the main file's key is kept");
    assert_eq!(
        config.lock.node_id.as_ref().map(|id| id.as_str()),
        Some("db-1")
    );
    assert_eq!(config.node.tags.iter().collect::<Vec<_>>(), ["big"]);
    let names: Vec<&str> = config
        .jobs
        .iter()
        .map(|job| job.spec.name.as_str())
        .collect();
    assert_eq!(names, ["shared", "local"]);
    assert_eq!(
        config.drop_ins,
        [(
            host.0.clone(),
            vec![
                "lock.node_id".to_owned(),
                "node.tags".to_owned(),
                "[[job]] \"local\"".to_owned()
            ]
        )]
    );

    // A second drop-in overrides as systemd's do: a table's key, and a job by its name, key by
    // key; an empty list unsets its key; the rest of the job stays the main file's.
    let again = (
        PathBuf::from("/etc/zkcron/zkcron.d/20-again.toml"),
        "# a comment\n[lock]\nname = \"other\"\n\n[node]\ntags = []\n\n\
         [[job]]\nname = \"shared\"\ntimeout = \"5m\"\nenabled = false\n"
            .to_owned(),
    );
    let config = parse_files(
        vec![main.clone(), host.clone(), again.clone()],
        &|_| None,
        Lookups::All,
    )
    .expect("a drop-in overrides");
    assert_eq!(config.lock.name, "other");
    assert!(config.node.tags.is_empty(), "an empty list unsets the tags");
    let shared = &config.jobs[0];
    assert_eq!(shared.spec.name.as_str(), "shared");
    assert_eq!(shared.spec.timeout, Some(Duration::from_secs(300)));
    assert!(!shared.enabled);
    assert_eq!(
        shared.schedule.as_ref().map(|s| s.expression()),
        Some("@daily"),
        "the keys it does not set stay"
    );
    assert_eq!(config.jobs.len(), 2, "no job added: {:?}", config.jobs);
    assert_eq!(
        config.drop_ins[1],
        (
            again.0.clone(),
            vec![
                "lock.name (overrides /etc/zkcron/zkcron.toml:4)".to_owned(),
                "node.tags (unset; was /etc/zkcron/zkcron.d/10-host.toml:5)".to_owned(),
                "[[job]] \"shared\".timeout".to_owned(),
                "[[job]] \"shared\".enabled".to_owned(),
            ]
        )
    );

    // Two jobs of one name in one file are still two declarations, refused.
    let twice = (
        PathBuf::from("/etc/zkcron/zkcron.d/30-twice.toml"),
        "[[job]]\nname = \"x\"\nshell = \"true\"\n[[job]]\nname = \"x\"\nshell = \"true\"\n"
            .to_owned(),
    );
    let err = parse_files(vec![main, host, twice], &|_| None, Lookups::All)
        .expect_err("a name declared twice in one file");
    assert!(err.render().contains("30-twice.toml"), "{}", err.render());
}

#[test]
fn after_names_declared_parents_and_refuses_cycles_schedules_and_parents_apart() {
    let job =
        |name: &str, rest: &str| format!("[[job]]\nname = \"{name}\"\nshell = \"true\"\n{rest}");
    let every = "schedule = \"*/5 * * * *\"\n";
    let text = format!(
        "{MINIMAL}{}{}{}{}",
        job("extract", every),
        job("clean", every),
        job("load", "after = [\"extract\"]\n"),
        job(
            "report",
            "after = [\"load\", \"clean\"]\nafter_status = \"finished\"\n"
        ),
    );
    let config = parse_text(&text).expect("valid");
    let after = |name: &str| {
        let job = config.jobs.iter().find(|j| j.spec.name.as_str() == name);
        job.and_then(|j| j.after.clone())
    };
    let load = after("load").expect("load follows extract");
    assert_eq!(load.parents, [crate::ids::JobName::new("extract")]);
    assert_eq!(load.status, AfterStatus::Succeeded, "the default");
    let report = after("report").expect("report follows two");
    assert_eq!(report.parents.len(), 2);
    assert_eq!(report.status, AfterStatus::Finished);
    assert!(after("extract").is_none());

    for (jobs, says) in [
        (
            job("load", "after = [\"extrct\"]\n") + &job("extract", every),
            "job \"load\": after: no job is named \"extrct\" (did you mean \"extract\"?)",
        ),
        (
            job("a", "after = [\"c\"]\n")
                + &job("b", "after = [\"a\"]\n")
                + &job("c", "after = [\"b\"]\n"),
            "job \"a\": after: `after` goes round in a cycle: a → b → c → a",
        ),
        (
            job("a", "after = [\"a\"]\n"),
            "`after` goes round in a cycle: a → a",
        ),
        (
            job("x", every) + &job("y", &format!("after = [\"x\"]\n{every}")),
            "job \"y\": schedule: a job with `after` runs after its parents",
        ),
        (
            job("x", every)
                + &job("z", "schedule = \"0 * * * *\"\n")
                + &job("y", "after = [\"x\", \"z\"]\n"),
            "the parents of a job with several must run on one schedule, so that their runs meet at the same instants: x on \"*/5 * * * *\" (UTC), z on \"0 * * * *\" (UTC)",
        ),
        (
            job("x", every) + &job("y", "after = [\"x\", \"x\"]\n"),
            "job \"y\": after: named twice",
        ),
        (
            job("x", every) + &job("y", "after_status = \"failed\"\n"),
            "job \"y\": after_status: only a job with `after` has an after_status",
        ),
        (
            job("x", every) + &job("y", "after = [\"x\"]\nafter_status = \"done\"\n"),
            "after_status",
        ),
    ] {
        let err = parse_text(&format!("{MINIMAL}{jobs}"))
            .expect_err(&jobs)
            .render();
        assert!(err.contains(says), "{jobs}\n{err}");
    }
}

#[test]
fn broadcast_takes_requires_and_refuses_what_it_cannot_keep() {
    let job =
        |name: &str, rest: &str| format!("[[job]]\nname = \"{name}\"\nshell = \"true\"\n{rest}");
    let every = "schedule = \"*/5 * * * *\"\n";
    let text = format!(
        "{MINIMAL}{}",
        job(
            "rotate",
            &format!("{every}broadcast = true\nrequires = [\"web\"]\n")
        )
    );
    let config = parse_text(&text).expect("valid");
    let broadcast = config.jobs[0].broadcast.clone().expect("a broadcast");
    assert_eq!(broadcast.requires, BTreeSet::from(["web".to_owned()]));
    assert!(broadcast.runs_on(&BTreeSet::from(["web".to_owned(), "eu".to_owned()])));
    assert!(!broadcast.runs_on(&BTreeSet::new()));
    for (jobs, says) in [
        (
            job("r", "broadcast = true\n"),
            "job \"r\": broadcast: only a job with a schedule runs on every node",
        ),
        (
            job("r", &format!("{every}requires = [\"web\"]\n")),
            "job \"r\": requires: only a broadcast job requires tags",
        ),
        (
            job("r", &format!("{every}broadcast = true\nretries = 2\n")),
            "job \"r\": retries: a broadcast job has no `retries`",
        ),
        (
            job(
                "r",
                &format!("{every}broadcast = true\nconcurrency = \"replace\"\n"),
            ),
            "job \"r\": concurrency: a broadcast job's concurrency is \"forbid\" or \"allow\"",
        ),
        (
            job("r", &format!("{every}broadcast = true\n")) + &job("c", "after = [\"r\"]\n"),
            "job \"c\": after: \"r\" is a broadcast job, run once per node: no job runs after it",
        ),
    ] {
        let err = parse_text(&format!("{MINIMAL}{jobs}"))
            .expect_err(&jobs)
            .render();
        assert!(err.contains(says), "{jobs}\n{err}");
    }
}

#[test]
fn after_status_admits_the_endings_it_names() {
    use crate::run::RunStatus::*;
    let admitted = |status: AfterStatus| {
        [
            Succeeded,
            Failed,
            TimedOut,
            Cancelled,
            Interrupted,
            Skipped,
            Missed,
        ]
        .into_iter()
        .filter(|s| status.admits(*s))
        .collect::<Vec<_>>()
    };
    assert_eq!(admitted(AfterStatus::Succeeded), [Succeeded]);
    assert_eq!(admitted(AfterStatus::Failed), [Failed, TimedOut]);
    assert_eq!(
        admitted(AfterStatus::Finished),
        [Succeeded, Failed, TimedOut]
    );
}

#[test]
fn calendars_are_declared_and_named_by_jobs_and_each_mistake_is_placed() {
    let dir = tempfile::tempdir().expect("temp dir");
    let ics = dir.path().join("holidays.ics");
    std::fs::write(
        &ics,
        "BEGIN:VCALENDAR\r\nVERSION:2.0\r\nPRODID:-//t//EN\r\nBEGIN:VEVENT\r\nUID:1\r\n\
         SUMMARY:Christmas\r\nDTSTART;VALUE=DATE:20261225\r\nEND:VEVENT\r\nEND:VCALENDAR\r\n",
    )
    .expect("write the ics");
    let calendars = format!(
        "[[calendar]]\nname = \"holidays\"\ntimezone = \"Europe/Berlin\"\ndates = [\"2026-12-24\"]\n\
         icalendar = \"{}\"\n\
         [[calendar]]\nname = \"office\"\nhours = [\"09:00-17:00\"]\nweekdays = [\"mon\", \"fri\"]\n",
        ics.display()
    );
    let job = "[[job]]\nname = \"j\"\nschedule = \"@hourly\"\nshell = \"true\"\n";
    let text = format!("{MINIMAL}{calendars}{job}except = [\"holidays\"]\nonly = [\"office\"]\n");
    let config = parse_text(&text).expect("valid");
    assert_eq!(config.calendars.len(), 2);
    let rule = &config.jobs[0].calendars;
    assert_eq!(rule.except[0].name, "holidays");
    let days = rule.except[0].days.clone().expect("days");
    let dates: Vec<String> = days.dates.iter().map(ToString::to_string).collect();
    assert_eq!(
        dates,
        ["2026-12-24", "2026-12-25"],
        "the listed day and the file's"
    );
    assert_eq!(rule.only[0].weekdays.as_ref().map(Vec::len), Some(2));

    for (bad, says) in [
        (
            "[[calendar]]\nname = \"c\"\ndates = [\"25.12.2026\"]\n".to_owned(),
            "calendar \"c\": dates: expected a day like \"2026-12-25\", not \"25.12.2026\"",
        ),
        (
            "[[calendar]]\nname = \"c\"\nhours = [\"9-17\"]\n".to_owned(),
            "calendar \"c\": hours: expected a daily window like \"09:00-17:00\"",
        ),
        (
            "[[calendar]]\nname = \"c\"\nweekdays = [\"funday\"]\n".to_owned(),
            "calendar \"c\": weekdays: expected a day of the week",
        ),
        (
            "[[calendar]]\nname = \"c\"\n".to_owned(),
            "a calendar needs dates, an icalendar file, hours or weekdays",
        ),
        (
            "[[calendar]]\nname = \"c\"\nhours = [\"09:00-10:00\"]\n[[calendar]]\nname = \"c\"\nhours = [\"09:00-10:00\"]\n".to_owned(),
            "duplicate calendar name",
        ),
        (
            "[[calendar]]\nname = \"c\"\nicalendar = \"/nonexistent/h.ics\"\n".to_owned(),
            "calendar \"c\": icalendar: cannot read /nonexistent/h.ics",
        ),
        (
            format!("{calendars}{job}except = [\"holidayz\"]\n"),
            "job \"j\": except: expected a declared [[calendar]]: holidays, office",
        ),
        (
            format!("{calendars}[[job]]\nname = \"j\"\nshell = \"true\"\nonly = [\"office\"]\n"),
            "job \"j\": only: only a job with a schedule skips ticks by calendar",
        ),
    ] {
        let err = parse_text(&format!("{MINIMAL}{bad}")).expect_err(&bad).render();
        assert!(err.contains(says), "{bad}\n{err}");
    }
    std::fs::write(&ics, "not a calendar").expect("write");
    let err = parse_text(&text).expect_err("refused").render();
    assert!(
        err.contains("icalendar: ") && err.contains("not an iCalendar file"),
        "{err}"
    );
}

/// Issue 51 §6: `check --json` gives a problem's table, element and key apart, read back from
/// the context every problem is named by.
#[test]
fn a_problems_context_reads_back_into_table_element_and_key() {
    let place = |context: &str| {
        Problem {
            span: None,
            context: context.to_owned(),
            message: String::new(),
            secret: false,
        }
        .place()
    };
    let part = |value: &str| Some(value.to_owned());
    assert_eq!(
        place("job \"nightly\": schedule"),
        ProblemPlace {
            table: part("job"),
            element: part("nightly"),
            key: part("schedule")
        }
    );
    assert_eq!(
        place("job \"nightly\""),
        ProblemPlace {
            table: part("job"),
            element: part("nightly"),
            key: None
        }
    );
    assert_eq!(
        place("job #3: name"),
        ProblemPlace {
            table: part("job"),
            element: part("#3"),
            key: part("name")
        }
    );
    assert_eq!(
        place("zookeeper.tls.ca"),
        ProblemPlace {
            table: part("zookeeper"),
            element: None,
            key: part("tls.ca")
        }
    );
    assert_eq!(
        place("[lock]"),
        ProblemPlace {
            table: part("lock"),
            ..ProblemPlace::default()
        }
    );
    assert_eq!(place(""), ProblemPlace::default());
}

/// Issue 51 §7: credentials close the nodes by default; `acl = "open"` stays possible and is
/// noted where it was written, for `check`'s warning; no credentials leave them open, noted
/// unless every server is on this host.
#[test]
fn credentials_close_the_nodes_unless_acl_opens_them_and_open_nodes_are_noted() {
    let with = |extra: &str| MINIMAL.replace("\"zk:2181\"", &format!("\"zk:2181\"\n{extra}"));
    let closed = parse_text(&with("auth_env = \"ZK_AUTH\"")).expect("valid");
    assert_eq!(closed.zookeeper.acl, AclPolicy::Creator);
    assert_eq!(closed.open_acl, None);

    let opened = parse_text(&with("auth_env = \"ZK_AUTH\"\nacl = \"open\"")).expect("valid");
    assert_eq!(opened.zookeeper.acl, AclPolicy::Open);
    let noted = opened.open_acl.expect("noted");
    assert_eq!(noted.written_at, Some((PathBuf::from("t.toml"), 4)));
    assert!(noted.why().contains("forge run records"), "{}", noted.why());

    let bare = parse_text(MINIMAL).expect("valid");
    assert_eq!(bare.zookeeper.acl, AclPolicy::Open);
    assert_eq!(bare.open_acl.expect("noted").written_at, None);
    let here = parse_text(&MINIMAL.replace("zk:2181", "127.0.0.1:2181")).expect("valid");
    assert_eq!(here.open_acl, None, "an ensemble on this host alone");
}

#[test]
fn read_acl_names_identities_zookeeper_can_match_and_only_for_closed_nodes() {
    let with = |extra: &str| MINIMAL.replace("\"zk:2181\"", &format!("\"zk:2181\"\n{extra}"));
    let hash = "Fm04VrRMroWEJ2V8ZbiiLN2KzCo=";
    let config = parse_text(&with(&format!(
        "auth_env = \"ZK_AUTH\"\nread_acl = [\"digest:grafana:{hash}\", \"sasl:viewer\"]"
    )))
    .expect("valid");
    let ids: Vec<(&str, &str)> = config
        .zookeeper
        .read_acl
        .iter()
        .map(|id| (id.scheme.as_str(), id.id.as_str()))
        .collect();
    let digest = format!("grafana:{hash}");
    assert_eq!(ids, [("digest", digest.as_str()), ("sasl", "viewer")]);
    assert_eq!(
        config.zookeeper.settings().read_acl,
        config.zookeeper.read_acl
    );

    let unhashed = parse_text(&with(
        "auth_env = \"ZK_AUTH\"\nread_acl = [\"digest:grafana\"]",
    ))
    .expect_err("refused");
    assert!(
        unhashed.render().contains("openssl dgst -binary -sha1"),
        "{}",
        unhashed.render()
    );
    let open = parse_text(&with("read_acl = [\"sasl:viewer\"]")).expect_err("refused");
    assert!(
        open.render().contains("read_acl applies to closed nodes"),
        "{}",
        open.render()
    );
}

/// Issue 52: `[telemetry]` is off unless written; its endpoint is a base URL, its resource
/// attributes are kept as written, and `service.name` has its own key.
#[test]
fn telemetry_is_off_by_default_and_its_endpoint_is_a_base_url() {
    assert_eq!(parse_text(MINIMAL).expect("valid").telemetry, None);
    let text = format!(
        "{MINIMAL}[telemetry]\nendpoint = \"http://otel:4318/\"\n\
         resource = {{ \"deployment.environment.name\" = \"prod\" }}\n"
    );
    assert_eq!(
        parse_text(&text).expect("valid").telemetry,
        Some(TelemetryConfig {
            endpoint: "http://otel:4318".into(),
            service_name: "zkcron".into(),
            resource: vec![("deployment.environment.name".into(), "prod".into())],
        })
    );
    for (section, context) in [
        ("endpoint = \"otel:4318\"", "telemetry.endpoint"),
        ("endpoint = \"grpc://otel:4317\"", "telemetry.endpoint"),
        ("endpoint = \"http://otel:4318?x=1\"", "telemetry.endpoint"),
        (
            "endpoint = \"http://otel:4318\"\nservice_name = \" \"",
            "telemetry.service_name",
        ),
        (
            "endpoint = \"http://otel:4318\"\nresource = { \"service.name\" = \"x\" }",
            "telemetry.resource",
        ),
        ("service_name = \"x\"", "telemetry"),
        ("endpoint = \"http://otel:4318\"\nheaders = 1", "telemetry"),
    ] {
        let err = parse_text(&format!("{MINIMAL}[telemetry]\n{section}\n")).expect_err(section);
        let contexts: Vec<&str> = err.problems.iter().map(|p| p.context.as_str()).collect();
        assert!(
            contexts.iter().any(|c| c.contains(context)),
            "{section}: {contexts:?}"
        );
    }
}

/// Issue 52: `[output]` has sizes as people write them, an absolute directory, and bounds that
/// hold one whole run.
#[test]
fn output_is_bounded_in_sizes_people_write() {
    let defaults = parse_text(MINIMAL).expect("valid").output;
    assert_eq!(defaults, OutputConfig::default());
    assert_eq!(
        defaults.dir, None,
        "kept only where systemd or the file says"
    );
    let text = format!(
        "{MINIMAL}[output]\ndir = \"/srv/zkcron/output\"\nkeep_size = \"2 GiB\"\n\
         keep_for = \"3d\"\nper_run = \"4MiB\"\n"
    );
    assert_eq!(
        parse_text(&text).expect("valid").output,
        OutputConfig {
            dir: Some("/srv/zkcron/output".into()),
            keep_size: 2 << 30,
            keep_for: std::time::Duration::from_secs(3 * 86_400),
            per_run: 4 << 20,
        }
    );
    for (section, context, said) in [
        ("dir = \"output\"", "output.dir", "absolute"),
        ("per_run = \"lots\"", "output.per_run", "a size like"),
        ("per_run = \"64KiB\"", "output.per_run", "at least"),
        (
            "keep_size = \"8MiB\"",
            "output.keep_size",
            "at least per_run",
        ),
        ("keep_for = \"a while\"", "output.keep_for", "a duration"),
        ("keep_for = 3", "output", "duration"),
        ("size = \"1GiB\"", "output", "unknown"),
    ] {
        let err = parse_text(&format!("{MINIMAL}[output]\n{section}\n")).expect_err(section);
        assert!(
            err.problems
                .iter()
                .any(|p| p.context.contains(context) && p.message.contains(said)),
            "{section}: {:?}",
            err.problems
        );
    }
}

#[test]
fn the_delayed_queue_stays_in_zookeeper_unless_postgres_is_asked_for_with_a_dsn_from_outside_the_file()
 {
    use super::DelayedStore;
    assert_eq!(
        parse_text(MINIMAL).expect("valid").delayed,
        DelayedStore::ZooKeeper
    );
    let from_env = parse_text(&format!(
        "{MINIMAL}[delayed]\nstore = \"postgres\"\ndsn_env = \"PG_DSN\"\n"
    ))
    .expect("valid");
    let DelayedStore::Postgres { dsn: Some(dsn), .. } = from_env.delayed else {
        panic!("postgres with its DSN: {:?}", from_env.delayed);
    };
    assert_eq!(dsn.expose(), "host=db.internal user=zkcron password=s3cret");
    let dir = tempfile::tempdir().expect("temp dir");
    let file = dir.path().join("dsn");
    std::fs::write(&file, "host=/run/pg dbname=zkcron\n").expect("dsn file");
    let from_file = parse_text(&format!(
        "{MINIMAL}[delayed]\nstore = \"postgres\"\ndsn_file = \"{}\"\n",
        file.display()
    ))
    .expect("valid");
    let DelayedStore::Postgres { dsn: Some(dsn), .. } = from_file.delayed else {
        panic!("postgres with its DSN: {:?}", from_file.delayed);
    };
    assert_eq!(dsn.expose(), "host=/run/pg dbname=zkcron", "trimmed");
}

#[test]
fn delayed_refusals_name_the_key_and_what_was_expected() {
    let cases = [
        (
            "store = \"redis\"",
            "delayed.store",
            "expected \"zookeeper\" or \"postgres\"",
        ),
        ("store = \"postgres\"", "delayed.store", "needs its DSN"),
        (
            "store = \"postgres\"\ndsn_env = \"NOPE\"",
            "delayed.dsn_env",
            "NOPE is not set",
        ),
        (
            "store = \"postgres\"\ndsn_file = \"/nonexistent/dsn\"",
            "delayed.dsn_file",
            "cannot read DSN file /nonexistent/dsn",
        ),
        (
            "store = \"postgres\"\ndsn_env = \"ZK_AUTH\"\ndsn_file = \"/d\"",
            "delayed.dsn_env",
            "not both",
        ),
        (
            "dsn_env = \"ZK_AUTH\"",
            "delayed.dsn_env",
            "only read with store = \"postgres\"",
        ),
        (
            "store = \"postgres\"\ndsn = \"host=x\"",
            "delayed.dsn",
            "unknown key `dsn`",
        ),
        (
            "store = \"postgres\"\ndsn_env = \"ZK_AUTH\"",
            "delayed.dsn",
            "not a PostgreSQL connection string",
        ),
        (
            "store = \"postgres\"\ndsn_env = \"PG_DSN_TLS\"",
            "delayed.dsn",
            "sslmode=require: set [delayed] tls",
        ),
        (
            "tls = { ca = \"/nonexistent/ca.pem\" }",
            "delayed.tls",
            "only read with store = \"postgres\"",
        ),
        (
            "store = \"postgres\"\ndsn_env = \"PG_DSN\"\ntls = { ca = \"/nonexistent/ca.pem\" }",
            "delayed.tls.ca",
            "cannot read /nonexistent/ca.pem",
        ),
    ];
    for (delayed, key, message) in cases {
        let err = parse_text(&format!("{MINIMAL}[delayed]\n{delayed}\n")).expect_err(delayed);
        let text = err.to_string();
        assert!(
            text.contains(key) && text.contains(message) && !text.contains("s3cret"),
            "{delayed}: {text}"
        );
    }
    let grouped = format!(
        "{MINIMAL}[[group]]\nname = \"b\"\n[delayed]\nstore = \"postgres\"\ndsn_env = \"PG_DSN\"\n"
    );
    // Each group's owner claims from the fleet's one queue, behind its own fence.
    let config = parse_text(&grouped).expect("the store with groups");
    assert!(matches!(config.delayed, DelayedStore::Postgres { .. }));
}
