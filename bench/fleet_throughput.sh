#!/usr/bin/env bash
# Fleet throughput: how many fires a second 3 nodes sustain with every tick run, when the jobs
# are spread over 12 lock groups, against the same jobs in one group (issue 19).
#
# What it does: starts a throwaway ZooKeeper on loopback, takes (or builds) a release `zkcron`,
# and gives each of --nodes nodes a CPU cap of its own: a cgroup (v1 `cpu.cfs_quota_us`, or v2
# `cpu.max`) holding the node and, as its children, every job it runs. The jobs are J every-second
# jobs (`* * * * * *`) of a fixed CPU cost: mawk counting to --loops (about 20 ms of CPU by
# default, measured below), then appending "job tick" to a log. For each layout (one group: the
# default; --groups G: G-1 `[[group]]`s and the default, jobs assigned round robin) and each J of
# its --rates list, it starts the nodes on a fresh lock name, waits until every group is owned
# and no node owns more than ⌈G/N⌉ (`zkcron status --json`), lets --warmup seconds pass, then
# counts the ticks of a --window seconds window in the log.
#
# A rate is sustained when every tick of every job in the window ran (none skipped because the
# previous run was still going — `concurrency = "forbid"`, the default — none missed, none
# twice). The nodes' own work (claims, records, spawning) runs under the same caps: it is part of
# what a fire costs.
#
# How to read the output (one row per layout and J):
#   fires/s       J: each job fires once a second
#   expected      J x window ticks in the window
#   ran           distinct (job, tick) pairs that ran; twice: pairs that ran more than once
#   missing       expected - ran: ticks skipped or missed (the row is "over" when > 0)
#   node cpu      CPU seconds per second each node's cgroup used over the window (its cap is
#                 --quota): a node at its cap is the bottleneck
#   busy          share of the whole machine's CPU that was not idle (ZooKeeper included)
# The summary gives the highest sustained J of each layout and their ratio (target: >= 2.5).
#
# Usage: bench/fleet_throughput.sh [--nodes 3] [--groups 12] [--quota 0.25] [--loops 400000]
#          [--one-rates 4,6,8,10,12] [--many-rates 12,24,30,36,42] [--window 30] [--warmup 5]
#          [--binary PATH] [--keep]
# Needs root (or a writable cgroup cpu controller), Debian's zookeeper package, Java, mawk.
# Everything started is stopped by PID on exit and on Ctrl-C; the cgroups are removed. Only
# 127.0.0.1 is used.
set -euo pipefail

# shellcheck source=bench/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

nodes=3
groups=12
quota=0.25
loops=400000
one_rates="4,6,8,10,12"
many_rates="12,24,30,36,42"
window=30
warmup=5
binary=""
usage() { sed -n '/^# Usage:/,/^# 127/p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
while (($#)); do
  case "$1" in
    --nodes) nodes=${2:?}; shift 2 ;;
    --groups) groups=${2:?}; shift 2 ;;
    --quota) quota=${2:?}; shift 2 ;;
    --loops) loops=${2:?}; shift 2 ;;
    --one-rates) one_rates=${2:?}; shift 2 ;;
    --many-rates) many_rates=${2:?}; shift 2 ;;
    --window) window=${2:?}; shift 2 ;;
    --warmup) warmup=${2:?}; shift 2 ;;
    --binary) binary=${2:?}; shift 2 ;;
    --keep) BENCH_KEEP=1; shift ;;
    -h | --help) usage ;;
    *) echo "unknown argument: $1" >&2; usage ;;
  esac
done
[[ "$nodes" =~ ^[1-9][0-9]*$ ]] || bench_die "--nodes must be a positive integer"
[[ "$groups" =~ ^[0-9]+$ ]] && ((groups >= 2)) || bench_die "--groups must be at least 2"
[[ "$quota" =~ ^[0-9]*\.?[0-9]+$ ]] || bench_die "--quota must be a number of CPUs, like 0.25"
[[ "$loops" =~ ^[0-9]+$ ]] || bench_die "--loops must be an integer"
for list in "$one_rates" "$many_rates"; do
  [[ "$list" =~ ^[0-9]+(,[0-9]+)*$ ]] || bench_die "rates must be comma lists of job counts"
done
[[ "$window" =~ ^[0-9]+$ ]] && ((window >= 5)) || bench_die "--window must be an integer >= 5"
[[ "$warmup" =~ ^[0-9]+$ ]] || bench_die "--warmup must be an integer"
command -v mawk >/dev/null || bench_die "mawk is missing (Debian's default awk)"

# The cgroup cpu controller: v1 (cpu.cfs_quota_us) or v2 (cpu.max).
CG_ROOT=""
CG_KIND=""
if [[ -w /sys/fs/cgroup/cpu/cgroup.procs && -f /sys/fs/cgroup/cpu/cpu.cfs_quota_us ]]; then
  CG_ROOT=/sys/fs/cgroup/cpu
  CG_KIND=v1
elif [[ -f /sys/fs/cgroup/cgroup.controllers ]] && grep -qw cpu /sys/fs/cgroup/cgroup.controllers &&
  [[ -w /sys/fs/cgroup/cgroup.subtree_control ]]; then
  CG_ROOT=/sys/fs/cgroup
  CG_KIND=v2
  grep -qw cpu /sys/fs/cgroup/cgroup.subtree_control || echo +cpu >/sys/fs/cgroup/cgroup.subtree_control
else
  bench_die "no writable cgroup cpu controller (v1 /sys/fs/cgroup/cpu or v2 cpu.max): run as root on a host that has one"
fi
CGROUPS=()
period_us=100000
quota_us=$(python3 -c "print(int(float('$quota') * $period_us))")
((quota_us >= 1000)) || bench_die "--quota $quota is below 1 ms per 100 ms period"

cg_make() {
  local dir="$CG_ROOT/zkcron-bench-$$-$1"
  mkdir "$dir"
  if [[ $CG_KIND == v1 ]]; then
    echo "$period_us" >"$dir/cpu.cfs_period_us"
    echo "$quota_us" >"$dir/cpu.cfs_quota_us"
  else
    echo "$quota_us $period_us" >"$dir/cpu.max"
  fi
  echo "$dir"
}

# CPU seconds a cgroup has used (cpuacct on v1, cpu.stat on v2).
cg_cpu_seconds() {
  local name=${1##*/}
  if [[ $CG_KIND == v1 ]]; then
    local acct=/sys/fs/cgroup/cpuacct/$name/cpuacct.usage
    if [[ -r $acct ]]; then
      awk '{ printf "%.3f", $1 / 1e9 }' "$acct"
    else
      awk '/^usage_usec/ { printf "%.3f", $2 / 1e6 }' "$1/cpu.stat" 2>/dev/null || echo 0
    fi
  else
    awk '/^usage_usec/ { printf "%.3f", $2 / 1e6 }' "$1/cpu.stat"
  fi
}

fleet_cleanup() {
  local dir
  bench_cleanup_nodes
  for dir in "${CGROUPS[@]}"; do
    rmdir "$dir" 2>/dev/null || true
    rmdir "/sys/fs/cgroup/cpuacct/${dir##*/}" 2>/dev/null || true
  done
}
NODE_PIDS=()
bench_cleanup_nodes() {
  local pid
  for pid in "${NODE_PIDS[@]}"; do
    bench_stop "$pid" 15
    bench_forget "$pid"
  done
  NODE_PIDS=()
}

bench_init
# The nodes and their cgroups first, then what bench_cleanup stops (ZooKeeper), with our status.
trap 'status=$?; fleet_cleanup; (exit "$status"); bench_cleanup' EXIT
binary=$(bench_binary "$binary")
work=$BENCH_WORK

# On v1 the cpuacct hierarchy is separate: a cgroup of the same name there gives the usage.
cg_dirs=()
for ((i = 1; i <= nodes; i++)); do
  dir=$(cg_make "n$i")
  # Recorded here, not in cg_make: a command substitution's subshell would keep it to itself.
  CGROUPS+=("$dir")
  cg_dirs+=("$dir")
  if [[ $CG_KIND == v1 && -d /sys/fs/cgroup/cpuacct ]]; then
    mkdir -p "/sys/fs/cgroup/cpuacct/${dir##*/}"
  fi
done

job_cost_ms=$(python3 - "$loops" <<'PY'
import resource, subprocess, sys
runs = 20
before = resource.getrusage(resource.RUSAGE_CHILDREN)
for _ in range(runs):
    subprocess.run(["mawk", f"BEGIN {{ for (i = 0; i < {sys.argv[1]}; i++) s += i }}"], check=True)
after = resource.getrusage(resource.RUSAGE_CHILDREN)
used = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
print(f"{1000 * used / runs:.1f}")
PY
)

echo "== environment"
bench_print_machine
printf '%-18s %s\n' "ensemble" "1 server on 127.0.0.1, tickTime=2000, fsync on (default)"
printf '%-18s %s\n' "zkcron" "$binary ($("$binary" --version))"
printf '%-18s %s\n' "nodes" "$nodes, each in a cgroup ($CG_KIND) capped at $quota CPU ($quota_us us per $period_us us), its jobs too"
printf '%-18s %s\n' "job" "mawk counting to $loops then one append: $job_cost_ms ms of CPU (mean of 20, uncapped)"
printf '%-18s %s\n' "window" "${warmup} s after balance, then ${window} s counted"

bench_zk_start 1

# gen_schedule FILE LOCK NODE_ID JOBS GROUPS(0 = none) LOG
gen_schedule() {
  python3 - "$@" "$ZK_CONNECT" "$loops" <<'PY'
import sys
path, lock, node, jobs, groups, log, connect, loops = sys.argv[1:9]
jobs, groups = int(jobs), int(groups)
with open(path, "w") as f:
    f.write(f'[zookeeper]\nconnect = "{connect}/zkcron-bench"\nsession_timeout = "10s"\n\n'
            f'[lock]\nname = "{lock}"\nnode_id = "{node}"\ntakeover_delay = "2s"\n'
            f'rebalance_after = "3s"\n\n[log]\nlevel = "info"\n')
    for g in range(1, groups):
        f.write(f'\n[[group]]\nname = "g{g:02d}"\n')
    for j in range(jobs):
        f.write(f'\n[[job]]\nname = "j{j:03d}"\nschedule = "* * * * * *"\n')
        if groups and j % groups:
            f.write(f'group = "g{j % groups:02d}"\n')
        program = (f'BEGIN {{ for (i = 0; i < {loops}; i++) s += i; '
                   f'print ENVIRON["ZKCRON_JOB"], ENVIRON["ZKCRON_SCHEDULED_UNIX_MS"] >> "{log}" }}')
        # A TOML literal string: the program's double quotes stay as they are.
        f.write(f"command = ['mawk', '{program}']\n")
PY
}

results="$work/results"
: >"$results"
# run_layout NAME GROUPS RATES
run_layout() {
  local name=$1 layout_groups=$2 rates=$3 jobs
  IFS=, read -r -a jobs <<<"$rates"
  local shown_groups=$((layout_groups == 0 ? 1 : layout_groups))
  for j in "${jobs[@]}"; do
    local lock="fleet-$name-$j-$$" log="$work/fires-$name-$j.log" i cfgs=()
    : >"$log"
    for ((i = 1; i <= nodes; i++)); do
      local cfg="$work/$name-$j-n$i.toml"
      gen_schedule "$cfg" "$lock" "n$i" "$j" "$layout_groups" "$log"
      cfgs+=("$cfg")
    done
    for ((i = 1; i <= nodes; i++)); do
      local node_log="$work/$name-$j-n$i.log"
      # The node joins its cgroup before it execs: its jobs are its children, capped with it.
      sh -c 'echo $$ > "$1/cgroup.procs"; [ -d "$2" ] && echo $$ > "$2/cgroup.procs"; shift 2; exec "$@"' \
        sh "${cg_dirs[i - 1]}" "/sys/fs/cgroup/cpuacct/${cg_dirs[i - 1]##*/}" \
        "$binary" run --config "${cfgs[i - 1]}" </dev/null >"$node_log" 2>&1 &
      NODE_PIDS+=($!)
      BENCH_PIDS+=($!)
    done
    local deadline=$((SECONDS + 120))
    until bench_groups_balanced "$(bench_group_owners "$binary" "${cfgs[0]}")" "$shown_groups" \
      $(seq -f 'n%g' "$nodes"); do
      ((SECONDS < deadline)) || bench_die "$name, J=$j: not balanced within 120 s (logs in $work with --keep)"
      sleep 0.5
    done
    sleep "$warmup"
    local start_ms cpu_before=() cpu_after=() busy_before
    start_ms=$(($(date +%s%3N) / 1000 * 1000 + 1000))
    busy_before=$(bench_cpu_stat)
    for dir in "${cg_dirs[@]}"; do cpu_before+=("$(cg_cpu_seconds "$dir")"); done
    sleep $((window + 1))
    for dir in "${cg_dirs[@]}"; do cpu_after+=("$(cg_cpu_seconds "$dir")"); done
    local busy
    busy=$(bench_busy "$busy_before" "$(bench_cpu_stat)")
    # Runs of the window's last tick have a few seconds to end and log.
    sleep 3
    bench_cleanup_nodes
    local end_ms=$((start_ms + window * 1000))
    local counts cpus=""
    counts=$(awk -v a="$start_ms" -v b="$end_ms" '$2 >= a && $2 < b { n[$1 " " $2]++ }
      END { ran = 0; twice = 0; for (k in n) { ran++; if (n[k] > 1) twice++ } print ran, twice }' "$log")
    for ((i = 0; i < nodes; i++)); do
      cpus+=$(awk -v a="${cpu_before[i]}" -v b="${cpu_after[i]}" -v w="$((window + 1))" \
        'BEGIN { printf "%.2f ", (b - a) / w }')
    done
    local ran twice
    read -r ran twice <<<"$counts"
    echo "$name $j $((j * window)) $ran $twice $((j * window - ran)) ${cpus% } $busy" >>"$results"
    printf '%-10s J=%-4s ran %s of %s, twice %s, node cpu %s, busy %s%%\n' \
      "$name" "$j" "$ran" "$((j * window))" "$twice" "${cpus% }" "$busy" >&2
  done
}

run_layout "one-group" 0 "$one_rates"
run_layout "$groups-groups" "$groups" "$many_rates"

echo
echo "== results ($nodes nodes, $quota CPU each; $window s window)"
printf '%-11s %8s %9s %6s %6s %8s  %-22s %5s\n' layout fires/s expected ran twice missing "node cpu (CPU s/s)" busy
while read -r name j expected ran twice missing rest; do
  read -r -a fields <<<"$rest"
  busy=${fields[-1]}
  unset 'fields[-1]'
  verdict=""
  ((missing > 0 || twice > 0)) && verdict="  over"
  printf '%-11s %8s %9s %6s %6s %8s  %-22s %4s%%%s\n' "$name" "$j" "$expected" "$ran" "$twice" \
    "$missing" "${fields[*]}" "$busy" "$verdict"
done <"$results"
echo
awk '$6 == 0 && $5 == 0 { if ($2 > best[$1]) best[$1] = $2 }
  END { for (l in best) printf "highest sustained: %-11s %s fires/s\n", l, best[l] }' "$results" | sort
awk -v g="$groups-groups" '$6 == 0 && $5 == 0 { if ($2 > best[$1]) best[$1] = $2 }
  END { if (best["one-group"] > 0 && best[g] > 0) printf "ratio: %.2fx (target >= 2.5x)\n", best[g] / best["one-group"]
        else print "ratio: n/a (a layout sustained none of its rates)" }' "$results"
