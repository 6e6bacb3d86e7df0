#!/usr/bin/env bash
# What a broadcast job costs ZooKeeper (issue 36): the write ops and transactions a tick of a
# job run on every node adds, per node and for the fleet, at --nodes nodes.
#
# What it does: starts a throwaway ZooKeeper on loopback, builds or takes a release `zkcron`,
# and runs --nodes `zkcron run` nodes on one root, with `everywhere` every second
# (`broadcast = true`, `/bin/true`, `history = 10`). Once every node is a member and has run,
# it counts each node's own write ops by kind (its /metrics) and the servers' transactions
# (zxid) over --seconds, per tick.
#
# How to read the output:
#   fleet writes per tick, by kind: claim (each node's record), final (each node's final
#   record), prune (the owner's, of the records beyond history × nodes), member (the members'
#   clock checks, not the job's); the servers' transactions per tick beside them.
#   per node: the same divided by the nodes.
#   records: how many nodes ran (or were recorded missing) each of the newest full ticks.
#
# Usage: bench/broadcast_cost.sh [--nodes N] [--seconds N] [--binary PATH] [--keep]
# Everything started is stopped by PID on exit and on Ctrl-C. Only 127.0.0.1 is used.
set -euo pipefail

# shellcheck source=bench/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

nodes=3
seconds=30
binary=""
usage() { sed -n '/^# Usage:/,/^# Everything/p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
while (($#)); do
  case "$1" in
    --nodes) nodes=${2:?}; shift 2 ;;
    --seconds) seconds=${2:?}; shift 2 ;;
    --binary) binary=${2:?}; shift 2 ;;
    --keep) BENCH_KEEP=1; shift ;;
    -h | --help) usage ;;
    *) echo "unknown argument: $1" >&2; usage ;;
  esac
done
[[ "$nodes" =~ ^[0-9]+$ ]] && ((nodes >= 1 && nodes <= 64)) || bench_die "--nodes must be 1..64"
[[ "$seconds" =~ ^[0-9]+$ ]] && ((seconds >= 5)) || bench_die "--seconds must be an integer >= 5"

bench_init
binary=$(bench_binary "$binary")
work=$BENCH_WORK

echo "== environment"
bench_print_machine
printf '%-18s %s\n' "ensemble" "1 server on 127.0.0.1"
printf '%-18s %s\n' "zkcron" "$binary ($("$binary" --version))"
printf '%-18s %s\n' "fleet" "$nodes nodes, ${seconds} s measured"
bench_zk_start 1

pids=()
ports=()
for ((i = 1; i <= nodes; i++)); do
  dir="$work/node-$i"
  mkdir -p "$dir"
  cat >"$dir/zkcron.toml" <<TOML
[zookeeper]
connect = "$ZK_CONNECT/zkcron-broadcast"
session_timeout = "10s"

[lock]
name = "broadcast"
node_id = "bench-$i"

[http]
listen = "127.0.0.1:0"

[[job]]
name = "everywhere"
schedule = "* * * * * *"
broadcast = true
history = 10
command = ["/bin/true"]
TOML
  "$binary" run --config "$dir/zkcron.toml" </dev/null >"$dir/zkcron.log" 2>&1 &
  pids+=("$!")
  BENCH_PIDS+=("$!")
done
for ((i = 1; i <= nodes; i++)); do
  log="$work/node-$i/zkcron.log"
  bench_wait_log "$log" "a member since" 120 "${pids[$((i - 1))]}"
  port=$(sed -n 's/.*http listener up.*listen=[^ ]*:\([0-9]*\).*/\1/p' "$log" | head -n 1)
  [[ -n "$port" ]] || bench_die "no 'http listener up' line in $log"
  ports+=("$port")
done
# Some node owns the lock (and prunes): any of them.
for ((i = 0; i < 600; i++)); do
  grep -qs "lock acquired" "$work"/node-*/zkcron.log && break
  sleep 0.1
done
grep -qs "lock acquired" "$work"/node-*/zkcron.log || bench_die "no node acquired the lock within 60 s"
sleep 3

# Every node's counters at once (one after another took 20 nodes 5 s, skewing the window).
snapshot() {
  local i snap="$work/snapshot" readers=()
  for i in "${!ports[@]}"; do
    bench_writes "${ports[$i]}" "${ZK_CLIENT_PORTS[0]}" >"$snap.$i" &
    readers+=("$!")
  done
  # Only the readers: a bare `wait` would wait for the nodes too.
  wait "${readers[@]}"
  for i in "${!ports[@]}"; do cat "$snap.$i"; done
}
before=$(snapshot)
cpu_before=$(bench_cpu_stat)
from=$(bench_now)
sleep "$seconds"
after=$(snapshot)
cpu_after=$(bench_cpu_stat)
ticks=$(awk -v a="$from" -v b="$(bench_now)" 'BEGIN { printf "%d", (b - a) + 0.5 }')

echo "== $nodes nodes, $ticks ticks of everywhere (the machine was $(bench_busy "$cpu_before" "$cpu_after")% busy)"
python3 - "$ticks" "$nodes" "$before" "$after" <<'PY'
import sys
ticks, nodes = int(sys.argv[1]), int(sys.argv[2])
def parse(block):
    zxids, kinds = [], {}
    for line in block.splitlines():
        words = line.split()
        zxids.append(int(words[0].split("=")[1]))
        for word in words[1:]:
            kind, ops, checks, txns = word.split(":")
            o, c, t = kinds.get(kind, (0, 0, 0))
            kinds[kind] = (o + int(ops), c + int(checks), t + int(txns))
    return max(zxids), kinds
zb, kb = parse(sys.argv[3])
za, ka = parse(sys.argv[4])
delta = {}
for kind, (o, c, t) in ka.items():
    bo, bc, bt = kb.get(kind, (0, 0, 0))
    if (o - bo, c - bc, t - bt) != (0, 0, 0):
        delta[kind] = (o - bo, c - bc, t - bt)
job = {k: v for k, v in delta.items() if k in ("claim", "final", "prune", "record")}
def line(what, kinds, per):
    ops = sum(d[0] for d in kinds.values())
    txns = sum(d[2] for d in kinds.values())
    detail = ", ".join(f"{k} {d[0] / per:.2f}" for k, d in sorted(kinds.items(), key=lambda kv: -kv[1][0]))
    print(f"{what}: {ops / per:.2f} write ops ({detail}), {txns / per:.2f} transactions")
line("fleet, the job's writes per tick      ", job, ticks)
line("fleet, every write per tick           ", delta, ticks)
line("per node, the job's writes per tick   ", job, ticks * nodes)
print(f"servers logged {(za - zb) / ticks:.2f} transactions per tick ({(za - zb) / ticks / nodes:.2f} per node)")
PY
"$binary" history everywhere --json --limit 10000 --config "$work/node-1/zkcron.toml" | python3 -c '
import collections, json, sys
by_tick = collections.defaultdict(collections.Counter)
for r in json.load(sys.stdin)["runs"]:
    by_tick[r["scheduled_unix_ms"]][r["status"]] += 1
full = sorted(by_tick)[-6:-2]
for tick in full:
    print(f"records       tick {tick}: " + ", ".join(f"{n} {s}" for s, n in sorted(by_tick[tick].items())))
'
for pid in "${pids[@]}"; do
  bench_stop "$pid" 30
  bench_forget "$pid"
done
