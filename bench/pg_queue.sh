#!/usr/bin/env bash
# The delayed queue's PostgreSQL store (issue 55): batched submits a second while loading
# PENDING submissions, then the claim's latency with them pending while rounds of due work are
# claimed and ended (dead tuples in today's partition beside it). A throwaway PostgreSQL of
# Debian's package on loopback, durability as shipped (fsync on, synchronous_commit on).
#
# Usage: bench/pg_queue.sh [--pending N] [--rounds N] [--from mark|start] [--snapshot hold|free] [--keep]
#
# How to read the output: examples/pg_queue.rs's header says; the environment block says which
# PostgreSQL and which settings. Everything started is stopped by PID on exit and on Ctrl-C.
set -euo pipefail
# shellcheck source=bench/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

pending=1000000
rounds=20
from=mark
snapshot=free
while (($#)); do
  case "$1" in
    --pending) pending=${2:?}; shift 2 ;;
    --rounds) rounds=${2:?}; shift 2 ;;
    --from) from=${2:?}; shift 2 ;;
    --snapshot) snapshot=${2:?}; shift 2 ;;
    --keep) BENCH_KEEP=1; shift ;;
    *) echo "usage: bench/pg_queue.sh [--pending N] [--rounds N] [--from mark|start] [--snapshot hold|free] [--keep]" >&2; exit 2 ;;
  esac
done

bin=$(compgen -G "/usr/lib/postgresql/*/bin/initdb" | sort -V | tail -1) ||
  bench_die "PostgreSQL's server programs are missing: apt-get install postgresql"
bin=$(dirname "$bin")

bench_init
cd "$(dirname "${BASH_SOURCE[0]}")/.."
cargo build --release --locked --quiet --example pg_queue
example="${CARGO_TARGET_DIR:-target}/release/examples/pg_queue"

# PostgreSQL refuses to run as root: as root, as the package's postgres user.
as_server=()
if (($(id -u) == 0)); then
  chown postgres: "$BENCH_WORK"
  as_server=(setpriv --reuid postgres --regid postgres --init-groups)
fi
port=$(bench_free_ports 1)
"${as_server[@]}" "$bin/initdb" --pgdata "$BENCH_WORK/data" --username zkcron --auth trust \
  --encoding UTF8 >"$BENCH_WORK/initdb.log" 2>&1 || bench_die "initdb failed: $(cat "$BENCH_WORK/initdb.log")"
"${as_server[@]}" "$bin/postgres" -D "$BENCH_WORK/data" -p "$port" -k "$BENCH_WORK" \
  -c listen_addresses=127.0.0.1 -c shared_buffers=256MB -c max_wal_size=4GB \
  >"$BENCH_WORK/postgres.log" 2>&1 &
BENCH_PIDS+=($!)
for ((i = 0; i < 300; i++)); do
  [[ "$(sed -n 8p "$BENCH_WORK/data/postmaster.pid" 2>/dev/null | tr -d ' ')" == ready ]] && break
  bench_alive "${BENCH_PIDS[-1]}" || bench_die "postgres exited: $(tail -5 "$BENCH_WORK/postgres.log")"
  sleep 0.1
done

echo "== environment"
bench_print_machine
printf '%-18s %s\n' "postgresql" "$("$bin/postgres" --version) on 127.0.0.1, fsync on, synchronous_commit on, shared_buffers 256MB"
dsn="host=127.0.0.1 port=$port user=zkcron dbname=postgres"
"$example" "$dsn" "$pending" "$rounds" "$from" "$snapshot"
echo "== database size"
"$bin/psql" -h 127.0.0.1 -p "$port" -U zkcron -d postgres -Atc \
  "SELECT pg_size_pretty(pg_database_size('postgres'))"
