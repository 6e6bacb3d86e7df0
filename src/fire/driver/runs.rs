//! The fire driver's runs: processes prepared ahead of their instant, runs started (a process
//! through the runner, or a delivery for a URL target), and their cancel handles.
//!
//! Owns: the runs alive here by run id, the prepared processes waiting for their go, and a
//! run's record written `running` beside its start or before it, when its claim did not say so
//! already ([`StartWrite`]); each run's
//! end back to the machine as its input.
//! Must not: decide whether, when or why a run starts or stops (the machine does).

use std::collections::HashMap;
use std::sync::Arc;

use chrono::{DateTime, Utc};
use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;

use crate::ensemble_clock::{Deadline, EnsembleClock};

use super::session::{Session, bounded};
use crate::fire::machine::{ClaimInput, Input, StartWrite};
use crate::ledger::{self, group::GroupCommit};
use crate::output_store::{OutputStore, RunOutput, Stream};
use crate::report::error_chain;
use crate::run;
use crate::runner;

/// A run recorded `running` before its start (a submission's) tries the write this many times,
/// each bounded by [`REQUEST_LIMIT`](super::session::REQUEST_LIMIT), before it is reported as not started.
const START_WRITE_ATTEMPTS: usize = 3;
/// At most this many runs wait prepared at once; more due together are spawned at their
/// instant. Each waiting launcher holds 1.25 MiB of its own (its relocated data, heap and stack:
/// smaps_rollup `Private_Dirty`) for up to `claim_ahead`, so 128 of them are 160 MiB at most;
/// 128 covers issue 10's burst of 100 jobs due on the same second.
const MAX_PREPARED: usize = 128;
/// The runs of this node, prepared or alive.
pub(super) struct Runs {
    /// Cancel handles of the runs alive here, by run id.
    alive: HashMap<String, CancellationToken>,
    /// The processes of runs prepared ahead of their instant, by run id (see `runner::prepare`),
    /// each with the deadline its launcher holds it to: its start waits for that same one.
    prepared: HashMap<String, (Deadline, oneshot::Receiver<runner::Prepared>)>,
    /// Where a run whose target is a URL goes instead of the runner.
    deliveries: Arc<crate::delivery::Deliveries>,
    /// Where each attempt's whole output is kept, if it is.
    outputs: Option<Arc<OutputStore>>,
    /// The clock the instants are in: a run waits for them on this node's own.
    clock: Arc<EnsembleClock>,
    /// Where each attempt's span goes, and the group's name.
    spans: Option<Spans>,
}

/// The exporter of spans, and the lock group whose runs these are.
type Spans = (Arc<crate::telemetry::Telemetry>, String);

impl Runs {
    pub fn new(
        (deliveries, outputs): (Arc<crate::delivery::Deliveries>, Option<Arc<OutputStore>>),
        clock: Arc<EnsembleClock>,
        spans: Option<Spans>,
    ) -> Self {
        Self {
            alive: HashMap::new(),
            prepared: HashMap::new(),
            deliveries,
            outputs,
            clock,
            spans,
        }
    }

    /// Starts a run's process ahead of its instant; its launcher holds the exec until then.
    pub fn prepare(
        &mut self,
        s: &Session,
        spec: Arc<run::JobSpec>,
        context: run::RunContext,
        not_before: DateTime<Utc>,
    ) {
        // A delivery has no process to start ahead: its client is made already.
        if matches!(spec.program, run::Program::Http(_)) {
            return;
        }
        if self.prepared.len() >= MAX_PREPARED {
            tracing::debug!(
                run_id = context.run_id,
                "not prepared: enough runs wait already"
            );
            return;
        }
        let (send, receive) = oneshot::channel();
        let not_before = self.clock.deadline(not_before);
        self.prepared
            .insert(context.run_id.clone(), (not_before, receive));
        s.tasks.spawn(async move {
            // Given up meanwhile (the receiver is gone): dropping it ends the process.
            let _ = send.send(runner::prepare(&spec, &context, Some(not_before)));
        });
    }

    /// A prepared run that will not start: dropping its process ends it.
    pub fn unprepare(&mut self, run_id: &str) {
        self.prepared.remove(run_id);
    }

    /// Starts a run (its prepared process given its go), its end answered as
    /// [`ClaimInput::RunEnded`] or [`ClaimInput::RunNotStarted`].
    pub fn start(
        &mut self,
        s: &Session,
        spec: Arc<run::JobSpec>,
        claim: run::Claim,
        context: run::RunContext,
        record: StartWrite,
        not_before: DateTime<Utc>,
    ) {
        let cancel = CancellationToken::new();
        self.alive
            .insert(claim.record.run_id.clone(), cancel.clone());
        // The deadline its launcher holds it to, if it was prepared: one reading of the clocks
        // for both holds, so that no step of the wall clock between the two makes them differ.
        let (not_before, prepared) = match self.prepared.remove(&claim.record.run_id) {
            None => (self.clock.deadline(not_before), Process::Spawn),
            Some((deadline, mut coming)) => (
                deadline,
                match coming.try_recv() {
                    Ok(mut prepared) => {
                        // Here, not in the run's task: the job starts before anything
                        // else spawned at this instant is polled. A run whose record must
                        // say `running` first gets its go after that write.
                        if record != StartWrite::Before {
                            prepared.go();
                        }
                        Process::Prepared(prepared)
                    }
                    Err(_) => Process::Coming(coming),
                },
            ),
        };
        let (group, answers) = (s.group.clone(), s.answers.clone());
        let run = Run {
            spec,
            context,
            cancel,
            prepared,
            not_before,
            deliveries: Arc::clone(&self.deliveries),
            outputs: self.outputs.clone(),
            clock: Arc::clone(&self.clock),
            spans: self.spans.clone(),
        };
        s.tasks.spawn(async move {
            let ended = match record {
                StartWrite::Before => run.after_its_record(claim, group).await,
                StartWrite::Beside => {
                    let (claim, report) = run.beside_its_record(claim, group).await;
                    Input::Claims(ClaimInput::RunEnded {
                        claim: Box::new(claim),
                        report,
                    })
                }
                StartWrite::InClaim | StartWrite::Never => Input::Claims(ClaimInput::RunEnded {
                    claim: Box::new(claim),
                    report: run.start().await,
                }),
            };
            let _ = answers.send(ended);
        });
    }

    pub fn cancel(&self, run_id: &str) {
        if let Some(cancel) = self.alive.get(run_id) {
            cancel.cancel();
        }
    }

    /// The run has ended (or never started).
    pub fn ended(&mut self, run_id: &str) {
        self.alive.remove(run_id);
    }
}

/// A run to start: the machine's [`RunAction::Start`], with its prepared process if one waits.
///
/// [`RunAction::Start`]: crate::fire::machine::RunAction::Start
struct Run {
    spec: Arc<run::JobSpec>,
    context: run::RunContext,
    cancel: CancellationToken,
    prepared: Process,
    /// When it starts, on the clock that carries the schedule.
    not_before: Deadline,
    /// Where a run whose target is a URL goes instead of the runner.
    deliveries: Arc<crate::delivery::Deliveries>,
    /// Where its whole output is kept, if it is.
    outputs: Option<Arc<OutputStore>>,
    /// Its record's times are the servers' when the node is corrected.
    clock: Arc<EnsembleClock>,
    spans: Option<Spans>,
}

/// A run's process, as far as the driver knows at its start.
enum Process {
    /// None was prepared: spawned at the start.
    Spawn,
    /// Prepared (and already given its go, unless it was gone).
    Prepared(runner::Prepared),
    /// Still being prepared: given its go as soon as it is.
    Coming(oneshot::Receiver<runner::Prepared>),
}

impl Run {
    /// The process starts at once; the record says `running` a round trip later.
    async fn beside_its_record(
        self,
        claim: run::Claim,
        group: Option<GroupCommit>,
    ) -> (run::Claim, run::RunReport) {
        let not_before = Some(self.not_before);
        let cancelled = self.cancel.clone();
        let record = async {
            let mut claim = claim;
            // After the job's exec, not beside it: ZooKeeper's servers answering this write
            // would compete with it for a CPU. A run cancelled first never says `running`.
            let held = runner::hold_unless_cancelled(not_before, &cancelled).await;
            if let Some(group) = group.filter(|_| held) {
                let path = claim.path.clone();
                let written = bounded(&path, group.update(&mut claim)).await;
                if let Some(Err(err)) = written {
                    tracing::warn!(status = ?claim.record.status, error = %error_chain(&err), "run record not updated");
                }
            }
            claim
        };
        let (report, claim) = tokio::join!(self.start(), record);
        (claim, report)
    }

    /// The record says `running` first, and the process starts only if that write succeeded (a
    /// submission's run: a record still `claimed` then proves it never ran). Answers
    /// [`ClaimInput::RunEnded`], or [`ClaimInput::RunNotStarted`] when the write did not go through or the
    /// run was cancelled before it did: a stop never waits on an ensemble that does not answer.
    async fn after_its_record(self, mut claim: run::Claim, group: Option<GroupCommit>) -> Input {
        let mut why = "no zookeeper session".to_owned();
        // Whether a write went out whose answer did not come: the record may say `running`.
        let mut maybe_written = false;
        if let Some(group) = &group {
            let path = claim.path.clone();
            // An ensemble that stalls past REQUEST_LIMIT must not turn a submission into a
            // failed run: the write is sent again (a lost reply of ours is recognised by
            // `update`), unless the run was cancelled meanwhile or someone else changed the
            // record.
            for attempt in 1..=START_WRITE_ATTEMPTS {
                maybe_written = true;
                let written = tokio::select! {
                    written = bounded(&path, group.update(&mut claim)) => written,
                    () = self.cancel.cancelled() => {
                        why = "cancelled before its record was marked running".to_owned();
                        break;
                    }
                };
                match written {
                    Some(Ok(())) => {
                        let report = self.start().await;
                        return Input::Claims(ClaimInput::RunEnded {
                            claim: Box::new(claim),
                            report,
                        });
                    }
                    Some(Err(err @ ledger::UpdateError::Conflict { .. })) => {
                        why = error_chain(&err);
                        maybe_written = false;
                        break;
                    }
                    Some(Err(err)) => why = error_chain(&err),
                    None => why = "no answer from zookeeper".to_owned(),
                }
                if attempt < START_WRITE_ATTEMPTS {
                    tracing::warn!(path, "run record not marked running yet; sending it again");
                }
            }
        }
        tracing::warn!(job = %claim.record.job, run_id = claim.record.run_id, error = why, "not starting: the run's record could not be marked running first");
        Input::Claims(ClaimInput::RunNotStarted {
            claim: Box::new(claim),
            why,
            maybe_written,
        })
    }

    async fn start(self) -> run::RunReport {
        let not_before = Some(self.not_before);
        let output = self
            .outputs
            .as_ref()
            .map_or_else(RunOutput::not_kept, |store| {
                store.begin(
                    self.spec.name.as_str(),
                    &self.context.run_id,
                    self.context.attempt,
                )
            });
        let mut report = if let run::Program::Http(target) = &self.spec.program {
            let report = self
                .deliveries
                .deliver(&self.spec, target, &self.context, self.cancel, not_before)
                .await;
            keep_response(output, &report).await;
            report
        } else {
            let prepared = match self.prepared {
                Process::Spawn => runner::Prepared::none(),
                Process::Prepared(prepared) => prepared,
                Process::Coming(coming) => {
                    coming.await.unwrap_or_else(|_| runner::Prepared::none())
                }
            };
            let prepared = (prepared, not_before);
            runner::run_keeping(&self.spec, &self.context, self.cancel, prepared, output).await
        };
        report.started_at = self.clock.to_ensemble(report.started_at);
        if let Some((telemetry, group)) = &self.spans {
            let fired = crate::telemetry::Fired { group };
            telemetry.attempt_ended(self.spec.name.as_str(), &self.context, &report, &fired);
        }
        report
    }
}

/// An HTTP target's output, as kept on this host: its answer's status and the start of its body
/// (a failure's: what the record keeps too), then how it ended.
async fn keep_response(mut output: RunOutput, report: &run::RunReport) {
    if let run::RunOutcome::Responded { status, body } = &report.outcome {
        output.note(&format!("HTTP {status}"));
        for line in body.lines() {
            output.line(Stream::Stdout, line);
        }
    }
    output.end_with(&report.outcome).await;
}
