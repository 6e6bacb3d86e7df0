//! The fire driver's I/O for delayed submissions kept in PostgreSQL (`[delayed] store =
//! "postgres"`): the machine's scans read the store's due index, and the store's `NOTIFY` on
//! each submit stands for the watch on the due buckets. The machine is told in the same terms
//! as from ZooKeeper ([`DelayedInput`]), so it cannot tell the stores apart.
//!
//! Owns: turning a scan's range of due buckets into reads of the due index, and the listening
//! connection for the current session.
//! Must not: decide which submissions to read or claim (the machine does), or reach the store
//! but through `ledger::submissions`.

use std::collections::{BTreeSet, HashSet};
use std::time::Duration;

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::delayed::submission::DueBucket;
use crate::fire::machine::{DelayedInput, Input, Scanned, Wanted};
use crate::ids::JobName;
use crate::ledger::Ledger;
use crate::ledger::submissions::{self, JobsRead};
use crate::report::error_chain;

/// Rows a read of the due index returns at most; a fuller range is read page by page.
const PAGE: i64 = 10_000;

/// Without a listening connection (the store is away, or has no `LISTEN`: CockroachDB,
/// YugabyteDB), the machine reads the whole due index again this often, and listening is tried
/// again: a submission is found at most this late. The due index up to the machine's 2 s horizon
/// is what is due now, so each read is small.
const POLL_EVERY: Duration = Duration::from_secs(1);

/// The last millisecond of `bucket`, a second of due times.
fn end_ms(bucket: DueBucket) -> i64 {
    bucket.start_ms() + 999
}

/// The buckets (seconds of due times) a scan reads, in either store: after `after` (`None`:
/// from the oldest) through `through`, then on up to `ahead_to` until one holds a wanted
/// submission; in ZooKeeper, the empty ones met that ended before `clean_before` are removed
/// (the store's days go by its own retention).
#[derive(Debug, Clone, Copy)]
pub(super) struct ScanRange {
    pub after: Option<DueBucket>,
    pub through: DueBucket,
    pub ahead_to: DueBucket,
    pub clean_before: chrono::DateTime<chrono::Utc>,
}

/// The jobs whose rows the machine `wanted` reads: a group's owner reads its own jobs' rows
/// only, as it reads only their markers in ZooKeeper.
fn jobs_read(wanted: &Wanted) -> JobsRead {
    let names = |jobs: &HashSet<JobName>| jobs.iter().map(ToString::to_string).collect();
    match wanted {
        Wanted::Only(mine) => JobsRead::Only(names(mine)),
        Wanted::AllBut(others) => JobsRead::AllBut(names(others)),
    }
}

/// The pending submissions of `range` that the machine `wanted`, read from the store's due
/// index: every one due after `range.after` through `range.through`, then those of the first
/// second after it, up to `range.ahead_to`, that holds one.
pub(super) async fn scan(
    client: &Ledger,
    wanted: &Wanted,
    range: ScanRange,
) -> Result<Scanned, String> {
    let jobs = jobs_read(wanted);
    let mut scanned = Scanned {
        found: Vec::new(),
        through: range.through,
        present: Vec::new(),
    };
    let after = range.after.map_or(i64::MIN, end_ms);
    read_all(client, &jobs, after, end_ms(range.through), &mut scanned).await?;
    let next = submissions::pending_in_store(
        client,
        end_ms(range.through),
        end_ms(range.ahead_to),
        1,
        &jobs,
    )
    .await
    .map_err(|err| error_chain(&err))?;
    match next.first() {
        Some((_, submission)) => {
            let bucket = DueBucket::of(submission.due_unix_ms);
            read_all(
                client,
                &jobs,
                end_ms(range.through),
                end_ms(bucket),
                &mut scanned,
            )
            .await?;
            scanned.through = bucket;
        }
        None => scanned.through = range.ahead_to,
    }
    let present: BTreeSet<DueBucket> = scanned
        .found
        .iter()
        .map(|(_, submission)| DueBucket::of(submission.due_unix_ms))
        .collect();
    scanned.present = present.into_iter().collect();
    Ok(scanned)
}

/// Every pending submission of `jobs` due after `after_ms` through `through_ms`, a page at a
/// time.
async fn read_all(
    client: &Ledger,
    jobs: &JobsRead,
    mut after_ms: i64,
    through_ms: i64,
    scanned: &mut Scanned,
) -> Result<(), String> {
    loop {
        let mut page = submissions::pending_in_store(client, after_ms, through_ms, PAGE, jobs)
            .await
            .map_err(|err| error_chain(&err))?;
        let full = i64::try_from(page.len()).is_ok_and(|len| len >= PAGE);
        let last = page.last().map(|(_, submission)| submission.due_unix_ms);
        let Some(last) = last.filter(|_| full) else {
            scanned.found.append(&mut page);
            return Ok(());
        };
        // The page may end within a millisecond: its rows go with the next page, which starts
        // before it. A page of one millisecond alone goes whole.
        let before_last = page.iter().filter(|(_, s)| s.due_unix_ms < last).count();
        if before_last == 0 {
            tracing::warn!(
                due_unix_ms = last,
                rows = PAGE,
                "more submissions due in one millisecond than a page holds; the rest are read by the next scan from the oldest"
            );
            scanned.found.append(&mut page);
            after_ms = last;
        } else {
            page.truncate(before_last);
            scanned.found.append(&mut page);
            after_ms = last - 1;
        }
    }
}

/// Listens to the store for the life of `client`'s session, and tells the machine of each
/// submit as the watch on the due buckets does: a single submission by its id, a batch as a
/// watch begun again (every bucket is read again). Listening anew after the connection ended
/// is told the same way, since what was submitted meanwhile went unheard; while it cannot
/// listen, the machine is told every [`POLL_EVERY`] that no watch is set, which makes it read
/// the due index again from the oldest, no further ahead than its horizon.
pub(super) fn listen(
    client: Ledger,
    answers: mpsc::UnboundedSender<Input>,
    stop: CancellationToken,
) {
    tokio::spawn(async move {
        let tell = |input: DelayedInput| answers.send(Input::Delayed(input)).is_ok();
        let mut told_unset = false;
        loop {
            let listened = tokio::select! {
                () = stop.cancelled() => return,
                listened = submissions::listen_in_store(&client) => listened,
            };
            let mut woken = match listened {
                None => return,
                Some(Ok(woken)) => woken,
                Some(Err(err)) => {
                    if !told_unset {
                        tracing::warn!(error = %error_chain(&err), "cannot listen to the delayed store; its due index is read again every second until it can");
                        told_unset = true;
                    }
                    // Read again from the oldest: what was submitted meanwhile went unheard.
                    if !tell(DelayedInput::DueWatch { watching: false }) {
                        return;
                    }
                    tokio::select! {
                        () = stop.cancelled() => return,
                        () = tokio::time::sleep(POLL_EVERY) => continue,
                    }
                }
            };
            told_unset = false;
            if !tell(DelayedInput::DueWatch { watching: true }) {
                return;
            }
            loop {
                let submit = tokio::select! {
                    () = stop.cancelled() => return,
                    submit = woken.recv() => submit,
                };
                let Some(submit) = submit else {
                    tracing::info!(
                        "the delayed store's listening connection ended; listening again"
                    );
                    break;
                };
                let input = match submit.id {
                    Some(id) => DelayedInput::Created {
                        bucket: DueBucket::of(submit.due_unix_ms),
                        id,
                        job: submit.job,
                    },
                    None => DelayedInput::DueWatch { watching: true },
                };
                if !tell(input) {
                    return;
                }
            }
        }
    });
}
