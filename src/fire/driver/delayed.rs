//! The fire driver's I/O for delayed submissions: reading due buckets, reading one submission,
//! removing empty past buckets, and the watch that reports new pending submissions.
//!
//! Owns: turning the machine's delayed actions into `ledger::submissions` reads, and the
//! persistent recursive watch on `delayed/due` for the current session.
//! Must not: decide which buckets to read or what to claim (the machine does).

use std::time::Duration;

use tokio::sync::mpsc;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

pub(super) use super::delayed_store::ScanRange;
use super::session::{READ_WINDOW, Session, bounded};
use crate::delayed::submission::{DueBucket, Submission, SubmissionId};
use crate::fire::machine::{DelayedInput, Input, Scanned, Wanted};
use crate::layout::DelayedPaths;
use crate::ledger::Ledger;
use crate::ledger::submissions::{self, SubmissionError};
use crate::ledger::watch::{Change, Follow, NodeChange};
use crate::report::error_chain;

/// A scan this many seconds wide or less reads its buckets by name instead of listing days.
const SECONDS_BY_NAME: i64 = 60;

/// The pending submissions of the buckets of `range` that the machine `wanted`, read with their
/// data; submission reads pipelined on the one session.
pub(super) async fn scan_buckets(
    client: &Ledger,
    paths: &DelayedPaths,
    wanted: &Wanted,
    range: ScanRange,
) -> Result<Scanned, String> {
    let text = |err: SubmissionError| error_chain(&err);
    let mut scanned = Scanned {
        found: Vec::new(),
        through: range.through,
        present: Vec::new(),
    };
    let by_name = range
        .after
        .filter(|after| range.through.start_ms() - after.start_ms() <= SECONDS_BY_NAME * 1000);
    if let Some(after) = by_name {
        // The usual read, a second or two ahead: each bucket by its name, with no listing of
        // the day (up to 86 400 names).
        read_by_name(client, paths, wanted, after, range, &mut scanned).await?;
        return Ok(scanned);
    }
    let first_day = range.after.map_or(i64::MIN, |after| after.day);
    for day in crate::ledger::due::days(client, paths)
        .await
        .map_err(text)?
    {
        if day < first_day || day > range.through.day {
            continue;
        }
        let buckets = crate::ledger::due::buckets(client, paths, day)
            .await
            .map_err(text)?;
        if buckets.is_empty() && day < range.through.day {
            crate::ledger::due::remove_day(client, paths, day).await;
            continue;
        }
        let in_range = buckets
            .into_iter()
            .filter(|b| range.after.is_none_or(|after| *b > after) && *b <= range.through);
        for bucket in in_range {
            let markers = crate::ledger::due::pending_in(client, paths, bucket)
                .await
                .map_err(text)?;
            let ended = bucket.start_ms() + 1000 < range.clean_before.timestamp_millis();
            if markers.is_empty() && ended {
                crate::ledger::due::remove_bucket(client, paths, bucket).await;
                continue;
            }
            scanned.present.push(bucket);
            let ids = wanted_ids(wanted, markers);
            scanned.found.extend(read_all(client, paths, ids).await);
        }
    }
    read_by_name(client, paths, wanted, range.through, range, &mut scanned).await?;
    Ok(scanned)
}

/// Reads the buckets after `after` by name, their listings sent at once: through
/// `range.through` all of them, then on to `range.ahead_to` until one holds a wanted
/// submission; `scanned.through` says how far it read.
async fn read_by_name(
    client: &Ledger,
    paths: &DelayedPaths,
    wanted: &Wanted,
    after: DueBucket,
    range: ScanRange,
    scanned: &mut Scanned,
) -> Result<(), String> {
    let text = |err: SubmissionError| error_chain(&err);
    let buckets: Vec<DueBucket> = (after.start_ms() + 1000..=range.ahead_to.start_ms())
        .step_by(1000)
        .map(DueBucket::of)
        .collect();
    let listings = crate::ledger::due::shards_of_each(client, paths, &buckets)
        .await
        .map_err(text)?;
    for (bucket, shards) in buckets.into_iter().zip(listings) {
        scanned.through = scanned.through.max(bucket);
        let Some(shards) = shards else {
            continue;
        };
        scanned.present.push(bucket);
        let markers = crate::ledger::due::pending_in_shards(client, paths, bucket, shards)
            .await
            .map_err(text)?;
        let ids = wanted_ids(wanted, markers);
        let holds_some = !ids.is_empty();
        scanned.found.extend(read_all(client, paths, ids).await);
        if holds_some && bucket > range.through {
            break;
        }
    }
    Ok(())
}

/// The ids of the markers the machine reads: other groups' named markers are not read at all.
fn wanted_ids(
    wanted: &Wanted,
    markers: Vec<(SubmissionId, Option<crate::ids::JobName>)>,
) -> Vec<SubmissionId> {
    markers
        .into_iter()
        .filter(|(_, job)| wanted.reads(job.as_ref()))
        .map(|(id, _)| id)
        .collect()
}

/// Reads `ids`' submissions, a window of requests out at once (a bucket can hold hundreds of
/// thousands: all at once would queue the lock's liveness checks behind them on the one
/// session); unreadable ones are logged and skipped.
async fn read_all(
    client: &Ledger,
    paths: &DelayedPaths,
    ids: Vec<SubmissionId>,
) -> Vec<(SubmissionId, Submission)> {
    let mut found = Vec::new();
    for window in ids.chunks(READ_WINDOW) {
        let mut reads = JoinSet::new();
        for id in window.iter().cloned() {
            let (client, paths) = (client.clone(), paths.clone());
            reads.spawn(async move {
                let read = submissions::read(&client, &paths, &id).await;
                (id, read)
            });
        }
        while let Some(joined) = reads.join_next().await {
            match joined {
                Ok((id, Ok(Some((submission, _))))) => found.push((id, submission)),
                Ok((_, Ok(None))) => {} // claimed or cancelled meanwhile
                Ok((id, Err(err))) => {
                    tracing::warn!(id = %id, error = %error_chain(&err), "pending submission unreadable; skipped")
                }
                Err(err) => tracing::warn!(error = %err, "submission read task failed"),
            }
        }
    }
    found
}

/// One submission the watch reported.
pub(super) async fn read_one(
    client: &Ledger,
    paths: &DelayedPaths,
    id: &SubmissionId,
) -> Result<Option<Submission>, String> {
    match submissions::read(client, paths, id).await {
        Ok(read) => Ok(read.map(|(submission, _)| submission)),
        // Foreign data: logged with its path, and not a reason to read every bucket again.
        Err(err @ SubmissionError::Corrupt { .. }) => {
            tracing::warn!(error = %error_chain(&err), "new submission unreadable; skipped");
            Ok(None)
        }
        Err(err) => Err(error_chain(&err)),
    }
}

/// Watches `delayed/due` (persistent, recursive) for the life of `client`'s session and reports
/// each new pending marker; ends when `stop` is cancelled or the session ends. It reports its
/// beginning, its beginning again after a disconnection, and a failure to set it
/// ([`DelayedInput::DueWatch`]): what was submitted meanwhile is found by reading every bucket again.
pub(super) fn watch(
    client: Ledger,
    paths: DelayedPaths,
    answers: mpsc::UnboundedSender<Input>,
    stop: CancellationToken,
) {
    tokio::spawn(async move {
        let added = Follow::add_after_creating(&client, &paths.due, &paths.due, &stop);
        let Some(watcher) = added.await else {
            return;
        };
        let mut watcher = match watcher {
            Ok(watcher) => watcher,
            Err(err) => {
                tracing::warn!(error = %error_chain(&err), "cannot watch for new submissions; the due buckets are read a second at a time this session");
                let _ = answers.send(Input::Delayed(DelayedInput::DueWatch { watching: false }));
                return;
            }
        };
        let prefix = format!("{}/", paths.due);
        loop {
            let (path, kind) = match watcher.changed_until(&stop).await {
                None => return,
                // What was submitted while no watch was set is found by reading every bucket
                // again (if this node fires).
                Some(Change::ReadAll) => {
                    if answers
                        .send(Input::Delayed(DelayedInput::DueWatch { watching: true }))
                        .is_err()
                    {
                        return;
                    }
                    continue;
                }
                Some(Change::Disconnected) => continue,
                Some(Change::Node { path, kind }) => (path, kind),
            };
            if kind != NodeChange::Created {
                continue;
            }
            let Some((bucket, id, job)) = path.strip_prefix(&prefix).and_then(parse_marker) else {
                continue;
            };
            if answers
                .send(Input::Delayed(DelayedInput::Created { bucket, id, job }))
                .is_err()
            {
                return;
            }
        }
    });
}

/// `<day>/<second>/<shard>/<id>[~<job>]` below `due/`: a pending marker; anything else is a
/// parent.
fn parse_marker(relative: &str) -> Option<(DueBucket, SubmissionId, Option<crate::ids::JobName>)> {
    let mut parts = relative.split('/');
    let (day, second, _shard, name) = (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
    if parts.next().is_some() {
        return None;
    }
    let (id, job) = crate::layout::parse_marker_name(name)?;
    Some((DueBucket::parse(day, second)?, id, job))
}

/// Reads the due buckets of `range` (answered as [`DelayedInput::Scanned`]).
pub(super) fn scan(
    s: &Session,
    paths: &DelayedPaths,
    generation: u64,
    wanted: Wanted,
    range: ScanRange,
) -> Option<Input> {
    let Some(client) = s.client.clone() else {
        let result = Err(Session::no_session());
        return Some(Input::Delayed(DelayedInput::Scanned { generation, result }));
    };
    let (paths, answers) = (paths.clone(), s.answers.clone());
    s.tasks.spawn(async move {
        let what = paths.due.clone();
        let began = std::time::Instant::now();
        let scanned = async {
            if client.delayed_in_postgres() {
                super::delayed_store::scan(&client, &wanted, range).await
            } else {
                scan_buckets(&client, &paths, &wanted, range).await
            }
        };
        let scanned = bounded(&what, scanned);
        let result = scanned
            .await
            .unwrap_or_else(|| Err("no answer in time".into()));
        if let Ok(scanned) = &result {
            let ms = began.elapsed().as_millis();
            let from_oldest = range.after.is_none();
            let (found, through) = (scanned.found.len(), scanned.through);
            tracing::debug!(found, ?through, ms, from_oldest, "due buckets read");
        }
        let _ = answers.send(Input::Delayed(DelayedInput::Scanned { generation, result }));
    });
    None
}

/// Reads one submission the watch reported, or one whose claim failed once `after` has passed
/// (answered as [`DelayedInput::Read`]).
pub(super) fn read_submission(
    s: &Session,
    paths: &DelayedPaths,
    id: SubmissionId,
    after: Duration,
) -> Option<Input> {
    let Some(client) = s.client.clone() else {
        let result = Err(Session::no_session());
        return Some(Input::Delayed(DelayedInput::Read { id, result }));
    };
    let (paths, answers) = (paths.clone(), s.answers.clone());
    s.tasks.spawn(async move {
        if !after.is_zero() {
            // Ends with the session, as the read would.
            tokio::time::sleep(after).await;
        }
        let read = bounded(id.as_str(), read_one(&client, &paths, &id));
        let result = read
            .await
            .unwrap_or_else(|| Err("no answer in time".into()));
        let _ = answers.send(Input::Delayed(DelayedInput::Read { id, result }));
    });
    None
}

/// A past node of the due queue, removed if nothing is left in it.
#[derive(Debug, Clone, Copy)]
pub(super) enum PastDue {
    Bucket(DueBucket),
    Day(i64),
}

/// Removes a past bucket or day in the background if nothing is left in it.
pub(super) fn remove_if_empty(s: &Session, paths: &DelayedPaths, past: PastDue) {
    // A store's ended days are its own retention's.
    let Some(client) = s.client.clone().filter(|c| !c.delayed_in_postgres()) else {
        return;
    };
    let paths = paths.clone();
    s.tasks.spawn(async move {
        match past {
            PastDue::Bucket(bucket) => {
                let remove = crate::ledger::due::remove_bucket(&client, &paths, bucket);
                bounded(&paths.due_bucket(bucket), remove).await;
            }
            PastDue::Day(day) => {
                let remove = crate::ledger::due::remove_day(&client, &paths, day);
                bounded(&paths.due_day(day), remove).await;
            }
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_markers_four_levels_down_are_submissions() {
        let (bucket, id, job) = parse_marker("19675/80000/de/order-42").expect("a marker");
        assert_eq!(
            (bucket.day, bucket.second, id.as_str(), job),
            (19_675, 80_000, "order-42", None)
        );
        let (_, id, job) = parse_marker("19675/80000/de/order-42~close~order").expect("named");
        assert_eq!(
            (id.as_str(), job.as_ref().map(crate::ids::JobName::as_str)),
            ("order-42", Some("close~order")),
            "split at the first ~: ids have none, job names may"
        );
        for parent in [
            "19675",
            "19675/80000",
            "19675/80000/de",
            "19675/80000/de/x/y",
            "x/1/de/a",
        ] {
            assert_eq!(parse_marker(parent), None, "{parent}");
        }
    }
}
