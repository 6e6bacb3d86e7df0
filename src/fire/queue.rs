//! The next fire time of every enabled job, in one min-heap (DESIGN.md "Measured for the
//! scheduler": one scheduler task with a heap beats one task per job).
//!
//! Owns: which jobs are due at which instant — a tick's start, which a job's `jitter` puts a
//! little after the tick — and never handing out the same tick twice.
//! Must not: read clocks, sleep or fire anything — callers pass `now`.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::sync::Arc;

use chrono::{DateTime, Utc};

use crate::config::JobConfig;
use crate::ids::JobName;

/// Enabled jobs ordered by when their next tick starts.
#[derive(Debug, Default)]
pub struct FireQueue {
    jobs: Vec<Arc<JobConfig>>,
    /// (start, job index): a tick's start is its tick unless the job has a `jitter`.
    heap: BinaryHeap<Reverse<(DateTime<Utc>, usize)>>,
    /// Each queued job's next tick (by index, beside `jobs`), so a job's place is found without
    /// searching the heap.
    next: Vec<Option<DateTime<Utc>>>,
    /// The jobs' indices in name order, to find a job by its name: a map by name would cost
    /// every job a copy of its name and twice its slots (issue 32).
    by_name: Vec<usize>,
    /// Each job's latest tick handed out (by index, beside `jobs`: a map would cost every job
    /// a copy of its name), so a rebuilt queue never repeats one.
    popped: Vec<Option<DateTime<Utc>>>,
    /// Each job's latest tick handed out that the caller kept ([`FireQueue::keep`]): a clock
    /// stepped back hands out again the ticks after it, and only those.
    kept: Vec<Option<DateTime<Utc>>>,
}

/// Each job's latest tick, by name: what a rebuilt queue carries over.
type Latest<'a> = HashMap<&'a JobName, DateTime<Utc>>;

impl FireQueue {
    /// Queues every enabled job at its first tick strictly after `after` (or, with a jitter,
    /// whose start is after it).
    pub fn new(jobs: &[Arc<JobConfig>], after: DateTime<Utc>) -> Self {
        Self::resumed(jobs, &HashMap::new(), &HashMap::new(), after)
    }

    /// The queue for `jobs` after a reload at `now`: a job goes on after the latest tick it was
    /// handed out, or at its first tick whose start is after `now`.
    pub fn rebuilt(&self, jobs: &[Arc<JobConfig>], now: DateTime<Utc>) -> Self {
        Self::resumed(
            jobs,
            &self.latest(&self.popped),
            &self.latest(&self.kept),
            now,
        )
    }

    /// The queue after the wall clock it follows went back to `now`: a job goes on after the
    /// latest tick it handed out and the caller kept, or — when there is none — at its first
    /// tick after `now`. A tick handed out by the clock before and let go (another node owned
    /// it) is handed out again: a node corrected to the servers' clock (`ensemble_clock`) had
    /// let go the ticks of its offset by its own clock ahead, and would otherwise pass over
    /// them, or wait out its offset before its first tick.
    pub fn stepped_back(&self, now: DateTime<Utc>) -> Self {
        let kept = self.latest(&self.kept);
        Self::resumed(&self.jobs, &kept, &kept, now)
    }

    /// `job`'s tick `tick`, handed out, was kept: acted on, not let go. A clock stepped back
    /// never hands it out again.
    pub fn keep(&mut self, job: &JobName, tick: DateTime<Utc>) {
        if let Some(i) = self.index_of(job) {
            self.kept[i] = Some(self.kept[i].map_or(tick, |kept| kept.max(tick)));
        }
    }

    /// `latest` (beside `jobs`) by job name.
    fn latest(&self, latest: &[Option<DateTime<Utc>>]) -> Latest<'_> {
        self.jobs
            .iter()
            .zip(latest)
            .filter_map(|(job, last)| Some((&job.spec.name, (*last)?)))
            .collect()
    }

    fn resumed(
        jobs: &[Arc<JobConfig>],
        popped: &Latest<'_>,
        kept: &Latest<'_>,
        now: DateTime<Utc>,
    ) -> Self {
        let jobs: Vec<Arc<JobConfig>> = jobs.iter().filter(|job| job.enabled).cloned().collect();
        let mut by_name: Vec<usize> = (0..jobs.len()).collect();
        by_name.sort_unstable_by(|a, b| jobs[*a].spec.name.cmp(&jobs[*b].spec.name));
        let mut queue = Self {
            heap: BinaryHeap::with_capacity(jobs.len()),
            next: vec![None; jobs.len()],
            by_name,
            popped: jobs
                .iter()
                .map(|job| popped.get(&job.spec.name).copied())
                .collect(),
            kept: jobs
                .iter()
                .map(|job| kept.get(&job.spec.name).copied())
                .collect(),
            jobs,
        };
        for i in 0..queue.jobs.len() {
            // A jittered tick may be past while its start is not.
            let after = now - queue.jobs[i].jitter_span();
            let after = queue.popped[i].map_or(after, |last| after.max(last));
            queue.push_after(i, after, now);
        }
        queue
    }

    /// When the earliest queued tick starts.
    pub fn next_start(&self) -> Option<DateTime<Utc>> {
        self.heap.peek().map(|Reverse((at, _))| *at)
    }

    /// The next tick queued for `job`; `None` when it is disabled, unknown or fires no more.
    pub fn next_of(&self, job: &JobName) -> Option<DateTime<Utc>> {
        self.next[self.index_of(job)?]
    }

    fn index_of(&self, job: &JobName) -> Option<usize> {
        let found = self
            .by_name
            .binary_search_by(|i| self.jobs[*i].spec.name.cmp(job));
        self.by_name.get(found.ok()?).copied()
    }

    /// Takes every job whose tick starts at the earliest start, each with its tick, and queues
    /// each at its next tick that starts after `now`: a node that slept through ticks does not
    /// replay them.
    pub fn pop_start(&mut self, now: DateTime<Utc>) -> Vec<(DateTime<Utc>, Arc<JobConfig>)> {
        let Some(start) = self.next_start() else {
            return Vec::new();
        };
        let mut due = Vec::new();
        while let Some(Reverse((at, i))) = self.heap.peek().copied() {
            if at != start {
                break;
            }
            self.heap.pop();
            let job = Arc::clone(&self.jobs[i]);
            let Some(tick) = self.next[i].take() else {
                continue;
            };
            self.popped[i] = Some(tick);
            self.push_after(i, tick, now);
            due.push((tick, job));
        }
        due
    }

    /// Queues job `i` at its first tick after `after_tick` that starts after `start_after`.
    fn push_after(&mut self, i: usize, after_tick: DateTime<Utc>, start_after: DateTime<Utc>) {
        let job = &self.jobs[i];
        // Without a jitter the start is the tick: begin at the later of the two at once.
        let mut cursor = if job.jitter.is_zero() {
            after_tick.max(start_after)
        } else {
            after_tick
        };
        while let Some(tick) = job.next_tick_after(cursor) {
            let start = job.start_of(tick);
            if start > start_after {
                self.heap.push(Reverse((start, i)));
                self.next[i] = Some(tick);
                return;
            }
            cursor = tick;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn jobs(tables: &str) -> Vec<Arc<JobConfig>> {
        crate::config::jobs_for_test(tables)
    }

    fn at(ms: i64) -> DateTime<Utc> {
        DateTime::from_timestamp_millis(1_893_456_000_000 + ms).expect("in range")
    }

    /// Pops everything starting up to `until`, as (tick, start, job).
    fn drain(
        queue: &mut FireQueue,
        until: DateTime<Utc>,
    ) -> Vec<(DateTime<Utc>, DateTime<Utc>, String)> {
        let mut popped = Vec::new();
        while let Some(start) = queue.next_start().filter(|start| *start <= until) {
            for (tick, job) in queue.pop_start(start) {
                assert_eq!(job.start_of(tick), start, "handed out at its start");
                popped.push((tick, start, job.spec.name.to_string()));
            }
        }
        popped
    }

    #[test]
    fn jittered_ticks_are_handed_out_at_their_starts_each_once_in_order() {
        let jobs = jobs(
            "[[job]]\nname = \"a\"\nschedule = \"0 * * * * *\"\nshell = \"true\"\njitter = \"30s\"\n\
             [[job]]\nname = \"b\"\nschedule = \"0 * * * * *\"\nshell = \"true\"\n",
        );
        // Created a moment after a tick: a's tick then starts later, so it is still ahead.
        let mut queue = FireQueue::new(&jobs, at(1));
        let popped = drain(&mut queue, at(600_000));
        let starts: Vec<DateTime<Utc>> = popped.iter().map(|(_, start, _)| *start).collect();
        assert!(
            starts.windows(2).all(|w| w[0] <= w[1]),
            "by start: {popped:?}"
        );
        for name in ["a", "b"] {
            let ticks: Vec<i64> = popped
                .iter()
                .filter(|(_, _, job)| job == name)
                .map(|(tick, _, _)| (*tick - at(0)).num_seconds())
                .collect();
            let expected: Vec<i64> = if name == "a" {
                (0..=9)
                    .map(|m| m * 60)
                    .filter(|s| jobs[0].start_of(at(s * 1000)) > at(1))
                    .collect()
            } else {
                (1..=10).map(|m| m * 60).collect()
            };
            assert_eq!(ticks, expected, "{name}: each tick once, in order");
        }
        let b = popped
            .iter()
            .find(|(tick, _, job)| job == "b" && *tick == at(60_000));
        assert_eq!(
            b.map(|(_, start, _)| *start),
            Some(at(60_000)),
            "no jitter: on the dot"
        );
    }

    /// A reload inside a jittered tick's window neither loses the tick nor repeats one.
    #[test]
    fn a_rebuilt_queue_keeps_a_tick_whose_start_is_ahead_and_repeats_none() {
        let jobs = jobs(
            "[[job]]\nname = \"a\"\nschedule = \"0 * * * * *\"\nshell = \"true\"\njitter = \"50s\"\n",
        );
        let start = jobs[0].start_of(at(60_000));
        let mut queue = FireQueue::new(&jobs, at(30_000));
        assert_eq!(queue.next_of(&JobName::new("a")), Some(at(60_000)));
        // Reloaded after the tick, before its start: still queued.
        let now = at(60_000) + (start - at(60_000)) / 2;
        if start > now {
            let rebuilt = queue.rebuilt(&jobs, now);
            assert_eq!(rebuilt.next_of(&JobName::new("a")), Some(at(60_000)));
        }
        let popped = queue.pop_start(start);
        assert_eq!(popped[0].0, at(60_000));
        let rebuilt = queue.rebuilt(&jobs, start);
        assert_eq!(
            rebuilt.next_of(&JobName::new("a")),
            Some(at(120_000)),
            "the tick handed out is not handed out again"
        );
    }

    #[test]
    fn without_jitter_the_start_is_the_tick() {
        let jobs = jobs("[[job]]\nname = \"a\"\nschedule = \"*/5 * * * * *\"\nshell = \"true\"\n");
        let mut queue = FireQueue::new(&jobs, at(0));
        assert_eq!(queue.next_start(), Some(at(5_000)));
        assert_eq!(queue.pop_start(at(5_000))[0].0, at(5_000));
        assert_eq!(queue.next_start(), Some(at(10_000)));
    }

    #[test]
    fn a_step_back_requeues_a_job_not_handed_out_yet_and_keeps_one_handed_out() {
        let jobs = jobs(
            "[[job]]\nname = \"a\"\nschedule = \"* * * * * *\"\nshell = \"true\"\n\n\
             [[job]]\nname = \"b\"\nschedule = \"*/5 * * * * *\"\nshell = \"true\"\n",
        );
        // Queued by a clock 15 s ahead.
        let mut queue = FireQueue::new(&jobs, at(15_000));
        assert_eq!(drain(&mut queue, at(15_000)).len(), 0);
        // `a` handed out its tick at 16 s, kept; `b` none yet.
        let popped = drain(&mut queue, at(16_000));
        assert_eq!(popped.len(), 1, "{popped:?}");
        queue.keep(&JobName::new("a"), at(16_000));
        let back = queue.stepped_back(at(1_000));
        assert_eq!(
            back.next_of(&JobName::new("b")),
            Some(at(5_000)),
            "b from the new now"
        );
        assert_eq!(
            back.next_of(&JobName::new("a")),
            Some(at(17_000)),
            "a never hands out a tick it kept twice"
        );
    }

    /// Issue 53: ticks handed out by a clock 15 s ahead and let go (another node owned them)
    /// are handed out again once the clock is corrected back; a reload does not repeat them.
    #[test]
    fn a_step_back_hands_out_again_the_ticks_let_go() {
        let jobs = jobs("[[job]]\nname = \"a\"\nschedule = \"* * * * * *\"\nshell = \"true\"\n");
        let mut queue = FireQueue::new(&jobs, at(10_000));
        drain(&mut queue, at(12_000));
        queue.keep(&JobName::new("a"), at(12_000));
        let let_go = drain(&mut queue, at(25_000));
        assert_eq!(let_go.len(), 13, "13 through 25, let go");
        let reloaded = queue.rebuilt(&jobs, at(25_500));
        assert_eq!(reloaded.next_of(&JobName::new("a")), Some(at(26_000)));
        let back = reloaded.stepped_back(at(10_500));
        assert_eq!(
            back.next_of(&JobName::new("a")),
            Some(at(13_000)),
            "the first tick after the last one kept"
        );
    }
}
