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
  local name=$1 port=$2
  apt_install zookeeper
  write_zk_cfg "$name" "$port"
  launch_zk "$name"
}

# write_zk_cfg NAME PORT [LINE...] : a fresh data directory and zoo.cfg for a standalone
# server on 127.0.0.1:PORT, plus the extra config LINEs.
write_zk_cfg() {
  local name=$1 port=$2 dir="$COORD_SERVERS_DIR/$1"
  shift 2
  rm -rf "$dir" && mkdir -p "$dir/data"
  {
    cat <<CFG
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
    printf '%s\n' "$@"
  } > "$dir/zoo.cfg"
  echo "zk $port" > "$dir/endpoint"
}

# launch_zk NAME : runs the ZooKeeper configured in NAME/zoo.cfg, keeping its data, and
# waits until it answers.
launch_zk() {
  local name=$1 dir="$COORD_SERVERS_DIR/$1" port
  read -r _ port < "$dir/endpoint"
  # netty-codec is not on zookeeper.jar's manifest class path, but its Netty connection
  # factory (the TLS port) needs it.
  local cp=/usr/share/java/zookeeper.jar:/usr/share/java/slf4j-simple.jar:/usr/share/java/netty-codec.jar
  # Containers (the directories of locks, elections and services) are swept every
  # 100 ms instead of every minute, so tests can see empty ones go.
  nohup java -Xmx256m -Dorg.slf4j.simpleLogger.defaultLogLevel=warn \
    -Dznode.container.checkIntervalMs=100 -Dznode.container.maxPerMinute=1000000 -cp "$cp" \
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

# etcd_healthy PORT [CERTS] : the etcd on 127.0.0.1:PORT answers (over TLS with the test
# client certificate when CERTS is given).
etcd_healthy() {
  local tls=()
  [ -n "${2:-}" ] && tls=(--cacert "$2/ca.pem" --cert "$2/client.pem" --key "$2/client.key")
  ETCDCTL_API=3 timeout 3 etcdctl --endpoints "127.0.0.1:$1" --dial-timeout 1s "${tls[@]}" endpoint health >/dev/null 2>&1
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
  local name=$1 dir="$COORD_SERVERS_DIR/$1" port peer scheme=http certs="" tls=() extra=()
  read -r _ port peer < "$dir/endpoint"
  if [ -f "$dir/tls" ]; then
    read -ra tls < "$dir/tls"
    scheme=https
    certs=$(dirname "${tls[1]}")
  fi
  [ -f "$dir/extra" ] && read -ra extra < "$dir/extra"
  nohup etcd --name "$name" --data-dir "$dir/data" "${tls[@]}" "${extra[@]}" \
    --listen-client-urls "$scheme://127.0.0.1:$port" --advertise-client-urls "$scheme://127.0.0.1:$port" \
    --listen-peer-urls "http://127.0.0.1:$peer" --initial-advertise-peer-urls "http://127.0.0.1:$peer" \
    --initial-cluster "$name=http://127.0.0.1:$peer" \
    --heartbeat-interval 50 --election-timeout 250 --unsafe-no-fsync --logger zap --log-level error \
    >>"$dir/server.log" 2>&1 &
  echo $! > "$dir.pid"
  for _ in $(seq 200); do
    etcd_healthy "$port" "$certs" && return 0
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

# ensure_protoc : etcd-client's build script needs protoc and the well-known protobuf
# include files (google/protobuf/*.proto). Debian ships those in libprotobuf-dev, which
# is only a recommendation of protobuf-compiler, so both are named.
ensure_protoc() {
  apt_install protobuf-compiler libprotobuf-dev
  command -v protoc >/dev/null 2>&1 || { log "protoc is still missing after installing protobuf-compiler"; return 1; }
  [ -f /usr/include/google/protobuf/descriptor.proto ] || {
    log "google/protobuf/descriptor.proto is still missing after installing libprotobuf-dev"
    return 1
  }
}

# make_certs DIR : a throwaway test PKI in DIR (kept if already there): ca.pem/ca.key (the
# CA), server.pem/server.key (for 127.0.0.1 and localhost), server-keystore.pem (key and
# certificate in one file, as ZooKeeper's PEM key store wants), client.pem/client.key
# (CN coord-client), and other-ca.pem plus other-client.pem/other-client.key (a second,
# unrelated CA and a client it signed: for the wrong-CA cases). Valid for 7 days.
make_certs() {
  local dir=$1
  [ -f "$dir/other-client.key" ] && return 0
  apt_install openssl
  mkdir -p "$dir"
  (
    cd "$dir"
    local days=7
    ossl() { openssl "$@" 2>/dev/null; }
    ca() { # NAME CN
      ossl req -x509 -newkey rsa:2048 -nodes -keyout "$1.key" -out "$1.pem" -days $days -subj "/CN=$2"
    }
    leaf() { # NAME CN CA EXTENSIONS
      ossl req -newkey rsa:2048 -nodes -keyout "$1.key" -out "$1.csr" -subj "/CN=$2"
      printf '%s\n' "$4" > "$1.ext"
      ossl x509 -req -in "$1.csr" -CA "$3.pem" -CAkey "$3.key" -CAcreateserial -out "$1.pem" -days $days -extfile "$1.ext"
      rm -f "$1.csr" "$1.ext"
    }
    ca ca coord-test-ca
    ca other-ca coord-other-ca
    leaf server localhost ca "subjectAltName=IP:127.0.0.1,DNS:localhost
extendedKeyUsage=serverAuth,clientAuth"
    leaf client coord-client ca "extendedKeyUsage=clientAuth"
    leaf other-client coord-client other-ca "extendedKeyUsage=clientAuth"
    cat server.key server.pem > server-keystore.pem
    chmod 600 ./*.key server-keystore.pem
  )
  [ -f "$dir/other-client.key" ] || { log "could not make test certificates in $dir"; return 1; }
}

# start_zk_tls NAME PORT SECURE_PORT CERTS : a standalone ZooKeeper with a TLS client
# port (Netty) that requires client certificates signed by CERTS/ca.pem, and a plaintext
# port for readiness probes. PID in NAME.pid.
start_zk_tls() {
  local name=$1 port=$2 secure=$3 certs=$4
  apt_install zookeeper libnetty-java
  write_zk_cfg "$name" "$port" \
    "secureClientPort=$secure" \
    "serverCnxnFactory=org.apache.zookeeper.server.NettyServerCnxnFactory" \
    "ssl.keyStore.location=$certs/server-keystore.pem" \
    "ssl.keyStore.type=PEM" \
    "ssl.trustStore.location=$certs/ca.pem" \
    "ssl.trustStore.type=PEM" \
    "ssl.clientAuth=need"
  launch_zk "$name"
}

# start_etcd_tls NAME CLIENT_PORT PEER_PORT CERTS : a single-node etcd serving its
# clients over TLS only, requiring client certificates signed by CERTS/ca.pem.
start_etcd_tls() {
  local name=$1 port=$2 peer=$3 certs=$4 dir="$COORD_SERVERS_DIR/$1"
  apt_install etcd-server etcd-client
  rm -rf "$dir" && mkdir -p "$dir"
  echo "etcd $port $peer" > "$dir/endpoint"
  echo "--cert-file $certs/server.pem --key-file $certs/server.key --trusted-ca-file $certs/ca.pem --client-cert-auth" > "$dir/tls"
  launch_etcd "$name"
}

# Test users of start_etcd_auth: coord-app may read and write keys starting with
# `coordtest-` (the suite's namespaces), coord-other only keys starting with `other/`.
ETCD_AUTH_ROOT_PASSWORD=coord-root-pw-7d1e
ETCD_AUTH_APP_PASSWORD=coord-app-pw-5f3a
ETCD_AUTH_OTHER_PASSWORD=coord-other-pw-91c4

# start_etcd_auth NAME CLIENT_PORT PEER_PORT : a single-node etcd with authentication on
# (users above; simple tokens that expire after 1 s unused, so long holds exercise the
# client's token refresh).
start_etcd_auth() {
  local name=$1 port=$2 peer=$3 dir="$COORD_SERVERS_DIR/$1"
  apt_install etcd-server etcd-client
  rm -rf "$dir" && mkdir -p "$dir"
  echo "etcd $port $peer" > "$dir/endpoint"
  echo "--auth-token simple --auth-token-ttl 1" > "$dir/extra"
  launch_etcd "$name"
  local ctl=(env ETCDCTL_API=3 etcdctl --endpoints "127.0.0.1:$port" --dial-timeout 2s)
  {
    "${ctl[@]}" user add "root:$ETCD_AUTH_ROOT_PASSWORD" --interactive=false
    "${ctl[@]}" user grant-role root root
    "${ctl[@]}" role add coord-app
    "${ctl[@]}" role grant-permission coord-app --prefix=true readwrite coordtest-
    "${ctl[@]}" user add "coord-app:$ETCD_AUTH_APP_PASSWORD" --interactive=false
    "${ctl[@]}" user grant-role coord-app coord-app
    "${ctl[@]}" role add coord-other
    "${ctl[@]}" role grant-permission coord-other --prefix=true readwrite other/
    "${ctl[@]}" user add "coord-other:$ETCD_AUTH_OTHER_PASSWORD" --interactive=false
    "${ctl[@]}" user grant-role coord-other coord-other
    "${ctl[@]}" auth enable
  } >>"$dir/setup.log" 2>&1 || { log "could not set up etcd auth; log: $dir/setup.log"; cat "$dir/setup.log" >&2; return 1; }
}
