//! Why a job could not be started, as the runner's typed error and as one line for a run's
//! record.
//!
//! Owns: [`StartError`] and its one-line form.
//! Must not: start, signal or wait for anything.

use std::error::Error as _;
use std::io;
use std::path::PathBuf;

use crate::ids::JobName;

/// Why a job could not be started.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// `Program::Argv` with no elements.
    #[error("job {job} has an empty command")]
    EmptyCommand {
        /// The job.
        job: JobName,
    },
    /// An HTTP target is a request, sent by `delivery`, never a process.
    #[error("job {job} has an http target: it is delivered, not run as a process")]
    NotAProcess {
        /// The job.
        job: JobName,
    },
    /// The working directory is missing, not a directory or not accessible.
    #[error("working directory {} of job {job} is unusable", dir.display())]
    WorkingDir {
        /// The job.
        job: JobName,
        /// The configured directory.
        dir: PathBuf,
        /// The OS error.
        #[source]
        source: io::Error,
    },
    /// The start failed: missing binary, not executable, bad environment, ….
    #[error("cannot start {program} for job {job}")]
    Spawn {
        /// The job.
        job: JobName,
        /// The executable as configured.
        program: String,
        /// The OS error.
        #[source]
        source: io::Error,
    },
}

/// An error and its causes as one line, for [`RunOutcome::FailedToStart`].
///
/// [`RunOutcome::FailedToStart`]: crate::run::RunOutcome::FailedToStart
pub(super) fn error_chain(err: &StartError) -> String {
    let mut text = err.to_string();
    let mut source = err.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}
