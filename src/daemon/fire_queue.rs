//! The next fire time of every enabled job, in one min-heap (DESIGN.md "Measured for the
//! scheduler": one scheduler task with a heap beats one task per job).
//!
//! Owns: which jobs are due at which instant, and never handing out the same tick twice.
//! Must not: read clocks, sleep or fire anything — callers pass `now`.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::sync::Arc;

use chrono::{DateTime, Utc};

use crate::config::JobConfig;

/// Enabled jobs ordered by their next fire time.
#[derive(Debug, Default)]
pub struct FireQueue {
    jobs: Vec<Arc<JobConfig>>,
    heap: BinaryHeap<Reverse<(DateTime<Utc>, usize)>>,
}

impl FireQueue {
    /// Queues every enabled job at its first fire strictly after `after`. Pass the later of now
    /// and the last tick already handed out, so a rebuilt queue never repeats a tick.
    pub fn new(jobs: &[Arc<JobConfig>], after: DateTime<Utc>) -> Self {
        let jobs: Vec<Arc<JobConfig>> = jobs.iter().filter(|job| job.enabled).cloned().collect();
        let heap = jobs
            .iter()
            .enumerate()
            .filter_map(|(i, job)| job.schedule.next_after(after).map(|at| Reverse((at, i))))
            .collect();
        Self { jobs, heap }
    }

    /// The earliest queued tick.
    pub fn next_tick(&self) -> Option<DateTime<Utc>> {
        self.heap.peek().map(|Reverse((at, _))| *at)
    }

    /// Takes every job due at the earliest tick, and queues each at its next fire after the
    /// later of that tick and `now` (a node that slept through ticks does not replay them).
    pub fn pop_tick(&mut self, now: DateTime<Utc>) -> Option<(DateTime<Utc>, Vec<Arc<JobConfig>>)> {
        let tick = self.next_tick()?;
        let mut due = Vec::new();
        while let Some(Reverse((at, i))) = self.heap.peek().copied() {
            if at != tick {
                break;
            }
            self.heap.pop();
            due.push(Arc::clone(&self.jobs[i]));
            if let Some(next) = self.jobs[i].schedule.next_after(tick.max(now)) {
                self.heap.push(Reverse((next, i)));
            }
        }
        Some((tick, due))
    }
}
