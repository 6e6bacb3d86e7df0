//! Holding a run until its instant: the instant is the schedule and follows the clock that
//! carries it (a step back of the wall clock moves a wall-clock instant); a cancel never waits
//! for it (issue 31).
//!
//! Owns: the waits until a run's `not_before`. Must not: spawn, signal or supervise anything.

use tokio_util::sync::CancellationToken;

use crate::ensemble_clock::Deadline;

/// Holds until `not_before` like [`hold_until`], or until `cancel`: whether the instant came.
/// The instant is the schedule and follows its clock; a cancel never waits for it (issue 31: a
/// clock stepped back 20 s held a cancelled run, and its guard, for as long).
pub async fn hold_unless_cancelled(
    not_before: Option<Deadline>,
    cancel: &CancellationToken,
) -> bool {
    tokio::select! {
        // An instant that has come wins over a cancel at the same moment: the job was let go.
        biased;
        () = hold_until(not_before) => true,
        () = cancel.cancelled() => false,
    }
}

/// Returns once `not_before` has come (a step back of the wall clock meanwhile is waited out
/// too, for a wall-clock instant); at once for `None`. tokio's timer: a millisecond late,
/// never early.
pub async fn hold_until(not_before: Option<Deadline>) {
    let Some(not_before) = not_before else {
        return;
    };
    loop {
        let left = not_before.left();
        if left.is_zero() {
            return;
        }
        tokio::time::sleep(left).await;
    }
}
