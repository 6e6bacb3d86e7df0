//! Measures the delayed queue's PostgreSQL store (issue 55) against a running server: how fast
//! batched submits go in, and what a claim of due work costs while many are pending and the
//! claims leave dead tuples behind.
//!
//! ```text
//! cargo run --release --example pg_queue -- DSN [PENDING] [ROUNDS] [mark|start] [hold|free] [GROUP]
//! ```
//! With `ROUNDS` 0 it only loads, into lock group `GROUP` (a daemon's, for bench/http_delivery.sh
//! `--store postgres`): nothing else is written, not even the fence.
//! 1. Loads `PENDING` submissions (default 1 000 000) due 1–30 days ahead, in batches of 1 000
//!    from 4 connections, and prints submits a second.
//! 2. Then `ROUNDS` rounds (default 20): 10 000 submissions due now, claimed 100 a statement
//!    and ended; prints each round's claim latency (p50, p99, max), the dead tuples in today's
//!    pending partition and what autovacuum did. Each claim starts where the last one reached
//!    (`mark`, the default) or at the start of the due index (`start`); `hold` keeps a
//!    transaction with an old snapshot open through the rounds, as a long report would.
//! 3. The fire machine's way in: 2 000 due now, read 1, 10 or 100 at a time and claimed as
//!    chosen (`claim_chosen`, with their records); each step's latency apart.
//!
//! It writes under the lock group `/zkcron-bench/pg_queue` (or `GROUP`) and leaves what it wrote (the
//! benchmark's server is thrown away after it).

use std::time::Instant;

use zkcron::delayed::{Submission, SubmissionId};
use zkcron::ledger::postgres::{Chosen, ChosenClaim, Mark, PgStore, Where};
use zkcron::ledger::submissions::JobsRead;
use zkcron::run::{RunRecord, RunStatus};
use zkcron::{FencingToken, JobName, NodeId};

const GROUP: &str = "/zkcron-bench/pg_queue";
const BATCH: usize = 1000;
const LOADERS: usize = 4;
const DAY_MS: i64 = 86_400_000;
const ROUND: usize = 10_000;
const CLAIM_LIMIT: i64 = 100;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let dsn = args
        .next()
        .ok_or("usage: pg_queue DSN [PENDING] [ROUNDS] [mark|start] [hold|free]")?;
    let pending: usize = args.next().map_or(Ok(1_000_000), |n| n.parse())?;
    let rounds: usize = args.next().map_or(Ok(20), |n| n.parse())?;
    let marked = args.next().is_none_or(|mode| mode != "start");
    let hold = args.next().is_some_and(|snapshot| snapshot == "hold");
    let group = args.next().unwrap_or_else(|| GROUP.to_owned());
    let now = unix_ms();
    let store = PgStore::open(&dsn, &group).await?;
    let token = FencingToken(1);
    if rounds > 0 {
        store.raise_fence(token).await?;
    }

    println!(
        "== load: {pending} pending, due 1 to 30 days ahead, {BATCH} a batch, {LOADERS} connections"
    );
    let started = Instant::now();
    let mut loaders = tokio::task::JoinSet::new();
    for loader in 0..LOADERS {
        let (dsn, group) = (dsn.clone(), group.clone());
        loaders.spawn(async move {
            let store = PgStore::open(&dsn, &group).await?;
            let mut n = loader;
            let mut batch = Vec::with_capacity(BATCH);
            while n < pending {
                let ahead = DAY_MS + i64::try_from(n % 29).unwrap_or(0) * DAY_MS;
                let due = now + ahead + i64::try_from(n % 86_400_000).unwrap_or(0);
                batch.push((id(&format!("p-{n}"))?, submission(due, now)));
                if batch.len() == BATCH {
                    submit_all(&store, &batch).await?;
                    batch.clear();
                }
                n += LOADERS;
            }
            submit_all(&store, &batch).await?;
            Ok::<_, Box<dyn std::error::Error + Send + Sync>>(())
        });
    }
    while let Some(done) = loaders.join_next().await {
        done?.map_err(|e| e.to_string())?;
    }
    let took = started.elapsed().as_secs_f64();
    println!(
        "submitted {pending} in {took:.1} s: {:.0} submits a second",
        pending as f64 / took
    );

    if rounds == 0 {
        return Ok(());
    }
    println!(
        "== claims: {rounds} rounds of {ROUND} due now, claimed {CLAIM_LIMIT} a statement, each ended"
    );
    println!(
        "round  claims  p50_ms  p99_ms  max_ms  dead_tuples_today  autovacuums  autoanalyzes  claimed"
    );
    let node = NodeId::new("bench");
    let mut mark: Option<Mark> = None;
    // A transaction elsewhere holding an old snapshot: no vacuum may remove what the claims
    // delete while it is open (a long report, a pg_dump).
    let _holder = if hold {
        let (client, connection) = tokio_postgres::connect(&dsn, tokio_postgres::NoTls).await?;
        tokio::spawn(connection);
        client
            .batch_execute("BEGIN ISOLATION LEVEL REPEATABLE READ; SELECT count(*) FROM pg_class")
            .await?;
        Some(client)
    } else {
        None
    };
    println!(
        "claims from {}; a snapshot {}",
        if marked {
            "where the last one reached"
        } else {
            "the start of the due index"
        },
        if hold {
            "held open throughout"
        } else {
            "held by nobody"
        }
    );
    for round in 0..rounds {
        let due = unix_ms();
        let batch: Vec<_> = (0..ROUND)
            .map(|n| Ok((id(&format!("r{round}-{n}"))?, submission(due, due))))
            .collect::<Result<_, Box<dyn std::error::Error>>>()?;
        submit_all(&store, &batch)
            .await
            .map_err(|e| e.to_string())?;
        let mut latencies = Vec::new();
        let mut claimed = 0;
        loop {
            let sent = Instant::now();
            let after = if marked { mark.as_ref() } else { None };
            let got = store
                .claim_due(
                    token,
                    after,
                    unix_ms(),
                    CLAIM_LIMIT,
                    (&node, "127.0.0.1"),
                    unix_ms(),
                )
                .await?;
            latencies.push(sent.elapsed().as_secs_f64() * 1000.0);
            if got.reached.is_some() {
                mark = got.reached.clone();
            }
            if got.claimed.is_empty() {
                break;
            }
            for run in got.claimed {
                let mut record = run.record;
                record.status = RunStatus::Succeeded;
                record.finished_unix_ms = Some(unix_ms());
                store.end(&run.id, token, &record, unix_ms()).await?;
                claimed += 1;
            }
        }
        latencies.sort_by(f64::total_cmp);
        let (dead, vacuums, analyzes) = dead_tuples(&dsn, due).await?;
        println!(
            "{round:>5}  {:>6}  {:>6.2}  {:>6.2}  {:>6.2}  {dead:>17}  {vacuums:>11}  {analyzes:>12}  {claimed}",
            latencies.len(),
            quantile(&latencies, 0.50),
            quantile(&latencies, 0.99),
            latencies.last().copied().unwrap_or(0.0),
        );
    }
    chosen_claims(&store, token, &node).await?;
    // One still pending, as a check that the load is there.
    match store.find(&id("p-0")?).await? {
        Some(Where::Pending(_)) => println!("== p-0 still pending: ok"),
        other => println!("== p-0 is not pending: {other:?}"),
    }
    Ok(())
}

/// The fire machine's way in: read what is due, then claim the ones it chose with the records
/// it built, `size` at a time, for 2 000 submissions due now per size. Each step's latency apart.
async fn chosen_claims(
    store: &PgStore,
    token: FencingToken,
    node: &NodeId,
) -> Result<(), Box<dyn std::error::Error>> {
    println!(
        "== chosen claims: read what is due, then claim those, N a statement, 2000 for each N"
    );
    println!("    N  statements  read_p50_ms  read_p99_ms  claim_p50_ms  claim_p99_ms  claimed");
    for size in [1_i64, 10, 100] {
        let due = unix_ms();
        let batch: Vec<_> = (0..2000)
            .map(|n| Ok((id(&format!("c{size}-{n}"))?, submission(due, due))))
            .collect::<Result<_, Box<dyn std::error::Error>>>()?;
        submit_all(store, &batch).await.map_err(|e| e.to_string())?;
        let (mut reads, mut claims, mut claimed) = (Vec::new(), Vec::new(), 0);
        loop {
            let sent = Instant::now();
            let found = store
                .pending_between(due - 1, unix_ms(), size, &JobsRead::all())
                .await?;
            reads.push(sent.elapsed().as_secs_f64() * 1000.0);
            if found.is_empty() {
                break;
            }
            let records: Vec<_> = found
                .iter()
                .map(|(which, s)| {
                    RunRecord::claimed_submission(
                        &s.job,
                        s.due_unix_ms,
                        which,
                        (node, ""),
                        token,
                        unix_ms(),
                    )
                })
                .collect();
            let chosen: Vec<_> = found
                .iter()
                .zip(&records)
                .map(|((which, s), record)| Chosen {
                    id: which,
                    due_unix_ms: s.due_unix_ms,
                    record,
                })
                .collect();
            let sent = Instant::now();
            let answers = store
                .claim_chosen(token, &chosen, (node, ""), unix_ms())
                .await?;
            claims.push(sent.elapsed().as_secs_f64() * 1000.0);
            claimed += answers
                .iter()
                .filter(|a| **a == ChosenClaim::Claimed)
                .count();
        }
        reads.sort_by(f64::total_cmp);
        claims.sort_by(f64::total_cmp);
        println!(
            "{size:>5}  {:>10}  {:>11.2}  {:>11.2}  {:>12.2}  {:>12.2}  {claimed}",
            claims.len(),
            quantile(&reads, 0.50),
            quantile(&reads, 0.99),
            quantile(&claims, 0.50),
            quantile(&claims, 0.99),
        );
    }
    Ok(())
}

async fn submit_all(
    store: &PgStore,
    batch: &[(SubmissionId, Submission)],
) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    for result in store.submit_batch(batch).await {
        result?;
    }
    Ok(())
}

/// Today's pending partition: its dead tuples and how often autovacuum has vacuumed and
/// analyzed it.
async fn dead_tuples(dsn: &str, due: i64) -> Result<(i64, i64, i64), Box<dyn std::error::Error>> {
    let (client, connection) = tokio_postgres::connect(dsn, tokio_postgres::NoTls).await?;
    tokio::spawn(connection);
    let partition = format!("zkcron_pending_d{}", due.div_euclid(DAY_MS));
    let row = client
        .query_opt(
            "SELECT n_dead_tup, autovacuum_count, autoanalyze_count FROM pg_stat_user_tables WHERE relname = $1",
            &[&partition],
        )
        .await?;
    Ok(row.map_or((0, 0, 0), |row| (row.get(0), row.get(1), row.get(2))))
}

fn quantile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let at = ((sorted.len() - 1) as f64 * q).round() as usize;
    sorted[at.min(sorted.len() - 1)]
}

fn id(text: &str) -> Result<SubmissionId, String> {
    SubmissionId::parse(text).map_err(|e| e.to_string())
}

fn submission(due: i64, now: i64) -> Submission {
    let payload = br#"{"order":12345,"reason":"unpaid"}"#.to_vec();
    Submission::plain(JobName::new("close-order"), due, now, payload)
}

fn unix_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}
