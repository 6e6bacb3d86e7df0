#!/usr/bin/env bash
# Rebalance cost (issue 19): with 12 lock groups on 3 nodes, a 4th node joins, then one node
# stops (SIGTERM, a planned leave). For each change: the time from it to the balance being
# reached, the groups that moved, ZooKeeper's writes per move, and the ticks missed or run twice.
#
# What it does: starts a throwaway ZooKeeper on loopback, takes (or builds) a release `zkcron`,
# and runs two phases, each on a fresh lock name, with the settings of the file (defaults unless
# given: takeover_delay 10 s, rebalance_after 30 s, session_timeout 10 s):
#   writes  every group has one job that is not due during the phase, so that the only writes are
#           the fleet's own: ZooKeeper's zxid (`srvr`) counts them. The rate over --baseline
#           seconds before the join (members' clock checks, leases) is subtracted from the writes
#           between the change and the balance; what is left, divided by the moves, is the cost
#           of a move (for a join, the joining node's own session and member znodes included; for
#           a leave, each group the leaver handed over is a move).
#   ticks   every group has one every-second job appending "job tick" to a log (mawk, no work):
#           across the join and the leave no tick may be missing or run twice.
# The balance is reached when every group is owned, only by live nodes, none more than ⌈G/N⌉
# (`zkcron status --json`, polled every 200 ms).
#
# Usage: bench/rebalance.sh [--groups 12] [--nodes 3] [--rebalance-after 30s]
#          [--takeover-delay 10s] [--baseline 20] [--binary PATH] [--keep]
# Everything started is stopped by PID on exit and on Ctrl-C. Only 127.0.0.1 is used.
set -euo pipefail

# shellcheck source=bench/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

groups=12
nodes=3
rebalance_after=30s
takeover_delay=10s
baseline=20
binary=""
usage() { sed -n '/^# Usage:/,/^# Everything/p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
while (($#)); do
  case "$1" in
    --groups) groups=${2:?}; shift 2 ;;
    --nodes) nodes=${2:?}; shift 2 ;;
    --rebalance-after) rebalance_after=${2:?}; shift 2 ;;
    --takeover-delay) takeover_delay=${2:?}; shift 2 ;;
    --baseline) baseline=${2:?}; shift 2 ;;
    --binary) binary=${2:?}; shift 2 ;;
    --keep) BENCH_KEEP=1; shift ;;
    -h | --help) usage ;;
    *) echo "unknown argument: $1" >&2; usage ;;
  esac
done
[[ "$groups" =~ ^[0-9]+$ ]] && ((groups >= 2)) || bench_die "--groups must be at least 2"
[[ "$nodes" =~ ^[1-9][0-9]*$ ]] || bench_die "--nodes must be a positive integer"
[[ "$baseline" =~ ^[0-9]+$ ]] && ((baseline >= 5)) || bench_die "--baseline must be >= 5 seconds"

bench_init
binary=$(bench_binary "$binary")
work=$BENCH_WORK

echo "== environment"
bench_print_machine
printf '%-18s %s\n' "ensemble" "1 server on 127.0.0.1, tickTime=2000, fsync on (default)"
printf '%-18s %s\n' "zkcron" "$binary ($("$binary" --version))"
printf '%-18s %s\n' "fleet" "$groups groups ($((groups - 1)) [[group]]s and the default) on $nodes nodes, then $((nodes + 1)), then $nodes"
printf '%-18s %s\n' "settings" "rebalance_after $rebalance_after, takeover_delay $takeover_delay, session_timeout 10s"

bench_zk_start 1
zk_port=${ZK_CLIENT_PORTS[0]}

# gen_schedule FILE LOCK NODE_ID SCHEDULE LOG
gen_schedule() {
  python3 - "$@" "$ZK_CONNECT" "$groups" "$rebalance_after" "$takeover_delay" <<'PY'
import sys
path, lock, node, schedule, log, connect, groups, settle, delay = sys.argv[1:10]
groups = int(groups)
with open(path, "w") as f:
    f.write(f'[zookeeper]\nconnect = "{connect}/zkcron-bench"\nsession_timeout = "10s"\n\n'
            f'[lock]\nname = "{lock}"\nnode_id = "{node}"\ntakeover_delay = "{delay}"\n'
            f'rebalance_after = "{settle}"\n\n[log]\nlevel = "info"\n')
    for g in range(1, groups):
        f.write(f'\n[[group]]\nname = "g{g:02d}"\n')
    for g in range(groups):
        f.write(f'\n[[job]]\nname = "j{g:02d}"\nschedule = "{schedule}"\n')
        if g:
            f.write(f'group = "g{g:02d}"\n')
        program = f'BEGIN {{ print ENVIRON["ZKCRON_JOB"], ENVIRON["ZKCRON_SCHEDULED_UNIX_MS"] >> "{log}" }}'
        f.write(f"command = ['mawk', '{program}']\n")
PY
}

zxid() {
  bench_4lw "$zk_port" srvr | sed -n 's/^Zxid: //p' | python3 -c 'import sys; print(int(sys.stdin.read().strip(), 16))'
}

# moved "BEFORE" "AFTER": groups whose owner changed.
moved() {
  python3 - "$@" <<'PY'
import sys
before = dict(w.split("=", 1) for w in sys.argv[1].split())
after = dict(w.split("=", 1) for w in sys.argv[2].split())
print(sum(1 for g, o in before.items() if after.get(g) != o))
PY
}

declare -A PIDS
start_node() { # start_node PHASE ID
  "$binary" run --config "$work/$1-$2.toml" </dev/null >>"$work/$1-$2.log" 2>&1 &
  PIDS[$2]=$!
  BENCH_PIDS+=($!)
}

# wait_balance CONFIG LIVE...: prints "ms owners" once balanced (bounded: 10 minutes).
wait_balance() {
  local cfg=$1 since=$2
  shift 2
  local deadline=$((SECONDS + 600)) seen
  while ((SECONDS < deadline)); do
    seen=$(bench_group_owners "$binary" "$cfg")
    if [[ -n "$seen" ]] && bench_groups_balanced "$seen" "$groups" "$@"; then
      echo "$(($(date +%s%3N) - since)) $seen"
      return 0
    fi
    sleep 0.2
  done
  bench_die "not balanced over $* within 10 minutes (owners: $seen)"
}

# phase NAME SCHEDULE: the fleet, a join, a leave; prints the phase's rows into $work/rows.
phase() {
  local name=$1 schedule=$2 lock="rebalance-$1-$$" log="$work/ticks-$1.log" i ids=()
  : >"$log"
  for ((i = 1; i <= nodes + 1; i++)); do
    gen_schedule "$work/$name-n$i.toml" "$lock" "n$i" "$schedule" "$log"
    ids+=("n$i")
  done
  local first=${ids[*]:0:nodes} all=${ids[*]}
  local cfg="$work/$name-n1.toml" t0 out ms before after joined_at
  t0=$(date +%s%3N)
  for id in $first; do start_node "$name" "$id"; done
  # shellcheck disable=SC2086 # word lists of node ids
  read -r ms before <<<"$(wait_balance "$cfg" "$t0" $first)"
  local first_balanced=$((t0 + ms))
  echo "$name: $groups groups balanced over $nodes nodes ${ms} ms after start" >&2
  # Settled: the balancer moves nothing more once membership has been stable this long.
  sleep "$baseline"
  local z0 z1 z2
  z0=$(zxid)
  sleep "$baseline"
  z1=$(zxid)
  local rate
  rate=$(awk -v a="$z0" -v b="$z1" -v s="$baseline" 'BEGIN { printf "%.2f", (b - a) / s }')
  before=$(bench_group_owners "$binary" "$cfg")
  joined_at=$(date +%s%3N)
  start_node "$name" "n$((nodes + 1))"
  # shellcheck disable=SC2086
  read -r ms after <<<"$(wait_balance "$cfg" "$joined_at" $all)"
  z2=$(zxid)
  local join_moves join_writes
  join_moves=$(moved "$before" "$after")
  join_writes=$((z2 - z1))
  echo "$name join $ms $join_moves $join_writes $rate" >>"$work/rows"
  echo "$name: a join balanced in $ms ms, $join_moves moves, $join_writes writes" >&2
  sleep "$baseline"
  # A planned leave: the node that owns g01 stops; its groups are handed over.
  local leaver
  leaver=$(tr ' ' '\n' <<<"$after" | sed -n 's/^g01=//p')
  before=$(bench_group_owners "$binary" "$cfg")
  local z3 left_at live=()
  z3=$(zxid)
  left_at=$(date +%s%3N)
  bench_stop "${PIDS[$leaver]}" 60
  bench_forget "${PIDS[$leaver]}"
  for id in $all; do [[ $id == "$leaver" ]] || live+=("$id"); done
  [[ $leaver == n1 ]] && cfg="$work/$name-n2.toml"
  read -r ms after <<<"$(wait_balance "$cfg" "$left_at" "${live[@]}")"
  local z4 leave_moves
  z4=$(zxid)
  # The leaver's groups are handed over: each is a move.
  leave_moves=$(moved "$before" "$after")
  echo "$name leave $ms $leave_moves $((z4 - z3)) $rate $leaver" >>"$work/rows"
  echo "$name: $leaver left; balanced in $ms ms, $leave_moves moves, $((z4 - z3)) writes" >&2
  sleep 3
  local stop_ms
  stop_ms=$(date +%s%3N)
  for id in "${live[@]}"; do
    bench_stop "${PIDS[$id]}" 60
    bench_forget "${PIDS[$id]}"
  done
  if [[ $name == ticks ]]; then
    # Every tick from 2 s after the fleet first balanced to 2 s before the stop, of every job.
    python3 - "$log" "$groups" "$((first_balanced / 1000 * 1000 + 2000))" "$((stop_ms / 1000 * 1000 - 2000))" \
      >>"$work/ticks" <<'PY'
import sys
from collections import Counter
log, groups, first, last = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
runs = Counter()
for line in open(log):
    job, tick = line.split()
    runs[(job, int(tick))] += 1
expected = [(f"j{g:02d}", t) for g in range(groups) for t in range(first, last + 1, 1000)]
missing = sum(1 for k in expected if runs[k] == 0)
twice = sum(1 for k, n in runs.items() if n > 1)
print(len(expected), missing, twice)
PY
  fi
}

: >"$work/rows"
: >"$work/ticks"
# Not due while the phase lasts: 1 January at midnight.
phase writes "0 0 0 1 1 *"
phase ticks "* * * * * *"

echo
echo "== results"
printf '%-7s %-6s %12s %6s %13s %13s %16s\n' phase change "balanced ms" moves "writes (raw)" "writes/move" "baseline w/s"
while read -r name change ms moves writes rate _; do
  per_move="n/a"
  if [[ $name == writes ]] && ((moves > 0)); then
    per_move=$(awk -v w="$writes" -v r="$rate" -v ms="$ms" -v m="$moves" \
      'BEGIN { printf "%.1f", (w - r * ms / 1000) / m }')
  fi
  printf '%-7s %-6s %12s %6s %13s %13s %16s\n' "$name" "$change" "$ms" "$moves" "$writes" "$per_move" "$rate"
done <"$work/rows"
read -r expected missing twice <"$work/ticks"
echo
echo "ticks across the join and the leave (every-second jobs, all $groups groups): $expected expected, $missing missing, $twice run twice (target 0 and 0)"
