# Shared helpers for coord's server scripts: install Debian packages when missing, pick
# free loopback ports, start ZooKeeper and etcd with PID files, stop them by PID.
# Source this file; it defines functions only.

COORD_SERVERS_DIR="${COORD_SERVERS_DIR:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/.coord-servers}"

log() { printf '[coord-servers] %s\n' "$*" >&2; }

# Whole gigabytes free on the file system holding the current directory.
free_disk_gb() { df -Pk . | awk 'NR == 2 { print int($4 / 1048576) }'; }

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

# ensure_testkit : builds the coord-testkit command (it starts servers and clusters and
# injects member faults; see coord-testkit/src/bin) and exports its path.
ensure_testkit() {
  [ -n "${COORD_TESTKIT:-}" ] && [ -x "$COORD_TESTKIT" ] && return 0
  local root
  root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
  cargo build -q --manifest-path "$root/Cargo.toml" -p coord-testkit --bin coord-testkit >&2
  export COORD_TESTKIT="${CARGO_TARGET_DIR:-$root/target}/debug/coord-testkit"
}

# testkit ARGS... : runs the coord-testkit command.
testkit() {
  ensure_testkit
  "$COORD_TESTKIT" "$@"
}

# start_server KIND NAME MEMBERS [coord-testkit start options...] : a ZooKeeper (zk) or
# etcd server (MEMBERS 1) or cluster on loopback in $COORD_SERVERS_DIR/NAME, from the
# Debian packages (installed if missing); prints its members' host:port,…; or a
# PostgreSQL server (postgres, MEMBERS 1), printing its URL. ZooKeeper
# runs with 100 ms ticks (session timeouts of 200 ms .. 2 s are allowed); etcd with short
# heartbeats (1-2 s leases work); both without fsync (tests only). Stop it with
# stop_server NAME; fault its members with `testkit member $COORD_SERVERS_DIR/NAME I …`.
start_server() {
  local kind=$1 name=$2 members=$3
  shift 3
  case "$kind" in
    zk) apt_install zookeeper libnetty-java ;;
    etcd) apt_install etcd-server etcd-client ;;
    postgres) apt_install postgresql ;;
  esac
  mkdir -p "$COORD_SERVERS_DIR"
  ensure_testkit
  testkit start "$kind" --members "$members" --dir "$COORD_SERVERS_DIR/$name" "$@"
}

# stop_server NAME : kills the members of the server or cluster NAME, if any.
stop_server() {
  local dir="$COORD_SERVERS_DIR/$1"
  [ -f "$dir/cluster.json" ] || return 0
  testkit stop "$dir" || true
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

# Test users of start_etcd_auth: coord-app may read and write keys starting with
# `coordtest-` (the suite's namespaces), coord-other only keys starting with `other/`.
ETCD_AUTH_ROOT_PASSWORD=coord-root-pw-7d1e
ETCD_AUTH_APP_PASSWORD=coord-app-pw-5f3a
ETCD_AUTH_OTHER_PASSWORD=coord-other-pw-91c4

# start_etcd_auth NAME : a single-node etcd with authentication on (users above; simple
# tokens that expire after 1 s unused, so long holds exercise the client's token
# refresh); prints its host:port.
start_etcd_auth() {
  local name=$1 dir="$COORD_SERVERS_DIR/$1" endpoint
  endpoint=$(start_server etcd "$name" 1 --extra=--auth-token --extra=simple --extra=--auth-token-ttl --extra=1)
  local ctl=(env ETCDCTL_API=3 etcdctl --endpoints "$endpoint" --dial-timeout 2s)
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
  echo "$endpoint"
}
