# Shared helpers for coord's server scripts: install Debian packages when missing, pick
# free loopback ports, start ZooKeeper and etcd with PID files, stop them by PID.
# Source this file; it defines functions only.

COORD_SERVERS_DIR="${COORD_SERVERS_DIR:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/.coord-servers}"

log() { printf '[coord-servers] %s\n' "$*" >&2; }

as_root() {
  if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi
}

# apt_install PKG... : installs the packages that are not installed yet.
apt_install() {
  local missing=()
  for p in "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  log "installing ${missing[*]}"
  as_root apt-get update -qq
  DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

port_in_use() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# free_port START : the first port at or above START (below 32768) nobody listens on.
free_port() {
  local p=$1
  while port_in_use "$p"; do
    p=$((p + 1))
    [ "$p" -lt 32768 ] || { log "no free port below 32768"; return 1; }
  done
  echo "$p"
}

# alive PID : the process exists and is not a zombie.
alive() {
  local state
  state=$(ps -o stat= -p "$1" 2>/dev/null) || return 1
  [ -n "$state" ] && [[ "$state" != Z* ]]
}

# stop_pidfile FILE : stops the process in FILE (TERM, then KILL) and removes FILE.
stop_pidfile() {
  local f=$1 pid
  [ -f "$f" ] || return 0
  pid=$(cat "$f")
  if alive "$pid"; then
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 50); do alive "$pid" || break; sleep 0.1; done
    alive "$pid" && kill -9 "$pid" 2>/dev/null || true
  fi
  rm -f "$f"
}

zk_mode() {
  timeout 2 bash -c "exec 3<>/dev/tcp/127.0.0.1/$1; printf srvr >&3; cat <&3" 2>/dev/null | sed -n 's/^Mode: //p'
}

# start_zk NAME PORT : a standalone ZooKeeper 3.8 on 127.0.0.1:PORT (tickTime 100 ms, so
# session timeouts of 200 ms .. 2 s are allowed) with a fresh data directory. Prints
# nothing; PID in NAME.pid.
start_zk() {
  local name=$1 port=$2 dir="$COORD_SERVERS_DIR/$1"
  apt_install zookeeper
  rm -rf "$dir" && mkdir -p "$dir/data"
  cat > "$dir/zoo.cfg" <<CFG
tickTime=100
initLimit=10
syncLimit=5
dataDir=$dir/data
clientPort=$port
clientPortAddress=127.0.0.1
maxClientCnxns=0
admin.enableServer=false
4lw.commands.whitelist=ruok,srvr,stat,cons,wchs
forceSync=no
CFG
  echo "zk $port" > "$dir/endpoint"
  launch_zk "$name"
}

# launch_zk NAME : runs the ZooKeeper configured in NAME/zoo.cfg, keeping its data, and
# waits until it answers.
launch_zk() {
  local name=$1 dir="$COORD_SERVERS_DIR/$1" port
  read -r _ port < "$dir/endpoint"
  local cp=/usr/share/java/zookeeper.jar:/usr/share/java/slf4j-simple.jar
  nohup java -Xmx256m -Dorg.slf4j.simpleLogger.defaultLogLevel=warn -cp "$cp" \
    org.apache.zookeeper.server.quorum.QuorumPeerMain "$dir/zoo.cfg" >>"$dir/server.log" 2>&1 &
  echo $! > "$dir.pid"
  for _ in $(seq 300); do
    [ -n "$(zk_mode "$port")" ] && return 0
    alive "$(cat "$dir.pid")" || break
    sleep 0.1
  done
  log "ZooKeeper did not come up on port $port; log: $dir/server.log"
  tail -20 "$dir/server.log" >&2
  return 1
}

etcd_healthy() {
  ETCDCTL_API=3 timeout 3 etcdctl --endpoints "127.0.0.1:$1" --dial-timeout 1s endpoint health >/dev/null 2>&1
}

# start_etcd NAME CLIENT_PORT PEER_PORT : a single-node etcd 3.4 on 127.0.0.1 with short
# heartbeat/election timeouts (so 1-2 s leases work), no fsync (tests only) and a fresh
# data directory. PID in NAME.pid.
start_etcd() {
  local name=$1 port=$2 peer=$3 dir="$COORD_SERVERS_DIR/$1"
  apt_install etcd-server etcd-client
  rm -rf "$dir" && mkdir -p "$dir"
  echo "etcd $port $peer" > "$dir/endpoint"
  launch_etcd "$name"
}

# launch_etcd NAME : runs the etcd described by NAME/endpoint on its data directory
# (kept) and waits until it is healthy.
launch_etcd() {
  local name=$1 dir="$COORD_SERVERS_DIR/$1" port peer
  read -r _ port peer < "$dir/endpoint"
  nohup etcd --name "$name" --data-dir "$dir/data" \
    --listen-client-urls "http://127.0.0.1:$port" --advertise-client-urls "http://127.0.0.1:$port" \
    --listen-peer-urls "http://127.0.0.1:$peer" --initial-advertise-peer-urls "http://127.0.0.1:$peer" \
    --initial-cluster "$name=http://127.0.0.1:$peer" \
    --heartbeat-interval 50 --election-timeout 250 --unsafe-no-fsync --logger zap --log-level error \
    >>"$dir/server.log" 2>&1 &
  echo $! > "$dir.pid"
  for _ in $(seq 200); do
    etcd_healthy "$port" && return 0
    alive "$(cat "$dir.pid")" || break
    sleep 0.1
  done
  log "etcd did not come up on port $port; log: $dir/server.log"
  tail -20 "$dir/server.log" >&2
  return 1
}

# restart_server NAME : kills the server NAME with SIGKILL (a crash: no clean shutdown)
# and starts it again on the same port and data directory.
restart_server() {
  local name=$1 dir="$COORD_SERVERS_DIR/$1" kind pid
  read -r kind _ < "$dir/endpoint"
  pid=$(cat "$dir.pid")
  kill -CONT "$pid" 2>/dev/null || true
  kill -9 "$pid" 2>/dev/null || true
  for _ in $(seq 100); do alive "$pid" || break; sleep 0.05; done
  "launch_$kind" "$name"
}

# ensure_protoc : etcd-client's build script needs protoc.
ensure_protoc() {
  command -v protoc >/dev/null 2>&1 || apt_install protobuf-compiler
}
