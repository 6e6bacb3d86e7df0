//! OpenTelemetry (issue 52), end to end: a real `zkcron run` with `[telemetry]` sends its runs'
//! spans to a real OTLP/HTTP receiver (`support::otlp`, decoding with the official protobuf
//! messages), and gives each attempt's span to the job: the `traceparent` header to an HTTP
//! target (`support::receiver` records it), `TRACEPARENT` to a process.
#![allow(
    clippy::await_holding_lock,
    reason = "each #[tokio::test] has its own runtime and thread"
)]

use crate::support;

use std::path::Path;
use std::time::Duration;

use support::daemon::{DaemonNode, schedule_text, zkcron_ok};
use support::otlp::{OtlpReceiver, ReceivedSpan};
use support::receiver::Receiver;
use support::zk_cluster::try_wait_for;
use support::{shared_ensemble, unique_chroot};

const SESSION: Duration = Duration::from_secs(2);
const DELAY: Duration = Duration::from_secs(2);
/// Process start, a JVM pause or a busy core, on bounds that are otherwise exact.
const SLACK: Duration = Duration::from_secs(3);
/// The batch processor's delay, lowered for the test (`OTEL_BSP_SCHEDULE_DELAY`, in ms).
const EXPORT_EVERY: &str = "200";

/// A run's spans: its attempts' (oldest first) and its own, once all have come.
async fn spans_of_run(
    otlp: &OtlpReceiver,
    run_id: &str,
    attempts: usize,
    node: &DaemonNode,
) -> (Vec<ReceivedSpan>, ReceivedSpan) {
    let found = try_wait_for(&format!("the spans of {run_id}"), SLACK * 3, || {
        let spans: Vec<ReceivedSpan> = otlp
            .spans()
            .into_iter()
            .filter(|span| span.attribute("zkcron.run_id") == run_id)
            .collect();
        let (mut tried, run): (Vec<_>, Vec<_>) = spans
            .into_iter()
            .partition(|span| !span.attribute("zkcron.attempt").is_empty());
        tried.sort_by_key(|span| span.attribute("zkcron.attempt").to_owned());
        let done = match &run[..] {
            [run] if tried.len() == attempts => Some((tried, run.clone())),
            _ => None,
        };
        async move { done }
    })
    .await;
    found.unwrap_or_else(|not_reached| {
        panic!(
            "{not_reached}: {:#?}\nrefused: {:?}\n{}",
            otlp.spans(),
            otlp.refused(),
            node.log_tail()
        )
    })
}

/// Waits (up to `within`) for `job`'s newest record to say `succeeded`, and returns it.
async fn succeeded(job: &str, within: Duration, node: &DaemonNode) -> serde_json::Value {
    try_wait_for(&format!("{job} succeeded"), within, || {
        let record = newest(job, &node.config);
        let done = (record["status"] == "succeeded").then_some(record);
        async move { done }
    })
    .await
    .unwrap_or_else(|not_reached| panic!("{not_reached}\n{}", node.log_tail()))
}

/// The newest record of `job`.
fn newest(job: &str, config: &Path) -> serde_json::Value {
    support::daemon::history_records(job, &[], config)
        .into_iter()
        .next()
        .unwrap_or_default()
}

/// A delivery tried twice and a process run once: each attempt's span is the child of its run's
/// span, in the trace its record names; the job is given its attempt's span (header,
/// environment); every span says which node and which fencing token fired it, and the lock's
/// acquisition under that token is a span too.
#[tokio::test]
async fn each_attempt_is_a_span_of_its_runs_trace_and_the_job_is_given_it() {
    let otlp = OtlpReceiver::start().await;
    let target = Receiver::start().await;
    let dir = tempfile::tempdir().expect("temp dir");
    let seen_by_process = dir.path().join("traceparent");
    let connect = shared_ensemble().connect_string_with_chroot(&unique_chroot("telemetry"));
    let jobs = format!(
        "[[job]]\nname = \"flaky\"\nretries = 1\nretry_backoff = \"500ms\"\n\
         http = {{ url = \"{}/fail-then-ok\" }}\n\n\
         [[job]]\nname = \"local\"\nshell = \"echo \\\"$TRACEPARENT\\\" > {}\"\n\n\
         [[job]]\nname = \"tick\"\nschedule = \"* * * * * *\"\nshell = \"true\"\n\n\
         [[job]]\nname = \"child\"\nafter = [\"tick\"]\nshell = \"true\"\n\n\
         [telemetry]\nendpoint = \"{}\"\nservice_name = \"zkcron-test\"\n\
         resource = {{ \"deployment.environment.name\" = \"test\" }}\n",
        target.base,
        seen_by_process.display(),
        otlp.endpoint
    );
    let text = schedule_text(&connect, "telemetry", SESSION, DELAY, &jobs);
    let node = DaemonNode::start_with_env(
        dir.path(),
        "t1",
        &text,
        &[("OTEL_BSP_SCHEDULE_DELAY", Path::new(EXPORT_EVERY))],
    );
    node.wait_log("lock acquired", SESSION + SLACK).await;
    zkcron_ok(
        &["submit", "flaky", "--in", "0s", "--id", "f1"],
        &node.config,
    );
    // The submitter's own trace: the run's span links to it.
    let submitter = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    let refused = support::daemon::zkcron(
        &[
            "submit",
            "local",
            "--in",
            "0s",
            "--traceparent",
            "00-nope-01",
        ],
        &node.config,
    );
    let said = support::daemon::assert_exit(&refused, 2);
    assert!(said.contains("not a W3C trace context"), "{said}");
    let args = [
        "submit",
        "local",
        "--in",
        "0s",
        "--id",
        "l1",
        "--traceparent",
        submitter,
    ];
    zkcron_ok(&args, &node.config);

    let record = succeeded("flaky", SLACK * 3, &node).await;
    let run_id = record["run_id"].as_str().expect("a run id");
    let stored = record["trace"].as_str().expect("the run's trace is stored");
    let (trace_id, run_span_id) = stored.split_once('-').expect("<trace>-<span>");

    let (attempts, run) = spans_of_run(&otlp, run_id, 2, &node).await;
    assert!(otlp.refused().is_empty(), "{:?}", otlp.refused());
    assert_eq!(
        (
            run.name.as_str(),
            run.trace_id.as_str(),
            run.span_id.as_str()
        ),
        ("flaky", trace_id, run_span_id),
        "the run's span has the ids its first claim stored"
    );
    assert_eq!(run.parent_span_id, "", "the run's span is the trace's root");
    assert_eq!(run.attribute("cicd.pipeline.result"), "success");
    assert_eq!(run.attribute("zkcron.attempts"), "2");
    assert!(run.start_unix_ns <= run.end_unix_ns);
    let results: Vec<&str> = attempts
        .iter()
        .map(|span| span.attribute("cicd.pipeline.result"))
        .collect();
    assert_eq!(results, ["failure", "success"]);
    assert_eq!(attempts[0].attribute("http.response.status_code"), "500");
    assert_eq!(
        attempts[0].status_code, 2,
        "a failed attempt's status is error"
    );
    let token = record["fencing_token"].to_string();
    for span in attempts.iter().chain([&run]) {
        assert_eq!(span.trace_id, trace_id, "one trace: {span:?}");
        assert_eq!(span.attribute("zkcron.node"), "t1");
        assert_eq!(span.attribute("zkcron.fencing_token"), token);
        assert_eq!(span.attribute("zkcron.group"), "default");
        assert_eq!(span.attribute("messaging.message.id"), "f1");
        assert_eq!(
            span.resource.get("service.name").map(String::as_str),
            Some("zkcron-test")
        );
        assert_eq!(
            span.resource
                .get("deployment.environment.name")
                .map(String::as_str),
            Some("test")
        );
    }
    let acquired: Vec<ReceivedSpan> = otlp
        .spans()
        .into_iter()
        .filter(|span| span.name == "lock acquired")
        .collect();
    assert!(
        acquired
            .iter()
            .any(|span| span.attribute("zkcron.node") == "t1"
                && span.attribute("zkcron.fencing_token") == token
                && span.attribute("zkcron.group") == "default"),
        "the acquisition that fired the run is a span: {acquired:?}"
    );
    for attempt in &attempts {
        assert_eq!(
            attempt.parent_span_id, run_span_id,
            "a child of the run's span"
        );
        assert_eq!(attempt.events, ["started", "ended"]);
    }
    assert_ne!(attempts[0].span_id, attempts[1].span_id);

    let sent: Vec<String> = target
        .seen()
        .into_iter()
        .filter(|seen| seen.path == "/fail-then-ok")
        .map(|seen| seen.header("traceparent").to_owned())
        .collect();
    let expected: Vec<String> = attempts
        .iter()
        .map(|span| format!("00-{trace_id}-{}-01", span.span_id))
        .collect();
    assert_eq!(sent, expected, "each request names its attempt's span");

    let local = succeeded("local", SLACK * 2, &node).await;
    let local_run = local["run_id"].as_str().expect("a run id");
    let (local_attempts, local_span) = spans_of_run(&otlp, local_run, 1, &node).await;
    assert_eq!(local_attempts[0].attribute("process.exit.code"), "0");
    let given = std::fs::read_to_string(&seen_by_process).expect("the job wrote TRACEPARENT");
    assert_eq!(
        given.trim(),
        format!(
            "00-{}-{}-01",
            local_span.trace_id, local_attempts[0].span_id
        ),
        "the process is given its attempt's span"
    );
    assert_ne!(local_span.trace_id, trace_id, "a trace per run");
    assert_eq!(
        local_span.links,
        ["4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7"],
        "the run's span links to its submitter's context"
    );
    assert!(run.links.is_empty(), "{:?}", run.links);

    // A chained child's span links to its parent run's span.
    let child = succeeded("child", SLACK * 2, &node).await;
    let parent = &child["parents"][0];
    let parent_record = support::daemon::history_records("tick", &["--limit", "50"], &node.config)
        .into_iter()
        .find(|record| record["run_id"] == parent["run_id"])
        .expect("the parent's record");
    assert_eq!(parent["trace"], parent_record["trace"], "{child}");
    let child_run = child["run_id"].as_str().expect("a run id");
    let (_, child_span) = spans_of_run(&otlp, child_run, 1, &node).await;
    assert_eq!(
        child_span.links,
        [parent_record["trace"].as_str().expect("the parent's trace")],
        "the child's span links to its parent run's span"
    );
}

/// The owner killed between a run's failed attempt and its retry: the next owner's attempt is
/// in the same trace, a child of the same run span, and the run's span comes from the node that
/// wrote the final record — with its own node and token, which say who fired the retry.
#[tokio::test]
async fn a_retry_by_the_next_owner_after_a_kill_continues_the_runs_trace() {
    let _serial = support::fault_lock();
    let otlp = OtlpReceiver::start().await;
    let target = Receiver::start().await;
    let dir = tempfile::tempdir().expect("temp dir");
    let connect = shared_ensemble().connect_string_with_chroot(&unique_chroot("telemetry-kill"));
    // The retry is due 6 s after the failure: past the takeover (session + delay + slack).
    let jobs = format!(
        "[[job]]\nname = \"flaky\"\nretries = 1\nretry_backoff = \"6s\"\n\
         http = {{ url = \"{}/fail-then-ok\" }}\n\n\
         [telemetry]\nendpoint = \"{}\"\n",
        target.base, otlp.endpoint
    );
    let text = schedule_text(&connect, "telemetry-kill", SESSION, DELAY, &jobs);
    let env = [("OTEL_BSP_SCHEDULE_DELAY", Path::new(EXPORT_EVERY))];
    let mut first = DaemonNode::start_with_env(dir.path(), "k1", &text, &env);
    first.wait_log("lock acquired", SESSION + SLACK).await;
    let others = [
        DaemonNode::start_with_env(dir.path(), "k2", &text, &env),
        DaemonNode::start_with_env(dir.path(), "k3", &text, &env),
    ];
    for node in &others {
        node.wait_log("zookeeper session established", SLACK).await;
    }
    zkcron_ok(
        &["submit", "flaky", "--in", "0s", "--id", "r1"],
        &first.config,
    );
    let failed = try_wait_for(
        "attempt 1 recorded failed, a retry promised",
        SLACK * 2,
        || {
            let record = newest("flaky", &first.config);
            let done = (record["status"] == "failed" && !record["retry_at_unix_ms"].is_null())
                .then_some(record);
            async move { done }
        },
    )
    .await
    .unwrap_or_else(|not_reached| panic!("{not_reached}\n{}", first.log_tail()));
    first.kill();

    let config = others[0].config.clone();
    let record = try_wait_for(
        "the retry succeeded on the next owner",
        SESSION + DELAY + SLACK * 4,
        || {
            let record = newest("flaky", &config);
            let done = (record["status"] == "succeeded").then_some(record);
            async move { done }
        },
    )
    .await
    .unwrap_or_else(|not_reached| {
        panic!(
            "{not_reached}\n{}\n{}",
            others[0].log_tail(),
            others[1].log_tail()
        )
    });
    assert_eq!(
        record["trace"], failed["trace"],
        "the record keeps the run's trace"
    );
    let stored = record["trace"].as_str().expect("a trace");
    let (trace_id, run_span_id) = stored.split_once('-').expect("<trace>-<span>");
    let retried_by = record["node_id"].as_str().expect("a node");
    assert_ne!(retried_by, "k1");

    let run_id = record["run_id"].as_str().expect("a run id");
    let found = try_wait_for("the retry's span and the run's", SLACK * 3, || {
        let spans: Vec<ReceivedSpan> = otlp
            .spans()
            .into_iter()
            .filter(|span| span.attribute("zkcron.run_id") == run_id)
            .collect();
        let retry = spans
            .iter()
            .find(|span| span.attribute("zkcron.attempt") == "2")
            .cloned();
        let run = spans
            .iter()
            .find(|span| span.attribute("zkcron.attempt").is_empty())
            .cloned();
        let done = retry.zip(run);
        async move { done }
    })
    .await;
    let (retry, run) = found.unwrap_or_else(|not_reached| {
        panic!(
            "{not_reached}: {:#?}\nrefused {:?}",
            otlp.spans(),
            otlp.refused()
        )
    });
    assert_eq!(
        (retry.trace_id.as_str(), retry.parent_span_id.as_str()),
        (trace_id, run_span_id),
        "the next owner's attempt continues the run's trace"
    );
    assert_eq!(retry.attribute("zkcron.node"), retried_by);
    assert_eq!(
        retry.attribute("zkcron.fencing_token"),
        record["fencing_token"].to_string()
    );
    assert_ne!(
        retry.attribute("zkcron.fencing_token"),
        failed["fencing_token"].to_string(),
        "fired under the next owner's token"
    );
    assert_eq!(
        (run.trace_id.as_str(), run.span_id.as_str()),
        (trace_id, run_span_id)
    );
    assert_eq!(run.attribute("zkcron.node"), retried_by);
    let sent: Vec<String> = target
        .seen()
        .into_iter()
        .map(|seen| seen.header("traceparent").to_owned())
        .collect();
    assert_eq!(sent.len(), 2, "{sent:?}");
    assert!(
        sent.iter()
            .all(|tp| tp.starts_with(&format!("00-{trace_id}-"))),
        "both attempts' requests are in the run's trace: {sent:?}"
    );
    assert_eq!(sent[1], format!("00-{trace_id}-{}-01", retry.span_id));
}
