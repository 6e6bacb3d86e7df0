//! Random interleavings of time, connections, acquisitions, mark listings, child submits (made,
//! failed, applied with their reply lost, refused by a newer epoch), due-bucket scans, the due
//! watch's reports, claims, run ends and record writes, for a machine whose chained job follows
//! submitted parents (issue 36), over a small model of what ZooKeeper holds (the marks, the
//! child requests and their pending markers, the claimed records). Checked after every step:
//! a submit goes out only while this node owns the lock, under its token, one at a time per
//! mark, carrying the parent's payload, instant and run; a child's run starts only from a
//! granted claim, once, with the parent's payload, instant and run. And once an owner is left
//! in peace, every mark has become exactly one child submission, and each has left pending.

use std::collections::{BTreeMap, BTreeSet};

use proptest::prelude::*;

use super::*;
use crate::delayed::submission::{DueBucket, Submission, SubmissionId};
use crate::layout::MarkName;
use crate::run::{ChainMark, FoundMark};

#[derive(Debug, Clone)]
enum Step {
    Advance(u16),
    /// 0: owner, 1: follower, 2: disconnected, 3: a new acquisition.
    Lock(u8),
    /// Answer one outstanding request of a kind, which one, and how.
    Answer(u8, u8, u8),
    /// The watch on `after/` reports a change.
    MarksChanged,
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        3 => (0u16..1500).prop_map(Step::Advance),
        1 => (2000u16..8000).prop_map(Step::Advance),
        2 => (0u8..4).prop_map(Step::Lock),
        10 => (any::<u8>(), any::<u8>(), any::<u8>()).prop_map(|(k, i, h)| Step::Answer(k, i, h)),
        1 => Just(Step::MarksChanged),
    ]
}

fn sim_jobs() -> String {
    format!(
        "{}[[job]]\nname = \"notify\"\nshell = \"cat\"\nafter = [\"order\"]\nstarting_deadline = \"10s\"\n",
        job("order", "0 0 0 1 1 *", "")
    )
}

fn notify() -> JobName {
    JobName::new("notify")
}

/// The marks `count` submitted runs of `order` left for `notify`, each due a second apart.
fn initial_marks(count: usize) -> BTreeMap<MarkName, FoundMark> {
    (0..count)
        .map(|n| {
            let due = t(1000 * (n as i64 + 1)).timestamp_millis();
            let id = SubmissionId::parse(&format!("o{n}")).expect("valid");
            let name = MarkName {
                submission: Some(id.clone()),
                ..MarkName::of_tick(due, &JobName::new("order"))
            };
            let mark = ChainMark {
                payload: format!("payload {n}").into_bytes(),
                ..ChainMark::of(&format!("order-{due}-{id}"), RunStatus::Succeeded)
            };
            (name.clone(), FoundMark { name, mark })
        })
        .collect()
}

/// A child submit out: the mark, the id, the submission, the token it is fenced by.
type Submit = (MarkName, SubmissionId, Submission, FencingToken);

#[derive(Default)]
struct World {
    now: i64,
    /// The epoch's version: a submit or claim under another token is refused.
    epoch: i32,
    status: LockStatus,
    watching: bool,
    // What ZooKeeper holds.
    marks: BTreeMap<MarkName, FoundMark>,
    requests: BTreeMap<SubmissionId, Submission>,
    pending: BTreeSet<SubmissionId>,
    records: BTreeSet<SubmissionId>,
    /// Each mark's child, once made; and the marks as they were at the start.
    made: BTreeMap<MarkName, SubmissionId>,
    initial: BTreeMap<MarkName, FoundMark>,
    // Requests out.
    lists: Vec<JobName>,
    submits: Vec<Submit>,
    scans: Vec<(u64, Option<DueBucket>, DueBucket)>,
    reads: Vec<SubmissionId>,
    reported: Vec<SubmissionId>,
    claims: Vec<TickClaim>,
    listings: Vec<JobName>,
    running: BTreeMap<String, Claim>,
    writes: Vec<Claim>,
    started: BTreeSet<SubmissionId>,
    granted: BTreeSet<String>,
}

impl World {
    fn feed(&mut self, m: &mut FireMachine, input: Input) -> Result<(), TestCaseError> {
        for action in m.handle(input, t(self.now)) {
            self.perform(action)?;
        }
        Ok(())
    }

    /// The mark whose child `id` is.
    fn parent_of(&self, id: &SubmissionId) -> Option<&FoundMark> {
        let name = self.made.iter().find(|(_, child)| *child == id)?.0;
        self.initial.get(name)
    }

    fn perform(&mut self, action: Action) -> Result<(), TestCaseError> {
        match action {
            Action::Chains(ChainsAction::ListMarks(job)) => {
                prop_assert_eq!(&job, &notify());
                self.lists.push(job);
            }
            Action::Chains(ChainsAction::SubmitChild {
                job,
                mark,
                id,
                submission,
                token,
            }) => {
                prop_assert!(self.status.may_fire, "a submit only while owning");
                prop_assert_eq!(Some(token), self.status.token, "under this node's token");
                prop_assert_eq!(&job, &notify());
                prop_assert!(
                    !self.submits.iter().any(|(out, ..)| *out == mark),
                    "one submit out per mark: {mark:?}"
                );
                let Some(found) = self.initial.get(&mark) else {
                    return Err(TestCaseError::fail(format!("no such mark: {mark:?}")));
                };
                let parent_id = mark.submission.clone().expect("a submitted parent's");
                prop_assert_eq!(&id, &SubmissionId::of_child(&parent_id, &notify()));
                prop_assert_eq!(&submission.payload, &found.mark.payload);
                prop_assert_eq!(submission.due_unix_ms, mark.scheduled_unix_ms);
                let after = submission.after.as_ref().expect("names its parent");
                prop_assert_eq!(&after.run_id, &found.mark.run_id);
                self.submits.push((mark, id, *submission, token));
            }
            Action::Chains(ChainsAction::DropMarks { marks, .. }) => {
                prop_assert!(false, "every mark here makes a run: {marks:?}");
            }
            Action::Delayed(DelayedAction::Scan {
                generation,
                after,
                through,
                ..
            }) => self.scans.push((generation, after, through)),
            // A read after a pause is a read whose answer comes later: answers come in any order.
            Action::Delayed(
                DelayedAction::ReadSubmission { id }
                | DelayedAction::ReadSubmissionAfter { id, .. },
            ) => self.reads.push(id),
            Action::Claims(ClaimAction::Claim(claim)) => {
                let id = claim.record.submission_id.clone();
                let Some(id) = id else {
                    return Err(TestCaseError::fail(format!("only submissions: {claim:?}")));
                };
                // A run's claim; a `missed` record's may go again after a new acquisition's
                // scan (ZooKeeper refuses all but one: the pending marker goes with it).
                let run = |claim: &TickClaim| claim.record.status != RunStatus::Missed;
                prop_assert!(
                    !run(&claim)
                        || !self.claims.iter().any(|out| {
                            run(out) && out.record.submission_id.as_ref() == Some(&id)
                        }),
                    "one run's claim out per submission: {id}"
                );
                let parent = self.parent_of(&id).cloned();
                let Some(parent) = parent else {
                    return Err(TestCaseError::fail(format!("a claim of no child: {id}")));
                };
                prop_assert_eq!(
                    claim.record.scheduled_unix_ms,
                    parent.name.scheduled_unix_ms
                );
                let parents: Vec<&str> = claim
                    .record
                    .parents
                    .iter()
                    .map(|p| p.run_id.as_str())
                    .collect();
                prop_assert_eq!(parents, [parent.mark.run_id.as_str()], "{:?}", claim);
                self.claims.push(claim);
            }
            Action::Runs(RunAction::Start { claim, context, .. }) => {
                prop_assert!(
                    self.granted.remove(&claim.record.run_id),
                    "a start only from a granted claim: {claim:?}"
                );
                let id = claim.record.submission_id.clone().expect("a submission");
                prop_assert!(self.started.insert(id.clone()), "started twice: {id}");
                let parent = self.parent_of(&id).cloned().expect("a child");
                let input = context.submission.clone().expect("its submission");
                prop_assert_eq!(&**input.payload, parent.mark.payload.as_slice());
                prop_assert_eq!(
                    context.scheduled_at.timestamp_millis(),
                    parent.name.scheduled_unix_ms
                );
                prop_assert_eq!(context.parent_runs, vec![parent.mark.run_id.clone()]);
                self.running.insert(claim.record.run_id.clone(), claim);
            }
            Action::Claims(ClaimAction::WriteRecord(claim)) => self.writes.push(claim),
            Action::CatchUp(CatchUpAction::ListRecords(job)) => self.listings.push(job),
            _ => {}
        }
        Ok(())
    }

    fn lock(&mut self, m: &mut FireMachine, kind: u8) -> Result<(), TestCaseError> {
        let status = lock_step(kind, &mut self.epoch);
        self.status = status;
        self.feed(m, Input::Lock(LockInput::Changed(status)))
    }

    /// The submit as ZooKeeper applies it: under the epoch, once per mark.
    fn apply_submit(&mut self, (mark, id, submission, token): &Submit) -> Option<SubmissionId> {
        if token.0 != self.epoch || self.marks.remove(mark).is_none() {
            return None;
        }
        assert!(
            self.made.insert(mark.clone(), id.clone()).is_none(),
            "a mark made twice"
        );
        self.requests.insert(id.clone(), submission.clone());
        self.pending.insert(id.clone());
        if self.watching {
            self.reported.push(id.clone());
        }
        Some(id.clone())
    }

    /// Answers one outstanding request of kind `kind`: the `i`th, as `how` says (0 and 1:
    /// as it should, 2: failed, 3: applied with its reply lost, where that means anything).
    fn answer(
        &mut self,
        m: &mut FireMachine,
        kind: u8,
        i: u8,
        how: u8,
    ) -> Result<(), TestCaseError> {
        let pick = |len: usize| usize::from(i) % len.max(1);
        let failed = how % 4 == 2;
        match kind % 9 {
            0 if !self.lists.is_empty() => {
                let job = self.lists.remove(pick(self.lists.len()));
                let result = if failed {
                    Err("connection loss".to_owned())
                } else {
                    Ok(self.marks.values().cloned().collect())
                };
                self.feed(m, Input::Chains(ChainsInput::MarksListed { job, result }))
            }
            1 if !self.submits.is_empty() => {
                let submit = self.submits.remove(pick(self.submits.len()));
                let result = match how % 4 {
                    2 => Err("connection loss".to_owned()),
                    3 => {
                        self.apply_submit(&submit);
                        Err("connection loss".to_owned())
                    }
                    _ => Ok(self.apply_submit(&submit)),
                };
                let (mark, _, submission, _) = submit;
                let input = Input::Chains(ChainsInput::ChildSubmitted {
                    job: notify(),
                    mark,
                    submission: Box::new(submission),
                    result,
                });
                self.feed(m, input)
            }
            2 if !self.scans.is_empty() => {
                let (generation, after, through) = self.scans.remove(pick(self.scans.len()));
                let result = if failed {
                    Err("connection loss".to_owned())
                } else {
                    let pending = self
                        .pending
                        .iter()
                        .filter_map(|id| Some((id.clone(), self.requests.get(id)?.clone())));
                    Ok(scan_of(pending, after, through))
                };
                self.feed(
                    m,
                    Input::Delayed(DelayedInput::Scanned { generation, result }),
                )
            }
            3 if !self.reads.is_empty() => {
                let id = self.reads.remove(pick(self.reads.len()));
                let result = Ok(self.requests.get(&id).cloned());
                self.feed(m, Input::Delayed(DelayedInput::Read { id, result }))
            }
            4 if !self.reported.is_empty() => {
                let id = self.reported.remove(pick(self.reported.len()));
                let due = self.requests.get(&id).map_or(0, |s| s.due_unix_ms);
                let input = Input::Delayed(DelayedInput::Created {
                    bucket: DueBucket::of(due),
                    id,
                    job: Some(notify()),
                });
                self.feed(m, input)
            }
            5 if !self.claims.is_empty() => {
                let claim = self.claims.remove(pick(self.claims.len()));
                let id = claim.record.submission_id.clone().expect("a submission");
                let result = if failed {
                    Err(ClaimRefused::Failed("connection loss".to_owned()))
                } else if claim.record.fencing_token.0 != self.epoch {
                    Err(ClaimRefused::NotOwner)
                } else if self.pending.remove(&id) {
                    self.records.insert(id);
                    self.granted.insert(claim.record.run_id.clone());
                    Ok(Box::new(granted(&claim)))
                } else {
                    Err(ClaimRefused::AlreadyClaimed)
                };
                self.feed(
                    m,
                    Input::Claims(ClaimInput::Done {
                        id: claim.id,
                        result,
                    }),
                )
            }
            6 if !self.running.is_empty() => {
                let run_id = self.running.keys().nth(pick(self.running.len())).cloned();
                let claim = self.running.remove(&run_id.unwrap_or_default());
                let Some(claim) = claim else { return Ok(()) };
                self.feed(
                    m,
                    ended(&claim, RunOutcome::Exited { code: 0 }, t(self.now)),
                )
            }
            7 if !self.writes.is_empty() => {
                let claim = self.writes.remove(pick(self.writes.len()));
                let run_id = claim.record.run_id.clone();
                let write = RecordWrite::Written(claim.version + 1);
                self.feed(
                    m,
                    Input::Claims(ClaimInput::RecordWritten { run_id, write }),
                )
            }
            8 if !self.listings.is_empty() => {
                let job = self.listings.remove(pick(self.listings.len()));
                let result = Ok(JobRecords::default());
                self.feed(m, Input::CatchUp(CatchUpInput::Listed { job, result }))
            }
            _ => Ok(()),
        }
    }

    fn idle(&self) -> bool {
        self.lists.is_empty()
            && self.submits.is_empty()
            && self.scans.is_empty()
            && self.reads.is_empty()
            && self.reported.is_empty()
            && self.claims.is_empty()
            && self.listings.is_empty()
            && self.running.is_empty()
            && self.writes.is_empty()
    }
}

fn run_steps(marks: usize, watching: bool, steps: &[Step]) -> Result<(), TestCaseError> {
    let mut m = machine(&sim_jobs());
    let initial = initial_marks(marks);
    let mut w = World {
        now: 60_000,
        epoch: 7,
        watching,
        marks: initial.clone(),
        initial,
        ..World::default()
    };
    w.feed(&mut m, Input::Delayed(DelayedInput::DueWatch { watching }))?;
    for step in steps {
        match step.clone() {
            Step::Advance(ms) => {
                w.now += i64::from(ms);
                w.feed(&mut m, Input::Tick)?;
            }
            Step::Lock(kind) => w.lock(&mut m, kind)?,
            Step::Answer(kind, i, how) => w.answer(&mut m, kind, i, how)?,
            Step::MarksChanged => w.feed(&mut m, Input::Chains(ChainsInput::MarksChanged(None)))?,
        }
    }
    // Left in peace: a new acquisition, every request answered as it should, time passing.
    w.lock(&mut m, 3)?;
    for round in 0..400u16 {
        if w.idle() {
            if w.marks.is_empty() && w.pending.is_empty() {
                break;
            }
            w.now += 1_000;
            w.feed(&mut m, Input::Tick)?;
            continue;
        }
        let kind = (round % 9) as u8;
        w.answer(&mut m, kind, 0, 0)?;
    }
    prop_assert!(
        w.marks.is_empty(),
        "every mark is taken: {:?}",
        w.marks.keys()
    );
    prop_assert_eq!(
        w.made.keys().collect::<Vec<_>>(),
        w.initial.keys().collect::<Vec<_>>(),
        "each mark made one child submission"
    );
    prop_assert!(
        w.pending.is_empty(),
        "every child submission left pending: {:?}",
        w.pending
    );
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn a_submitted_parents_mark_becomes_one_child_submission_run_with_its_payload_and_none_is_lost(
        marks in 1usize..4,
        watching in any::<bool>(),
        steps in proptest::collection::vec(step(), 1..120)
    ) {
        run_steps(marks, watching, &steps)?;
    }
}
