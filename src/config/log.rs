//! `[log]`: how the daemon's log lines look and which of them are written.
//!
//! Owns: the log format and the tracing filter (checked here, so a bad filter is refused at load
//! with its line), and their defaults.
//! Must not: install the subscriber (`crate::logging` does).

use super::schema::RawLog;
use super::validator::Validator;
use super::{LogConfig, LogFormat};

impl Validator<'_> {
    pub(super) fn log(&mut self, raw: Option<RawLog>) -> Option<LogConfig> {
        let Some(raw) = raw else {
            return Some(LogConfig {
                format: LogFormat::Text,
                level: "info".into(),
            });
        };
        let level = match raw.level {
            Some(level) => {
                if tracing_subscriber::EnvFilter::try_new(level.get_ref()).is_err() {
                    let message =
                        "expected a log filter like \"info\", \"debug\" or \"zkcron=debug,info\"";
                    self.problem(level.span(), "log.level", message);
                }
                level.into_inner()
            }
            None => "info".into(),
        };
        Some(LogConfig {
            format: raw.format.unwrap_or(LogFormat::Text),
            level,
        })
    }
}
