//! `zk::watch::RecursiveWatch` against a real server: what its five followers (the pauses, the
//! due markers, the members' drift, the groups' balance, the console's index) rely on.

use crate::support;

use std::time::Duration;

use support::ZkEnsemble;
use tokio::time::timeout;
use zkcron::zk::watch::{Change, RecursiveWatch};
use zkcron::zk::{NodeEvent, REQUEST_BOUND, Zk};
use zookeeper_client::{Acls, Client, CreateMode};

/// Long enough that the client keeps its session across the restart below (it gives up on
/// its own only after 1.4 × this without a server).
const SESSION: Duration = Duration::from_secs(20);
/// Bound on each change arriving: a watch event or a session state comes within a round trip,
/// a disconnection within 0.4 × the client's read timeout of a dead server; a restarted
/// server serves within a few seconds (its start is bounded by the harness).
/// The second session's: its client gives up on it within a few seconds of the server's kill.
const DOOMED_SESSION: Duration = Duration::from_secs(2);
const EACH_CHANGE: Duration = Duration::from_secs(15);

async fn next(watch: &mut RecursiveWatch, what: &str) -> Option<Change> {
    timeout(EACH_CHANGE, watch.changed())
        .await
        .unwrap_or_else(|_| panic!("no change within {EACH_CHANGE:?}: waited for {what}"))
}

#[tokio::test]
async fn a_watch_reads_all_first_again_after_a_disconnection_and_ends_with_its_session() {
    let mut zk = ZkEnsemble::start(1).expect("a server");
    let client = Client::connector()
        .with_session_timeout(SESSION)
        .connect(&zk.connect_string())
        .await
        .expect("a session");
    let persistent = CreateMode::Persistent.with_acls(Acls::anyone_all());
    client.create("/w", b"", &persistent).await.expect("/w");

    let session = Zk::new(client.clone(), &Acls::anyone_all(), REQUEST_BOUND);
    let mut watch = RecursiveWatch::add(&session, "/w").await.expect("a watch");
    assert_eq!(
        next(&mut watch, "the first change").await,
        Some(Change::ReadAll),
        "a follower reads everything before it follows"
    );
    client.create("/w/a", b"", &persistent).await.expect("/w/a");
    client
        .create("/w/a/b", b"", &persistent)
        .await
        .expect("/w/a/b");
    for path in ["/w/a", "/w/a/b"] {
        assert_eq!(
            next(&mut watch, path).await,
            Some(Change::Node {
                path: path.to_owned(),
                kind: NodeEvent::Created
            }),
            "a node created below the path, at any depth"
        );
    }

    // A watch ends with its session: a second client's, with a short timeout, which its
    // client gives up on by itself while the server is down (about 1.4 × the timeout).
    let doomed = Client::connector()
        .with_session_timeout(DOOMED_SESSION)
        .connect(&zk.connect_string())
        .await
        .expect("a second session");
    let doomed = Zk::new(doomed, &Acls::anyone_all(), REQUEST_BOUND);
    let mut ending = RecursiveWatch::add(&doomed, "/w").await.expect("its watch");
    assert_eq!(
        next(&mut ending, "its first change").await,
        Some(Change::ReadAll)
    );

    zk.kill(0).expect("kill the server");
    assert_eq!(
        next(&mut watch, "the disconnection").await,
        Some(Change::Disconnected)
    );
    loop {
        match next(&mut ending, "the end of the short session").await {
            None => break,
            Some(Change::Disconnected) => {}
            Some(other) => panic!("a change while no server runs: {other:?}"),
        }
    }
    assert_eq!(
        ending.changed().await,
        None,
        "and ever after, without polling the client's watcher again (it panics)"
    );
    zk.restart(0).await.expect("restart the server");
    assert_eq!(
        next(&mut watch, "the re-read after reconnecting").await,
        Some(Change::ReadAll),
        "events may have been dropped while disconnected (ZOOKEEPER-4698): read all again"
    );
    client.delete("/w/a/b", None).await.expect("delete /w/a/b");
    assert_eq!(
        next(&mut watch, "the deletion").await,
        Some(Change::Node {
            path: "/w/a/b".to_owned(),
            kind: NodeEvent::Deleted
        }),
        "the watch still follows on the same session"
    );
}
