//! Where a run's output lies under the store's directory, and the format of its lines.
//!
//! Owns: file names (a job's and a run id's characters that are not plainly safe in a file
//! name are written `%XX`), the stamped line and its parsing.
//! Must not: read or write a file's contents.

use std::fmt::Write as _;
use std::io;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};

use chrono::{DateTime, Utc};

/// The stream named on the store's own lines: no job's output is named so.
pub const OURS: &str = "zkcron";

/// The start of the last line of a whole file, after [`OURS`].
pub const ENDED: &str = "ended: ";

/// The file of `job`'s run `run_id`, attempt `attempt`.
pub(super) fn run_file(dir: &Path, job: &str, run_id: &str, attempt: u32) -> PathBuf {
    dir.join(encode(job))
        .join(format!("{}.{attempt}.log", encode(run_id)))
}

/// The kept file of the highest attempt of `run_id` there is.
pub(super) fn latest_attempt(dir: &Path, job: &str, run_id: &str) -> Option<PathBuf> {
    let prefix = format!("{}.", encode(run_id));
    let entries = std::fs::read_dir(dir.join(encode(job))).ok()?;
    entries
        .flatten()
        .filter_map(|entry| {
            let name = entry.file_name().into_string().ok()?;
            let attempt: u32 = name
                .strip_prefix(&prefix)?
                .strip_suffix(".log")?
                .parse()
                .ok()?;
            Some((attempt, entry.path()))
        })
        .max_by_key(|(attempt, _)| *attempt)
        .map(|(_, path)| path)
}

/// Makes `dir` and its parents, readable by the daemon's user and group alone: a job's output
/// may hold what its logs should not show to every user of the host.
pub(super) fn make_private_dir(dir: &Path) -> io::Result<()> {
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o750)
        .create(dir)
}

/// `name` as a file name: letters, digits, `-` and `_` as they are, any other byte `%XX` (so
/// no name is `.`, `..` or holds a `/`).
fn encode(name: &str) -> String {
    let mut encoded = String::with_capacity(name.len());
    for byte in name.bytes() {
        if byte.is_ascii_alphanumeric() || byte == b'-' || byte == b'_' {
            encoded.push(char::from(byte));
        } else {
            let _ = write!(encoded, "%{byte:02X}");
        }
    }
    encoded
}

/// One stamped line, `\n` included.
pub(super) fn stamped(at: DateTime<Utc>, stream: &str, text: &str) -> String {
    // Not `format("%Y…")`: that parses its pattern again for every line.
    let time = at.to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
    let mut line = String::with_capacity(time.len() + stream.len() + text.len() + 3);
    for part in [time.as_str(), " ", stream, " ", text, "\n"] {
        line.push_str(part);
    }
    line
}

/// A kept line taken apart: when it was read, from which stream (`stdout`, `stderr`, or
/// `zkcron` for the store's own), and its text.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct ParsedLine<'a> {
    pub time: &'a str,
    pub stream: &'a str,
    pub line: &'a str,
}

/// Takes a kept line (without its `\n`) apart; `None` for a line that is not one of ours.
pub fn parse_line(line: &str) -> Option<ParsedLine<'_>> {
    let (time, rest) = line.split_once(' ')?;
    let (stream, text) = rest.split_once(' ').unwrap_or((rest, ""));
    Some(ParsedLine {
        time,
        stream,
        line: text,
    })
}

/// Whether a kept line is the last of a whole file.
pub(super) fn is_end(line: &str) -> bool {
    parse_line(line).is_some_and(|parsed| parsed.stream == OURS && parsed.line.starts_with(ENDED))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_never_leave_their_directory() {
        let dir = Path::new("/out");
        assert_eq!(
            run_file(dir, "backup", "backup-1700000000000", 2),
            Path::new("/out/backup/backup-1700000000000.2.log")
        );
        assert_eq!(
            run_file(dir, "..", "../x", 1),
            Path::new("/out/%2E%2E/%2E%2E%2Fx.1.log")
        );
    }

    #[test]
    fn a_line_is_taken_apart_as_it_was_stamped() {
        let at = DateTime::from_timestamp_millis(1_700_000_000_123).unwrap();
        let line = stamped(at, "stderr", "disk  full ");
        assert_eq!(line, "2023-11-14T22:13:20.123Z stderr disk  full \n");
        let parsed = parse_line(line.trim_end_matches('\n')).unwrap();
        assert_eq!(
            parsed,
            ParsedLine {
                time: "2023-11-14T22:13:20.123Z",
                stream: "stderr",
                line: "disk  full ",
            }
        );
        assert!(is_end(stamped(at, OURS, "ended: exit 0").trim_end()));
        assert!(!is_end(stamped(at, "stdout", "ended: exit 0").trim_end()));
    }
}
