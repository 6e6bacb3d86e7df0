//! `[defaults]`' job policies over the built-in ones ([`JobDefaults`], in `model.rs`).
//!
//! Owns: the check of `[defaults]`' policy keys, made once (a bad default is one problem at its
//! line, not one per job), and what `zkcron check` shows of them.
//! Must not: know a job's own keys or merge them (`job.rs` does, key by key), nor the notice
//! keys of `[defaults]` (`notices.rs` does).

use toml::Spanned;

use super::error::JobContext;
use super::model::JobDefaults;
use super::schema::RawDefaults;
use super::validator::Validator;

impl Validator<'_> {
    /// `[defaults]`' policy keys (its notice keys taken out) over the built-in defaults, each
    /// checked as a job's own key is, and named `defaults.<key>` in a problem.
    pub(super) fn job_defaults(&mut self, raw: RawDefaults) -> JobDefaults {
        let base = JobDefaults::default();
        let at = JobContext::Defaults;
        let shown = self.shown(&raw);
        let timezone = match &raw.timezone {
            Some(_) => self
                .job_timezone(raw.timezone.as_ref(), at)
                .unwrap_or(base.timezone),
            None => base.timezone,
        };
        let retry_backoff = self.job_retry_backoff(raw.retry_backoff, at, base.retry_backoff);
        let retry_backoff_max = raw
            .retry_backoff_max
            .map(|max| self.job_retry_backoff_max(Some(max), retry_backoff, at));
        JobDefaults {
            timezone,
            working_dir: self.job_working_dir(raw.working_dir, at),
            env: self.job_env(raw.env, at),
            user: self.job_user(raw.user, at),
            timeout: self.job_timeout(raw.timeout, at),
            kill_grace: self.duration(raw.kill_grace, &at.key("kill_grace"), base.kill_grace),
            on_lost: raw.on_lost.map_or(base.on_lost, Spanned::into_inner),
            keep_output: raw
                .keep_output
                .map_or(base.keep_output, Spanned::into_inner),
            history: self.job_history(raw.history, at, base.history),
            max_running: self.job_max_running(raw.max_running, at, base.max_running),
            concurrency: raw.concurrency.map(Spanned::into_inner),
            misfire: raw.misfire.map_or(base.misfire, Spanned::into_inner),
            starting_deadline: self.job_starting_deadline(
                raw.starting_deadline,
                at,
                base.starting_deadline,
            ),
            on_interrupted: raw
                .on_interrupted
                .map_or(base.on_interrupted, Spanned::into_inner),
            retries: self.job_retries(raw.retries, at, base.retries),
            retry_backoff,
            retry_backoff_max,
            dedup_window: self.job_dedup_window(raw.dedup_window, at, base.dedup_window),
            shown,
        }
    }

    /// Each key `raw` sets, as `key = value` with the value as the file writes it.
    fn shown(&self, raw: &RawDefaults) -> Vec<String> {
        let spans = [
            ("timezone", raw.timezone.as_ref().map(Spanned::span)),
            ("working_dir", raw.working_dir.as_ref().map(Spanned::span)),
            ("env", raw.env.as_ref().map(Spanned::span)),
            ("user", raw.user.as_ref().map(Spanned::span)),
            ("timeout", raw.timeout.as_ref().map(Spanned::span)),
            ("kill_grace", raw.kill_grace.as_ref().map(Spanned::span)),
            ("on_lost", raw.on_lost.as_ref().map(Spanned::span)),
            ("keep_output", raw.keep_output.as_ref().map(Spanned::span)),
            ("history", raw.history.as_ref().map(Spanned::span)),
            ("max_running", raw.max_running.as_ref().map(Spanned::span)),
            ("concurrency", raw.concurrency.as_ref().map(Spanned::span)),
            ("misfire", raw.misfire.as_ref().map(Spanned::span)),
            (
                "starting_deadline",
                raw.starting_deadline.as_ref().map(Spanned::span),
            ),
            (
                "on_interrupted",
                raw.on_interrupted.as_ref().map(Spanned::span),
            ),
            ("retries", raw.retries.as_ref().map(Spanned::span)),
            (
                "retry_backoff",
                raw.retry_backoff.as_ref().map(Spanned::span),
            ),
            (
                "retry_backoff_max",
                raw.retry_backoff_max.as_ref().map(Spanned::span),
            ),
            ("dedup_window", raw.dedup_window.as_ref().map(Spanned::span)),
        ];
        let mut set: Vec<(usize, String)> = spans
            .into_iter()
            .filter_map(|(key, span)| {
                let span = span?;
                let value = self.text.get(span.clone())?;
                Some((span.start, format!("{key} = {value}")))
            })
            .collect();
        set.sort();
        set.into_iter().map(|(_, shown)| shown).collect()
    }
}
