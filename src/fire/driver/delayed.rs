//! The fire driver's I/O for delayed submissions: reading due buckets, reading one submission,
//! removing empty past buckets, and the watch that reports new pending submissions.
//!
//! Owns: turning the machine's delayed actions into `ledger::submissions` reads, and the
//! persistent recursive watch on `delayed/due` for the current session.
//! Must not: decide which buckets to read or what to claim (the machine does).

use chrono::{DateTime, Utc};
use tokio::sync::mpsc;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use zookeeper_client::{Client, EventType};

use super::session::{READ_WINDOW, Session, bounded};
use crate::delayed::submission::{DueBucket, Submission, SubmissionId};
use crate::fire::machine::{Input, Wanted};
use crate::layout::DelayedPaths;
use crate::ledger::submissions::{self, SubmissionError};
use crate::report::error_chain;
use crate::zk::watch::{Change, RecursiveWatch};

/// A scan this many seconds wide or less reads its buckets by name instead of listing days.
const SECONDS_BY_NAME: i64 = 60;

/// The pending submissions of every bucket after `after` (from the oldest when `None`) through
/// `through` that the machine `wanted`, read with their data; bucket reads one after another,
/// submission reads pipelined on the one session. Empty buckets that ended before
/// `clean_before` are removed on the way.
pub(super) async fn scan_buckets(
    client: &Client,
    paths: &DelayedPaths,
    wanted: &Wanted,
    after: Option<DueBucket>,
    through: DueBucket,
    clean_before: DateTime<Utc>,
) -> Result<Vec<(SubmissionId, Submission)>, String> {
    let text = |err: SubmissionError| error_chain(&err);
    let mut found = Vec::new();
    if let Some(after) =
        after.filter(|after| through.start_ms() - after.start_ms() <= SECONDS_BY_NAME * 1000)
    {
        // The usual read, a second or two ahead: each bucket by its name, with no listing of
        // the day (up to 86 400 names).
        let mut at = after.start_ms() + 1000;
        while at <= through.start_ms() {
            let markers = crate::ledger::due::pending_in(client, paths, DueBucket::of(at))
                .await
                .map_err(text)?;
            found.extend(read_all(client, paths, wanted_ids(wanted, markers)).await);
            at += 1000;
        }
        return Ok(found);
    }
    let first_day = after.map_or(i64::MIN, |after| after.day);
    for day in crate::ledger::due::days(client, paths)
        .await
        .map_err(text)?
    {
        if day < first_day || day > through.day {
            continue;
        }
        let buckets = crate::ledger::due::buckets(client, paths, day)
            .await
            .map_err(text)?;
        let in_range = buckets
            .into_iter()
            .filter(|b| after.is_none_or(|after| *b > after) && *b <= through);
        for bucket in in_range {
            let markers = crate::ledger::due::pending_in(client, paths, bucket)
                .await
                .map_err(text)?;
            if markers.is_empty() && bucket.start_ms() + 1000 < clean_before.timestamp_millis() {
                crate::ledger::due::remove_bucket(client, paths, bucket).await;
                continue;
            }
            found.extend(read_all(client, paths, wanted_ids(wanted, markers)).await);
        }
    }
    Ok(found)
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
    client: &Client,
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
    client: &Client,
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
/// each new pending marker; ends when `stop` is cancelled or the session ends. Events lost across
/// a reconnect are covered by the machine reading every bucket again when it can fire again.
pub(super) fn watch(
    client: Client,
    paths: DelayedPaths,
    acls: zookeeper_client::Acls<'static>,
    answers: mpsc::UnboundedSender<Input>,
    stop: CancellationToken,
) {
    tokio::spawn(async move {
        let added =
            RecursiveWatch::add_after_creating(&client, &paths.due, &paths.due, acls, &stop);
        let Some(watcher) = added.await else {
            return;
        };
        let mut watcher = match watcher {
            Ok(watcher) => watcher,
            Err(err) => {
                tracing::warn!(error = %error_chain(&err), "cannot watch for new submissions; they are noticed at the next bucket read");
                return;
            }
        };
        let prefix = format!("{}/", paths.due);
        loop {
            let change = tokio::select! {
                () = stop.cancelled() => return,
                change = watcher.changed() => change,
            };
            let (path, kind) = match change {
                None => return,
                // The machine reads every bucket when it may fire again, which a node that was
                // disconnected may not: nothing to read here.
                Some(Change::ReadAll | Change::Disconnected) => continue,
                Some(Change::Node { path, kind }) => (path, kind),
            };
            if kind != EventType::NodeCreated {
                continue;
            }
            let Some((bucket, id, job)) = path.strip_prefix(&prefix).and_then(parse_marker) else {
                continue;
            };
            if answers
                .send(Input::SubmissionCreated { bucket, id, job })
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

/// The buckets a scan reads: after the first (`None`: from the oldest) through the second,
/// removing the empty ones met that ended before the instant.
pub(super) type ScanRange = (Option<DueBucket>, DueBucket, DateTime<Utc>);

/// Reads the due buckets of `range` (answered as [`Input::DelayedScanned`]).
pub(super) fn scan(
    s: &Session,
    paths: &DelayedPaths,
    generation: u64,
    wanted: Wanted,
    (after, through, clean_before): ScanRange,
) -> Option<Input> {
    let Some(client) = s.client.clone() else {
        let result = Err(Session::no_session());
        return Some(Input::DelayedScanned {
            generation,
            through,
            result,
        });
    };
    let (paths, answers) = (paths.clone(), s.answers.clone());
    s.tasks.spawn(async move {
        let what = paths.due.clone();
        let began = std::time::Instant::now();
        let scanned = bounded(
            &what,
            scan_buckets(&client, &paths, &wanted, after, through, clean_before),
        );
        let result = scanned
            .await
            .unwrap_or_else(|| Err("no answer in time".into()));
        if let Ok(found) = &result {
            let ms = began.elapsed().as_millis();
            let from_oldest = after.is_none();
            tracing::debug!(found = found.len(), ms, from_oldest, "due buckets read");
        }
        let _ = answers.send(Input::DelayedScanned {
            generation,
            through,
            result,
        });
    });
    None
}

/// Reads one submission the watch reported (answered as [`Input::SubmissionRead`]).
pub(super) fn read_submission(
    s: &Session,
    paths: &DelayedPaths,
    id: SubmissionId,
) -> Option<Input> {
    let Some(client) = s.client.clone() else {
        let result = Err(Session::no_session());
        return Some(Input::SubmissionRead { id, result });
    };
    let (paths, answers) = (paths.clone(), s.answers.clone());
    s.tasks.spawn(async move {
        let read = bounded(id.as_str(), read_one(&client, &paths, &id));
        let result = read
            .await
            .unwrap_or_else(|| Err("no answer in time".into()));
        let _ = answers.send(Input::SubmissionRead { id, result });
    });
    None
}

/// Removes a past bucket if nothing is pending in it.
pub(super) fn remove_empty_bucket(s: &Session, paths: &DelayedPaths, bucket: DueBucket) {
    let Some(client) = s.client.clone() else {
        return;
    };
    let paths = paths.clone();
    s.tasks.spawn(async move {
        let what = paths.due_bucket(bucket);
        bounded(
            &what,
            crate::ledger::due::remove_bucket(&client, &paths, bucket),
        )
        .await;
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
