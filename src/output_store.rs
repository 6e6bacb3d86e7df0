//! The whole output of the runs this node runs, kept on this host (issue 52): a file per attempt
//! under `[output] dir`, every line stamped; a run that prints past `per_run` keeps its head and
//! its tail, with a line saying how much was dropped between; all runs together kept within
//! `keep_size` and `keep_for`, the oldest removed first; a disk that fills stops the keeping,
//! never the run.
//!
//! A kept file, `<dir>/<job>/<run id>.<attempt>.log`, is a line per output line:
//! `2026-12-03T04:30:00.123Z stdout <text>`. Lines of ours say `zkcron` where the stream is
//! named (a job cannot write one); the last says `zkcron ended: <outcome>`. The file only grows,
//! so a reader that follows it never sees a line change.
//!
//! Owns: the files under `[output] dir`, their format, their bound and their removal.
//! Must not: talk to ZooKeeper, or decide anything about a run (the runner feeds it lines).

use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, SystemTime};

use crate::config::OutputConfig;

mod follow;
mod names;
pub mod remote;
mod shelf;
mod writer;

pub use follow::FollowEnd;
pub use names::{ParsedLine, parse_line};
use shelf::{Limits, Shelf};
pub use writer::{RunOutput, Stream};

/// The directory systemd gives the daemon (`StateDirectory=`), under which output is kept when
/// `[output] dir` does not say where.
const STATE_DIRECTORY: &str = "STATE_DIRECTORY";

/// Why the store cannot keep output.
#[derive(Debug, thiserror::Error)]
#[error("cannot keep run output in {dir}")]
pub struct OpenError {
    pub dir: PathBuf,
    #[source]
    pub source: io::Error,
}

/// The runs' output kept on this host, shared by the runs that write it and the HTTP API that
/// reads it.
#[derive(Debug)]
pub struct OutputStore {
    dir: PathBuf,
    shelf: Arc<Shelf>,
    /// Whether the disk was found too full to start keeping a run (said once until it is not).
    refusing: AtomicBool,
}

/// Where the kept output of `config` goes: its `dir`, else systemd's state directory's
/// `output`, else nowhere (`None`).
pub fn dir_of(config: &OutputConfig) -> Option<PathBuf> {
    config.dir.clone().or_else(|| {
        std::env::var_os(STATE_DIRECTORY)
            // systemd lists several when the unit names several; ours names one.
            .and_then(|dirs| std::env::split_paths(&dirs).next())
            .map(|dir| dir.join("output"))
    })
}

impl OutputStore {
    /// Opens (making it if need be) the store in `dir`: lists what earlier runs left, mends the
    /// files of runs a stopped daemon never ended, and removes what is past the bounds. Blocking
    /// file I/O: call it off the runtime's workers.
    ///
    /// # Errors
    /// The directory cannot be made or read.
    pub fn open(dir: &Path, config: &OutputConfig) -> Result<Self, OpenError> {
        let failed = |source| OpenError {
            dir: dir.to_owned(),
            source,
        };
        names::make_private_dir(dir).map_err(failed)?;
        let shelf = Arc::new(Shelf::new(Limits {
            keep_size: config.keep_size,
            keep_for: config.keep_for,
            head: config.per_run / 2,
            segment: (config.per_run / 4).max(1),
        }));
        for job_dir in fs::read_dir(dir).map_err(failed)? {
            let Ok(job_dir) = job_dir else { continue };
            let Ok(files) = fs::read_dir(job_dir.path()) else {
                continue;
            };
            let paths: Vec<PathBuf> = files.flatten().map(|file| file.path()).collect();
            // Mended first: a mended file is longer than it was listed.
            for path in paths.iter().filter(|path| writer::is_tail_segment(path)) {
                writer::mend_abandoned(path);
            }
            for path in paths {
                if path.extension().is_some_and(|ext| ext == "log")
                    && let Ok(meta) = fs::metadata(&path)
                {
                    let modified = meta.modified().unwrap_or(SystemTime::UNIX_EPOCH);
                    shelf.add(path, modified, meta.len());
                }
            }
        }
        shelf.prune(SystemTime::now());
        Ok(Self {
            dir: dir.to_owned(),
            shelf,
            refusing: AtomicBool::new(false),
        })
    }

    /// Where output is kept.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Starts keeping one attempt's output; a run whose output cannot be kept (a full disk, a
    /// file that cannot be made) still runs, with a warning, and keeps nothing.
    pub fn begin(&self, job: &str, run_id: &str, attempt: u32) -> RunOutput {
        if let Some(low) = self.too_full() {
            if !self.refusing.swap(true, Ordering::Relaxed) {
                tracing::warn!(dir = %self.dir.display(), available = low, "the disk under [output] dir is nearly full: runs' output is not kept until there is room (the runs go on)");
            }
            return RunOutput::not_kept();
        }
        if self.refusing.swap(false, Ordering::Relaxed) {
            tracing::info!(dir = %self.dir.display(), "room again under [output] dir: runs' output is kept again");
        }
        let path = names::run_file(&self.dir, job, run_id, attempt);
        match writer::Writing::create(Arc::clone(&self.shelf), path.clone()) {
            Ok(writing) => {
                self.shelf.started(path);
                RunOutput::kept(writing)
            }
            Err(err) => {
                tracing::warn!(job, run_id, path = %path.display(), error = %err, "cannot keep this run's output (the run goes on)");
                RunOutput::not_kept()
            }
        }
    }

    /// The kept file of `job`'s run `run_id`: of `attempt`, or of its latest attempt kept here.
    pub fn find(&self, job: &str, run_id: &str, attempt: Option<u32>) -> Option<PathBuf> {
        match attempt {
            Some(attempt) => {
                let path = names::run_file(&self.dir, job, run_id, attempt);
                path.exists().then_some(path)
            }
            None => names::latest_attempt(&self.dir, job, run_id),
        }
    }

    /// Whether a run still writes `path`.
    pub fn is_live(&self, path: &Path) -> bool {
        self.shelf.is_live(path)
    }

    /// Removes ended runs' files, oldest first, while they are past `keep_size` together or
    /// past `keep_for` each. Blocking file I/O.
    pub fn prune(&self, now: SystemTime) {
        self.shelf.prune(now);
    }

    /// Writes `path`'s lines to `out`, whole lines only; with `follow`, waits for more while a
    /// run still writes it, until its end line; stops when `stop` is cancelled.
    ///
    /// # Errors
    /// The file cannot be read, or `out` is gone.
    pub async fn read<W: tokio::io::AsyncWrite + Unpin>(
        &self,
        path: &Path,
        follow: bool,
        out: &mut W,
        stop: &tokio_util::sync::CancellationToken,
    ) -> io::Result<FollowEnd> {
        follow::follow(
            path,
            follow.then_some(|| self.shelf.is_live(path)),
            out,
            stop,
        )
        .await
    }

    /// Prunes every hour until `shutdown`, so output ages out on a node that runs nothing new.
    pub async fn keep_pruning(self: Arc<Self>, shutdown: tokio_util::sync::CancellationToken) {
        // Its first look is an hour from now: `open` has just pruned.
        let hour = Duration::from_secs(3600);
        let mut every = tokio::time::interval_at(tokio::time::Instant::now() + hour, hour);
        every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                () = shutdown.cancelled() => return,
                _ = every.tick() => {}
            }
            let store = Arc::clone(&self);
            let _ = tokio::task::spawn_blocking(move || store.prune(SystemTime::now())).await;
        }
    }

    /// The ended runs' kept bytes together.
    pub fn kept_bytes(&self) -> u64 {
        self.shelf.total()
    }

    /// The bytes left on the store's disk when they are too few to start a run's file: less
    /// than two runs' worth, so the keeping never fills the disk.
    fn too_full(&self) -> Option<u64> {
        let stat = nix::sys::statvfs::statvfs(&self.dir).ok()?;
        #[allow(clippy::useless_conversion)] // c_ulong and fsblkcnt_t differ by platform
        let available =
            u64::from(stat.blocks_available()).saturating_mul(u64::from(stat.fragment_size()));
        let limits = self.shelf.limits;
        (available < 2 * (limits.head + 2 * limits.segment)).then_some(available)
    }
}

#[cfg(test)]
mod tests;
