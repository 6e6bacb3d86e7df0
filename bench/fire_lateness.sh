#!/usr/bin/env bash
# Fire lateness of `zkcron run`: how long after its scheduled instant a job actually starts.
#
# What it does: starts a throwaway ZooKeeper on loopback (default: a 3-server ensemble, with
# ZooKeeper's default fsync of every transaction, since the per-tick ownership proof is a write
# through the ensemble's log), builds or takes a release `zkcron`, and runs ONE `zkcron run` node
# with one 1 Hz job (`* * * * * *`) for --seconds. The job is
#     /bin/bash -c 'echo $ZKCRON_SCHEDULED_UNIX_MS $EPOCHREALTIME >> fires'
# so every fire records its scheduled instant and the wall-clock moment bash started, without
# spawning anything else.
#
# How to read the output:
#   lateness = job start (bash's $EPOCHREALTIME) - scheduled instant, in ms. It includes the
#   fork+exec of bash; the "fork+exec floor" line measures that cost alone (bash started from a
#   Python harness), so lateness minus the floor is zkcron's own delay.
#   count/p50/p90/p99/max/min: over every recorded fire (nearest-rank percentiles); "first fire"
#   and "after it" split off the job's first fire, which may pay one-time costs.
#   EARLY: fires that started before their scheduled instant (must be 0; printed loudly).
#   duplicates: scheduled instants recorded more than once (must be 0).
#   'job started' log line - scheduled: when zkcron logged the start (right after its spawn
#   returned), so the part of the lateness that is zkcron waking up and spawning.
#   missed: whole seconds between (lock acquired + 1 s) and (stop - 1 s) with no fire (must be 0).
#   machine busy: share of all CPUs' time not idle during the run (ZooKeeper and zkcron included;
#   anything else running on the machine shows here and can explain outliers).
#   The zookeeper lines are each server's `mntr` request latency and fsync figures after the run.
#   Target (issue): p99 lateness <= 10 ms.
#
# Usage: bench/fire_lateness.sh [--servers 1|3] [--seconds N] [--binary PATH]
#                               [--log-level FILTER] [--keep]
#   --binary     use this zkcron instead of building one (cargo build --release honours
#                CARGO_TARGET_DIR)
#   --log-level  zkcron's log filter (default zkcron=debug,info); the log is kept with --keep
#   --keep       keep the temp dir (ZooKeeper and zkcron logs, the fires file) for inspection
# Everything started is stopped by PID on exit and on Ctrl-C. Only 127.0.0.1 is used.
set -euo pipefail

# shellcheck source=bench/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

servers=3
seconds=120
binary=""
log_level="zkcron=debug,info"
usage() { sed -n '/^# Usage:/,/^# Everything/p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
while (($#)); do
  case "$1" in
    --servers) servers=${2:?}; shift 2 ;;
    --seconds) seconds=${2:?}; shift 2 ;;
    --binary) binary=${2:?}; shift 2 ;;
    --log-level) log_level=${2:?}; shift 2 ;;
    --keep) BENCH_KEEP=1; shift ;;
    -h | --help) usage ;;
    *) echo "unknown argument: $1" >&2; usage ;;
  esac
done
[[ "$servers" == 1 || "$servers" == 3 ]] || bench_die "--servers must be 1 or 3"
[[ "$seconds" =~ ^[0-9]+$ ]] && ((seconds >= 5)) || bench_die "--seconds must be an integer >= 5"

bench_init
binary=$(bench_binary "$binary")
work=$BENCH_WORK

echo "== environment"
bench_print_machine
printf '%-18s %s\n' "ensemble" "$servers server(s) on 127.0.0.1, tickTime=2000"
printf '%-18s %s\n' "fsync" "on (ZooKeeper default forceSync=yes; dataDir on the work dir fs)"
printf '%-18s %s\n' "zkcron" "$binary ($("$binary" --version))"
printf '%-18s %s\n' "job" "'* * * * * *'  /bin/bash -c 'echo \$ZKCRON_SCHEDULED_UNIX_MS \$EPOCHREALTIME >> fires'"
printf '%-18s %s\n' "duration" "${seconds} s after the lock is acquired"
printf '%-18s %s\n' "zkcron log level" "$log_level"

bench_zk_start "$servers"

# The fork+exec floor, with ZooKeeper up and idle as during the run.
floor_file="$work/floor"
python3 - "$floor_file" <<'PY'
import subprocess, sys, time
samples = []
for _ in range(55):
    before = time.time()
    out = subprocess.run(["/bin/bash", "-c", "echo $EPOCHREALTIME"], capture_output=True,
                         text=True, check=True).stdout.strip().replace(",", ".")
    samples.append((float(out) - before) * 1000.0)
with open(sys.argv[1], "w") as f:
    f.write("\n".join(f"{s:.3f}" for s in samples[5:]))  # the first runs warm the page cache
PY

fires="$work/fires"
: >"$fires"
cat >"$work/zkcron.toml" <<TOML
[zookeeper]
connect = "$ZK_CONNECT/zkcron-bench"
session_timeout = "10s"

[lock]
name = "lateness"
node_id = "bench-node"

[log]
level = "info"

[[job]]
name = "tick"
schedule = "* * * * * *"
command = ["/bin/bash", "-c", "echo \$ZKCRON_SCHEDULED_UNIX_MS \$EPOCHREALTIME >> $fires"]
TOML
"$binary" check "$work/zkcron.toml" >/dev/null || bench_die "zkcron check refused the generated config"

log="$work/zkcron.log"
"$binary" --log-level "$log_level" run --config "$work/zkcron.toml" </dev/null >"$log" 2>&1 &
zkcron_pid=$!
BENCH_PIDS+=("$zkcron_pid")
bench_wait_log "$log" "lock acquired" 60 "$zkcron_pid"
acquired=$(bench_now)
cpu_before=$(bench_cpu_stat)
echo "lock acquired; measuring for ${seconds} s..." >&2
for ((i = 0; i < seconds; i++)); do
  bench_alive "$zkcron_pid" || { tail -n 30 "$log" >&2; bench_die "zkcron exited during the run"; }
  sleep 1
done
stopped=$(bench_now)
busy=$(bench_busy "$cpu_before" "$(bench_cpu_stat)")

for port in "${ZK_CLIENT_PORTS[@]}"; do
  bench_4lw "$port" mntr >"$work/mntr-$port"
done
bench_stop "$zkcron_pid" 30
bench_forget "$zkcron_pid"

echo
echo "== machine busy during the run: ${busy}% of all $(nproc) CPUs (ZooKeeper and zkcron included)"
echo "   load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
echo
python3 - "$fires" "$floor_file" "$log" "$acquired" "$stopped" <<'PY'
import math, re, sys
from collections import Counter
from datetime import datetime, timezone

fires_path, floor_path, log_path = sys.argv[1:4]
acquired, stopped = float(sys.argv[4]), float(sys.argv[5])

def pct(sorted_values, p):
    """Nearest-rank percentile."""
    if not sorted_values:
        return float("nan")
    rank = max(1, math.ceil(p / 100.0 * len(sorted_values)))
    return sorted_values[rank - 1]

def summary(values):
    v = sorted(values)
    return (f"p50 {pct(v, 50):7.3f}  p90 {pct(v, 90):7.3f}  p99 {pct(v, 99):7.3f}  "
            f"max {v[-1]:7.3f}  min {v[0]:7.3f}") if v else "no samples"

floor = [float(x) for x in open(floor_path).read().split()]
print(f"== fork+exec floor: {len(floor)} runs of /bin/bash -c 'echo $EPOCHREALTIME' "
      "from python subprocess, ms")
print(f"floor      {summary(floor)}")

rows = []
for line in open(fires_path):
    parts = line.split()
    if len(parts) != 2:
        continue
    scheduled_ms = int(parts[0])
    started_s = float(parts[1].replace(",", "."))
    rows.append((scheduled_ms, started_s * 1000.0 - scheduled_ms))
late = [l for _, l in rows]
counts = Counter(s for s, _ in rows)
duplicates = {s: c for s, c in counts.items() if c > 1}
first_expected = math.ceil(acquired + 1.0)
last_expected = math.floor(stopped - 1.0)
expected = set(range(first_expected * 1000, last_expected * 1000 + 1, 1000))
missed = sorted(expected - set(counts))
early = [(s, l) for s, l in rows if l < 0]
floor_p50 = pct(sorted(floor), 50)

def iso(ms):
    return datetime.fromtimestamp(ms / 1000, timezone.utc).isoformat(timespec="milliseconds")

print()
print("== lateness = job start ($EPOCHREALTIME in bash) - scheduled instant, ms")
print(f"fires      {len(rows)}   expected ticks in window {len(expected)}   "
      f"missed {len(missed)}   duplicates {len(duplicates)}   early {len(early)}")
print(f"lateness   {summary(late)}")
if len(rows) > 1:
    first = min(rows)
    print(f"first fire {first[1]:7.3f}  ({iso(first[0])}; a job's first tick may do one-time work)")
    print(f"after it   {summary([l for s, l in rows if s != first[0]])}")
if late:
    print(f"minus floor p50 ({floor_p50:.3f} ms): "
          f"p50 {pct(sorted(late), 50) - floor_p50:.3f}  p99 {pct(sorted(late), 99) - floor_p50:.3f}")
    worst = sorted(rows, key=lambda r: -r[1])[:5]
    print("worst 5    " + "  ".join(f"{l:.3f} ({iso(s)})" for s, l in worst))
if early:
    print("!" * 78)
    print(f"!!! EARLY FIRES: {len(early)} job(s) started BEFORE their scheduled instant:")
    for s, l in early:
        print(f"!!!   scheduled {iso(s)}  lateness {l:.3f} ms")
    print("!" * 78)
if duplicates:
    print("!!! DUPLICATE FIRES: " + ", ".join(f"{iso(s)} x{c}" for s, c in sorted(duplicates.items())))
if missed:
    print("!!! MISSED TICKS: " + ", ".join(iso(s) for s in missed[:20])
          + (" ..." if len(missed) > 20 else ""))

log = [re.sub(r"\x1b\[[0-9;]*m", "", l) for l in open(log_path, errors="replace").read().splitlines()]
stop = next((i for i, l in enumerate(log) if "SIGTERM: stopping" in l), len(log))
warn = [l for l in log[:stop] if re.search(r"\b(WARN|ERROR)\b", l)]
print()
print(f"== zkcron log until SIGTERM: {stop} lines, {len(warn)} WARN/ERROR "
      f"(tick missed: {sum('tick missed' in l for l in warn)}, "
      f"not firing: {sum('not firing' in l for l in warn)})")
for l in warn[:10]:
    print("  " + l)
# zkcron logs "job started" right after the spawn returned: splits wake-up+spawn from bash's start.
logged = {}
for l in log:
    m = re.search(r'^(\S+)\s.*job started.*run_id="?tick-(\d+)', l)
    if m:
        logged[int(m.group(2))] = datetime.fromisoformat(m.group(1).replace("Z", "+00:00")).timestamp() * 1000
spawned = [logged[s] - s for s, _ in rows if s in logged]
if spawned:
    print(f"'job started' log line - scheduled instant (zkcron woke and spawn returned), ms:")
    print(f"           {summary(spawned)}")

target_ok = bool(late) and pct(sorted(late), 99) <= 10.0 and not early and not duplicates and not missed
print()
print(f"== target: p99 lateness <= 10 ms, no early/duplicate/missed fire: "
      f"{'MET' if target_ok else 'NOT MET'}")
PY

echo
echo "== zookeeper mntr after the run (ms; latency = requests served by that server's clients,"
echo "   fsync = transaction log fsync, quorum ack = leader waiting for followers' acks)"
for port in "${ZK_CLIENT_PORTS[@]}"; do
  python3 - "$port" "$work/mntr-$port" <<'PY'
import sys
m = dict(l.split("\t", 1) for l in open(sys.argv[2]).read().splitlines() if "\t" in l)
g = lambda k: m.get(k, "-")
line = (f"  :{sys.argv[1]} {g('zk_server_state'):<10} requests avg {g('zk_avg_latency')} "
        f"max {g('zk_max_latency')} | fsync n {g('zk_cnt_fsynctime')} avg {g('zk_avg_fsynctime')} "
        f"max {g('zk_max_fsynctime')} over-threshold {g('zk_fsync_threshold_exceed_count')}")
if m.get("zk_server_state") == "leader":
    line += f" | quorum ack avg {g('zk_avg_quorum_ack_latency')} max {g('zk_max_quorum_ack_latency')}"
print(line if m else f"  :{sys.argv[1]} no answer to mntr")
PY
done
