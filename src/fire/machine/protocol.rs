//! The fire machine's vocabulary: the facts it is told ([`Input`]), the commands it gives
//! ([`Action`]), why a run starts ([`FireReason`]), and the limits in time its rules share.
//!
//! Owns: those types, so that the machine's parts and its driver speak one language.
//! Must not: decide anything (the machine and its parts do).

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};

use crate::config::JobConfig;
use crate::control::Pauses;
use crate::delayed::submission::{DueBucket, Submission, SubmissionId};
use crate::ids::{FencingToken, JobName, NodeId};
use crate::layout::{Keep, MarkName};
use crate::lock::LockStatus;
use crate::lock::node::LiveMember;
use crate::run::{
    Claim, ClaimMode, JobSpec, ParentRun, RunContext, RunRecord, RunReport, SubmissionInput,
};

/// A tick whose time passed longer ago than this is not started on time: the process was
/// stopped or starved, and catch-up (`misfire`) decides about it instead.
pub const MISSED_AFTER: Duration = Duration::from_secs(1);
/// The late-tick rule: the last instant a tick of `config` may still start on time — its start
/// (the tick, with the job's jitter) and [`MISSED_AFTER`]. Later, catch-up (`misfire`) decides.
pub(super) fn on_time_until(config: &JobConfig, tick: DateTime<Utc>) -> DateTime<Utc> {
    config.start_of(tick) + MISSED_AFTER
}

/// Whether a tick of `config` is past the late-tick rule at `now`.
pub(super) fn is_late(config: &JobConfig, tick: DateTime<Utc>, now: DateTime<Utc>) -> bool {
    now > on_time_until(config, tick)
}

/// A prepared run's start goes out this long before its instant: its launcher holds the exec
/// until the instant itself (`runner::launch`), which takes the daemon's own wake-up off the
/// path from the instant to the job. Far below any lock timing: a Lost this close to the tick
/// is noticed after it either way.
pub const START_LEAD: Duration = Duration::from_millis(5);
/// How long a stopping owner waits for its claimed, unstarted ticks to be withdrawn before it
/// hands the lock over anyway.
pub const WITHDRAW_LIMIT: Duration = Duration::from_secs(2);

/// Names one claim of the machine, for its answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ClaimId(pub u64);

/// Why a run starts: the one claim path has a reason, never a path of its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FireReason {
    /// Its tick came, with this node the owner.
    OnTime,
    /// Its tick came moments before this node could fire (a handoff); fired now, still on time.
    Declined,
    /// Missed while no node could fire; started by catch-up per `misfire`.
    CaughtUp,
    /// Its run was interrupted by the loss of its owner; started again (`on_interrupted`).
    Rerun,
    /// Its run failed or timed out; tried again (`retries`).
    Retry,
    /// A retry an earlier owner promised in the failed run's record, kept by this one.
    RetryResumed,
    /// A delayed submission came due.
    Submitted,
    /// An operator asked for a run now (`zkcron trigger`): a submission that says who asked.
    Manual,
    /// A past tick without a record, asked for by `zkcron backfill` (`ZKCRON_BACKFILL=1`);
    /// `with_children`: its run makes its children's runs (`--with-children`).
    Backfill { with_children: bool },
    /// Its parents' runs at its instant ended as its `after_status` says (`after`).
    Chained,
}

impl FireReason {
    /// Started by on_locked/catch-up instead of on time (`ZKCRON_RESUMED=1`).
    pub(super) fn resumed(self) -> bool {
        matches!(
            self,
            FireReason::CaughtUp | FireReason::Rerun | FireReason::RetryResumed
        )
    }

    /// Ticks fired on time are held to the late-tick rule; the others are late by nature.
    pub(super) fn on_time(self) -> bool {
        matches!(self, FireReason::OnTime | FireReason::Declined)
    }

    /// Started at its instant, not at once, when claimed ahead of it.
    pub(super) fn waits_for_its_time(self) -> bool {
        self.on_time() || self.submitted()
    }

    /// Held to its job's tick order: not a backfill's past tick (its claims tell the ones run),
    /// nor a chained run, whose instant is its parents' (they end in any order). Those are old
    /// by design: a wait for a limit counts from their claim, not their instant.
    pub(super) fn in_tick_order(self) -> bool {
        !matches!(self, FireReason::Backfill { .. } | FireReason::Chained)
    }

    /// A submission's run, held to its job's `starting_deadline`.
    pub(super) fn submitted(self) -> bool {
        matches!(self, FireReason::Submitted | FireReason::Manual)
    }
}

/// A claim for the driver to send: one fenced multi-op (DESIGN.md "ZooKeeper layout").
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TickClaim {
    pub id: ClaimId,
    /// Status `claimed` for a run to start; `skipped` or `missed` for a record only.
    pub record: RunRecord,
    pub mode: ClaimMode,
    /// Also create the `running/<job>` guard (concurrency = forbid).
    pub guarded: bool,
    /// What the claim checks, so that a node that may no longer run it claims nothing.
    pub fence: Fence,
}

/// What a claim is fenced by.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fence {
    /// The epoch, at the claim's token: a run of the group's owner.
    Epoch,
    /// This node's member znode: its own run of a broadcast tick, whoever owns the lock (a
    /// node whose session has gone claims nothing, however long it was frozen).
    Member,
}

/// What the machine writes to the operators' `control/` nodes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ControlAction {
    /// Remove this backfill request: its ticks are in a backlog (or its job is unknown).
    RemoveBackfill(String),
    /// Pause the job (`pause_after_failures`) as `zkcron pause` would, for this reason. Nothing
    /// answers: the pause comes back as [`ControlInput::PausesRead`].
    PauseJob { job: JobName, reason: String },
}

/// What the operators asked, as the driver's watch on `control/` read it.
#[derive(Debug, Clone)]
pub enum ControlInput {
    /// The paused jobs, read after a change. Nothing starts before the first reading: a
    /// paused job must not fire in the moment after a start.
    PausesRead(Pauses),
    /// An operator asked this node to hand the lock over (`zkcron release`): unstarted claims
    /// are given back, then [`LockAction::Yield`].
    ReleaseRequested,
    /// The backfill requests waiting under `control/backfill`, by node name: each for one of
    /// this machine's jobs is taken once it may fire.
    BackfillsRead(Vec<(String, crate::control::BackfillRequest)>),
}

/// What the chains ask of the driver about the marks parents leave their children.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ChainsAction {
    /// Read the chain marks left for this chained job. Answered by
    /// [`ChainsInput::MarksListed`].
    ListMarks(JobName),
    /// Remove the marks left for `job`: nobody will take them (their instant is recorded, or
    /// a submitted parent's mark makes no run). Nothing answers.
    DropMarks { job: JobName, marks: Vec<MarkName> },
    /// Submit `submission` of the chained job `job` under `id` (a generated one if `id` is
    /// taken), taking the submitted parent's `mark`, in one multi-op under `check(epoch,
    /// token)`. Answered by [`ChainsInput::ChildSubmitted`].
    SubmitChild {
        job: JobName,
        mark: MarkName,
        id: SubmissionId,
        submission: Box<Submission>,
        token: FencingToken,
    },
}

/// The chain marks, as the driver read or watched them.
#[derive(Debug, Clone)]
pub enum ChainsInput {
    /// The chain marks left for a job changed (the driver's watch on `after/`); `None`: any
    /// job's may have (the watch began, or began again after a disconnection).
    MarksChanged(Option<JobName>),
    /// Answer to [`ChainsAction::ListMarks`]: the marks left for `job`, or why they could not
    /// be read.
    MarksListed {
        job: JobName,
        result: Result<Vec<crate::run::FoundMark>, String>,
    },
    /// Answer to [`ChainsAction::SubmitChild`]: the child submitted under this id (`None`: the
    /// mark was gone, or the epoch had moved on: nothing was written), or why the submit
    /// failed.
    ChildSubmitted {
        job: JobName,
        mark: MarkName,
        submission: Box<Submission>,
        result: Result<Option<SubmissionId>, String>,
    },
}

/// What the delayed queue asks of the driver.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DelayedAction {
    /// Read the pending submissions of every bucket after `after` (from the oldest when
    /// `None`) through `through`, then on, bucket by bucket, up to `ahead_to` until one holds a
    /// submission the machine wants (read too). Answered by [`DelayedInput::Scanned`].
    Scan {
        generation: u64,
        /// Only the markers of these jobs (and those that name none) are read.
        wanted: Wanted,
        after: Option<DueBucket>,
        through: DueBucket,
        ahead_to: DueBucket,
        /// Remove the empty buckets met on the way that ended before this instant.
        clean_before: DateTime<Utc>,
    },
    /// Remove this past bucket if nothing is pending in it.
    RemoveEmptyBucket(DueBucket),
    /// Remove this past day of buckets if none is left in it.
    RemoveEmptyDay(i64),
    /// Read one submission the watch reported. Answered by [`DelayedInput::Read`].
    ReadSubmission { id: SubmissionId },
    /// Read one submission again once `after` has passed: its claim failed, and claimed again
    /// at once it would fail as fast as ZooKeeper answers while a quota or an ACL refuses it.
    /// Answered by [`DelayedInput::Read`].
    ReadSubmissionAfter {
        id: SubmissionId,
        after: std::time::Duration,
    },
}

/// What the delayed store holds, as the driver read or watched it.
#[derive(Debug, Clone)]
pub enum DelayedInput {
    /// Answer to [`DelayedAction::Scan`]: what the buckets read hold.
    Scanned {
        generation: u64,
        result: Result<Scanned, String>,
    },
    /// The watch on the due buckets began, or began again after a disconnection (`watching`):
    /// a pending submission made meanwhile may have gone unreported, so every bucket is read
    /// again; or it could not be set (not `watching`): scans read no further than the horizon,
    /// since nothing would report what is submitted into a bucket read ahead.
    DueWatch { watching: bool },
    /// A pending submission appeared in `bucket` (the driver's watch on the due buckets).
    Created {
        bucket: DueBucket,
        id: SubmissionId,
        /// The job, when the marker names it (lock groups).
        job: Option<JobName>,
    },
    /// Answer to [`DelayedAction::ReadSubmission`]: the submission, `None` when it is gone.
    Read {
        id: SubmissionId,
        result: Result<Option<Submission>, String>,
    },
}

/// What the broadcast part asks of the driver: a member's own runs of its ticks, and the
/// owner's sweeps of them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BroadcastAction {
    /// Read when this node's member znode was created. Answered by
    /// [`BroadcastInput::MembershipRead`].
    ReadMembership,
    /// Read the members of a broadcast job's `tick` at its start: those live now, and those
    /// gone since that were members at its instant. Answered by [`BroadcastInput::MembersRead`].
    ReadMembers { job: JobName, tick: DateTime<Utc> },
    /// Read what the ledger holds of a broadcast job's `tick` for the owner's sweep: which
    /// members have a record of it, who is a member now, how many records the job has.
    /// Answered by [`BroadcastInput::TickRead`].
    ReadTick { job: JobName, tick: DateTime<Utc> },
    /// Mark `interrupted` the runs still open of `nodes`, members at `through` and gone since,
    /// among each one's newest records of `job` through that tick: a run its node never ended
    /// (killed mid-run), which nobody else would. Nothing answers; the driver logs what it
    /// marked, and the next sweep looks again.
    CloseGone {
        job: JobName,
        through: DateTime<Utc>,
        nodes: Vec<NodeId>,
    },
    /// Mark `interrupted` this node's records of `jobs` before `before` (its membership began)
    /// that are still open, but for the runs in `alive`: what a previous process or session of
    /// this node left unended. Nothing answers; the driver logs what it marked.
    CloseOwn {
        jobs: Vec<JobName>,
        before: DateTime<Utc>,
        alive: Vec<String>,
    },
}

/// The driver's answers to [`BroadcastAction`]s.
#[derive(Debug, Clone)]
pub enum BroadcastInput {
    /// When this node's member znode was created (the servers' clock), `None` when it is not
    /// there (yet), or why it could not be read.
    MembershipRead(Result<Option<DateTime<Utc>>, String>),
    /// The members of `tick`'s instant, or why they could not be read.
    MembersRead {
        job: JobName,
        tick: DateTime<Utc>,
        result: Result<Vec<LiveMember>, String>,
    },
    /// What the ledger holds of `tick` ([`BroadcastAction::ReadTick`]), or why it could not
    /// be read.
    TickRead {
        job: JobName,
        tick: DateTime<Utc>,
        result: Result<TickRecords, String>,
    },
}

/// What the ledger holds of a broadcast tick, for the owner's sweep.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TickRecords {
    /// The members with a record of the tick: their own claim, or a sweep's `missed`.
    pub recorded: std::collections::BTreeSet<NodeId>,
    /// The members live now.
    pub live: std::collections::BTreeSet<NodeId>,
    /// How many records the job has, every member's.
    pub records: usize,
}

/// Why a claim did not succeed, as far as the machine's decisions go (the driver logs details).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClaimRefused {
    /// The epoch moved past our token; for a [`Fence::Member`] claim, this node's member znode
    /// is gone.
    NotOwner,
    /// The record exists (another node claimed the tick) or changed since it was read.
    AlreadyClaimed,
    /// The `running/<job>` guard exists: a run of the job is alive somewhere.
    RunAlive,
    /// The request failed; the text says why.
    Failed(String),
    /// A scheduled tick's claim of its stored record (a next attempt, a rerun, a record written
    /// over it) found the record gone: nothing stands for the tick any more.
    Vanished,
}

/// A fact the machine learns.
#[derive(Debug, Clone)]
pub enum Input {
    /// `next_deadline()` has passed. A spurious tick changes nothing.
    Tick,
    /// The schedule was reloaded.
    Reloaded(Vec<Arc<JobConfig>>),
    /// The daemon is stopping.
    Shutdown,
    /// The wall clock jumped by `by` (forward when positive) besides the time that passed (an
    /// NTP step, a VM resumed). The limits the machine counts — a stop's and a handover's, a
    /// replaced run's grace, the waits before trying again — move with it, so that each lasts
    /// as long as it says; the schedule does not (issue 31, defect 2).
    ClockStepped { by: chrono::Duration },
    /// The claim path's answers ([`ClaimAction`], [`RunAction`]).
    Claims(ClaimInput),
    /// Catch-up's answers ([`CatchUpAction`]).
    CatchUp(CatchUpInput),
    /// The lock driver's news ([`LockAction`]).
    Lock(LockInput),
    /// What the delayed store holds, as the driver read or watched it ([`DelayedAction`]).
    Delayed(DelayedInput),
    /// What the operators asked, as the driver's watch on `control/` read it.
    Control(ControlInput),
    /// An answer to a broadcast job's request ([`BroadcastAction`]).
    Broadcast(BroadcastInput),
    /// The chain marks, as the driver read or watched them ([`ChainsAction`]).
    Chains(ChainsInput),
}

/// The claim path's answers: a claim, its leases, its run's process, its records and guard.
#[derive(Debug, Clone)]
pub enum ClaimInput {
    /// Answer to [`ClaimAction::Claim`]. (The claims and records in inputs are boxed: an input
    /// is as large as its largest kind, and the driver's channels hold them 32 to a block.)
    Done {
        id: ClaimId,
        result: Result<Box<Claim>, ClaimRefused>,
    },
    /// Answer to [`ClaimAction::TakeLeases`]: `None` once every lease is held; the limit whose lease
    /// could not be taken (ZooKeeper failed; nothing is held then) otherwise.
    LeasesTaken {
        id: ClaimId,
        run_id: String,
        failed: Option<String>,
    },
    /// A run's process ended; `claim` carries the record's current version.
    RunEnded {
        claim: Box<Claim>,
        report: RunReport,
    },
    /// A run started with [`StartWrite::Before`] never started its process: its record could not be
    /// marked `running` (no answer, or changed by someone else), or it was cancelled first. The
    /// record still says `claimed`, which proves it never ran — or `running`, when the write
    /// was applied and its answer lost (`maybe_written`).
    RunNotStarted {
        claim: Box<Claim>,
        why: String,
        maybe_written: bool,
    },
    /// Answer to [`ClaimAction::WriteRecord`] (a failure is logged by the driver).
    RecordWritten { run_id: String, write: RecordWrite },
    /// Answer to [`ClaimAction::Withdraw`].
    Withdrawn { id: ClaimId },
    /// Answer to [`ClaimAction::ReleaseGuard`]: `settled` when the guard is gone or not ours, false
    /// when ZooKeeper did not answer (the release is sent again once connected).
    GuardReleased { run_id: String, settled: bool },
    /// Answer to [`ClaimAction::TakeGuard`]: the guard's path when our session holds it now; `None`
    /// when it could not be made (the session that claimed the run is gone, and the guard
    /// would have gone with it; or ZooKeeper refused or did not answer, which is logged).
    GuardTaken {
        run_id: String,
        guard: Option<String>,
    },
}

/// Catch-up's answers: a job's records listed, an open one marked.
#[derive(Debug, Clone)]
pub enum CatchUpInput {
    /// Answer to [`CatchUpAction::ListRecords`]; `Err` says why the listing failed.
    Listed {
        job: JobName,
        result: Result<JobRecords, String>,
    },
    /// Answer to [`CatchUpAction::MarkInterrupted`]: the record's new version, or why not.
    Marked {
        record: Box<RunRecord>,
        result: Result<i32, String>,
    },
}

/// The lock driver's: the lock's status, and the release a stop asked for.
#[derive(Debug, Clone)]
pub enum LockInput {
    /// The lock's status changed (one ordered stream, from the lock driver).
    Changed(LockStatus),
    /// Answer to [`LockAction::HandOver`]: the lock is released (or was never ours).
    Released,
}

/// How the write of a run's final record ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RecordWrite {
    /// Stored, at this version.
    Written(i32),
    /// ZooKeeper answered that the record was changed by someone else (the next owner marked
    /// the run interrupted) or is gone: final. Sending it again cannot change that answer.
    Refused,
    /// No answer: no session, a lost connection, a timeout. Worth sending again.
    Failed,
}

/// A command for the driver.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Keep the job's newest records, as many as `keep` says. A pruned submission's id stays
    /// remembered (a tombstone) until `remember` after its run ended (`dedup_window`).
    Prune {
        job: JobName,
        keep: Keep,
        remember: Duration,
    },
    /// A write to the operators' `control/` nodes: a backfill request taken, a job paused.
    Control(ControlAction),
    /// Send this notice (`on_failure`, `on_failure_webhook`): its record is stored. Nothing
    /// answers; the driver neither waits for it nor sends it twice.
    Notify(Box<crate::run::Notice>),
    /// Nothing is left to do: the daemon may exit.
    Stopped,
    /// A request of the claim path to the ledger.
    Claims(ClaimAction),
    /// A request of the claim path to the runner.
    Runs(RunAction),
    /// A request of catch-up.
    CatchUp(CatchUpAction),
    /// A request of the lock driver.
    Lock(LockAction),
    /// A request of the delayed queue: reading the due buckets and submissions, removing
    /// the empty ones.
    Delayed(DelayedAction),
    /// A broadcast job's request: a member's own runs, or the owner's sweeps.
    Broadcast(BroadcastAction),
    /// A request about the chain marks: reading, dropping, or making a child's submission.
    Chains(ChainsAction),
}

/// The claim path's requests of the ledger: claims, records, guards, leases.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClaimAction {
    /// Send this claim. Answered by [`ClaimInput::Done`].
    Claim(TickClaim),
    /// Write the claim's record (a final status) and release its guard. Answered by
    /// [`ClaimInput::RecordWritten`].
    WriteRecord(Claim),
    /// Give a claimed, unstarted tick back. Answered by [`ClaimInput::Withdrawn`]. Refused (the
    /// epoch moved), its guard is released all the same, as in [`ClaimAction::ReleaseGuard`].
    Withdraw { id: ClaimId, claim: Claim },
    /// This claim will not start (the lock moved after it): release its `running/<job>` guard if
    /// our session still holds it, and leave its record for the next owner to resolve.
    /// Answered by [`ClaimInput::GuardReleased`].
    ReleaseGuard(Claim),
    /// This run of a `forbid` job, claimed without the guard, outlives our hold of the lock
    /// (we hand it over, or lost it with our session still alive): make its `running/<job>`
    /// guard, on the session that claimed it, so that the next owner's claims of the job find
    /// it alive. Answered by [`ClaimInput::GuardTaken`].
    TakeGuard(Claim),
    /// Take a lease of each of `limits` for run `run_id`, in name order, each waited for in its
    /// limit's queue. Answered by [`ClaimInput::LeasesTaken`] once all are held (or one failed);
    /// [`ClaimAction::GiveBackLeases`] gives the wait up.
    TakeLeases {
        id: ClaimId,
        run_id: String,
        limits: Vec<crate::config::LimitConfig>,
    },
    /// Give back the leases run `run_id` holds or waits for: it will not start. (A run that
    /// started gives them back when it ends; the driver sees to that.)
    GiveBackLeases { run_id: String },
    /// Write this failed run's record without its promised retry, at its version (the job left
    /// the schedule): nothing runs it again, and its submission's open marker goes. The driver
    /// logs the outcome; nothing waits for it.
    DropRetry { record: RunRecord, version: i32 },
}

/// The claim path's requests of the runner: a run prepared, started, given up, cancelled.
// An action is as large as its largest group's largest kind, grouped or not: boxing the big
// kind here would cost an allocation per run and save nothing in `Action`.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RunAction {
    /// Start the claimed run. Its end comes back as [`ClaimInput::RunEnded`].
    Start {
        spec: Arc<JobSpec>,
        claim: Claim,
        context: RunContext,
        /// When the record says `running`.
        record: StartWrite,
        /// The job's program starts not before this instant (a prepared run's start goes out
        /// [`START_LEAD`] ahead of it).
        not_before: DateTime<Utc>,
    },
    /// Start this claimed run's process ahead of its instant, waiting (`runner::prepare`): the
    /// [`RunAction::Start`] of the same run gives it its go, an [`RunAction::Unprepare`] gives it
    /// up. Only a speed-up: a run never prepared (or whose process is gone) is spawned at its
    /// start.
    Prepare {
        spec: Arc<JobSpec>,
        context: RunContext,
        /// The job's program starts not before this instant.
        not_before: DateTime<Utc>,
    },
    /// The prepared run will not start: end its waiting process.
    Unprepare { run_id: String },
    /// Stop this run's process group (SIGTERM, SIGKILL after its grace).
    Cancel { run_id: String },
}

/// Catch-up's requests: the jobs' records made ready, listed, an open one marked.
// An action is as large as its largest group's largest kind, grouped or not: boxing the big
// kind here would cost an allocation per run and save nothing in `Action`.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CatchUpAction {
    /// Create these jobs' record parents now, so that their first claims are quick.
    PrepareJobs(Vec<JobName>),
    /// Read the job's records for catch-up. Answered by [`CatchUpInput::Listed`].
    ListRecords(JobName),
    /// Write this (open) record as `interrupted` at its version; `closes`: nothing will run it
    /// again (a submission's open marker goes). Answered by [`CatchUpInput::Marked`].
    MarkInterrupted {
        record: RunRecord,
        version: i32,
        closes: bool,
    },
}

/// Requests of the lock driver: verify the lock, release it, yield it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LockAction {
    /// A claim with this token failed its epoch check: the lock should verify it.
    FenceFailed(FencingToken),
    /// Release the lock now (stopping, claims withdrawn). Answered by [`LockInput::Released`].
    HandOver,
    /// Hand the lock over and stay out of contention for a while (a release request, claims
    /// withdrawn); the lock's next status, without our token, says it is done.
    Yield,
}

/// What a scan of the due buckets read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Scanned {
    /// The pending submissions the machine wants.
    pub found: Vec<(SubmissionId, Submission)>,
    /// Every bucket up to this one was read: the scan's `through`, or further when it read on.
    pub through: DueBucket,
    /// The buckets read that exist (empty ones too): each is removed once past.
    pub present: Vec<DueBucket>,
}

/// Who we are, for the records we write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Me {
    pub node_id: NodeId,
    pub ip: String,
    /// Where telemetry is on: the seed this process drew once, from which the runs it claims
    /// first get their trace ([`RunTrace::first`](crate::run::RunTrace::first)); `None`: no
    /// trace is chosen, and none costs a byte of a record.
    pub trace_seed: Option<u128>,
}

impl Me {
    /// `record`, a run to start, with its trace: the one it keeps from an earlier attempt, or
    /// one chosen now where telemetry is on.
    pub(super) fn traced(&self, mut record: RunRecord) -> RunRecord {
        if let (Some(seed), None) = (self.trace_seed, record.trace) {
            record.trace = Some(crate::run::RunTrace::first(seed, &record.run_id));
        }
        record
    }

    /// A record, by us under `token`, of `job`'s `tick` that does not run, and why (`skipped`).
    pub(super) fn skipped(
        &self,
        job: &JobName,
        tick: DateTime<Utc>,
        token: FencingToken,
        now: DateTime<Utc>,
        why: String,
    ) -> RunRecord {
        let me = (&self.node_id, self.ip.as_str());
        let now_ms = now.timestamp_millis();
        let mut record = RunRecord::claimed(job, tick.timestamp_millis(), me, token, now_ms);
        record.status = crate::run::RunStatus::Skipped;
        record.finished_unix_ms = Some(now_ms);
        record.error = Some(why);
        record
    }
}

/// A run of ticks a calendar skips is followed this far at most (a calendar that skips every
/// tick for ever, say): the next tick starts another record.
const MAX_SKIPPED_RUN: u64 = 10_000;

impl Me {
    /// The `skipped` record, by us under `token`, of the run of ticks `job`'s calendars skip
    /// that starts at `tick` (`skip` says which), followed forward ([`MAX_SKIPPED_RUN`] ticks at
    /// most), and its last tick: what the owner writes when the run's first tick comes
    /// (`calendars`), and what catch-up writes for a run that began while nobody owned the lock.
    pub(super) fn skipped_run(
        &self,
        job: &JobConfig,
        tick: DateTime<Utc>,
        skip: &crate::calendar::Skip,
        token: FencingToken,
        now: DateTime<Utc>,
    ) -> (RunRecord, DateTime<Utc>) {
        let (mut last, mut count) = (tick, 1);
        while let Some(next) = job
            .next_tick_after(last)
            .filter(|next| count < MAX_SKIPPED_RUN && job.calendars.skips(*next).is_some())
        {
            last = next;
            count += 1;
        }
        let name = &job.spec.name;
        tracing::info!(job = %name, %tick, through = %last, ticks = count, reason = skip.reason(), "ticks skipped by calendar");
        let mut record = self.skipped(name, tick, token, now, skip.reason());
        record.missed_ticks = Some(count);
        record.skipped_through_unix_ms = Some(last.timestamp_millis());
        (record, last)
    }
}

/// What catch-up reads of one job (answer to [`CatchUpAction::ListRecords`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct JobRecords {
    /// The scheduled instants of all the job's records, in any order.
    pub ticks: Vec<i64>,
    /// The newest records (up to [`RESOLVE_WINDOW`](super::RESOLVE_WINDOW)) with their znode versions.
    pub newest: Vec<(RunRecord, i32)>,
    /// The run id in the job's `running/<job>` guard, if one exists.
    pub guard_holder: Option<String>,
    /// Node ids of the group's live members.
    pub live_members: Vec<NodeId>,
    /// The payloads of the submissions among `newest`, for a rerun.
    pub payloads: HashMap<SubmissionId, Arc<Vec<u8>>>,
}

/// Which pending markers a lock group's machine reads (issue 19). A marker that names its job
/// (`<id>~<job>`) is read only by the machine of the job's group, so an owner's reads do not
/// grow with other groups' submissions; one that does not (`<id>`, written without groups or by
/// an older submitter) must be read to learn its job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Wanted {
    /// The default group: every job but the named groups' (it keeps the submissions of jobs the
    /// schedule does not declare, as before groups).
    AllBut(Arc<HashSet<JobName>>),
    /// A named group: its own jobs.
    Only(Arc<HashSet<JobName>>),
}

impl Wanted {
    /// The markers the machine of `group` (`None`: the default group) reads, when its jobs are
    /// `mine` and the other groups' are `elsewhere`.
    pub(super) fn of(
        group: Option<&str>,
        mine: &[Arc<crate::config::JobConfig>],
        elsewhere: &HashSet<JobName>,
    ) -> Self {
        match group {
            None => Self::AllBut(Arc::new(elsewhere.clone())),
            Some(_) => Self::Only(Arc::new(
                mine.iter().map(|job| job.spec.name.clone()).collect(),
            )),
        }
    }

    /// Whether a marker naming `job` (or none) is worth reading.
    pub fn reads(&self, job: Option<&JobName>) -> bool {
        match (self, job) {
            (_, None) => true,
            (Self::AllBut(others), Some(job)) => !others.contains(job),
            (Self::Only(mine), Some(job)) => mine.contains(job),
        }
    }
}

/// One tick (or run) waiting for its turn in a job's catch-up sequence.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Item {
    pub(super) tick: DateTime<Utc>,
    pub(super) reason: FireReason,
    /// For a rerun: the stored record and its version.
    pub(super) again: Option<(RunRecord, i32)>,
    /// A submission's run: its id and payload.
    pub(super) submission: Option<SubmissionInput>,
    /// A chained run's first claim: the parents' runs it follows, whose marks it takes.
    pub(super) parents: Vec<ParentRun>,
}

impl Item {
    /// Whether this is a run of submission `id`.
    pub(super) fn is_submission(&self, id: &str) -> bool {
        self.submission
            .as_ref()
            .is_some_and(|s| s.id.as_str() == id)
    }

    /// A scheduled tick of its own, fired for `reason`.
    pub(super) fn tick(tick: DateTime<Utc>, reason: FireReason) -> Self {
        Self {
            tick,
            reason,
            again: None,
            submission: None,
            parents: Vec::new(),
        }
    }
}

/// When a started run's record says `running` ([`RunAction::Start`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StartWrite {
    /// Its claim said so already, so the start writes nothing: a tick's, whose record stored
    /// `running` proves nothing a `claimed` one does not (the next owner resolves both alike),
    /// and a submission's claimed at its due instant, whose claim is then the write that fences
    /// its start (`claims::claimed_at_its_instant`).
    InClaim,
    /// Written beside the start, a round trip later: a tick claimed before it waited for its
    /// job's limits, so that the record told waiting from running.
    Beside,
    /// Written before the process starts, which starts only if the write succeeds: a
    /// submission's run claimed ahead, whose record still `claimed` proves it never ran, so the
    /// next owner may take it over.
    Before,
    /// Not written: a submission's run whose HTTP target is idempotent (`resend =
    /// "idempotent"`). Its record says `claimed` until its final record, so the next owner
    /// sends a run whose owner died meanwhile again, with the same `Idempotency-Key`.
    Never,
}
