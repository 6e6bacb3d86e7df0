//! When the lock driver checks the clock, and what a check's reading becomes: the check goes
//! out every [`period`] of the session (at once on a new session, and at once again after a
//! first estimate, which the other members judge their clocks by), right after the one out
//! when our member data changed, and at once when the owner went while our clock kept us out.
//!
//! Owns: the check out, the time of the next one, and judging a reading (`ClockWatch`).
//! Must not: write anything itself (the driver starts each check) or decide what a skewed node
//! does (the lock machine does).

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use tokio::time::{Instant, Sleep};

use crate::lock::clock::ClockVerdict;
use crate::lock::clock_watch::{ClockSettings, ClockWatch, Reading, period};
use crate::lock::node::ClockStanding;

/// One clock check out: our member node's write and the members' read.
pub type ClockCheck = Pin<Box<dyn Future<Output = Result<Reading, String>> + Send>>;

/// What the schedule asks of the driver.
pub enum ClockStep {
    /// A check is due: start one.
    CheckDue,
    /// The check out ended.
    Read(Result<Reading, String>),
}

/// The clock checks of one lock driver.
pub struct ClockSchedule {
    watch: ClockWatch,
    due: Pin<Box<Sleep>>,
    checking: Option<ClockCheck>,
    /// Our member data changed while a check was out: the next goes out right after it.
    republish: bool,
    /// Only the member lock checks; a named group's lock takes its verdicts.
    checks: bool,
}

impl ClockSchedule {
    pub fn new(settings: ClockSettings, checks: bool) -> Self {
        Self {
            watch: ClockWatch::new(settings),
            due: Box::pin(tokio::time::sleep(Duration::ZERO)),
            checking: None,
            republish: false,
            checks,
        }
    }

    /// Our latest offset estimate, published in the member node by each check.
    pub fn offset_ms(&self) -> Option<i64> {
        self.watch.offset_ms()
    }

    /// How the last check judged our clock, published in the member node.
    pub fn standing(&self) -> Option<ClockStanding> {
        self.watch.standing()
    }

    /// A session began (a new one, or ours taken back): a check at once, none out.
    pub fn session_began(&mut self) {
        self.checking = None;
        self.due.as_mut().reset(Instant::now());
    }

    /// `check` went out.
    pub fn start(&mut self, check: ClockCheck) {
        self.checking = Some(check);
    }

    /// Our member data changed (a new schedule fingerprint): `true` when a check should go out
    /// now to publish it; else it goes out right after the one out.
    pub fn publish_soon(&mut self) -> bool {
        if self.checking.is_some() {
            self.republish = true;
            false
        } else {
            self.checks
        }
    }

    /// The owner's lock node went. A node kept out by its clock checks at once: with the owner
    /// gone it may be alone now, and then it takes over by the servers' clock — its verdict
    /// must come within the takeover delay, not a period later (issue 53).
    pub fn owner_gone(&mut self) {
        if !self.checks || !self.watch.skewed() {
            return;
        }
        if self.checking.is_some() {
            self.republish = true;
        } else {
            self.due.as_mut().reset(Instant::now());
        }
    }

    /// The next step; pends for ever for a lock that does not check. Cancel-safe: a check out
    /// is kept until it ends.
    pub async fn next(&mut self) -> ClockStep {
        if !self.checks {
            return std::future::pending().await;
        }
        match self.checking.as_mut() {
            Some(check) => {
                let reading = check.await;
                self.checking = None;
                ClockStep::Read(reading)
            }
            None => {
                self.due.as_mut().await;
                ClockStep::CheckDue
            }
        }
    }

    /// Judges a check's reading and sets the next check; `Some` when the verdict changed.
    pub fn judged(
        &mut self,
        reading: Result<Reading, String>,
        session_timeout: Duration,
    ) -> Option<ClockVerdict> {
        let unestimated = self.watch.offset_ms().is_none();
        let verdict = match reading {
            Ok(reading) => self.watch.judged(&reading),
            Err(err) => {
                tracing::debug!(error = err, "clock not checked this time");
                None
            }
        };
        // A first estimate is published at once: the other members judge their clocks by
        // ours, and waiting a whole period delays their verdict by as much.
        let first_estimate = unestimated && self.watch.offset_ms().is_some();
        let next = if std::mem::take(&mut self.republish) || first_estimate {
            Instant::now()
        } else {
            Instant::now() + period(session_timeout)
        };
        self.due.as_mut().reset(next);
        verdict
    }
}
