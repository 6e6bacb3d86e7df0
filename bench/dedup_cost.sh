#!/usr/bin/env bash
# What a remembered submission id costs ZooKeeper (issue 24, docs/DELAYED.md "Idempotent ids").
#
# What it does: starts one throwaway ZooKeeper server on loopback and one `zkcron run` node
# (release build) with an on-demand job `/bin/true`, `history = 1` and `dedup_window = "1h"`;
# reads the server's heap after a full GC (jcmd GC.heap_info) and its `mntr` counts; submits N
# submissions (ids of 24 characters, a 16-byte payload) due over the next N/400 seconds; waits
# until every one has run and its record is pruned (the znode count stops moving), so that each
# id is left as a tombstone in a forget list; reads the heap and the counts again; stops zkcron
# and deletes the tombstones and the forget lists (zkCli.sh deleteall) and reads them once more.
# Per remembered id: what that delete gave back, over N (so nothing else left in the tree, such
# as due buckets not yet removed, is counted). It also prints what the same N cost while pending
# (before they ran), for comparison.
#
# Usage: bench/dedup_cost.sh [--ids N] [--binary PATH] [--keep]
# Everything started is stopped by PID on exit and on Ctrl-C. Only 127.0.0.1 is used.
set -euo pipefail

# shellcheck source=bench/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

ids=20000
binary=""
usage() { sed -n '/^# Usage:/,/^# Everything/p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
while (($#)); do
  case "$1" in
    --ids) ids=${2:?}; shift 2 ;;
    --binary) binary=${2:?}; shift 2 ;;
    --keep) BENCH_KEEP=1; shift ;;
    -h | --help) usage ;;
    *) echo "unknown argument: $1" >&2; usage ;;
  esac
done
export ZK_HEAP=512m

bench_init
binary=$(bench_binary "$binary")
load=$(bench_delayed_load)
work=$BENCH_WORK
ZK_CLI=/usr/share/zookeeper/bin/zkCli.sh
[[ -x $ZK_CLI ]] || bench_die "$ZK_CLI is missing: apt-get install -y zookeeper"

echo "== environment"
bench_print_machine
printf '%-18s %s\n' "ensemble" "1 server on 127.0.0.1, -Xmx$ZK_HEAP, SerialGC"
printf '%-18s %s\n' "zkcron" "$binary ($("$binary" --version))"
bench_zk_start 1
port=${ZK_CLIENT_PORTS[0]}

cat >"$work/zkcron.toml" <<TOML
[zookeeper]
connect = "$ZK_CONNECT/zkcron-bench"
session_timeout = "10s"

[lock]
name = "dedup"
node_id = "bench-node"

[[job]]
name = "due"
starting_deadline = "1h"
history = 1
dedup_window = "1h"
command = ["/bin/true"]
TOML

log="$work/zkcron.log"
"$binary" --log-level "zkcron=debug,info" run --config "$work/zkcron.toml" </dev/null >"$log" 2>&1 &
zkcron_pid=$!
BENCH_PIDS+=("$zkcron_pid")
bench_wait_log "$log" "owns the lock" 60 "$zkcron_pid"

server_pid=${BENCH_PIDS[0]}
heap_kib() { bench_heap_kib "$server_pid"; }
mntr() { bench_mntr "$port" "$1"; }
snapshot() { echo "$(heap_kib) $(mntr zk_znode_count) $(mntr zk_approximate_data_size)"; }

read -r heap0 znodes0 data0 <<<"$(snapshot)"
spread_ms=$((ids * 1000 / 400))
echo
echo "== $ids submissions due over $((spread_ms / 1000)) s"
"$load" "$work/zkcron.toml" due "$ids" 10000 "$spread_ms" 8 remembered-id- 100
read -r heap1 znodes1 data1 <<<"$(snapshot)"

deadline=$((SECONDS + 60 + spread_ms / 1000 * 3))
while (($(grep -c "job started" "$log" || true) < ids)); do
  ((SECONDS < deadline)) || bench_die "only $(grep -c 'job started' "$log") of $ids ran"
  bench_alive "$zkcron_pid" || bench_die "zkcron exited"
  sleep 1
done
# Pruned: the znode count stays put for 3 s (the owner prunes every 0.5 s, 1000 records a go).
last=-1
stable=0
while ((stable < 3)); do
  now=$(mntr zk_znode_count)
  if [[ "$now" == "$last" ]]; then stable=$((stable + 1)); else stable=0; fi
  last=$now
  sleep 1
done
# zkCli.sh prints its connection events too: the answer is the last line that is a number.
zkcli_count() {
  "$ZK_CLI" -server "127.0.0.1:$port" getAllChildrenNumber "$1" 2>/dev/null |
    grep -E '^[0-9]+$' | tail -n 1 || true
}
base=/zkcron-bench/zkcron/dedup/delayed
echo "znodes under $base: ids $(zkcli_count $base/ids), forget $(zkcli_count $base/forget)," \
  "due $(zkcli_count $base/due)"
read -r heap2 znodes2 data2 <<<"$(snapshot)"
bench_stop "$zkcron_pid" 30
bench_forget "$zkcron_pid"
for tree in ids forget; do
  "$ZK_CLI" -server "127.0.0.1:$port" deleteall "$base/$tree" >/dev/null 2>&1 || true
done
[[ -z "$(zkcli_count $base/ids)" ]] || bench_die "$base/ids was not deleted"
read -r heap3 znodes3 data3 <<<"$(snapshot)"

python3 - "$ids" "$heap0" "$znodes0" "$data0" "$heap1" "$znodes1" "$data1" \
  "$heap2" "$znodes2" "$data2" "$heap3" "$znodes3" "$data3" <<'PY'
import sys
n = int(sys.argv[1])
h0, z0, d0, h1, z1, d1, h2, z2, d2, h3, z3, d3 = map(int, sys.argv[2:])
def row(what, h, z, d):
    print(f"{what:<24} heap {h / 1024:7.1f} MiB  {(h * 1024) / n:6.0f} B/id   "
          f"znodes {z:7d} ({z / n:.2f}/id)   data {d / n:6.1f} B/id")
print(f"baseline                 heap {h0 / 1024:7.1f} MiB   znodes {z0}")
row("pending", h1 - h0, z1 - z0, d1 - d0)
row("remembered (tombstones)", h2 - h3, z2 - z3, d2 - d3)
per_id = (h2 - h3) * 1024 / n
for budget in (256, 1024):
    ids = budget * 1024 * 1024 / per_id
    print(f"{budget:5d} MiB of server heap remembers {ids:12,.0f} ids: "
          f"{ids / 86400:8,.1f} ids/s over a 24 h window, {ids / 3600:8,.0f} ids/s over 1 h")
PY
