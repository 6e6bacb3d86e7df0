#!/usr/bin/env bash
# What the audit trail costs ZooKeeper (issue 34, docs/CONFIG.md "[audit]"): each operator
# action is one znode in its day's bucket.
#
# What it does: starts one throwaway ZooKeeper server on loopback; reads its heap after a full
# GC (jcmd GC.heap_info) and its `mntr` counts; writes N entries spread over ten days
# (examples/audit_load.rs: a pause with a reason, by a user@host, from the CLI — a typical entry)
# and times each create; reads the heap and counts again; prunes them all as the owner does
# once they are older than `[audit] keep` (whole days, multi-ops of 500 deletes) and reads
# the counts a last time. Per entry: heap, znodes and data.
#
# Usage: bench/audit_cost.sh [--entries N] [--keep]
# Everything started is stopped by PID on exit and on Ctrl-C. Only 127.0.0.1 is used.
set -euo pipefail

# shellcheck source=bench/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

entries=20000
usage() { sed -n '/^# Usage:/,/^# Everything/p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
while (($#)); do
  case "$1" in
    --entries) entries=${2:?}; shift 2 ;;
    --keep) BENCH_KEEP=1; shift ;;
    -h | --help) usage ;;
    *) echo "unknown argument: $1" >&2; usage ;;
  esac
done
export ZK_HEAP=512m

bench_init
cd "$(dirname "${BASH_SOURCE[0]}")/.."
cargo build --release --locked --quiet --example audit_load
load="${CARGO_TARGET_DIR:-target}/release/examples/audit_load"

echo "== environment"
bench_print_machine
printf '%-18s %s\n' "ensemble" "1 server on 127.0.0.1, -Xmx$ZK_HEAP, SerialGC"
bench_zk_start 1
port=${ZK_CLIENT_PORTS[0]}
server_pid=${BENCH_PIDS[0]}
heap_kib() { bench_heap_kib "$server_pid"; }
mntr() { bench_mntr "$port" "$1"; }
snapshot() { echo "$(heap_kib) $(mntr zk_znode_count) $(mntr zk_approximate_data_size)"; }

read -r heap0 znodes0 data0 <<<"$(snapshot)"
echo
echo "== $entries entries over ten days"
"$load" "$ZK_CONNECT/zkcron-bench" write "$entries"
read -r heap1 znodes1 data1 <<<"$(snapshot)"
"$load" "$ZK_CONNECT/zkcron-bench" prune
read -r heap2 znodes2 data2 <<<"$(snapshot)"

python3 - "$entries" "$heap0" "$znodes0" "$data0" "$heap1" "$znodes1" "$data1" \
  "$heap2" "$znodes2" "$data2" <<'PY'
import sys
n = int(sys.argv[1])
h0, z0, d0, h1, z1, d1, h2, z2, d2 = map(int, sys.argv[2:])
print(f"baseline   heap {h0 / 1024:7.1f} MiB   znodes {z0}")
print(f"kept       heap {(h1 - h0) / 1024:7.1f} MiB  {(h1 - h0) * 1024 / n:6.0f} B/entry   "
      f"znodes {z1 - z0:7d} ({(z1 - z0) / n:.3f}/entry)   data {(d1 - d0) / n:6.1f} B/entry")
# The heap right after a prune still holds the deletes' transactions (ZooKeeper keeps the last
# 500 committed in memory), so what the prune gives back is read from the tree, not the heap.
print(f"pruned     znodes left {z2 - z0}, data left {d2 - d0} B")
per = max((h1 - h0) * 1024 / n, 1)
for budget in (64, 256):
    kept = budget * 1024 * 1024 / per
    print(f"{budget:4d} MiB of server heap keeps {kept:12,.0f} entries: "
          f"{kept / 30:10,.0f} actions a day for the default 30 days")
PY
