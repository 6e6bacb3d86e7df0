//! The tick claim as a fence, against a real ensemble with real sessions: two sessions that both
//! believe they own the lock, an expired session, compare-and-set updates, and history reading
//! past garbage (issue "Exactly once per tick").

use crate::support;

use std::future::Future;
use std::time::Duration;

use zookeeper_client::{Acls, Client, CreateMode, SessionState};

use support::proxy::{Fault, Proxy};
use support::{shared_ensemble, wait_until};
use zkcron::delayed::{Submission, SubmissionId};
use zkcron::layout::LedgerPaths;
use zkcron::layout::LockPaths;
use zkcron::ledger::submissions::{self, SubmissionError};
use zkcron::ledger::{self, ClaimError, Ledger, UpdateError};
use zkcron::run::{self, ClaimMode, RunRecord, RunStatus};
use zkcron::zk::{Fault as ZkFault, REQUEST_BOUND, Zk};
use zkcron::{FencingToken, JobName, NodeId, SessionId};

/// Bound on a client noticing that the server expired its session: the server closes the
/// connection with the session, the client reconnects at once and is refused. Milliseconds
/// usually; the slack is for a JVM's GC pause or a busy core on a loaded 2-core machine.
const EXPIRY_NOTICED: Duration = Duration::from_secs(10);

fn record(job: &str, tick: i64, node: &str, token: i32) -> RunRecord {
    RunRecord::claimed(
        &JobName::new(job),
        tick,
        (&NodeId::new(node), "127.0.0.1"),
        FencingToken(token),
        tick - 250,
    )
}

/// Two sessions on one fresh chroot, and the ledger paths of a lock group with its epoch node.
async fn setup(test: &str) -> (Client, Client, LedgerPaths, String) {
    let connect = shared_ensemble()
        .isolated_connect_string(test)
        .await
        .expect("chroot");
    let a = Client::connect(&connect).await.expect("session a");
    let b = Client::connect(&connect).await.expect("session b");
    let lock = LockPaths::new("/zkcron", "g");
    let open = CreateMode::Persistent.with_acls(Acls::anyone_all());
    a.mkdir(&lock.dir, &open).await.expect("lock dir");
    a.create(&lock.epoch, b"", &open).await.expect("epoch");
    (a, b, LedgerPaths::new(&lock), connect)
}

/// `client`'s session as the library takes it. The tests keep the raw client for what they
/// plant and probe themselves.
fn door(client: &Client) -> Ledger {
    Ledger::new(Zk::new(client.clone(), &Acls::anyone_all(), REQUEST_BOUND))
}

/// `path`'s record as another session sees it once that session's server has caught up with
/// the leader: without the `sync` it may serve a read from before the write it is checking.
async fn read_fresh(client: &Client, path: &str) -> Option<RunRecord> {
    client.sync(path).await.expect("sync");
    ledger::read_record(&door(client), path).await
}

/// An acquisition as the lock driver makes it: the epoch's version goes up by one.
async fn acquire(client: &Client, paths: &LedgerPaths) -> i32 {
    client
        .set_data(&paths.epoch, b"{}", None)
        .await
        .expect("bump epoch")
        .version
}

#[tokio::test]
async fn two_believed_owners_claim_each_tick_at_most_once() {
    let (a, b, paths, _) = setup("ledger-split").await;
    let (za, zb) = (door(&a), door(&b));
    let job = JobName::new("report");
    let token_a = acquire(&a, &paths).await;

    let claimed = ledger::claim(
        &za,
        &paths,
        record("report", 1000, "a", token_a),
        ClaimMode::Create,
        false,
    )
    .await;
    let claim = claimed
        .expect("the owner claims its tick (the job's first: its parent is made on the way)");
    assert_eq!(claim.path, paths.record(&job, 1000));

    // b believes it owns the lock with the same token (it has not acquired): the record fences it.
    let twice = ledger::claim(
        &zb,
        &paths,
        record("report", 1000, "b", token_a),
        ClaimMode::Create,
        false,
    )
    .await;
    assert!(
        matches!(
            &twice,
            Err(ClaimError::AlreadyClaimed { job: j, scheduled_unix_ms: 1000 }) if *j == job
        ),
        "a second claim of tick 1000 is refused as already claimed: {twice:?}"
    );

    // b acquires; a wakes up still believing it owns the lock: its next claim fails the check.
    let token_b = acquire(&b, &paths).await;
    assert_eq!(token_b, token_a + 1);
    let stale = ledger::claim(
        &za,
        &paths,
        record("report", 2000, "a", token_a),
        ClaimMode::Create,
        false,
    )
    .await;
    assert!(
        matches!(stale, Err(ClaimError::NotOwner { token }) if token == FencingToken(token_a)),
        "a stale token claims nothing, refused by the epoch check at that token: {stale:?}"
    );
    let owner = ledger::claim(
        &zb,
        &paths,
        record("report", 2000, "b", token_b),
        ClaimMode::Create,
        false,
    )
    .await;
    assert!(owner.is_ok(), "the real owner claims the tick: {owner:?}");
    let stored = read_fresh(&b, &paths.record(&job, 2000))
        .await
        .expect("record");
    assert_eq!(stored.node_id, NodeId::new("b"), "the tick is b's");
}

#[tokio::test]
async fn an_expired_session_claims_nothing() {
    let (a, b, paths, _) = setup("ledger-expired").await;
    let (za, _zb) = (door(&a), door(&b));
    let token = acquire(&a, &paths).await;
    support::expire_session(&shared_ensemble().connect_string(), a.session())
        .await
        .expect("expire a");
    // The server closes a's connection with the session; a learns of the expiry when it
    // reconnects. Until then a request could fail with ConnectionLoss instead, which would not
    // show that an expired session is fenced.
    wait_until("session a sees its expiry", EXPIRY_NOTICED, || {
        let expired = a.state() == SessionState::Expired;
        async move { expired }
    })
    .await;
    let claimed = ledger::claim(
        &za,
        &paths,
        record("report", 1000, "a", token),
        ClaimMode::Create,
        false,
    )
    .await;
    assert!(
        matches!(
            &claimed,
            Err(ClaimError::Zk {
                source: ZkFault::SessionExpired,
                ..
            })
        ),
        "an expired session cannot claim, and the error says it expired: {claimed:?}"
    );
    let job = JobName::new("report");
    assert!(
        read_fresh(&b, &paths.record(&job, 1000)).await.is_none(),
        "nothing was written"
    );
}

#[tokio::test]
async fn records_update_by_compare_and_set_only() {
    let (a, b, paths, _) = setup("ledger-cas").await;
    let (za, zb) = (door(&a), door(&b));
    let token = acquire(&a, &paths).await;
    let mut claim = ledger::claim(
        &za,
        &paths,
        record("report", 1000, "a", token),
        ClaimMode::Create,
        false,
    )
    .await
    .expect("claim");
    let mut stale = claim.clone();

    claim.record.status = RunStatus::Running;
    ledger::update(&za, &mut claim).await.expect("our update");
    assert_eq!(claim.version, 1);

    // Someone else's view of the record is one version behind: it must not overwrite ours.
    stale.record.status = RunStatus::Interrupted;
    let conflict = ledger::update(&zb, &mut stale).await;
    assert!(
        matches!(
            &conflict,
            Err(UpdateError::Conflict { path, stored: Some(RunStatus::Running) })
                if *path == claim.path
        ),
        "a stale view of the record is refused as a conflict on that record, naming what is \
         stored: {conflict:?}"
    );
    let stored = read_fresh(&b, &claim.path).await.expect("record");
    assert_eq!(stored.status, RunStatus::Running);
}

#[tokio::test]
async fn history_is_newest_first_and_skips_garbage() {
    let (a, _, paths, _) = setup("ledger-history").await;
    let za = door(&a);
    let token = acquire(&a, &paths).await;
    for tick in [1000, 3000, 2000] {
        ledger::claim(
            &za,
            &paths,
            record("report", tick, "a", token),
            ClaimMode::Create,
            false,
        )
        .await
        .expect("claim");
    }
    let job = JobName::new("report");
    let open = CreateMode::Persistent.with_acls(Acls::anyone_all());
    a.create(&format!("{}/not-a-tick", paths.job_runs(&job)), b"x", &open)
        .await
        .expect("garbage name");
    a.create(&paths.record(&job, 4000), b"\xffnot json", &open)
        .await
        .expect("garbage record");

    let records = ledger::history(&za, &paths, &job, 10)
        .await
        .expect("history");
    let ticks: Vec<i64> = records.iter().map(|r| r.scheduled_unix_ms).collect();
    assert_eq!(ticks, [3000, 2000, 1000], "newest first, garbage skipped");
    let limited = ledger::history(&za, &paths, &job, 2)
        .await
        .expect("history");
    assert_eq!(limited.len(), 2);
    let none = ledger::history(&za, &paths, &JobName::new("never-ran"), 10)
        .await
        .expect("history");
    assert!(
        none.is_empty(),
        "a job without records has an empty history"
    );
}

#[tokio::test]
async fn a_guarded_claim_refuses_while_a_run_is_alive_until_it_finishes() {
    let (a, b, paths, _) = setup("ledger-guard").await;
    let (za, _zb) = (door(&a), door(&b));
    let token = acquire(&a, &paths).await;
    let mut first = ledger::claim(
        &za,
        &paths,
        record("slow", 1000, "a", token),
        ClaimMode::Create,
        true,
    )
    .await
    .expect("guarded claim");
    assert_eq!(
        first.guard.as_deref(),
        Some(paths.running(&JobName::new("slow")).as_str())
    );
    let blocked = ledger::claim(
        &za,
        &paths,
        record("slow", 2000, "a", token),
        ClaimMode::Create,
        true,
    )
    .await;
    let job = JobName::new("slow");
    assert!(
        matches!(&blocked, Err(ClaimError::RunAlive { job: j }) if *j == job),
        "a guarded claim while the job's run is alive is refused as run-alive: {blocked:?}"
    );
    assert!(
        read_fresh(&b, &paths.record(&job, 2000)).await.is_none(),
        "all or nothing: no record"
    );

    first.record.status = RunStatus::Succeeded;
    ledger::finish(&za, &mut first, &[])
        .await
        .expect("finish releases the guard with the record");
    let stored = read_fresh(&b, &first.path).await.expect("record");
    assert_eq!(stored.status, RunStatus::Succeeded);
    let next = ledger::claim(
        &za,
        &paths,
        record("slow", 2000, "a", token),
        ClaimMode::Create,
        true,
    )
    .await;
    assert!(next.is_ok(), "the guard is gone with the run: {next:?}");
}

#[tokio::test]
async fn our_own_write_with_a_lost_reply_is_reconciled() {
    let (a, b, paths, _) = setup("ledger-lost-reply").await;
    let (za, _zb) = (door(&a), door(&b));
    let token = acquire(&a, &paths).await;
    let mut claim = ledger::claim(
        &za,
        &paths,
        record("report", 1000, "a", token),
        ClaimMode::Create,
        false,
    )
    .await
    .expect("claim");
    // We sent `running`; it was stored, but its reply never came: our claim still says version 0.
    claim.record.status = RunStatus::Running;
    a.set_data(&claim.path, &claim.record.to_bytes(), Some(claim.version))
        .await
        .expect("the write that went through");
    claim.sent = claim.record.clone();

    claim.record.status = RunStatus::Succeeded;
    ledger::update(&za, &mut claim)
        .await
        .expect("reconciled: the stored record is what we sent");
    let stored = read_fresh(&b, &claim.path).await.expect("record");
    assert_eq!(stored.status, RunStatus::Succeeded);
    assert_eq!(claim.version, 2);
}

/// A claim whose reply never came was applied all the same — its record and its `running/<job>`
/// guard. Taken for not claimed, the guard held by our living session would refuse the job's
/// every later tick. Read back, the claim is ours, and finishing it releases the guard.
#[tokio::test]
async fn a_claim_whose_reply_was_lost_is_read_back_as_ours() {
    let (_, b, paths, connect) = setup("ledger-claim-lost-reply").await;
    let zb = door(&b);
    let chroot = &connect[connect.find('/').expect("a chroot")..];
    let upstream = shared_ensemble()
        .server_address(0)
        .parse()
        .expect("address");
    let proxy = Proxy::start(upstream).await.expect("proxy");
    // A session that outlives the fault: the claim's guard lives as long as it does.
    let a = Client::connector()
        .with_session_timeout(Duration::from_secs(30))
        .connect(&format!("{}{chroot}", proxy.addr()))
        .await
        .expect("session through the proxy");
    // Unbounded, as the raw client it wraps: the read-back after the fault waits for the
    // session to answer again, however long its reconnection takes.
    let za = Ledger::new(Zk::new(a.clone(), &Acls::anyone_all(), REQUEST_BOUND).unbounded());
    let token = acquire(&a, &paths).await;
    let session = SessionId(a.session_id().0);
    let plan = |job: &str, tick, node| {
        ledger::ClaimPlan::new(
            &paths,
            record(job, tick, node, token),
            ClaimMode::Create,
            true,
            ledger::OpenRuns::ByRecord,
        )
    };
    let never_sent = plan("guarded", 1000, "a").read_back(&za, session).await;
    assert!(
        matches!(never_sent, Ok(None)),
        "nothing sent, nothing applied: {never_sent:?}"
    );

    let job = JobName::new("guarded");
    // As the daemon does when it starts firing: the claim is then one round trip.
    ledger::ensure_parents(&za, &paths, [&job].into_iter())
        .await
        .expect("record parents");
    proxy.set(Fault::MuteReplies);
    let lost = plan("guarded", 1000, "a");
    let answer = tokio::time::timeout(Duration::from_secs(1), lost.clone().send_alone(&za)).await;
    assert!(answer.is_err(), "no reply passes the proxy: {answer:?}");
    let path = paths.record(&job, 1000);
    wait_until(
        "the unanswered claim applied",
        Duration::from_secs(10),
        || {
            let (b, path) = (&b, &path);
            async move { read_fresh(b, path).await.is_some() }
        },
    )
    .await;
    proxy.set(Fault::None);

    let mut claim = lost
        .read_back(&za, session)
        .await
        .expect("read back once the session answers again")
        .expect("the stored record is the one sent");
    assert_eq!(claim.version, 0);
    assert_eq!(claim.guard.as_deref(), Some(paths.running(&job).as_str()));
    let next = plan("guarded", 2000, "a").send_alone(&za).await;
    assert!(
        matches!(next, Err(ClaimError::RunAlive { .. })),
        "the lost claim holds the job's guard: {next:?}"
    );
    claim.record.status = RunStatus::Succeeded;
    ledger::finish(&za, &mut claim, &[])
        .await
        .expect("the read-back claim finishes like any other");
    let next = plan("guarded", 2000, "a").send_alone(&za).await;
    assert!(
        next.is_ok(),
        "its guard went with its final record: {next:?}"
    );

    // Someone else's record for the tick is theirs, whatever our reply said.
    let theirs = ledger::claim(
        &zb,
        &paths,
        record("guarded", 3000, "b", token),
        ClaimMode::Create,
        false,
    )
    .await;
    assert!(theirs.is_ok(), "{theirs:?}");
    let ours = plan("guarded", 3000, "a").read_back(&za, session).await;
    assert!(
        matches!(ours, Err(ClaimError::AlreadyClaimed { .. })),
        "{ours:?}"
    );
}

/// A pending submission `id` of job `close`, due at `due`, written as the CLI does.
async fn submit(client: &Ledger, paths: &LedgerPaths, id: &str, due: i64) -> SubmissionId {
    let id = SubmissionId::parse(id).expect("valid id");
    let submission = Submission {
        job: JobName::new("close"),
        due_unix_ms: due,
        submitted_unix_ms: due - 1000,
        payload: b"p".to_vec(),
        requested_by: None,
        anonymous: false,
        marker_names_job: false,
        retry_of: None,
        traceparent: None,
        after: None,
    };
    let submitted = submissions::submit(client, &paths.delayed, &id, &submission).await;
    assert_eq!(
        submitted.expect("submitted"),
        submissions::Submitted::Created
    );
    id
}

fn submission_record(id: &SubmissionId, due: i64, node: &str, token: i32) -> RunRecord {
    RunRecord::claimed_submission(
        &JobName::new("close"),
        due,
        id,
        (&NodeId::new(node), "127.0.0.1"),
        FencingToken(token),
        due - 250,
    )
}

#[tokio::test]
async fn two_believed_owners_start_a_submission_at_most_once_and_a_stale_token_none() {
    let (a, b, paths, _) = setup("ledger-submission-fence").await;
    let (za, zb) = (door(&a), door(&b));
    let token = acquire(&a, &paths).await;
    let first = submit(&za, &paths, "order-1", 5000).await;
    let claim = |client, node, token| {
        ledger::claim(
            client,
            &paths,
            submission_record(&first, 5000, node, token),
            ClaimMode::Create,
            false,
        )
    };
    let claimed = claim(&za, "a", token).await.expect("the owner claims it");
    assert!(
        claimed.open.is_none() && claimed.record.open_by_record,
        "its record alone keeps it open (format 2)"
    );
    let stored = ledger::read_record(&za, &claimed.path)
        .await
        .expect("record");
    assert!(stored.open_by_record, "stored so: {stored:?}");
    assert_eq!(
        a.check_stat(&paths.delayed.pending(5000, &first, None))
            .await
            .expect("stat"),
        None,
        "no longer pending"
    );
    // b believes it owns the lock with the same token: the submission is gone from pending.
    let twice = claim(&zb, "b", token).await;
    assert!(
        matches!(twice, Err(ClaimError::AlreadyClaimed { .. })),
        "claimed once only: {twice:?}"
    );

    // b acquires; a, frozen until now, claims the next submission with its stale token.
    let second = submit(&za, &paths, "order-2", 6000).await;
    let token_b = acquire(&b, &paths).await;
    let stale = ledger::claim(
        &za,
        &paths,
        submission_record(&second, 6000, "a", token),
        ClaimMode::Create,
        false,
    )
    .await;
    assert!(
        matches!(stale, Err(ClaimError::NotOwner { .. })),
        "{stale:?}"
    );
    assert!(
        a.check_stat(&paths.delayed.pending(6000, &second, None))
            .await
            .expect("stat")
            .is_some(),
        "a failed claim leaves the submission pending"
    );
    let owner = ledger::claim(
        &zb,
        &paths,
        submission_record(&second, 6000, "b", token_b),
        ClaimMode::Create,
        false,
    )
    .await
    .expect("the real owner claims it");

    // A handoff gives the claimed, unstarted submission back: pending again, not open.
    ledger::withdraw(&zb, &paths, &owner)
        .await
        .expect("withdrawn");
    assert!(
        b.check_stat(&paths.delayed.pending(6000, &second, None))
            .await
            .expect("stat")
            .is_some(),
        "pending again for the next owner"
    );
    assert_eq!(
        b.check_stat(&owner.path).await.expect("stat"),
        None,
        "its record is gone with the claim"
    );
    let job = JobName::new("close");
    let marked = zkcron::ledger::due::open_runs(&zb, &paths.delayed, &job).await;
    assert!(
        marked.map_or(true, |open| open.is_empty()),
        "no open marker was made"
    );
}

#[tokio::test]
async fn a_cancel_and_a_claim_of_one_submission_cannot_both_succeed() {
    let (a, b, paths, _) = setup("ledger-submission-cancel").await;
    let (za, zb) = (door(&a), door(&b));
    let token = acquire(&a, &paths).await;
    let id = submit(&za, &paths, "order-3", 7000).await;
    let claimed = ledger::claim(
        &za,
        &paths,
        submission_record(&id, 7000, "a", token),
        ClaimMode::Create,
        false,
    )
    .await
    .expect("claimed");
    let cancelled = submissions::cancel(&zb, &paths.delayed, &paths, &id, 7001).await;
    assert!(
        matches!(&cancelled, Err(SubmissionError::NotPending { status, .. }) if status == "claimed"),
        "{cancelled:?}"
    );
    // The run ends: its final record is all there is to write (no open marker, format 2).
    let mut finished = claimed;
    assert_eq!(finished.open, None);
    finished.record.status = RunStatus::Succeeded;
    ledger::finish(&za, &mut finished, &[])
        .await
        .expect("final record");
    let stored = ledger::read_record(&za, &finished.path)
        .await
        .expect("record");
    assert_eq!(
        (stored.status, stored.submission_id),
        (RunStatus::Succeeded, Some(id))
    );
}

#[tokio::test]
async fn pruning_a_submissions_record_frees_its_id_but_never_prunes_an_open_run() {
    let (a, _, paths, _) = setup("ledger-submission-prune").await;
    let za = door(&a);
    let token = acquire(&a, &paths).await;
    let mut claims = Vec::new();
    for (n, due) in [(1, 1000), (2, 2000), (3, 3000)] {
        let id = submit(&za, &paths, &format!("p-{n}"), due).await;
        let claim = ledger::claim(
            &za,
            &paths,
            submission_record(&id, due, "a", token),
            ClaimMode::Create,
            false,
        )
        .await
        .expect("claimed");
        claims.push((id, claim));
    }
    // p-1 is still running; p-2 and p-3 have ended.
    for (_, claim) in &mut claims[1..] {
        claim.record.status = RunStatus::Succeeded;
        ledger::finish(&za, claim, &[]).await.expect("final record");
    }
    // The runs ended in 1970: their `dedup_window` has long passed, so the ids go too.
    let remember = remember_at(chrono::Utc::now().timestamp_millis(), 3600);
    let deleted = prune_close(&za, &paths, 1, remember).await;
    assert_eq!(deleted, 1, "p-2 goes; p-1 is open; p-3 is the newest kept");
    let exists = |path: String| {
        let a = &a;
        async move { a.check_stat(&path).await.expect("stat").is_some() }
    };
    assert!(
        exists(claims[0].1.path.clone()).await,
        "an open run's record stays"
    );
    assert!(!exists(claims[1].1.path.clone()).await);
    assert!(
        !exists(paths.delayed.submission(&claims[1].0)).await,
        "its id is free"
    );
    assert!(exists(paths.delayed.submission(&claims[2].0)).await);
    // The freed id takes a new submission.
    submit(&za, &paths, "p-2", 9000).await;
}

/// A prune larger than one multi-op goes a multi-op's worth at a time (its reads too, so that the
/// claims sent meanwhile never wait behind a thousand of them): every slice's decisions are as
/// one prune's, an open run in a later slice is kept, and the newest `keep` stay.
#[tokio::test]
async fn a_prune_of_many_slices_deletes_every_ended_record_beyond_keep_and_no_open_one() {
    let (a, _, paths, _) = setup("ledger-prune-slices").await;
    let za = door(&a);
    let token = acquire(&a, &paths).await;
    let due = 1_800_000_000_000;
    let (runs, open_at, keep) = (130, 77, 10);
    let mut open = None;
    for n in 0..runs {
        let id = submit(&za, &paths, &format!("s-{n:03}"), due + n).await;
        if n == open_at {
            open = Some(
                claim_submission(&za, &paths, &id, due + n, token)
                    .await
                    .path,
            );
        } else {
            run_to_the_end(&za, &paths, &id, due + n, token).await;
        }
    }
    let job = JobName::new("close");
    let pruned = prune_close(&za, &paths, keep, remember_at(due + 600_000, 3600)).await;
    let beyond_keep = usize::try_from(runs).expect("a count") - keep;
    assert_eq!(
        pruned,
        beyond_keep - 1,
        "every ended record beyond the newest {keep} goes, across three slices"
    );
    let left = a
        .list_children(&paths.job_runs(&job))
        .await
        .expect("listed");
    assert_eq!(
        left.len(),
        keep + 1,
        "the newest {keep} and the open run: {left:?}"
    );
    let open = open.expect("claimed");
    assert!(
        a.check_stat(&open).await.expect("stat").is_some(),
        "the open run's record in the second slice stays"
    );
}

/// Prunes job "close" down to its newest `keep` records; how many were deleted.
async fn prune_close(
    a: &Ledger,
    paths: &LedgerPaths,
    keep: usize,
    remember: ledger::Remember,
) -> usize {
    ledger::prune(
        a,
        paths,
        &JobName::new("close"),
        zkcron::layout::Keep::Records(keep),
        remember,
    )
    .await
    .expect("pruned")
}

fn remember_at(now_unix_ms: i64, window_secs: u64) -> ledger::Remember {
    ledger::Remember {
        now_unix_ms,
        window: Duration::from_secs(window_secs),
    }
}

/// Claims submission `id` due at `due` for node "a" under `token`: its run is open.
async fn claim_submission(
    a: &Ledger,
    paths: &LedgerPaths,
    id: &SubmissionId,
    due: i64,
    token: i32,
) -> run::Claim {
    ledger::claim(
        a,
        paths,
        submission_record(id, due, "a", token),
        ClaimMode::Create,
        false,
    )
    .await
    .expect("claimed")
}

/// Claims and finishes submission `id` due at `due` (its run ends at `due`).
async fn run_to_the_end(a: &Ledger, paths: &LedgerPaths, id: &SubmissionId, due: i64, token: i32) {
    let mut claim = claim_submission(a, paths, id, due, token).await;
    claim.record.status = RunStatus::Succeeded;
    claim.record.finished_unix_ms = Some(due);
    ledger::finish(a, &mut claim, &[])
        .await
        .expect("final record");
}

/// Issue 24: an id is remembered for the job's `dedup_window` after its run ended, not while
/// `history` keeps its record. Pruned earlier, the record leaves a tombstone without the payload
/// that answers a resubmit; the sweep after the window frees the id by its forget list.
#[tokio::test]
async fn a_pruned_submission_leaves_a_tombstone_until_its_window_has_passed() {
    let (a, _, paths, _) = setup("ledger-submission-tombstone").await;
    let za = door(&a);
    let token = acquire(&a, &paths).await;
    let due = 1_800_000_000_000; // the run "ends" at due; the clock below is set from there
    let mut ids = Vec::new();
    for n in 0..5 {
        let id = submit(&za, &paths, &format!("t-{n}"), due + n).await;
        run_to_the_end(&za, &paths, &id, due + n, token).await;
        ids.push(id);
    }
    let job = JobName::new("close");
    let ten_minutes_later = due + 600_000;
    let pruned = prune_close(&za, &paths, 2, remember_at(ten_minutes_later, 3600)).await;
    assert_eq!(pruned, 3, "t-0 to t-2 go, t-3 and t-4 are kept");
    let first = &ids[0];
    let (_, state) = submissions::show(&za, &paths.delayed, &paths, first)
        .await
        .expect("read")
        .expect("remembered");
    let submissions::SubmissionState::Remembered(tombstone) = state else {
        panic!("not remembered: {state:?}");
    };
    assert_eq!(tombstone.remembered_until_unix_ms, due + 3_600_000);
    assert_eq!(tombstone.payload_bytes, 1);
    let (data, _) = a
        .get_data(&paths.delayed.submission(first))
        .await
        .expect("tombstone");
    assert!(
        data.len() < 300,
        "a tombstone is small: {} bytes",
        data.len()
    );
    // A client retrying the same request: a no-op. Another request under the id: refused.
    let same = Submission {
        job: job.clone(),
        due_unix_ms: due,
        submitted_unix_ms: ten_minutes_later,
        payload: b"p".to_vec(),
        requested_by: None,
        anonymous: false,
        marker_names_job: false,
        retry_of: None,
        traceparent: None,
        after: None,
    };
    let again = submissions::submit(&za, &paths.delayed, first, &same).await;
    assert_eq!(
        again.expect("answered"),
        submissions::Submitted::AlreadyThere
    );
    let other = Submission {
        payload: b"q".to_vec(),
        ..same.clone()
    };
    let conflict = submissions::submit(&za, &paths.delayed, first, &other).await;
    assert!(
        matches!(conflict, Err(SubmissionError::Conflict { .. })),
        "{conflict:?}"
    );
    assert!(
        submissions::read(&za, &paths.delayed, first)
            .await
            .expect("read")
            .is_none(),
        "a tombstone is no request: an owner never fires it"
    );
    // Before the window's minute has passed, the sweep frees nothing; after, every pruned id.
    let early = ledger::forget::sweep(&za, &paths.delayed, due + 3_599_000).await;
    assert_eq!(early.expect("swept"), 0);
    let late = ledger::forget::sweep(&za, &paths.delayed, due + 3_660_000).await;
    assert_eq!(late.expect("swept"), 3);
    for id in &ids[..3] {
        let path = paths.delayed.submission(id);
        assert_eq!(
            a.check_stat(&path).await.expect("stat"),
            None,
            "{id} is free"
        );
    }
    for id in &ids[3..] {
        let path = paths.delayed.submission(id);
        assert!(
            a.check_stat(&path).await.expect("stat").is_some(),
            "{id} keeps its record"
        );
    }
    let day = paths.delayed.forget_day(due.div_euclid(86_400_000));
    let minutes = a.list_children(&day).await.expect("forget day");
    assert!(
        minutes.is_empty(),
        "the swept minute is removed: {minutes:?}"
    );
    // The freed id takes a new request.
    submit(&za, &paths, first.as_str(), due + 7_200_000).await;
}

/// A submission whose id was generated (no `--id`) is not remembered: no client can send its
/// id again, so its record's prune frees the id at once, even inside the window.
#[tokio::test]
async fn an_anonymous_submission_leaves_no_tombstone() {
    let (a, _, paths, _) = setup("ledger-submission-anonymous").await;
    let za = door(&a);
    let token = acquire(&a, &paths).await;
    let due = 1_800_000_000_000;
    let id = SubmissionId::generate();
    let anonymous = Submission {
        job: JobName::new("close"),
        due_unix_ms: due,
        submitted_unix_ms: due - 1000,
        payload: b"p".to_vec(),
        requested_by: None,
        anonymous: true,
        marker_names_job: false,
        retry_of: None,
        traceparent: None,
        after: None,
    };
    let submitted = submissions::submit(&za, &paths.delayed, &id, &anonymous).await;
    assert_eq!(
        submitted.expect("submitted"),
        submissions::Submitted::Created
    );
    run_to_the_end(&za, &paths, &id, due, token).await;
    let kept = submit(&za, &paths, "named", due + 1).await;
    run_to_the_end(&za, &paths, &kept, due + 1, token).await;
    let pruned = prune_close(&za, &paths, 1, remember_at(due + 1_000, 3600)).await;
    assert_eq!(pruned, 1);
    let path = paths.delayed.submission(&id);
    assert_eq!(
        a.check_stat(&path).await.expect("stat"),
        None,
        "freed at once"
    );
}

/// A submission's record whose request is gone already (deleted by hand, or by an older
/// zkcron) is pruned all the same, inside and after its window: nothing waits for a node that
/// will not come back.
#[tokio::test]
async fn a_record_whose_request_is_gone_is_still_pruned() {
    let (a, _, paths, _) = setup("ledger-submission-request-gone").await;
    let za = door(&a);
    let token = acquire(&a, &paths).await;
    let due = 1_800_000_000_000;
    let mut ids = Vec::new();
    for n in 0..3 {
        let id = submit(&za, &paths, &format!("g-{n}"), due + n).await;
        run_to_the_end(&za, &paths, &id, due + n, token).await;
        a.delete(&paths.delayed.submission(&id), None)
            .await
            .expect("request deleted");
        ids.push(id);
    }
    let job = JobName::new("close");
    let within = ledger::prune(
        &za,
        &paths,
        &job,
        zkcron::layout::Keep::Records(2),
        remember_at(due + 1_000, 3600),
    )
    .await;
    assert_eq!(within.expect("pruned"), 1, "inside its window");
    let after = ledger::prune(
        &za,
        &paths,
        &job,
        zkcron::layout::Keep::Records(1),
        remember_at(due + 7_200_000, 3600),
    )
    .await;
    assert_eq!(after.expect("pruned"), 1, "after its window");
}

/// A record that still promises a retry is never pruned: the next owner needs it to keep the
/// promise (issue 24).
#[tokio::test]
async fn a_record_that_promises_a_retry_is_not_pruned() {
    let (a, _, paths, _) = setup("ledger-submission-retry-kept").await;
    let za = door(&a);
    let token = acquire(&a, &paths).await;
    let due = 1_800_000_000_000;
    let promised = submit(&za, &paths, "r-0", due).await;
    let mut claim = ledger::claim(
        &za,
        &paths,
        submission_record(&promised, due, "a", token),
        ClaimMode::Create,
        false,
    )
    .await
    .expect("claimed");
    claim.record.status = RunStatus::Failed;
    claim.record.retry_at_unix_ms = Some(due + 60_000);
    ledger::finish(&za, &mut claim, &[])
        .await
        .expect("final record");
    for n in 1..4 {
        let id = submit(&za, &paths, &format!("r-{n}"), due + n).await;
        run_to_the_end(&za, &paths, &id, due + n, token).await;
    }
    let pruned = prune_close(&za, &paths, 1, remember_at(due + 10_000, 3600)).await;
    assert_eq!(pruned, 2, "r-1 and r-2 go; r-0's promise stays");
    assert!(a.check_stat(&claim.path).await.expect("stat").is_some());
}

/// Issue 19's layout: a job's records are keyed by the job, whatever lock group fences its
/// claims. A job that moves between groups (two owners that briefly disagree about its group,
/// each holding its own group's lock) still has one claim per tick; a token stale in its own
/// group claims nothing even while the other group's epoch would pass.
#[tokio::test]
async fn a_tick_is_claimed_once_whichever_group_fences_it() {
    let (a, b, default, _) = setup("ledger-groups").await;
    let (za, zb) = (door(&a), door(&b));
    let base = LockPaths::new("/zkcron", "g");
    let open = CreateMode::Persistent.with_acls(Acls::anyone_all());
    let mut ledgers = Vec::new();
    for name in ["billing", "reports"] {
        let group = base.group(name);
        a.mkdir(&group.dir, &open).await.expect("group dir");
        a.create(&group.epoch, b"", &open)
            .await
            .expect("group epoch");
        let ledger = LedgerPaths::fenced_by(&base, &group);
        assert_eq!(ledger.runs, default.runs, "one ledger for every group");
        assert_ne!(ledger.epoch, default.epoch);
        ledgers.push(ledger);
    }
    let (billing, reports) = (&ledgers[0], &ledgers[1]);
    let token_a = acquire(&a, billing).await;
    let token_b = acquire(&b, reports).await;
    let first = ledger::claim(
        &za,
        billing,
        record("moving", 5000, "x", token_a),
        ClaimMode::Create,
        false,
    );
    let second = ledger::claim(
        &zb,
        reports,
        record("moving", 5000, "y", token_b),
        ClaimMode::Create,
        false,
    );
    let (first, second) = tokio::join!(first, second);
    let won = [first.is_ok(), second.is_ok()];
    assert_eq!(
        won.iter().filter(|w| **w).count(),
        1,
        "{first:?} {second:?}"
    );
    let lost = if won[0] { second } else { first };
    assert!(
        matches!(lost, Err(ClaimError::AlreadyClaimed { .. })),
        "{lost:?}"
    );
    // billing's lock moves on: a's token is stale there, whatever reports' epoch says.
    acquire(&b, billing).await;
    let stale = ledger::claim(
        &za,
        billing,
        record("moving", 6000, "x", token_a),
        ClaimMode::Create,
        false,
    )
    .await;
    assert!(
        matches!(stale, Err(ClaimError::NotOwner { .. })),
        "{stale:?}"
    );
}

/// Claims `ids` at once through `group`, each as the driver does, answers in the order of `ids`.
async fn claim_together(
    group: &ledger::group::GroupCommit,
    paths: &LedgerPaths,
    ids: &[(SubmissionId, i64)],
    token: i32,
) -> Vec<Result<run::Claim, ClaimError>> {
    let claims = ids.iter().map(|(id, due)| {
        // Format 1, the form a fleet with an older member writes: its markers go in groups too.
        let plan = ledger::ClaimPlan::new(
            paths,
            submission_record(id, *due, "a", token),
            ClaimMode::Create,
            false,
            ledger::OpenRuns::Marked,
        );
        group.claim(plan)
    });
    let mut answers = Vec::new();
    // Joined, not awaited one by one: all are queued before the first group goes out.
    for answer in join_all(claims).await {
        answers.push(answer);
    }
    answers
}

/// `futures::future::join_all` in a few lines, to keep the dev-dependencies as they are.
async fn join_all<F: Future>(futures: impl Iterator<Item = F>) -> Vec<F::Output> {
    let mut set = Vec::new();
    for future in futures {
        set.push(Box::pin(future));
    }
    let mut outputs: Vec<Option<F::Output>> = set.iter().map(|_| None).collect();
    std::future::poll_fn(|cx| {
        let mut pending = false;
        for (future, output) in set.iter_mut().zip(outputs.iter_mut()) {
            if output.is_none() {
                match future.as_mut().poll(cx) {
                    std::task::Poll::Ready(value) => *output = Some(value),
                    std::task::Poll::Pending => pending = true,
                }
            }
        }
        if pending {
            std::task::Poll::Pending
        } else {
            std::task::Poll::Ready(())
        }
    })
    .await;
    outputs.into_iter().flatten().collect()
}

#[tokio::test]
async fn claims_and_records_handed_in_together_share_multi_ops_and_each_gets_its_own_answer() {
    let (a, b, paths, _) = setup("ledger-group-commit").await;
    let za = door(&a);
    let token = acquire(&a, &paths).await;
    let (group, lanes) = ledger::group::GroupCommit::new(&za);
    let lanes = tokio::spawn(lanes);

    // The job's first claims: its parents are missing, so the first claim of each group fails
    // it and goes alone (making them); one submission was cancelled before its claim.
    let mut first = Vec::new();
    for i in 0..40 {
        let due = 10_000 + i;
        first.push((submit(&za, &paths, &format!("g-{i:02}"), due).await, due));
    }
    submissions::cancel(&za, &paths.delayed, &paths, &first[13].0, 9_000)
        .await
        .expect("cancelled");
    let answers = claim_together(&group, &paths, &first, token).await;
    for (i, answer) in answers.iter().enumerate() {
        match answer {
            Err(ClaimError::AlreadyClaimed { .. }) if i == 13 => {}
            Ok(claim) if i != 13 => assert!(claim.open.is_some()),
            other => panic!("claim {i}: {other:?}"),
        }
    }

    // Parents there: forty claims at once take far fewer transactions than forty.
    let mut second = Vec::new();
    for i in 0..40 {
        let due = 20_000 + i;
        second.push((submit(&za, &paths, &format!("h-{i:02}"), due).await, due));
    }
    let mut claims: Vec<run::Claim> = claim_together(&group, &paths, &second, token)
        .await
        .into_iter()
        .map(|answer| answer.expect("claimed"))
        .collect();
    let mut transactions = std::collections::BTreeSet::new();
    for claim in &claims {
        let stat = a
            .check_stat(&claim.path)
            .await
            .expect("stat")
            .expect("record");
        transactions.insert(stat.czxid);
        assert_eq!(claim.version, stat.version, "{}", claim.path);
    }
    assert!(
        transactions.len() <= 10,
        "{} transactions for 40 claims",
        transactions.len()
    );

    // `running`, then final records, written together: versions follow, open markers close.
    let mut writes = Vec::new();
    for claim in &mut claims {
        claim.record.status = RunStatus::Running;
        writes.push(claim.clone());
    }
    let written = join_all(writes.iter_mut().map(|claim| group.update(claim))).await;
    assert!(written.iter().all(Result::is_ok), "{written:?}");
    for claim in &mut writes {
        assert_eq!(claim.version, 1, "{}", claim.path);
        claim.record.status = RunStatus::Succeeded;
    }
    let finished = join_all(
        writes
            .iter_mut()
            .map(|claim| group.finish(claim, Vec::new())),
    )
    .await;
    assert!(finished.iter().all(Result::is_ok), "{finished:?}");
    for claim in &writes {
        let stored = ledger::read_record(&za, &claim.path).await.expect("record");
        assert_eq!(stored.status, RunStatus::Succeeded);
        let open = claim.open.as_deref().expect("open marker");
        assert_eq!(a.check_stat(open).await.expect("stat"), None, "closed");
    }

    // b acquires: a's group at the old token claims none, and leaves every one pending.
    acquire(&b, &paths).await;
    let mut third = Vec::new();
    for i in 0..10 {
        let due = 30_000 + i;
        third.push((submit(&za, &paths, &format!("k-{i:02}"), due).await, due));
    }
    for answer in claim_together(&group, &paths, &third, token).await {
        assert!(
            matches!(answer, Err(ClaimError::NotOwner { .. })),
            "{answer:?}"
        );
    }
    for (id, due) in &third {
        let pending = a
            .check_stat(&paths.delayed.pending(*due, id, None))
            .await
            .expect("stat");
        assert!(pending.is_some(), "{id} still pending");
    }

    drop(group);
    tokio::time::timeout(Duration::from_secs(5), lanes)
        .await
        .expect("the lanes end with their last sender")
        .expect("lanes task");
}

/// A node that can fire creates every job's record and open-marker parents up front; those
/// that exist are left as they are, and a second pass finds nothing to do.
#[tokio::test]
async fn the_parents_of_every_jobs_records_are_made_once() {
    let (a, _b, paths, _) = setup("ensure-parents").await;
    let za = door(&a);
    let jobs: Vec<JobName> = (0..300).map(|i| JobName::new(format!("job-{i}"))).collect();
    let open = CreateMode::Persistent.with_acls(Acls::anyone_all());
    a.mkdir(&paths.job_runs(&jobs[7]), &open)
        .await
        .expect("one parent exists already");
    a.create(&paths.record(&jobs[7], 1000), b"kept", &open)
        .await
        .expect("with a record under it");
    for _ in 0..2 {
        ledger::ensure_parents(&za, &paths, jobs.iter())
            .await
            .expect("parents");
    }
    let runs = a.list_children(&paths.runs).await.expect("runs");
    let opened = a.list_children(&paths.delayed.open).await.expect("open");
    assert_eq!((runs.len(), opened.len()), (300, 300));
    let kept = a
        .list_children(&paths.job_runs(&jobs[7]))
        .await
        .expect("job 7");
    assert_eq!(kept, ["1000"], "an existing parent keeps its records");
    assert!(a.check_stat(&paths.running).await.expect("stat").is_some());
}

#[tokio::test]
async fn pending_submissions_are_counted_per_bucket_without_reading_them() {
    let (client, _, paths, _) = setup("ledger-count-pending").await;
    let zk = door(&client);
    let empty = zkcron::ledger::due::count_pending(&zk, &paths.delayed, 10).await;
    assert_eq!(empty.expect("counted"), (0, true), "no due/ yet");
    // Three in one second (in two or three shards), two in a later one.
    for (id, due) in [
        ("a", 5_000),
        ("b", 5_100),
        ("c", 5_900),
        ("d", 9_000),
        ("e", 9_500),
    ] {
        submit(&zk, &paths, id, due).await;
    }
    let all = zkcron::ledger::due::count_pending(&zk, &paths.delayed, 10).await;
    assert_eq!(all.expect("counted"), (5, true));
    let first_bucket = zkcron::ledger::due::count_pending(&zk, &paths.delayed, 1).await;
    assert_eq!(
        first_bucket.expect("counted"),
        (3, false),
        "stopped after one bucket: a lower bound"
    );
}

/// Chains (issue 36): a parent's final record and its child's mark are one multi-op; the
/// child's claim takes the mark (a second claim finds it gone); a claim given back unstarted at
/// a handoff makes the mark again, so the next owner runs the child.
#[tokio::test]
async fn a_chain_mark_is_made_with_the_final_record_taken_by_one_claim_and_given_back_on_withdraw()
{
    let (a, _b, paths, _) = setup("ledger-chain").await;
    let za = door(&a);
    let token = acquire(&a, &paths).await;
    let mut parent = ledger::claim(
        &za,
        &paths,
        record("extract", 2000, "a", token),
        ClaimMode::Create,
        false,
    )
    .await
    .expect("the parent's tick");
    parent.record.status = RunStatus::Succeeded;
    parent.children = vec![JobName::new("load")];
    let marks = ledger::chains::marks_of(&paths, &parent);
    ledger::finish(&za, &mut parent, &marks)
        .await
        .expect("the final record, with the mark (its parent made on first use)");
    let found = ledger::chains::marks_for(&za, &paths, &JobName::new("load"))
        .await
        .expect("listed");
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(found[0].mark.run_id, parent.record.run_id);
    assert_eq!(found[0].mark.status, RunStatus::Succeeded);

    let child = || {
        let mut child = record("load", 2000, "a", token);
        child.parents = vec![run::ParentRun {
            trace: None,
            job: JobName::new("extract"),
            run_id: parent.record.run_id.clone(),
            status: RunStatus::Succeeded,
        }];
        child
    };
    let claimed = ledger::claim(&za, &paths, child(), ClaimMode::Create, false)
        .await
        .expect("the child's claim");
    let left = ledger::chains::marks_for(&za, &paths, &JobName::new("load")).await;
    assert_eq!(
        left.map(|marks| marks.len()).ok(),
        Some(0),
        "the claim took the mark"
    );

    // Given back at a handoff: the record goes, the mark comes back, and the next owner's
    // claim takes it again.
    ledger::withdraw(&za, &paths, &claimed)
        .await
        .expect("withdrawn");
    let back = ledger::chains::marks_for(&za, &paths, &JobName::new("load"))
        .await
        .expect("listed");
    assert_eq!(back, found, "the same mark, back");
    let next = acquire(&a, &paths).await;
    let mut again = child();
    again.fencing_token = FencingToken(next);
    ledger::claim(&za, &paths, again.clone(), ClaimMode::Create, false)
        .await
        .expect("claimed by the next owner");
    // A second claim of the instant is refused: the record exists and the mark is gone.
    assert!(matches!(
        ledger::claim(&za, &paths, again, ClaimMode::Create, false).await,
        Err(ClaimError::AlreadyClaimed { .. })
    ));
}

/// A submitted parent (issue 36): its final record leaves a mark named by its due time and id,
/// carrying its payload; the child's owner turns it into the child's submission in one fenced
/// multi-op, once (a second attempt finds the mark gone), never under a stale token; the
/// child's claim takes its pending marker and no mark; the child's id, still held by an earlier
/// child's request, gives way to a generated one.
#[tokio::test]
async fn a_submitted_parents_mark_becomes_its_childs_submission_once_and_never_under_a_stale_token()
{
    let (a, _b, paths, _) = setup("ledger-chain-submitted").await;
    let za = door(&a);
    let token = acquire(&a, &paths).await;
    let acls = Acls::anyone_all();
    let parent_id = submit(&za, &paths, "order-7", 2000).await;
    let mut parent = ledger::claim(
        &za,
        &paths,
        submission_record(&parent_id, 2000, "a", token),
        ClaimMode::Create,
        false,
    )
    .await
    .expect("the parent's claim");
    parent.record.status = RunStatus::Succeeded;
    parent.children = vec![JobName::new("notify")];
    parent.payload = Some(std::sync::Arc::new(b"line 1\nline 2".to_vec()));
    let marks = ledger::chains::marks_of(&paths, &parent);
    ledger::finish(&za, &mut parent, &marks)
        .await
        .expect("the final record, with the mark");
    let notify = JobName::new("notify");
    let found = ledger::chains::marks_for(&za, &paths, &notify)
        .await
        .expect("listed");
    assert_eq!(found.len(), 1, "{found:?}");
    let mark = found[0].clone();
    assert_eq!(mark.name.submission.as_ref(), Some(&parent_id));
    assert_eq!(mark.name.scheduled_unix_ms, 2000);
    assert_eq!(mark.mark.payload, b"line 1\nline 2");
    assert_eq!(mark.mark.run_id, parent.record.run_id);

    let child_id = SubmissionId::of_child(&parent_id, &notify);
    let child = Submission {
        job: notify.clone(),
        due_unix_ms: 2000,
        submitted_unix_ms: 9000,
        payload: mark.mark.payload.clone(),
        requested_by: None,
        anonymous: true,
        marker_names_job: true,
        retry_of: None,
        traceparent: None,
        after: Some(zkcron::delayed::AfterRun {
            job: JobName::new("close"),
            run_id: parent.record.run_id.clone(),
            status: "succeeded".to_owned(),
        }),
    };
    let submit_child = |id: SubmissionId, token: i32| {
        let (za, paths, notify, name, child) = (&za, &paths, &notify, &mark.name, &child);
        async move {
            ledger::chains::submit_child(za, paths, notify, name, id, child, FencingToken(token))
                .await
        }
    };
    // A stale owner writes nothing.
    let stale = submit_child(child_id.clone(), token - 1).await;
    assert!(
        matches!(stale, Err(ClaimError::NotOwner { .. })),
        "{stale:?}"
    );
    assert_eq!(
        submissions::read(&za, &paths.delayed, &child_id)
            .await
            .expect("read"),
        None
    );
    let made = submit_child(child_id.clone(), token)
        .await
        .expect("submitted");
    assert_eq!(made, ledger::chains::ChildSubmitted::Made(child_id.clone()));
    let (stored, _) = submissions::read(&za, &paths.delayed, &child_id)
        .await
        .expect("read")
        .expect("the child's request");
    assert_eq!(stored, child);
    assert_eq!(
        ledger::chains::marks_for(&za, &paths, &notify)
            .await
            .expect("listed"),
        Vec::new(),
        "the mark is taken"
    );
    let again = submit_child(child_id.clone(), token)
        .await
        .expect("answered");
    assert_eq!(again, ledger::chains::ChildSubmitted::MarkGone, "once");

    // The child's claim takes its pending marker; there is no mark to take.
    let mut claimed = RunRecord::claimed_submission(
        &notify,
        2000,
        &child_id,
        (&NodeId::new("a"), "127.0.0.1"),
        FencingToken(token),
        9001,
    );
    claimed.marker_names_job = true;
    claimed.parents = vec![run::ParentRun {
        trace: None,
        job: JobName::new("close"),
        run_id: parent.record.run_id.clone(),
        status: RunStatus::Succeeded,
    }];
    ledger::claim(&za, &paths, claimed, ClaimMode::Create, false)
        .await
        .expect("the child's claim");

    // The same parent id used again while that child's request is kept: a generated id.
    let marks = ledger::chains::marks_of(&paths, &parent);
    for made in &marks {
        let options = CreateMode::Persistent.with_acls(acls);
        a.create(&made.path, &made.data, &options)
            .await
            .expect("the mark again");
    }
    let other = submit_child(child_id.clone(), token)
        .await
        .expect("submitted");
    let ledger::chains::ChildSubmitted::Made(other) = other else {
        panic!("{other:?}")
    };
    assert_ne!(other, child_id);
    assert!(
        submissions::read(&za, &paths.delayed, &other)
            .await
            .expect("read")
            .is_some()
    );
}

#[tokio::test]
async fn a_broadcast_claim_is_fenced_by_its_member_znode_and_the_sweep_records_who_missed_the_tick()
{
    use zkcron::ledger::broadcast::{close_gone, read_tick};
    let (a, b, paths, _) = setup("ledger-broadcast").await;
    let (za, zb) = (door(&a), door(&b));
    let token = acquire(&a, &paths).await;
    let lock = LockPaths::new("/zkcron", "g");
    let open = CreateMode::Persistent.with_acls(Acls::anyone_all());
    a.create(&lock.members, b"", &open)
        .await
        .expect("members dir");
    // b's member znode is ephemeral, as a live node's: its session ending takes it.
    let member = lock.member(&NodeId::new("b"));
    let ephemeral = CreateMode::Ephemeral.with_acls(Acls::anyone_all());
    b.create(&member, b"{}", &ephemeral)
        .await
        .expect("b is a member");
    let job = JobName::new("rotate");
    let claim_of = |node: &str, tick: i64| {
        let record = RunRecord::claimed_broadcast(
            &job,
            tick,
            (&NodeId::new(node), "127.0.0.1"),
            FencingToken(0),
            tick - 250,
        );
        let member = lock.member(&NodeId::new(node));
        ledger::ClaimPlan::new(
            &paths,
            record,
            ClaimMode::Create,
            false,
            ledger::OpenRuns::ByRecord,
        )
        .fenced_by_member(member)
    };
    // b's run of tick 0 is a long one, still running when b dies after tick 1000.
    claim_of("b", 0)
        .send_alone(&zb)
        .await
        .expect("b's long run of tick 0");
    let claimed = claim_of("b", 1000)
        .send_alone(&zb)
        .await
        .expect("a member claims its own run of a tick");
    assert_eq!(
        claimed.path,
        paths.broadcast_record(&job, 1000, &NodeId::new("b"))
    );
    assert!(
        matches!(
            claim_of("b", 1000).send_alone(&zb).await,
            Err(ClaimError::AlreadyClaimed { .. })
        ),
        "once per (tick, node)"
    );
    assert!(
        matches!(
            claim_of("c", 1000).send_alone(&za).await,
            Err(ClaimError::NotOwner { .. })
        ),
        "a node with no member znode claims nothing"
    );

    // The owner's sweep of tick 1000 reads what the ledger holds of it: b claimed it; b is
    // gone from the fleet since (its session's end deletes the znode as this does).
    a.delete(&member, None)
        .await
        .expect("b's member znode goes");
    let read = read_tick(&za, &paths, &lock, &job, 1000)
        .await
        .expect("the tick read");
    assert_eq!(read.recorded, [NodeId::new("b")].into());
    assert!(read.live.is_empty(), "b left: {read:?}");
    assert_eq!(read.records, 2, "b's runs of ticks 0 and 1000");
    // c, a member at the tick with no record of it, is owed one: `missed`, claimed under the
    // owner's token like any gap's record (the machine decides who is owed).
    let missed_of = |node: &str, tick: i64, token: i32| {
        let record = RunRecord::missed_by_member(
            &job,
            tick,
            (&NodeId::new(node), "127.0.0.1"),
            FencingToken(token),
            6000,
        );
        ledger::ClaimPlan::new(
            &paths,
            record,
            ClaimMode::Create,
            false,
            ledger::OpenRuns::ByRecord,
        )
    };
    missed_of("c", 1000, token)
        .send_alone(&za)
        .await
        .expect("c's missed record");
    assert!(
        matches!(
            missed_of("c", 1000, token).send_alone(&za).await,
            Err(ClaimError::AlreadyClaimed { .. })
        ),
        "a sweep done twice writes nothing twice"
    );
    // b, killed mid-run and gone since, has its open runs closed.
    let gone = [NodeId::new("b")];
    let closed = close_gone(&za, &paths, &job, &gone, 1000, 6000)
        .await
        .expect("closed");
    assert_eq!(closed, gone, "killed mid-run, gone since");
    let status = |node: &str| {
        let path = paths.broadcast_record(&job, 1000, &NodeId::new(node));
        let a = a.clone();
        async move { read_fresh(&a, &path).await.map(|r| r.status) }
    };
    assert_eq!(status("c").await, Some(RunStatus::Missed));
    assert_eq!(status("b").await, Some(RunStatus::Interrupted));
    let earlier = paths.broadcast_record(&job, 0, &NodeId::new("b"));
    assert_eq!(
        read_fresh(&a, &earlier).await.map(|r| r.status),
        Some(RunStatus::Interrupted),
        "b's earlier run, still open when it died, is closed too"
    );
    let again = close_gone(&za, &paths, &job, &gone, 1000, 6000)
        .await
        .expect("closed again");
    assert!(again.is_empty(), "nothing closed twice: {again:?}");
    // A sweep by an owner whose token is stale writes nothing.
    acquire(&a, &paths).await;
    assert!(matches!(
        missed_of("c", 2000, token).send_alone(&za).await,
        Err(ClaimError::NotOwner { .. })
    ));
}
