//! The lock driver's clock check: every [`period`], rewrite our member node (it carries our last
//! offset estimate for the others), take the server's stamp on that write as a sample of our
//! clock against the servers', read the other members' published offsets, and judge ours
//! (`lock::clock`). The verdict goes to the lock machine (`Input::ClockJudged`), the metrics
//! and the log.
//!
//! Owns: the requests of one check, the clocks read around the write and at the verdict (the
//! honest seam: a node whose wall clock is wrong reads it wrong here; the monotonic clock
//! times the write), and saying a verdict once when it changes.
//! Must not: decide what a skewed node does (the lock machine does).

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::ensemble_clock::{EnsembleClock, monotonic_ms};
use crate::ids::NodeId;
use crate::ledger::postgres::PgStore;
use crate::lock::clock::{self, ClockEstimate, ClockReading, ClockSample, ClockVerdict};
use crate::lock::node::{ClockStanding, OwnerInfo, StoreStanding};
use crate::metrics::Metrics;
use crate::tally::WriteKind;
use crate::zk::Zk;

/// How the clock check behaves.
#[derive(Debug, Clone)]
pub struct ClockSettings {
    /// `lock.max_clock_offset`.
    pub max_offset: Duration,
    /// Where the verdict is shown; `None` for the lock demo.
    pub metrics: Option<Arc<Metrics>>,
    /// The clock the node's fire drivers schedule by, corrected here when the node is alone
    /// and off the servers' (`ensemble_clock`).
    pub ensemble: Arc<EnsembleClock>,
}

/// How often the clock is checked: once a session timeout, between 1 s and 10 s. Often enough
/// that a node whose peers left contends again within about a takeover; each check is one
/// write through the ensemble's log and one listing, and the owner's drift check reads the
/// member once per write it sees (all of them only when its schedule's total moved).
pub fn period(session_timeout: Duration) -> Duration {
    session_timeout.clamp(Duration::from_secs(1), Duration::from_secs(10))
}

/// One check's answers.
#[derive(Debug)]
pub struct Reading {
    sample: ClockSample,
    /// The other members' published offsets (members without one are left out).
    others: Vec<i64>,
    /// The other members that publish where they keep the delayed queue, with it.
    stores: Vec<(NodeId, StoreStanding)>,
    /// Where this node keeps it, and whether the check could read it.
    mine: Option<StoreStanding>,
}

impl Reading {
    /// The other members that publish where they keep the delayed queue, with it.
    pub fn stores(&self) -> &[(NodeId, StoreStanding)] {
        &self.stores
    }

    /// Where this node keeps the delayed queue, and whether this check could read it.
    pub fn mine(&self) -> Option<&StoreStanding> {
        self.mine.as_ref()
    }
}

/// What one check writes and reads: our member node and what goes in it, the other members,
/// and the delayed store this node keeps the queue in, if it is PostgreSQL.
pub struct Check {
    pub member: String,
    pub me: OwnerInfo,
    pub members_dir: String,
    pub store: Option<Arc<PgStore>>,
}

/// Reads the delayed store once (the fence row, on the store's side connection) within
/// `bound`, then writes our member node, with whether that read answered, timing the write;
/// then reads the other members. Each ZooKeeper request is bounded by `client`'s bound.
///
/// # Errors
/// A request failed or took too long: no verdict this time.
pub async fn read(client: Zk, check: Check, bound: Duration) -> Result<Reading, String> {
    let Check {
        member,
        mut me,
        members_dir,
        store,
    } = check;
    if let Some(store) = &store {
        let answered = tokio::time::timeout(bound, store.probe()).await;
        me.delayed_store_reachable = Some(matches!(answered, Ok(Ok(_))));
    }
    let mine = StoreStanding::published(me.delayed_store, me.delayed_store_reachable);
    let data = me.to_bytes();
    let me = me.node_id;
    let sent_monotonic_ms = monotonic_ms();
    let stat = client
        .set_data(WriteKind::Member, &member, &data, None)
        .await
        .map_err(|err| format!("{member}: {err}"))?;
    let sample = ClockSample {
        sent_monotonic_ms,
        received_monotonic_ms: monotonic_ms(),
        server_unix_ms: stat.mtime,
    };
    let names = client
        .list_children(&members_dir)
        .await
        .map_err(|err| format!("{members_dir}: {err}"))?;
    // All reads out at once: a request is sent when it is made.
    let reads: Vec<_> = names
        .iter()
        .filter(|name| name.as_str() != me.as_str())
        .map(|name| client.get_data(&format!("{members_dir}/{name}")))
        .collect();
    let (mut others, mut stores) = (Vec::new(), Vec::new());
    for read in reads {
        // A member gone meanwhile, or unreadable: it has no say.
        let Some(brief) = read
            .await
            .ok()
            .and_then(|(data, _)| OwnerInfo::parse_brief(&data))
        else {
            continue;
        };
        others.extend(brief.clock_offset_ms);
        if let Some(standing) = brief.store_standing() {
            stores.push((brief.node_id, standing));
        }
    }
    Ok(Reading {
        sample,
        others,
        stores,
        mine,
    })
}

/// What the check has seen so far, and what it has said.
#[derive(Debug)]
pub struct ClockWatch {
    settings: ClockSettings,
    estimate: ClockEstimate,
    said: Said,
    judged_once: bool,
}

/// The last thing said about the clock, so each change is said once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Said {
    Nothing,
    Skewed,
    /// Alone and off the servers: firing by their clock, corrected by this many ms.
    ByTheEnsemble(i64),
}

impl ClockWatch {
    pub fn new(settings: ClockSettings) -> Self {
        Self {
            settings,
            estimate: ClockEstimate::default(),
            said: Said::Nothing,
            judged_once: false,
        }
    }

    /// Our offset estimate, to publish in our member node; `None` before the first check.
    pub fn offset_ms(&self) -> Option<i64> {
        self.estimate.offset_ms(read_clocks())
    }

    /// How the last verdict stands; `None` before the first.
    pub fn standing(&self) -> Option<ClockStanding> {
        self.judged_once.then_some(match self.said {
            Said::Nothing => ClockStanding::Agrees,
            Said::Skewed => ClockStanding::Skewed,
            Said::ByTheEnsemble(_) => ClockStanding::ByTheEnsemble,
        })
    }

    /// The last verdict kept this node out of contention.
    pub fn skewed(&self) -> bool {
        self.said == Said::Skewed
    }

    /// Takes in one check's answers and judges our clock; `None` while no answer came quickly
    /// enough to measure it (a stalled ensemble says nothing about clocks).
    pub fn judged(&mut self, reading: &Reading) -> Option<ClockVerdict> {
        let max_ms = i64::try_from(self.settings.max_offset.as_millis()).unwrap_or(i64::MAX);
        // A round trip within the limit bounds the sample's error by half of it.
        self.estimate.add(reading.sample, max_ms);
        let mine = self.estimate.offset_ms(read_clocks())?;
        let verdict = clock::judge(mine, &reading.others, max_ms);
        self.judged_once = true;
        if let Some(metrics) = &self.settings.metrics {
            metrics.clock(&verdict);
        }
        // Scheduled by, the servers' time is the least the sample allows: never a tick early.
        let servers = self.estimate.servers_at_least_minus_monotonic_ms();
        self.settings
            .ensemble
            .follow(servers.filter(|_| verdict.correction_ms != 0));
        let now = if verdict.skewed {
            Said::Skewed
        } else if verdict.correction_ms != 0 {
            Said::ByTheEnsemble(verdict.correction_ms)
        } else {
            Said::Nothing
        };
        // A correction re-estimated by a few ms is not news; one that moved by more than the
        // limit is.
        let news = match (self.said, now) {
            (Said::ByTheEnsemble(before), Said::ByTheEnsemble(after)) => {
                (before - after).abs() > max_ms
            }
            (before, after) => before != after,
        };
        if news {
            self.say(now, &verdict);
            self.said = now;
        }
        Some(verdict)
    }

    fn say(&self, now: Said, verdict: &ClockVerdict) {
        let max = self.settings.max_offset;
        match now {
            Said::Skewed => tracing::warn!(
                off_fleet_ms = verdict.off_fleet_ms,
                offset_to_zookeeper_ms = verdict.offset_ms,
                max_clock_offset = ?max,
                "this node's clock is off the other members' by more than lock.max_clock_offset: \
                 it stays out of contention for the lock and hands it over if it owns it; fix \
                 its time sync (NTP)"
            ),
            Said::ByTheEnsemble(correction_ms) => tracing::warn!(
                offset_to_zookeeper_ms = verdict.offset_ms,
                max_clock_offset = ?max,
                "this node's clock is off the ZooKeeper servers' by more than \
                 lock.max_clock_offset, and no other member can fire instead: it is firing by \
                 the ensemble's clock (offset {}); fix its time sync (NTP)",
                offset_text(correction_ms)
            ),
            Said::Nothing => tracing::info!(
                offset_to_zookeeper_ms = verdict.offset_ms,
                off_fleet_ms = verdict.off_fleet_ms,
                "this node's clock agrees with the fleet's again"
            ),
        }
    }
}

/// An offset as people read it: `-600.0 s`, `+15.0 s`.
pub fn offset_text(offset_ms: i64) -> String {
    // Milliseconds of a clock offset are far inside f64's exact range.
    #[allow(clippy::cast_precision_loss)]
    let seconds = offset_ms as f64 / 1000.0;
    format!("{seconds:+.1} s")
}

/// Our wall clock and our monotonic clock, read together.
fn read_clocks() -> ClockReading {
    let unix_ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX));
    ClockReading {
        unix_ms,
        monotonic_ms: monotonic_ms(),
    }
}
