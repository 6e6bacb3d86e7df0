#!/usr/bin/env bash
# The round trip of one tick claim — check(epoch, token) + create the run record + create the
# running/<job> guard, the multi-op `zkcron run` sends `claim_ahead` before every tick — against
# a throwaway ZooKeeper on loopback with ZooKeeper's default fsync.
#
# Usage: bench/claim_rtt.sh [--servers 1|3] [--count N]
#
# How to read the output: count, p50/p90/p99/max of the claim's round trip in ms. A claim is sent
# ahead of its tick (250 ms by default), so this is not added to fire lateness unless it exceeds
# claim_ahead; it is the headroom. Everything started is stopped by PID on exit and on Ctrl-C.
set -euo pipefail
# shellcheck source=bench/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

servers=3
count=500
while (($#)); do
  case "$1" in
    --servers) servers=${2:?}; shift 2 ;;
    --count) count=${2:?}; shift 2 ;;
    *) echo "usage: bench/claim_rtt.sh [--servers 1|3] [--count N]" >&2; exit 2 ;;
  esac
done
[[ "$servers" == 1 || "$servers" == 3 ]] || bench_die "--servers must be 1 or 3"

bench_init
cd "$(dirname "${BASH_SOURCE[0]}")/.."
cargo build --release --locked --quiet --example claim_rtt
example="${CARGO_TARGET_DIR:-target}/release/examples/claim_rtt"
echo "== environment"
bench_print_machine
printf '%-18s %s\n' "ensemble" "$servers server(s) on 127.0.0.1, fsync on"
bench_zk_start "$servers"
"$example" "$ZK_CONNECT/claim-rtt" "$count"
