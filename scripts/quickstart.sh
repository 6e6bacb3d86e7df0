#!/usr/bin/env bash
# Quick start: a throwaway single-node ZooKeeper on a free port (unless ZKCRON_ZK names one), and
# three zkcron nodes contending for one lock. Their lock events are printed as they happen.
# Ctrl-C stops everything this script started.
#
#   scripts/quickstart.sh            # throwaway ZooKeeper
#   ZKCRON_ZK=zk1:2181 scripts/quickstart.sh
set -euo pipefail
cd "$(dirname "$0")/.."

work=$(mktemp -d -t zkcron-quickstart.XXXXXX)
pids=()
cleanup() {
  trap - EXIT INT TERM
  for pid in "${pids[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT INT TERM

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

cargo build --release --quiet
for node in node-a node-b node-c; do
  target/release/zkcron lock-demo --connect "$connect/zkcron-quickstart" --name demo --node-id "$node" \
    --session-timeout 4s --takeover-delay 5s 2>"$work/$node.log" > >(sed -u "s/^/[$node] /") &
  pids+=($!)
  sleep 0.2
done
cat <<TXT
three nodes contend for lock "demo": exactly one prints 'acquired'.
try it: kill -9 the owner (pgrep -f 'node-id node-a') and watch another take over after
session timeout (4s) + takeover delay (5s); kill -TERM it for a handoff within a second.
logs: $work/*.log — Ctrl-C stops everything.
TXT
wait
