//! OpenTelemetry (issue 52): the spans of this node's runs, sent over OTLP/HTTP (protobuf) to
//! the collector `[telemetry]` names, by the OpenTelemetry project's SDK (its batch processor)
//! and exporter. Without the section nothing here is built, and nothing costs a thing.
//!
//! A run's ids are chosen at its first claim and stored in its record (`run::RunTrace`), so
//! a span is built here from the record, not by a tracer that draws ids of its own:
//! - each attempt's span, by the node that ran the attempt, as a child of the run's span (a
//!   remote parent built from the stored ids); its id is the one the job was given in
//!   `TRACEPARENT` or the `traceparent` header (`run::AttemptTrace`);
//! - the run's span itself, by the node that writes the final record, with the stored ids,
//!   from the run's scheduled instant to its end.
//!
//! Both say which owner and which fencing token fired the run: no peer's spans do. The lock's
//! acquisitions, losses and handovers are spans too, each of no length.
//!
//! Owns: the exporter and its batch processor (the SDK sends from a thread of its own, off the
//! runtime), the spans' names, attributes and events, and the flush at shutdown.
//! Must not: decide anything about a run, or wait on the collector: a span is handed to the
//! batch processor's queue and the caller goes on.

use std::borrow::Cow;
use std::time::{Duration, SystemTime};

use chrono::{DateTime, Utc};
use opentelemetry::trace::{
    Event, Link, SpanContext, SpanId, SpanKind, Status, TraceFlags, TraceId, TraceState,
};
use opentelemetry::{InstrumentationScope, KeyValue};
use opentelemetry_otlp::WithExportConfig;
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::{
    BatchSpanProcessor, SpanData, SpanEvents, SpanLinks, SpanProcessor,
};

use crate::config::TelemetryConfig;
use crate::ids::NodeId;
use crate::lock::LockEvent;
use crate::run::{RunContext, RunOutcome, RunRecord, RunReport, RunStatus, RunTrace};

/// How long one export may take before the batch is dropped (and said by the SDK).
const EXPORT_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a stop waits for the spans still queued.
const FLUSH_AT_STOP: Duration = Duration::from_secs(5);

/// Why the exporter could not be built.
#[derive(Debug, thiserror::Error)]
#[error("telemetry: cannot build the OTLP exporter for {endpoint}: {reason}")]
pub struct TelemetryError {
    endpoint: String,
    reason: String,
}

/// The exporter of this node's spans (see the module docs).
#[derive(Debug)]
pub struct Telemetry {
    processor: BatchSpanProcessor,
    scope: InstrumentationScope,
    /// Drawn once per process: the runs this node claims first get their trace from it.
    seed: u128,
    node: NodeId,
}

/// Where a run ran, for its spans' attributes.
pub struct Fired<'a> {
    /// The lock group whose owner fired it (`default` for the `[lock]` itself).
    pub group: &'a str,
}

impl Telemetry {
    /// Builds the exporter for `config`; nothing is sent until a span ends.
    ///
    /// # Errors
    /// The SDK could not build the exporter (its HTTP client).
    pub fn start(config: &TelemetryConfig, node: &NodeId) -> Result<Self, TelemetryError> {
        let endpoint = format!("{}/v1/traces", config.endpoint);
        let exporter = opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .with_endpoint(endpoint.clone())
            .with_timeout(EXPORT_TIMEOUT)
            .with_protocol(opentelemetry_otlp::Protocol::HttpBinary)
            .build()
            .map_err(|err| TelemetryError {
                endpoint: endpoint.clone(),
                reason: err.to_string(),
            })?;
        let mut processor = BatchSpanProcessor::builder(exporter).build();
        let mut resource = Resource::builder_empty()
            .with_service_name(config.service_name.clone())
            .with_attribute(KeyValue::new(
                "service.instance.id",
                node.as_str().to_owned(),
            ))
            .with_attribute(KeyValue::new("service.version", env!("CARGO_PKG_VERSION")));
        for (key, value) in &config.resource {
            resource = resource.with_attribute(KeyValue::new(key.clone(), value.clone()));
        }
        processor.set_resource(&resource.build());
        let scope = InstrumentationScope::builder("zkcron")
            .with_version(env!("CARGO_PKG_VERSION"))
            .build();
        tracing::info!(endpoint, "telemetry: the runs' spans go to the collector");
        Ok(Self {
            processor,
            scope,
            seed: rand::random(),
            node: node.clone(),
        })
    }

    /// The seed the fire machine chooses this process's runs' traces from.
    pub fn seed(&self) -> u128 {
        self.seed
    }

    /// An attempt ended on this node: its span, a child of the run's.
    pub fn attempt_ended(
        &self,
        job: &str,
        context: &RunContext,
        report: &RunReport,
        fired: &Fired<'_>,
    ) {
        let Some(attempt) = context.trace.as_deref().copied() else {
            return;
        };
        let parent = attempt.run.span_id;
        let mut attributes = common(job, context, fired, &self.node);
        attributes.push(KeyValue::new("zkcron.attempt", i64::from(context.attempt)));
        let lateness = report.started_at - context.scheduled_at;
        attributes.push(KeyValue::new(
            "zkcron.lateness_ms",
            lateness.num_milliseconds(),
        ));
        let (result, error) = outcome_of_report(report);
        attributes.push(KeyValue::new("cicd.pipeline.result", result));
        if let Some(error) = &error {
            attributes.push(KeyValue::new("error.type", error.clone()));
        }
        match report.outcome {
            RunOutcome::Exited { code } => {
                attributes.push(KeyValue::new("process.exit.code", i64::from(code)));
            }
            RunOutcome::Responded { status, .. } => {
                attributes.push(KeyValue::new(
                    "http.response.status_code",
                    i64::from(status),
                ));
            }
            _ => {}
        }
        let ended =
            report.started_at + chrono::Duration::from_std(report.duration).unwrap_or_default();
        let events = vec![event("started", report.started_at), event("ended", ended)];
        self.emit(Built {
            name: job.to_owned(),
            context: span_context(attempt.run.trace_id, attempt.span_id),
            parent,
            start: report.started_at,
            end: ended,
            attributes,
            events,
            links: Vec::new(),
            error,
        });
    }

    /// A run's final record was written by this node: the run's own span, from its scheduled
    /// instant to its end, with the ids its first claim chose.
    pub fn run_ended(&self, record: &RunRecord, fired: &Fired<'_>) {
        let Some(run) = record.trace else {
            return;
        };
        let ms = |ms: i64| DateTime::from_timestamp_millis(ms).unwrap_or_default();
        let scheduled = ms(record.scheduled_unix_ms);
        let end = record.finished_unix_ms.map_or(scheduled, ms);
        let mut attributes = vec![
            KeyValue::new("zkcron.job", record.job.as_str().to_owned()),
            KeyValue::new("zkcron.run_id", record.run_id.clone()),
            KeyValue::new("zkcron.scheduled_unix_ms", record.scheduled_unix_ms),
            KeyValue::new("zkcron.attempts", i64::from(record.attempt)),
            KeyValue::new("zkcron.node", record.node_id.as_str().to_owned()),
            KeyValue::new("zkcron.fencing_token", i64::from(record.fencing_token.0)),
            KeyValue::new("zkcron.group", fired.group.to_owned()),
            KeyValue::new("zkcron.status", record.status.as_str()),
        ];
        if let Some(id) = &record.submission_id {
            attributes.push(KeyValue::new(
                "messaging.message.id",
                id.as_str().to_owned(),
            ));
        }
        let (result, error) = outcome_of_status(record);
        attributes.push(KeyValue::new("cicd.pipeline.result", result));
        if let Some(error) = &error {
            attributes.push(KeyValue::new("error.type", error.clone()));
        }
        let links = record
            .links
            .iter()
            .filter_map(|traceparent| crate::run::span_context_of(traceparent))
            .map(Link::with_context)
            .collect();
        let mut events = vec![event("claimed", ms(record.claimed_unix_ms))];
        events.extend(record.started_unix_ms.map(|at| event("started", ms(at))));
        events.push(event("ended", end));
        self.emit(Built {
            name: record.job.as_str().to_owned(),
            context: span_context(run.trace_id, run.span_id),
            parent: SpanId::INVALID,
            start: scheduled.min(end),
            end,
            attributes,
            events,
            links,
            error,
        });
    }

    /// The lock of `group` acquired, lost or handed over by this node at `at`: a span of no
    /// length in a trace of its own, named for what happened (`lock acquired`, `lock lost`,
    /// `lock handed over`), with the node, the group and an acquisition's fencing token.
    pub fn lock_event(&self, event: &LockEvent, group: &str, at: DateTime<Utc>) {
        let (name, token) = match event {
            LockEvent::Acquired { token } => ("lock acquired", Some(token.0)),
            LockEvent::Lost => ("lock lost", None),
            LockEvent::HandedOver => ("lock handed over", None),
            LockEvent::OwnerChanged { .. } => return,
        };
        let mut attributes = vec![
            KeyValue::new("zkcron.node", self.node.as_str().to_owned()),
            KeyValue::new("zkcron.group", group.to_owned()),
        ];
        attributes.extend(token.map(|t| KeyValue::new("zkcron.fencing_token", i64::from(t))));
        let ids = RunTrace::first(rand::random(), name);
        self.emit(Built {
            name: name.to_owned(),
            context: span_context(ids.trace_id, ids.span_id),
            parent: SpanId::INVALID,
            start: at,
            end: at,
            attributes,
            events: Vec::new(),
            links: Vec::new(),
            error: None,
        });
    }

    /// Sends what is queued, waiting at most 5 s; blocking: call it off the
    /// runtime's workers.
    pub fn shutdown(&self) {
        if let Err(err) = self.processor.shutdown_with_timeout(FLUSH_AT_STOP) {
            tracing::warn!(error = %err, "telemetry: spans not all sent at the stop");
        }
    }

    fn emit(&self, span: Built) {
        let status = match span.error {
            Some(error) => Status::error(error),
            None => Status::Ok,
        };
        // Non-exhaustive in the SDK: filled in, not built whole.
        let mut events = SpanEvents::default();
        events.events = span.events;
        let mut links = SpanLinks::default();
        links.links = span.links;
        self.processor.on_end(SpanData {
            span_context: span.context,
            parent_span_id: span.parent,
            parent_span_is_remote: span.parent != SpanId::INVALID,
            span_kind: SpanKind::Internal,
            name: Cow::Owned(span.name),
            start_time: system_time(span.start),
            end_time: system_time(span.end),
            attributes: span.attributes,
            dropped_attributes_count: 0,
            events,
            links,
            status,
            instrumentation_scope: self.scope.clone(),
        });
    }
}

/// A span made whole here, for [`Telemetry::emit`].
struct Built {
    name: String,
    context: SpanContext,
    parent: SpanId,
    start: DateTime<Utc>,
    end: DateTime<Utc>,
    attributes: Vec<KeyValue>,
    events: Vec<Event>,
    /// Spans this one follows from: a run's submitter's context.
    links: Vec<Link>,
    error: Option<String>,
}

/// What every span of a run says: which run, and which owner fired it under which token.
fn common(job: &str, context: &RunContext, fired: &Fired<'_>, node: &NodeId) -> Vec<KeyValue> {
    let mut attributes = vec![
        KeyValue::new("zkcron.job", job.to_owned()),
        KeyValue::new("zkcron.run_id", context.run_id.clone()),
        KeyValue::new(
            "zkcron.scheduled_unix_ms",
            context.scheduled_at.timestamp_millis(),
        ),
        KeyValue::new("zkcron.node", node.as_str().to_owned()),
        KeyValue::new("zkcron.fencing_token", i64::from(context.fencing_token.0)),
        KeyValue::new("zkcron.group", fired.group.to_owned()),
    ];
    if let Some(submission) = &context.submission {
        attributes.push(KeyValue::new("messaging.message.id", submission.id.clone()));
    }
    attributes
}

/// A span of ours: sampled (every run is traced when `[telemetry]` is on), made here.
fn span_context(trace_id: TraceId, span_id: SpanId) -> SpanContext {
    SpanContext::new(
        trace_id,
        span_id,
        TraceFlags::SAMPLED,
        false,
        TraceState::default(),
    )
}

fn event(name: &'static str, at: DateTime<Utc>) -> Event {
    Event::new(name, system_time(at), Vec::new(), 0)
}

fn system_time(at: DateTime<Utc>) -> SystemTime {
    SystemTime::from(at)
}

/// `cicd.pipeline.result` and `error.type` of an attempt, in the CI/CD semantic conventions'
/// words (success, failure, timeout, cancellation, error).
fn outcome_of_report(report: &RunReport) -> (&'static str, Option<String>) {
    match &report.outcome {
        RunOutcome::Exited { code: 0 } => ("success", None),
        RunOutcome::Responded { status, .. } if (200..300).contains(status) => ("success", None),
        RunOutcome::Exited { .. } => ("failure", Some("exit_code".to_owned())),
        RunOutcome::Responded { status, .. } => ("failure", Some(status.to_string())),
        RunOutcome::Signaled { .. } => ("failure", Some("signal".to_owned())),
        RunOutcome::TimedOut => ("timeout", Some("timeout".to_owned())),
        RunOutcome::Cancelled | RunOutcome::CancelledBeforeStart => ("cancellation", None),
        RunOutcome::FailedToStart { .. } => ("error", Some("failed_to_start".to_owned())),
        RunOutcome::WaitFailed { .. } => ("error", Some("wait_failed".to_owned())),
        RunOutcome::RequestFailed { .. } => ("error", Some("request_failed".to_owned())),
    }
}

/// The same for a run, from its final record.
fn outcome_of_status(record: &RunRecord) -> (&'static str, Option<String>) {
    match record.status {
        RunStatus::Succeeded => ("success", None),
        // error.type is a class, not a message: the record's error stays in the ledger.
        RunStatus::Failed => ("failure", Some("failed".to_owned())),
        RunStatus::TimedOut => ("timeout", Some("timeout".to_owned())),
        RunStatus::Cancelled => ("cancellation", None),
        RunStatus::Skipped | RunStatus::Missed => ("skip", None),
        RunStatus::Interrupted | RunStatus::Claimed | RunStatus::Running => {
            ("error", Some(record.status.as_str().to_owned()))
        }
    }
}
