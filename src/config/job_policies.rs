//! A job's run policies: what happens around its runs rather than inside them.
//!
//! Owns: retries and their backoff, how far back catch-up looks (`starting_deadline`), how many
//! run records are kept (`history`), how long a submission's id is remembered (`dedup_window`),
//! how many runs may be open at once (`max_running`), and the default concurrency by a job's kind.
//! The other built-in defaults are `job_defaults.rs`'.
//! Must not: apply a policy (the fire machine does); this only checks and fills in the values.

use std::time::Duration;

use toml::Spanned;

use super::error::JobContext;
use super::validator::Validator;
use super::{Concurrency, HISTORY_LIMIT, MAX_RUNNING_LIMIT};

/// How many upcoming ticks `jitter` is checked against.
const JITTER_SAMPLE: usize = 1_000;
/// From when: 2026-01-01, a fixed instant, so `check` says the same on every day.
const JITTER_SAMPLE_FROM_DAYS: i64 = 20_454;
/// As Cloud Tasks' `max_backoff`: a retry is never put off for longer than an hour unless asked.
const DEFAULT_RETRY_BACKOFF_MAX: Duration = Duration::from_secs(3600);
/// The longest window: every remembered id sits in every server's heap meanwhile.
const MAX_DEDUP_WINDOW: Duration = Duration::from_secs(30 * 24 * 3600);

impl Validator<'_> {
    /// `retries`: how many times a failed or timed-out run is tried again.
    pub(super) fn job_retries(
        &mut self,
        raw: Option<Spanned<i64>>,
        job: JobContext<'_>,
        default: u32,
    ) -> u32 {
        match raw {
            Some(retries) => u32::try_from(*retries.get_ref()).unwrap_or_else(|_| {
                self.problem(
                    retries.span(),
                    job.key("retries"),
                    "expected a number of retries, 0 or more",
                );
                default
            }),
            None => default,
        }
    }

    pub(super) fn job_retry_backoff(
        &mut self,
        raw: Option<Spanned<String>>,
        job: JobContext<'_>,
        default: Duration,
    ) -> Duration {
        self.duration(raw, &job.key("retry_backoff"), default)
    }

    /// `retry_backoff_max`: the longest pause before a retry, however often the backoff has
    /// doubled or however long a target's `Retry-After` asks for.
    pub(super) fn job_retry_backoff_max(
        &mut self,
        raw: Option<Spanned<String>>,
        backoff: Duration,
        job: JobContext<'_>,
    ) -> Duration {
        let span = raw.as_ref().map(Spanned::span);
        let key = job.key("retry_backoff_max");
        let max = self.duration(raw, &key, DEFAULT_RETRY_BACKOFF_MAX.max(backoff));
        if let (Some(span), true) = (span, max < backoff) {
            let message = format!(
                "must not be shorter than retry_backoff ({})",
                humantime::format_duration(backoff)
            );
            self.problem(span, key, message);
        }
        max
    }

    pub(super) fn job_starting_deadline(
        &mut self,
        raw: Option<Spanned<String>>,
        job: JobContext<'_>,
        default: Duration,
    ) -> Duration {
        self.duration(raw, &job.key("starting_deadline"), default)
    }

    /// `jitter`: shorter than the shortest time between two of the job's ticks (sampled over
    /// its next [`JITTER_SAMPLE`] ticks from a fixed instant), so a jittered tick never starts
    /// after the next one; only for a job with a schedule.
    pub(super) fn job_jitter(
        &mut self,
        raw: Option<Spanned<String>>,
        schedule: Option<&crate::schedule::Schedule>,
        job: JobContext<'_>,
    ) -> Duration {
        let span = raw.as_ref().map(Spanned::span);
        let context = job.key("jitter");
        let jitter = self.duration(raw, &context, Duration::ZERO);
        let (Some(span), false) = (span, jitter.is_zero()) else {
            return jitter;
        };
        let Some(schedule) = schedule else {
            let message = "applies to a schedule's ticks; this job has none";
            self.problem(span, context, message);
            return Duration::ZERO;
        };
        let from = chrono::DateTime::<chrono::Utc>::UNIX_EPOCH
            + chrono::Duration::days(JITTER_SAMPLE_FROM_DAYS);
        let ticks = schedule.upcoming(from, JITTER_SAMPLE);
        let shortest = ticks
            .windows(2)
            .filter_map(|pair| (pair[1] - pair[0]).to_std().ok())
            .min();
        if let Some(shortest) = shortest.filter(|gap| jitter >= *gap) {
            let message = format!(
                "must be shorter than the time between two ticks ({}): a tick would start after \
                 the next one",
                humantime::format_duration(shortest)
            );
            self.problem(span, context, message);
            return Duration::ZERO;
        }
        jitter
    }

    /// `dedup_window`: from 1 s to [`MAX_DEDUP_WINDOW`].
    pub(super) fn job_dedup_window(
        &mut self,
        raw: Option<Spanned<String>>,
        job: JobContext<'_>,
        default: Duration,
    ) -> Duration {
        let span = raw.as_ref().map(Spanned::span);
        let window = self.duration(raw, &job.key("dedup_window"), default);
        if let Some(span) =
            span.filter(|_| !(Duration::from_secs(1)..=MAX_DEDUP_WINDOW).contains(&window))
        {
            self.problem(
                span,
                job.key("dedup_window"),
                "expected a duration from \"1s\" to \"30d\"",
            );
            return default;
        }
        window
    }

    pub(super) fn job_history(
        &mut self,
        raw: Option<Spanned<i64>>,
        job: JobContext<'_>,
        default: usize,
    ) -> usize {
        self.count(
            raw,
            &job.key("history"),
            (HISTORY_LIMIT, "a number of runs to keep"),
            default,
        )
    }

    pub(super) fn job_max_running(
        &mut self,
        raw: Option<Spanned<i64>>,
        job: JobContext<'_>,
        default: usize,
    ) -> usize {
        self.count(
            raw,
            &job.key("max_running"),
            (MAX_RUNNING_LIMIT, "how many runs may be open at once"),
            default,
        )
    }
}

/// The concurrency of a job that sets none.
pub(super) fn default_concurrency(on_demand: bool) -> Concurrency {
    // Submissions of an on-demand job are independent requests: one must not skip another that
    // happens to be running (DESIGN.md "Delayed one-off jobs").
    if on_demand {
        Concurrency::Allow
    } else {
        Concurrency::Forbid
    }
}
