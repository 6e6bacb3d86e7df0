//! The raw schedule file, exactly as serde sees it: one struct per TOML table.
//!
//! Owns: the file's key names, which keys are optional, and where each value is (`Spanned`
//! fields), so validation can point at it. Unknown keys are refused here (`deny_unknown_fields`;
//! `reader.rs` tells them).
//! Must not: check values or fill in defaults (the section validators do), nor be seen outside
//! `config`: the rest of the crate reads only the validated domain types.

use std::collections::BTreeMap;

use serde::Deserialize;
use toml::Spanned;

use super::model::AfterStatus;
use super::{
    AclPolicy, Concurrency, KeepOutput, LogFormat, Misfire, NotifyWhen, OnInterrupted, OnLost,
};

/// The whole file, as far as it could be read (`reader.rs` reads it table by table; a required
/// table that is missing or unreadable is `None`, and told there).
#[derive(Default)]
pub(super) struct RawConfig {
    pub(super) zookeeper: Option<RawZookeeper>,
    pub(super) lock: Option<RawLock>,
    pub(super) log: Option<RawLog>,
    pub(super) audit: Option<RawAudit>,
    pub(super) delayed: Option<RawDelayed>,
    pub(super) http: Option<RawHttp>,
    pub(super) telemetry: Option<RawTelemetry>,
    pub(super) output: Option<RawOutput>,
    pub(super) node: Option<RawNode>,
    pub(super) defaults: Option<RawDefaults>,
    pub(super) group: Vec<Spanned<RawGroup>>,
    pub(super) limit: Vec<Spanned<RawLimit>>,
    pub(super) calendar: Vec<Spanned<RawCalendar>>,
    pub(super) job: Vec<Spanned<RawJob>>,
}

/// `[defaults]`: what every job has unless it says otherwise: the notice keys and the job
/// policies, flat as the file has them ([`RawDefaults::take_notices`] parts them).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawDefaults {
    pub(super) on_failure: Option<Spanned<Vec<String>>>,
    pub(super) on_failure_webhook: Option<Spanned<RawWebhook>>,
    pub(super) notify: Option<NotifyWhen>,
    pub(super) on_recovery: Option<bool>,
    pub(super) pause_after_failures: Option<Spanned<i64>>,
    pub(super) timezone: Option<Spanned<String>>,
    pub(super) working_dir: Option<Spanned<String>>,
    pub(super) env: Option<Spanned<BTreeMap<String, String>>>,
    pub(super) user: Option<Spanned<String>>,
    pub(super) timeout: Option<Spanned<String>>,
    pub(super) kill_grace: Option<Spanned<String>>,
    pub(super) on_lost: Option<Spanned<OnLost>>,
    pub(super) keep_output: Option<Spanned<KeepOutput>>,
    pub(super) history: Option<Spanned<i64>>,
    pub(super) max_running: Option<Spanned<i64>>,
    pub(super) concurrency: Option<Spanned<Concurrency>>,
    pub(super) misfire: Option<Spanned<Misfire>>,
    pub(super) starting_deadline: Option<Spanned<String>>,
    pub(super) on_interrupted: Option<Spanned<OnInterrupted>>,
    pub(super) retries: Option<Spanned<i64>>,
    pub(super) retry_backoff: Option<Spanned<String>>,
    pub(super) retry_backoff_max: Option<Spanned<String>>,
    pub(super) dedup_window: Option<Spanned<String>>,
}

impl RawDefaults {
    /// Takes the notice keys out, leaving the job policies (the keys of a `[[job]]` that make
    /// sense for every job: not what it runs, its schedule, jitter, group or limits).
    pub(super) fn take_notices(&mut self) -> RawNotices {
        RawNotices {
            on_failure: self.on_failure.take(),
            on_failure_webhook: self.on_failure_webhook.take(),
            notify: self.notify.take(),
            on_recovery: self.on_recovery.take(),
            pause_after_failures: self.pause_after_failures.take(),
        }
    }
}

/// `on_failure_webhook = { url, token_env }`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawWebhook {
    pub(super) url: Spanned<String>,
    pub(super) token_env: Option<Spanned<String>>,
}

/// The notice keys of `[defaults]` or of one `[[job]]`.
pub(super) struct RawNotices {
    pub(super) on_failure: Option<Spanned<Vec<String>>>,
    pub(super) on_failure_webhook: Option<Spanned<RawWebhook>>,
    pub(super) notify: Option<NotifyWhen>,
    pub(super) on_recovery: Option<bool>,
    pub(super) pause_after_failures: Option<Spanned<i64>>,
}

/// `[node]`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawNode {
    pub(super) tags: Option<Spanned<Vec<Spanned<String>>>>,
}

/// One `[[group]]`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawGroup {
    pub(super) name: Spanned<String>,
    pub(super) requires: Option<Spanned<Vec<Spanned<String>>>>,
}

/// One `[[calendar]]`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawCalendar {
    pub(super) name: Spanned<String>,
    pub(super) timezone: Option<Spanned<String>>,
    pub(super) dates: Option<Spanned<Vec<Spanned<String>>>>,
    pub(super) icalendar: Option<Spanned<String>>,
    pub(super) hours: Option<Spanned<Vec<Spanned<String>>>>,
    pub(super) weekdays: Option<Spanned<Vec<Spanned<String>>>>,
}

/// One `[[limit]]`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawLimit {
    pub(super) name: Spanned<String>,
    pub(super) max: Spanned<i64>,
}

/// `[http]`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawHttp {
    pub(super) listen: Spanned<String>,
    pub(super) token_env: Option<Spanned<String>>,
    pub(super) token_file: Option<Spanned<String>>,
    pub(super) tokens_file: Option<Spanned<String>>,
}

/// `[zookeeper]`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawZookeeper {
    pub(super) connect: Spanned<String>,
    pub(super) session_timeout: Option<Spanned<String>>,
    pub(super) connect_timeout: Option<Spanned<String>>,
    pub(super) auth: Option<Spanned<String>>,
    pub(super) auth_env: Option<Spanned<String>>,
    pub(super) auth_file: Option<Spanned<String>>,
    pub(super) acl: Option<Spanned<AclPolicy>>,
    pub(super) read_acl: Option<Spanned<Vec<Spanned<String>>>>,
    pub(super) tls: Option<Spanned<RawTls>>,
    pub(super) sasl: Option<Spanned<RawSasl>>,
}

/// `[zookeeper] tls = { ca, cert, key }`, and `[delayed]`'s.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawTls {
    pub(super) ca: Spanned<String>,
    pub(super) cert: Option<Spanned<String>>,
    pub(super) key: Option<Spanned<String>>,
}

/// `[zookeeper] sasl = { mechanism, username, password_env | password_file }`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawSasl {
    pub(super) mechanism: Spanned<String>,
    pub(super) username: Spanned<String>,
    pub(super) password_env: Option<Spanned<String>>,
    pub(super) password_file: Option<Spanned<String>>,
}

/// `[lock]`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawLock {
    pub(super) name: Spanned<String>,
    pub(super) root: Option<Spanned<String>>,
    pub(super) takeover_delay: Option<Spanned<String>>,
    pub(super) node_id: Option<Spanned<String>>,
    pub(super) claim_ahead: Option<Spanned<String>>,
    pub(super) max_clock_offset: Option<Spanned<String>>,
    pub(super) rebalance_after: Option<Spanned<String>>,
}

/// `[audit]`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawAudit {
    pub(super) keep: Option<Spanned<String>>,
}

/// `[delayed]`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawDelayed {
    pub(super) store: Option<Spanned<String>>,
    pub(super) dsn_env: Option<Spanned<String>>,
    pub(super) dsn_file: Option<Spanned<String>>,
    pub(super) tls: Option<Spanned<RawTls>>,
}

/// `[telemetry]`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawTelemetry {
    pub(super) endpoint: Spanned<String>,
    pub(super) service_name: Option<Spanned<String>>,
    pub(super) resource: Option<Spanned<std::collections::BTreeMap<String, Spanned<String>>>>,
}

/// `[output]`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawOutput {
    pub(super) dir: Option<Spanned<String>>,
    pub(super) keep_size: Option<Spanned<String>>,
    pub(super) keep_for: Option<Spanned<String>>,
    pub(super) per_run: Option<Spanned<String>>,
}

/// `[log]`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawLog {
    pub(super) format: Option<LogFormat>,
    pub(super) level: Option<Spanned<String>>,
}

/// One `[[job]]`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawJob {
    pub(super) name: Spanned<String>,
    pub(super) schedule: Option<Spanned<String>>,
    pub(super) timezone: Option<Spanned<String>>,
    pub(super) command: Option<Spanned<Vec<String>>>,
    pub(super) shell: Option<Spanned<String>>,
    pub(super) http: Option<Spanned<RawHttpTarget>>,
    pub(super) working_dir: Option<Spanned<String>>,
    pub(super) env: Option<Spanned<BTreeMap<String, String>>>,
    pub(super) user: Option<Spanned<String>>,
    pub(super) timeout: Option<Spanned<String>>,
    pub(super) kill_grace: Option<Spanned<String>>,
    pub(super) on_lost: Option<OnLost>,
    pub(super) keep_output: Option<KeepOutput>,
    pub(super) jitter: Option<Spanned<String>>,
    pub(super) enabled: Option<bool>,
    pub(super) history: Option<Spanned<i64>>,
    pub(super) max_running: Option<Spanned<i64>>,
    pub(super) concurrency: Option<Concurrency>,
    pub(super) misfire: Option<Misfire>,
    pub(super) starting_deadline: Option<Spanned<String>>,
    pub(super) on_interrupted: Option<OnInterrupted>,
    pub(super) retries: Option<Spanned<i64>>,
    pub(super) retry_backoff: Option<Spanned<String>>,
    pub(super) retry_backoff_max: Option<Spanned<String>>,
    pub(super) dedup_window: Option<Spanned<String>>,
    pub(super) limits: Option<Spanned<Vec<Spanned<String>>>>,
    pub(super) group: Option<Spanned<String>>,
    pub(super) after: Option<Spanned<Vec<Spanned<String>>>>,
    pub(super) after_status: Option<Spanned<AfterStatus>>,
    pub(super) except: Option<Spanned<Vec<Spanned<String>>>>,
    pub(super) only: Option<Spanned<Vec<Spanned<String>>>>,
    pub(super) broadcast: Option<Spanned<bool>>,
    pub(super) requires: Option<Spanned<Vec<Spanned<String>>>>,
    pub(super) on_failure: Option<Spanned<Vec<String>>>,
    pub(super) on_failure_webhook: Option<Spanned<RawWebhook>>,
    pub(super) notify: Option<NotifyWhen>,
    pub(super) on_recovery: Option<bool>,
    pub(super) pause_after_failures: Option<Spanned<i64>>,
}

impl RawJob {
    /// Its notice keys, taken out (read apart: `[defaults]` has the same).
    pub(super) fn take_notices(&mut self) -> RawNotices {
        RawNotices {
            on_failure: self.on_failure.take(),
            on_failure_webhook: self.on_failure_webhook.take(),
            notify: self.notify.take(),
            on_recovery: self.on_recovery.take(),
            pause_after_failures: self.pause_after_failures.take(),
        }
    }
}

/// `[[job]] http = { url, method, headers, … }`: a job whose run is an HTTP request.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawHttpTarget {
    pub(super) url: Spanned<String>,
    pub(super) method: Option<Spanned<String>>,
    pub(super) headers: Option<Spanned<BTreeMap<String, String>>>,
    pub(super) headers_from_env: Option<Spanned<BTreeMap<String, String>>>,
    pub(super) headers_from_file: Option<Spanned<BTreeMap<String, String>>>,
    pub(super) body: Option<Spanned<String>>,
    pub(super) ca_file: Option<Spanned<String>>,
    pub(super) client_cert: Option<Spanned<String>>,
    pub(super) client_key: Option<Spanned<String>>,
    pub(super) version: Option<Spanned<String>>,
    pub(super) resend: Option<Spanned<String>>,
}
