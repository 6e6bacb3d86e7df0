//! `zkcron run` end to end: real `zkcron` processes, a real 3-node ensemble, real jobs writing
//! their contract variables to a file (issue "Schedule and fire"). Every test holds `fault_lock`:
//! they measure timings that another test loading the two cores would skew.
#![allow(
    clippy::await_holding_lock,
    reason = "each #[tokio::test] has its own runtime and thread"
)]

use crate::support;

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use nix::sys::signal::Signal;

use support::daemon::{
    DaemonNode, Fire, RECORD_FIRE, assert_exit, now_ms, read_fires, schedule_text, zkcron_ok,
    zkcron_refused, zkcron_status,
};
use support::{fault_lock, shared_ensemble, try_wait_for, unique_chroot, wait_for};

const SESSION: Duration = Duration::from_secs(2);
const DELAY: Duration = Duration::from_secs(3);
/// The CLI's jitter: up to a tenth of the delay.
const JITTER: Duration = Duration::from_millis(300);
/// Process start, a JVM pause or a busy core, on bounds that are otherwise exact.
const SLACK: Duration = Duration::from_secs(1);
/// The period of the test jobs: a takeover shows as the first whole-second tick after it.
const TICK: Duration = Duration::from_secs(1);
/// The daemon's default `lock.claim_ahead`: an owner claims a tick this long before it.
const CLAIM_AHEAD: Duration = Duration::from_millis(250);
/// Where a graceful stop is aimed: inside the claim-ahead window, 100 ms after the claim went out
/// (its reply is back by then on an idle machine), before the run starts.
const AIM_BEFORE_TICK: Duration = Duration::from_millis(150);
const _: () = assert!(AIM_BEFORE_TICK.as_millis() < CLAIM_AHEAD.as_millis());
/// Ticks on which a stop is aimed at the claim-ahead window before the test gives up: each miss
/// on a loaded machine is seen in the stopping node's log, and costs a handoff and a join.
const HANDOFF_AIMS: u32 = 4;

/// A schedule on the shared ensemble, in its own chroot, with `jobs` appended.
fn schedule(test: &str, jobs: &str) -> String {
    schedule_at(
        &shared_ensemble().connect_string_with_chroot(&unique_chroot(test)),
        jobs,
    )
}

fn schedule_at(connect: &str, jobs: &str) -> String {
    schedule_text(connect, "e2e", SESSION, DELAY, jobs)
}

/// A 1 Hz job appending its contract variables to `fires`.
fn every_second(name: &str, fires: &Path) -> String {
    format!(
        "[[job]]\nname = \"{name}\"\nschedule = \"* * * * * *\"\nshell = '{RECORD_FIRE}{}'\n",
        fires.display()
    )
}

/// Waits until `fires` has a fire scheduled after `after_ms` matching `pred`.
async fn wait_fire(
    fires: &Path,
    what: &str,
    after_ms: i64,
    within: Duration,
    pred: impl Fn(&Fire) -> bool,
) -> Fire {
    wait_for(what, within, || {
        let found = read_fires(fires)
            .into_iter()
            .find(|f| f.scheduled_ms > after_ms && pred(f));
        async move { found }
    })
    .await
}

/// Every fire scheduled in `(from_ms, to_ms]`, checked to be at most once per tick.
fn fires_between(fires: &Path, from_ms: i64, to_ms: i64) -> BTreeMap<i64, Fire> {
    let mut by_tick = BTreeMap::new();
    for fire in read_fires(fires)
        .into_iter()
        .filter(|f| f.scheduled_ms > from_ms && f.scheduled_ms <= to_ms)
    {
        if let Some(twice) = by_tick.insert(fire.scheduled_ms, fire.clone()) {
            panic!(
                "tick {} fired twice: {twice:?} and {fire:?}",
                fire.scheduled_ms
            );
        }
    }
    by_tick
}

fn owner_of_latest(fires: &Path) -> String {
    read_fires(fires)
        .last()
        .map(|f| f.node.clone())
        .expect("a fire")
}

#[tokio::test]
async fn three_nodes_fire_every_tick_exactly_once_then_fail_over() {
    let _serial = fault_lock();
    let dir = tempfile::tempdir().expect("temp dir");
    let fires = dir.path().join("fires.log");
    let text = schedule("e2e-once", &every_second("tick", &fires));
    let mut nodes: Vec<DaemonNode> = ["n1", "n2", "n3"]
        .iter()
        .map(|id| DaemonNode::start(dir.path(), id, &text))
        .collect();

    // Exactly once per tick, by the owner, over a 20 s window.
    let first = wait_fire(&fires, "a first fire", 0, SESSION * 5, |_| true).await;
    let window = (first.scheduled_ms, first.scheduled_ms + 20_000);
    wait_fire(
        &fires,
        "the end of the 20 s window",
        window.1 - 1,
        Duration::from_secs(22),
        |_| true,
    )
    .await;
    let ticks = fires_between(&fires, window.0, window.1);
    let expected: Vec<i64> = (1..=20).map(|s| window.0 + s * 1000).collect();
    assert_eq!(
        ticks.keys().copied().collect::<Vec<_>>(),
        expected,
        "every tick of the window fired once"
    );
    let owners: Vec<&str> = ticks.values().map(|f| f.node.as_str()).collect();
    assert!(
        owners.iter().all(|n| *n == owners[0]),
        "all fired by one owner: {owners:?}"
    );
    let sample = ticks.values().next().expect("a fire");
    assert_eq!(
        (sample.job.as_str(), sample.attempt, sample.resumed.as_str()),
        ("tick", 1, "0")
    );
    assert_eq!(sample.run_id, format!("tick-{}", sample.scheduled_ms));
    assert!(
        sample.scheduled_at.ends_with(".000Z"),
        "RFC 3339 UTC with ms: {}",
        sample.scheduled_at
    );

    // kill -9 of the owner: another node fires within session timeout + takeover delay, plus up
    // to one tick period (fires land on whole seconds) and the slack.
    let owner = owners[0].to_owned();
    let index = nodes
        .iter()
        .position(|n| n.node_id == owner)
        .expect("owner is one of ours");
    let token = sample.token;
    let killed_ms = now_ms();
    nodes[index].kill();
    let bound = SESSION + DELAY + JITTER + TICK + SLACK;
    let taken = wait_fire(
        &fires,
        "an on-time fire by a new owner",
        killed_ms,
        bound + SLACK,
        |f| f.node != owner && f.resumed == "0",
    )
    .await;
    let took = Duration::from_millis(u64::try_from(taken.scheduled_ms - killed_ms).unwrap_or(0));
    println!("crash failover: first on-time tick of the new owner {took:?} after kill -9");
    assert!(took <= bound, "failover took {took:?}, bound {bound:?}");
    assert!(
        taken.token > token,
        "the new owner fires with a larger fencing token"
    );
    // misfire = run_once (the default): exactly one of the ticks missed meanwhile is caught up.
    wait_fire(&fires, "one caught-up tick", killed_ms, SLACK * 2, |f| {
        f.resumed == "1"
    })
    .await;
    let resumed: Vec<i64> = read_fires(&fires)
        .iter()
        .filter(|f| f.resumed == "1")
        .map(|f| f.scheduled_ms)
        .collect();
    assert_eq!(
        resumed.len(),
        1,
        "run_once catches up exactly one missed tick: {resumed:?}"
    );
    assert!(
        resumed[0] > killed_ms && resumed[0] < taken.scheduled_ms,
        "a tick of the outage: {resumed:?}"
    );
    fires_between(&fires, window.0, i64::MAX); // at most once per tick across the failover

    // SIGTERM of the new owner: a peer takes over and no tick is lost. The stop is aimed inside
    // the next tick's claim-ahead window, where the stopping owner has already claimed the tick:
    // the case that must hand the tick over rather than lose it. A loaded machine can make the
    // aim miss (the stop lands before the claim or after the run started), so the stopping
    // node's log says whether it withdrew a claimed tick; if not, a fresh node joins as the next
    // owner's peer and the next owner is stopped on a later tick.
    let mut owner = taken.node.clone();
    let mut exercised = None;
    for attempt in 1..=HANDOFF_AIMS {
        let index = nodes
            .iter()
            .position(|n| n.node_id == owner)
            .expect("owner is one of ours");
        // Aiming at a wall-clock instant is the scenario, not synchronisation.
        tokio::time::sleep(until_before_next_tick(AIM_BEFORE_TICK)).await;
        let stopped_ms = now_ms();
        nodes[index].signal(Signal::SIGTERM);
        let handed = wait_fire(
            &fires,
            "a fire after the handoff",
            stopped_ms,
            SLACK * 4,
            |f| f.node != owner,
        )
        .await;
        // A planned handoff loses no tick: the ticks around it are contiguous, whoever fired them.
        wait_fire(
            &fires,
            "two ticks after the handoff",
            handed.scheduled_ms + 1000,
            SLACK * 3,
            |_| true,
        )
        .await;
        let around = fires_between(&fires, stopped_ms - 3000, handed.scheduled_ms + 2000);
        let ticks: Vec<i64> = around.keys().copied().collect();
        let gaps: Vec<(i64, i64)> = ticks
            .windows(2)
            .filter(|w| w[1] - w[0] != 1000)
            .map(|w| (w[0], w[1]))
            .collect();
        assert!(
            gaps.is_empty(),
            "ticks lost around the graceful handoff at {stopped_ms}: {gaps:?} in {ticks:?}"
        );
        let status = nodes[index].wait_exit(Duration::from_secs(5)).await;
        assert!(
            status.success(),
            "graceful stop exits 0: {status}\n{}",
            nodes[index].log_tail()
        );
        fires_between(&fires, window.0, i64::MAX);
        assert_ne!(owner_of_latest(&fires), owner);

        let withdrawn = withdrawn_ticks(&nodes[index].log());
        if !withdrawn.is_empty() {
            exercised = Some((owner, withdrawn));
            break;
        }
        println!(
            "handoff aim {attempt}: the stop at {stopped_ms} ms withdrew no claimed tick; aiming again"
        );
        let joined = DaemonNode::start(dir.path(), &format!("n{}", 3 + attempt), &text);
        joined
            .wait_log("lock held by another node", SESSION * 5)
            .await;
        nodes.push(joined);
        owner = handed.node;
    }
    let Some((stopped, withdrawn)) = exercised else {
        panic!(
            "in {HANDOFF_AIMS} aims no stop landed inside a claim-ahead window: the handoff of a \
             claimed tick was never exercised"
        );
    };
    // The withdrawn tick went to the peer: fired once (`fires_between` panics on twice), not by
    // the node that gave it back.
    let all = fires_between(&fires, window.0, i64::MAX);
    for tick in withdrawn {
        let fire = all.get(&tick).unwrap_or_else(|| {
            panic!("the tick {tick} withdrawn by {stopped} for the handoff was never fired")
        });
        assert_ne!(
            fire.node, stopped,
            "the withdrawn tick {tick} is fired by the peer it was handed to"
        );
    }
}

/// Ticks (scheduled ms) of job `tick` whose claims a stopping node gave back, from its log.
fn withdrawn_ticks(log: &str) -> Vec<i64> {
    log.lines()
        .filter(|line| line.contains("claimed tick withdrawn for the handoff"))
        .map(|line| {
            let tick: String = line
                .split("/runs/tick/")
                .nth(1)
                .unwrap_or_default()
                .chars()
                .take_while(char::is_ascii_digit)
                .collect();
            tick.parse()
                .unwrap_or_else(|_| panic!("a tick's record path in {line:?}"))
        })
        .collect()
}

/// How long from now until `before` ahead of the next whole-second tick, skipping a tick that
/// is too close to aim at (less than 100 ms away).
fn until_before_next_tick(before: Duration) -> Duration {
    let now = now_ms();
    let before_ms = i64::try_from(before.as_millis()).expect("ms fit i64");
    let mut aim = now - now % 1000 + 1000 - before_ms;
    if aim - now < 100 {
        aim += 1000;
    }
    Duration::from_millis(u64::try_from(aim - now).unwrap_or(0))
}

#[tokio::test]
async fn timeout_kills_the_whole_process_group() {
    let _serial = fault_lock();
    let dir = tempfile::tempdir().expect("temp dir");
    let pids = dir.path().join("pids");
    let job = format!(
        "[[job]]\nname = \"stuck\"\nschedule = \"* * * * * *\"\ntimeout = \"1s\"\nkill_grace = \"500ms\"\n\
         shell = 'sleep 300 & echo $! >> {p}; echo $$ >> {p}; trap \"\" TERM; sleep 300'\n",
        p = pids.display()
    );
    let node = DaemonNode::start(dir.path(), "solo", &schedule("e2e-timeout", &job));
    let started = wait_for("the job's pids", SESSION * 5, || {
        let text = std::fs::read_to_string(&pids).unwrap_or_default();
        let pids: Vec<i32> = text.lines().filter_map(|l| l.trim().parse().ok()).collect();
        async move { (pids.len() >= 2).then_some(pids) }
    })
    .await;
    // timeout 1 s + grace 0.5 s, and the shell ignores SIGTERM: SIGKILL to the group ends both.
    wait_for(
        "the job's process group is gone",
        Duration::from_secs(1) + Duration::from_millis(500) + SLACK * 2,
        || {
            let alive = started[..2]
                .iter()
                .any(|&pid| nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), None).is_ok());
            async move { (!alive).then_some(()) }
        },
    )
    .await;
    node.wait_log("timed out", SLACK).await;
}

/// Issue 51 §3: `zkcron reload` (systemd's `ExecReload=`) waits for the daemon's answer: what
/// changed, or — exit 2, the reason on stderr, for the journal — why the file was refused, the
/// running schedule kept. systemd hears `RELOADING=1` (with `MONOTONIC_USEC`, which
/// `Type=notify-reload` needs) then `READY=1` for every reload, SIGHUP's too; `status` shows the
/// schedule each member runs and since when.
#[tokio::test]
async fn a_reload_tells_systemd_and_the_asker_what_changed_or_why_it_refused() {
    let _serial = fault_lock();
    let dir = tempfile::tempdir().expect("temp dir");
    let socket_path = dir.path().join("notify.sock");
    let notify = tokio::net::UnixDatagram::bind(&socket_path).expect("notify socket");
    let (a, b) = (dir.path().join("a.log"), dir.path().join("b.log"));
    let base = schedule("e2e-reload", &every_second("a", &a));
    let node = DaemonNode::start_with_env(
        dir.path(),
        "solo",
        &base,
        &[("NOTIFY_SOCKET", &socket_path)],
    );
    assert!(notice(&notify).await.contains("READY=1"));
    wait_fire(&a, "job a fires", 0, SESSION * 5, |_| true).await;
    let pid = node.pid().to_string();
    let reload = |json: bool| {
        let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_zkcron"));
        command.args(["reload", "--pid", &pid]);
        if json {
            command.arg("--json");
        }
        command.output().expect("zkcron reload")
    };

    node.rewrite(&format!(
        "{base}timeout = \"1h\"\n{}",
        every_second("b", &b)
    ));
    let applied = reload(true);
    let said = assert_exit(&applied, 0);
    let answer: serde_json::Value = serde_json::from_slice(&applied.stdout).expect(&said);
    assert_eq!(answer["format"], 1, "{said}");
    assert_eq!(answer["outcome"], "applied", "{said}");
    assert_eq!(
        answer["changes"]["added"],
        serde_json::json!(["b"]),
        "{said}"
    );
    assert_eq!(
        answer["changes"]["changed"],
        serde_json::json!([{"job": "a", "keys": ["timeout"]}]),
        "{said}"
    );
    let reloading = notice(&notify).await;
    assert!(
        reloading.contains("RELOADING=1") && reloading.contains("MONOTONIC_USEC="),
        "{reloading:?}"
    );
    assert!(notice(&notify).await.contains("READY=1"));
    let reloaded_ms = now_ms();
    wait_fire(&b, "the new job b fires", 0, SLACK * 3, |_| true).await;
    let schedule = answer["schedule"].as_str().unwrap_or_default().to_owned();
    let status = zkcron_status(&[], &node.config);
    assert!(
        status.contains(&format!("schedule {schedule} loaded ")),
        "status shows the schedule the member runs:\n{status}"
    );

    // SIGHUP: the same reload, answered in the log and to systemd alone.
    node.signal(Signal::SIGHUP);
    assert!(notice(&notify).await.contains("RELOADING=1"));
    assert!(notice(&notify).await.contains("READY=1"));
    node.wait_log("nothing changed", SLACK).await;

    node.rewrite(&format!(
        "{base}misfire = \"sometimes\"\n{}",
        every_second("b", &b)
    ));
    let refused = reload(false);
    let said = assert_exit(&refused, 2);
    assert!(
        said.contains("reload refused; the running schedule is kept") && said.contains("misfire"),
        "the journal gets the reason:\n{said}"
    );
    assert!(notice(&notify).await.contains("RELOADING=1"));
    let ready = notice(&notify).await;
    assert!(
        ready.contains("READY=1") && ready.contains("STATUS=reload refused"),
        "{ready:?}"
    );
    let after = now_ms();
    for (fires, job) in [(&a, "a"), (&b, "b")] {
        wait_fire(
            fires,
            &format!("job {job} still fires after the refused reload"),
            after,
            SLACK * 3,
            |_| true,
        )
        .await;
    }
    fires_between(&a, 0, i64::MAX);
    let b_fires = fires_between(&b, 0, i64::MAX);
    assert!(
        b_fires.keys().all(|&t| t > reloaded_ms - 1000),
        "b never fired before its reload"
    );
}

/// The next message the daemon sends systemd, within a bound that covers a reload's reading of
/// the file.
async fn notice(socket: &tokio::net::UnixDatagram) -> String {
    let mut buf = [0u8; 512];
    let received = tokio::time::timeout(SLACK * 3, socket.recv(&mut buf)).await;
    let len = received.expect("a notice within the bound").expect("recv");
    String::from_utf8_lossy(&buf[..len]).into_owned()
}

/// Issue 51 §4: `describe` shows a job as it will run — every key with the defaults applied and
/// where each comes from (its table's line, `[defaults]`, zkcron's default) — and as it runs:
/// its group's owner, its pause (by whom), its runs, the operator actions on it. `check --json`
/// lists the same keys.
#[tokio::test]
async fn describe_shows_every_key_with_its_origin_and_the_job_as_it_runs() {
    let _serial = fault_lock();
    let dir = tempfile::tempdir().expect("temp dir");
    let fires = dir.path().join("parent.log");
    let jobs = format!(
        "[defaults]\ntimeout = \"1h\"\n\n[[calendar]]\nname = \"y2k\"\ndates = [\"2000-01-01\"]\n\n\
         {}except = [\"y2k\"]\n\n[[job]]\nname = \"child\"\nafter = [\"parent\"]\nshell = \"true\"\n\n\
         [[job]]\nname = \"everywhere\"\nschedule = \"@hourly\"\nbroadcast = true\n\
         requires = [\"edge\"]\nshell = \"true\"\n",
        every_second("parent", &fires)
    );
    // Issue 51 §5: a drop-in overrides the parent's timeout alone; ZKCRON_NODE_ID names the
    // node over the file's node_id.
    let drop_in = dir.path().join("zkcron.d/50-host.toml");
    std::fs::create_dir(dir.path().join("zkcron.d")).expect("the drop-in directory");
    std::fs::write(
        &drop_in,
        "# this host\n[[job]]\nname = \"parent\"\ntimeout = \"7m\"\n",
    )
    .expect("the drop-in");
    let node = DaemonNode::start_with_env(
        dir.path(),
        "d1",
        &schedule("e2e-describe", &jobs),
        &[("ZKCRON_NODE_ID", Path::new("by-env"))],
    );
    wait_fire(&fires, "the parent fires", 0, SESSION * 5, |_| true).await;
    zkcron_ok(
        &["pause", "child", "--reason", "checking describe"],
        &node.config,
    );
    let file = std::fs::read_to_string(&node.config).expect("the schedule");
    let line_of = |text: &str| {
        file.lines()
            .position(|line| line.starts_with(text))
            .map(|index| index + 1)
            .expect(text)
    };

    let described: serde_json::Value =
        serde_json::from_str(&zkcron_ok(&["describe", "child", "--json"], &node.config))
            .expect("one JSON document");
    assert_eq!(described["format"], 1);
    let key = |name: &str| {
        described["keys"]
            .as_array()
            .and_then(|keys| keys.iter().find(|key| key["key"] == name))
            .cloned()
            .unwrap_or_else(|| panic!("no key {name}: {described}"))
    };
    assert_eq!(key("after")["value"], serde_json::json!(["parent"]));
    assert_eq!(key("after")["origin"]["from"], "job");
    assert_eq!(key("after")["origin"]["line"], line_of("after = "));
    assert_eq!(key("timeout")["value"], "1h");
    assert_eq!(key("timeout")["origin"]["from"], "defaults");
    assert_eq!(key("kill_grace")["value"], "10s");
    assert_eq!(key("kill_grace")["origin"]["from"], "default");
    assert_eq!(described["now"]["owner"], "by-env", "{described}");
    assert_eq!(described["now"]["paused"]["reason"], "checking describe");
    let actions: Vec<&str> = described["now"]["audit"]
        .as_array()
        .map(|entries| {
            entries
                .iter()
                .filter_map(|e| e["action"].as_str())
                .collect()
        })
        .unwrap_or_default();
    assert_eq!(actions, ["pause"], "{described}");
    assert_eq!(described["next_stops"], "paused", "{described}");

    let text = zkcron_ok(&["describe", "parent"], &node.config);
    let except = format!("{}:{}", node.config.display(), line_of("except = "));
    let timeout_from = format!("{}:4", drop_in.display());
    assert!(
        text.lines().any(|l| l.starts_with("timeout ")
            && l.contains("\"7m\"")
            && l.ends_with(&timeout_from)),
        "the drop-in's timeout, from its line:\n{text}"
    );
    assert!(
        text.contains("group:    default (owned by by-env")
            && text
                .lines()
                .any(|l| l.starts_with("except") && l.ends_with(&except))
            && text.contains("succeeded"),
        "the parent: its owner, its calendar's line, its runs:\n{text}"
    );
    let broadcast: serde_json::Value = serde_json::from_str(&zkcron_ok(
        &["describe", "everywhere", "--json"],
        &node.config,
    ))
    .expect("one JSON document");
    assert_eq!(
        broadcast["keys"][broadcast_index(&broadcast)]["value"],
        true
    );
    let check: serde_json::Value =
        serde_json::from_str(&zkcron_ok(&["check", "--json"], &node.config)).expect("check --json");
    assert_eq!(
        check["jobs"][2]["keys"]["requires"],
        serde_json::json!(["edge"])
    );
    assert_eq!(
        check["jobs"][1]["keys"]["after"],
        serde_json::json!(["parent"])
    );
    let refused = zkcron_refused(&["describe", "nosuch"], &node.config);
    assert!(refused.contains("no job named \"nosuch\""), "{refused}");
}

/// Where `broadcast` is among a description's keys.
fn broadcast_index(described: &serde_json::Value) -> usize {
    described["keys"]
        .as_array()
        .and_then(|keys| keys.iter().position(|key| key["key"] == "broadcast"))
        .unwrap_or_else(|| panic!("no broadcast key: {described}"))
}

#[tokio::test]
async fn status_shows_owner_token_and_members_and_fails_without_zookeeper() {
    let _serial = fault_lock();
    let dir = tempfile::tempdir().expect("temp dir");
    let fires = dir.path().join("fires.log");
    let text = schedule("e2e-status", &every_second("tick", &fires));
    let nodes = [
        DaemonNode::start(dir.path(), "s1", &text),
        DaemonNode::start(dir.path(), "s2", &text),
    ];
    let owner = wait_fire(&fires, "a first fire", 0, SESSION * 5, |_| true)
        .await
        .node;

    let output = std::process::Command::new(env!("CARGO_BIN_EXE_zkcron"))
        .args(["status", "--config"])
        .arg(&nodes[0].config)
        .output()
        .expect("run zkcron status");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        stdout.contains(&format!("owner:         {owner} (ip ")),
        "names the owner\n{stdout}"
    );
    assert!(
        stdout.contains("fencing token: 1 (latest acquisition by"),
        "shows the token\n{stdout}"
    );
    assert!(
        stdout.contains("members:       2"),
        "both members\n{stdout}"
    );
    for node in &nodes {
        assert!(
            stdout.contains(&format!("  {}  ip ", node.node_id)),
            "lists {}\n{stdout}",
            node.node_id
        );
    }

    // history: newest first, finished runs with their node and token.
    wait_fire(
        &fires,
        "three fires",
        0,
        Duration::from_secs(4) + SLACK,
        |f| {
            read_fires(&fires)
                .iter()
                .filter(|g| g.scheduled_ms <= f.scheduled_ms)
                .count()
                >= 3
        },
    )
    .await;
    let zkcron = |args: &[&str]| {
        std::process::Command::new(env!("CARGO_BIN_EXE_zkcron"))
            .args(args)
            .arg("--config")
            .arg(&nodes[0].config)
            .output()
            .expect("run zkcron")
    };
    let output = zkcron(&["history", "tick", "--limit", "2", "--json"]);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let records: Vec<serde_json::Value> =
        support::daemon::document_items(&String::from_utf8_lossy(&output.stdout), "runs")
            .iter()
            .map(|record| serde_json::from_str(record).expect("a record is JSON"))
            .collect();
    assert_eq!(records.len(), 2, "--limit 2");
    assert!(
        records[0]["scheduled_unix_ms"].as_i64() > records[1]["scheduled_unix_ms"].as_i64(),
        "newest first"
    );
    let done = records
        .iter()
        .find(|r| r["status"] == "succeeded")
        .expect("a finished run among the last two");
    assert_eq!(done["node_id"], owner.as_str());
    assert_eq!(done["exit_code"], 0);
    let output = zkcron(&["history", "tick", "--limit", "3"]);
    let table = String::from_utf8_lossy(&output.stdout);
    assert!(table.starts_with("SCHEDULED"), "a header\n{table}");
    assert_eq!(table.lines().count(), 4, "header and three runs\n{table}");

    let unreachable = dir.path().join("unreachable.toml");
    let status_at = |port: u16| {
        let text = format!(
            "[zookeeper]\nconnect = \"127.0.0.1:{port}\"\nconnect_timeout = \"1s\"\n\
             [lock]\nname = \"x\"\n"
        );
        std::fs::write(&unreachable, text).expect("write config");
        let output = std::process::Command::new(env!("CARGO_BIN_EXE_zkcron"))
            .args(["status", "--config"])
            .arg(&unreachable)
            .output()
            .expect("run zkcron status");
        let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
        (output, stderr)
    };
    let port = support::closed_port();
    let started = std::time::Instant::now();
    let (output, stderr) = status_at(port);
    assert_eq!(
        output.status.code(),
        Some(6),
        "status exits 6 when zookeeper cannot be reached\n{stderr}"
    );
    assert!(
        stderr.contains(&format!(
            "cannot reach zookeeper at 127.0.0.1:{port}: no zookeeper server of 127.0.0.1:{port} \
             accepts connections: 127.0.0.1:{port}: Connection refused"
        )),
        "{stderr}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(1) + SLACK,
        "connect_timeout bounds it"
    );

    // A server that accepts connections and never answers (a paused one): connect_timeout ends
    // the wait, and the message says so.
    let silent = std::net::TcpListener::bind("127.0.0.1:0").expect("silent listener");
    let silent_port = silent.local_addr().expect("address").port();
    let (output, stderr) = status_at(silent_port);
    assert_eq!(output.status.code(), Some(6), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "cannot reach zookeeper at 127.0.0.1:{silent_port}: no session within 1s"
        )),
        "{stderr}"
    );
}

#[tokio::test]
async fn systemd_hears_ready_once_the_schedule_is_loaded_even_without_zookeeper_and_stopping_on_stop()
 {
    // Issue 24: with ZooKeeper down at boot, READY=1 waited for a session, so `systemctl start`
    // blocked until the unit's start timeout killed the node into a restart loop. A free port
    // nobody listens on stands for the ensemble that is down.
    let dir = tempfile::tempdir().expect("temp dir");
    let socket_path = dir.path().join("notify.sock");
    let socket = tokio::net::UnixDatagram::bind(&socket_path).expect("notify socket");
    let nobody = std::net::TcpListener::bind("127.0.0.1:0").expect("a free port");
    let down = format!("{}/notify", nobody.local_addr().expect("its address"));
    drop(nobody);
    let fires = dir.path().join("fires.log");
    let text = schedule_at(&down, &every_second("tick", &fires));
    let mut node =
        DaemonNode::start_with_env(dir.path(), "sd", &text, &[("NOTIFY_SOCKET", &socket_path)]);

    let mut buf = [0u8; 512];
    // The bound is the process's start, not ZooKeeper's: it never answers.
    let received = tokio::time::timeout(SLACK * 2, socket.recv(&mut buf)).await;
    let len = received.expect("READY within the bound").expect("recv");
    let message = String::from_utf8_lossy(&buf[..len]).into_owned();
    assert!(
        message.contains("READY=1"),
        "first message is READY=1: {message:?}"
    );
    assert!(
        !node.log().contains("zookeeper session established"),
        "ready without a session:\n{}",
        node.log_tail()
    );
    let status = std::process::Command::new(env!("CARGO_BIN_EXE_zkcron"))
        .args(["status", "--config"])
        .arg(&node.config)
        .output()
        .expect("zkcron status");
    assert_eq!(
        status.status.code(),
        Some(6),
        "status says ZooKeeper cannot be reached: {status:?}"
    );

    node.signal(Signal::SIGTERM);
    let received = tokio::time::timeout(Duration::from_secs(5), socket.recv(&mut buf)).await;
    let len = received.expect("STOPPING within the bound").expect("recv");
    let message = String::from_utf8_lossy(&buf[..len]).into_owned();
    assert!(message.contains("STOPPING=1"), "{message:?}");
    assert!(node.wait_exit(Duration::from_secs(5)).await.success());
    assert!(
        read_fires(&fires).is_empty(),
        "nothing fired without ZooKeeper"
    );
}

#[tokio::test]
async fn a_frozen_owner_that_wakes_up_fires_no_tick_twice() {
    let _serial = fault_lock();
    let dir = tempfile::tempdir().expect("temp dir");
    let fires = dir.path().join("fires.log");
    let text = schedule("e2e-split-brain", &every_second("tick", &fires));
    let nodes = [
        DaemonNode::start(dir.path(), "f1", &text),
        DaemonNode::start(dir.path(), "f2", &text),
    ];
    let first = wait_fire(&fires, "a first fire", 0, SESSION * 5, |_| true).await;
    let frozen = nodes
        .iter()
        .position(|n| n.node_id == first.node)
        .expect("owner is ours");

    // Frozen past session timeout + takeover delay, the owner wakes believing it still owns the
    // lock, with due ticks, while the other node owns it with a larger token.
    nodes[frozen].signal(Signal::SIGSTOP);
    let frozen_ms = now_ms();
    let taken = wait_fire(
        &fires,
        "the other node takes over",
        frozen_ms,
        SESSION + DELAY + JITTER + TICK + SLACK * 2,
        |f| f.node != first.node,
    )
    .await;
    nodes[frozen].signal(Signal::SIGCONT);
    let woken_ms = now_ms();
    nodes[frozen].wait_log("lock lost", SESSION + SLACK).await;
    // Let the woken node's due ticks come and go: they are what could fire twice.
    wait_fire(
        &fires,
        "three more ticks",
        woken_ms + 3000,
        Duration::from_secs(4) + SLACK,
        |_| true,
    )
    .await;

    let ticks = fires_between(&fires, 0, i64::MAX); // panics on any tick fired twice
    let late: Vec<&Fire> = ticks
        .values()
        .filter(|f| f.node == first.node && f.scheduled_ms > frozen_ms + 1000)
        .collect();
    assert!(
        late.is_empty(),
        "the frozen owner fired after it froze: {late:?}\n{}",
        nodes[frozen].log_tail()
    );
    assert!(taken.token > first.token);
    let log = nodes[frozen].log();
    let refused = [
        "tick not claimed",
        "tick already claimed",
        "lock was lost after the claim",
        "too late to start",
        "tick missed",
        "not the owner",
    ];
    assert!(
        refused.iter().any(|why| log.contains(why)),
        "the woken node logs why it did not fire\n{}",
        nodes[frozen].log_tail()
    );
    println!(
        "woken node's refusals: {:?}",
        refused
            .iter()
            .filter(|why| log.contains(**why))
            .collect::<Vec<_>>()
    );
}

#[tokio::test]
async fn pruning_keeps_exactly_history_records_and_garbage_does_not_stop_firing() {
    let _serial = fault_lock();
    let dir = tempfile::tempdir().expect("temp dir");
    let fires = dir.path().join("fires.log");
    let connect = shared_ensemble()
        .isolated_connect_string("e2e-prune")
        .await
        .expect("chroot");
    let client = zookeeper_client::Client::connect(&connect)
        .await
        .expect("connect");
    let open =
        zookeeper_client::CreateMode::Persistent.with_acls(zookeeper_client::Acls::anyone_all());
    let runs = "/zkcron/e2e/runs/tick";
    client.mkdir(runs, &open).await.expect("runs dir");
    client
        .create(&format!("{runs}/not-a-tick"), b"x", &open)
        .await
        .expect("a foreign name");
    client
        .create(&format!("{runs}/1000"), b"\xffnot json", &open)
        .await
        .expect("an unreadable record");

    let job = format!("{}history = 3\n", every_second("tick", &fires));
    let _node = DaemonNode::start(dir.path(), "p1", &schedule_at(&connect, &job));
    let first = wait_fire(
        &fires,
        "a first fire despite the garbage",
        0,
        SESSION * 5,
        |_| true,
    )
    .await;
    wait_fire(
        &fires,
        "six fires",
        first.scheduled_ms + 5000,
        Duration::from_secs(7) + SLACK,
        |_| true,
    )
    .await;

    let children = || async {
        let names = client.list_children(runs).await.expect("list runs");
        let ticks = names
            .iter()
            .filter(|n| n.bytes().all(|b| b.is_ascii_digit()))
            .count();
        (ticks, names.iter().any(|n| n == "not-a-tick"))
    };
    // Between a run's end (prune) and the next claim, exactly `history` records stand; the next
    // tick's claim (sent ahead) may add one more for a moment. Within three ticks such a moment
    // comes.
    let most = std::cell::Cell::new(0);
    let seen = std::cell::RefCell::new(Vec::new());
    let foreign_kept = try_wait_for(
        "exactly `history` = 3 records",
        Duration::from_secs(3),
        || async {
            let (ticks, foreign_kept) = children().await;
            most.set(most.get().max(ticks));
            seen.borrow_mut().push(ticks);
            (ticks == 3).then_some(foreign_kept)
        },
    )
    .await
    .unwrap_or_else(|not_reached| {
        panic!("{not_reached} (record counts seen: {:?})", seen.borrow())
    });
    assert!(foreign_kept, "a foreign child name is left alone");
    assert!(
        most.get() <= 4,
        "never more than history plus the next claim: {} (record counts seen: {:?})",
        most.get(),
        seen.borrow()
    );
}

/// `start`/`end` lines of a slow job: (scheduled ms, node, wall ms) per event.
fn intervals(log: &Path) -> Vec<(String, i64, String, i64)> {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    text.lines()
        .map(|line| {
            let f: Vec<&str> = line.split(' ').collect();
            assert_eq!(f.len(), 4, "slow job line {line:?}");
            (
                f[0].to_owned(),
                f[1].parse().expect("tick"),
                f[2].to_owned(),
                f[3].parse().expect("ms"),
            )
        })
        .collect()
}

/// A job that runs `secs` seconds, logging its start and end with wall-clock ms.
fn slow_job(name: &str, schedule: &str, secs: u32, log: &Path, extra: &str) -> String {
    let line = |what: &str| {
        format!(
            "echo \"{what} $ZKCRON_SCHEDULED_UNIX_MS $ZKCRON_NODE $(date +%s%3N)\" >> {}",
            log.display()
        )
    };
    format!(
        "[[job]]\nname = \"{name}\"\nschedule = \"{schedule}\"\nkill_grace = \"1s\"\n{extra}\nshell = '{}; sleep {secs}; {}'\n",
        line("start"),
        line("end")
    )
}

#[tokio::test]
async fn forbid_never_overlaps_runs_even_across_a_kill_9_failover() {
    let _serial = fault_lock();
    let dir = tempfile::tempdir().expect("temp dir");
    let log = dir.path().join("slow.log");
    let text = schedule(
        "e2e-forbid",
        &slow_job("slow", "*/2 * * * * *", 5, &log, ""),
    );
    let mut nodes = [
        DaemonNode::start(dir.path(), "c1", &text),
        DaemonNode::start(dir.path(), "c2", &text),
    ];
    let starts =
        |events: &[(String, i64, String, i64)]| events.iter().filter(|e| e.0 == "start").count();
    wait_for("three runs started", Duration::from_secs(20), || {
        let n = starts(&intervals(&log));
        async move { (n >= 3).then_some(()) }
    })
    .await;

    // Kill the owner in the middle of its run: the run's process dies with it (its death signal).
    let running = intervals(&log).last().cloned().expect("a start");
    assert_eq!(running.0, "start");
    let owner = running.2.clone();
    let index = nodes
        .iter()
        .position(|n| n.node_id == owner)
        .expect("owner is ours");
    nodes[index].kill();
    let killed_ms = now_ms();
    wait_for(
        "the new owner finishes a run",
        SESSION + DELAY + Duration::from_secs(10),
        || {
            let done = intervals(&log).iter().any(|e| e.0 == "end" && e.2 != owner);
            async move { done.then_some(()) }
        },
    )
    .await;

    // Every run's interval, the killed one ending at the kill: none may overlap another.
    let events = intervals(&log);
    let mut runs: Vec<(i64, i64, String)> = Vec::new();
    for (what, tick, node, at) in &events {
        if what == "start" {
            let end = events
                .iter()
                .find(|e| e.0 == "end" && e.1 == *tick && &e.2 == node)
                .map_or(killed_ms, |e| e.3);
            runs.push((*at, end, node.clone()));
        }
    }
    runs.sort();
    for pair in runs.windows(2) {
        assert!(
            pair[1].0 >= pair[0].1,
            "two live runs at once: {:?} and {:?}\n{events:?}",
            pair[0],
            pair[1]
        );
    }
    let skipped = std::process::Command::new(env!("CARGO_BIN_EXE_zkcron"))
        .args(["history", "slow", "--json", "--limit", "50", "--config"])
        .arg(&nodes[1 - index].config)
        .output()
        .expect("zkcron history");
    let text = String::from_utf8_lossy(&skipped.stdout);
    assert!(
        text.contains("\"status\":\"skipped\""),
        "ticks during a run are recorded as skipped\n{text}"
    );
}

#[tokio::test]
async fn allow_overlaps_and_replace_cancels_the_previous_run() {
    let _serial = fault_lock();
    let dir = tempfile::tempdir().expect("temp dir");
    let (allow_log, replace_log) = (dir.path().join("allow.log"), dir.path().join("replace.log"));
    let jobs = format!(
        "{}\n{}",
        slow_job(
            "allowed",
            "* * * * * *",
            3,
            &allow_log,
            "concurrency = \"allow\""
        ),
        slow_job(
            "replaced",
            "*/2 * * * * *",
            5,
            &replace_log,
            "concurrency = \"replace\""
        )
    );
    let node = DaemonNode::start(dir.path(), "solo", &schedule("e2e-allow-replace", &jobs));
    wait_for("three replaced starts", Duration::from_secs(12), || {
        let n = intervals(&replace_log)
            .iter()
            .filter(|e| e.0 == "start")
            .count();
        async move { (n >= 3).then_some(()) }
    })
    .await;

    let allowed = intervals(&allow_log);
    let max_alive = allowed
        .iter()
        .filter(|e| e.0 == "start")
        .map(|s| {
            allowed
                .iter()
                .filter(|e| e.0 == "start" && e.3 <= s.3)
                .count()
                - allowed
                    .iter()
                    .filter(|e| e.0 == "end" && e.3 <= s.3)
                    .count()
        })
        .max()
        .unwrap_or(0);
    assert!(
        max_alive >= 2,
        "allow lets a 3 s job every second overlap: {allowed:?}"
    );

    // replace: each new run cancels the one before, so none of them reached its end line …
    let replaced = intervals(&replace_log);
    assert!(
        replaced.iter().all(|e| e.0 == "start"),
        "a replaced run never finishes its 5 s: {replaced:?}"
    );
    // … and the records say so.
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_zkcron"))
        .args(["history", "replaced", "--json", "--config"])
        .arg(&node.config)
        .output()
        .expect("zkcron history");
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(
        text.contains("\"status\":\"cancelled\""),
        "replaced runs are recorded as cancelled\n{text}"
    );
}

#[tokio::test]
async fn an_epoch_changed_behind_the_owners_back_does_not_stall_firing() {
    let _serial = fault_lock();
    let dir = tempfile::tempdir().expect("temp dir");
    let fires = dir.path().join("fires.log");
    let connect = shared_ensemble()
        .isolated_connect_string("e2e-epoch")
        .await
        .expect("chroot");
    let _node = DaemonNode::start(
        dir.path(),
        "e1",
        &schedule_at(&connect, &every_second("tick", &fires)),
    );
    let first = wait_fire(&fires, "a first fire", 0, SESSION * 5, |_| true).await;

    // An operator writes the epoch: the owner's claims fail their check from now on.
    let client = zookeeper_client::Client::connect(&connect)
        .await
        .expect("connect");
    let changed = client
        .set_data("/zkcron/e2e/epoch", b"operator was here", None)
        .await
        .expect("set epoch");
    let changed_ms = now_ms();
    let resumed = wait_fire(
        &fires,
        "firing resumes with a fresh token",
        changed_ms,
        SLACK * 5,
        |f| f.token > changed.version,
    )
    .await;
    assert!(
        resumed.token > first.token + 1,
        "re-acquired past the operator's write: {resumed:?}"
    );
    fires_between(&fires, 0, i64::MAX); // and never a tick twice
}

#[tokio::test]
async fn a_running_job_dies_with_a_killed_daemon() {
    // DESIGN.md promise 3: killed outside systemd's clean-up (SIGKILL, OOM), zkcron takes its
    // job with it, so no orphan overlaps the next owner's run. The job is started through the
    // binary's launcher, which must set the death signal before the exec.
    let _serial = fault_lock();
    let dir = tempfile::tempdir().expect("temp dir");
    let pids = dir.path().join("pids");
    let job = format!(
        "[[job]]\nname = \"long\"\nschedule = \"* * * * * *\"\n\
         shell = 'echo $$ >> {}; exec sleep 60'\n",
        pids.display()
    );
    let mut node = DaemonNode::start(dir.path(), "k1", &schedule("e2e-orphan", &job));
    let pid = wait_for("the job runs", SESSION + DELAY + SLACK * 3, || {
        let pid = std::fs::read_to_string(&pids).ok().and_then(|text| {
            text.lines()
                .next()
                .and_then(|line| line.parse::<i32>().ok())
        });
        async move { pid }
    })
    .await;
    let pid = nix::unistd::Pid::from_raw(pid);
    assert!(!support::is_dead(pid), "the job is alive before the kill");
    node.kill();
    // The kernel sends the signal as the daemon exits; bounded for a busy machine only.
    wait_for("the job dies with the daemon", SLACK * 5, || {
        let dead = support::is_dead(pid);
        async move { dead.then_some(()) }
    })
    .await;
}

#[tokio::test]
async fn run_with_zookeeper_refusing_says_where_and_why_at_the_first_attempt() {
    // Issue "Faster recovery": it used to say nothing until a whole session timeout had passed,
    // and then only "timeout".
    let dir = tempfile::tempdir().expect("temp dir");
    let port = support::closed_port();
    let text = format!(
        "[zookeeper]\nconnect = \"127.0.0.1:{port}\"\nsession_timeout = \"30s\"\n\
         [lock]\nname = \"x\"\n"
    );
    let node = DaemonNode::start(dir.path(), "u1", &text);
    // Well inside the 30 s session timeout: a process start and one refused connect.
    node.wait_log(
        &format!("no zookeeper server of 127.0.0.1:{port} accepts connections: 127.0.0.1:{port}: Connection refused"),
        SLACK * 3,
    )
    .await;
}

#[tokio::test]
async fn a_root_that_refuses_us_is_reported_with_its_path_and_retried_with_backoff() {
    // Issue "Faster recovery": ACL denial on the root. The chroot lets anyone read, nobody
    // create: zkcron cannot make its lock group under it.
    let dir = tempfile::tempdir().expect("temp dir");
    let chroot = unique_chroot("acl-denied");
    let raw = zookeeper_client::Client::connect(&shared_ensemble().connect_string())
        .await
        .expect("raw client");
    let read_only =
        zookeeper_client::CreateMode::Persistent.with_acls(zookeeper_client::Acls::anyone_read());
    raw.create(&chroot, &[], &read_only)
        .await
        .expect("read-only chroot");
    let connect = shared_ensemble().connect_string_with_chroot(&chroot);
    let node = DaemonNode::start(dir.path(), "acl", &schedule_at(&connect, ""));
    node.wait_log("lock group setup failed", SLACK * 3).await;
    let watched = std::time::Instant::now();
    // Long enough for the backoff to show: attempts 0.5 s, 1 s, 2 s, 4 s apart.
    tokio::time::sleep(Duration::from_secs(4)).await;
    let log = node.log();
    let failures: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("lock group setup failed"))
        .collect();
    assert!(
        failures
            .iter()
            .all(|l| l.contains("/zkcron/e2e/members") && l.contains("not authorized")),
        "each failure names the path and the refusal:\n{log}"
    );
    assert!(
        (2..=5).contains(&failures.len()),
        "retried with a doubling backoff, not in a loop: {} failures in {:?}\n{log}",
        failures.len(),
        watched.elapsed() + SLACK * 3
    );
}

/// Issue 51: `zkcron status` exits on the fleet's health, for a script: 4 while no node owns
/// the group, 0 once one does; `--wait` returns as soon as one does; `--member` is 5 for a node
/// that is not a live member; `/fleetz` says the same over HTTP; and 4 again once the only node
/// stops.
#[tokio::test]
async fn status_exits_on_the_fleets_health_and_waits_for_an_owner() {
    use std::process::{Command, Stdio};

    let _guard = fault_lock();
    let dir = tempfile::tempdir().expect("temp dir");
    let text = schedule(
        "status-health",
        "[http]\nlisten = \"127.0.0.1:0\"\n\n\
         [[job]]\nname = \"nightly\"\nschedule = \"0 0 3 * * *\"\ncommand = [\"/bin/true\"]\n",
    );
    let config = dir.path().join("client.toml");
    std::fs::write(&config, &text).expect("schedule");
    let status = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_zkcron"))
            .arg("status")
            .args(args)
            .arg("--config")
            .arg(&config)
            .output()
            .expect("run zkcron status")
    };
    let said = |output: &std::process::Output| {
        format!(
            "{}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        )
    };

    let nobody = status(&[]);
    assert_eq!(nobody.status.code(), Some(4), "{}", said(&nobody));
    assert!(
        said(&nobody).contains("group default: no owner"),
        "{}",
        said(&nobody)
    );
    let json: serde_json::Value = serde_json::from_slice(&status(&["--json"]).stdout)
        .expect("the report is printed even when unhealthy");
    assert_eq!(json["health"]["exit_code"], 4, "{json}");

    // A deploy waits for the owner: started before the node, it returns once the node owns.
    let waiting = Command::new(env!("CARGO_BIN_EXE_zkcron"))
        .args(["status", "--wait", "30s", "--config"])
        .arg(&config)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("status --wait");
    let mut node = DaemonNode::start(dir.path(), "n1", &text);
    let waited = tokio::task::spawn_blocking(move || waiting.wait_with_output())
        .await
        .expect("joined")
        .expect("status --wait ended");
    assert_eq!(waited.status.code(), Some(0), "{}", said(&waited));
    assert!(
        said(&waited).contains("every group has an owner that fires"),
        "{}",
        said(&waited)
    );

    assert_eq!(status(&["--member", "n1"]).status.code(), Some(0));
    let laptop = status(&["--member", "laptop"]);
    assert_eq!(laptop.status.code(), Some(5), "{}", said(&laptop));
    assert!(said(&laptop).contains("node laptop is not a live member"));

    let port = support::http::logged_port(&node.log()).expect("the listener's port");
    let fleet = support::http::request(port, "GET", "/fleetz", None, None).await;
    assert_eq!(fleet.status, 200, "{fleet:?}");
    assert!(fleet.body.contains("\"healthy\":true"), "{fleet:?}");

    node.signal(Signal::SIGTERM);
    node.wait_exit(Duration::from_secs(10)).await;
    let gone = status(&["--member", "n1"]);
    assert_eq!(
        gone.status.code(),
        Some(4),
        "no owner comes first: {}",
        said(&gone)
    );
    assert!(
        said(&gone).contains("node n1 is not a live member"),
        "{}",
        said(&gone)
    );
}
