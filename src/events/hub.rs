//! A node's event hub: follows its lock group in ZooKeeper while someone follows its events,
//! turns each change into events, keeps them in a [`Journal`] and hands them to every follower
//! in the same order.
//!
//! Fed by persistent recursive watches, never polling: the run records (`runs/`), each group's
//! lock node, the members and the pauses. Where the delayed queue is kept in PostgreSQL, the
//! store's runs come from its change feed, read every 500 ms (`ledger::store_feed::follow`):
//! the database tells no change unless asked. A run record that changed is read once and says its
//! event; the owner, the members and the pauses are read again and compared with what the hub
//! knew. After a reconnection, whose missed notifications cannot be told, everything is read
//! again and what changed meanwhile is told as it stands now, after a gap event that says so.
//! The hub lives on one session and is dropped with it, or [`IDLE`] after its last follower.
//!
//! Owns: the hub's task, its subscribers and reading the records back for a follower across a
//! gap.
//! Must not: write to ZooKeeper, or answer a request (`http::events` does).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicI64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{broadcast, mpsc, watch};
use tokio_util::sync::CancellationToken;

use super::cursor::{Cursor, StoreMark};
use super::journal::{CAPACITY, Journal, Resume, StoreReadBack};
use super::order::WriteOrder;
use super::{Event, EventKind};
use crate::config::Config;
use crate::ids::{JobName, NodeId, SessionId};
use crate::layout::{self, ControlPaths, LockPaths};
use crate::ledger::changes::{self, Seen};
use crate::ledger::store_feed::Fed;
use crate::ledger::watch::{Batches, Change, Follow, NodeChange};
use crate::ledger::{self, Ledger};
use crate::lock::node::{ClockStanding, OwnerInfo, ReloadNote};
use crate::report::error_chain;

/// A hub nobody followed for this long is dropped with its watches.
pub const IDLE: Duration = Duration::from_secs(600);
/// Events in flight to one follower: one that falls further behind is told so and let go, to
/// resume from its cursor.
const FOLLOWER_BACKLOG: usize = 4096;
/// Record reads in flight at once (as the console's index).
const IN_FLIGHT: usize = 128;
/// The store's changes read back for one follower across a gap, at most: past it, the gap
/// event says which were lost to it.
const STORE_READ_BACK: usize = 100_000;

/// What the hub follows, from the schedule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HubPaths {
    runs: String,
    members: LockPaths,
    control: ControlPaths,
    /// Each group's lock: the default group's as `""`.
    locks: Vec<(String, LockPaths)>,
}

impl HubPaths {
    pub fn of(config: &Config) -> Self {
        let group = config.lock.group_paths();
        let mut locks = vec![(String::new(), group.lock.clone())];
        locks.extend(
            config
                .groups
                .iter()
                .map(|named| (named.name.clone(), group.lock.group(&named.name))),
        );
        Self {
            runs: group.ledger.runs,
            members: group.lock,
            control: group.control,
            locks,
        }
    }
}

/// Where the hub stands.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Standing {
    Loading,
    Ready,
    Ended(String),
}

/// Why a follower cannot be served.
#[derive(Debug, thiserror::Error)]
pub enum HubError {
    #[error("the event hub stopped: {0}")]
    Ended(String),
    #[error("cannot read the run records back: {0}")]
    Records(String),
}

/// What a follower gets.
pub enum Subscribed {
    /// The events after its cursor, then every new one as it comes. `position`: the cursor
    /// it starts from (the newest event's id when it gave none).
    Stream {
        position: Cursor,
        backlog: Vec<Event>,
        live: broadcast::Receiver<Event>,
    },
    /// Event `after` is not one this hub kept: it keeps what it saw since `kept_from` (see
    /// `journal`).
    Gone { after: Cursor, kept_from: Cursor },
}

struct Shared {
    journal: Mutex<Journal>,
    sender: broadcast::Sender<Event>,
    standing: watch::Sender<Standing>,
}

/// A running hub; clones share it.
#[derive(Clone)]
pub struct EventHub {
    shared: Arc<Shared>,
    client: Ledger,
    paths: Arc<HubPaths>,
    last_asked: Arc<AtomicI64>,
    followers: Arc<AtomicUsize>,
    stop: CancellationToken,
}

impl EventHub {
    /// Starts following the group at `paths` on `client`'s session.
    pub fn start(client: Ledger, paths: HubPaths, stop: CancellationToken) -> Self {
        let (sender, _) = broadcast::channel(FOLLOWER_BACKLOG);
        let hub = Self {
            shared: Arc::new(Shared {
                journal: Mutex::new(Journal::new(CAPACITY, Cursor::of_zxid(0))),
                sender,
                standing: watch::Sender::new(Standing::Loading),
            }),
            client,
            paths: Arc::new(paths),
            last_asked: Arc::new(AtomicI64::new(monotonic_secs())),
            followers: Arc::new(AtomicUsize::new(0)),
            stop,
        };
        let task = hub.clone();
        tokio::spawn(async move {
            let why = task.follow().await;
            if task.stop.is_cancelled() {
                tracing::debug!(reason = why, "event hub stopped");
            } else {
                tracing::warn!(
                    reason = why,
                    "event hub stopped; the next follower starts another"
                );
                task.stop.cancel();
            }
            task.shared.standing.send_replace(Standing::Ended(why));
        });
        hub
    }

    /// Whether this hub still serves `session` and follows the group.
    pub fn serves(&self, session: SessionId) -> bool {
        self.client.session() == session && !self.stop.is_cancelled()
    }

    /// Stops following the group; its followers' streams end.
    pub fn stop(&self) {
        self.stop.cancel();
    }

    /// Cancelled when the hub stops.
    pub fn stopped(&self) -> CancellationToken {
        self.stop.clone()
    }

    /// A follower whose last event was `cursor` (`None`: it wants only what comes from now).
    /// `across_gap`: where events after its cursor were not kept, it takes the runs' events read
    /// back from their records and a gap event instead of [`Subscribed::Gone`].
    ///
    /// # Errors
    /// The hub stopped before it had read the group, or reading the records back failed.
    pub async fn subscribe(
        &self,
        cursor: Option<Cursor>,
        across_gap: bool,
    ) -> Result<Subscribed, HubError> {
        self.last_asked.store(monotonic_secs(), Ordering::Relaxed);
        let mut standing = self.shared.standing.subscribe();
        let ready = standing
            .wait_for(|standing| *standing != Standing::Loading)
            .await
            .map(|standing| standing.clone());
        match ready {
            Ok(Standing::Ready) => {}
            Ok(Standing::Ended(why)) => return Err(HubError::Ended(why)),
            Ok(Standing::Loading) | Err(_) => {
                return Err(HubError::Ended("it stopped while loading".to_owned()));
            }
        }
        let Some(cursor) = cursor else {
            let journal = self.journal();
            return Ok(Subscribed::Stream {
                position: journal.newest(),
                backlog: Vec::new(),
                live: self.shared.sender.subscribe(),
            });
        };
        let gone = match self.journal().after(&cursor) {
            Resume::Gone { after, kept_from } => Some((after, kept_from)),
            Resume::Kept(_) => None,
        };
        let (records, store) = match gone {
            Some((after, kept_from)) if !across_gap => {
                return Ok(Subscribed::Gone { after, kept_from });
            }
            Some(_) => {
                // A cursor without the store's part has been told none of its runs: all that
                // are kept come back, as every kept record of ZooKeeper's does.
                let after = cursor.store.clone().unwrap_or(StoreMark {
                    xid: 0,
                    id: String::new(),
                });
                (self.records().await?, self.store_read_back(&after).await?)
            }
            None => (Vec::new(), StoreReadBack::default()),
        };
        // The backlog and the live channel are taken together: no event falls between them.
        let journal = self.journal();
        let backlog = match journal.after(&cursor) {
            Resume::Kept(backlog) => backlog,
            Resume::Gone { .. } => journal.across_gap(
                &cursor,
                records,
                store,
                chrono::Utc::now().timestamp_millis(),
            ),
        };
        Ok(Subscribed::Stream {
            position: cursor,
            backlog,
            live: self.shared.sender.subscribe(),
        })
    }

    /// Counts a follower for as long as the guard lives: a hub with followers never idles.
    pub fn follower(&self) -> FollowerGuard {
        self.followers.fetch_add(1, Ordering::Relaxed);
        FollowerGuard { hub: self.clone() }
    }

    fn journal(&self) -> std::sync::MutexGuard<'_, Journal> {
        match self.shared.journal.lock() {
            Ok(journal) => journal,
            Err(poisoned) => poisoned.into_inner(),
        }
    }

    fn idle(&self) -> bool {
        let idle = monotonic_secs() - self.last_asked.load(Ordering::Relaxed);
        self.followers.load(Ordering::Relaxed) == 0
            && u64::try_from(idle).is_ok_and(|idle| idle >= IDLE.as_secs())
    }

    /// Every kept run record's latest event, read back.
    async fn records(&self) -> Result<Vec<Event>, HubError> {
        let runs = &self.paths.runs;
        let jobs = ledger::jobs_with_records(&self.client, runs)
            .await
            .map_err(|err| HubError::Records(format!("cannot list {runs}: {err}")))?;
        let mut events = Vec::new();
        for chunk in jobs.chunks(IN_FLIGHT) {
            let wanted = ledger::record_names_of(&self.client, runs, chunk).await;
            events.extend(self.record_events(wanted).await);
        }
        Ok(events)
    }

    /// The delayed store's runs changed after `after`, as they stand, up to the newest change
    /// the journal told (its own events after that follow them).
    async fn store_read_back(&self, after: &StoreMark) -> Result<StoreReadBack, HubError> {
        let Some(through) = self.journal().store_mark().cloned() else {
            return Ok(StoreReadBack::default());
        };
        let mut read = StoreReadBack {
            through: Some(through.clone()),
            ..StoreReadBack::default()
        };
        let mut mark = after.clone();
        while mark < through {
            if read.events.len() >= STORE_READ_BACK {
                read.cut_at = Some(mark);
                break;
            }
            let changes =
                ledger::store_feed::changes_after(&self.client, &mark, ledger::store_feed::BATCH)
                    .await
                    .map_err(|err| HubError::Records(error_chain(&err)))?;
            let Some(last) = changes.last().map(|change| change.mark.clone()) else {
                break;
            };
            for change in changes.into_iter().filter(|change| change.mark <= through) {
                let mut event = Event::of_stored_run(&change.record);
                event.store_mark = Some(change.mark);
                read.events.push(event);
            }
            mark = last;
        }
        Ok(read)
    }

    /// Follows the delayed store's change feed until the hub stops, telling each change.
    async fn follow_store(&self) {
        let tell = |fed: Fed| {
            let mut journal = self.journal();
            let told = match fed {
                Fed::Begun(mark) => {
                    vec![journal.store_begun(mark, chrono::Utc::now().timestamp_millis())]
                }
                Fed::Changed(changes) => changes
                    .into_iter()
                    .map(|change| {
                        journal.store_changed(Event::of_stored_run(&change.record), change.mark)
                    })
                    .collect(),
            };
            for event in told {
                // No follower now is no error: the journal keeps it for the next.
                let _ = self.shared.sender.send(event);
            }
        };
        let mark = || self.journal().store_mark().cloned();
        ledger::store_feed::follow(&self.client, &self.stop, "event hub", mark, tell).await;
    }

    /// The events the records at `wanted` say now, each read once; gone ones say none.
    async fn record_events(
        &self,
        wanted: Vec<(JobName, Option<layout::RecordName>, String)>,
    ) -> Vec<Event> {
        self.record_reads(wanted)
            .await
            .into_iter()
            .map(|(_, _, event)| event)
            .collect()
    }

    /// What the records at `wanted` say now, each with its path and the version read.
    async fn record_reads(
        &self,
        wanted: Vec<(JobName, Option<layout::RecordName>, String)>,
    ) -> Vec<(String, i32, Event)> {
        let read = ledger::read_many_stamped(&self.client, wanted, IN_FLIGHT).await;
        read.into_iter()
            .filter_map(|(_, _, path, read)| {
                read.map(|(record, stamp)| {
                    let event = Event::of_record(&record, stamp.zxid, stamp.at_unix_ms);
                    (path, stamp.version, event)
                })
            })
            .collect()
    }

    /// Loads, then follows changes until the session ends, the hub idles or is stopped.
    /// Returns why it stopped.
    async fn follow(&self) -> String {
        let changes = match self.watch().await {
            Ok(changes) => changes,
            Err(why) => return why,
        };
        let mut known = match self.read_state().await {
            Ok(known) => known,
            Err(why) => return why,
        };
        // Read after the state: a change of the store's before its horizon is history, one
        // after it is told. A store that cannot be read now is followed from when it can: the
        // events of ZooKeeper do not wait for it.
        let follows_store = self.client.delayed_in_postgres();
        let store = match ledger::store_feed::horizon(&self.client).await {
            Ok(store) => store,
            Err(err) => {
                tracing::warn!(
                    error = %error_chain(&err),
                    "the event hub cannot read the delayed store; it follows ZooKeeper and \
                     reads the store's runs from when it can"
                );
                None
            }
        };
        *self.journal() = Journal::new(
            CAPACITY,
            Cursor {
                zxid: known.newest_zxid(),
                store,
            },
        );
        self.shared.standing.send_replace(Standing::Ready);
        if follows_store {
            let hub = self.clone();
            tokio::spawn(async move { hub.follow_store().await });
        }
        let idle = || {
            self.idle()
                .then(|| format!("nobody followed for {} s", IDLE.as_secs()))
        };
        let mut batches = Batches::new(changes);
        let mut order = WriteOrder::default();
        loop {
            let batch = match batches.next(&self.stop, idle).await {
                Ok(batch) => batch,
                Err(why) => return why,
            };
            if let Err(why) = self.apply(batch, &mut known, &mut order).await {
                return why;
            }
        }
    }

    /// One persistent recursive watch per followed path, their changes merged and tagged.
    async fn watch(&self) -> Result<mpsc::UnboundedReceiver<(Source, Change)>, String> {
        let paths = &self.paths;
        let mut watched = vec![
            (Source::Runs, paths.runs.clone()),
            (Source::Members, paths.members.members.clone()),
            (Source::Paused, paths.control.paused.clone()),
        ];
        watched.extend(
            paths
                .locks
                .iter()
                .map(|(group, lock)| (Source::Lock(group.clone()), lock.lock.clone())),
        );
        let (merged, received) = mpsc::unbounded_channel();
        for (source, path) in watched {
            let follow = Follow::add(&self.client, &path)
                .await
                .map_err(|err| format!("cannot watch {path}: {}", error_chain(&err)))?;
            // The state is read whole below, before the first change is looked at.
            let mut changes = follow.read_all_done().forward(self.stop.clone());
            let merged = merged.clone();
            tokio::spawn(async move {
                while let Some(change) = changes.recv().await {
                    if merged.send((source.clone(), change)).is_err() {
                        return;
                    }
                }
            });
        }
        Ok(received)
    }

    /// The owners, members and pauses as they are now.
    async fn read_state(&self) -> Result<Known, String> {
        let mut owners = BTreeMap::new();
        for (group, lock) in &self.paths.locks {
            let owner = changes::owner_now(&self.client, lock)
                .await
                .map_err(|err| error_chain(&err))?;
            owners.insert(group.clone(), owner);
        }
        let members = changes::members_now(&self.client, &self.paths.members)
            .await
            .map_err(|err| error_chain(&err))?;
        let paused = changes::paused_now(&self.client, &self.paths.control)
            .await
            .map_err(|err| error_chain(&err))?;
        let mut notes = BTreeMap::new();
        for node in &members.value {
            let path = self.paths.members.member(node);
            let member = changes::member_now(&self.client, &path)
                .await
                .map_err(|err| error_chain(&err))?;
            if let Some(member) = member {
                notes.insert(node.clone(), Notes::of(&member));
            }
        }
        Ok(Known {
            owners,
            members,
            paused,
            notes,
        })
    }

    /// Applies a batch of changes: each record that changed read once, the rest read again and
    /// compared; the events told in the order of their zxids, a record's write only once its
    /// notification has come ([`WriteOrder`]).
    async fn apply(
        &self,
        batch: &mut Vec<(Source, Change)>,
        known: &mut Known,
        order: &mut WriteOrder,
    ) -> Result<(), String> {
        let mut records = BTreeSet::new();
        // The owners, members or pauses changed: read again and compared.
        let mut reread = false;
        let mut rewritten = BTreeSet::new();
        let mut read_all = false;
        for (source, change) in batch.drain(..) {
            match change {
                Change::Disconnected => {}
                Change::ReadAll => {
                    read_all = true;
                    order.forget();
                }
                Change::Node { path, kind } => match source {
                    Source::Runs => {
                        match kind {
                            NodeChange::Created => order.created(&path),
                            NodeChange::DataChanged => order.rewritten(&path),
                            NodeChange::Deleted => order.deleted(&path),
                            NodeChange::ChildrenChanged => {}
                        }
                        records.insert(path);
                    }
                    // A member's data is rewritten by every clock check: read alone, for
                    // its clock verdict and its last reload.
                    Source::Members if kind == NodeChange::DataChanged => {
                        rewritten.insert(path);
                    }
                    Source::Paused if kind == NodeChange::DataChanged => {}
                    Source::Members | Source::Paused | Source::Lock(_) => reread = true,
                },
            }
        }
        let now = chrono::Utc::now().timestamp_millis();
        let mut events = Vec::new();
        if read_all {
            // Notifications were lost while disconnected: what changed is told as it stands.
            let newest = self.journal().newest_zxid();
            let mut gap = Event::bare(EventKind::Gap, newest, now);
            gap.detail = Some(
                "disconnected from ZooKeeper: what changed meanwhile is told as it stands now"
                    .to_owned(),
            );
            events.push(gap);
            let state = self.read_state().await?;
            events.extend(known.diff(state, now));
            // The journal drops the records' writes it told already.
            let read = self.records().await.map_err(|err| err.to_string())?;
            events.extend(read.into_iter().filter(|event| event.id > newest));
        } else {
            let wanted: Vec<_> = records
                .into_iter()
                .filter_map(|path| {
                    let (job, name) = layout::parse_record_path(&self.paths.runs, &path)?;
                    Some((job, name, path))
                })
                .collect();
            let reads = self.record_reads(wanted).await;
            events.extend(
                reads
                    .into_iter()
                    .filter_map(|(path, version, event)| order.read(&path, version, event)),
            );
            events.extend(order.take_released());
            if reread {
                let state = self.read_state().await?;
                events.extend(known.diff(state, now));
            }
            for path in rewritten {
                let member = changes::member_now(&self.client, &path)
                    .await
                    .map_err(|err| error_chain(&err))?;
                if let Some(member) = member {
                    events.extend(known.noted(member));
                }
            }
        }
        events.sort_by_key(|event| (event.id, event.kind != EventKind::Gap));
        let mut journal = self.journal();
        for event in events {
            let told = if event.kind.of_a_run() {
                journal.record_changed(&event.record_key(), event)
            } else {
                Some(journal.push(event))
            };
            if let Some(event) = told {
                // No follower now is no error: the journal keeps it for the next.
                let _ = self.shared.sender.send(event);
            }
        }
        Ok(())
    }
}

/// Keeps its hub from idling while a follower reads it.
pub struct FollowerGuard {
    hub: EventHub,
}

impl Drop for FollowerGuard {
    fn drop(&mut self) {
        self.hub.followers.fetch_sub(1, Ordering::Relaxed);
        self.hub
            .last_asked
            .store(monotonic_secs(), Ordering::Relaxed);
    }
}

/// Which watch a change came from.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Source {
    Runs,
    Members,
    Paused,
    /// A group's lock node: the default group's as `""`.
    Lock(String),
}

/// What the hub knew of the owners, members and pauses, each with the change it was read at.
#[derive(Debug)]
struct Known {
    owners: BTreeMap<String, Seen<Option<NodeId>>>,
    members: Seen<BTreeSet<NodeId>>,
    paused: Seen<BTreeSet<JobName>>,
    /// What each member published of its clock and its reloads.
    notes: BTreeMap<NodeId, Notes>,
}

/// What a member publishes that the stream tells: its clock verdict and its last reload.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Notes {
    node: NodeId,
    clock: Option<ClockStanding>,
    reload: Option<ReloadNote>,
    zxid: i64,
    at_unix_ms: i64,
}

impl Notes {
    fn of(member: &Seen<OwnerInfo>) -> Self {
        Self {
            node: member.value.node_id.clone(),
            clock: member.value.clock_standing,
            reload: member.value.reload.as_deref().cloned(),
            zxid: member.zxid,
            at_unix_ms: member.at_unix_ms.unwrap_or_default(),
        }
    }

    /// The events that `self` is news of, after `before`.
    fn news(&self, before: Option<&Notes>) -> Vec<Event> {
        let mut events = Vec::new();
        let (clock_before, reload_before) = before.map_or((None, None), |before| {
            (before.clock, before.reload.as_ref())
        });
        // A first verdict that agrees is no news: every member starts so.
        let first_agrees = clock_before.is_none() && self.clock == Some(ClockStanding::Agrees);
        if let Some(clock) = self
            .clock
            .filter(|_| self.clock != clock_before && !first_agrees)
        {
            events.push(Event {
                node: Some(self.node.to_string()),
                detail: Some(clock.says().to_owned()),
                ..Event::bare(EventKind::ClockVerdict, self.zxid, self.at_unix_ms)
            });
        }
        if let Some(reload) = self
            .reload
            .as_ref()
            .filter(|reload| Some(*reload) != reload_before)
        {
            let kind = if reload.applied {
                EventKind::ReloadApplied
            } else {
                EventKind::ReloadRefused
            };
            events.push(Event {
                node: Some(self.node.to_string()),
                detail: Some(reload.detail.clone()),
                ..Event::bare(kind, self.zxid, reload.at_unix_ms)
            });
        }
        events
    }
}

impl Known {
    fn newest_zxid(&self) -> i64 {
        let owners = self.owners.values().map(|owner| owner.zxid);
        owners
            .chain([self.members.zxid, self.paused.zxid])
            .max()
            .unwrap_or_default()
    }

    /// The events that turn what was known into `now`, which it becomes.
    fn diff(&mut self, now: Known, now_ms: i64) -> Vec<Event> {
        let mut events = Vec::new();
        for (group, owner) in &now.owners {
            if self.owners.get(group).map(|known| &known.value) != Some(&owner.value) {
                let at = owner.at_unix_ms.unwrap_or(now_ms);
                let mut event = Event::bare(EventKind::OwnerChanged, owner.zxid, at);
                event.node = owner.value.as_ref().map(ToString::to_string);
                event.detail = Some(match (group.is_empty(), &owner.value) {
                    (true, Some(_)) => "owns the lock".to_owned(),
                    (true, None) => "no node owns the lock".to_owned(),
                    (false, Some(_)) => format!("owns group {group}'s lock"),
                    (false, None) => format!("no node owns group {group}'s lock"),
                });
                events.push(event);
            }
        }
        let (was, is) = (&self.members.value, &now.members.value);
        let member = |kind, node: &NodeId| Event {
            node: Some(node.to_string()),
            ..Event::bare(kind, now.members.zxid, now_ms)
        };
        events.extend(
            is.difference(was)
                .map(|node| member(EventKind::MemberJoined, node)),
        );
        events.extend(
            was.difference(is)
                .map(|node| member(EventKind::MemberLeft, node)),
        );
        let (was, is) = (&self.paused.value, &now.paused.value);
        let pause = |kind, job: &JobName| Event {
            job: Some(job.to_string()),
            ..Event::bare(kind, now.paused.zxid, now_ms)
        };
        events.extend(
            is.difference(was)
                .map(|job| pause(EventKind::JobPaused, job)),
        );
        events.extend(
            was.difference(is)
                .map(|job| pause(EventKind::JobResumed, job)),
        );
        for (node, notes) in &now.notes {
            events.extend(notes.news(self.notes.get(node)));
        }
        *self = now;
        events
    }

    /// A member's data as rewritten: the news of it.
    fn noted(&mut self, member: Seen<OwnerInfo>) -> Vec<Event> {
        let notes = Notes::of(&member);
        let events = notes.news(self.notes.get(&notes.node));
        self.notes.insert(notes.node.clone(), notes);
        events
    }
}

/// The hubs of a node: the one running, started by the first follower.
#[derive(Default)]
pub struct Hubs {
    running: Mutex<Option<EventHub>>,
    stop: CancellationToken,
}

impl Hubs {
    /// The hub on `client`'s session: the running one, or a new one.
    pub fn hub(&self, client: &Ledger, config: &Config) -> EventHub {
        let mut running = match self.running.lock() {
            Ok(running) => running,
            Err(poisoned) => poisoned.into_inner(),
        };
        if let Some(hub) = running.as_ref().filter(|hub| hub.serves(client.session())) {
            return hub.clone();
        }
        if let Some(old) = running.take() {
            old.stop();
        }
        let hub = EventHub::start(
            client.clone(),
            HubPaths::of(config),
            self.stop.child_token(),
        );
        *running = Some(hub.clone());
        hub
    }

    /// Stops the running hub, and any later one, when dropped: with the listener.
    pub fn stop_guard(&self) -> tokio_util::sync::DropGuard {
        self.stop.clone().drop_guard()
    }
}

/// Seconds on a clock that only moves forward, for idling.
fn monotonic_secs() -> i64 {
    crate::ensemble_clock::monotonic_ms() / 1000
}

#[cfg(test)]
mod tests;
