//! The next fire time of every enabled job, in one min-heap (DESIGN.md "Measured for the
//! scheduler": one scheduler task with a heap beats one task per job).
//!
//! Owns: which jobs are due at which instant, and never handing out the same tick twice.
//! Must not: read clocks, sleep or fire anything — callers pass `now`.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::sync::Arc;

use chrono::{DateTime, Utc};

use crate::config::JobConfig;
use crate::ids::JobName;

/// Enabled jobs ordered by their next fire time.
#[derive(Debug, Default)]
pub struct FireQueue {
    jobs: Vec<Arc<JobConfig>>,
    heap: BinaryHeap<Reverse<(DateTime<Utc>, usize)>>,
    /// Each queued job's next tick, so a job's place is found without searching the heap.
    next: HashMap<JobName, DateTime<Utc>>,
}

impl FireQueue {
    /// Queues every enabled job at its first fire strictly after `after`. Pass the later of now
    /// and the last tick already handed out, so a rebuilt queue never repeats a tick.
    pub fn new(jobs: &[Arc<JobConfig>], after: DateTime<Utc>) -> Self {
        let jobs: Vec<Arc<JobConfig>> = jobs.iter().filter(|job| job.enabled).cloned().collect();
        let mut queue = Self {
            heap: BinaryHeap::with_capacity(jobs.len()),
            next: HashMap::with_capacity(jobs.len()),
            jobs,
        };
        for i in 0..queue.jobs.len() {
            queue.push_after(i, after);
        }
        queue
    }

    /// The earliest queued tick.
    pub fn next_tick(&self) -> Option<DateTime<Utc>> {
        self.heap.peek().map(|Reverse((at, _))| *at)
    }

    /// The next tick queued for `job`; `None` when it is disabled, unknown or fires no more.
    pub fn next_of(&self, job: &JobName) -> Option<DateTime<Utc>> {
        self.next.get(job).copied()
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
            self.next.remove(&self.jobs[i].spec.name);
            due.push(Arc::clone(&self.jobs[i]));
            self.push_after(i, tick.max(now));
        }
        Some((tick, due))
    }

    fn push_after(&mut self, i: usize, after: DateTime<Utc>) {
        if let Some(at) = self.jobs[i].next_tick_after(after) {
            self.heap.push(Reverse((at, i)));
            self.next.insert(self.jobs[i].spec.name.clone(), at);
        }
    }
}
