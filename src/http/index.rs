//! The console's view of the run ledger: per job, its newest runs and the `missed` records among
//! everything kept; across jobs, the newest submission outcomes. Built while the console is in
//! use, so that listing 10 000 jobs filtered by how they last ended does not read 10 000
//! histories per page.
//!
//! The index reads every kept record once, then follows the ledger through one persistent
//! recursive watch on `runs/`: each change is one read of the record that changed. Where the
//! delayed queue is kept in PostgreSQL, it also reads each scheduled job's newest runs there and
//! follows the store's change feed (`ledger::store_feed::follow`, every 500 ms); a store it
//! cannot read is followed from when it can. It lives on the node's session and is dropped with
//! it, after a reconnection that may have lost events (it is read again), or [`IDLE`] after the
//! last page asked for it.
//!
//! Owns: that derived view and its upkeep. Must not: write to ZooKeeper, or be the source of
//! anything but what the console shows (the ledger is; `status` reads it directly).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::time::Duration;

use serde::Serialize;
use tokio_util::sync::CancellationToken;

use crate::delayed::submission::SubmissionId;
use crate::events::cursor::StoreMark;
use crate::ids::{JobName, NodeId};
use crate::layout::{self, RecordName};
use crate::ledger;
use crate::ledger::Ledger;
use crate::ledger::store_feed::{self, Fed};
use crate::ledger::watch::{Batches, Change, Follow};
use crate::report::error_chain;
use crate::run::{RunRecord, RunStatus};

/// How many of a job's newest runs the index keeps (the jobs table's strip).
pub const STRIP: usize = 30;
/// How many of the newest submission outcomes it keeps, across jobs.
pub const RECENT_SUBMISSIONS: usize = 200;
/// An index nobody asked for this long is dropped with its watch.
pub const IDLE: Duration = Duration::from_secs(600);
/// Reads in flight at once while loading: enough to keep the servers busy, few enough that a
/// heartbeat of the lock on the same session waits behind no more than a few milliseconds.
const IN_FLIGHT: usize = 128;

/// One run as the console shows it in a row or a strip.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct RunDigest {
    pub job: JobName,
    pub run_id: String,
    pub scheduled_unix_ms: i64,
    pub started_unix_ms: Option<i64>,
    pub finished_unix_ms: Option<i64>,
    pub status: RunStatus,
    pub node_id: NodeId,
    pub exit_code: Option<i32>,
    pub signal: Option<i32>,
    pub http_status: Option<u16>,
    pub attempt: u32,
    pub submission_id: Option<SubmissionId>,
    pub missed_ticks: Option<u64>,
}

impl RunDigest {
    fn of(record: &RunRecord) -> Self {
        Self {
            job: record.job.clone(),
            run_id: record.run_id.clone(),
            scheduled_unix_ms: record.scheduled_unix_ms,
            started_unix_ms: record.started_unix_ms,
            finished_unix_ms: record.finished_unix_ms,
            status: record.status,
            node_id: record.node_id.clone(),
            exit_code: record.exit_code,
            signal: record.signal,
            http_status: record.http_status,
            attempt: record.attempt,
            submission_id: record.submission_id.clone(),
            missed_ticks: record.missed_ticks,
        }
    }

    /// The instant that orders outcomes: when it ended, or else when it was due.
    fn ended_or_due(&self) -> i64 {
        self.finished_unix_ms.unwrap_or(self.scheduled_unix_ms)
    }
}

/// One job's runs, as far as the console needs them: the newest in full, the strip as statuses
/// only (10 000 jobs hold 300 000 of them).
#[derive(Debug, Default, Clone)]
pub struct JobRuns {
    /// The newest [`STRIP`] records' outcomes.
    pub strip: BTreeMap<RecordName, RunStatus>,
    /// The newest record of a run that started (or ended without starting: skipped, missed,
    /// interrupted). A run only `claimed` is a promise, not a run: a submission's, before its
    /// start; a tick's waiting for its job's limits. A tick's claim says `running` from its
    /// planned start, up to `claim_ahead` before it.
    last: Option<(RecordName, RunDigest)>,
    /// Every kept `missed` record, with the ticks it stands for.
    missed: BTreeMap<RecordName, u64>,
}

impl JobRuns {
    /// Ticks recorded `missed` among the kept records.
    pub fn missed_ticks(&self) -> u64 {
        self.missed.values().sum()
    }

    /// The newest run.
    pub fn last(&self) -> Option<&RunDigest> {
        self.last.as_ref().map(|(_, digest)| digest)
    }

    /// Its newest run has not ended: a tick's record says `running` from its claim, a moment
    /// before its instant (a `forbid` job's guard names only runs that outlive an owner).
    pub fn running(&self) -> bool {
        self.last()
            .is_some_and(|last| last.status == RunStatus::Running)
    }

    fn put(&mut self, name: RecordName, digest: RunDigest) {
        if digest.status == RunStatus::Missed {
            self.missed
                .insert(name.clone(), digest.missed_ticks.unwrap_or(1));
        } else {
            self.missed.remove(&name);
        }
        let newer = self.strip.keys().next().is_none_or(|oldest| &name > oldest);
        if self.strip.len() < STRIP || newer || self.strip.contains_key(&name) {
            self.strip.insert(name.clone(), digest.status);
            while self.strip.len() > STRIP {
                self.strip.pop_first();
            }
        }
        let started = digest.status != RunStatus::Claimed;
        if started && self.last.as_ref().is_none_or(|(newest, _)| &name >= newest) {
            self.last = Some((name, digest));
        }
    }

    fn remove(&mut self, name: &RecordName) {
        self.missed.remove(name);
        self.strip.remove(name);
        // The newest record is pruned only when a job keeps none; the next record sets it again.
        if self.last.as_ref().is_some_and(|(newest, _)| newest == name) {
            self.last = None;
        }
    }
}

/// What the index knows now.
#[derive(Debug, Default)]
pub struct IndexState {
    pub jobs: HashMap<JobName, JobRuns>,
    /// The newest submission outcomes (and runs in progress), keyed to keep them in order.
    recent: BTreeMap<(i64, RecordName, JobName), RunDigest>,
    /// Job directories read so far in the current load, and how many there are.
    pub loaded: usize,
    pub to_load: usize,
    /// All kept records were read and every change since has been followed.
    pub ready: bool,
    /// Why the index stopped following the ledger, if it did.
    pub ended: Option<String>,
}

impl IndexState {
    /// The newest submission outcomes, newest first.
    pub fn recent_submissions(&self, limit: usize) -> Vec<RunDigest> {
        self.recent.values().rev().take(limit).cloned().collect()
    }

    fn put(&mut self, job: &JobName, name: RecordName, digest: RunDigest) {
        if name.submission.is_some() {
            self.recent.retain(|(_, n, j), _| !(n == &name && j == job));
            self.recent.insert(
                (digest.ended_or_due(), name.clone(), job.clone()),
                digest.clone(),
            );
            while self.recent.len() > RECENT_SUBMISSIONS {
                self.recent.pop_first();
            }
        }
        self.jobs.entry(job.clone()).or_default().put(name, digest);
    }

    /// A run kept in the delayed store, under the name its record would have in `runs/`.
    fn put_stored(&mut self, record: &RunRecord) {
        let name = RecordName {
            scheduled_unix_ms: record.scheduled_unix_ms,
            submission: record.submission_id.clone(),
            node: None,
        };
        self.put(&record.job, name, RunDigest::of(record));
    }

    fn remove(&mut self, job: &JobName, name: &RecordName) {
        if name.submission.is_some() {
            self.recent.retain(|(_, n, j), _| !(n == name && j == job));
        }
        if let Some(runs) = self.jobs.get_mut(job) {
            runs.remove(name);
        }
    }
}

/// A running index: its state, and what keeps it alive.
#[derive(Clone)]
pub struct RunIndex {
    pub state: Arc<RwLock<IndexState>>,
    /// Where the store's feed was read up to; `None` while the queue is in ZooKeeper.
    store_mark: Arc<Mutex<Option<StoreMark>>>,
    session: crate::ids::SessionId,
    last_asked: Arc<AtomicI64>,
    stop: CancellationToken,
}

impl RunIndex {
    /// Starts following `runs` (the ledger's `runs/` directory) on `client`'s session, and
    /// the delayed store's runs of `jobs` (the schedule's) where the queue is kept there.
    pub fn start(
        client: Ledger,
        runs: String,
        jobs: Vec<JobName>,
        stop: CancellationToken,
    ) -> Self {
        let index = Self {
            state: Arc::default(),
            store_mark: Arc::default(),
            session: client.session(),
            last_asked: Arc::new(AtomicI64::new(monotonic_secs())),
            stop,
        };
        let task = index.clone();
        tokio::spawn(async move {
            let why = task.follow(&client, &runs, &jobs).await;
            if task.stop.is_cancelled() {
                tracing::debug!(reason = why, "console index stopped");
            } else {
                // The console shows "reading…" for every job until a new index has read them.
                tracing::warn!(
                    reason = why,
                    "console index failed; the next page starts another"
                );
            }
            if let Ok(mut state) = task.state.write() {
                state.ready = false;
                state.ended = Some(why);
            }
        });
        index
    }

    /// Whether this index still serves `client`'s session.
    pub fn serves(&self, client: &Ledger) -> bool {
        self.session == client.session()
            && !self.stop.is_cancelled()
            && self.state.read().is_ok_and(|state| state.ended.is_none())
    }

    /// Stops following the ledger.
    pub fn stop(&self) {
        self.stop.cancel();
    }

    /// Marks it as asked for now, which keeps it alive for [`IDLE`] more.
    pub fn touch(&self) {
        self.last_asked.store(monotonic_secs(), Ordering::Relaxed);
    }

    fn idle(&self) -> bool {
        let idle = monotonic_secs() - self.last_asked.load(Ordering::Relaxed);
        u64::try_from(idle).is_ok_and(|idle| idle >= IDLE.as_secs())
    }

    /// Loads, then follows changes until the session ends, the index idles or is stopped.
    /// Returns why it stopped.
    async fn follow(&self, client: &Ledger, runs: &str, jobs: &[JobName]) -> String {
        let changes = match Follow::add(client, runs).await {
            // The load below reads everything before the first change is looked at.
            Ok(watch) => watch.read_all_done(),
            Err(err) => return format!("cannot watch {runs}: {}", error_chain(&err)),
        };
        let changes = changes.forward(self.stop.clone());
        if let Err(why) = self.load(client, runs, jobs).await {
            return why;
        }
        if client.delayed_in_postgres() {
            let index = self.clone();
            let client = client.clone();
            tokio::spawn(async move { index.follow_store(&client).await });
        }
        let idle = || {
            self.idle()
                .then(|| format!("nobody asked for {} s", IDLE.as_secs()))
        };
        let mut batches = Batches::new(changes);
        loop {
            let batch = match batches.next(&self.stop, idle).await {
                Ok(batch) => batch,
                Err(why) => return why,
            };
            if let Err(why) = self.apply(client, runs, jobs, batch).await {
                return why;
            }
        }
    }

    /// Applies a batch of watch changes: each record that changed is read once.
    async fn apply(
        &self,
        client: &Ledger,
        runs: &str,
        jobs: &[JobName],
        batch: &mut Vec<Change>,
    ) -> Result<(), String> {
        let mut changed = HashSet::new();
        let mut reload = false;
        for change in batch.drain(..) {
            match change {
                Change::Disconnected => {
                    if let Ok(mut state) = self.state.write() {
                        state.ready = false;
                    }
                }
                Change::ReadAll => reload = true,
                Change::Node { path, .. } => {
                    changed.insert(path);
                }
            }
        }
        if reload {
            return self.load(client, runs, jobs).await;
        }
        let mut records = Vec::new();
        for path in changed {
            let Some((job, name)) = layout::parse_record_path(runs, &path) else {
                continue;
            };
            records.push((job, name, path));
        }
        let read = ledger::read_many(client, records, IN_FLIGHT).await;
        let mut state = self.state.write().map_err(|_| "index lock poisoned")?;
        for (job, name, record) in read {
            match (name, record) {
                (Some(name), Some(record)) => state.put(&job, name, RunDigest::of(&record)),
                (Some(name), None) => state.remove(&job, &name),
                (None, _) => {
                    state.jobs.entry(job).or_default();
                }
            }
        }
        Ok(())
    }

    /// Reads every kept record of every job under `runs`, and the store's newest runs of
    /// `jobs`, replacing what the index held.
    async fn load(&self, client: &Ledger, runs: &str, jobs: &[JobName]) -> Result<(), String> {
        self.load_ledger(client, runs).await?;
        let loaded = self.load_store(client, jobs).await?;
        *self
            .store_mark
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = loaded;
        if let Ok(mut state) = self.state.write() {
            state.ready = true;
        }
        Ok(())
    }

    /// Each of `jobs`' newest runs in the delayed store; where its feed stands, read first (a
    /// change after it is read again from the feed, which puts it as it stands). A store that
    /// cannot be read is said so and left to the feed, which follows it from when it can: the
    /// ticks' runs are shown meanwhile.
    async fn load_store(
        &self,
        client: &Ledger,
        jobs: &[JobName],
    ) -> Result<Option<StoreMark>, String> {
        let unreadable = |err: crate::ledger::ClaimError| {
            tracing::warn!(
                error = %error_chain(&err),
                "the console's index cannot read the delayed store; it shows the store's runs \
                 from when it can"
            );
        };
        let mark = match store_feed::horizon(client).await {
            Ok(Some(mark)) => mark,
            Ok(None) => return Ok(None),
            Err(err) => {
                unreadable(err);
                return Ok(None);
            }
        };
        for job in jobs {
            let records = match store_feed::newest_of(client, job, STRIP).await {
                Ok(records) => records,
                Err(err) => {
                    unreadable(err);
                    break;
                }
            };
            let mut state = self.state.write().map_err(|_| "index lock poisoned")?;
            for record in records {
                state.put_stored(&record);
            }
        }
        Ok(Some(mark))
    }

    /// Follows the store's change feed until the index stops, putting each run as it stands.
    /// A read that a load overlaps is harmless: a run is put as it stands, and the load's mark
    /// at worst has a change read again.
    async fn follow_store(&self, client: &Ledger) {
        let put = |fed: Fed| {
            let mut mark = self
                .store_mark
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            match fed {
                Fed::Begun(begun) => *mark = Some(begun),
                Fed::Changed(changes) => {
                    *mark = changes.last().map(|change| change.mark.clone());
                    let Ok(mut state) = self.state.write() else {
                        return;
                    };
                    for change in changes {
                        state.put_stored(&change.record);
                    }
                }
            }
        };
        let mark = || {
            let mark = self
                .store_mark
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            mark.clone()
        };
        store_feed::follow(client, &self.stop, "console index", mark, put).await;
    }

    /// Reads every kept record of every job under `runs`, replacing what the index held.
    async fn load_ledger(&self, client: &Ledger, runs: &str) -> Result<(), String> {
        let jobs = ledger::jobs_with_records(client, runs)
            .await
            .map_err(|err| format!("cannot list {runs}: {err}"))?;
        if let Ok(mut state) = self.state.write() {
            *state = IndexState {
                to_load: jobs.len(),
                ..IndexState::default()
            };
        }
        for chunk in jobs.chunks(IN_FLIGHT) {
            if self.stop.is_cancelled() {
                return Err("stopped".to_owned());
            }
            let wanted = ledger::record_names_of(client, runs, chunk).await;
            let read = ledger::read_many(client, wanted, IN_FLIGHT).await;
            let mut state = self.state.write().map_err(|_| "index lock poisoned")?;
            for job in chunk {
                state.jobs.entry(job.clone()).or_default();
            }
            for (job, name, record) in read {
                if let (Some(name), Some(record)) = (name, record) {
                    state.put(&job, name, RunDigest::of(&record));
                }
            }
            state.loaded += chunk.len();
        }
        Ok(())
    }
}

/// Seconds on a clock that only moves forward, for idling.
fn monotonic_secs() -> i64 {
    crate::ensemble_clock::monotonic_ms() / 1000
}

#[cfg(test)]
mod tests {
    use super::*;

    fn digest(job: &str, ms: i64, status: RunStatus) -> (RecordName, RunDigest) {
        let name = RecordName::tick(ms);
        let digest = RunDigest {
            job: JobName::new(job.to_owned()),
            run_id: format!("{job}-{ms}"),
            scheduled_unix_ms: ms,
            started_unix_ms: None,
            finished_unix_ms: None,
            status,
            node_id: NodeId::new("n1".to_owned()),
            exit_code: None,
            signal: None,
            http_status: None,
            attempt: 1,
            submission_id: None,
            missed_ticks: (status == RunStatus::Missed).then_some(3),
        };
        (name, digest)
    }

    #[test]
    fn the_strip_keeps_the_newest_and_missed_counts_every_kept_gap() {
        let mut runs = JobRuns::default();
        let (name, missed) = digest("a", 0, RunStatus::Missed);
        runs.put(name.clone(), missed);
        for ms in 1..=40 {
            let (name, run) = digest("a", ms * 1000, RunStatus::Succeeded);
            runs.put(name, run);
        }
        assert_eq!(runs.strip.len(), STRIP);
        assert_eq!(
            runs.last().map(|r| r.scheduled_unix_ms),
            Some(40_000),
            "the newest run is last"
        );
        assert_eq!(
            runs.missed_ticks(),
            3,
            "a gap older than the strip still counts"
        );
        runs.remove(&name);
        assert_eq!(runs.missed_ticks(), 0, "a pruned gap no longer counts");
        // An old record changing state does not push a newer one out of the strip.
        let (old, run) = digest("a", 500, RunStatus::Failed);
        runs.put(old, run);
        assert_eq!(runs.strip.len(), STRIP);
        assert!(runs.strip.keys().all(|n| n.scheduled_unix_ms > 500));
        assert_eq!(runs.last().map(|r| r.scheduled_unix_ms), Some(40_000));
    }

    #[test]
    fn a_tick_claimed_ahead_is_not_the_last_run_until_it_starts() {
        let mut runs = JobRuns::default();
        let (name, run) = digest("a", 1000, RunStatus::Succeeded);
        runs.put(name, run);
        let (next, claimed) = digest("a", 2000, RunStatus::Claimed);
        runs.put(next.clone(), claimed);
        assert_eq!(
            runs.last().map(|r| (r.scheduled_unix_ms, r.status)),
            Some((1000, RunStatus::Succeeded)),
            "a claim is a promise, not a run"
        );
        let (_, running) = digest("a", 2000, RunStatus::Running);
        runs.put(next, running);
        assert_eq!(
            runs.last().map(|r| (r.scheduled_unix_ms, r.status)),
            Some((2000, RunStatus::Running))
        );
    }

    #[test]
    fn a_record_rewritten_stays_one_entry() {
        let mut state = IndexState::default();
        let job = JobName::new("a".to_owned());
        let id = SubmissionId::parse("order-1").ok();
        let name = RecordName {
            submission: id.clone(),
            ..RecordName::tick(5)
        };
        let (_, mut run) = digest("a", 5, RunStatus::Running);
        run.submission_id = id;
        state.put(&job, name.clone(), run.clone());
        run.status = RunStatus::Succeeded;
        run.finished_unix_ms = Some(9);
        state.put(&job, name.clone(), run);
        let recent = state.recent_submissions(10);
        assert_eq!(recent.len(), 1);
        assert_eq!(recent[0].status, RunStatus::Succeeded);
        state.remove(&job, &name);
        assert!(state.recent_submissions(10).is_empty());
    }
}
