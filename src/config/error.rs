//! What a bad schedule file looks like to an operator: every problem, compiler style.
//!
//! Owns: the error types of loading ([`LoadError`], [`ConfigError`], [`Problem`]), turning a byte
//! span into line:col, and rendering each problem with its source line and a caret.
//! Must not: decide what is a problem (the validators do), nor show a secret's line.

use std::fmt;
use std::ops::Range;
use std::path::PathBuf;

/// A schedule file that could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error("cannot read {}", path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{0}")]
    Invalid(ConfigError),
}

/// Every problem found in one file, each with where it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    pub path: PathBuf,
    /// The file's text, for rendering each problem's source line.
    pub(super) text: String,
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

impl ConfigError {
    /// Line and column (1-based) of a byte offset; never panics on a bad offset.
    pub fn line_col(&self, offset: usize) -> (usize, usize) {
        let before = self.text.get(..offset).unwrap_or(&self.text);
        let line = before.matches('\n').count() + 1;
        let col = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
        (line, col)
    }

    /// `file:line:col: context: message` lines, each with the offending line and a caret.
    pub fn render(&self) -> String {
        let mut out = String::new();
        for (i, problem) in self.problems.iter().enumerate() {
            if i > 0 {
                out.push('\n');
            }
            out.push_str(&self.render_problem(problem));
        }
        out
    }

    fn render_problem(&self, problem: &Problem) -> String {
        let path = self.path.display();
        let context = if problem.context.is_empty() {
            String::new()
        } else {
            format!("{}: ", problem.context)
        };
        let Some(span) = &problem.span else {
            return format!("{path}: {context}{}", problem.message);
        };
        let (line, col) = self.line_col(span.start);
        let mut out = format!("{path}:{line}:{col}: {context}{}", problem.message);
        if let Some(source_line) = self.text.lines().nth(line - 1).filter(|_| !problem.secret) {
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
