# shellcheck shell=bash
# Shared helpers of the bench/ scripts: a throwaway ZooKeeper on loopback, the zkcron binary,
# bounded waits, and cleanup by PID. Sourced, not run. Everything started here is recorded in
# BENCH_PIDS and stopped by bench_cleanup (the caller's EXIT/INT/TERM trap).
#
# Nothing here talks to anything but 127.0.0.1.

BENCH_REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BENCH_PIDS=()
BENCH_WORK=""
BENCH_KEEP=0
ZK_JAR=/usr/share/java/zookeeper.jar
ZK_CONF_DIR=/etc/zookeeper/conf
SLF4J_SIMPLE_JAR=/usr/share/java/slf4j-simple.jar
ZK_CLIENT_PORTS=()
ZK_CONNECT=""

bench_die() {
  echo "error: $*" >&2
  exit 1
}

bench_now() { echo "$EPOCHREALTIME"; }

# True while PID is a live (not zombie) process.
bench_alive() {
  local pid=$1 state
  [[ -r /proc/$pid/stat ]] || return 1
  state=$(awk '{ sub(/^.*\) /, ""); print $1 }' "/proc/$pid/stat" 2>/dev/null) || return 1
  [[ -n "$state" && "$state" != Z && "$state" != X ]]
}

# bench_stop PID SECONDS: SIGTERM, wait up to SECONDS, then SIGKILL; reaps our children.
bench_stop() {
  local pid=$1 seconds=$2 i
  kill -TERM "$pid" 2>/dev/null || true
  for ((i = 0; i < seconds * 10; i++)); do
    bench_alive "$pid" || break
    sleep 0.1
  done
  if bench_alive "$pid"; then
    echo "warning: PID $pid still alive ${seconds}s after SIGTERM; sending SIGKILL" >&2
    kill -KILL "$pid" 2>/dev/null || true
  fi
  wait "$pid" 2>/dev/null || true
}

bench_cleanup() {
  local status=$?
  trap - EXIT INT TERM
  local i
  # Newest first: zkcron before the ZooKeeper servers it talks to.
  for ((i = ${#BENCH_PIDS[@]} - 1; i >= 0; i--)); do
    bench_stop "${BENCH_PIDS[i]}" 10
  done
  if [[ -n "$BENCH_WORK" && -d "$BENCH_WORK" ]]; then
    if ((BENCH_KEEP)); then
      echo "kept work dir: $BENCH_WORK" >&2
    else
      rm -rf "$BENCH_WORK"
    fi
  fi
  exit "$status"
}

bench_on_signal() {
  echo "interrupted: stopping everything this script started" >&2
  exit 130 # runs bench_cleanup via the EXIT trap
}

# Call first: makes the work dir and installs the traps.
bench_init() {
  BENCH_WORK=$(mktemp -d -t "zkcron-bench.XXXXXX")
  trap bench_cleanup EXIT
  trap bench_on_signal INT TERM
}

# Drops PID from BENCH_PIDS (after the caller stopped it itself).
bench_forget() {
  local pid=$1 kept=() p
  for p in "${BENCH_PIDS[@]}"; do [[ "$p" == "$pid" ]] || kept+=("$p"); done
  BENCH_PIDS=("${kept[@]}")
}

# bench_free_ports N: N distinct free loopback ports (all bound at once, then released).
bench_free_ports() {
  python3 - "$1" <<'PY'
import socket, sys
socks = []
for _ in range(int(sys.argv[1])):
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    socks.append(s)
print(" ".join(str(s.getsockname()[1]) for s in socks))
PY
}

# bench_4lw PORT CMD: a ZooKeeper four-letter word, bounded by a 2 s timeout; empty on failure.
bench_4lw() {
  python3 - "$1" "$2" <<'PY' 2>/dev/null || true
import socket, sys
try:
    with socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=2) as s:
        s.sendall(sys.argv[2].encode())
        data = b""
        while True:
            chunk = s.recv(65536)
            if not chunk:
                break
            data += chunk
    sys.stdout.write(data.decode(errors="replace"))
except OSError:
    pass
PY
}

bench_zk_version() {
  dpkg-query -W -f='${Version}' zookeeper 2>/dev/null || echo "unknown (not a Debian package)"
}

# bench_zk_start N: starts N ZooKeeper servers (1 = standalone, 3 = ensemble) on free loopback
# ports with ZooKeeper's default durability (forceSync=yes: every transaction is fsynced to the
# log before it is acknowledged). Sets ZK_CONNECT and ZK_CLIENT_PORTS; waits (bounded) for a
# serving quorum.
bench_zk_start() {
  local n=$1 i
  [[ -f "$ZK_JAR" ]] || bench_die "ZooKeeper is not installed: apt-get install -y zookeeper"
  command -v java >/dev/null || bench_die "java is missing: apt-get install -y default-jre-headless"
  local ports
  read -r -a ports <<<"$(bench_free_ports $((3 * n)))"
  ZK_CLIENT_PORTS=("${ports[@]:0:n}")
  local classpath="$ZK_CONF_DIR:$ZK_JAR"
  [[ -f "$SLF4J_SIMPLE_JAR" ]] && classpath+=":$SLF4J_SIMPLE_JAR"
  local connect=()
  for ((i = 0; i < n; i++)); do
    local dir="$BENCH_WORK/zk$i"
    mkdir -p "$dir/data"
    cat >"$dir/zoo.cfg" <<CFG
tickTime=2000
initLimit=10
syncLimit=5
dataDir=$dir/data
clientPort=${ZK_CLIENT_PORTS[i]}
clientPortAddress=127.0.0.1
maxClientCnxns=0
4lw.commands.whitelist=*
admin.enableServer=false
reconfigEnabled=false
CFG
    if ((n > 1)); then
      local peer
      for ((peer = 0; peer < n; peer++)); do
        echo "server.$((peer + 1))=127.0.0.1:${ports[n + 2 * peer]}:${ports[n + 2 * peer + 1]}" >>"$dir/zoo.cfg"
      done
      echo "$((i + 1))" >"$dir/data/myid"
    fi
    java "-Xmx${ZK_HEAP:-256m}" -XX:+UseSerialGC -XX:-UsePerfData -Djava.net.preferIPv4Stack=true \
      -Dorg.slf4j.simpleLogger.showDateTime=true \
      -Dorg.slf4j.simpleLogger.dateTimeFormat=HH:mm:ss.SSS \
      "-Dzookeeper.log.dir=$dir" -cp "$classpath" \
      org.apache.zookeeper.server.quorum.QuorumPeerMain "$dir/zoo.cfg" \
      </dev/null >"$dir/zookeeper.log" 2>&1 &
    BENCH_PIDS+=($!)
    connect+=("127.0.0.1:${ZK_CLIENT_PORTS[i]}")
  done
  ZK_CONNECT=$(
    IFS=,
    echo "${connect[*]}"
  )
  # Serving: every server answers srvr with a Mode, and there is a leader (or a standalone).
  local deadline=$((SECONDS + 60)) modes
  while ((SECONDS < deadline)); do
    modes=""
    for ((i = 0; i < n; i++)); do
      modes+=" $(bench_4lw "${ZK_CLIENT_PORTS[i]}" srvr | sed -n 's/^Mode: //p')"
    done
    if [[ $(wc -w <<<"$modes") -eq $n && "$modes" =~ (leader|standalone) ]]; then
      return 0
    fi
    sleep 0.2
  done
  for ((i = 0; i < n; i++)); do
    echo "--- tail of $BENCH_WORK/zk$i/zookeeper.log" >&2
    tail -n 20 "$BENCH_WORK/zk$i/zookeeper.log" >&2 || true
  done
  bench_die "ZooKeeper did not serve within 60 s (modes:$modes)"
}

# The client port of the server that orders writes (leader or standalone).
bench_zk_leader_port() {
  local port
  for port in "${ZK_CLIENT_PORTS[@]}"; do
    if bench_4lw "$port" srvr | grep -qE '^Mode: (leader|standalone)'; then
      echo "$port"
      return 0
    fi
  done
  return 1
}

# bench_binary PATH: prints the zkcron binary to use; builds a release binary when PATH is empty.
bench_binary() {
  local given=$1
  if [[ -n "$given" ]]; then
    [[ -x "$given" ]] || bench_die "--binary $given is not an executable file"
    echo "$given"
    return 0
  fi
  local target=${CARGO_TARGET_DIR:-$BENCH_REPO/target}
  echo "building a release zkcron (cargo build --release, target dir $target)..." >&2
  (cd "$BENCH_REPO" && cargo build --release --quiet --bin zkcron) >&2 ||
    bench_die "cargo build --release failed"
  echo "$target/release/zkcron"
}

# bench_delayed_load: builds examples/delayed_load (release) and prints its path.
bench_delayed_load() {
  local target=${CARGO_TARGET_DIR:-$BENCH_REPO/target}
  (cd "$BENCH_REPO" && cargo build --release --quiet --example delayed_load) >&2 ||
    bench_die "cannot build examples/delayed_load"
  echo "$target/release/examples/delayed_load"
}

# bench_wait_log FILE REGEX SECONDS PID: waits until FILE has a line matching REGEX; fails when
# PID exits first or SECONDS pass.
bench_wait_log() {
  local file=$1 regex=$2 seconds=$3 pid=$4 i
  for ((i = 0; i < seconds * 20; i++)); do
    if grep -qE "$regex" "$file" 2>/dev/null; then return 0; fi
    if ! bench_alive "$pid"; then
      echo "--- tail of $file" >&2
      tail -n 30 "$file" >&2 || true
      bench_die "PID $pid exited before logging /$regex/"
    fi
    sleep 0.05
  done
  echo "--- tail of $file" >&2
  tail -n 30 "$file" >&2 || true
  bench_die "no /$regex/ in $file within ${seconds}s"
}

# bench_cpu_ticks PID: the clock ticks (getconf CLK_TCK a second) of user + system time the
# process has used, all its threads (fields 14 and 15 of /proc/PID/stat, read after the command
# name, which may hold spaces).
bench_cpu_ticks() {
  awk '{ sub(/^.*\) /, ""); print $12 + $13 }' "/proc/$1/stat"
}

# "total_jiffies idle_jiffies" of all CPUs (/proc/stat), to tell how busy the machine was.
bench_cpu_stat() {
  awk '/^cpu / { t = 0; for (i = 2; i <= NF; i++) t += $i; print t, $5 + $6 }' /proc/stat
}

# bench_busy "T0 I0" "T1 I1": percent of all CPUs' time that was not idle between two snapshots.
bench_busy() {
  awk -v a="$1" -v b="$2" 'BEGIN { split(a, x, " "); split(b, y, " ");
    t = y[1] - x[1]; if (t <= 0) { print "?"; exit } printf "%.0f", 100 * (1 - (y[2] - x[2]) / t) }'
}

# The machine, for the report.
bench_print_machine() {
  local mem_mib
  mem_mib=$(awk '/^MemTotal:/ { printf "%d", $2 / 1024 }' /proc/meminfo)
  printf '%-18s %s\n' "nproc" "$(nproc)"
  printf '%-18s %s\n' "cpu" "$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n 1)"
  printf '%-18s %s\n' "memory" "${mem_mib} MiB"
  printf '%-18s %s\n' "kernel" "$(uname -srm)"
  printf '%-18s %s\n' "java" "$(java -version 2>&1 | head -n 1)"
  printf '%-18s %s\n' "zookeeper" "$(bench_zk_version)"
  printf '%-18s %s\n' "load average" "$(cut -d' ' -f1-3 /proc/loadavg) (1/5/15 min, at start; other work on the machine skews results)"
  printf '%-18s %s\n' "work dir fs" "$(df -PT "$BENCH_WORK" | awk 'NR == 2 { print $2 " (" $1 ")" }')"
}

# bench_group_owners BINARY CONFIG: "group=owner" words of `status --json` (owner "-" when none),
# sorted; empty when status fails.
bench_group_owners() {
  "$1" status --json --config "$2" 2>/dev/null | python3 -c '
import json, sys
status = json.load(sys.stdin)
words = []
for group in status.get("groups", []):
    owner = ((group.get("lock") or {}).get("owner") or {}).get("node_id", "-")
    words.append(group["name"] + "=" + owner)
print(" ".join(sorted(words)))
' 2>/dev/null || true
}

# bench_groups_balanced "OWNERS" G LIVE...: true when all G groups are owned by live nodes, none
# owning more than ⌈G/N⌉.
bench_groups_balanced() {
  python3 - "$@" <<'PY'
import sys
owners, groups, live = sys.argv[1].split(), int(sys.argv[2]), set(sys.argv[3:])
load = {}
for word in owners:
    group, owner = word.split("=", 1)
    if owner not in live:
        sys.exit(1)
    load[owner] = load.get(owner, 0) + 1
cap = -(-groups // len(live))
sys.exit(0 if len(owners) == groups and max(load.values(), default=0) <= cap else 1)
PY
}

# bench_writes HTTP_PORT ZK_PORT: one snapshot of what the owner wrote and what the ensemble
# logged, as one line of words: "zxid=N kind:ops:checks:transactions ...". zxid is the low 32
# bits of the server's last zxid (the count of transactions of the current leader's epoch).
bench_writes() {
  local zxid
  zxid=$(bench_4lw "$2" srvr | sed -n 's/^Zxid: 0x\([0-9a-f]*\)/\1/p')
  curl -s --max-time 5 "http://127.0.0.1:$1/metrics" | python3 -c '
import re, sys
zxid = sys.argv[1]
counts = {}
pattern = re.compile(r"^zkcron_zk_(write_ops|checks|transactions)_total\{kind=\"(\w+)\"\} (\d+)")
for line in sys.stdin:
    m = pattern.match(line)
    if m:
        counts.setdefault(m.group(2), {})[m.group(1)] = int(m.group(3))
words = ["zxid=%d" % (int(zxid, 16) & 0xFFFFFFFF if zxid else -1)]
for kind, c in sorted(counts.items()):
    words.append("%s:%d:%d:%d" % (kind, c.get("write_ops", 0), c.get("checks", 0), c.get("transactions", 0)))
print(" ".join(words))
' "$zxid"
}

# bench_run_writes "SNAPSHOT": its words of the kinds a run writes.
bench_run_writes() {
  tr ' ' '\n' <<<"$1" | grep -E '^(claim|start|final|record|prune|retry|guard|forget|due):' | tr '\n' ' '
}

# bench_writes_settled HTTP_PORT ZK_PORT: bench_writes once two snapshots a second apart agree
# (the owner's final records and prunes are written after the last delivery), within 30 s.
bench_writes_settled() {
  local before after deadline=$((SECONDS + 30))
  before=$(bench_writes "$1" "$2")
  while ((SECONDS < deadline)); do
    sleep 1
    after=$(bench_writes "$1" "$2")
    [[ $(bench_run_writes "$after") == $(bench_run_writes "$before") ]] && break
    before=$after
  done
  echo "$after"
}

# bench_writes_per "BEFORE" "AFTER" N WHAT: the write ops and transactions per WHAT between two
# bench_writes snapshots, by kind, and the servers' transactions (zxid) per WHAT beside them.
bench_writes_per() {
  python3 - "$@" <<'PY'
import sys
before, after, n, what = sys.argv[1], sys.argv[2], max(int(sys.argv[3]), 1), sys.argv[4]
def parse(line):
    words = line.split()
    zxid = int(words[0].split("=")[1])
    kinds = {}
    for word in words[1:]:
        kind, ops, checks, txns = word.split(":")
        kinds[kind] = (int(ops), int(checks), int(txns))
    return zxid, kinds
zb, kb = parse(before)
za, ka = parse(after)
delta = {}
for kind, (ops, checks, txns) in ka.items():
    o, c, t = kb.get(kind, (0, 0, 0))
    if (ops - o, checks - c, txns - t) != (0, 0, 0):
        delta[kind] = (ops - o, checks - c, txns - t)
ops = sum(d[0] for d in delta.values())
checks = sum(d[1] for d in delta.values())
txns = sum(d[2] for d in delta.values())
detail = ", ".join(f"{kind} {d[0] / n:.2f}" for kind, d in sorted(delta.items(), key=lambda kv: -kv[1][0]))
print(f"writes        per {what}: {ops / n:.2f} write ops ({detail}), {checks / n:.2f} checks, "
      f"{txns / n:.2f} transactions")
servers = "n/a (no zxid)" if zb < 0 or za < 0 or za < zb else f"{(za - zb) / n:.2f}"
print(f"              the servers logged {servers} transactions per {what} "
      f"(the owner sent {txns / n:.2f}; the rest is other sessions' and session changes)")
PY
}

# The used heap of the JVM `pid` after a full GC, in KiB (jcmd GC.heap_info).
bench_heap_kib() {
  jcmd "$1" GC.run >/dev/null 2>&1 || true
  jcmd "$1" GC.heap_info 2>/dev/null |
    awk '/generation/ { for (i = 1; i < NF; i++) if ($i == "used") { v = $(i + 1); sub(/K,?$/, "", v); s += v } }
         END { printf "%.0f", s }'
}

# The value of `mntr`'s KEY on the server at PORT.
bench_mntr() { bench_4lw "$1" mntr | awk -v k="$2" '$1 == k { print $2 }'; }

# bench_pg_start: a throwaway PostgreSQL of Debian's package on a free loopback port in
# $BENCH_WORK/pg, durability as shipped (fsync on, synchronous_commit on), shared_buffers 256MB;
# as root, run as the package's postgres user. Sets PG_BIN (its programs), PG_DSN and
# PG_POSTMASTER (its PID).
bench_pg_start() {
  local initdb port i
  initdb=$(compgen -G "/usr/lib/postgresql/*/bin/initdb" | sort -V | tail -1) ||
    bench_die "PostgreSQL's server programs are missing: apt-get install postgresql"
  PG_BIN=$(dirname "$initdb")
  local dir="$BENCH_WORK/pg" as_server=()
  mkdir -p "$dir"
  if (($(id -u) == 0)); then
    # The server's user passes through the work dir (nothing in it is readable to it).
    chmod o+x "$BENCH_WORK"
    chown postgres: "$dir"
    as_server=(setpriv --reuid postgres --regid postgres --init-groups)
  fi
  port=$(bench_free_ports 1)
  "${as_server[@]}" "$PG_BIN/initdb" --pgdata "$dir/data" --username zkcron --auth trust \
    --encoding UTF8 >"$dir/initdb.log" 2>&1 || bench_die "initdb failed: $(cat "$dir/initdb.log")"
  "${as_server[@]}" "$PG_BIN/postgres" -D "$dir/data" -p "$port" -k "$dir" \
    -c listen_addresses=127.0.0.1 -c shared_buffers=256MB -c max_wal_size=4GB \
    >"$dir/postgres.log" 2>&1 &
  BENCH_PIDS+=($!)
  PG_POSTMASTER=$!
  for ((i = 0; i < 300; i++)); do
    [[ "$(sed -n 8p "$dir/data/postmaster.pid" 2>/dev/null | tr -d ' ')" == ready ]] && break
    bench_alive "${BENCH_PIDS[-1]}" || bench_die "postgres exited: $(tail -5 "$dir/postgres.log")"
    sleep 0.1
  done
  PG_DSN="host=127.0.0.1 port=$port user=zkcron dbname=postgres"
}

# bench_pg_describe: one line of what bench_pg_start started.
bench_pg_describe() {
  printf '%-18s %s\n' "postgresql" "$("$PG_BIN/postgres" --version) on 127.0.0.1, fsync on, synchronous_commit on, shared_buffers 256MB"
}
