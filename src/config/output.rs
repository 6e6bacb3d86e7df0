//! `[output]`: where a node keeps the whole output of the runs it ran, and how much of it
//! (issue 52; `crate::output_store` keeps it).
//!
//! Owns: `dir`, `keep_size`, `keep_for` and `per_run`, their defaults and their floors.
//! Must not: touch the directory (the store does, at the daemon's start).

use std::ops::Range;
use std::path::PathBuf;
use std::time::Duration;

use toml::Spanned;

use super::OutputConfig;
use super::schema::RawOutput;
use super::validator::Validator;

/// All runs' output on a node, when `keep_size` does not say.
pub const DEFAULT_KEEP_SIZE: u64 = 1 << 30;
/// How long a run's output is kept at most, when `keep_for` does not say.
pub const DEFAULT_KEEP_FOR: Duration = Duration::from_secs(14 * 24 * 3600);
/// One run's output at most, when `per_run` does not say: its first half and its last half.
pub const DEFAULT_PER_RUN: u64 = 16 << 20;
/// The least `per_run`: its head and its tail each hold several of the longest lines a job's
/// output is logged in (64 KiB, `runner::MAX_LINE_BYTES`).
const MIN_PER_RUN: u64 = 1 << 20;

impl Validator<'_> {
    pub(super) fn output(&mut self, raw: Option<RawOutput>) -> OutputConfig {
        let Some(raw) = raw else {
            return OutputConfig::default();
        };
        let dir = raw.dir.and_then(|dir| {
            let path = PathBuf::from(dir.get_ref().trim());
            if path.is_absolute() {
                Some(path)
            } else {
                let message = "expected an absolute directory, like \"/var/lib/zkcron/output\"";
                self.problem(dir.span(), "output.dir", message);
                None
            }
        });
        let keep_for = self.duration(raw.keep_for, "output.keep_for", DEFAULT_KEEP_FOR);
        let per_run = self.size(raw.per_run, "output.per_run", DEFAULT_PER_RUN);
        let keep_size = self.size(raw.keep_size, "output.keep_size", DEFAULT_KEEP_SIZE);
        if let Some((span, _)) = per_run.as_ref().filter(|(_, size)| *size < MIN_PER_RUN) {
            self.problem(span.clone(), "output.per_run", "expected at least \"1MiB\"");
        }
        let per_run = per_run.map_or(DEFAULT_PER_RUN, |(_, size)| size);
        if let Some((span, _)) = keep_size.as_ref().filter(|(_, size)| *size < per_run) {
            let message = format!(
                "expected at least per_run ({}): the store keeps one whole run",
                bytesize::ByteSize(per_run).display().iec()
            );
            self.problem(span.clone(), "output.keep_size", message);
        }
        OutputConfig {
            dir,
            keep_size: keep_size.map_or(DEFAULT_KEEP_SIZE, |(_, size)| size),
            keep_for,
            per_run,
        }
    }

    /// A size in bytes as a person writes it ("16MiB", "1 GB", "4096"), with where it was
    /// written; `None` when not given or not a size (a problem then).
    fn size(
        &mut self,
        raw: Option<Spanned<String>>,
        context: &str,
        default: u64,
    ) -> Option<(Range<usize>, u64)> {
        let raw = raw?;
        match raw.get_ref().trim().parse::<bytesize::ByteSize>() {
            Ok(size) => Some((raw.span(), size.as_u64())),
            Err(_) => {
                let message = format!(
                    "expected a size like \"16MiB\" or \"1GiB\" (default {})",
                    bytesize::ByteSize(default).display().iec()
                );
                self.problem(raw.span(), context, message);
                None
            }
        }
    }
}

impl Default for OutputConfig {
    fn default() -> Self {
        Self {
            dir: None,
            keep_size: DEFAULT_KEEP_SIZE,
            keep_for: DEFAULT_KEEP_FOR,
            per_run: DEFAULT_PER_RUN,
        }
    }
}
