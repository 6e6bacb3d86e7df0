//! The jobs a fire machine fires, each with the order its starts keep: catch-up first (its
//! listing, then its backlog one item after another), the ticks held behind it, the runs that
//! never started, the newest tick started; and the ticks declined while this node could not
//! fire.
//!
//! Owns: that per-job state across a reload (a job that stays keeps it), and which ticks wait
//! where.
//! Must not: claim anything or read the lock (the router does, from what this hands back).

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::Arc;

use chrono::{DateTime, Utc};

use super::catch_up::CatchUp;
use super::protocol::{FireReason, Item, MISSED_AFTER, is_late};
use crate::calendar::Skip;
use crate::config::JobConfig;
use crate::ids::JobName;

/// A job and what it is waiting for.
#[derive(Debug)]
pub(super) struct JobState {
    pub config: Arc<JobConfig>,
    /// Catch-up in progress (the listing or its marks are out): the job's ticks wait.
    /// Boxed: only while it runs, and most of a job's state otherwise (issue 10).
    pub catch_up: Option<Box<CatchUp>>,
    /// Catch-up's starts, in order, one after another.
    pub backlog: VecDeque<Item>,
    /// The backlog item whose claim or run is under way: the next one waits for its end.
    pub backlog_busy: bool,
    /// ... and it has not started yet: new ticks wait behind it.
    pub backlog_claiming: bool,
    /// Ticks that came while catch-up was deciding or its backlog ran: started after it.
    pub held: Vec<Item>,
    /// Runs of this job whose process never started (their record could not be marked
    /// `running`) while this node could not fire: claimed again as the same attempt by the next
    /// catch-up, with its reruns.
    pub not_started: Vec<Item>,
    /// The newest tick of this job started here or found recorded in the ledger by catch-up.
    /// No scheduled tick at or before it is claimed afresh: an older one never starts after
    /// it, and a node whose clock is behind never fires again a tick that ran while its record
    /// was pruned since (records are kept by count, the newest never pruned: issue 24).
    pub newest_tick: Option<DateTime<Utc>>,
    /// The last tick of the newest run of ticks a calendar skips, recorded as one `skipped`
    /// record at its first: the ticks up to it are accounted for (`calendars`).
    pub calendar_through: Option<DateTime<Utc>>,
    /// Ticks a calendar skips that came while catch-up awaited the job's listing (or its
    /// relist), in order, with what skipped each: recorded once the listing says what the owner
    /// before us recorded (`calendars`), never as runs.
    pub held_skips: Vec<(DateTime<Utc>, Skip)>,
    /// Since when this node has fired the job's ticks as its schedule says now (the job came,
    /// or its ticks changed with a reload): catch-up looks for ticks no record stands for only
    /// after it.
    pub schedule_since: DateTime<Utc>,
}

/// The ticks held behind a finished catch-up, sorted out at their release.
#[derive(Debug)]
pub(super) struct Released {
    /// The first of those at or before the newest tick: its owner accounted for them.
    pub accounted: Option<DateTime<Utc>>,
    /// Those that catch-up delayed past the late-tick rule: recorded missed.
    pub late: Vec<DateTime<Utc>>,
    /// The rest, to claim in order.
    pub in_time: Vec<Item>,
}

impl JobState {
    fn new(config: Arc<JobConfig>, now: DateTime<Utc>) -> Self {
        Self {
            config,
            schedule_since: now,
            catch_up: None,
            backlog: VecDeque::new(),
            backlog_busy: false,
            backlog_claiming: false,
            held: Vec::new(),
            not_started: Vec::new(),
            newest_tick: None,
            calendar_through: None,
            held_skips: Vec::new(),
        }
    }

    pub fn raise_newest_tick(&mut self, tick: DateTime<Utc>) {
        self.newest_tick = Some(self.newest_tick.map_or(tick, |newest| newest.max(tick)));
    }

    /// Catch-up is deciding or running: new ticks wait behind it, in order.
    pub fn busy_catching_up(&self) -> bool {
        self.catch_up.is_some() || self.backlog_claiming || !self.backlog.is_empty()
    }

    /// Catch-up has asked for the job's listing and not had it yet: what the owner before us
    /// recorded is unknown.
    pub fn awaits_listing(&self) -> bool {
        self.catch_up
            .as_ref()
            .is_some_and(|catch_up| catch_up.awaits_listing())
    }

    fn drop_catch_up(&mut self) {
        self.catch_up = None;
        // Their listing will not come: the next catch-up records their run after the job's
        // newest record, like any tick skipped while this node could not fire.
        self.held_skips.clear();
        self.backlog.clear();
        self.backlog_busy = false;
        self.backlog_claiming = false;
    }

    /// The backlog item under way ended or never started: the next one may go.
    pub fn backlog_done(&mut self) {
        self.backlog_busy = false;
        self.backlog_claiming = false;
    }

    /// Catch-up and its backlog are done: the ticks held behind it, sorted out at `now`;
    /// `None` while it is not done or nothing is held.
    pub fn release_held(&mut self, now: DateTime<Utc>) -> Option<Released> {
        if self.catch_up.is_some() || !self.backlog.is_empty() || self.held.is_empty() {
            return None;
        }
        let newest = self.newest_tick;
        let (accounted, held): (Vec<Item>, Vec<Item>) = std::mem::take(&mut self.held)
            .into_iter()
            .partition(|item| newest.is_some_and(|newest| item.tick <= newest));
        let config = &self.config;
        let (late, in_time): (Vec<Item>, Vec<Item>) = held
            .into_iter()
            .partition(|item| item.reason.on_time() && is_late(config, item.tick, now));
        Some(Released {
            accounted: accounted.first().map(|item| item.tick),
            late: late.iter().map(|item| item.tick).collect(),
            in_time,
        })
    }
}

/// The jobs of lock group `group` among `jobs`, and the names of the others.
pub(super) fn mine(
    group: Option<&str>,
    jobs: &[Arc<JobConfig>],
) -> (Vec<Arc<JobConfig>>, HashSet<JobName>) {
    let (mine, theirs): (Vec<_>, Vec<_>) = jobs
        .iter()
        .cloned()
        .partition(|job| job.group.as_deref() == group);
    let elsewhere = theirs.iter().map(|job| job.spec.name.clone()).collect();
    (mine, elsewhere)
}

/// The jobs a machine fires, and the ticks declined while it could not.
#[derive(Debug, Default)]
pub(super) struct Jobs {
    /// Boxed: a map's slots are twice its jobs at worst, and a job's state is mostly empty
    /// (1000 jobs: 180 KB instead of 280; issue 32).
    by_name: HashMap<JobName, Box<JobState>>,
    /// Ticks that came while this node could not fire; fired if it can within [`MISSED_AFTER`].
    declined: Vec<(DateTime<Utc>, JobName)>,
}

impl Jobs {
    pub fn of(jobs: &[Arc<JobConfig>], now: DateTime<Utc>) -> Self {
        let by_name = jobs
            .iter()
            .map(|job| {
                (
                    job.spec.name.clone(),
                    Box::new(JobState::new(Arc::clone(job), now)),
                )
            })
            .collect();
        Self {
            by_name,
            declined: Vec::new(),
        }
    }

    pub fn get(&self, job: &JobName) -> Option<&JobState> {
        self.by_name.get(job).map(|state| &**state)
    }

    pub fn get_mut(&mut self, job: &JobName) -> Option<&mut JobState> {
        self.by_name.get_mut(job).map(|state| &mut **state)
    }

    pub fn contains(&self, job: &JobName) -> bool {
        self.by_name.contains_key(job)
    }

    pub fn config(&self, job: &JobName) -> Option<Arc<JobConfig>> {
        self.by_name.get(job).map(|state| Arc::clone(&state.config))
    }

    /// Whether `job`'s own starts hold submission `id`: a run of it that never started, kept
    /// for catch-up, or catch-up's reruns and backlog. The delayed queue leaves it to them, so
    /// that it is claimed once (a stale watch report read after the lock came back would claim
    /// it a second time).
    pub fn hold_submission(&self, job: &JobName, id: &str) -> bool {
        self.by_name.get(job).is_some_and(|state| {
            state
                .not_started
                .iter()
                .chain(&state.backlog)
                .chain(&state.held)
                .any(|item| item.is_submission(id))
                || state
                    .catch_up
                    .as_ref()
                    .is_some_and(|catch_up| catch_up.reruns_submission(id))
        })
    }

    pub fn newest_tick(&self, job: &JobName) -> Option<DateTime<Utc>> {
        self.by_name.get(job).and_then(|state| state.newest_tick)
    }

    /// `job` has a catch-up to decide or a backlog to run.
    pub fn busy_catching_up(&self, job: &JobName) -> bool {
        self.by_name
            .get(job)
            .is_some_and(|state| state.busy_catching_up())
    }

    /// Starts `job`'s catch-up if `may(state)`: true if its listing is to be asked for.
    pub fn start_catch_up(&mut self, job: &JobName, may: impl Fn(&JobState) -> bool) -> bool {
        match self.by_name.get_mut(job).filter(|state| may(state)) {
            Some(state) => {
                state.catch_up = Some(Box::default());
                true
            }
            None => false,
        }
    }

    /// A tick that came while this node could not fire.
    pub fn decline(&mut self, tick: DateTime<Utc>, job: JobName) {
        self.declined.push((tick, job));
    }

    /// Forgets the declined ticks past the late-tick rule at `now`.
    pub fn forget_late_declined(&mut self, now: DateTime<Utc>) {
        let jobs = &self.by_name;
        self.declined.retain(|(tick, job)| match jobs.get(job) {
            Some(state) => !is_late(&state.config, *tick, now),
            None => *tick + MISSED_AFTER >= now,
        });
    }

    /// Forgets the declined ticks after `now`: the clock went back before them, and the fire
    /// queue hands them out again when they come.
    pub fn forget_declined_after(&mut self, now: DateTime<Utc>) {
        self.declined.retain(|(tick, _)| *tick <= now);
    }

    /// No new start until this node can fire again: catch-up starts over then, and the ticks
    /// held behind it may still be fired within the late-tick rule.
    pub fn cannot_fire(&mut self) {
        for (name, state) in &mut self.by_name {
            state.drop_catch_up();
            for item in state.held.drain(..) {
                if item.reason.on_time() {
                    self.declined.push((item.tick, name.clone()));
                }
            }
        }
    }

    /// This node can fire at `now`: the ticks declined moments before wait behind each job's
    /// catch-up, which starts for every enabled job. Their names, sorted.
    pub fn can_fire(&mut self, now: DateTime<Utc>) -> Vec<JobName> {
        let mut names: Vec<JobName> = self
            .by_name
            .values()
            .filter(|state| state.config.enabled)
            .map(|state| state.config.spec.name.clone())
            .collect();
        names.sort();
        let mut declined = std::mem::take(&mut self.declined);
        declined.sort();
        for (tick, name) in declined {
            let Some(state) = self.by_name.get_mut(&name) else {
                continue;
            };
            if !is_late(&state.config, tick, now) {
                state.held.push(Item {
                    tick,
                    reason: FireReason::Declined,
                    again: None,
                    submission: None,
                    parents: Vec::new(),
                });
            }
        }
        for name in &names {
            self.start_catch_up(name, |_| true);
        }
        names
    }

    /// Stopping: nothing more starts here. Runs that never started keep their `claimed` record
    /// for the next owner's catch-up.
    pub fn stop(&mut self) {
        for state in self.by_name.values_mut() {
            state.drop_catch_up();
            state.held.clear();
            state.not_started.clear();
        }
    }

    /// The schedule was reloaded with `jobs`: a job that stays keeps its state with its new
    /// config. The names of the jobs added, sorted, and of those gone.
    pub fn reload(
        &mut self,
        jobs: &[Arc<JobConfig>],
        now: DateTime<Utc>,
    ) -> (Vec<JobName>, Vec<JobName>) {
        let mut old = std::mem::take(&mut self.by_name);
        let mut added = Vec::new();
        for job in jobs {
            let name = job.spec.name.clone();
            let state = match old.remove(&name) {
                Some(mut state) => {
                    // A changed calendar applies from the next tick: a run recorded ahead under
                    // the old one no longer accounts for it.
                    if state.config.calendars != job.calendars {
                        state.calendar_through = None;
                    }
                    if !state.config.same_ticks(job) {
                        state.schedule_since = now;
                    }
                    state.config = Arc::clone(job);
                    state
                }
                None => {
                    added.push(name.clone());
                    Box::new(JobState::new(Arc::clone(job), now))
                }
            };
            self.by_name.insert(name, state);
        }
        added.sort();
        (added, old.into_keys().collect())
    }
}

#[cfg(test)]
mod tests {

    use super::*;

    fn at(s: i64) -> DateTime<Utc> {
        DateTime::from_timestamp(1_893_456_000 + s, 0).expect("in range")
    }

    /// Every minute; `extra` keys per job.
    fn schedule(jobs: &[(&str, &str)]) -> Vec<Arc<JobConfig>> {
        let tables: String = jobs
            .iter()
            .map(|(name, extra)| {
                format!(
                    "[[job]]\nname = \"{name}\"\nschedule = \"0 * * * * *\"\nshell = \"true\"\n{extra}\n"
                )
            })
            .collect();
        crate::config::jobs_for_test(&tables)
    }

    fn on_time(tick: DateTime<Utc>) -> Item {
        Item {
            tick,
            reason: FireReason::OnTime,
            again: None,
            submission: None,
            parents: Vec::new(),
        }
    }

    #[test]
    fn ticks_declined_wait_behind_the_next_catch_up_and_late_ones_are_forgotten() {
        let mut jobs = Jobs::of(
            &schedule(&[("b", ""), ("a", ""), ("off", "enabled = false")]),
            at(0),
        );
        let (a, b) = (JobName::new("a"), JobName::new("b"));
        jobs.decline(at(60), a.clone());
        jobs.decline(at(0), b.clone());
        jobs.forget_late_declined(at(60));
        assert_eq!(
            jobs.can_fire(at(60)),
            vec![a.clone(), b.clone()],
            "enabled, sorted"
        );
        let held = |jobs: &Jobs, job: &JobName| jobs.get(job).map(|s| s.held.len());
        assert_eq!(
            (held(&jobs, &a), held(&jobs, &b)),
            (Some(1), Some(0)),
            "b's was late"
        );
        assert!(jobs.busy_catching_up(&a) && !jobs.busy_catching_up(&JobName::new("off")));

        jobs.cannot_fire();
        assert!(!jobs.busy_catching_up(&a), "catch-up starts over");
        assert_eq!(held(&jobs, &a), Some(0), "held ticks are declined again");
        assert_eq!(jobs.can_fire(at(60)), vec![a.clone(), b]);
        assert_eq!(held(&jobs, &a), Some(1), "... and held again while in time");
    }

    #[test]
    fn held_ticks_go_once_catch_up_is_done_sorted_into_accounted_late_and_in_time() {
        let mut jobs = Jobs::of(&schedule(&[("a", "")]), at(0));
        let job = JobName::new("a");
        assert!(jobs.start_catch_up(&job, |_| true));
        let state = jobs.get_mut(&job).expect("a job");
        state.held = vec![on_time(at(60)), on_time(at(120)), on_time(at(180))];
        assert!(
            state.release_held(at(180)).is_none(),
            "catch-up is deciding"
        );
        state.catch_up = None;
        state.raise_newest_tick(at(60));
        let released = state.release_held(at(180)).expect("done");
        assert_eq!(released.accounted, Some(at(60)));
        assert_eq!(released.late, vec![at(120)]);
        let in_time: Vec<_> = released.in_time.iter().map(|item| item.tick).collect();
        assert_eq!(in_time, vec![at(180)]);
        assert!(state.held.is_empty() && state.release_held(at(180)).is_none());
    }

    #[test]
    fn a_reload_keeps_the_state_of_the_jobs_that_stay() {
        let mut jobs = Jobs::of(&schedule(&[("a", ""), ("b", "")]), at(0));
        let a = JobName::new("a");
        if let Some(state) = jobs.get_mut(&a) {
            state.raise_newest_tick(at(60));
        }
        let (added, gone) = jobs.reload(&schedule(&[("c", ""), ("a", "history = 3")]), at(90));
        assert_eq!(
            (added, gone),
            (vec![JobName::new("c")], vec![JobName::new("b")])
        );
        assert_eq!(jobs.newest_tick(&a), Some(at(60)));
        assert_eq!(jobs.config(&a).map(|config| config.history), Some(3));
        let since = |jobs: &Jobs, job: &str| jobs.get(&JobName::new(job)).map(|s| s.schedule_since);
        assert_eq!(
            (since(&jobs, "a"), since(&jobs, "c")),
            (Some(at(0)), Some(at(90))),
            "its ticks unchanged, a job keeps firing its schedule since it came"
        );
        let every_hour = "[[job]]\nname = \"a\"\nschedule = \"0 0 * * * *\"\nshell = \"true\"\n";
        jobs.reload(&crate::config::jobs_for_test(every_hour), at(120));
        assert_eq!(
            since(&jobs, "a"),
            Some(at(120)),
            "new ticks, from the reload"
        );
        let (mine, elsewhere) = mine(None, &schedule(&[("a", "")]));
        assert_eq!((mine.len(), elsewhere.len()), (1, 0));
    }
}
