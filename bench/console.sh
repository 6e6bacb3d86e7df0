#!/usr/bin/env bash
# The web console's first render with many jobs (issue 21: <= 200 ms for 1000 jobs from this
# machine's loopback; page weight <= 150 KB).
#
# What it does: starts a throwaway single ZooKeeper server on loopback, a release `zkcron run`
# with [http] and --jobs N declared jobs (daily, `0 0 3 * * *`, so they add no load) plus
# --busy M jobs firing every second (`/bin/true`), whose records fill the run index and change
# while the page is measured. After --warm seconds of those fires, headless Chromium
# (examples/console_render, through chromedriver) opens each page --count times, each a fresh
# navigation, and reads the page's own `zkcron-rendered` mark: from the navigation's start to
# the first frame after the page drew its data (HTML, script, style, the API's answers, the
# drawing). The first load of each page (which starts the node's run index) is not counted.
#
# Pages: the overview, the jobs table (first 50 of N, sorted by name), the jobs table filtered
# to failing jobs (a server-side filter over all N), and the submissions page.
#
# With --verbose, each render is printed with where its time went: the HTML's arrival, the
# script's start (DOMContentLoaded), and each API request's start and end, in ms from the
# navigation's start.
#
# Usage: bench/console.sh [--jobs N] [--busy M] [--count N] [--warm S] [--binary PATH]
#                         [--verbose] [--keep]
# Everything started is stopped by PID on exit and on Ctrl-C. Only 127.0.0.1 is used.
set -euo pipefail

# shellcheck source=bench/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

jobs=1000
busy=20
count=20
warm=30
binary=""
verbose=0
usage() { sed -n '/^# Usage:/,/^# Everything/p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
while (($#)); do
  case "$1" in
    --jobs) jobs=${2:?}; shift 2 ;;
    --busy) busy=${2:?}; shift 2 ;;
    --count) count=${2:?}; shift 2 ;;
    --warm) warm=${2:?}; shift 2 ;;
    --binary) binary=${2:?}; shift 2 ;;
    --verbose) verbose=1; shift ;;
    --keep) BENCH_KEEP=1; shift ;;
    -h | --help) usage ;;
    *) echo "unknown argument: $1" >&2; usage ;;
  esac
done
for tool in /usr/bin/chromium /usr/bin/chromedriver; do
  [[ -x $tool ]] || bench_die "$tool is missing: apt-get install chromium chromium-driver"
done

bench_init
binary=$(bench_binary "$binary")
work=$BENCH_WORK
target=${CARGO_TARGET_DIR:-$BENCH_REPO/target}
(cd "$BENCH_REPO" && cargo build --release --quiet --example console_render) >&2 ||
  bench_die "cannot build examples/console_render"
render="$target/release/examples/console_render"

echo "== environment"
bench_print_machine
printf '%-18s %s\n' "zkcron" "$binary ($("$binary" --version))"
printf '%-18s %s\n' "chromium" "$(/usr/bin/chromium --version 2>/dev/null)"
printf '%-18s %s\n' "jobs" "$jobs declared (0 0 3 * * *) + $busy firing every second (/bin/true)"
bench_zk_start 1

cat >"$work/zkcron.toml" <<TOML
[zookeeper]
connect = "$ZK_CONNECT/zkcron-console-bench"
session_timeout = "10s"

[lock]
name = "console"
node_id = "bench-node"

[http]
listen = "127.0.0.1:0"
TOML
for ((j = 1; j <= jobs; j++)); do
  printf '\n[[job]]\nname = "daily-%05d"\nschedule = "0 0 3 * * *"\ncommand = ["/bin/true"]\n' "$j" \
    >>"$work/zkcron.toml"
done
for ((j = 1; j <= busy; j++)); do
  # One in four fails, so the failing filter has something to find.
  command='["/bin/true"]'
  ((j % 4 == 0)) && command='["/bin/false"]'
  printf '\n[[job]]\nname = "busy-%03d"\nschedule = "* * * * * *"\ncommand = %s\n' "$j" "$command" \
    >>"$work/zkcron.toml"
done
"$binary" check "$work/zkcron.toml" >/dev/null || bench_die "zkcron check refused the generated config"
log="$work/zkcron.log"
"$binary" run --config "$work/zkcron.toml" </dev/null >"$log" 2>&1 &
zkcron_pid=$!
BENCH_PIDS+=("$zkcron_pid")
bench_wait_log "$log" "lock acquired" 60 "$zkcron_pid"
port=$(sed -n 's/.*http listener up.*listen=[^ ]*:\([0-9]*\).*/\1/p' "$log" | head -n 1)
[[ -n "$port" ]] || bench_die "no 'http listener up' line in the zkcron log"
echo "lock acquired; $warm s of fires before measuring..." >&2
sleep "$warm"

show() { if ((verbose)); then cat; else tail -n 2; fi; }
for page in "" "jobs" "jobs?status=failing" "submissions"; do
  echo "== page #/${page:-(overview)}: a new tab"
  "$render" "http://127.0.0.1:$port/console/#/$page" "$count" | show
  echo "== page #/${page:-(overview)}: a reload"
  "$render" "http://127.0.0.1:$port/console/#/$page" "$count" --reload | show
done
# Chromium's own floor on this machine, beside the same load: a static page of one line and one
# deferred script that sets the same mark on its first frame, served by Python on loopback.
floor="$work/floor"
mkdir -p "$floor"
printf '<!doctype html><title>floor</title><script src="floor.js" defer></script><p>floor</p>\n' \
  >"$floor/index.html"
printf "requestAnimationFrame(() => performance.mark('zkcron-rendered'));\n" >"$floor/floor.js"
floor_port=$(bench_free_ports 1)
python3 -m http.server "$floor_port" --bind 127.0.0.1 --directory "$floor" >/dev/null 2>&1 &
BENCH_PIDS+=("$!")
sleep 1
echo "== floor: a static page from python3 -m http.server: a new tab"
"$render" "http://127.0.0.1:$floor_port/#/" "$count" | show
echo "== floor: a reload"
"$render" "http://127.0.0.1:$floor_port/#/" "$count" --reload | show
echo "== one page of /v1/jobs, as the page asks it (curl, $count times)"
for ((i = 0; i < count; i++)); do
  curl -s -o /dev/null -w '%{time_total}\n' "http://127.0.0.1:$port/v1/jobs?status=all&sort=name&offset=0&limit=50"
done | sort -n | awk '{a[NR]=$1*1000} END {printf "p50 %.1f ms  max %.1f ms\n", a[int((NR+1)/2)], a[NR]}'
echo "== the node"
grep -E "^(VmRSS|RssAnon)" "/proc/$zkcron_pid/status"
