#!/usr/bin/env bash
# HTTP delivery (issue 23): how many submissions one owner delivers to an HTTP target a second,
# and how late, beside the process path on the same machine and load.
#
# What it does: starts a throwaway ZooKeeper on loopback (default 3 servers, fsync on), a local
# receiver (`examples/http_receiver.rs`: answers 200 at once, notes each request's due time and
# arrival), and one `zkcron run` node (release build) with one on-demand job whose target is
# that receiver (--target http) or `/bin/true` (--target process). Then, for each rate R of
# --rates: R submissions due per second for --seconds S, all submitted first
# (`examples/delayed_load.rs`, 100 per call), and waits until every one is delivered.
#
# Per rate it reports: deliveries (and duplicates, early ones, missing ones: all must be 0),
# lateness p50/p90/p99/max (HTTP: arrival at the receiver - due; process: zkcron's
# "job started" line - due), the rate sustained (all of them over the time from the first due
# instant to the last delivery), the owner's CPU per 1000 deliveries, the servers' CPU, and how
# busy the machine was (both from the end of the submitting to the last delivery), and the
# ZooKeeper write ops and transactions per delivery by kind (the owner's own counters, once its
# final records and prunes settled; the submissions' own creates are the load's, not counted),
# beside the transactions the servers logged meanwhile (zxid).
#
# Usage: bench/http_delivery.sh [--servers 1|3] [--rates "200 1000 2000"] [--seconds S]
#                               [--target http|process] [--max-running N] [--claim-ahead D]
#                               [--resend never|idempotent] [--history N] [--binary PATH]
#                               [--store zookeeper|postgres] [--pg-pending N] [--pg-unsettled]
#                               [--keep]
#   --max-running  the job's max_running (default 256, the job's own default): runs open at once
#   --claim-ahead  [lock] claim_ahead (default 250ms, its own default): how early a claim goes out
#   --resend       the HTTP target's resend (default never: at most once, a write before each
#                  request; idempotent: no write in front of it)
#   --history      the job's history (default 100, its own default): how many records are kept,
#                  so how often the owner prunes during the run
#   --store        where the delayed queue is kept (default zookeeper): postgres starts a throwaway
#                  PostgreSQL (bench_pg_start) and sets [delayed] store = "postgres"
#   --pg-pending   with --store postgres: submissions loaded first, due 1 to 30 days ahead
#                  (examples/pg_queue, batched), pending through the rates (default 0); then
#                  vacuumed, analyzed and checkpointed, as a queue that grew over days would be
#   --pg-unsettled the rates start right after the load instead: autovacuum and the checkpoint
#                  of its gigabytes run beside them
# Everything started is stopped by PID on exit and on Ctrl-C. Only 127.0.0.1 is used.
set -euo pipefail

# shellcheck source=bench/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

servers=3
rates="200 1000 2000"
seconds=10
target=http
max_running=256
claim_ahead=250ms
binary=""
resend=never
history=100
store=zookeeper
pg_pending=0
pg_settle=1
usage() { sed -n '/^# Usage:/,/^# Everything/p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
while (($#)); do
  case "$1" in
    --servers) servers=${2:?}; shift 2 ;;
    --rates) rates=${2:?}; shift 2 ;;
    --seconds) seconds=${2:?}; shift 2 ;;
    --target) target=${2:?}; shift 2 ;;
    --max-running) max_running=${2:?}; shift 2 ;;
    --claim-ahead) claim_ahead=${2:?}; shift 2 ;;
    --binary) binary=${2:?}; shift 2 ;;
    --resend) resend=${2:?}; shift 2 ;;
    --history) history=${2:?}; shift 2 ;;
    --store) store=${2:?}; shift 2 ;;
    --pg-pending) pg_pending=${2:?}; shift 2 ;;
    --pg-unsettled) pg_settle=0; shift ;;
    --keep) BENCH_KEEP=1; shift ;;
    -h | --help) usage ;;
    *) echo "unknown argument: $1" >&2; usage ;;
  esac
done
[[ $target == http || $target == process ]] || { echo "--target is http or process" >&2; usage; }
[[ $store == zookeeper || $store == postgres ]] || { echo "--store is zookeeper or postgres" >&2; usage; }
export ZK_HEAP="${ZK_HEAP:-512m}"

bench_init
binary=$(bench_binary "$binary")
load=$(bench_delayed_load)
receiver_bin=$(dirname "$load")/http_receiver
(cd "$BENCH_REPO" && cargo build --release --quiet --example http_receiver) >&2 ||
  bench_die "cannot build examples/http_receiver"
work=$BENCH_WORK

echo "== environment"
bench_print_machine
printf '%-18s %s\n' "ensemble" "$servers server(s) on 127.0.0.1, fsync on, -Xmx$ZK_HEAP each"
printf '%-18s %s\n' "zkcron" "$binary ($("$binary" --version))"

arrivals="$work/arrivals"
: >"$arrivals"
"$receiver_bin" "$arrivals" >"$work/receiver.out" 2>&1 &
receiver_pid=$!
BENCH_PIDS+=("$receiver_pid")
for _ in $(seq 50); do grep -q "listening on" "$work/receiver.out" && break; sleep 0.1; done
port=$(awk '/listening on/ { print $3 }' "$work/receiver.out")
[[ -n "$port" ]] || bench_die "the receiver did not start: $(cat "$work/receiver.out")"

case "$target" in
  http)
    target_line="http = { url = \"http://127.0.0.1:$port/deliver\" }"
    # An older zkcron refuses the key it does not know: said only when it is not the default.
    [[ $resend == never ]] ||
      target_line="http = { url = \"http://127.0.0.1:$port/deliver\", resend = \"$resend\" }"
    ;;
  process) target_line='command = ["/bin/true"]' ;;
esac
printf '%-18s %s\n' "job" "on demand, max_running $max_running, claim_ahead $claim_ahead: $target_line"

bench_zk_start "$servers"

delayed_section=""
if [[ $store == postgres ]]; then
  bench_pg_start
  bench_pg_describe
  export ZKCRON_BENCH_DSN="$PG_DSN"
  delayed_section=$'[delayed]\nstore = "postgres"\ndsn_env = "ZKCRON_BENCH_DSN"\n'
  if ((pg_pending > 0)); then
    (cd "$BENCH_REPO" && cargo build --release --locked --quiet --example pg_queue) >&2 ||
      bench_die "cannot build examples/pg_queue"
    "$(dirname "$load")/pg_queue" "$PG_DSN" "$pg_pending" 0 mark free /zkcron/delivery
    # A queue that grew to this over days has been vacuumed and checkpointed: settled so, not
    # measured in the middle of writing the load's gigabytes out.
    if ((pg_settle)); then
      settle_started=$SECONDS
      "$PG_BIN/psql" "$PG_DSN" -qc "VACUUM (ANALYZE) zkcron_pending" -c "VACUUM (ANALYZE) zkcron_ids" -c "CHECKPOINT" ||
        bench_die "the load could not be vacuumed"
      printf '%-18s %s\n' "settled" "VACUUM (ANALYZE) and CHECKPOINT after the load: $((SECONDS - settle_started)) s; database $("$PG_BIN/psql" "$PG_DSN" -Atc "SELECT pg_size_pretty(pg_database_size('postgres'))")"
    else
      printf '%-18s %s\n' "settled" "no: the rates start right after the load (--pg-unsettled)"
    fi
  fi
  printf '%-18s %s\n' "delayed queue" "in PostgreSQL, $pg_pending pending beside the rates' (due 1 to 30 days ahead)"
fi

cat >"$work/zkcron.toml" <<TOML
[zookeeper]
connect = "$ZK_CONNECT/zkcron-bench"
session_timeout = "10s"

[lock]
name = "delivery"
node_id = "bench-node"
claim_ahead = "$claim_ahead"

$delayed_section
[http]
listen = "127.0.0.1:0"

[[job]]
name = "due"
starting_deadline = "1h"
max_running = $max_running
timeout = "30s"
history = $history
$target_line
TOML

log="$work/zkcron.log"
"$binary" --log-level "${BENCH_LOG_LEVEL:-info}" run --config "$work/zkcron.toml" </dev/null >"$log" 2>&1 &
zkcron_pid=$!
BENCH_PIDS+=("$zkcron_pid")
bench_wait_log "$log" "owns the lock" 60 "$zkcron_pid"
http_port=$(sed -n 's/.*http listener up.*listen=[^ ]*:\([0-9]*\).*/\1/p' "$log" | head -n 1)
[[ -n "$http_port" ]] || bench_die "no 'http listener up' line in the zkcron log"
zk_port=${ZK_CLIENT_PORTS[0]}

# CPU seconds (user + system) a process has used, from /proc/PID/stat.
cpu_seconds() {
  awk -v t="$(bench_cpu_ticks "$1")" -v hz="$(getconf CLK_TCK)" 'BEGIN { printf "%.2f", t / hz }'
}
servers_cpu() {
  local pid total=0
  for pid in "${BENCH_PIDS[@]}"; do
    if grep -q QuorumPeerMain "/proc/$pid/cmdline" 2>/dev/null; then
      total=$(awk -v a="$total" -v b="$(cpu_seconds "$pid")" 'BEGIN { printf "%.2f", a + b }')
    fi
  done
  echo "$total"
}
# The PostgreSQL server's CPU seconds, its backends' included (none without --store postgres).
pg_cpu() {
  [[ -n "${PG_POSTMASTER:-}" ]] || { echo 0; return; }
  local pid total=0
  for pid in "$PG_POSTMASTER" $(pgrep -P "$PG_POSTMASTER"); do
    total=$(awk -v a="$total" -v b="$(cpu_seconds "$pid" 2>/dev/null || echo 0)" 'BEGIN { printf "%.2f", a + b }')
  done
  echo "$total"
}
delivered() {
  if [[ $target == http ]]; then
    grep -c " $1" "$arrivals" || true
  else
    grep -c "job started job=due run_id=\"due-[0-9]*-$1" "$log" || true
  fi
}

for rate in $rates; do
  prefix="r$rate-"
  total=$((rate * seconds))
  echo
  echo "== $rate due/s for $seconds s ($total submissions, $target)"
  # Submitted at >= 2000/s before the first is due.
  lead_ms=$((total * 1000 / 2000 + 5000))
  first_due_ms=$(($(date +%s%3N) + lead_ms))
  writes_before=$(bench_writes_settled "$http_port" "$zk_port")
  "$load" "$work/zkcron.toml" due "$total" "$lead_ms" $((seconds * 1000)) 8 "$prefix" 100
  owner_before=$(cpu_seconds "$zkcron_pid")
  servers_before=$(servers_cpu)
  pg_before=$(pg_cpu)
  machine_before=$(bench_cpu_stat)
  wait_until=$((SECONDS + lead_ms / 1000 + seconds + 60))
  while (($(delivered "$prefix") < total && SECONDS < wait_until)); do
    bench_alive "$zkcron_pid" || { tail -n 30 "$log" >&2; bench_die "zkcron exited during the run"; }
    sleep 0.5
  done
  owner_cpu=$(awk -v a="$owner_before" -v b="$(cpu_seconds "$zkcron_pid")" 'BEGIN { printf "%.2f", b - a }')
  servers_used=$(awk -v a="$servers_before" -v b="$(servers_cpu)" 'BEGIN { printf "%.2f", b - a }')
  pg_used=$(awk -v a="$pg_before" -v b="$(pg_cpu)" 'BEGIN { printf "%.2f", b - a }')
  busy=$(bench_busy "$machine_before" "$(bench_cpu_stat)")
  python3 - "$target" "$arrivals" "$log" "$prefix" "$total" "$first_due_ms" "$seconds" \
    "$owner_cpu" "$servers_used" "$busy" "$pg_used" <<'PY'
import math, re, sys
from collections import Counter
from datetime import datetime
target, arrivals, log, prefix, total, first_due, seconds, owner_cpu, servers_cpu, busy, pg_cpu = sys.argv[1:]
total, first_due, seconds = int(total), int(first_due), int(seconds)
rows = []  # (submission id, due ms, delivered ms)
if target == "http":
    for line in open(arrivals):
        p = line.split()
        if len(p) == 3 and p[2].startswith(prefix):
            rows.append((p[2], int(p[0]), float(p[1])))
else:
    started = re.compile(r'^(\S+) +INFO zkcron::runner: job started job=due run_id="due-(\d+)-(\S+?)"')
    for line in open(log):
        m = started.match(line)
        if m and m.group(3).startswith(prefix):
            at = datetime.fromisoformat(m.group(1).replace("Z", "+00:00")).timestamp() * 1000.0
            rows.append((m.group(3), int(m.group(2)), at))
def pct(v, p):
    return v[max(1, math.ceil(p / 100.0 * len(v))) - 1] if v else float("nan")
late = sorted(d - due for _, due, d in rows)
ids = Counter(i for i, _, _ in rows)
dups = sum(c - 1 for c in ids.values() if c > 1)
print(f"delivered {len(ids)} of {total}   duplicates {dups}   early {sum(1 for l in late if l < 0)}"
      f"   missing {total - len(ids)}")
if late:
    print(f"lateness ms   p50 {pct(late, 50):.1f}  p90 {pct(late, 90):.1f}  p99 {pct(late, 99):.1f}  "
          f"max {late[-1]:.1f}")
    first = min(due for _, due, _ in rows)
    all_s = (max(d for _, _, d in rows) - first) / 1000.0
    print(f"sustained     {len(rows) / all_s:.0f}/s: all {len(rows)} in {all_s:.1f} s from the first due "
          f"instant (the due span is {seconds} s)")
n = max(len(ids), 1)
print(f"cpu           owner {float(owner_cpu):.2f} s ({1000 * float(owner_cpu) / n:.3f} s per 1000), "
      f"servers {float(servers_cpu):.2f} s, postgresql {float(pg_cpu):.2f} s; machine {busy}% busy")
PY
  bench_writes_per "$writes_before" "$(bench_writes_settled "$http_port" "$zk_port")" "$total" delivery
done

echo
echo "== owner at the end: RSS $(awk '/^VmRSS/ { printf "%d", $2 / 1024 }' "/proc/$zkcron_pid/status") MiB, anonymous $(awk '/^RssAnon/ { printf "%d", $2 / 1024 }' "/proc/$zkcron_pid/status") MiB"
