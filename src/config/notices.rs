//! `on_failure`, `on_failure_webhook`, `notify`, `on_recovery` and `pause_after_failures`, under
//! `[defaults]` and on a `[[job]]` (issue 20).
//!
//! Owns: checking them (the hook's program exists and may be executed, the webhook's URL is
//! http(s), its token is set) and a job's keys overriding the defaults one by one.
//! Must not: run a hook or call a webhook (`crate::notify` does), nor echo the webhook's token.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use toml::Spanned;

use super::schema::{RawNotices, RawWebhook};
use super::validator::{NeededBy, Validator};
use super::{NoticePolicy, Secret};
use crate::run::{NoticeChannels, Webhook};

/// The longest `pause_after_failures`: beyond it the job is failing for good anyway.
const MAX_PAUSE_AFTER: i64 = 10_000;

impl Validator<'_> {
    /// `raw`'s keys over `base` (the built-in defaults, or `[defaults]` for a job); `context`
    /// names a key for a problem (`defaults.on_failure`, `job "a": on_failure`).
    pub(super) fn notices(
        &mut self,
        raw: RawNotices,
        base: &NoticePolicy,
        context: &dyn Fn(&str) -> String,
    ) -> NoticePolicy {
        // A job that names neither channel shares its base's: one allocation for the schedule,
        // not one per job made among the parse's temporaries (issue 32).
        let channels = if raw.on_failure.is_none() && raw.on_failure_webhook.is_none() {
            Arc::clone(&base.channels)
        } else {
            let mut channels = NoticeChannels::clone(&base.channels);
            if let Some(command) = raw.on_failure {
                channels.command = self.hook_command(command, &context("on_failure"));
            }
            if let Some(webhook) = raw.on_failure_webhook {
                channels.webhook = self.webhook(webhook, context);
            }
            Arc::new(channels)
        };
        let pause_after_failures = match raw.pause_after_failures {
            None => base.pause_after_failures,
            Some(raw) => match u32::try_from(*raw.get_ref()) {
                Ok(0) => None,
                Ok(n) if i64::from(n) <= MAX_PAUSE_AFTER => Some(n),
                _ => {
                    let message = format!(
                        "expected a number of failed runs in a row, from 1 to {MAX_PAUSE_AFTER} \
                         (0: never pause)"
                    );
                    self.problem(raw.span(), context("pause_after_failures"), message);
                    None
                }
            },
        };
        NoticePolicy {
            channels,
            when: raw.notify.unwrap_or(base.when),
            on_recovery: raw.on_recovery.unwrap_or(base.on_recovery),
            pause_after_failures,
        }
    }

    /// `on_failure = ["prog", "arg", …]`: the program must be there and executable now, not
    /// found missing at the first failure. `[]` is no command (a job's way out of the default).
    fn hook_command(&mut self, raw: Spanned<Vec<String>>, context: &str) -> Option<Vec<String>> {
        let span = raw.span();
        let argv = raw.into_inner();
        let program = argv.first()?;
        if !self.looks_up(NeededBy::Daemon) {
            return Some(argv);
        }
        let path = (self.env)("PATH").unwrap_or_default();
        match find_program(program, &path) {
            Ok(_) => Some(argv),
            Err(why) => {
                self.problem(span, context, why);
                None
            }
        }
    }

    fn webhook(
        &mut self,
        raw: Spanned<RawWebhook>,
        context: &dyn Fn(&str) -> String,
    ) -> Option<Webhook> {
        let raw = raw.into_inner();
        let url = self.http_url(
            &raw.url,
            context("on_failure_webhook.url"),
            "name an environment variable holding a token in token_env",
        );
        let token = match raw.token_env {
            None => Some(None),
            // Named, not read: a config that sends no notice.
            Some(_) if !self.looks_up(NeededBy::Daemon) => Some(None),
            Some(name) => match (self.env)(name.get_ref()).filter(|v| !v.trim().is_empty()) {
                Some(token) => Some(Some(Secret::new(token.trim()))),
                None => {
                    let message = format!(
                        "environment variable {} is not set or empty",
                        name.get_ref()
                    );
                    self.problem(
                        name.span(),
                        context("on_failure_webhook.token_env"),
                        message,
                    );
                    None
                }
            },
        };
        Some(Webhook {
            url: url?,
            token: token?,
        })
    }
}

/// Where `program` is: a path (with a `/`) as it is, a bare name searched in `path_var` as
/// `execvp` would. The reason, for the schedule's author, when it is not there or not executable.
fn find_program(program: &str, path_var: &str) -> Result<PathBuf, String> {
    if program.is_empty() {
        return Err("expected a program, not an empty string".to_owned());
    }
    if program.contains('/') {
        let path = Path::new(program);
        return match std::fs::metadata(path) {
            Ok(meta) if meta.is_file() && meta.permissions().mode() & 0o111 != 0 => {
                Ok(path.to_path_buf())
            }
            Ok(meta) if meta.is_file() => Err(format!("{program} is not executable")),
            Ok(_) => Err(format!("{program} is not a file")),
            Err(err) => Err(format!("cannot use {program}: {err}")),
        };
    }
    path_var
        .split(':')
        .filter(|dir| !dir.is_empty())
        .map(|dir| Path::new(dir).join(program))
        .find(|candidate| {
            std::fs::metadata(candidate)
                .is_ok_and(|meta| meta.is_file() && meta.permissions().mode() & 0o111 != 0)
        })
        .ok_or_else(|| format!("no executable {program:?} on PATH"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_program_is_found_on_the_path_or_refused_with_the_reason() {
        assert_eq!(
            find_program("sh", "/nonexistent:/bin"),
            Ok("/bin/sh".into())
        );
        assert_eq!(
            find_program("sh", "/nonexistent"),
            Err("no executable \"sh\" on PATH".into())
        );
        assert_eq!(find_program("/bin/sh", ""), Ok("/bin/sh".into()));
        let dir = tempfile::tempdir().expect("temp dir");
        let plain = dir.path().join("page");
        std::fs::write(&plain, "#!/bin/sh\n").expect("write");
        let plain = plain.display().to_string();
        assert_eq!(
            find_program(&plain, ""),
            Err(format!("{plain} is not executable"))
        );
        assert!(
            find_program("/no/such/page", "")
                .is_err_and(|why| why.contains("/no/such/page") && why.contains("No such file"))
        );
    }
}
