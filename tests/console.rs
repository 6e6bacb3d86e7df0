//! The web console in a real browser (issue 21): headless Chromium against three real nodes on
//! the shared three-server ZooKeeper ensemble. The page is driven as a person would drive it; the
//! jobs' own output and the ledger are the proof of what it did.
//!
//! With `ZKCRON_CONSOLE_SCREENSHOTS=docs/console`, the run keeps its screenshots there (the ones
//! in docs/ and the README are made so); without, they are only checked to be PNGs.

use crate::support;

use std::path::Path;
use std::time::Duration;

use support::browser::Browser;
use support::daemon::{
    DELAY, DaemonNode, RECORD_FIRE, SESSION, SLACK, logs_of, now_ms, read_fires, schedule_text,
};
use support::http::{logged_port, request};
use support::{shared_ensemble, unique_chroot, wait_for, wait_until};

const TOKEN: &str = "console-t0ken";
/// The page refreshes every 2 s; an answer or a change shows within this, on a loaded machine.
const PAGE: Duration = Duration::from_secs(10);
/// A node starts, joins and (the first) owns within this.
const START: Duration = Duration::from_secs(20);
/// Markup where the page shows text: a pause reason and a payload. Run as script, it would set
/// `window.__xss`.
const REASON: &str = "<script>window.__xss = 1</script> deploy";
const PAYLOAD: &str = "<img src=x onerror=\"window.__xss = 2\">";
/// What the `report` job prints: its whole output is shown as text.
const OUTPUT: &str = "<b>report</b> done";

fn schedule(dir: &Path) -> String {
    let token = dir.join("http.token");
    std::fs::write(&token, format!("{TOKEN}\n")).expect("token file");
    let jobs = format!(
        "[http]\nlisten = \"127.0.0.1:0\"\ntoken_file = \"{}\"\n\n\
         [[job]]\nname = \"tick\"\nschedule = \"* * * * * *\"\nshell = '{RECORD_FIRE}{}'\n\n\
         [[job]]\nname = \"report\"\n\
         shell = 'cat > {}/report-$ZKCRON_SUBMISSION_ID.out; echo \"{OUTPUT}\"'\n\n\
         [[job]]\nname = \"after-tick\"\nafter = [\"tick\"]\nshell = \"true\"\n\n\
         [[job]]\nname = \"everywhere\"\nschedule = \"0 0 3 * * *\"\nbroadcast = true\n\
         requires = [\"web\"]\nshell = \"true\"\n",
        token.display(),
        dir.join("fires.log").display(),
        dir.display()
    );
    let connect = shared_ensemble().connect_string_with_chroot(&unique_chroot("console"));
    schedule_text(&connect, "console", SESSION, DELAY, &jobs)
}

/// Keeps `name`.png where `ZKCRON_CONSOLE_SCREENSHOTS` says, after checking it is a PNG.
async fn screenshot(browser: &Browser, name: &str) {
    let png = browser.screenshot().await;
    assert!(
        png.starts_with(b"\x89PNG\r\n\x1a\n") && png.len() > 10_000,
        "{name}: not a screenshot ({} bytes)",
        png.len()
    );
    if let Some(dir) = std::env::var_os("ZKCRON_CONSOLE_SCREENSHOTS") {
        let dir = Path::new(&dir);
        std::fs::create_dir_all(dir).expect("screenshot dir");
        std::fs::write(dir.join(format!("{name}.png")), png).expect("keep the screenshot");
    }
}

/// Presses the step's button in the page, confirms it, and returns the answer the page shows.
async fn steer(browser: &Browser, button: &str, reason: Option<&str>, answer: &str) -> String {
    browser.click(button).await;
    if let Some(reason) = reason {
        browser.type_into("#confirm-reason", reason).await;
    }
    browser.click("#confirm-ok").await;
    browser
        .wait_text(answer, "#answer", PAGE, |text| text.contains(answer))
        .await
}

async fn no_script_ran(browser: &Browser) {
    assert_eq!(
        browser.js("return window.__xss === undefined;").await,
        serde_json::Value::Bool(true),
        "markup from ZooKeeper ran as script"
    );
}

#[tokio::test]
async fn the_console_shows_and_steers_a_live_cluster_through_a_failover() {
    let dir = tempfile::tempdir().expect("temp dir");
    let text = schedule(dir.path());
    let mut first = DaemonNode::start_with_env(
        dir.path(),
        "n1",
        &text,
        &[("STATE_DIRECTORY", &dir.path().join("state-n1"))],
    );
    first.wait_log("lock acquired", START).await;
    let second = DaemonNode::start_with_env(
        dir.path(),
        "n2",
        &text,
        &[("STATE_DIRECTORY", &dir.path().join("state-n2"))],
    );
    let third = DaemonNode::start_with_env(
        dir.path(),
        "n3",
        &text,
        &[("STATE_DIRECTORY", &dir.path().join("state-n3"))],
    );
    third.wait_log("http listener up", START).await;
    let port = logged_port(&third.log()).expect("n3's port in its log");

    // Served by the binary, with the headers that keep it safe.
    let page = request(port, "GET", "/console/", None, None).await;
    assert_eq!(page.status, 200, "{page:?}");
    for header in [
        "content-security-policy: default-src 'none'; script-src 'self'; style-src 'self'",
        "frame-ancestors 'none'",
        "x-content-type-options: nosniff",
    ] {
        assert!(page.headers.contains(header), "{header} in {page:?}");
    }

    let browser = Browser::start(1280, 860).await;
    let base = format!("http://127.0.0.1:{port}/console/");
    // The overview, from n3's listener, names the owner n1.
    browser.goto(&base).await;
    browser
        .wait_text("n1 shown as the owner", ".group .owner", PAGE, |t| {
            t == "n1"
        })
        .await;
    let first_token: i64 = browser
        .text(".group .token")
        .await
        .and_then(|t| t.parse().ok())
        .expect("the fencing token on the overview");
    screenshot(&browser, "overview").await;

    // The token is typed once, with a name for the records.
    browser.click("#sign-in").await;
    browser.type_into("#token-input", TOKEN).await;
    browser.type_into("#actor-input", "alice").await;
    browser.click("#token-save").await;
    browser
        .wait_text("signed in", "#who", PAGE, |t| t.contains("alice"))
        .await;

    // Pause through the page: the reason is markup, shown as text; the job fires nothing.
    browser.goto(&format!("{base}#/jobs")).await;
    // A per-second job's newest run may be going at any poll: the row's strip of runs shows one
    // that succeeded, and its newest-run cell names the owner that ran it.
    browser
        .wait_text(
            "a succeeded run in tick's row",
            r#"tr[data-job="tick"] .strip .s-succeeded"#,
            PAGE,
            |_| true,
        )
        .await;
    browser
        .wait_text(
            "tick's newest run",
            r#"tr[data-job="tick"] .last"#,
            PAGE,
            |t| t.contains("n1"),
        )
        .await;
    // A chained job shows whom it follows where a schedule would be (issue 36).
    browser
        .wait_text(
            "after-tick's parents",
            r#"tr[data-job="after-tick"] .after"#,
            PAGE,
            |t| t == "after tick (succeeded)",
        )
        .await;
    // A broadcast job says on which nodes it runs, and offers no trigger.
    browser
        .wait_text(
            "everywhere's nodes",
            r#"tr[data-job="everywhere"] .broadcast"#,
            PAGE,
            |t| t == "on every node tagged web",
        )
        .await;
    assert_eq!(
        browser
            .text(r#"button[data-key="trigger:everywhere"]"#)
            .await,
        None,
        "nothing to trigger on a broadcast job"
    );
    assert!(
        browser
            .text(r#"button[data-key="trigger:tick"]"#)
            .await
            .is_some(),
        "a scheduled job's trigger is there"
    );
    screenshot(&browser, "jobs").await;
    let paused = steer(
        &browser,
        r#"button[data-key="pause:tick"]"#,
        Some(REASON),
        "tick paused",
    )
    .await;
    let paused_at = now_ms();
    assert!(
        paused.contains("alice (http:127.0.0.1)"),
        "who paused it, as recorded: {paused}"
    );
    browser
        .wait_text(
            "the reason, as text",
            r#"tr[data-job="tick"] td"#,
            PAGE,
            |t| t.contains(REASON),
        )
        .await;
    no_script_ran(&browser).await;
    let refused = steer(
        &browser,
        r#"button[data-key="trigger:tick"]"#,
        None,
        "refused",
    )
    .await;
    assert!(
        refused.contains("paused"),
        "the refusal says why: {refused}"
    );
    // "Fires nothing" can only be seen over time: four ticks' worth. A tick claimed ahead of the
    // pause (claim_ahead) may still start within its first second.
    let fires = dir.path().join("fires.log");
    tokio::time::sleep(Duration::from_secs(4)).await;
    let late: Vec<_> = read_fires(&fires)
        .into_iter()
        .filter(|fire| fire.scheduled_ms > paused_at + 1000)
        .collect();
    assert!(
        late.is_empty(),
        "fired while paused: {late:?}\n{}",
        logs_of(&[&first, &second, &third])
    );

    let resumed = steer(
        &browser,
        r#"button[data-key="resume:tick"]"#,
        None,
        "tick resumed",
    )
    .await;
    let resumed_at = now_ms();
    assert!(resumed.contains("resumed"), "{resumed}");
    wait_until("a tick after the resume", PAGE, || {
        let fired = read_fires(&fires)
            .iter()
            .any(|fire| fire.scheduled_ms > resumed_at);
        async move { fired }
    })
    .await;

    // The audit page lists what was done through the page, and by whom: the pause, the
    // refused trigger and the resume.
    browser.goto(&format!("{base}#/audit")).await;
    browser
        .wait_text(
            "the pause in the audit trail",
            r#"#audit tr[data-action="pause"]"#,
            PAGE,
            |t| t.contains("alice (http:127.0.0.1)") && t.contains("console") && t.contains(REASON),
        )
        .await;
    browser
        .wait_text(
            "the refused trigger, with why",
            r#"#audit tr[data-action="trigger"]"#,
            PAGE,
            |t| t.contains("paused"),
        )
        .await;
    no_script_ran(&browser).await;
    screenshot(&browser, "audit").await;

    // Trigger an on-demand job: one run appears on its page.
    browser.goto(&format!("{base}#/jobs/report")).await;
    let triggered = steer(
        &browser,
        r#"button[data-key="trigger:report"]"#,
        None,
        "report triggered",
    )
    .await;
    let id = triggered
        .split("submission ")
        .nth(1)
        .map(|rest| rest.trim_end_matches('.').to_owned())
        .expect("the trigger's submission id in the answer");
    let ran = dir.path().join(format!("report-{id}.out"));
    wait_until("the triggered run", PAGE, || {
        let exists = ran.exists();
        async move { exists }
    })
    .await;
    browser
        .wait_text("one run on report's page", "#runs tbody", PAGE, |t| {
            t.contains("succeeded")
        })
        .await;
    assert_eq!(
        browser
            .js("return document.querySelectorAll('#runs tbody tr').length;")
            .await,
        serde_json::json!(1),
        "one trigger, one run"
    );
    // Its whole output, kept by n1 that ran it and passed on by n3 that serves the page: text.
    browser.click("#runs a.output-link").await;
    let output = browser
        .wait_text("report's whole output", "#output", PAGE, |t| {
            t.contains("ended: exited with code 0")
        })
        .await;
    assert!(output.contains(&format!("stdout {OUTPUT}")), "{output}");
    assert_eq!(
        browser
            .js("return document.querySelectorAll('#output b').length;")
            .await,
        serde_json::json!(0),
        "output is shown as text"
    );
    no_script_ran(&browser).await;
    screenshot(&browser, "run-output").await;

    // A submission appears pending, then with its outcome; its payload is shown as text.
    let body = serde_json::json!({ "in": "5s", "id": "order-7", "payload": PAYLOAD }).to_string();
    let submitted = request(
        port,
        "POST",
        "/v1/jobs/report/submissions",
        Some(TOKEN),
        Some(&body),
    )
    .await;
    assert_eq!(submitted.status, 201, "{submitted:?}");
    browser.goto(&format!("{base}#/submissions")).await;
    browser
        .wait_text(
            "order-7 pending",
            r#"#pending tr[data-submission="order-7"]"#,
            PAGE,
            |t| t.contains("report"),
        )
        .await;
    screenshot(&browser, "submissions").await;
    browser
        .wait_text(
            "order-7's outcome",
            r#"#recent tr[data-submission="order-7"]"#,
            Duration::from_secs(5) + PAGE,
            |t| t.contains("succeeded"),
        )
        .await;
    browser.goto(&format!("{base}#/submissions/order-7")).await;
    browser
        .wait_text("the payload, as text", "#payload", PAGE, |t| t == PAYLOAD)
        .await;
    no_script_ran(&browser).await;
    assert_eq!(
        std::fs::read_to_string(dir.path().join("report-order-7.out")).ok(),
        Some(PAYLOAD.to_owned()),
        "the run got the payload"
    );

    // Cancel a pending submission.
    let later = serde_json::json!({ "in": "1h", "id": "order-8" }).to_string();
    let submitted = request(
        port,
        "POST",
        "/v1/jobs/report/submissions",
        Some(TOKEN),
        Some(&later),
    )
    .await;
    assert_eq!(submitted.status, 201, "{submitted:?}");
    browser.goto(&format!("{base}#/submissions")).await;
    steer(
        &browser,
        r#"button[data-key="cancel:order-8"]"#,
        None,
        "Submission order-8 cancelled.",
    )
    .await;
    wait_for("order-8 gone from the pending list", PAGE, || async {
        let pending = browser
            .js(r#"return document.querySelector('#pending tr[data-submission="order-8"]') === null;"#)
            .await;
        (pending == serde_json::Value::Bool(true)).then_some(())
    })
    .await;

    // kill -9 of the owner: the page, never reloaded, shows the new owner and the missed gap.
    browser
        .js("location.hash = '#/'; window.__sameDocument = 42;")
        .await;
    browser
        .wait_text("n1 still the owner", ".group .owner", PAGE, |t| t == "n1")
        .await;
    first.kill();
    let owner = browser
        .wait_text(
            "a new owner on the page",
            ".group .owner",
            SESSION + DELAY + SLACK + PAGE,
            |t| t == "n2" || t == "n3",
        )
        .await;
    let token: i64 = browser
        .text(".group .token")
        .await
        .and_then(|t| t.parse().ok())
        .expect("the new fencing token");
    assert!(
        token > first_token,
        "{owner} owns with token {token} after {first_token}"
    );
    browser.js("location.hash = '#/jobs/tick';").await;
    let gap = browser
        .wait_text("the missed gap", "#runs tr.gap", PAGE, |t| {
            t.contains("not fired")
        })
        .await;
    assert!(
        gap.contains("missed"),
        "{gap}\n{}",
        logs_of(&[&second, &third])
    );
    screenshot(&browser, "job-runs").await;
    assert_eq!(
        browser.js("return window.__sameDocument;").await,
        serde_json::json!(42),
        "the page was reloaded"
    );

    // On a phone's width the page does not scroll sideways: wide tables scroll in their box.
    browser
        .client
        .set_window_size(390, 844)
        .await
        .expect("a phone's window");
    browser.js("location.hash = '#/jobs';").await;
    browser
        .wait_text("the jobs table", "#jobs tbody", PAGE, |t| {
            t.contains("tick")
        })
        .await;
    assert_eq!(
        browser
            .js("return document.documentElement.scrollWidth <= window.innerWidth;")
            .await,
        serde_json::Value::Bool(true),
        "the page scrolls sideways on a phone"
    );
    browser.close().await;
}
