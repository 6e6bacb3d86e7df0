//! A job as it will run, key by key: every `[[job]]` key with the value it takes once
//! `[defaults]` and the built-in defaults are applied, in the schedule's own spelling (issue 51:
//! what a reload changed; what `describe` and `check` show).
//!
//! Owns: the list of a job's keys, how each value is written (TOML: `"30s"`, `["a", "b"]`), and
//! which keys differ between two versions of a job.
//! Must not: show a secret. An HTTP target's header values (read from the environment or a
//! file) and a webhook's token are never written; a change to one is told by the key alone.

use toml::Value;

use super::model::JobConfig;
use crate::run::{HttpTarget, Program};

/// One key of a job and its effective value; `None`: not set, and no default applies.
#[derive(Debug, Clone, PartialEq)]
pub struct JobKey {
    pub key: &'static str,
    pub value: Option<Value>,
}

impl JobKey {
    /// The value as the schedule would spell it; `(none)` when unset.
    pub fn shown(&self) -> String {
        self.value
            .as_ref()
            .map_or_else(|| "(none)".to_owned(), ToString::to_string)
    }
}

/// Every key of `job`, in the order docs/CONFIG.md lists them.
pub fn job_keys(job: &JobConfig) -> Vec<JobKey> {
    let spec = &job.spec;
    let mut keys = vec![
        key(
            "schedule",
            job.schedule.as_ref().map(|s| text(s.expression())),
        ),
        key("timezone", Some(text(job.timezone.name()))),
    ];
    keys.extend(program_keys(&spec.program));
    keys.extend([
        key(
            "working_dir",
            spec.working_dir.as_ref().map(|dir| path(dir)),
        ),
        key(
            "env",
            (!spec.env.is_empty()).then(|| {
                Value::Table(
                    spec.env
                        .iter()
                        .map(|(name, value)| (name.clone(), text(value)))
                        .collect(),
                )
            }),
        ),
        key("user", spec.user.as_ref().map(|user| text(&user.name))),
        key("timeout", spec.timeout.map(duration)),
        key("kill_grace", Some(duration(spec.kill_grace))),
        key("on_lost", Some(word(job.on_lost))),
        key("enabled", Some(Value::Boolean(job.enabled))),
        key("history", Some(integer(job.history))),
        key("keep_output", Some(word(job.keep_output))),
        key("max_running", Some(integer(job.max_running))),
        key("concurrency", Some(word(job.concurrency))),
        key("jitter", Some(duration(job.jitter))),
        key("misfire", Some(word(job.misfire))),
        key("starting_deadline", Some(duration(job.starting_deadline))),
        key("on_interrupted", Some(word(job.on_interrupted))),
        key("retries", Some(integer(job.retries))),
        key("retry_backoff", Some(duration(job.retry_backoff))),
        key("retry_backoff_max", Some(duration(job.retry_backoff_max))),
        key("dedup_window", Some(duration(job.dedup_window))),
        key("group", job.group.as_deref().map(text)),
        key(
            "limits",
            list(job.limits.iter().map(|limit| limit.name.as_str())),
        ),
        key(
            "after",
            job.after
                .as_ref()
                .and_then(|after| list(after.parents.iter().map(|parent| parent.as_str()))),
        ),
        key(
            "after_status",
            job.after.as_ref().map(|after| text(after.status.as_str())),
        ),
        key("broadcast", Some(Value::Boolean(job.broadcast.is_some()))),
        key(
            "requires",
            job.broadcast
                .as_ref()
                .and_then(|broadcast| list(broadcast.requires.iter().map(String::as_str))),
        ),
        key(
            "except",
            list(
                job.calendars
                    .except
                    .iter()
                    .map(|calendar| calendar.name.as_str()),
            ),
        ),
        key(
            "only",
            list(
                job.calendars
                    .only
                    .iter()
                    .map(|calendar| calendar.name.as_str()),
            ),
        ),
    ]);
    let notices = &job.notices;
    keys.extend([
        key(
            "on_failure",
            notices
                .channels
                .command
                .as_ref()
                .and_then(|argv| list(argv.iter().map(String::as_str))),
        ),
        key(
            "on_failure_webhook",
            notices.channels.webhook.as_ref().map(|webhook| {
                let mut table = toml::map::Map::new();
                table.insert("url".to_owned(), text(&webhook.url));
                if webhook.token.is_some() {
                    table.insert("token".to_owned(), text("(set; not shown)"));
                }
                Value::Table(table)
            }),
        ),
        key("notify", Some(word(notices.when))),
        key("on_recovery", Some(Value::Boolean(notices.on_recovery))),
        key(
            "pause_after_failures",
            Some(integer(notices.pause_after_failures.unwrap_or(0))),
        ),
    ]);
    keys
}

/// The keys whose values differ between `old` and `new`, in [`job_keys`]' order. A secret that
/// changed (a header's value, a webhook's token) is told by its key, never by its value.
pub fn changed_keys(old: &JobConfig, new: &JobConfig) -> Vec<&'static str> {
    let (before, after) = (job_keys(old), job_keys(new));
    let mut changed: Vec<&'static str> = after
        .iter()
        .filter(|key| before.iter().find(|old| old.key == key.key) != Some(*key))
        .map(|key| key.key)
        .chain(
            before
                .iter()
                .filter(|old| !after.iter().any(|key| key.key == old.key))
                .map(|old| old.key),
        )
        .collect();
    if let (Program::Http(old), Program::Http(new)) = (&old.spec.program, &new.spec.program)
        && old.headers != new.headers
        && !changed.contains(&"http.headers")
    {
        changed.push("http.headers");
    }
    if old.notices.channels.webhook.as_ref().map(|w| &w.token)
        != new.notices.channels.webhook.as_ref().map(|w| &w.token)
        && !changed.contains(&"on_failure_webhook")
    {
        changed.push("on_failure_webhook");
    }
    changed
}

/// `command`, `shell`, or the `http.*` keys: whichever the job runs.
fn program_keys(program: &Program) -> Vec<JobKey> {
    match program {
        Program::Argv(argv) => vec![key("command", list(argv.iter().map(String::as_str)))],
        Program::Shell(line) => vec![key("shell", Some(text(line)))],
        Program::Http(target) => http_keys(target),
    }
}

fn http_keys(target: &HttpTarget) -> Vec<JobKey> {
    let header_names = target.headers.iter().map(|(name, _)| name.as_str());
    vec![
        key("http.url", Some(text(&target.url))),
        key("http.method", Some(text(&target.method))),
        // Values may be secrets (`headers_from_env`, `headers_from_file`): names only.
        key("http.headers", list(header_names)),
        key(
            "http.body",
            target
                .body
                .as_ref()
                .map(|body| text(&String::from_utf8_lossy(body))),
        ),
        key(
            "http.ca_file",
            target.tls.ca_file.as_ref().map(|file| path(file)),
        ),
        key(
            "http.client_cert",
            target
                .tls
                .identity_pem
                .as_ref()
                .map(|_| text("(set; not shown)")),
        ),
        key("http.version", Some(word(target.version))),
        key("http.resend", Some(word(target.resend))),
    ]
}

fn key(key: &'static str, value: Option<Value>) -> JobKey {
    JobKey { key, value }
}

fn text(value: &str) -> Value {
    Value::String(value.to_owned())
}

fn path(value: &std::path::Path) -> Value {
    text(&value.display().to_string())
}

fn duration(value: std::time::Duration) -> Value {
    text(&humantime::format_duration(value).to_string())
}

fn integer(value: impl TryInto<i64>) -> Value {
    Value::Integer(value.try_into().unwrap_or(i64::MAX))
}

/// An array of strings; `None` when empty (the key is then as good as unset).
fn list<'a>(items: impl IntoIterator<Item = &'a str>) -> Option<Value> {
    let items: Vec<Value> = items.into_iter().map(text).collect();
    (!items.is_empty()).then_some(Value::Array(items))
}

/// An enum's value as the schedule spells it: its variant's name in snake case (`RunOnce` is
/// `"run_once"`), as serde's `rename_all` reads it.
fn word(value: impl std::fmt::Debug) -> Value {
    let name = format!("{value:?}");
    let mut spelled = String::with_capacity(name.len() + 4);
    for (i, c) in name.chars().enumerate() {
        if c.is_ascii_uppercase() {
            if i > 0 {
                spelled.push('_');
            }
            spelled.push(c.to_ascii_lowercase());
        } else {
            spelled.push(c);
        }
    }
    text(&spelled)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::jobs_for_test as jobs_of;

    #[test]
    fn every_key_shows_its_default_and_a_changed_key_is_named_alone() {
        let old = jobs_of(
            r#"[[job]]
name = "a"
schedule = "0 * * * * *"
command = ["true"]
"#,
        );
        let keys = job_keys(&old[0]);
        let shown = |name: &str| {
            keys.iter()
                .find(|key| key.key == name)
                .map(JobKey::shown)
                .unwrap_or_default()
        };
        assert_eq!(shown("kill_grace"), "\"10s\"");
        assert_eq!(shown("misfire"), "\"run_once\"");
        assert_eq!(shown("concurrency"), "\"forbid\"");
        assert_eq!(shown("command"), "[\"true\"]");
        assert_eq!(shown("timeout"), "(none)");
        assert_eq!(shown("broadcast"), "false");
        let new = jobs_of(
            r#"[[job]]
name = "a"
schedule = "0 * * * * *"
command = ["true"]
timeout = "5m"
misfire = "skip"
"#,
        );
        assert_eq!(changed_keys(&old[0], &new[0]), ["timeout", "misfire"]);
        assert!(changed_keys(&old[0], &old[0]).is_empty());
    }

    #[test]
    fn a_header_value_is_never_shown_but_its_change_is_told() {
        let with = |value: &str| {
            jobs_of(&format!(
                r#"[[job]]
name = "hook"
schedule = "0 * * * * *"
http = {{ url = "http://127.0.0.1:1/x", headers = {{ Authorization = "{value}" }} }}
"#
            ))
        };
        let (old, new) = (with("Bearer one"), with("Bearer two"));
        let shown: Vec<String> = job_keys(&old[0]).iter().map(JobKey::shown).collect();
        assert!(
            shown.iter().all(|value| !value.contains("Bearer")),
            "{shown:?}"
        );
        assert_eq!(changed_keys(&old[0], &new[0]), ["http.headers"]);
    }
}
