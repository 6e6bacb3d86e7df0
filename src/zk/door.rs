//! The doorway: every request zkcron sends to ZooKeeper, once a session is up, goes through a
//! [`Zk`]. It does three things for every request, so that no caller does them by hand:
//! - bounds it in time (a server that does not answer yields [`Fault::TimedOut`], not a wait
//!   until the session expires), unless the caller asked for an [`Zk::unbounded`] handle
//!   because the answer decides something and is read back when lost;
//! - counts what it writes by why ([`WriteKind`]) into `crate::tally` when it is sent;
//! - answers a typed [`Fault`], never the client crate's error.
//!
//! Requests are sent when the method is called, not when its future is first polled: the client
//! queues a request at call time, so several reads made in a row go out pipelined whatever order
//! they are awaited in. The nodes it creates carry the session's ACLs.
//!
//! Owns: that layer, the [`Mode`] of a node created and the shape of a multi-op's answer.
//! Must not: know what a path means or decide anything about what a fault means to the caller.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use zookeeper_client::{
    Acl, Acls, Client, CreateMode, MultiWriteError, MultiWriteResult, MultiWriter,
};

use super::answered::Answered;
use crate::tally::{self, WriteKind};

/// What the server keeps about a node (version, times, owner): the server's own record.
pub use zookeeper_client::Stat;

/// A request with no answer by then fails with [`Fault::TimedOut`], so that no listing or
/// record write keeps its caller (or a stop) waiting on an ensemble that does not answer.
pub const REQUEST_BOUND: Duration = Duration::from_secs(10);

/// Why a request failed, as the callers tell cases apart.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Fault {
    #[error("no such node")]
    NoNode,
    #[error("the node exists already")]
    NodeExists,
    #[error("the node's version has moved")]
    BadVersion,
    #[error("the node has children")]
    NotEmpty,
    #[error("not authorized (the node's ACL)")]
    NoAuth,
    #[error("session expired")]
    SessionExpired,
    #[error("the connection to the server was lost (the request may have been applied)")]
    ConnectionLoss,
    #[error("no answer within {0:?} (the request may have been applied)")]
    TimedOut(Duration),
    #[error("the client was closed")]
    Closed,
    #[error("the server does not implement this request")]
    Unimplemented,
    /// A ZooKeeper quota (`zookeeper.enforceQuota`) on a parent of the node is exceeded: nothing
    /// was applied, and nothing under that parent will be until the quota is raised.
    #[error("refused: a ZooKeeper quota on a parent of the node is exceeded")]
    QuotaExceeded,
    /// A definite refusal of another kind (an invalid ACL, a read-only server, …):
    /// nothing was applied.
    #[error("refused: {0}")]
    Refused(String),
    /// Anything else: an answer that could not be read, the client's own inconsistency. The
    /// request may have been applied.
    #[error("{0}")]
    Other(String),
}

impl Fault {
    /// A server answered: the request reached it (a refusal is an answer too).
    fn is_answer(&self) -> bool {
        !self.is_unknown_outcome() && *self != Self::Closed
    }

    /// The request may have been applied although no answer says so: a caller whose write
    /// decides something reads it back. A server's refusal is an answer: nothing was applied.
    pub fn is_unknown_outcome(&self) -> bool {
        matches!(
            self,
            Self::ConnectionLoss | Self::SessionExpired | Self::TimedOut(_) | Self::Other(_)
        )
    }
}

impl From<zookeeper_client::Error> for Fault {
    fn from(err: zookeeper_client::Error) -> Self {
        use zookeeper_client::Error as E;
        match err {
            E::NoNode => Self::NoNode,
            E::NodeExists => Self::NodeExists,
            E::BadVersion => Self::BadVersion,
            E::NotEmpty => Self::NotEmpty,
            E::NoAuth | E::AuthFailed => Self::NoAuth,
            E::SessionExpired => Self::SessionExpired,
            E::ConnectionLoss | E::Timeout => Self::ConnectionLoss,
            E::ClientClosed => Self::Closed,
            E::Unimplemented => Self::Unimplemented,
            E::QuotaExceeded => Self::QuotaExceeded,
            refused @ (E::NoChildrenForEphemerals
            | E::InvalidAcl
            | E::BadArguments(_)
            | E::NotReadOnly
            | E::Throttled
            | E::MarshallingError
            | E::SessionMoved) => Self::Refused(refused.to_string()),
            other => Self::Other(other.to_string()),
        }
    }
}

/// The number a sequential node's name ends in. It prints as the server writes it in the name
/// (ten digits, zero-padded; nineteen past `i32::MAX`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Sequence(i64);

impl Sequence {
    /// Its value.
    pub fn value(self) -> i64 {
        self.0
    }
}

impl std::fmt::Display for Sequence {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.0 <= i64::from(i32::MAX) {
            write!(f, "{:010}", self.0)
        } else {
            write!(f, "{:019}", self.0)
        }
    }
}

/// How a node is created.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Persistent,
    PersistentSequential,
    Ephemeral,
    EphemeralSequential,
}

impl Mode {
    fn client(self) -> CreateMode {
        match self {
            Self::Persistent => CreateMode::Persistent,
            Self::PersistentSequential => CreateMode::PersistentSequential,
            Self::Ephemeral => CreateMode::Ephemeral,
            Self::EphemeralSequential => CreateMode::EphemeralSequential,
        }
    }
}

/// A node's ACL as the servers keep it, to compare with another's and to show.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeAcl(Vec<Acl>);

impl std::fmt::Display for NodeAcl {
    /// `scheme:id:permissions` each, e.g. `digest:zkcron:…=:ALL,digest:grafana:…=:READ`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let entries: Vec<String> = self
            .0
            .iter()
            .map(|acl| format!("{}:{}:{}", acl.scheme(), acl.id(), acl.permission()))
            .collect();
        f.write_str(&entries.join(","))
    }
}

/// A ZooKeeper session as the rest of zkcron sees it. Cloning shares the session.
#[derive(Debug, Clone)]
pub struct Zk {
    client: Client,
    /// The ACL of every node it creates (shared: a session's clones create alike).
    acls: Arc<[Acl]>,
    bound: Option<Duration>,
    answered: Arc<Answered>,
}

/// A request on its way: its time bound, and when it was sent, noted once answered.
struct Sending {
    bound: Option<Duration>,
    answered: Arc<Answered>,
    sent: Instant,
}

impl Sending {
    fn noted<T>(&self, answer: Result<T, Fault>) -> Result<T, Fault> {
        if answer.as_ref().err().is_none_or(Fault::is_answer) {
            self.answered.note(self.sent);
        }
        answer
    }
}

impl Zk {
    /// Requests on `client`'s session, each bounded by `bound`, creating nodes with `acls`.
    pub fn new(client: Client, acls: &[Acl], bound: Duration) -> Self {
        Self {
            client,
            acls: acls.into(),
            bound: Some(bound),
            answered: Arc::new(Answered::new()),
        }
    }

    /// When the latest-sent request that the servers answered was sent (or the doorway made,
    /// before any): an answer proves that a server heard the session after that instant, so
    /// the session cannot expire before it plus the session timeout.
    pub fn last_answered(&self) -> Instant {
        self.answered.last()
    }

    /// A request sent now, on this handle's bound.
    fn sending(&self) -> Sending {
        Sending {
            bound: self.bound,
            answered: Arc::clone(&self.answered),
            sent: Instant::now(),
        }
    }

    /// The same session with no time bound: for a request whose answer decides (a claim) and
    /// that the caller bounds itself, reading back what it wrote when the answer is late.
    pub fn unbounded(&self) -> Self {
        Self {
            bound: None,
            ..self.clone()
        }
    }

    /// The same session with another bound.
    pub fn bounded_by(&self, bound: Duration) -> Self {
        Self {
            bound: Some(bound),
            ..self.clone()
        }
    }

    /// The session's id.
    pub fn session_id(&self) -> i64 {
        self.client.session_id().0
    }

    /// The session timeout the server granted.
    pub fn session_timeout(&self) -> Duration {
        self.client.session_timeout()
    }

    /// The session's states from now on.
    pub fn states(&self) -> States {
        States(self.client.state_watcher())
    }

    /// The session, to take back on a new connection once the client has given up on it.
    pub fn resumable(&self) -> Resumable {
        Resumable(self.client.session().clone())
    }

    /// The session's client, for the few parts of `zk` that watch or take a session back.
    pub(super) fn client(&self) -> &Client {
        &self.client
    }

    /// Whether the client has given up on its session (closed, expired or failed for good):
    /// nothing sent on it will be answered.
    pub fn has_ended(&self) -> bool {
        self.client.state().is_terminated()
    }

    /// A node's data and stat.
    pub fn get_data(
        &self,
        path: &str,
    ) -> impl Future<Output = Result<(Vec<u8>, Stat), Fault>> + Send + use<> {
        let sent = self.client.get_data(path);
        Self::bound_owned(self.sending(), sent)
    }

    /// Waits until the server this session is connected to has applied everything the leader
    /// had applied when it got this request.
    pub fn sync<'a>(
        &'a self,
        path: &str,
    ) -> impl Future<Output = Result<(), Fault>> + Send + use<'a> {
        let sent = self.client.sync(path);
        Self::bound_owned(self.sending(), sent)
    }

    /// A node's stat, `None` when it is not there.
    pub fn check_stat(
        &self,
        path: &str,
    ) -> impl Future<Output = Result<Option<Stat>, Fault>> + Send + use<> {
        let sent = self.client.check_stat(path);
        Self::bound_owned(self.sending(), sent)
    }

    /// A node's children's names.
    pub fn list_children<'a>(
        &'a self,
        path: &str,
    ) -> impl Future<Output = Result<Vec<String>, Fault>> + Send + use<'a> {
        let sent = self.client.list_children(path);
        Self::bound_owned(self.sending(), sent)
    }

    /// A node's children's names and its stat.
    pub fn get_children(
        &self,
        path: &str,
    ) -> impl Future<Output = Result<(Vec<String>, Stat), Fault>> + Send + use<> {
        let sent = self.client.get_children(path);
        Self::bound_owned(self.sending(), sent)
    }

    /// A node's children's names, and a watch that fires once when they change.
    ///
    /// # Errors
    /// The listing failed.
    pub async fn list_and_watch_children(
        &self,
        path: &str,
    ) -> Result<(Vec<String>, OneChange), Fault> {
        let sent = self.client.list_and_watch_children(path);
        let (children, watcher) = Self::bound_owned(self.sending(), sent).await?;
        Ok((children, OneChange(watcher)))
    }

    /// A node's data and stat, and a watch that fires once when it changes or goes.
    ///
    /// # Errors
    /// The read failed.
    pub async fn get_and_watch_data(
        &self,
        path: &str,
    ) -> Result<(Vec<u8>, Stat, OneChange), Fault> {
        let sent = self.client.get_and_watch_data(path);
        let (data, stat, watcher) = Self::bound_owned(self.sending(), sent).await?;
        Ok((data, stat, OneChange(watcher)))
    }

    /// A node's stat (`None`: not there), and a watch that fires once when it is created,
    /// changed or deleted.
    ///
    /// # Errors
    /// The read failed.
    pub async fn check_and_watch_stat(
        &self,
        path: &str,
    ) -> Result<(Option<Stat>, OneChange), Fault> {
        let sent = self.client.check_and_watch_stat(path);
        let (stat, watcher) = Self::bound_owned(self.sending(), sent).await?;
        Ok((stat, OneChange(watcher)))
    }

    /// How many nodes there are below `path`.
    pub fn count_descendants<'a>(
        &'a self,
        path: &str,
    ) -> impl Future<Output = Result<usize, Fault>> + Send + use<'a> {
        let sent = self.client.count_descendants_number(path);
        Self::bound_owned(self.sending(), sent)
    }

    /// The children of `path`; a node not there has none.
    ///
    /// # Errors
    /// Any other fault.
    pub async fn children_if_there(&self, path: &str) -> Result<Vec<String>, Fault> {
        match self.list_children(path).await {
            Ok(children) => Ok(children),
            Err(Fault::NoNode) => Ok(Vec::new()),
            Err(fault) => Err(fault),
        }
    }

    /// Creates a node; its sequence number when `mode` is sequential.
    pub fn create<'a>(
        &'a self,
        kind: WriteKind,
        path: &'a str,
        data: &[u8],
        mode: Mode,
    ) -> impl Future<Output = Result<(Stat, Sequence), Fault>> + Send + 'a {
        tally::wrote(kind, 1);
        let options = mode.client().with_acls(Acls::new(&self.acls));
        let sent = self.client.create(path, data, &options);
        let answer = Self::bound_owned(self.sending(), sent);
        async move {
            answer
                .await
                .map(|(stat, sequence)| (stat, Sequence(sequence.into_i64())))
        }
    }

    /// A node's ACL as the servers keep it: an ACL set for the creator (`auth`) reads back as
    /// the identities the creating session had.
    pub fn get_acl<'a>(
        &'a self,
        path: &str,
    ) -> impl Future<Output = Result<NodeAcl, Fault>> + Send + use<'a> {
        let sent = self.client.get_acl(path);
        let answer = Self::bound_owned(self.sending(), sent);
        async move { answer.await.map(|(acl, _)| NodeAcl(acl)) }
    }

    /// Gives a node already there the ACL this session creates nodes with, whatever its ACL
    /// was (`zkcron acl apply`).
    pub fn set_own_acl<'a>(
        &'a self,
        path: &str,
    ) -> impl Future<Output = Result<(), Fault>> + Send + use<'a> {
        tally::wrote(WriteKind::Acl, 1);
        let sent = self.client.set_acl(path, &self.acls, None);
        let answer = Self::bound_owned(self.sending(), sent);
        async move { answer.await.map(|_| ()) }
    }

    /// Sets a node's data, at `version` when given; the new stat.
    pub fn set_data(
        &self,
        kind: WriteKind,
        path: &str,
        data: &[u8],
        version: Option<i32>,
    ) -> impl Future<Output = Result<Stat, Fault>> + Send + use<> {
        tally::wrote(kind, 1);
        let sent = self.client.set_data(path, data, version);
        Self::bound_owned(self.sending(), sent)
    }

    /// Deletes a node, at `version` when given.
    pub fn delete(
        &self,
        kind: WriteKind,
        path: &str,
        version: Option<i32>,
    ) -> impl Future<Output = Result<(), Fault>> + Send + use<> {
        tally::wrote(kind, 1);
        let sent = self.client.delete(path, version);
        Self::bound_owned(self.sending(), sent)
    }

    /// Deletes `path` (at `version`, when given); a node already gone is fine: whoever deleted
    /// it did what was asked.
    ///
    /// # Errors
    /// Any other fault (a version that moved, a node with children, …).
    pub async fn delete_if_there(
        &self,
        kind: WriteKind,
        path: &str,
        version: Option<i32>,
    ) -> Result<(), Fault> {
        match self.delete(kind, path, version).await {
            Ok(()) | Err(Fault::NoNode) => Ok(()),
            Err(fault) => Err(fault),
        }
    }

    /// Creates `path` and its missing ancestors as persistent nodes.
    ///
    /// Looks first: ZooKeeper checks the parent's CREATE permission before it reports
    /// NodeExists, so creating a node an operator made in a read-only directory would fail with
    /// NoAuth.
    ///
    /// # Errors
    /// A request failed (no auth, connection loss, …); existing nodes are fine.
    pub async fn ensure_persistent(&self, path: &str) -> Result<(), Fault> {
        if self.check_stat(path).await?.is_some() {
            return Ok(());
        }
        tally::wrote(WriteKind::Parents, 1);
        let options = CreateMode::Persistent.with_acls(Acls::new(&self.acls));
        Self::bound_owned(self.sending(), self.client.mkdir(path, &options)).await
    }

    /// A multi-op, counted as `kind` when committed.
    pub fn multi(&self, kind: WriteKind) -> Multi<'_> {
        Multi {
            zk: self,
            writer: self.client.new_multi_writer(),
            kind,
            ops: 0,
            checks: 0,
            fenced: false,
            bound: self.bound,
        }
    }

    /// A multi-op whose first op checks that `path` is at `version`: a failure of that check is
    /// [`MultiFault::Fenced`], told apart from the other ops'.
    ///
    /// # Errors
    /// The path is not valid.
    pub fn fenced(
        &self,
        kind: WriteKind,
        path: &str,
        version: Option<i32>,
    ) -> Result<Multi<'_>, Fault> {
        let mut multi = self.multi(kind);
        // -1: the node exists, at any version.
        multi.add_check_version(path, version.unwrap_or(-1))?;
        multi.fenced = true;
        Ok(multi)
    }

    /// `sent`'s answer within `bound`. `sent` is already on the wire: only its answer waits.
    async fn bound_owned<T>(
        sending: Sending,
        sent: impl Future<Output = Result<T, zookeeper_client::Error>> + Send,
    ) -> Result<T, Fault> {
        let answer = match sending.bound {
            None => sent.await.map_err(Fault::from),
            Some(bound) => match tokio::time::timeout(bound, sent).await {
                Ok(answer) => answer.map_err(Fault::from),
                Err(_) => Err(Fault::TimedOut(bound)),
            },
        };
        sending.noted(answer)
    }
}

/// What became of a session, as its state watcher reports it (in ZooKeeper's words, which the
/// log shows).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SessionEvent {
    /// Connected again (to a server that may write).
    SyncConnected,
    /// The connection is lost (or only a read-only server answers): requests wait.
    Disconnected,
    /// The servers refused the credentials.
    AuthFailed,
    /// The client gave up on the session; the servers may still hold it (see [`Resumable`]).
    Expired,
    /// The client was closed.
    Closed,
}

/// The states a session goes through; see [`Zk::states`].
pub struct States(zookeeper_client::StateWatcher);

impl States {
    /// The session's next state.
    pub async fn changed(&mut self) -> SessionEvent {
        use zookeeper_client::SessionState as S;
        match self.0.changed().await {
            S::SyncConnected => SessionEvent::SyncConnected,
            S::Disconnected | S::ConnectedReadOnly => SessionEvent::Disconnected,
            S::AuthFailed => SessionEvent::AuthFailed,
            S::Expired => SessionEvent::Expired,
            S::Closed => SessionEvent::Closed,
        }
    }
}

/// A session as a new connection can ask for it back (`zk::resume`).
#[derive(Debug, Clone)]
pub struct Resumable(pub(super) zookeeper_client::SessionInfo);

/// A one-time watch of a node or its children (see [`Zk::get_and_watch_data`]).
pub struct OneChange(zookeeper_client::OneshotWatcher);

impl OneChange {
    /// Waits for the change: what happened to the node, or `None` when the watch ended with
    /// the session (disconnected or expired) and what was read may be stale.
    pub async fn event(self) -> Option<NodeEvent> {
        NodeEvent::of(self.0.changed().await.event_type)
    }

    /// Waits for the change: `true` when the node changed, `false` when the watch ended with
    /// the session.
    pub async fn changed(self) -> bool {
        self.event().await.is_some()
    }
}

/// What happened to a watched node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NodeEvent {
    Created,
    Deleted,
    DataChanged,
    ChildrenChanged,
}

impl NodeEvent {
    /// `None` for the session's own events.
    pub(super) fn of(kind: zookeeper_client::EventType) -> Option<Self> {
        use zookeeper_client::EventType as E;
        match kind {
            E::NodeCreated => Some(Self::Created),
            E::NodeDeleted => Some(Self::Deleted),
            E::NodeDataChanged => Some(Self::DataChanged),
            E::NodeChildrenChanged => Some(Self::ChildrenChanged),
            E::Session => None,
        }
    }
}

/// One op's answer in a multi-op.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Written {
    Check,
    Delete,
    Create { path: String, stat: Stat },
    SetData { stat: Stat },
}

/// Why a multi-op was not applied (none of its ops were).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MultiFault {
    /// The request itself failed: its outcome may be unknown (see [`Fault::is_unknown_outcome`]).
    #[error("{0}")]
    Request(Fault),
    /// A fenced multi's check failed: the fence moved.
    #[error("the fence check failed: {0}")]
    Fenced(Fault),
    /// The op at `index` failed (counted after a fenced multi's check).
    #[error("op {index} failed: {fault}")]
    Op { index: usize, fault: Fault },
}

impl MultiFault {
    /// The fault, whichever op it was.
    pub fn fault(&self) -> &Fault {
        match self {
            Self::Request(fault) | Self::Fenced(fault) | Self::Op { fault, .. } => fault,
        }
    }
}

/// A multi-op being built; see [`Zk::multi`].
pub struct Multi<'a> {
    zk: &'a Zk,
    writer: MultiWriter<'a>,
    kind: WriteKind,
    ops: usize,
    checks: usize,
    fenced: bool,
    bound: Option<Duration>,
}

impl<'a> Multi<'a> {
    /// Adds a check that `path` is at `version`.
    ///
    /// # Errors
    /// The path is not valid.
    pub fn add_check_version(&mut self, path: &str, version: i32) -> Result<(), Fault> {
        self.writer.add_check_version(path, version)?;
        self.checks += 1;
        Ok(())
    }

    /// Adds a create.
    ///
    /// # Errors
    /// The path is not valid.
    pub fn add_create(&mut self, path: &str, data: &[u8], mode: Mode) -> Result<(), Fault> {
        let options = mode.client().with_acls(Acls::new(&self.zk.acls));
        self.writer.add_create(path, data, &options)?;
        self.ops += 1;
        Ok(())
    }

    /// Adds a set-data, at `version` when given.
    ///
    /// # Errors
    /// The path is not valid.
    pub fn add_set_data(
        &mut self,
        path: &str,
        data: &[u8],
        version: Option<i32>,
    ) -> Result<(), Fault> {
        self.writer.add_set_data(path, data, version)?;
        self.ops += 1;
        Ok(())
    }

    /// Adds a delete, at `version` when given.
    ///
    /// # Errors
    /// The path is not valid.
    pub fn add_delete(&mut self, path: &str, version: Option<i32>) -> Result<(), Fault> {
        self.writer.add_delete(path, version)?;
        self.ops += 1;
        Ok(())
    }

    /// Not bounded in time: a claim, whose answer decides and is read back when late, is
    /// bounded by its caller.
    #[must_use]
    pub fn unbounded(mut self) -> Self {
        self.bound = None;
        self
    }

    /// Sends it; each op's answer in order (a fenced multi's check left out).
    pub fn commit(
        mut self,
    ) -> impl Future<Output = Result<Vec<Written>, MultiFault>> + Send + use<'a> {
        tally::wrote_checked(self.kind, self.ops, self.checks);
        let sent = self.writer.commit();
        let sending = Sending {
            bound: self.bound,
            ..self.zk.sending()
        };
        let fenced = self.fenced;
        async move {
            let answer = match sending.bound {
                None => sent.await,
                Some(bound) => match tokio::time::timeout(bound, sent).await {
                    Ok(answer) => answer,
                    Err(_) => return Err(MultiFault::Request(Fault::TimedOut(bound))),
                },
            };
            let outcome = match answer {
                Ok(results) => {
                    let skip = usize::from(fenced);
                    Ok(results.into_iter().skip(skip).map(Written::from).collect())
                }
                Err(MultiWriteError::RequestFailed { source }) => {
                    Err(MultiFault::Request(source.into()))
                }
                Err(MultiWriteError::OperationFailed { index: 0, source }) if fenced => {
                    Err(MultiFault::Fenced(source.into()))
                }
                Err(MultiWriteError::OperationFailed { index, source }) => Err(MultiFault::Op {
                    index: index - usize::from(fenced),
                    fault: source.into(),
                }),
            };
            // An op's refusal is the server's answer to the whole request.
            if !matches!(&outcome, Err(MultiFault::Request(fault)) if !fault.is_answer()) {
                sending.answered.note(sending.sent);
            }
            outcome
        }
    }
}

impl From<MultiWriteResult> for Written {
    fn from(result: MultiWriteResult) -> Self {
        match result {
            MultiWriteResult::Check => Self::Check,
            MultiWriteResult::Delete => Self::Delete,
            MultiWriteResult::Create { path, stat } => Self::Create { path, stat },
            MultiWriteResult::SetData { stat } => Self::SetData { stat },
            // A kind of op zkcron never adds.
            _ => Self::Check,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sequence_prints_as_the_server_names_the_node() {
        assert_eq!(Sequence(42).to_string(), "0000000042");
        assert_eq!(
            Sequence(i64::from(i32::MAX) + 1).to_string(),
            "0000000002147483648"
        );
    }

    #[test]
    fn the_clients_errors_become_the_faults_callers_tell_apart() {
        use zookeeper_client::Error as E;
        assert_eq!(Fault::from(E::NoNode), Fault::NoNode);
        assert_eq!(Fault::from(E::NodeExists), Fault::NodeExists);
        assert_eq!(Fault::from(E::BadVersion), Fault::BadVersion);
        assert_eq!(Fault::from(E::AuthFailed), Fault::NoAuth);
        assert!(Fault::from(E::ConnectionLoss).is_unknown_outcome());
        assert!(Fault::TimedOut(Duration::from_secs(1)).is_unknown_outcome());
        assert!(Fault::from(E::SessionExpired).is_unknown_outcome());
        assert!(!Fault::from(E::SessionMoved).is_unknown_outcome());
        assert!(!Fault::from(E::QuotaExceeded).is_unknown_outcome());
        assert!(Fault::from(E::UnexpectedError("?".into())).is_unknown_outcome());
    }
}
