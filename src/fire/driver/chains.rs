//! The fire driver's I/O for chains (`after`): reading a chained job's marks, removing marks
//! nobody will take, submitting a submitted parent's child, and the watch that reports new
//! marks.
//!
//! Owns: turning the machine's chain actions into `ledger::chains` reads, submits and deletes,
//! and the persistent recursive watch on `after/` for the current session.
//! Must not: decide what a mark becomes (the machine does).

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::session::{Session, bounded};
use crate::delayed::submission::{Submission, SubmissionId};
use crate::fire::machine::{ChainsInput, Input};
use crate::ids::{FencingToken, JobName};
use crate::layout::{LedgerPaths, MarkName};
use crate::ledger::ClaimError;
use crate::ledger::Ledger;
use crate::ledger::chains::ChildSubmitted;
use crate::ledger::watch::{Change, Follow, NodeChange};
use crate::report::error_chain;

/// Reads the marks left for `job` (answered as [`ChainsInput::MarksListed`]).
pub(super) fn list(s: &Session, paths: &LedgerPaths, job: JobName) -> Option<Input> {
    let Some(client) = s.client.clone() else {
        let result = Err(Session::no_session());
        return Some(Input::Chains(ChainsInput::MarksListed { job, result }));
    };
    let (paths, answers) = (paths.clone(), s.answers.clone());
    s.tasks.spawn(async move {
        let dir = paths.after_of(&job);
        let result = match bounded(
            &dir,
            crate::ledger::chains::marks_for(&client, &paths, &job),
        )
        .await
        {
            Some(Ok(marks)) => Ok(marks),
            Some(Err(err)) => Err(error_chain(&err)),
            None => Err("zookeeper did not answer in time".to_owned()),
        };
        let _ = answers.send(Input::Chains(ChainsInput::MarksListed { job, result }));
    });
    None
}

/// Removes the marks `marks` left for `job`: nobody will take them.
pub(super) fn drop_marks(s: &Session, paths: &LedgerPaths, job: &JobName, marks: &[MarkName]) {
    let Some(client) = s.client.clone() else {
        return;
    };
    let marks: Vec<String> = marks.iter().map(|mark| paths.mark(job, mark)).collect();
    s.tasks.spawn(async move {
        for mark in marks {
            match bounded(&mark, crate::ledger::chains::drop_mark(&client, &mark)).await {
                Some(Ok(_)) => tracing::info!(path = mark, "chain mark removed: nobody takes it"),
                Some(Err(err)) => {
                    tracing::debug!(path = mark, error = %err, "chain mark not removed")
                }
                None => {}
            }
        }
    });
}

/// The child a submitted parent's mark makes: its job, the mark, and the id it is submitted
/// under.
pub(super) struct Child {
    pub job: JobName,
    pub mark: MarkName,
    pub id: SubmissionId,
}

/// Submits `child`'s `submission`, taking its mark (answered as [`ChainsInput::ChildSubmitted`]).
pub(super) fn submit_child(
    s: &Session,
    paths: &LedgerPaths,
    child: Child,
    submission: Box<Submission>,
    fence: FencingToken,
) -> Option<Input> {
    let Child { job, mark, id } = child;
    let Some(client) = s.client.clone() else {
        let result = Err(Session::no_session());
        return Some(Input::Chains(ChainsInput::ChildSubmitted {
            job,
            mark,
            submission,
            result,
        }));
    };
    let (paths, answers) = (paths.clone(), s.answers.clone());
    s.tasks.spawn(async move {
        let path = paths.mark(&job, &mark);
        let submit =
            crate::ledger::chains::submit_child(&client, &paths, &job, &mark, id, &submission, fence);
        let result = match bounded(&path, submit).await {
            Some(Ok(ChildSubmitted::Made(id))) => Ok(Some(id)),
            Some(Ok(ChildSubmitted::MarkGone)) => Ok(None),
            Some(Err(ClaimError::NotOwner { token })) => {
                tracing::info!(path, %token, "chained submission not made: the lock has a newer owner");
                Ok(None)
            }
            Some(Err(err)) => Err(error_chain(&err)),
            None => Err("zookeeper did not answer in time".to_owned()),
        };
        let _ = answers.send(Input::Chains(ChainsInput::ChildSubmitted {
            job,
            mark,
            submission,
            result,
        }));
    });
    None
}

/// Watches `after/` (persistent, recursive) for the life of `client`'s session and reports each
/// new mark's child; its beginning, and its beginning again after a disconnection, report every
/// child ([`ChainsInput::MarksChanged`] with `None`). Ends when `stop` is cancelled or the session
/// ends.
pub(super) fn watch(
    client: Ledger,
    paths: LedgerPaths,
    answers: mpsc::UnboundedSender<Input>,
    stop: CancellationToken,
) {
    tokio::spawn(async move {
        let added = Follow::add_after_creating(&client, &paths.after, &paths.after, &stop);
        let Some(watcher) = added.await else {
            return;
        };
        let mut watcher = match watcher {
            Ok(watcher) => watcher,
            Err(err) => {
                tracing::warn!(error = %error_chain(&err), "cannot watch for chain marks; chained jobs run only when this node gains the lock, reloads or resumes a job");
                return;
            }
        };
        let prefix = format!("{}/", paths.after);
        loop {
            let job = match watcher.changed_until(&stop).await {
                None => return,
                Some(Change::ReadAll) => None,
                Some(Change::Disconnected) => continue,
                Some(Change::Node { path, kind }) => {
                    if kind != NodeChange::Created {
                        continue;
                    }
                    // `<child>/<mark>`; a child's own node says nothing yet.
                    let Some((child, _mark)) = path
                        .strip_prefix(&prefix)
                        .and_then(|rest| rest.split_once('/'))
                    else {
                        continue;
                    };
                    Some(JobName::new(child.to_owned()))
                }
            };
            if answers
                .send(Input::Chains(ChainsInput::MarksChanged(job)))
                .is_err()
            {
                return;
            }
        }
    });
}
