//! The parent znodes a submission's request and pending marker need in the delayed area (the
//! id shard, the due day, second and shard), and which of them are missing, so that a write
//! can make them inside its own multi-op.
//!
//! Owns: those paths and the reads that find them missing.
//! Must not: write anything (the submit and the child's submit make them).

use super::Ledger;

use crate::delayed::submission::{DueBucket, Submission, SubmissionId};
use crate::layout::DelayedPaths;

/// Those of `parents` that do not exist, in their order; all reads out at once. A parent whose
/// read failed counts as existing: if it does not, the multi finds it missing and the batch
/// goes one by one, which makes it.
pub async fn absent(reader: &Ledger, parents: &[String]) -> Vec<String> {
    let reads: Vec<_> = parents
        .iter()
        .map(|path| reader.zk().check_stat(path))
        .collect();
    let mut missing = Vec::new();
    for (path, read) in parents.iter().zip(reads) {
        if let Ok(None) = read.await {
            missing.push(path.clone());
        }
    }
    missing
}

/// The parents `chunk` needs, each once, every ancestor before its children.
pub fn parents_of(paths: &DelayedPaths, chunk: &[(SubmissionId, Submission)]) -> Vec<String> {
    let mut wanted = Vec::new();
    for (id, submission) in chunk {
        let bucket = DueBucket::of(submission.due_unix_ms);
        wanted.extend([
            paths.ids.clone(),
            paths.id_shard(id.shard()),
            paths.due.clone(),
            paths.due_day(bucket.day),
            paths.due_bucket(bucket),
            paths.due_shard(bucket, id.shard()),
        ]);
    }
    let mut seen = std::collections::HashSet::new();
    wanted.retain(|path| seen.insert(path.clone()));
    wanted
}
