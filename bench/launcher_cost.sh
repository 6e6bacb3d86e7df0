#!/usr/bin/env bash
# What the launcher costs a run (issue 33): a job's process is started as the zkcron binary in
# launcher mode (`zkcron __launch-job …`, `posix_spawn`ed by the daemon), which sets the
# parent-death signal, checks its parent, and execs the job — two execs a run. This measures
# that against `posix_spawn` of the job alone, with nothing else running.
#
# What it does: from one Python process (the "daemon"), N times each, one after another:
#   direct    posix_spawn("/bin/true")
#   launcher  posix_spawn(zkcron, "__launch-job", <our pid>, "now", "0", "/bin/true")
# and waits for each to exit. Per start it reports the wall time from the spawn to the exit
# (p50, p99) and the CPU the children used (user + system, from RUSAGE_CHILDREN): the cost the
# machine pays for each run's start, which is what bounds the process path's runs a second.
#
# Usage: bench/launcher_cost.sh [--binary PATH] [--count N]
set -euo pipefail

# shellcheck source=bench/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

binary=""
count=2000
usage() { sed -n '/^# Usage:/p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
while (($#)); do
  case "$1" in
    --binary) binary=${2:?}; shift 2 ;;
    --count) count=${2:?}; shift 2 ;;
    -h | --help) usage ;;
    *) echo "unknown argument: $1" >&2; usage ;;
  esac
done

bench_init
binary=$(bench_binary "$binary")
echo "== environment"
bench_print_machine
printf '%-18s %s (%s, %d bytes)\n' "zkcron" "$binary" "$("$binary" --version)" "$(stat -c %s "$binary")"
echo
python3 - "$binary" "$count" <<'PY'
import os, resource, sys, time

binary, count = sys.argv[1], int(sys.argv[2])
ways = {
    "direct": ["/bin/true"],
    "launcher": [binary, "__launch-job", str(os.getpid()), "now", "0", "/bin/true"],
}

def children_cpu():
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime

def measure(argv):
    took = []
    cpu_before = children_cpu()
    for _ in range(count):
        start = time.perf_counter()
        pid = os.posix_spawn(argv[0], argv, os.environ)
        _, status = os.waitpid(pid, 0)
        took.append((time.perf_counter() - start) * 1000)
        if os.waitstatus_to_exitcode(status) != 0:
            sys.exit(f"{argv} exited {status}")
    cpu = (children_cpu() - cpu_before) * 1000 / count
    took.sort()
    return took[len(took) // 2], took[int(len(took) * 0.99)], cpu

# Warm the page cache and the dynamic loader's caches once.
for argv in ways.values():
    measure_count, count = count, 50
    measure(argv)
    count = measure_count
results = {name: measure(argv) for name, argv in ways.items()}
for name, (p50, p99, cpu) in results.items():
    print(f"{name:<9} spawn to exit  p50 {p50:.3f} ms  p99 {p99:.3f} ms   children's CPU {cpu:.3f} ms a start")
d, l = results["direct"], results["launcher"]
print(f"the launcher adds {l[0] - d[0]:.3f} ms (p50) and {l[2] - d[2]:.3f} ms of CPU a start: "
      f"{1000 / max(l[2], 1e-9):.0f} starts a CPU-second through it, {1000 / max(d[2], 1e-9):.0f} direct")
PY
