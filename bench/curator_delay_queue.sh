#!/usr/bin/env bash
# Apache Curator's DistributedDelayQueue under the workload of bench/delayed.sh, for comparison
# with zkcron's delayed submissions: submit rate from one client, consume lateness at a steady
# rate of items coming due, and (with --pending) what pending items cost a new consumer and
# ZooKeeper, and at what count the queue stops working.
#
# What it does: starts the same throwaway ZooKeeper as delayed.sh (lib.sh: default 3 servers on
# loopback, fsync on), installs Debian's libcurator-recipes-java if missing, compiles
# bench/curator/DelayQueueBench.java with javac into the work dir, and runs it (one JVM, one
# Curator client, one ZooKeeper session per step):
#   1. submit rate: --submit N items due a day ahead over an hour, four ways (one line each):
#      put() synchronous one at a time; synchronous from --threads T threads; put() in the
#      background (Curator's default, putInBackground=true) with 256 not yet acknowledged, as
#      delayed.sh keeps 256 out at once; putMulti() of 100 items per znode, 8 out at once, like
#      delayed.sh's submit_many (but a putMulti znode is ONE queue item: its 100 items share one
#      due instant and are consumed together; zkcron's submit_many keeps one due instant each).
#      These go to their own queue (/zkcron-curator-bench/submit), not consumed; --same-queue puts
#      them in the consumed queue instead, pending during 2 and 3 as in delayed.sh.
#   2. lateness: --rate R items per second coming due for --seconds S, put first (background,
#      256 out at once) while a consumer JVM (a QueueConsumer with Curator's defaults: direct
#      executor, no lock path) already runs; lateness = consumeMessage() entry - due instant,
#      every item; missing and duplicate items counted (both must be 0).
#   3. with --pending N[,N2,...]: cumulative levels; at each, that many items due over the 30
#      days from 25 h ahead are in the consumed queue plus one item due now; the consumer is
#      restarted (new JVM) and the figures are: queue.start() -> first consume of the due item,
#      consumer JVM RSS (VmRSS) and heap after a full GC, and each ZooKeeper server's heap after
#      a full GC (jcmd, as delayed.sh). The queue keeps every item as a child of ONE znode and a
#      consumer lists all of them in one getChildren (with its Stat): the reply is
#      88 + 33 * children bytes (names "queue-|<11 hex digits>|<10 digits>"), and the client
#      refuses a reply over jute.maxbuffer (1048575): at 31 773 children it drops the
#      connection ("Packet len 1048597 is out of range!"), reconnects, lists again, forever, and
#      consumes nothing, due or not; puts still succeed. A level whose consumer does not consume
#      within --ready-timeout is reported FAILED with the client's error, and the levels after
#      it are skipped. (The limit is the client's: --client-jute-maxbuffer lifts it.)
#
# Usage: bench/curator_delay_queue.sh [--servers 1|3] [--submit N] [--rate R] [--seconds S]
#                                     [--pending N[,N2...]] [--heap SIZE] [--threads T]
#                                     [--same-queue] [--lock-safety] [--client-heap SIZE]
#                                     [--client-jute-maxbuffer BYTES] [--ready-timeout SEC]
#                                     [--keep]
#   --heap          each ZooKeeper server's -Xmx (default 256m)
#   --threads       threads of the synchronous multi-threaded put (default 32)
#   --lock-safety   consumer with a lock path (Curator's at-least-once mode: a lock znode per
#                   item, deleted after consumeMessage) instead of the default (delete, then
#                   consume: at-most-once)
#   --client-heap   -Xmx of the driver JVMs (default 256m; SerialGC like the servers)
#   --client-jute-maxbuffer  -Djute.maxbuffer for the driver JVMs (the client's reply limit;
#                   default unset = 1048575 bytes)
#   --ready-timeout seconds a new consumer gets to consume the item due now (default 30)
# Summary lines start with "curator " (one per figure). Everything started is stopped by PID on
# exit and on Ctrl-C. Only 127.0.0.1 is used.
set -euo pipefail

# shellcheck source=bench/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

servers=3
submit=20000
rate=1000
seconds=10
pending=""
threads=32
same_queue=0
lock_safety=false
client_heap=256m
client_maxbuffer=""
ready_timeout=30
usage() { sed -n '/^# Usage:/,/^# Summary/p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
while (($#)); do
  case "$1" in
    --servers) servers=${2:?}; shift 2 ;;
    --submit) submit=${2:?}; shift 2 ;;
    --rate) rate=${2:?}; shift 2 ;;
    --seconds) seconds=${2:?}; shift 2 ;;
    --pending) pending=${2:?}; shift 2 ;;
    --heap) ZK_HEAP=${2:?}; shift 2 ;;
    --threads) threads=${2:?}; shift 2 ;;
    --same-queue) same_queue=1; shift ;;
    --lock-safety) lock_safety=true; shift ;;
    --client-heap) client_heap=${2:?}; shift 2 ;;
    --client-jute-maxbuffer) client_maxbuffer=${2:?}; shift 2 ;;
    --ready-timeout) ready_timeout=${2:?}; shift 2 ;;
    --keep) BENCH_KEEP=1; shift ;;
    -h | --help) usage ;;
    *) echo "unknown argument: $1" >&2; usage ;;
  esac
done
export ZK_HEAP="${ZK_HEAP:-256m}"
[[ "$servers" == 1 || "$servers" == 3 ]] || { echo "--servers is 1 or 3" >&2; usage; }
levels=()
if [[ -n "$pending" ]]; then
  IFS=, read -r -a levels <<<"$pending"
  prev=0
  for level in "${levels[@]}"; do
    [[ "$level" =~ ^[0-9]+$ ]] && ((level >= prev)) ||
      bench_die "--pending takes ascending counts, comma-separated (got $pending)"
    prev=$level
  done
fi

# Curator from Debian (as .ci/run installs zookeeper).
if [[ ! -f /usr/share/java/curator-recipes.jar ]]; then
  echo "installing libcurator-recipes-java..." >&2
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq libcurator-recipes-java >/dev/null ||
    bench_die "cannot install libcurator-recipes-java"
fi
command -v javac >/dev/null || bench_die "javac is missing: apt-get install -y default-jdk-headless"
classpath=""
for jar in curator-recipes curator-framework curator-client zookeeper zookeeper-jute guava \
  slf4j-api slf4j-simple; do
  [[ -f /usr/share/java/$jar.jar ]] || bench_die "/usr/share/java/$jar.jar is missing"
  classpath+="${classpath:+:}/usr/share/java/$jar.jar"
done

bench_init
work=$BENCH_WORK
mkdir -p "$work/classes"
javac -nowarn -Xlint:-path -cp "$classpath" -d "$work/classes" \
  "$BENCH_REPO/bench/curator/DelayQueueBench.java" || bench_die "javac failed"
classpath="$work/classes:$classpath"
java_opts=("-Xmx$client_heap" -XX:+UseSerialGC -XX:-UsePerfData -Djava.net.preferIPv4Stack=true
  -Dorg.slf4j.simpleLogger.defaultLogLevel=warn -Dorg.slf4j.simpleLogger.showDateTime=true
  -Dorg.slf4j.simpleLogger.dateTimeFormat=HH:mm:ss.SSS)
[[ -n "$client_maxbuffer" ]] && java_opts+=("-Djute.maxbuffer=$client_maxbuffer")

echo "== environment"
bench_print_machine
printf '%-18s %s\n' "ensemble" "$servers server(s) on 127.0.0.1, fsync on, -Xmx$ZK_HEAP each"
printf '%-18s %s\n' "curator" "$(dpkg-query -W -f='${Version}' libcurator-recipes-java 2>/dev/null || echo unknown) (DistributedDelayQueue; driver JVMs -Xmx$client_heap${client_maxbuffer:+, -Djute.maxbuffer=$client_maxbuffer})"

bench_zk_start "$servers"
queue=/zkcron-curator-bench/due
submit_queue=/zkcron-curator-bench/submit
((same_queue)) && submit_queue=$queue

# run_driver LOG ARGS...: one driver JVM in the foreground, recorded in BENCH_PIDS so that a
# signal stops it too; its output goes to LOG, its figures and details ("curator ", "# ") to
# stdout.
run_driver() {
  local log=$1 pid rc
  shift
  java "${java_opts[@]}" -cp "$classpath" DelayQueueBench "$@" --connect "$ZK_CONNECT" \
    </dev/null >"$log" 2>&1 &
  pid=$!
  BENCH_PIDS+=("$pid")
  if wait "$pid"; then rc=0; else rc=$?; fi
  bench_forget "$pid"
  grep -E '^(curator |# )' "$log" || true
  if ((rc != 0)); then
    echo "--- tail of $log" >&2
    tail -n 30 "$log" >&2
  fi
  return "$rc"
}

# start_consumer NAME FIRES: a consumer JVM in the background (consumer_pid, consumer_log).
start_consumer() {
  consumer_log="$work/consumer-$1.log"
  java "${java_opts[@]}" -cp "$classpath" DelayQueueBench consume --path "$queue" \
    --fires "$2" --lock-safety "$lock_safety" --connect "$ZK_CONNECT" \
    </dev/null >"$consumer_log" 2>&1 &
  consumer_pid=$!
  BENCH_PIDS+=("$consumer_pid")
  bench_wait_log "$consumer_log" "^consumer_started" 60 "$consumer_pid"
}

stop_consumer() {
  bench_stop "$consumer_pid" 10
  bench_forget "$consumer_pid"
}

echo
echo "== 1. submit rate: $submit items from one client, due a day ahead over an hour (queue $submit_queue)"
run_driver "$work/submit.log" submit --path "$submit_queue" --n "$submit" --threads "$threads" ||
  bench_die "the submit run failed (log above)"

echo
echo "== 2. lateness: $rate items due per second for $seconds s (queue $queue, consumer with" \
  "$([[ $lock_safety == true ]] && echo "a lock path" || echo "Curator's defaults"))"
fires="$work/fires"
: >"$fires"
start_consumer lateness "$fires"
total=$((rate * seconds))
lead_ms=$((total * 1000 / 1000 + 5000)) # room to put them at >= 1000/s before the first is due
run_driver "$work/put-lateness.log" put --path "$queue" --n "$total" --prefix "now-" \
  --delay-ms "$lead_ms" --spread-ms $((seconds * 1000)) ||
  bench_die "putting the lateness items failed (log above)"
margin=$(sed -n 's/^put_margin_ms=//p' "$work/put-lateness.log")
((margin >= 0)) ||
  echo "WARNING: the puts ended ${margin#-} ms after the first item was due; early lateness includes the put"
cpu_before=$(bench_cpu_stat)
wait_until=$((SECONDS + (margin > 0 ? margin / 1000 : 0) + seconds + 30))
while (($(wc -l <"$fires") < total && SECONDS < wait_until)); do
  bench_alive "$consumer_pid" || { tail -n 30 "$consumer_log" >&2; bench_die "the consumer exited during the run"; }
  sleep 1
done
sleep 2 # late duplicates
busy=$(bench_busy "$cpu_before" "$(bench_cpu_stat)")
echo "machine busy while they came due: ${busy}% of all $(nproc) CPUs"
python3 - "$fires" "$total" "$rate" "$seconds" <<'PY'
import math, sys
from collections import Counter
rows = []
for line in open(sys.argv[1]):
    p = line.split()
    if len(p) == 3 and p[0].startswith("now-"):
        rows.append((p[0], float(p[2]) - int(p[1])))
def pct(v, p):
    return v[max(1, math.ceil(p / 100.0 * len(v))) - 1] if v else float("nan")
total = int(sys.argv[2])
late = sorted(l for _, l in rows)
counts = Counter(i for i, _ in rows)
dups = sum(c - 1 for c in counts.values() if c > 1)
missing = total - len(counts)
early = sum(1 for l in late if l < 0)
print(f"consumed {len(rows)} of {total}   missing {missing}   duplicates {dups}   early {early}")
if late:
    print(f"curator lateness_ms rate={sys.argv[3]} seconds={sys.argv[4]} p50={pct(late, 50):.3f} "
          f"p90={pct(late, 90):.3f} p99={pct(late, 99):.3f} max={late[-1]:.3f} min={late[0]:.3f} "
          f"consumed={len(rows)} missing={missing} duplicates={dups} early={early}")
else:
    print(f"curator lateness_ms rate={sys.argv[3]} seconds={sys.argv[4]} FAILED: nothing consumed "
          f"missing={missing}")
PY
stop_consumer

rss_kib() { awk '/^VmRSS/ {print $2}' "/proc/$1/status"; }
# heap_kib PID: used heap (young + old generation) after a full GC, KiB.
heap_kib() {
  jcmd "$1" GC.run >/dev/null 2>&1 || true
  jcmd "$1" GC.heap_info 2>/dev/null |
    awk '/generation/ { for (i = 1; i < NF; i++) if ($i == "used") { v = $(i + 1); sub(/K,?$/, "", v); s += v } }
         END { print s + 0 }'
}
zk_heaps() {
  local pid out=()
  for pid in "${BENCH_PIDS[@]}"; do
    grep -q QuorumPeerMain "/proc/$pid/cmdline" 2>/dev/null && out+=("$(heap_kib "$pid")")
  done
  (
    IFS=,
    echo "${out[*]}"
  )
}

if ((${#levels[@]})); then
  echo
  echo "== 3. pending levels ${levels[*]}: items due over the 30 days from 25 h ahead, plus one due now"
  have=0
  for level in "${levels[@]}"; do
    run_driver "$work/put-$level.log" put --path "$queue" --n $((level - have)) \
      --prefix "far-$level-" --delay-ms 90000000 --spread-ms 2592000000 --marker true ||
      bench_die "putting the pending items failed (log above)"
    have=$level
    children=$(sed -n 's/^children=//p' "$work/put-$level.log")
    : >"$work/fires-$level"
    start_consumer "pending-$level" "$work/fires-$level"
    ready=""
    for ((i = 0; i < ready_timeout * 10; i++)); do
      ready=$(sed -n 's/^curator_first_consume ready_ms=\([0-9.]*\).*/\1/p' "$consumer_log")
      [[ -n "$ready" ]] && break
      bench_alive "$consumer_pid" || break
      sleep 0.1
    done
    if [[ -n "$ready" ]]; then
      sleep 2
      rss=$(rss_kib "$consumer_pid")
      consumer_heap=$(heap_kib "$consumer_pid")
      echo "curator pending=$level children=$children ready_ms=$ready rss_kib=$rss" \
        "consumer_heap_kib=$consumer_heap zk_heap_kib=$(zk_heaps)"
      stop_consumer
    else
      # The client's own words for why the listing never arrived.
      error=$(grep -m 1 'out of range' "$consumer_log" || grep -m 1 'Exception:' "$consumer_log" || true)
      drops=$(grep -c 'out of range' "$consumer_log" || true)
      echo "consumer log (tail):"
      grep -vE '^\s+at |^# connection state (SUSPENDED|RECONNECTED)' "$consumer_log" | tail -n 6 | sed 's/^/  /'
      echo "curator pending=$level children=$children FAILED: ${error:-no consume within ${ready_timeout}s}" \
        "(no consume within ${ready_timeout} s; $drops connections dropped for it;" \
        "zk_heap_kib=$(zk_heaps))"
      stop_consumer
      break
    fi
  done
fi
