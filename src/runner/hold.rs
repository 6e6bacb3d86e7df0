//! Holding a run until its instant: the instant is the schedule and follows the wall clock
//! (a step back of the clock moves it); a cancel never waits for it (issue 31).
//!
//! Owns: the waits until a run's `not_before`. Must not: spawn, signal or supervise anything.

use chrono::{DateTime, Utc};
use tokio_util::sync::CancellationToken;

/// Holds until `not_before` like [`hold_until`], or until `cancel`: whether the instant came.
/// The instant is the schedule and follows the wall clock; a cancel never waits for it (issue
/// 31: a clock stepped back 20 s held a cancelled run, and its guard, for as long).
pub async fn hold_unless_cancelled(
    not_before: Option<DateTime<Utc>>,
    cancel: &CancellationToken,
) -> bool {
    tokio::select! {
        () = hold_until(not_before) => true,
        () = cancel.cancelled() => false,
    }
}

/// Returns once the wall clock has reached `not_before` (a step back of the clock meanwhile is
/// waited out too); at once for `None`. tokio's timer: a millisecond late, never early.
pub async fn hold_until(not_before: Option<DateTime<Utc>>) {
    let Some(not_before) = not_before else {
        return;
    };
    while let Ok(left) = (not_before - Utc::now()).to_std()
        && !left.is_zero()
    {
        tokio::time::sleep(left).await;
    }
}
