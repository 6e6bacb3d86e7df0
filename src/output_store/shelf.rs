//! What the store holds at a glance: the ended runs' files, oldest first, with their total
//! size; the files still being written; and the bounds they are kept within.
//!
//! Owns: counting what is kept, and removing the oldest past `keep_size` or `keep_for`.
//! Must not: write a run's file (the writer does) or read one (the follower does).

use std::collections::{BTreeMap, HashSet};
use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, SystemTime};

/// What one run and all runs may keep.
#[derive(Debug, Clone, Copy)]
pub(super) struct Limits {
    pub(super) keep_size: u64,
    pub(super) keep_for: Duration,
    /// The head's bound: the first half of `per_run`.
    pub(super) head: u64,
    /// One tail segment's bound: the tail is the last one or two of them, so at most the last
    /// half of `per_run`.
    pub(super) segment: u64,
}

/// The kept files and the live ones, shared by the store, its writers and its readers.
#[derive(Debug)]
pub(super) struct Shelf {
    pub(super) limits: Limits,
    ended: Mutex<Ended>,
    /// The files of runs still writing: a reader that reaches their end waits for more.
    live: Mutex<HashSet<PathBuf>>,
}

/// The ended runs' files by age, and their total size.
#[derive(Debug, Default)]
struct Ended {
    files: BTreeMap<(SystemTime, PathBuf), u64>,
    total: u64,
}

impl Shelf {
    pub(super) fn new(limits: Limits) -> Self {
        Self {
            limits,
            ended: Mutex::default(),
            live: Mutex::default(),
        }
    }

    /// An ended run's file, as found or as just ended.
    pub(super) fn add(&self, path: PathBuf, modified: SystemTime, size: u64) {
        if let Ok(mut ended) = self.ended.lock() {
            ended.total += size;
            if let Some(replaced) = ended.files.insert((modified, path), size) {
                ended.total -= replaced;
            }
        }
    }

    pub(super) fn started(&self, path: PathBuf) {
        if let Ok(mut live) = self.live.lock() {
            live.insert(path);
        }
    }

    /// A run's file is whole: counted among the kept, no longer live; the oldest past the
    /// bounds go.
    pub(super) fn ended(&self, path: PathBuf, size: u64) {
        if let Ok(mut live) = self.live.lock() {
            live.remove(&path);
        }
        let now = SystemTime::now();
        self.add(path, now, size);
        self.prune(now);
    }

    pub(super) fn is_live(&self, path: &Path) -> bool {
        self.live.lock().is_ok_and(|live| live.contains(path))
    }

    pub(super) fn total(&self) -> u64 {
        self.ended.lock().map_or(0, |ended| ended.total)
    }

    /// Removes ended runs' files, oldest first, while they are past `keep_size` together or
    /// past `keep_for` each. Blocking file I/O.
    pub(super) fn prune(&self, now: SystemTime) {
        let oldest_kept = now.checked_sub(self.limits.keep_for);
        let mut removed = Vec::new();
        if let Ok(mut ended) = self.ended.lock() {
            loop {
                let total = ended.total;
                let Some(entry) = ended.files.first_entry() else {
                    break;
                };
                let (modified, _) = entry.key();
                let too_old = oldest_kept.is_some_and(|oldest| *modified < oldest);
                if total <= self.limits.keep_size && !too_old {
                    break;
                }
                let ((_, path), size) = entry.remove_entry();
                ended.total = total.saturating_sub(size);
                removed.push(path);
            }
        }
        for path in removed {
            if let Err(err) = fs::remove_file(&path)
                && err.kind() != io::ErrorKind::NotFound
            {
                tracing::warn!(path = %path.display(), error = %err, "cannot remove a run's kept output");
            }
        }
    }
}
