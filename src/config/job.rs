//! `[[job]]`: one job, what it runs and when.
//!
//! Owns: the job's name, its schedule and time zone, what it runs (`command` or `shell`, working
//! dir, env, timeout, kill grace), and how its problems are named (`job "nightly": schedule`).
//! Its run policies (retries, catch-up, history, concurrency…) are checked in `job_policies.rs`.
//! Must not: run anything (`crate::runner` does) or compute ticks (`crate::schedule` does); the
//! schedule is only parsed here.

use std::collections::BTreeMap;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use chrono_tz::Tz;
use toml::Spanned;

use super::broadcast::BroadcastKeys;
use super::error::JobContext;
use super::job_policies::default_concurrency;
use super::schema::{RawJob, RawNotices};
use super::validator::Validator;
use super::{JobConfig, NoticePolicy};
use crate::ids::JobName;
use crate::run::{JobSpec, Launcher, Program};
use crate::schedule::{self, Schedule};

impl Validator<'_> {
    /// One `[[job]]` (`span`: the whole table); `None` when it has no usable program, schedule or
    /// time zone (the problems are recorded).
    pub(super) fn job(&mut self, mut raw: RawJob, span: Range<usize>) -> Option<JobConfig> {
        let name = raw.name.get_ref().clone();
        let job = JobContext::Job(&name);
        if !is_job_name(&name) {
            self.problem(
                raw.name.span(),
                job.key("name"),
                "expected letters, digits, '_', '.' or '-' only",
            );
        }
        let d = Arc::clone(&self.job_defaults);
        let notice_keys = raw.take_notices();
        let tz = match &raw.timezone {
            Some(_) => self.job_timezone(raw.timezone.as_ref(), job),
            None => Some(d.timezone),
        };
        let schedule = self.job_schedule(raw.schedule.as_ref(), tz, job);
        let process = self.job_process(&mut raw, span, job);
        let span_of = |key: &Option<Spanned<Vec<Spanned<String>>>>| key.as_ref().map(Spanned::span);
        let refused_by_broadcast = [
            ("after", span_of(&raw.after)),
            ("retries", raw.retries.as_ref().map(Spanned::span)),
            ("limits", span_of(&raw.limits)),
            ("except", span_of(&raw.except)),
            ("only", span_of(&raw.only)),
        ];
        let (retries, retry_backoff, retry_backoff_max) = self.job_retry_policy(&mut raw, job);
        let starting_deadline =
            self.job_starting_deadline(raw.starting_deadline, job, d.starting_deadline);
        let jitter = self.job_jitter(raw.jitter, schedule.as_ref().and_then(Option::as_ref), job);
        let dedup_window = self.job_dedup_window(raw.dedup_window, job, d.dedup_window);
        let limits = self.job_limits(raw.limits, job);
        let group = self.job_group(raw.group, job);
        let schedule_span = raw.schedule.as_ref().map(Spanned::span);
        let calendars = self.job_calendars(raw.except, raw.only, schedule_span.is_some(), job);
        let after = self.job_after(
            raw.after.take(),
            raw.after_status.take(),
            schedule_span.clone(),
            job,
            &name,
        );
        let broadcast_keys = BroadcastKeys {
            refused: refused_by_broadcast,
            broadcast: raw.broadcast.take(),
            requires: raw.requires.take(),
            schedule: schedule_span.clone(),
            concurrency: raw.concurrency,
        };
        let broadcast = self.job_broadcast(broadcast_keys, job);
        let notices = self.job_notices(notice_keys, job);
        let spec = JobSpec {
            name: JobName::new(name.clone()),
            // From here on only for a job with a usable program: a job without one does not
            // report problems in history or max_running.
            program: process.program?,
            working_dir: process.working_dir,
            env: process.env,
            timeout: process.timeout,
            kill_grace: process.kill_grace,
            launcher: Launcher::Direct,
            user: process.user,
        };
        let history = self.job_history(raw.history, job, d.history);
        let max_running = self.job_max_running(raw.max_running, job, d.max_running);
        let on_demand = raw.schedule.is_none();
        Some(JobConfig {
            spec: Arc::new(spec),
            schedule: schedule?,
            timezone: tz?,
            on_lost: raw.on_lost.unwrap_or(d.on_lost),
            keep_output: raw.keep_output.unwrap_or(d.keep_output),
            jitter,
            notices,
            enabled: raw.enabled.unwrap_or(true),
            history,
            max_running,
            concurrency: raw
                .concurrency
                .or(d.concurrency)
                .unwrap_or(default_concurrency(on_demand)),
            misfire: raw.misfire.unwrap_or(d.misfire),
            starting_deadline,
            on_interrupted: raw.on_interrupted.unwrap_or(d.on_interrupted),
            // A broadcast tick is run once per node, on time, or recorded missed.
            retries: if broadcast.is_some() { 0 } else { retries },
            retry_backoff,
            retry_backoff_max,
            dedup_window,
            limits,
            group,
            after,
            calendars,
            broadcast,
        })
    }

    /// What a job runs and how (`command`, `shell` or `http`; `working_dir`, `env`, `user`,
    /// `timeout`, `kill_grace`), taken out of `raw`, with the process-only defaults applied to
    /// a process only: an http job takes none of them.
    fn job_process(
        &mut self,
        raw: &mut RawJob,
        span: Range<usize>,
        job: JobContext<'_>,
    ) -> ProcessParts {
        let d = Arc::clone(&self.job_defaults);
        let process_only = [
            ("working_dir", raw.working_dir.as_ref().map(Spanned::span)),
            ("env", raw.env.as_ref().map(Spanned::span)),
            ("kill_grace", raw.kill_grace.as_ref().map(Spanned::span)),
            ("user", raw.user.as_ref().map(Spanned::span)),
        ];
        let is_process = raw.http.is_none();
        let (command, shell) = (raw.command.take(), raw.shell.take());
        let program = match raw.http.take() {
            Some(http) => self.job_http(http, command, shell, process_only, job),
            None => self.job_program(command, shell, span, job),
        };
        // The process-only defaults go to processes only: an http job takes none of them.
        let working_dir = match raw.working_dir.take() {
            Some(dir) => self.job_working_dir(Some(dir), job),
            None => d.working_dir.clone().filter(|_| is_process),
        };
        let mut env = if is_process {
            d.env.clone()
        } else {
            BTreeMap::new()
        };
        env.extend(self.job_env(raw.env.take(), job));
        let user = match raw.user.take() {
            Some(user) if is_process => self.job_user(Some(user), job),
            Some(_) => None,
            None => d.user.clone().filter(|_| is_process),
        };
        let timeout = match raw.timeout.take() {
            Some(timeout) => self.job_timeout(Some(timeout), job),
            None => d.timeout,
        };
        let kill_grace = self.duration(raw.kill_grace.take(), &job.key("kill_grace"), d.kill_grace);
        ProcessParts {
            program,
            working_dir,
            env,
            user,
            timeout,
            kill_grace,
        }
    }

    /// `retries`, `retry_backoff` and `retry_backoff_max`, taken out of `raw`, each with its
    /// default.
    fn job_retry_policy(
        &mut self,
        raw: &mut RawJob,
        job: JobContext<'_>,
    ) -> (u32, Duration, Duration) {
        let d = Arc::clone(&self.job_defaults);
        let retries = self.job_retries(raw.retries.take(), job, d.retries);
        let backoff_span = raw.retry_backoff.as_ref().map(Spanned::span);
        let retry_backoff = self.job_retry_backoff(raw.retry_backoff.take(), job, d.retry_backoff);
        let retry_backoff_max = match (raw.retry_backoff_max.take(), d.retry_backoff_max) {
            (None, Some(max)) => self.defaults_backoff_max(max, retry_backoff, backoff_span, job),
            (own, _) => self.job_retry_backoff_max(own, retry_backoff, job),
        };
        (retries, retry_backoff, retry_backoff_max)
    }

    /// The job's notice keys over `[defaults]`' notices.
    fn job_notices(&mut self, keys: RawNotices, job: JobContext<'_>) -> NoticePolicy {
        let defaults = self.notice_defaults.clone();
        self.notices(keys, &defaults, &|key| job.key(key))
    }

    /// `[defaults]`' `retry_backoff_max` for a job that sets none: a job whose own
    /// `retry_backoff` is longer is a problem at that key.
    fn defaults_backoff_max(
        &mut self,
        max: Duration,
        backoff: Duration,
        backoff_span: Option<Range<usize>>,
        job: JobContext<'_>,
    ) -> Duration {
        if let (Some(span), true) = (backoff_span, backoff > max) {
            let message = format!(
                "must not be longer than [defaults] retry_backoff_max ({}): set this job's own \
                 retry_backoff_max",
                humantime::format_duration(max)
            );
            self.problem(span, job.key("retry_backoff"), message);
        }
        max.max(backoff)
    }

    /// `timezone`, UTC when unset; `None` when it names no zone.
    pub(super) fn job_timezone(
        &mut self,
        raw: Option<&Spanned<String>>,
        job: JobContext<'_>,
    ) -> Option<Tz> {
        match raw {
            Some(tz) => match schedule::parse_timezone(tz.get_ref()) {
                Ok(tz) => Some(tz),
                Err(err) => {
                    self.problem(tz.span(), job.key("timezone"), err.to_string());
                    None
                }
            },
            None => Some(chrono_tz::UTC),
        }
    }

    /// `schedule` in the job's zone: `Some(None)` for an on-demand job (no schedule), `None` when
    /// the expression or the zone is bad.
    fn job_schedule(
        &mut self,
        raw: Option<&Spanned<String>>,
        tz: Option<Tz>,
        job: JobContext<'_>,
    ) -> Option<Option<Schedule>> {
        // With a bad zone, still check the expression (in UTC) so every problem shows at once.
        match raw {
            None => Some(None),
            Some(expression) => {
                match Schedule::parse(expression.get_ref(), tz.unwrap_or(chrono_tz::UTC)) {
                    Ok(schedule) => tz.map(|_| Some(schedule)),
                    Err(err) => {
                        // Point at the bad field inside the quoted expression when we know it.
                        let whole = expression.span();
                        let span = err
                            .span()
                            .filter(|_| !expression.get_ref().contains('\\'))
                            .map_or(whole.clone(), |inner| {
                                whole.start + 1 + inner.start..whole.start + 1 + inner.end
                            });
                        self.problem(span, job.key("schedule"), err.to_string());
                        None
                    }
                }
            }
        }
    }

    /// What the job runs: exactly one of `command` (an argv array) and `shell`; `span` is the
    /// whole job, for when both are missing.
    fn job_program(
        &mut self,
        command: Option<Spanned<Vec<String>>>,
        shell: Option<Spanned<String>>,
        span: Range<usize>,
        job: JobContext<'_>,
    ) -> Option<Program> {
        match (command, shell) {
            (Some(command), None) => {
                let argv = command.get_ref().clone();
                if argv.first().is_none_or(|program| program.trim().is_empty()) {
                    let message = "expected a non-empty argv array like [\"/usr/local/bin/report\", \"--daily\"]";
                    self.problem(command.span(), job.key("command"), message);
                }
                Some(Program::Argv(argv))
            }
            (None, Some(shell)) => {
                if shell.get_ref().trim().is_empty() {
                    self.problem(
                        shell.span(),
                        job.key("shell"),
                        "expected a non-empty shell command",
                    );
                }
                Some(Program::Shell(shell.into_inner()))
            }
            (Some(_), Some(shell)) => {
                self.problem(
                    shell.span(),
                    job.key("shell"),
                    "set either command or shell, not both",
                );
                None
            }
            (None, None) => {
                self.problem(
                    span,
                    job.whole(),
                    "expected command (an argv array), shell or http",
                );
                None
            }
        }
    }

    /// An `http` target, alone: no `command` or `shell` beside it, nor a key that applies to a
    /// process only.
    fn job_http(
        &mut self,
        http: Spanned<super::schema::RawHttpTarget>,
        command: Option<Spanned<Vec<String>>>,
        shell: Option<Spanned<String>>,
        process_only: [(&str, Option<Range<usize>>); 4],
        job: JobContext<'_>,
    ) -> Option<Program> {
        let other = command
            .map(|c| ("command", c.span()))
            .or(shell.map(|s| ("shell", s.span())));
        if let Some((key, span)) = other {
            let message = "set one of command, shell or http";
            self.problem(span, job.key(key), message);
            return None;
        }
        for (key, span) in process_only {
            if let Some(span) = span {
                let message = "applies to a process; this job's target is http";
                self.problem(span, job.key(key), message);
            }
        }
        self.http_target(http, job)
            .map(|target| Program::Http(Box::new(target)))
    }

    pub(super) fn job_working_dir(
        &mut self,
        raw: Option<Spanned<String>>,
        job: JobContext<'_>,
    ) -> Option<PathBuf> {
        raw.map(|dir| {
            if !Path::new(dir.get_ref()).is_absolute() {
                self.problem(
                    dir.span(),
                    job.key("working_dir"),
                    "expected an absolute path",
                );
            }
            PathBuf::from(dir.into_inner())
        })
    }

    /// `env`: variables added to the job's environment.
    pub(super) fn job_env(
        &mut self,
        raw: Option<Spanned<BTreeMap<String, String>>>,
        job: JobContext<'_>,
    ) -> BTreeMap<String, String> {
        raw.map_or_else(BTreeMap::new, |env| {
            let bad = env
                .get_ref()
                .keys()
                .find(|key| key.is_empty() || key.contains(['=', '\0']));
            if let Some(key) = bad {
                let message = format!("invalid variable name {key:?}");
                self.problem(env.span(), job.key("env"), message);
            }
            env.into_inner()
        })
    }

    /// `timeout`; `None`: the run may take as long as it takes.
    pub(super) fn job_timeout(
        &mut self,
        raw: Option<Spanned<String>>,
        job: JobContext<'_>,
    ) -> Option<Duration> {
        raw.map(|t| {
            let key = job.key("timeout");
            self.positive_duration(Some(t), &key, Duration::ZERO)
        })
    }
}

fn is_job_name(name: &str) -> bool {
    !name.is_empty()
        && name != "."
        && name != ".."
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-'))
}

/// What a job runs and how, before it is known to have a usable program.
struct ProcessParts {
    program: Option<Program>,
    working_dir: Option<PathBuf>,
    env: BTreeMap<String, String>,
    user: Option<Arc<crate::run::RunAs>>,
    timeout: Option<Duration>,
    kill_grace: Duration,
}
