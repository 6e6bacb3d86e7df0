#!/usr/bin/env bash
# What seeing every run costs (issue 52): the daemon's CPU per run and what ZooKeeper keeps per
# run, with nothing on (the default), with `[output]` keeping each run's whole output on the
# host, and with `[telemetry]` sending each run's spans to an OTLP/HTTP collector.
#
# What it does: starts one throwaway ZooKeeper server on loopback and a local OTLP/HTTP sink (a
# Python server that answers 200 to every POST /v1/traces and counts the bytes). For each mode,
# one after another, it starts a fresh `zkcron run` node (it owns the lock) whose one on-demand
# job prints --lines lines of 80 characters, submits --runs submissions due at once
# (`zkcron submit`), and waits until every run's record is final. It reads the node's CPU
# (utime + stime of /proc/PID/stat: the daemon's own threads, not the jobs', in 10 ms ticks) and
# ZooKeeper's zk_approximate_data_size (mntr) before the first submit and after the last record.
#
# How to read the output (one row per mode):
#   CPU ms/run      the daemon's CPU over the window divided by the runs: a run's whole cost to
#                   the node (its claim, records, the job's start and output, and the mode's own)
#   ZK bytes/run    growth of the data ZooKeeper holds, per run: the submission's record (its
#                   header goes once the run is recorded) and, with telemetry, its trace ids
#   disk bytes/run  what [output] keeps per run on the host (the lines, stamped)
#   OTLP bytes/run  what the exporter sent the collector per run (two spans and their batch)
#
# Usage: bench/run_cost.sh [--binary PATH] [--runs N] [--lines N]
set -euo pipefail

# shellcheck source=bench/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

binary=""
runs=200
lines=1000
usage() { sed -n '/^# Usage:/p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
while (($#)); do
  case "$1" in
    --binary) binary=${2:?}; shift 2 ;;
    --runs) runs=${2:?}; shift 2 ;;
    --lines) lines=${2:?}; shift 2 ;;
    -h | --help) usage ;;
    *) echo "unknown argument: $1" >&2; usage ;;
  esac
done

bench_init
binary=$(bench_binary "$binary")
echo "== environment"
bench_print_machine
printf '%-18s %s (%s)\n' "zkcron" "$binary" "$("$binary" --version)"
printf '%-18s %s\n' "zookeeper" "$(bench_zk_version)"
printf '%-18s %s runs, %s lines of 80 characters each\n' "load" "$runs" "$lines"
echo

bench_zk_start 1
read -r sink_port <<<"$(bench_free_ports 1)"
python3 - "$sink_port" "$BENCH_WORK/otlp.bytes" <<'PY' &
import http.server, sys
port, counter = int(sys.argv[1]), sys.argv[2]
total = 0
class Sink(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        global total
        total += len(self.rfile.read(int(self.headers.get("Content-Length", 0))))
        with open(counter, "w") as f:
            f.write(str(total))
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", "0")
        self.end_headers()
    def log_message(self, *args):
        pass
http.server.ThreadingHTTPServer(("127.0.0.1", port), Sink).serve_forever()
PY
BENCH_PIDS+=($!)

zk_bytes() { bench_mntr "${ZK_CLIENT_PORTS[0]}" zk_approximate_data_size; }
tick_ms=$((1000 / $(getconf CLK_TCK)))

printf '%-10s %12s %13s %15s %15s\n' "mode" "CPU ms/run" "ZK bytes/run" "disk bytes/run" "OTLP bytes/run"
for mode in off output telemetry; do
  dir="$BENCH_WORK/$mode"
  mkdir -p "$dir"
  extra=""
  case "$mode" in
    output) extra=$'[output]\ndir = "'"$dir/output"$'"\n' ;;
    telemetry) extra=$'[telemetry]\nendpoint = "http://127.0.0.1:'"$sink_port"$'"\n' ;;
  esac
  cat >"$dir/zkcron.toml" <<TOML
[zookeeper]
connect = "$ZK_CONNECT"
session_timeout = "4s"

[lock]
name = "run-cost-$mode"
node_id = "bench"
takeover_delay = "1s"

$extra
[[job]]
name = "talk"
history = 5000
shell = "awk 'BEGIN { for (i = 0; i < $lines; i++) printf \"%08d %071d\\\\n\", i, 0 }'"
TOML
  echo 0 >"$BENCH_WORK/otlp.bytes"
  "$binary" run --config "$dir/zkcron.toml" </dev/null >/dev/null 2>"$dir/node.log" &
  node=$!
  BENCH_PIDS+=("$node")
  bench_wait_log "$dir/node.log" "lock acquired" 30 "$node"
  sleep 1
  cpu0=$(bench_cpu_ticks "$node")
  zk0=$(zk_bytes)
  for ((i = 0; i < runs; i++)); do
    "$binary" submit talk --in 0s --id "r$i" --config "$dir/zkcron.toml" >/dev/null
  done
  deadline=$((SECONDS + 300))
  while :; do
    final=$("$binary" history talk --json --limit "$runs" --config "$dir/zkcron.toml" |
      python3 -c 'import json, sys; print(sum(r["status"] == "succeeded" for r in json.load(sys.stdin)["runs"]))')
    ((final >= runs)) && break
    ((SECONDS < deadline)) || bench_die "$mode: $final of $runs runs ended within 300 s"
    sleep 0.5
  done
  cpu1=$(bench_cpu_ticks "$node")
  zk1=$(zk_bytes)
  disk=0
  [[ -d "$dir/output" ]] && disk=$(du -sb "$dir/output" | cut -f1)
  # Stopped, the node flushes the exporter's last batch: the sink has every span then.
  bench_stop "$node" 10
  bench_forget "$node"
  otlp=$(cat "$BENCH_WORK/otlp.bytes")
  awk -v m="$mode" -v c=$((cpu1 - cpu0)) -v t="$tick_ms" -v z=$((zk1 - zk0)) -v d="$disk" -v o="$otlp" -v n="$runs" \
    'BEGIN { printf "%-10s %12.2f %13.0f %15.0f %15.0f\n", m, c * t / n, z / n, d / n, o / n }'
done
