#!/usr/bin/env bash
# Quick start: a throwaway single-node ZooKeeper on a free port (unless ZKCRON_ZK names one), and
# three `zkcron run` nodes sharing one schedule. Every fire is printed with the node that fired it.
# Ctrl-C stops everything this script started.
#
#   scripts/quickstart.sh            # throwaway ZooKeeper
#   ZKCRON_ZK=zk1:2181 scripts/quickstart.sh
set -euo pipefail
cd "$(dirname "$0")/.."

work=$(mktemp -d -t zkcron-quickstart.XXXXXX)
pids=()
cleanup() {
  trap '' INT TERM # a second Ctrl-C must not cut the clean-up short
  for pid in "${pids[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
  # The nodes are not this shell's jobs (below): wait for each to stop as `wait` would.
  for pid in "${pids[@]}"; do timeout 30 tail --pid="$pid" -f /dev/null 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM # stop here; the EXIT trap cleans up

connect=${ZKCRON_ZK:-}
if [[ -z "$connect" ]]; then
  if [[ ! -f /usr/share/java/zookeeper.jar ]]; then
    echo "ZooKeeper is not installed; installing Debian's package (needs root)..." >&2
    if [[ $(id -u) -ne 0 ]]; then sudo=sudo; else sudo=; fi
    $sudo apt-get update -qq && $sudo apt-get install -y -qq zookeeper >/dev/null
  fi
  command -v java >/dev/null || { echo "java is missing: apt-get install -y default-jre-headless" >&2; exit 1; }
  port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
  mkdir -p "$work/zk/data"
  cat > "$work/zk/zoo.cfg" <<CFG
tickTime=200
dataDir=$work/zk/data
clientPort=$port
clientPortAddress=127.0.0.1
minSessionTimeout=400
maxSessionTimeout=30000
4lw.commands.whitelist=srvr
admin.enableServer=false
CFG
  java -Xmx256m -XX:+UseSerialGC -cp /etc/zookeeper/conf:/usr/share/java/zookeeper.jar \
    org.apache.zookeeper.server.quorum.QuorumPeerMain "$work/zk/zoo.cfg" >"$work/zk/log" 2>&1 &
  pids+=($!)
  for _ in $(seq 1 100); do
    if (exec 3<>"/dev/tcp/127.0.0.1/$port" && echo srvr >&3 && grep -q Mode <&3) 2>/dev/null; then break; fi
    sleep 0.1
  done
  connect="127.0.0.1:$port"
  echo "throwaway ZooKeeper on $connect (log: $work/zk/log)"
fi

echo "building zkcron (unoptimised: 2-3 minutes the first time on 2 cores; cargo shows its progress)..." >&2
cargo build --profile quickstart
# The example schedule's shape, with one job that shows itself every 2 seconds, and one whose
# target is a URL: a one-line local receiver that prints what it is sent.
fires="$work/fires.log"
touch "$fires"
receiver_port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
python3 -u -c '
import http.server, sys
class R(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length", 0))).decode(errors="replace")
        h = self.headers.get
        # One write per line: the jobs append to the same file, and print() writes the line and
        # its newline apart, so a line of a job could land between them.
        sys.stdout.write("%s delivered by %s (fencing token %s): %s\n" % (h("Zkcron-Scheduled-At"), h("Zkcron-Node"), h("Zkcron-Fencing-Token"), body))
        self.send_response(200); self.send_header("Content-Length", "0"); self.end_headers()
    def log_message(self, *args): pass
http.server.HTTPServer(("127.0.0.1", int(sys.argv[1])), R).serve_forever()
' "$receiver_port" >>"$fires" 2>"$work/receiver.log" &
pids+=($!)
# The file `zkcron init` writes, as a user starts, and a drop-in beside it that overrides what a
# demo wants quicker: a short session and takeover delay, "hello" every 2 s into the fires log,
# and a job whose target is the receiver. The three nodes share both; each has its own node id.
zkcron="${CARGO_TARGET_DIR:-target}/quickstart/zkcron"
"$zkcron" init --config "$work/zkcron.toml" --connect "$connect/zkcron-quickstart" --name quickstart >/dev/null
mkdir -p "$work/zkcron.d"
cat > "$work/zkcron.d/10-quickstart.toml" <<TOML
[zookeeper]
session_timeout = "4s"

[lock]
takeover_delay = "5s"

[[job]]
name = "hello"
schedule = "*/2 * * * * *"
shell = 'echo "\$ZKCRON_SCHEDULED_AT fired by \$ZKCRON_NODE (fencing token \$ZKCRON_FENCING_TOKEN)" >> $fires'

[[job]]
name = "deliver"
schedule = "*/10 * * * * *"
http = { url = "http://127.0.0.1:$receiver_port/hello", body = "a tick's body" }
TOML
"$zkcron" check --config "$work/zkcron.toml" >/dev/null
for node in node-a node-b node-c; do
  # Started from a subshell, so that this script's shell does not own them as jobs: a node the
  # reader kills with -9 (as suggested below) is not reported here as "Killed".
  pid=$( ("$zkcron" run --config "$work/zkcron.toml" --node-id "$node" \
    >/dev/null 2>"$work/$node.log" & echo $!) )
  pids+=("$pid")
done
cat <<TXT
three nodes (node-a, node-b, node-c) share $work/zkcron.toml, as \`zkcron init\` wrote it, and
the drop-in $work/zkcron.d/10-quickstart.toml: job "hello" every 2 s, and "deliver" to a local
HTTP receiver every 10 s. Exactly one node fires each tick. Submit a delivery:
  $zkcron submit --config $work/zkcron.toml deliver --in 5s --payload '{"order": 4711}'

Try it: kill -9 the owner (pgrep -f 'node-id node-a') and watch another take over after the
session timeout (4s) + the takeover delay (5s); kill -TERM it for a handoff within a second.
  status:  $zkcron status --config $work/zkcron.toml
  one job: $zkcron describe hello --config $work/zkcron.toml
  logs:    $work/node-*.log
Ctrl-C stops everything.

fires, as they happen:
TXT
tail -n +1 -f "$fires" &
pids+=($!)
wait
