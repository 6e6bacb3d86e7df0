//! A node's wall clock set off the true one by libfaketime (Debian's `faketime` package), its
//! monotonic clock left real: the skew, drift and steps of a host whose time sync failed.
//!
//! The offset is read from a file (again at most a second after it changed), so a test steps
//! the clock of a running node by rewriting it.
//!
//! Owns: the offset file and the environment that puts a process under it.
//! Must not: start processes (`daemon` does, with [`FakedClock::env`]).

use std::path::{Path, PathBuf};
use std::sync::Mutex;

use super::daemon::now_ms;

/// Where Debian's `faketime` package puts the library.
pub const LIBFAKETIME: &str = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1";

/// One process's faked clock.
#[derive(Debug)]
pub struct FakedClock {
    offset_file: PathBuf,
    /// (true time it was set, in Unix ms; its offset in ms), oldest first.
    history: Mutex<Vec<(i64, i64)>>,
}

impl FakedClock {
    /// A clock `offset_ms` off the true one (ahead when positive), its offset kept in
    /// `dir/name.faketime`.
    pub fn new(dir: &Path, name: &str, offset_ms: i64) -> Self {
        assert!(
            Path::new(LIBFAKETIME).exists(),
            "{LIBFAKETIME} is missing: apt-get install -y faketime"
        );
        let clock = Self {
            offset_file: dir.join(format!("{name}.faketime")),
            history: Mutex::new(Vec::new()),
        };
        clock.set(offset_ms);
        clock
    }

    /// Steps the clock to `offset_ms` off the true one; the process sees it within a second
    /// (libfaketime's cache of the file).
    pub fn set(&self, offset_ms: i64) {
        // Milliseconds of a test's offset are far inside f64's exact range.
        #[allow(clippy::cast_precision_loss)]
        let seconds = offset_ms as f64 / 1000.0;
        // Written whole and renamed in: libfaketime reads an empty file as no offset at all,
        // and a read between a truncate and the write would flip the clock to the true one.
        let next = self.offset_file.with_extension("next");
        std::fs::write(&next, format!("{seconds:+.3}s\n")).expect("write the clock offset");
        std::fs::rename(&next, &self.offset_file).expect("put the clock offset in place");
        let mut history = self.history.lock().unwrap_or_else(|e| e.into_inner());
        history.push((now_ms(), offset_ms));
    }

    /// The true times of instants this clock read as `faked_ms`, given in the order they were
    /// read (a process's log, line by line): [`true_in_order`] over its steps so far.
    pub fn to_true_in_order(&self, faked_ms: &[Option<i64>]) -> Vec<Option<i64>> {
        let history = self.history.lock().unwrap_or_else(|e| e.into_inner());
        true_in_order(&history, faked_ms)
    }

    /// The environment that puts a process under this clock.
    pub fn env(&self) -> Vec<(&'static str, &Path)> {
        vec![
            ("LD_PRELOAD", Path::new(LIBFAKETIME)),
            ("FAKETIME_TIMESTAMP_FILE", &self.offset_file),
            ("FAKETIME_CACHE_DURATION", Path::new("1")),
            ("FAKETIME_DONT_FAKE_MONOTONIC", Path::new("1")),
        ]
    }
}

/// How far a process's log lines may be out of order (written by several threads).
const OUT_OF_ORDER_MS: i64 = 500;
/// How long after a step the process may still read the offset before it.
const SEEN_WITHIN_MS: i64 = 1_000;

/// The true times of instants read as `faked_ms`, in the order they were read, by a clock
/// stepped as `history` says ((true time set, offset), oldest first). An offset once in force
/// stays so; the next is taken over it once a reading by the one in force would be later than
/// the step (the process sees a step within a second) or earlier than the reading before it,
/// and never before the next was set. By value alone a step back is ambiguous: a reading in the
/// step's length before it maps to a true time after it too, which once showed a node owning the
/// lock 20 s past its own word that it had lost it. A line out of order (a thread that read the
/// clock before a step and wrote after it) is mapped by the offset in force and moves nothing:
/// it once pushed the mapping on to a step made ten minutes later.
pub fn true_in_order(history: &[(i64, i64)], faked_ms: &[Option<i64>]) -> Vec<Option<i64>> {
    let mut in_force = 0;
    let mut previous = i64::MIN;
    faked_ms
        .iter()
        .map(|faked| {
            let faked = (*faked)?;
            let offset_of = |index: usize| history.get(index).map_or(0, |(_, offset)| *offset);
            let true_ms = loop {
                let true_ms = faked - offset_of(in_force);
                let Some((next_set_ms, next_offset)) = history.get(in_force + 1) else {
                    break true_ms;
                };
                let before_next = true_ms < next_set_ms + SEEN_WITHIN_MS;
                let in_order = true_ms >= previous.saturating_sub(OUT_OF_ORDER_MS);
                let next_was_set = faked - next_offset >= next_set_ms - OUT_OF_ORDER_MS;
                if (before_next && in_order) || !next_was_set {
                    break true_ms;
                }
                in_force += 1;
            };
            previous = true_ms;
            Some(true_ms)
        })
        .collect()
}
