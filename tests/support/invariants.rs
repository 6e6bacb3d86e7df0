//! The invariants the chaos suite checks after each scenario (issue "Faster recovery and proof
//! under faults"), over what the jobs logged and what the nodes reported. Pure: logs in,
//! violations out, each naming the offending ticks, so a failing scenario says what broke.
//!
//! Tokens and owners are per lock group: each group is a lock of its own with its own fencing
//! tokens (issue 19), so two groups' owners at once, or one group's tokens below another's, are
//! no violation.
//!
//! Owns: the checks and the shape of their input.
//! Must not: start anything or read files; scenarios gather the input.

use std::collections::{BTreeMap, BTreeSet};

/// One run, as its job logged it: the contract variables, and when it started and ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Run {
    pub job: String,
    pub tick_ms: i64,
    pub node: String,
    pub token: i64,
    pub start_ms: i64,
    /// `None`: no end logged (killed with its node, or still running).
    pub end_ms: Option<i64>,
}

/// One sample of what a node said about one group's lock.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OwnerSample {
    pub at_ms: i64,
    /// The lock group; `""` is the default group.
    pub group: String,
    pub node: String,
    /// It said it owns the group's lock.
    pub owns: bool,
}

/// What a scenario observed.
#[derive(Debug, Default, Clone)]
pub struct Observed {
    pub runs: Vec<Run>,
    /// Each job's lock group; a job not named here is in the default group, `""`.
    pub groups: BTreeMap<String, String>,
    /// Jobs with `concurrency = "forbid"`: their runs must not overlap, across nodes.
    pub forbid: BTreeSet<String>,
    /// Per job, the ticks that had to fire (the schedule outside the fault window): a `missed`
    /// record does not excuse them.
    pub expected: BTreeMap<String, Vec<i64>>,
    /// Per job, the ticks inside the fault window: each fired or recorded `missed` or `skipped`.
    pub in_fault: BTreeMap<String, Vec<i64>>,
    /// Per job, the ticks recorded `missed` or `skipped` in the ledger.
    pub recorded_missed: BTreeMap<String, BTreeSet<i64>>,
    /// Per job, the ticks a `missed` record of a first attempt says never ran: a gap's, or a
    /// claimed tick's too late to start (a retry's `missed` record speaks of its own attempt).
    pub said_not_run: BTreeMap<String, BTreeSet<i64>>,
    /// Per job, the ticks recorded `skipped` because a run of the job was still alive on the
    /// node that recorded them (concurrency = forbid): not run by the job's own rule, when a
    /// run really was alive then (see [`REAPED_WITHIN_MS`]).
    pub skipped_behind_own_run: BTreeMap<String, BTreeSet<i64>>,
    /// (job, tick) of every run with a final record in the ledger.
    pub final_records: BTreeSet<(String, i64)>,
    /// Samples of who said it owns which group's lock.
    pub owner_samples: Vec<OwnerSample>,
}

impl Observed {
    /// The lock group of `job`.
    pub fn group_of(&self, job: &str) -> &str {
        self.groups.get(job).map_or("", String::as_str)
    }
}

/// How long after a run's last line (its job's `end`) the node that ran it may still count it
/// alive: the process exits, the node reaps it and reads its pipes to their end, and the next
/// tick's start is decided a few ms ahead of its instant. Half a second: a 2-core CI machine
/// under a build's I/O took that long, once (stop 63); a node that never learned of an end at
/// all skips its job's next ticks too, which this does not excuse.
pub const REAPED_WITHIN_MS: i64 = 500;

/// One broken invariant, naming what broke it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Violation {
    StartedTwice {
        job: String,
        tick_ms: i64,
        nodes: Vec<String>,
    },
    TokenWentBack {
        job: String,
        tick_ms: i64,
        token: i64,
        after: i64,
    },
    Overlap {
        job: String,
        first_tick: i64,
        second_tick: i64,
    },
    OutOfOrder {
        job: String,
        tick_ms: i64,
        after_tick: i64,
    },
    /// Neither run nor recorded.
    Lost {
        job: String,
        tick_ms: i64,
    },
    /// Outside every fault window, not run but recorded `missed`, `skipped` or `interrupted`:
    /// not silent, but late past what the scenario promises.
    NotRun {
        job: String,
        tick_ms: i64,
    },
    NoFinalRecord {
        job: String,
        tick_ms: i64,
    },
    /// Started, yet the ledger says it never ran: a record that lies.
    RunButRecordedMissed {
        job: String,
        tick_ms: i64,
    },
    TwoOwners {
        group: String,
        at_ms: i64,
        nodes: Vec<String>,
    },
    /// A chain's promise broken (see [`chain`]).
    Chain(ChainViolation),
    /// A broadcast's promise broken (see [`broadcast`]).
    Broadcast(BroadcastViolation),
}

/// Every violation in `observed`, in the order of the checks above.
pub fn check(observed: &Observed) -> Vec<Violation> {
    let mut found = Vec::new();
    let mut by_start = observed.runs.clone();
    by_start.sort_by_key(|run| (run.start_ms, run.tick_ms));

    // No (job, tick) started twice.
    let mut starts: BTreeMap<(&str, i64), Vec<String>> = BTreeMap::new();
    for run in &by_start {
        starts
            .entry((run.job.as_str(), run.tick_ms))
            .or_default()
            .push(run.node.clone());
    }
    for ((job, tick_ms), nodes) in &starts {
        if nodes.len() > 1 {
            found.push(Violation::StartedTwice {
                job: (*job).to_owned(),
                tick_ms: *tick_ms,
                nodes: nodes.clone(),
            });
        }
    }

    // Within a group, fencing tokens never go backwards in start order.
    let mut highest: BTreeMap<&str, i64> = BTreeMap::new();
    for run in &by_start {
        let top = highest
            .entry(observed.group_of(&run.job))
            .or_insert(run.token);
        if run.token < *top {
            found.push(Violation::TokenWentBack {
                job: run.job.clone(),
                tick_ms: run.tick_ms,
                token: run.token,
                after: *top,
            });
        }
        *top = (*top).max(run.token);
    }

    // Per job: forbid runs do not overlap; ticks start in order.
    let mut per_job: BTreeMap<&str, Vec<&Run>> = BTreeMap::new();
    for run in &by_start {
        per_job.entry(run.job.as_str()).or_default().push(run);
    }
    for (job, runs) in &per_job {
        for pair in runs.windows(2) {
            let (first, second) = (pair[0], pair[1]);
            // A run without a logged end overlaps whatever starts after it.
            let still_running = first.end_ms.is_none_or(|end| end > second.start_ms);
            if observed.forbid.contains(*job) && still_running {
                found.push(Violation::Overlap {
                    job: (*job).to_owned(),
                    first_tick: first.tick_ms,
                    second_tick: second.tick_ms,
                });
            }
            if second.tick_ms < first.tick_ms {
                found.push(Violation::OutOfOrder {
                    job: (*job).to_owned(),
                    tick_ms: second.tick_ms,
                    after_tick: first.tick_ms,
                });
            }
        }
    }

    // No tick both started and recorded as one that never ran.
    for (job, tick_ms) in starts.keys() {
        if observed
            .said_not_run
            .get(*job)
            .is_some_and(|ticks| ticks.contains(tick_ms))
        {
            found.push(Violation::RunButRecordedMissed {
                job: (*job).to_owned(),
                tick_ms: *tick_ms,
            });
        }
    }

    // Every tick outside the fault window fired; inside it, fired or recorded missed.
    let outside = observed.expected.iter().map(|ticks| (ticks, false));
    let inside = observed.in_fault.iter().map(|ticks| (ticks, true));
    for ((job, ticks), excusable) in outside.chain(inside) {
        let missed = observed.recorded_missed.get(job);
        for tick_ms in ticks {
            let fired = starts.contains_key(&(job.as_str(), *tick_ms));
            let recorded = missed.is_some_and(|m| m.contains(tick_ms));
            let (job, tick_ms) = (job.clone(), *tick_ms);
            match (fired, recorded, excusable) {
                (true, _, _) | (false, true, true) => {}
                (false, true, false) if skipped_behind_a_live_run(observed, &job, tick_ms) => {}
                (false, true, false) => found.push(Violation::NotRun { job, tick_ms }),
                (false, false, _) => found.push(Violation::Lost { job, tick_ms }),
            }
        }
    }

    // Every started run has a final record.
    for (job, tick_ms) in starts.keys() {
        if !observed
            .final_records
            .contains(&((*job).to_owned(), *tick_ms))
        {
            found.push(Violation::NoFinalRecord {
                job: (*job).to_owned(),
                tick_ms: *tick_ms,
            });
        }
    }

    // At every sampled moment at most one node says it owns a group's lock.
    let mut owners: BTreeMap<(&str, i64), Vec<String>> = BTreeMap::new();
    for sample in observed.owner_samples.iter().filter(|s| s.owns) {
        owners
            .entry((sample.group.as_str(), sample.at_ms))
            .or_default()
            .push(sample.node.clone());
    }
    for ((group, at_ms), nodes) in owners {
        if nodes.len() > 1 {
            found.push(Violation::TwoOwners {
                group: group.to_owned(),
                at_ms,
                nodes,
            });
        }
    }
    found
}

/// `tick_ms` of `job` was recorded skipped for a run of its own still alive, and the run of the
/// job's latest earlier tick was: it had not ended, or ended so little before the tick that its
/// node could not yet know ([`REAPED_WITHIN_MS`]). Concurrency = forbid at work, not a tick
/// swallowed. That run may have started after this tick's instant, on a stalled node (CI).
fn skipped_behind_a_live_run(observed: &Observed, job: &str, tick_ms: i64) -> bool {
    let skipped = observed
        .skipped_behind_own_run
        .get(job)
        .is_some_and(|ticks| ticks.contains(&tick_ms));
    let before = observed
        .runs
        .iter()
        .filter(|run| run.job == job && run.tick_ms < tick_ms)
        .max_by_key(|run| run.tick_ms);
    skipped
        && before.is_some_and(|run| {
            run.end_ms
                .is_none_or(|end| end >= tick_ms - REAPED_WITHIN_MS)
        })
}

/// One attempt of a job with retries, as it logged it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Attempt {
    pub tick_ms: i64,
    pub attempt: u32,
    pub node: String,
    pub at_ms: i64,
}

/// What became of the retries a job's failed first attempts promised.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Retries {
    /// First attempts whose retry fell due before the end.
    pub promised: usize,
    /// Those whose retry ran, once.
    pub kept: usize,
    /// Ticks whose retry never ran, with the first attempt.
    pub lost: Vec<Attempt>,
    /// (tick, attempt) run more than once, with the nodes.
    pub twice: Vec<(i64, u32, Vec<String>)>,
    /// Retries that started before their backoff had passed since their first attempt.
    pub early: Vec<Attempt>,
}

/// Judges a job's `attempts` whose first attempt always fails and promises one retry `backoff`
/// after it: every retry due before `due_before_ms` ran once, none early, and no attempt ran
/// twice.
pub fn retries(attempts: &[Attempt], backoff_ms: i64, due_before_ms: i64) -> Retries {
    let mut by_tick: BTreeMap<i64, BTreeMap<u32, Vec<&Attempt>>> = BTreeMap::new();
    for attempt in attempts {
        by_tick
            .entry(attempt.tick_ms)
            .or_default()
            .entry(attempt.attempt)
            .or_default()
            .push(attempt);
    }
    let mut found = Retries::default();
    for (tick_ms, tries) in &by_tick {
        for (number, runs) in tries {
            if runs.len() > 1 {
                let nodes = runs.iter().map(|run| run.node.clone()).collect();
                found.twice.push((*tick_ms, *number, nodes));
            }
        }
        let Some(first) = tries.get(&1).and_then(|runs| runs.first()) else {
            continue;
        };
        let retry = tries.get(&2).and_then(|runs| runs.first());
        if let Some(early) = retry.filter(|retry| retry.at_ms < first.at_ms + backoff_ms) {
            found.early.push((*early).clone());
        }
        if first.at_ms + backoff_ms > due_before_ms {
            continue;
        }
        found.promised += 1;
        match tries.get(&2).map_or(0, Vec::len) {
            0 => found.lost.push((*first).clone()),
            _ => found.kept += 1,
        }
    }
    found
}

/// What went wrong with a chain (`after`, issue 36), naming the parent's instant.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ChainViolation {
    /// The child started more than once for one instant.
    StartedTwice { tick_ms: i64, nodes: Vec<String> },
    /// The child started for an instant whose parent run did not succeed.
    WithoutParent { tick_ms: i64 },
    /// The parent succeeded, long enough before the end, and the child neither started nor is
    /// recorded: the promise was lost.
    Lost { tick_ms: i64 },
}

/// Judges a chain: `parent_succeeded` are the instants of the parent's succeeded runs (its
/// records), `child_starts` the child's starts as it logged them (instant, node),
/// `child_recorded` the instants the child's records hold. Every succeeded parent up to
/// `settled_before_ms` has its child, started once or recorded (an interrupted or skipped child
/// is recorded); no child without a succeeded parent.
pub fn chain(
    parent_succeeded: &BTreeSet<i64>,
    child_starts: &[(i64, String)],
    child_recorded: &BTreeSet<i64>,
    settled_before_ms: i64,
) -> Vec<ChainViolation> {
    let mut found = Vec::new();
    let mut by_tick: BTreeMap<i64, Vec<String>> = BTreeMap::new();
    for (tick_ms, node) in child_starts {
        by_tick.entry(*tick_ms).or_default().push(node.clone());
    }
    for (tick_ms, nodes) in &by_tick {
        if nodes.len() > 1 {
            found.push(ChainViolation::StartedTwice {
                tick_ms: *tick_ms,
                nodes: nodes.clone(),
            });
        }
        if !parent_succeeded.contains(tick_ms) {
            found.push(ChainViolation::WithoutParent { tick_ms: *tick_ms });
        }
    }
    for tick_ms in parent_succeeded.range(..settled_before_ms) {
        if !by_tick.contains_key(tick_ms) && !child_recorded.contains(tick_ms) {
            found.push(ChainViolation::Lost { tick_ms: *tick_ms });
        }
    }
    found
}

/// What went wrong with the chain after a submitted parent (issue 36), naming the child's
/// submission id or the parent's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SubmittedChainViolation {
    /// The child's submission ran more than once.
    StartedTwice { child: String, nodes: Vec<String> },
    /// The child ran naming no succeeded run of its parent, or another run than its id says.
    WrongParent { child: String, parent_run: String },
    /// The parent's run succeeded and its child neither ran nor is recorded: the promise was
    /// lost.
    Lost { parent: String },
}

/// Judges the chain after submitted parents: `succeeded` maps each parent submission whose
/// record says `succeeded` to its run id; `children` each child submission's runs as it logged
/// them (node, parent run id), `child_recorded` the child submissions with a record. The child
/// of parent `id` is `<id>.<suffix>`: it runs at most once, naming that parent's run, and every
/// succeeded parent has it, run or recorded.
pub fn submitted_chain(
    succeeded: &BTreeMap<String, String>,
    children: &BTreeMap<String, Vec<(String, String)>>,
    child_recorded: &BTreeSet<String>,
    suffix: &str,
) -> Vec<SubmittedChainViolation> {
    let mut found = Vec::new();
    for (child, runs) in children {
        if runs.len() > 1 {
            found.push(SubmittedChainViolation::StartedTwice {
                child: child.clone(),
                nodes: runs.iter().map(|(node, _)| node.clone()).collect(),
            });
        }
        let parent = child.strip_suffix(&format!(".{suffix}"));
        let expected = parent.and_then(|parent| succeeded.get(parent));
        for (_, parent_run) in runs {
            if expected != Some(parent_run) {
                found.push(SubmittedChainViolation::WrongParent {
                    child: child.clone(),
                    parent_run: parent_run.clone(),
                });
            }
        }
    }
    for parent in succeeded.keys() {
        let child = format!("{parent}.{suffix}");
        if !children.contains_key(&child) && !child_recorded.contains(&child) {
            found.push(SubmittedChainViolation::Lost {
                parent: parent.clone(),
            });
        }
    }
    found
}

/// What went wrong with a broadcast job (`broadcast`, issue 36), naming the tick and the node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BroadcastViolation {
    /// A node ran one tick more than once.
    StartedTwice { tick_ms: i64, node: String },
    /// A node ran a tick without its own record of it.
    Unrecorded { tick_ms: i64, node: String },
    /// A node ran a tick its record says it did not run (`missed`, `skipped`): the owner's
    /// sweep and the node's claim both won.
    RanButRecorded {
        tick_ms: i64,
        node: String,
        status: String,
    },
}

/// Judges a broadcast job: `starts` are its starts as the nodes logged them (tick, node),
/// `recorded` each node's record of each tick (its status). Each (tick, node) starts at most
/// once, and only with a record of its own that says it ran.
pub fn broadcast(
    starts: &[(i64, String)],
    recorded: &BTreeMap<(i64, String), String>,
) -> Vec<BroadcastViolation> {
    let mut found = Vec::new();
    let mut seen = BTreeSet::new();
    for (tick_ms, node) in starts {
        let (tick_ms, node) = (*tick_ms, node.clone());
        if !seen.insert((tick_ms, node.clone())) {
            found.push(BroadcastViolation::StartedTwice { tick_ms, node });
            continue;
        }
        match recorded.get(&(tick_ms, node.clone())).map(String::as_str) {
            None => found.push(BroadcastViolation::Unrecorded { tick_ms, node }),
            Some(status @ ("missed" | "skipped")) => {
                let status = status.to_owned();
                found.push(BroadcastViolation::RanButRecorded {
                    tick_ms,
                    node,
                    status,
                });
            }
            Some(_) => {}
        }
    }
    found
}
