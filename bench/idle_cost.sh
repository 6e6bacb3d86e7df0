#!/usr/bin/env bash
# Idle cost of `zkcron run` as the schedule grows: memory, CPU and startup time with N jobs of
# which none is due during the measurement.
#
# What it does: starts a throwaway ZooKeeper on loopback (default: one server, ZooKeeper's default
# fsync), builds or takes a release `zkcron`, and for each N in --jobs generates a schedule of N
# `/bin/true` jobs mixing expressions (every 5 minutes `S M-59/5 * * * *`, `@hourly`, daily
# `S M H * * *` in Europe/Berlin, 5-field daily `M H * * *` in UTC, `@daily`, weekdays
# `0 M H * * MON-FRI` in America/New_York), with minutes and hours chosen from the current time so
# that no job is due within --horizon seconds (checked against `zkcron check`'s next fire times
# before the run, and against the log's "job started" lines after it). It starts one `zkcron run`
# node (it owns the lock), waits for "lock acquired", lets it settle, then samples /proc once a
# second over the idle window.
#
# How to read the output (one row per N):
#   start->ready ms   from exec to the "zkcron started" log line: loading and validating the
#                     file, parsing every expression, building the fire queue
#   start->lock ms    from exec to "lock acquired": the above plus connecting to ZooKeeper and
#                     acquiring the lock
#   anon start/max    Anonymous (MiB) from /proc/PID/smaps_rollup at the start of the window /
#                     largest sample in it: the heap, stacks and other private memory the node
#                     costs its host. This is the figure the targets are for.
#   dirty             Private_Dirty (MiB), largest sample: anonymous plus written file pages
#   PSS / RSS         Pss and Rss (MiB), largest sample: these include the program's clean code
#                     pages, shared with the page cache and reclaimable, so they vary with what
#                     the kernel has kept resident; HWM = VmHWM (peak RSS since exec, startup too)
#   CPU ms/s          utime+stime (/proc/PID/stat, clock ticks of 10 ms) consumed per second of
#                     wall time over the window; "sched" is the same from the threads'
#                     /proc/PID/task/*/schedstat (ns resolution; "n/a" if the thread set changed)
#   host busy         share of all CPUs' time not idle during the window (anything else running
#                     on the machine shows here; ZooKeeper and zkcron themselves are included)
#   fired             "job started" lines during the whole run: must be 0 (else the row is not an
#                     idle measurement and is flagged)
#   Target (issue 18): anonymous memory <= 4 MiB with 1000 jobs, <= 16 MiB with 10 000.
#   With --groups G (issue 19), the node is alone in G lock groups (G-1 `[[group]]`s and the
#   default, the jobs assigned round robin) and owns them all; "start->lock" is then the time to
#   the G-th "lock acquired". Run it with --groups 1 and --groups 12 to compare.
#
# Usage: bench/idle_cost.sh [--jobs 1,1000,10000] [--groups G] [--window S] [--settle S]
#                           [--servers 1|3] [--binary PATH] [--keep]
#   --window   idle sampling window in seconds (default 30); --settle: wait after the lock is
#              acquired before sampling (default 30: with 10 000 jobs the startup catch-up, one
#              listing of run records per job, takes ~15 s, and its heap is given back after it;
#              sampled 5 s after the lock, a 10 000-job node measured 34.5 MiB, at 30 s 23.7)
#   --binary   use this zkcron instead of building one (cargo honours CARGO_TARGET_DIR)
#   --keep     keep the temp dir (schedules, logs, samples) for inspection
# Everything started is stopped by PID on exit and on Ctrl-C. Only 127.0.0.1 is used.
set -euo pipefail

# shellcheck source=bench/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

jobs_list="1,1000,10000"
window=30
settle=30
servers=1
groups=1
binary=""
usage() { sed -n '/^# Usage:/,/^# Everything/p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
while (($#)); do
  case "$1" in
    --jobs) jobs_list=${2:?}; shift 2 ;;
    --window) window=${2:?}; shift 2 ;;
    --settle) settle=${2:?}; shift 2 ;;
    --servers) servers=${2:?}; shift 2 ;;
    --groups) groups=${2:?}; shift 2 ;;
    --binary) binary=${2:?}; shift 2 ;;
    --keep) BENCH_KEEP=1; shift ;;
    -h | --help) usage ;;
    *) echo "unknown argument: $1" >&2; usage ;;
  esac
done
[[ "$servers" == 1 || "$servers" == 3 ]] || bench_die "--servers must be 1 or 3"
[[ "$jobs_list" =~ ^[0-9]+(,[0-9]+)*$ ]] || bench_die "--jobs must be a comma list of counts"
[[ "$window" =~ ^[0-9]+$ ]] && ((window >= 5)) || bench_die "--window must be an integer >= 5"
[[ "$settle" =~ ^[0-9]+$ ]] || bench_die "--settle must be an integer"
[[ "$groups" =~ ^[1-9][0-9]*$ ]] && ((groups <= 256)) || bench_die "--groups must be 1 to 256"
IFS=, read -r -a job_counts <<<"$jobs_list"
# No job may be due from generation until the node has stopped: startup (bounded below by the
# 180 s wait) is usually seconds, so settle + window + 2 minutes of margin.
horizon=$((settle + window + 120))

bench_init
binary=$(bench_binary "$binary")
work=$BENCH_WORK
clk_tck=$(getconf CLK_TCK)

echo "== environment"
bench_print_machine
printf '%-18s %s\n' "ensemble" "$servers server(s) on 127.0.0.1, tickTime=2000, fsync on (default)"
printf '%-18s %s\n' "zkcron" "$binary ($("$binary" --version))"
printf '%-18s %s\n' "window" "settle ${settle} s after 'lock acquired', then ${window} s sampled every 1 s"
printf '%-18s %s\n' "clock ticks" "$clk_tck per second"
printf '%-18s %s\n' "lock groups" "$groups (the node alone owns them all)"

bench_zk_start "$servers"

# gen_schedule N FILE LOCKNAME: a schedule of N idle jobs.
gen_schedule() {
  python3 - "$1" "$2" "$3" "$ZK_CONNECT" "$horizon" "$groups" <<'PY'
import sys
from datetime import datetime, timedelta, timezone
from zoneinfo import ZoneInfo

n, path, lock, connect, horizon = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5])
groups = int(sys.argv[6])
now = datetime.now(timezone.utc)
safe_until = now + timedelta(seconds=horizon + 60)
berlin, ny = now.astimezone(ZoneInfo("Europe/Berlin")), now.astimezone(ZoneInfo("America/New_York"))
next_hour = (now + timedelta(hours=1)).replace(minute=0, second=0, microsecond=0)
next_midnight = (now + timedelta(days=1)).replace(hour=0, minute=0, second=0, microsecond=0)

def job(i):
    """(expression, timezone) of job i; minutes/hours are chosen away from now."""
    kind = i % 6
    sec, minute = (i * 7) % 60, (i * 13) % 60
    if kind == 0:   # every 5 minutes, at the minute offset that is furthest from now
        return f"{sec} {(now.minute + 4) % 5}-59/5 * * * *", None
    if kind == 1:   # hourly
        if next_hour > safe_until:
            return "@hourly", None
        return f"{sec} {(now.minute + 30) % 60} * * * *", None
    if kind == 2:   # daily in Berlin, 6..17 hours from the current Berlin hour
        return f"{sec} {minute} {(berlin.hour + 6 + i % 12) % 24} * * *", "Europe/Berlin"
    if kind == 3:   # daily, 5 fields, UTC, 3..20 hours away
        return f"{minute} {(now.hour + 3 + i % 18) % 24} * * *", None
    if kind == 4:   # midnight UTC
        if next_midnight > safe_until:
            return "@daily", None
        return f"0 {minute} {(now.hour + 12) % 24} * * *", None
    return f"0 {minute} {(ny.hour + 2 + i % 20) % 24} * * MON-FRI", "America/New_York"

with open(path, "w") as f:
    f.write(f'[zookeeper]\nconnect = "{connect}/zkcron-bench"\nsession_timeout = "10s"\n\n'
            f'[lock]\nname = "{lock}"\nnode_id = "bench-node"\n\n[log]\nlevel = "info"\n')
    for g in range(1, groups):
        f.write(f'\n[[group]]\nname = "g{g:03d}"\n')
    for i in range(n):
        expr, tz = job(i)
        f.write(f'\n[[job]]\nname = "idle-{i:05d}"\nschedule = "{expr}"\n')
        if tz:
            f.write(f'timezone = "{tz}"\n')
        if i % groups:
            f.write(f'group = "g{i % groups:03d}"\n')
        f.write('command = ["/bin/true"]\n')
print(now.timestamp())
PY
}

# check_quiet FILE SINCE: every next fire time `zkcron check` lists is after SINCE + horizon.
check_quiet() {
  "$binary" check "$1" | python3 -c '
import sys
from datetime import datetime
since, horizon = float(sys.argv[1]), int(sys.argv[2])
lines = sys.stdin.read().splitlines()
times = [datetime.strptime(l.strip(), "%Y-%m-%d %H:%M:%S %z").timestamp()
         for l in lines if l.startswith("    ")]
soonest = min(times)
if soonest < since + horizon:
    sys.exit(f"a job is due {soonest - since:.0f} s after generation, inside the {horizon} s horizon")
print(f"{len(times)} upcoming fire times listed; soonest {soonest - since:.0f} s after generation",
      file=sys.stderr)
' "$2" "$horizon"
}

# proc_sample PID: "epoch_s anon_kib dirty_kib pss_kib rss_kib hwm_kib ticks sched_ns threads tids"
proc_sample() {
  local pid=$1 now mem hwm ticks sched=0 tids="" t s
  now=$(bench_now)
  mem=$(awk '/^Anonymous:/ { a = $2 } /^Private_Dirty:/ { d = $2 } /^Pss:/ { p = $2 }
             /^Rss:/ { r = $2 } END { print a, d, p, r }' "/proc/$pid/smaps_rollup")
  hwm=$(awk '/^VmHWM:/ { print $2 }' "/proc/$pid/status")
  ticks=$(bench_cpu_ticks "$pid")
  for t in /proc/"$pid"/task/*; do
    { read -r s _ <"$t/schedstat"; } 2>/dev/null || continue
    sched=$((sched + s))
    tids+="${t##*/},"
  done
  echo "$now $mem $hwm $ticks $sched $(tr -cd , <<<"$tids" | wc -c) $tids"
}

results="$work/results"
: >"$results"
for n in "${job_counts[@]}"; do
  cfg="$work/jobs-$n.toml"
  log="$work/zkcron-$n.log"
  samples="$work/samples-$n"
  echo "N=$n: generating and checking the schedule..." >&2
  generated=$(gen_schedule "$n" "$cfg" "idle-$n-g$groups")
  check_quiet "$cfg" "$generated"

  launched=$(bench_now)
  "$binary" run --config "$cfg" </dev/null >"$log" 2>&1 &
  pid=$!
  BENCH_PIDS+=("$pid")
  bench_wait_log "$log" "lock acquired" 180 "$pid"
  for ((i = 0; i < 180 * 20; i++)); do
    (($(grep -c "lock acquired" "$log") >= groups)) && break
    sleep 0.05
  done
  (($(grep -c "lock acquired" "$log") >= groups)) ||
    bench_die "N=$n: only $(grep -c "lock acquired" "$log") of $groups groups acquired within 180 s"
  echo "N=$n: lock acquired; settling ${settle} s, then sampling ${window} s..." >&2
  sleep "$settle"
  : >"$samples"
  cpu_before=$(bench_cpu_stat)
  for ((i = 0; i <= window; i++)); do
    bench_alive "$pid" || { tail -n 30 "$log" >&2; bench_die "zkcron exited during the window"; }
    proc_sample "$pid" >>"$samples"
    ((i == window)) || sleep 1
  done
  busy=$(bench_busy "$cpu_before" "$(bench_cpu_stat)")
  bench_stop "$pid" 30
  bench_forget "$pid"
  fired=$(grep -c "job started" "$log" || true)
  echo "$n $launched $fired $samples $log $busy" >>"$results"
done

echo
python3 - "$results" "$clk_tck" "$window" "$groups" <<'PY'
import sys
from datetime import datetime

results, clk_tck, window, groups = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])

def log_time(path, needle, nth=1):
    for line in open(path, errors="replace"):
        if needle in line:
            nth -= 1
            if nth == 0:
                return datetime.fromisoformat(line.split()[0].replace("Z", "+00:00")).timestamp()
    return None

rows = []
print(f"== idle cost: one zkcron node owning the lock{'' if groups == 1 else f' of each of {groups} groups'}, no job due")
print(f"{'jobs':>6} {'start->ready':>13} {'start->lock':>12} {'anon start/max':>14} {'dirty':>6} "
      f"{'PSS':>6} {'RSS':>6} {'HWM':>6} {'CPU ms/s':>9} {'sched':>7} {'threads':>7} {'fired':>5} "
      f"{'host busy':>9}")
print(f"{'':>6} {'':>13} {'':>12} {'MiB':>14} {'MiB':>6} {'MiB':>6} {'MiB':>6} {'MiB':>6} "
      f"{'ticks':>9} {'ms/s':>7}")
for line in open(results):
    n, launched, fired, samples_path, log_path, busy = line.split()
    n, launched, fired = int(n), float(launched), int(fired)
    samples = [l.split() for l in open(samples_path) if l.strip()]
    first, last = samples[0], samples[-1]
    elapsed = float(last[0]) - float(first[0])
    mib = lambda column: [int(s[column]) / 1024 for s in samples]
    anon, dirty, pss, rss = mib(1), mib(2), mib(3), mib(4)
    hwm = int(last[5]) / 1024
    cpu = (int(last[6]) - int(first[6])) * 1000 / clk_tck / elapsed
    same_threads = first[9] == last[9]
    sched = (int(last[7]) - int(first[7])) / 1e6 / elapsed if same_threads else None
    ready = log_time(log_path, "zkcron started")
    lock = log_time(log_path, "lock acquired", groups)
    ms = lambda t: f"{(t - launched) * 1000:.0f} ms" if t else "?"
    print(f"{n:>6} {ms(ready):>13} {ms(lock):>12} {anon[0]:>7.1f}/{max(anon):<6.1f} "
          f"{max(dirty):>6.1f} {max(pss):>6.1f} {max(rss):>6.1f} {hwm:>6.1f} {cpu:>9.2f} "
          f"{(f'{sched:.3f}' if sched is not None else 'n/a'):>7} {last[8]:>7} "
          f"{fired:>5} {busy + '%':>9}{'  <- NOT IDLE: jobs fired' if fired else ''}")
    rows.append((n, max(anon)))

if len(rows) > 1:
    (n0, a0), (n1, a1) = min(rows), max(rows)
    if n1 > n0:
        print(f"anonymous memory per job (largest, N={n0} -> N={n1}): "
              f"{(a1 - a0) * 1024 / (n1 - n0):.2f} KiB")
# Issue 18's targets for the idle anonymous memory.
for jobs, limit in ((1000, 4.0), (10000, 16.0)):
    at = [a for n, a in rows if n == jobs]
    if at:
        verdict = "MET" if at[0] <= limit else "NOT MET"
        print(f"== target: anonymous <= {limit:.0f} MiB with {jobs} jobs: {verdict} ({at[0]:.1f} MiB)")
PY
