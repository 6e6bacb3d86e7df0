#!/usr/bin/env bash
# What a chain costs ZooKeeper (issue 36): the write ops a job's run adds when another job runs
# `after` it.
#
# What it does: starts a throwaway ZooKeeper on loopback, builds or takes a release `zkcron`,
# and runs ONE `zkcron run` node twice for --seconds each, on fresh roots of the same ensemble:
#   alone    `extract` every second (`/bin/true`, `history = 10`);
#   chained  the same `extract`, and `load` after it (`/bin/true`, `history = 10`).
# With --submitted, `extract` has no schedule: a loop submits it once a second (`zkcron submit`,
# a payload, no id), so `load` follows submitted runs: the mark carries the payload, and the
# child is a submission of its own.
# Each phase counts the node's own write ops by kind (its /metrics), from the third second to
# the end, per run of `extract`; the chained phase also counts `load`'s runs (its records). The
# submitter's own writes (the request and its marker) are not the node's and are not counted.
#
# How to read the output:
#   writes per extract run, by kind, in each phase; "added by the chain" is the difference: the
#   mark in the parent's final record, the child's claim (its record, the mark's delete), its
#   final record and its prune. The servers' transactions (zxid) beside them.
#   loads: how many of load's runs the phase recorded against extract's succeeded ones (must be
#   equal, give or take the one in flight at the stop).
#
# Usage: bench/chain_cost.sh [--servers 1|3] [--seconds N] [--submitted] [--binary PATH] [--keep]
# Everything started is stopped by PID on exit and on Ctrl-C. Only 127.0.0.1 is used.
set -euo pipefail

# shellcheck source=bench/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

servers=1
seconds=30
binary=""
submitted=0
usage() { sed -n '/^# Usage:/,/^# Everything/p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
while (($#)); do
  case "$1" in
    --servers) servers=${2:?}; shift 2 ;;
    --seconds) seconds=${2:?}; shift 2 ;;
    --binary) binary=${2:?}; shift 2 ;;
    --submitted) submitted=1; shift ;;
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
printf '%-18s %s\n' "ensemble" "$servers server(s) on 127.0.0.1"
printf '%-18s %s\n' "zkcron" "$binary ($("$binary" --version))"
printf '%-18s %s\n' "duration" "${seconds} s a phase"
printf '%-18s %s\n' "parent" "$( ((submitted)) && echo "submitted once a second" || echo "every second on its schedule")"
bench_zk_start "$servers"

# phase NAME EXTRA_JOBS: runs the node with `extract` and EXTRA_JOBS, prints its writes per run
# of extract.
phase() {
  local name=$1 extra=$2 dir="$work/$1"
  mkdir -p "$dir"
  cat >"$dir/zkcron.toml" <<TOML
[zookeeper]
connect = "$ZK_CONNECT/zkcron-chain-$name"
session_timeout = "10s"

[lock]
name = "chain"
node_id = "bench-node"

[http]
listen = "127.0.0.1:0"

[[job]]
name = "extract"
$( ((submitted)) || echo 'schedule = "* * * * * *"')
history = 10
command = ["/bin/true"]
$extra
TOML
  "$binary" check "$dir/zkcron.toml" >/dev/null || bench_die "zkcron check refused the $name config"
  local log="$dir/zkcron.log" pid port before after from runs
  "$binary" run --config "$dir/zkcron.toml" </dev/null >"$log" 2>&1 &
  pid=$!
  BENCH_PIDS+=("$pid")
  bench_wait_log "$log" "lock acquired" 60 "$pid"
  port=$(sed -n 's/.*http listener up.*listen=[^ ]*:\([0-9]*\).*/\1/p' "$log" | head -n 1)
  [[ -n "$port" ]] || bench_die "no 'http listener up' line in the zkcron log"
  local submitter="" count="$dir/submitted"
  if ((submitted)); then
    : >"$count"
    # One submit a second, each counted once its command returned.
    (
      while :; do
        "$binary" submit extract --in 0s --payload "order payload" --config "$dir/zkcron.toml" >/dev/null &&
          echo >>"$count"
        sleep 1
      done
    ) &
    submitter=$!
    BENCH_PIDS+=("$submitter")
  fi
  sleep 2
  before=$(bench_writes "$port" "${ZK_CLIENT_PORTS[0]}")
  from=$(bench_now)
  local submitted_before
  submitted_before=$(wc -l <"$count" 2>/dev/null || echo 0)
  sleep "$seconds"
  after=$(bench_writes "$port" "${ZK_CLIENT_PORTS[0]}")
  if ((submitted)); then
    runs=$(($(wc -l <"$count") - submitted_before))
    bench_stop "$submitter" 5
    bench_forget "$submitter"
  else
    runs=$(awk -v a="$from" -v b="$(bench_now)" 'BEGIN { printf "%d", (b - a) + 0.5 }')
  fi
  ((runs > 0)) || bench_die "no run of extract in the $name phase (see $log)"
  echo "== $name: $runs runs of extract"
  bench_writes_per "$before" "$after" "$runs" "extract run"
  if [[ "$name" == chained ]]; then
    local extracts loads
    extracts=$("$binary" history extract --limit 10 --json --config "$dir/zkcron.toml" | python3 -c 'import json, sys; print(sum(r["status"] == "succeeded" for r in json.load(sys.stdin)["runs"]))')
    loads=$("$binary" history load --limit 10 --json --config "$dir/zkcron.toml" | python3 -c 'import json, sys; print(sum("parents" in r for r in json.load(sys.stdin)["runs"]))')
    echo "loads         of the newest 10 records: $extracts extract succeeded, $loads load records name their parent"
  fi
  bench_stop "$pid" 30
  bench_forget "$pid"
  RUN_WRITES=$(python3 - "$before" "$after" "$runs" <<'PY'
import sys
def total(line):
    return sum(int(w.split(":")[1]) for w in line.split()[1:])
print(f"{(total(sys.argv[2]) - total(sys.argv[1])) / max(int(sys.argv[3]), 1):.2f}")
PY
)
}

phase alone ""
alone=$RUN_WRITES
phase chained '[[job]]
name = "load"
after = ["extract"]
history = 10
command = ["/bin/true"]'
chained=$RUN_WRITES
echo "== added by the chain"
awk -v a="$alone" -v c="$chained" 'BEGIN { printf "write ops per chained run: %.2f (alone %.2f, with its child %.2f)\n", c - a, a, c }'
