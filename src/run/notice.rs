//! A failure notice (issue 20): what happened to a run, for a job's `on_failure` command and
//! webhook, and where it goes.
//!
//! Owns: the notice's content, its JSON document and its `ZKCRON_*` variables.
//! Must not: send anything (`crate::notify` does) or decide when a notice is due (the fire
//! machine does).

use std::sync::Arc;

use chrono::{DateTime, SecondsFormat, Utc};
use serde_json::json;

use super::RunRecord;
use crate::ids::NodeId;
use crate::secret::Secret;

/// Where a job's notices go: a command, a webhook, both or (with nothing set) nowhere.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NoticeChannels {
    /// `on_failure`: the program and its arguments, run with the notice on stdin.
    pub command: Option<Vec<String>>,
    /// `on_failure_webhook`: where the notice is POSTed as JSON.
    pub webhook: Option<Webhook>,
}

impl NoticeChannels {
    /// True when a notice would go nowhere.
    pub fn is_empty(&self) -> bool {
        self.command.is_none() && self.webhook.is_none()
    }
}

/// `on_failure_webhook = { url, token_env }`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Webhook {
    /// An http(s) URL.
    pub url: String,
    /// Sent as `Authorization: Bearer <token>`; read from the environment at load.
    pub token: Option<Secret>,
}

/// Why a notice is sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NoticeKind {
    /// A run ended `failed`, `timed_out` or `interrupted`, or ticks were `missed`.
    Failure,
    /// The first success after failures (`on_recovery`).
    Recovery,
}

impl NoticeKind {
    /// As the JSON document and `ZKCRON_NOTICE` name it.
    pub fn as_str(self) -> &'static str {
        match self {
            NoticeKind::Failure => "failure",
            NoticeKind::Recovery => "recovery",
        }
    }
}

/// One notice: a final (or, with `notify = "every_attempt"`, a failed attempt's) record and
/// what the job's policy adds to it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Notice {
    pub kind: NoticeKind,
    /// The record as written.
    pub record: RunRecord,
    /// Attempts the job's `retries` still allow after this one (0 for a final failure).
    pub retries_left: u32,
    /// Failed runs in a row, this one included (for a recovery: the failures it ends).
    pub consecutive_failures: u32,
    /// The node sending it (the one that wrote the record).
    pub sent_by: NodeId,
    pub channels: Arc<NoticeChannels>,
}

impl Notice {
    /// The document a webhook gets as its body and a command on stdin.
    pub fn to_json(&self) -> serde_json::Value {
        let r = &self.record;
        json!({
            "notice": self.kind.as_str(),
            "job": r.job.as_str(),
            "run_id": r.run_id,
            "scheduled_at": rfc3339(r.scheduled_unix_ms),
            "scheduled_unix_ms": r.scheduled_unix_ms,
            "node": r.node_id.as_str(),
            "ip": r.ip,
            "sent_by": self.sent_by.as_str(),
            "fencing_token": r.fencing_token.0,
            "status": r.status.as_str(),
            "exit_code": r.exit_code,
            "signal": r.signal,
            "http_status": r.http_status,
            "error": r.error,
            "attempt": r.attempt,
            "retries_left": self.retries_left,
            "retry_at_unix_ms": r.retry_at_unix_ms,
            "duration_ms": self.duration_ms(),
            "consecutive_failures": self.consecutive_failures,
            "missed_ticks": r.missed_ticks,
            "missed_from_unix_ms": r.missed_from_unix_ms,
            "submission_id": r.submission_id.as_ref().map(|id| id.as_str()),
            "output": r.output,
        })
    }

    /// The command's `ZKCRON_*` variables: those that apply to this notice.
    pub fn env(&self) -> Vec<(&'static str, String)> {
        let r = &self.record;
        let mut env = vec![
            ("ZKCRON_NOTICE", self.kind.as_str().to_owned()),
            ("ZKCRON_JOB", r.job.as_str().to_owned()),
            ("ZKCRON_RUN_ID", r.run_id.clone()),
            ("ZKCRON_SCHEDULED_AT", rfc3339(r.scheduled_unix_ms)),
            ("ZKCRON_SCHEDULED_UNIX_MS", r.scheduled_unix_ms.to_string()),
            ("ZKCRON_NODE", r.node_id.as_str().to_owned()),
            ("ZKCRON_FENCING_TOKEN", r.fencing_token.0.to_string()),
            ("ZKCRON_STATUS", r.status.as_str().to_owned()),
            ("ZKCRON_ATTEMPT", r.attempt.to_string()),
            ("ZKCRON_RETRIES_LEFT", self.retries_left.to_string()),
            (
                "ZKCRON_CONSECUTIVE_FAILURES",
                self.consecutive_failures.to_string(),
            ),
        ];
        let optional = [
            ("ZKCRON_EXIT_CODE", r.exit_code.map(|c| c.to_string())),
            ("ZKCRON_SIGNAL", r.signal.map(|s| s.to_string())),
            ("ZKCRON_HTTP_STATUS", r.http_status.map(|s| s.to_string())),
            ("ZKCRON_ERROR", r.error.clone()),
            (
                "ZKCRON_DURATION_MS",
                self.duration_ms().map(|d| d.to_string()),
            ),
            ("ZKCRON_MISSED_TICKS", r.missed_ticks.map(|n| n.to_string())),
            (
                "ZKCRON_SUBMISSION_ID",
                r.submission_id.as_ref().map(|id| id.as_str().to_owned()),
            ),
        ];
        env.extend(
            optional
                .into_iter()
                .filter_map(|(name, value)| Some((name, value?))),
        );
        env
    }

    fn duration_ms(&self) -> Option<i64> {
        let r = &self.record;
        Some(r.finished_unix_ms? - r.started_unix_ms?)
    }
}

fn rfc3339(unix_ms: i64) -> String {
    DateTime::<Utc>::from_timestamp_millis(unix_ms)
        .map(|t| t.to_rfc3339_opts(SecondsFormat::Millis, true))
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ids::{FencingToken, JobName};
    use crate::run::RunStatus;

    fn failed_notice() -> Notice {
        let node = NodeId::new("10.0.0.5");
        let mut record = RunRecord::claimed(
            &JobName::new("nightly"),
            1_794_947_400_000,
            (&node, "10.0.0.5"),
            FencingToken(12),
            1_794_947_399_750,
        );
        record.status = RunStatus::TimedOut;
        record.started_unix_ms = Some(1_794_947_400_000);
        record.finished_unix_ms = Some(1_794_947_401_500);
        record.attempt = 2;
        record.output = Some("last words\n".into());
        Notice {
            kind: NoticeKind::Failure,
            record,
            retries_left: 1,
            consecutive_failures: 3,
            sent_by: node,
            channels: Arc::default(),
        }
    }

    #[test]
    fn the_document_says_what_happened() {
        let doc = failed_notice().to_json();
        assert_eq!(doc["notice"], "failure");
        assert_eq!(doc["status"], "timed_out");
        assert_eq!(doc["scheduled_at"], "2026-11-17T20:30:00.000Z");
        assert_eq!(doc["attempt"], 2);
        assert_eq!(doc["retries_left"], 1);
        assert_eq!(doc["duration_ms"], 1500);
        assert_eq!(doc["fencing_token"], 12);
        assert_eq!(doc["consecutive_failures"], 3);
        assert_eq!(doc["output"], "last words\n");
        assert!(doc["exit_code"].is_null());
    }

    #[test]
    fn the_variables_name_only_what_applies() {
        let env = failed_notice().env();
        let get = |name: &str| {
            env.iter()
                .find(|(n, _)| *n == name)
                .map(|(_, v)| v.as_str())
        };
        assert_eq!(get("ZKCRON_STATUS"), Some("timed_out"));
        assert_eq!(get("ZKCRON_DURATION_MS"), Some("1500"));
        assert_eq!(get("ZKCRON_RETRIES_LEFT"), Some("1"));
        assert_eq!(get("ZKCRON_EXIT_CODE"), None, "no exit code: not set");
    }
}
