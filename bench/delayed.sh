#!/usr/bin/env bash
# Delayed submissions under load: submit rate from one client, fire lateness at a steady rate of
# submissions coming due, and (with --pending N) what N pending submissions cost the owner and
# ZooKeeper and how soon a new owner is ready to fire.
#
# What it does: starts a throwaway ZooKeeper on loopback (default 3 servers, fsync on), one
# `zkcron run` node (release build) with one on-demand job
#     /bin/bash -c 'echo $ZKCRON_SCHEDULED_UNIX_MS $EPOCHREALTIME >> fires'
# and the load tool `examples/delayed_load.rs` (one client, many requests out at once):
#   1. submit rate: --submit N submissions due a day ahead over an hour, one by one, then 100 per
#      `submit_many` call (8 and 16 calls out at once), then due over one minute (dense: most
#      parents exist); they stay pending (see 3).
#   2. lateness: --rate R submissions per second coming due for --seconds S, submitted first;
#      lateness = job start ($EPOCHREALTIME) - due instant, every fire; missed and duplicate
#      fires counted (both must be 0).
#   3. with --pending N: N more submissions due over the 30 days ahead; then the owner's RSS,
#      each server's JVM heap after a full GC (jcmd GC.heap_info), and a restart of zkcron:
#      time from "owns the lock" to its first read of the due buckets ("due buckets read").
#
#   With --job true the job is /bin/true and lateness is read from zkcron's own "job started"
#   log line (the instant the process was spawned): what zkcron achieves when the job itself
#   costs next to nothing. A bash start costs this VM ~1.5 ms of CPU, so bash jobs cap the rate.
#
# Usage: bench/delayed.sh [--servers 1|3] [--submit N] [--rate R] [--seconds S] [--pending N]
#                         [--heap SIZE] [--job bash|true] [--binary PATH] [--keep]
#   --heap    each ZooKeeper server's -Xmx (default 256m; 1M pending needs about 2g)
# Everything started is stopped by PID on exit and on Ctrl-C. Only 127.0.0.1 is used.
set -euo pipefail

# shellcheck source=bench/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

servers=3
submit=20000
rate=1000
seconds=10
pending=0
job=bash
binary=""
usage() { sed -n '/^# Usage:/,/^# Everything/p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
while (($#)); do
  case "$1" in
    --servers) servers=${2:?}; shift 2 ;;
    --submit) submit=${2:?}; shift 2 ;;
    --rate) rate=${2:?}; shift 2 ;;
    --seconds) seconds=${2:?}; shift 2 ;;
    --pending) pending=${2:?}; shift 2 ;;
    --heap) ZK_HEAP=${2:?}; shift 2 ;;
    --job) job=${2:?}; shift 2 ;;
    --binary) binary=${2:?}; shift 2 ;;
    --keep) BENCH_KEEP=1; shift ;;
    -h | --help) usage ;;
    *) echo "unknown argument: $1" >&2; usage ;;
  esac
done
export ZK_HEAP="${ZK_HEAP:-256m}"

bench_init
binary=$(bench_binary "$binary")
load=$(bench_delayed_load)
work=$BENCH_WORK

echo "== environment"
bench_print_machine
printf '%-18s %s\n' "ensemble" "$servers server(s) on 127.0.0.1, fsync on, -Xmx$ZK_HEAP each"
printf '%-18s %s\n' "zkcron" "$binary ($("$binary" --version))"
fires="$work/fires"
case "$job" in
  bash) job_command='["/bin/bash", "-c", "echo $ZKCRON_SCHEDULED_UNIX_MS $EPOCHREALTIME >> '"$fires"'"]' ;;
  true) job_command='["/bin/true"]' ;;
  *) echo "--job is bash or true" >&2; usage ;;
esac
printf '%-18s %s\n' "job" "on demand: $job_command"

bench_zk_start "$servers"

: >"$fires"
cat >"$work/zkcron.toml" <<TOML
[zookeeper]
connect = "$ZK_CONNECT/zkcron-bench"
session_timeout = "10s"

[lock]
name = "delayed"
node_id = "bench-node"

[[job]]
name = "due"
starting_deadline = "1h"
history = 100
command = $job_command
TOML

start_zkcron() {
  log="$work/zkcron-$1.log"
  "$binary" --log-level "zkcron=debug,info" run --config "$work/zkcron.toml" </dev/null >"$log" 2>&1 &
  zkcron_pid=$!
  BENCH_PIDS+=("$zkcron_pid")
  bench_wait_log "$log" "owns the lock" 60 "$zkcron_pid"
}
start_zkcron 1

echo
echo "== 1. submit rate: $submit submissions from one client, due a day ahead over an hour"
echo "one by one, 256 out at once:"
"$load" "$work/zkcron.toml" due "$submit" 86400000 3600000 256 far-
echo "submit_many, 100 per call, 8 calls out at once:"
"$load" "$work/zkcron.toml" due "$submit" 86400000 3600000 8 batch- 100
echo "submit_many, 100 per call, 16 calls out at once:"
"$load" "$work/zkcron.toml" due "$submit" 86400000 3600000 16 wide- 100
echo "submit_many, 100 per call, 8 calls out at once, due over one minute (dense: few new parents):"
"$load" "$work/zkcron.toml" due "$submit" 86400000 60000 8 dense- 100

echo
echo "== 2. lateness: $rate submissions due per second for $seconds s"
total=$((rate * seconds))
lead_ms=$((total * 1000 / 2000 + 5000)) # submitted at >= 2000/s before the first is due
"$load" "$work/zkcron.toml" due "$total" "$lead_ms" $((seconds * 1000)) 8 now- 100
cpu_before=$(bench_cpu_stat)
wait_until=$((SECONDS + lead_ms / 1000 + seconds + 30))
fired() {
  if [[ $job == true ]]; then grep -c "job started" "$log" || true; else wc -l <"$fires"; fi
}
while (($(fired) < total && SECONDS < wait_until)); do
  bench_alive "$zkcron_pid" || { tail -n 30 "$log" >&2; bench_die "zkcron exited during the run"; }
  sleep 1
done
busy=$(bench_busy "$cpu_before" "$(bench_cpu_stat)")
echo "machine busy while they fired: ${busy}% of all $(nproc) CPUs"
python3 - "$fires" "$total" "$job" "$log" <<'PY'
import math, re, sys
from collections import Counter
from datetime import datetime
rows = []
if sys.argv[3] == "true":
    # zkcron's "job started" line: its timestamp is when the process was spawned.
    started = re.compile(r'^(\S+) +INFO zkcron::runner: job started job=due run_id="due-(\d+)-')
    for line in open(sys.argv[4]):
        m = started.match(line)
        if m:
            at = datetime.fromisoformat(m.group(1).replace("Z", "+00:00")).timestamp() * 1000.0
            rows.append((int(m.group(2)), at - int(m.group(2))))
else:
    for line in open(sys.argv[1]):
        p = line.split()
        if len(p) == 2:
            rows.append((int(p[0]), float(p[1].replace(",", ".")) * 1000.0 - int(p[0])))
def pct(v, p):
    return v[max(1, math.ceil(p / 100.0 * len(v))) - 1] if v else float("nan")
late = sorted(l for _, l in rows)
dups = sum(c - 1 for c in Counter(s for s, _ in rows).values() if c > 1)
print(f"fires {len(rows)} of {sys.argv[2]}   duplicates {dups}   early {sum(1 for l in late if l < 0)}")
if late:
    print(f"lateness ms   p50 {pct(late, 50):.3f}  p90 {pct(late, 90):.3f}  p99 {pct(late, 99):.3f}  "
          f"max {late[-1]:.3f}  min {late[0]:.3f}")
PY

rss_kib() { awk '/^VmRSS/ {print $2}' "/proc/$1/status"; }
heap() {
  local pid
  for pid in "${BENCH_PIDS[@]}"; do
    if grep -q QuorumPeerMain "/proc/$pid/cmdline" 2>/dev/null; then
      jcmd "$pid" GC.run >/dev/null 2>&1 || true
      # Used, summed over the generations (SerialGC: new and tenured), after the full GC.
      printf '  server pid %s: %s MiB used\n' "$pid" "$(jcmd "$pid" GC.heap_info 2>/dev/null |
        awk '/generation/ { for (i = 1; i < NF; i++) if ($i == "used") { v = $(i + 1); sub(/K,?$/, "", v); s += v } }
             END { printf "%.0f", s / 1024 }')"
    fi
  done
}

echo
echo "== owner RSS with $((2 * submit)) submissions pending: $(($(rss_kib "$zkcron_pid") / 1024)) MiB"
if ((pending > 0)); then
  echo
  echo "== 3. $pending more pending submissions, due over the next 30 days"
  "$load" "$work/zkcron.toml" due "$pending" 90000000 2592000000 8 many- 100
  echo "owner RSS: $(($(rss_kib "$zkcron_pid") / 1024)) MiB"
  echo "ZooKeeper heap after a full GC:"
  heap
  bench_stop "$zkcron_pid" 30
  bench_forget "$zkcron_pid"
  start_zkcron 2
  bench_wait_log "$log" "due buckets read" 60 "$zkcron_pid"
  python3 - "$log" <<'PY'
import re, sys
from datetime import datetime
def at(line):
    return datetime.fromisoformat(line.split()[0].replace("Z", "+00:00"))
owns = read = None
for line in open(sys.argv[1]):
    if owns is None and "owns the lock" in line:
        owns = at(line)
    if owns is not None and read is None and "due buckets read" in line:
        read = at(line)
        print("first bucket read: " + re.sub(r"^.*due buckets read ", "", line.strip()))
if owns and read:
    print(f"lock acquired -> due buckets read: {(read - owns).total_seconds() * 1000:.0f} ms")
else:
    print("no bucket read logged yet")
PY
  sleep 5
  echo "owner RSS after the restart: $(($(rss_kib "$zkcron_pid") / 1024)) MiB"
fi
