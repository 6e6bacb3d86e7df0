#!/usr/bin/env bash
# The owner's CPU while firing (issue 54): what a fleet's owner spends to fire a small schedule.
#
# What it does: starts a throwaway 3-server ZooKeeper on loopback, builds or takes a release
# `zkcron`, and runs three `zkcron run` nodes of one schedule: a job every second and a job every
# 10 s (both `/bin/true`), session timeout 4 s and takeover delay 4 s (T = 4 s). Once the owner
# has fired for --settle seconds, it samples each node's own CPU (utime + stime of the node's
# process, all its threads; the jobs' processes are not the node's) over --window seconds.
#
# How to read the output: one line per node, owner first: CPU seconds per minute of the window
# (the goal of issue 54: <= 0.05 s a minute for the owner, members less), the ticks fired in the
# window by the owner, and CPU ms per fired tick. Clock ticks are 10 ms: over the default 120 s
# window that is ~1 % of the owner's figure.
#
# Usage: bench/owner_cpu.sh [--window S] [--settle S] [--binary PATH] [--keep]
#   --binary  use this zkcron instead of building one (cargo build --release honours
#             CARGO_TARGET_DIR)
#   --keep    keep the temp dir (ZooKeeper and node logs) for inspection
# Everything started is stopped by PID on exit and on Ctrl-C. Only 127.0.0.1 is used.
set -euo pipefail

# shellcheck source=bench/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

window=120
settle=20
binary=""

usage() {
  sed -n '2,19p' "$0" >&2
  exit 2
}

while (($#)); do
  case "$1" in
    --window) window=${2:?}; shift 2 ;;
    --settle) settle=${2:?}; shift 2 ;;
    --binary) binary=${2:?}; shift 2 ;;
    --keep) BENCH_KEEP=1; shift ;;
    -h | --help) usage ;;
    *) echo "unknown argument: $1" >&2; usage ;;
  esac
done
[[ "$window" =~ ^[0-9]+$ ]] && ((window >= 30)) || bench_die "--window must be an integer >= 30"
[[ "$settle" =~ ^[0-9]+$ ]] || bench_die "--settle must be an integer"

bench_init
binary=$(bench_binary "$binary")
work=$BENCH_WORK
clk_tck=$(getconf CLK_TCK)

echo "== environment"
bench_print_machine
printf '%-18s %s\n' "ensemble" "3 servers on 127.0.0.1, fsync on (default)"
printf '%-18s %s\n' "zkcron" "$binary ($("$binary" --version))"
printf '%-18s %s\n' "schedule" "every second and every 10 s, /bin/true; session 4 s, takeover 4 s"
printf '%-18s %s\n' "window" "settle ${settle} s after the owner's first fire, then ${window} s"

bench_zk_start 3

# schedule NODE: the schedule, with NODE's id in it (a flag for it came after 9797499, which
# this bench is compared with).
schedule() {
  cat <<EOF
[zookeeper]
connect = "$ZK_CONNECT/zkcron-bench"
session_timeout = "4s"

[lock]
name = "owner-cpu"
node_id = "$1"
takeover_delay = "4s"

[log]
level = "info"

[[job]]
name = "every-second"
schedule = "* * * * * *"
command = ["/bin/true"]

[[job]]
name = "every-ten"
schedule = "*/10 * * * * *"
command = ["/bin/true"]
EOF
}

nodes=(node-a node-b node-c)
declare -A pid_of
for node in "${nodes[@]}"; do
  schedule "$node" >"$work/$node.toml"
  "$binary" run --config "$work/$node.toml" </dev/null >"$work/$node.log" 2>&1 &
  pid_of[$node]=$!
  BENCH_PIDS+=("$!")
done
owner=""
for ((i = 0; i < 60 * 20; i++)); do
  for node in "${nodes[@]}"; do
    if grep -q "lock acquired" "$work/$node.log"; then owner=$node; fi
  done
  [[ -z "$owner" ]] || break
  sleep 0.05
done
[[ -n "$owner" ]] || bench_die "no node acquired the lock within 60 s"
bench_wait_log "$work/$owner.log" "job started" 30 "${pid_of[$owner]}"
sleep "$settle"

fired() { grep -c "job started" "$work/$owner.log" || true; }

declare -A before
for node in "${nodes[@]}"; do before[$node]=$(bench_cpu_ticks "${pid_of[$node]}"); done
fired_before=$(fired)
busy_before=$(bench_cpu_stat)
started=$(bench_now)
sleep "$window"
elapsed=$(awk -v a="$started" -v b="$(bench_now)" 'BEGIN { print b - a }')
fired_in_window=$(($(fired) - fired_before))
busy=$(bench_busy "$busy_before" "$(bench_cpu_stat)")

echo "== CPU of each node over ${elapsed%.*} s (machine busy ${busy} %)"
printf '%-8s %-7s %12s %14s %16s\n' node role "CPU s/min" "fired (owner)" "CPU ms per tick"
order=("$owner")
for node in "${nodes[@]}"; do [[ "$node" == "$owner" ]] || order+=("$node"); done
for node in "${order[@]}"; do
  role=member
  [[ "$node" == "$owner" ]] && role=owner
  ticks=$(($(bench_cpu_ticks "${pid_of[$node]}") - before[$node]))
  awk -v t="$ticks" -v hz="$clk_tck" -v s="$elapsed" -v f="$fired_in_window" -v n="$node" \
    -v r="$role" 'BEGIN {
      cpu = t / hz
      per_tick = (r == "owner" && f > 0) ? sprintf("%.2f", 1000 * cpu / f) : "-"
      printf "%-8s %-7s %12.3f %14s %16s\n", n, r, 60 * cpu / s, (r == "owner" ? f : "-"), per_tick
    }'
done
