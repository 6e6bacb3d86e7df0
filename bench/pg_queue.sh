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

bench_init
cd "$(dirname "${BASH_SOURCE[0]}")/.."
cargo build --release --locked --quiet --example pg_queue
example="${CARGO_TARGET_DIR:-target}/release/examples/pg_queue"
bench_pg_start

echo "== environment"
bench_print_machine
bench_pg_describe
"$example" "$PG_DSN" "$pending" "$rounds" "$from" "$snapshot"
echo "== database size"
"$PG_BIN/psql" "$PG_DSN" -Atc \
  "SELECT pg_size_pretty(pg_database_size('postgres'))"
