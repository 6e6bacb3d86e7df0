//! What a bad schedule file looks like to an operator: every problem, compiler style.
//!
//! Owns: the error types of loading ([`LoadError`], [`ConfigError`], [`Problem`]), turning a byte
//! span into a file and its line:col ([`Files`]), and rendering each problem with its source line and a caret.
//! Must not: decide what is a problem (the validators do), nor show a secret's line.

use std::fmt;
use std::ops::Range;
use std::path::{Path, PathBuf};

/// A schedule file that could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error("cannot read {}", path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "no schedule file at {}: name one with --config FILE or ZKCRON_CONFIG, or write a \
         commented one to start from with `zkcron init`",
        path.display()
    )]
    Missing { path: PathBuf },
    #[error("{0}")]
    Invalid(ConfigError),
}

/// Every problem found in one file, each with where it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    /// The main file.
    pub path: PathBuf,
    /// The files' text, one after the other, for rendering each problem's source line.
    pub(super) text: String,
    /// Which file each span is in.
    pub(super) files: Files,
    pub problems: Vec<Problem>,
}

/// One problem: where, in which key, and what was expected.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// Byte range in the file; `None` when the problem is the file as a whole.
    pub span: Option<Range<usize>>,
    /// What the problem is in, e.g. `zookeeper.connect` or `job "nightly": schedule`.
    pub context: String,
    pub message: String,
    /// The value is a secret: the rendering shows where, never the line itself.
    pub secret: bool,
}

/// What a problem is in, part by part, as its context names it: the table (`zookeeper`,
/// `job`, `defaults`), the element of an array of tables (a job's name, or `#3` for one with
/// none), and the key (`None`: the table or element as a whole).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ProblemPlace {
    pub table: Option<String>,
    pub element: Option<String>,
    pub key: Option<String>,
}

impl Problem {
    /// [`Problem::context`] read back into its parts; the forms are those the reader and the
    /// validator name problems by: `zookeeper.connect`, `[zookeeper]`, `job "nightly": schedule`,
    /// `job "nightly"`, `job #3: name`, `defaults.timeout`. Anything else is a key alone.
    pub fn place(&self) -> ProblemPlace {
        let context = self.context.as_str();
        if context.is_empty() {
            return ProblemPlace::default();
        }
        if let Some(table) = context.strip_prefix('[').and_then(|c| c.strip_suffix(']')) {
            return ProblemPlace {
                table: Some(table.to_owned()),
                ..ProblemPlace::default()
            };
        }
        if let Some((table, rest)) = context.split_once(' ')
            && table.chars().all(|c| c.is_ascii_lowercase() || c == '_')
        {
            let (element, key) = match rest.rsplit_once("\": ") {
                Some((element, key)) => (format!("{element}\""), Some(key.to_owned())),
                None => match rest.split_once(": ") {
                    Some((element, key)) => (element.to_owned(), Some(key.to_owned())),
                    None => (rest.to_owned(), None),
                },
            };
            let element = element
                .strip_prefix('"')
                .and_then(|e| e.strip_suffix('"'))
                .map_or(element.clone(), str::to_owned);
            return ProblemPlace {
                table: Some(table.to_owned()),
                element: Some(element),
                key,
            };
        }
        match context.split_once('.') {
            Some((table, key)) if !table.contains(' ') => ProblemPlace {
                table: Some(table.to_owned()),
                element: None,
                key: Some(key.to_owned()),
            },
            _ => ProblemPlace {
                key: Some(context.to_owned()),
                ..ProblemPlace::default()
            },
        }
    }
}

impl ConfigError {
    /// Line and column (1-based) of a byte offset, in its own file; never panics on a bad
    /// offset.
    pub fn line_col(&self, offset: usize) -> (usize, usize) {
        let (_, start) = self.files.of(offset);
        line_col(self.file_text(start), offset.saturating_sub(start))
    }

    /// The file a byte offset is in: the main file or a drop-in.
    pub fn file_of(&self, offset: usize) -> &Path {
        self.files.of(offset).0
    }

    /// The drop-ins read after the main file, in the order they apply.
    pub fn drop_ins(&self) -> Vec<&Path> {
        self.files
            .placed()
            .iter()
            .skip(1)
            .map(|(path, _)| path.as_path())
            .collect()
    }

    /// The text of the file starting at `start`.
    fn file_text(&self, start: usize) -> &str {
        self.text.get(start..).unwrap_or_default()
    }

    /// Each problem's line and column in its own file (`None`: the file as a whole), found
    /// with one pass over the text for all of them: a file with thousands of problems is
    /// placed as fast as one with a few.
    pub fn places(&self) -> Vec<Option<(usize, usize)>> {
        let lines = self.line_starts();
        self.problems
            .iter()
            .map(|problem| {
                let span = problem.span.as_ref()?;
                Some(self.place(&lines, span.start))
            })
            .collect()
    }

    /// Where each line of the text starts.
    fn line_starts(&self) -> LineStarts {
        LineStarts::of(&self.text)
    }

    /// Line and column of byte `offset` in its own file, given the text's line starts.
    fn place(&self, lines: &LineStarts, offset: usize) -> (usize, usize) {
        let (_, file_start) = self.files.of(offset);
        let first = lines.line_of(file_start);
        match lines.line_col(&self.text, offset) {
            Some((line, col)) => (line - first, col),
            // Not on a character's boundary, or past the end: as line_col says.
            None => self.line_col(offset),
        }
    }

    /// The text of line `line` (0-based, of the whole text), without its line break.
    fn line_text<'t>(&'t self, lines: &LineStarts, line: usize) -> Option<&'t str> {
        let start = lines.start(line)?;
        let end = lines
            .start(line + 1)
            .map_or(self.text.len(), |next| next - 1);
        self.text
            .get(start..end)
            .map(|text| text.trim_end_matches('\r'))
    }

    /// `file:line:col: context: message` lines, each with the offending line and a caret.
    pub fn render(&self) -> String {
        let lines = self.line_starts();
        let mut out = String::new();
        for (i, problem) in self.problems.iter().enumerate() {
            if i > 0 {
                out.push('\n');
            }
            out.push_str(&self.render_problem(problem, &lines));
        }
        out
    }

    fn render_problem(&self, problem: &Problem, lines: &LineStarts) -> String {
        let path = problem
            .span
            .as_ref()
            .map_or(self.path.as_path(), |span| self.file_of(span.start))
            .display();
        let context = if problem.context.is_empty() {
            String::new()
        } else {
            format!("{}: ", problem.context)
        };
        let Some(span) = &problem.span else {
            return format!("{path}: {context}{}", problem.message);
        };
        let (line, col) = self.place(lines, span.start);
        let mut out = format!("{path}:{line}:{col}: {context}{}", problem.message);
        let source_line = self.line_text(lines, lines.line_of(span.start));
        if let Some(source_line) = source_line.filter(|l| !problem.secret && !may_hold_a_secret(l))
        {
            let width = self
                .text
                .get(span.clone())
                .map_or(1, |s| s.lines().next().map_or(1, |l| l.chars().count()));
            let gutter = " ".repeat(line.to_string().len());
            out.push_str(&format!(
                "\n {gutter} |\n {line} | {source_line}\n {gutter} | {}{}",
                " ".repeat(col - 1),
                "^".repeat(width.max(1))
            ));
        }
        out
    }
}

/// Where each file of a schedule sits in the one text its problems' spans index.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Files {
    /// Each file and the offset it starts at, the main file first.
    files: Vec<(PathBuf, usize)>,
}

impl Files {
    pub(super) fn new(files: Vec<(PathBuf, usize)>) -> Self {
        Self { files }
    }

    /// Each file and the offset it starts at, the main file first.
    pub(super) fn placed(&self) -> &[(PathBuf, usize)] {
        &self.files
    }

    /// The file holding byte `offset` of the combined text, and where that file starts.
    pub fn of(&self, offset: usize) -> (&Path, usize) {
        self.files
            .iter()
            .rev()
            .find(|(_, start)| *start <= offset)
            .or(self.files.first())
            .map_or((Path::new(""), 0), |(path, start)| (path.as_path(), *start))
    }

    /// The main file.
    pub fn main(&self) -> &Path {
        self.files.first().map_or(Path::new(""), |(path, _)| path)
    }

    /// The file and 1-based line of byte `offset` of `text` (the combined text).
    pub(super) fn file_line(&self, text: &str, offset: usize) -> (&Path, usize) {
        let (path, start) = self.of(offset);
        let (line, _) = line_col(
            text.get(start..).unwrap_or_default(),
            offset.saturating_sub(start),
        );
        (path, line)
    }

    /// `path:line` of byte `offset` of `text` (the combined text).
    pub(super) fn place(&self, text: &str, offset: usize) -> String {
        let (path, line) = self.file_line(text, offset);
        format!("{}:{line}", path.display())
    }
}

/// Where each line of a text starts, found once: the line and column of many offsets, each
/// without counting lines from the top (`zkcron check` places thousands at once).
#[derive(Debug, Clone)]
pub struct LineStarts(Vec<usize>);

impl LineStarts {
    pub fn of(text: &str) -> Self {
        Self(
            std::iter::once(0)
                .chain(text.match_indices('\n').map(|(at, _)| at + 1))
                .collect(),
        )
    }

    /// The line (0-based) that holds byte `offset`.
    pub fn line_of(&self, offset: usize) -> usize {
        self.0
            .partition_point(|start| *start <= offset)
            .saturating_sub(1)
    }

    /// Where line `line` (0-based) starts.
    pub fn start(&self, line: usize) -> Option<usize> {
        self.0.get(line).copied()
    }

    /// Line and column (1-based, the column in characters) of byte `offset` of `text`, the
    /// text these starts are of; `None` off a character's boundary or past the end.
    pub fn line_col(&self, text: &str, offset: usize) -> Option<(usize, usize)> {
        let line = self.line_of(offset);
        let before = text.get(self.start(line)?..offset)?;
        Some((line + 1, before.chars().count() + 1))
    }
}

/// Line and column (1-based) of byte `offset` of `text`; never panics on a bad offset.
pub fn line_col(text: &str, offset: usize) -> (usize, usize) {
    let before = text.get(..offset).unwrap_or(text);
    let line = before.matches('\n').count() + 1;
    let col = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
    (line, col)
}

/// Whether a line of the file may hold a secret: a key that names a credential (`auth`,
/// `password`, `token`, `secret`; not `…_env` or `…_file`, which name where one is), or a URL
/// with a user in it. A problem on such a line is told without the line.
fn may_hold_a_secret(line: &str) -> bool {
    let mut keys = Vec::new();
    let mut rest = line;
    while let Some(equals) = rest.find('=') {
        let before = rest.get(..equals).unwrap_or_default().trim_end();
        let key_start = before
            .char_indices()
            .rev()
            .find(|(_, c)| !(c.is_ascii_alphanumeric() || *c == '_' || *c == '-'))
            .map_or(0, |(at, c)| at + c.len_utf8());
        keys.push(
            before
                .get(key_start..)
                .unwrap_or_default()
                .to_ascii_lowercase(),
        );
        rest = rest.get(equals + 1..).unwrap_or_default();
    }
    let secret_key = keys.iter().any(|key| {
        ["auth", "password", "token", "secret"]
            .iter()
            .any(|word| key.contains(word))
            && !key.ends_with("_env")
            && !key.ends_with("_file")
    });
    let user_in_url = line.split("://").skip(1).any(|rest| {
        rest.split(['/', '"', '\'', ' ', '?', '#'])
            .next()
            .is_some_and(|authority| authority.contains('@'))
    });
    secret_key || user_in_url
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.render())
    }
}

impl std::error::Error for ConfigError {}

/// Names a job's problems: `job "nightly"` for the job as a whole, `job "nightly": schedule` for
/// one of its keys; `defaults.schedule` for a key of `[defaults]`, checked once for every job.
#[derive(Clone, Copy)]
pub(super) enum JobContext<'n> {
    Job(&'n str),
    Defaults,
}

impl JobContext<'_> {
    pub(super) fn key(self, key: &str) -> String {
        match self {
            Self::Job(name) => format!("job {name:?}: {key}"),
            Self::Defaults => format!("defaults.{key}"),
        }
    }

    pub(super) fn whole(self) -> String {
        match self {
            Self::Job(name) => format!("job {name:?}"),
            Self::Defaults => "defaults".to_owned(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_line_that_may_hold_a_secret_is_known_by_its_key_or_its_url() {
        assert!(may_hold_a_secret("auth = user:s3cret"));
        assert!(may_hold_a_secret(
            "sasl = { username = \"u\", password = \"p\" }"
        ));
        assert!(may_hold_a_secret(
            "url = \"https://ops:hunter2@hooks.example.com/\""
        ));
        assert!(!may_hold_a_secret("auth_env = \"ZK_AUTH\""));
        assert!(!may_hold_a_secret(
            "password_file = \"/etc/zkcron/zk.pass\""
        ));
        assert!(!may_hold_a_secret(
            "url = \"https://hooks.example.com/a@b\""
        ));
        assert!(!may_hold_a_secret("schedule = \"0 0 * * *\""));
        assert!(!may_hold_a_secret("é=ü=\u{1F600}=")); // never a panic on a character's middle
    }
}
