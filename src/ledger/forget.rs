//! Forgetting remembered submission ids: the owner's sweep of the forget lists whose minute has
//! passed (docs/DELAYED.md "Idempotent ids").
//!
//! Owns: finding the expired lists by time alone (`forget/<day>/<minute>`, never a listing of
//! the id index) and deleting each list's tombstones with the list itself in one multi-op, so a
//! list is carried out at most once.
//! Must not: decide which ids are remembered or for how long (`prune` writes the lists).

use super::Ledger;
use super::records::parsed_sorted;
use super::submissions::{SubmissionError, children, zk};
use crate::delayed::submission::{ForgetBucket, Stored, SubmissionId};
use crate::layout::DelayedPaths;
use crate::tally::WriteKind;
use crate::zk::Fault;

/// Lists carried out per sweep at most (each names up to 50 ids): the rest waits for the next
/// sweep, so a backlog never floods the ensemble.
pub const SWEEP_LISTS: usize = 200;

/// Deletes the tombstones of every forget list whose minute has passed by `now_unix_ms`, up to
/// [`SWEEP_LISTS`] lists, and the emptied minute and day nodes. Returns how many ids were freed.
///
/// # Errors
/// A listing or a read failed; the next sweep goes on where this one stopped.
pub async fn sweep(
    client: &Ledger,
    paths: &DelayedPaths,
    now_unix_ms: i64,
) -> Result<usize, SubmissionError> {
    let mut freed = 0;
    if let Some(store) = client.delayed_store() {
        freed += super::postgres::submissions::sweep(store, now_unix_ms).await?;
    }
    let mut lists_left = SWEEP_LISTS;
    for day in numbered_children(client, &paths.forget).await? {
        let day_ended = ForgetBucket { day, minute: 1439 }.end_ms() <= now_unix_ms;
        let day_path = paths.forget_day(day);
        for minute in numbered_children(client, &day_path).await? {
            let Some(bucket) = ForgetBucket::parse(&day.to_string(), &minute.to_string()) else {
                tracing::warn!(
                    path = format!("{day_path}/{minute}"),
                    "not a forget bucket; skipped"
                );
                continue;
            };
            if bucket.end_ms() > now_unix_ms {
                break;
            }
            let minute_path = paths.forget_minute(bucket);
            for list in children(client, &minute_path).await? {
                if lists_left == 0 {
                    return Ok(freed);
                }
                lists_left -= 1;
                freed +=
                    carry_out(client, paths, &format!("{minute_path}/{list}"), now_unix_ms).await?;
            }
            let _ = client
                .zk()
                .delete(WriteKind::Forget, &minute_path, None)
                .await;
        }
        if day_ended {
            let _ = client.zk().delete(WriteKind::Forget, &day_path, None).await;
        } else {
            break;
        }
    }
    Ok(freed)
}

/// Deletes the tombstones one forget list names, and the list, in one multi-op; when that
/// fails (a tombstone already gone), one at a time, each only while it is still a tombstone
/// whose time has passed.
async fn carry_out(
    client: &Ledger,
    paths: &DelayedPaths,
    list: &str,
    now_unix_ms: i64,
) -> Result<usize, SubmissionError> {
    let (data, stat) = match client.zk().get_data(list).await {
        Ok(read) => read,
        Err(Fault::NoNode) => return Ok(0),
        Err(source) => return Err(zk(list, source)),
    };
    let ids: Vec<SubmissionId> = String::from_utf8_lossy(&data)
        .lines()
        .filter_map(|line| {
            SubmissionId::parse(line)
                .inspect_err(|err| tracing::warn!(path = list, error = %err, "not a submission id in a forget list; skipped"))
                .ok()
        })
        .collect();
    let mut multi = client.zk().multi(WriteKind::Forget);
    let built = ids
        .iter()
        .try_for_each(|id| multi.add_delete(&paths.submission(id), None))
        .and_then(|()| multi.add_delete(list, Some(stat.version)));
    if built.is_ok() && multi.commit().await.is_ok() {
        return Ok(ids.len());
    }
    let mut freed = 0;
    for id in &ids {
        let path = paths.submission(id);
        match client.zk().get_data(&path).await {
            Ok((data, stat)) => match Stored::parse(&data) {
                Ok(Stored::Tombstone(tombstone))
                    if tombstone.remembered_until_unix_ms <= now_unix_ms =>
                {
                    match client
                        .zk()
                        .delete(WriteKind::Forget, &path, Some(stat.version))
                        .await
                    {
                        Ok(()) => freed += 1,
                        Err(Fault::NoNode | Fault::BadVersion) => {}
                        Err(source) => return Err(zk(&path, source)),
                    }
                }
                _ => {}
            },
            Err(Fault::NoNode) => {}
            Err(source) => return Err(zk(&path, source)),
        }
    }
    match client
        .zk()
        .delete(WriteKind::Forget, list, Some(stat.version))
        .await
    {
        Ok(()) | Err(Fault::NoNode | Fault::BadVersion) => Ok(freed),
        Err(source) => Err(zk(list, source)),
    }
}

/// The children of `path` that are decimal numbers, in order (others logged and skipped).
async fn numbered_children(client: &Ledger, path: &str) -> Result<Vec<i64>, SubmissionError> {
    let names = children(client, path).await?;
    let number = |name: &str| {
        (!name.is_empty() && name.bytes().all(|b| b.is_ascii_digit()))
            .then(|| name.parse().ok())
            .flatten()
    };
    Ok(parsed_sorted(path, &names, "forget bucket", false, number))
}
