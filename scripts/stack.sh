#!/usr/bin/env bash
# The local stack without Docker: Debian PostgreSQL and a real Apache Kafka 4.x broker (KRaft,
# single node) on 127.0.0.1. Idempotent: `up` starts what is not running, `down` stops it.
#
#   scripts/stack.sh up | down | reset | status | env | jars
#   scripts/stack.sh redis up | down | status
#   scripts/stack.sh cluster up | down | reset | status | env | kill N | start N
#
# PostgreSQL: postgresql://bookrecon:bookrecon@127.0.0.1:5432/bookrecon (role may create databases).
# Kafka:      127.0.0.1:19092 (controller 19093). Jars resolved with mvn into .stack/kafka/libs, or
#             taken from STACK_KAFKA_LIBS (a directory of the same jars, e.g. another checkout's);
#             `jars` resolves them alone, with a progress line every STACK_PROGRESS_EVERY s (10).
# Cluster:    what production runs, for the fault tests: three combined broker+controller KRaft
#             nodes, brokers 127.0.0.1:29092-29094, controllers 29192-29194, replication factor 3
#             and min.insync.replicas=2 by default; data, logs and each node's pid under
#             .stack/kafka-cluster/nodeN. `kill N` sends SIGKILL to node N (1-3), `start N`
#             starts it again on its data. Each JVM has at most 512 MiB of heap.
# PgBouncer:  Debian's package installed, not started (the tests start their own).
# Redis:      Debian's redis-server on 127.0.0.1:6379 (REDIS_PORT overrides), no persistence: the
#             optional in-flight limiter of the idempotency package (BOOKRECON_REDIS_URL). Its pid,
#             log and working directory under .stack/redis. `redis up|down|status` alone.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
STACK="$ROOT/.stack"
KDIR="$STACK/kafka"
LIBS="${STACK_KAFKA_LIBS:-$KDIR/libs}"
CDIR="$STACK/kafka-cluster"
CLUSTER_ADDRS="127.0.0.1:29092,127.0.0.1:29093,127.0.0.1:29094"
SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
as_pg() { if [ "$(id -u)" -eq 0 ]; then runuser -u postgres -- "$@"; else sudo -u postgres "$@"; fi; }
PG_URL="postgres://bookrecon:bookrecon@127.0.0.1:5432/bookrecon?sslmode=disable"
KAFKA_ADDR="127.0.0.1:19092"
RDIR="$STACK/redis"
REDIS_PORT="${REDIS_PORT:-6379}"
REDIS_URL="redis://127.0.0.1:$REDIS_PORT/0"

log() { printf 'stack: %s\n' "$*" >&2; }

wait_port() { # host port seconds
  local i
  for ((i = 0; i < $3 * 5; i++)); do
    if (exec 3<>"/dev/tcp/$1/$2") 2>/dev/null; then return 0; fi
    sleep 0.2
  done
  return 1
}

pg_up() {
  if ! command -v pg_ctlcluster >/dev/null 2>&1 || ! ls /usr/lib/postgresql/*/bin/postgres >/dev/null 2>&1; then
    log "installing postgresql"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq postgresql >/dev/null
  fi
  # PgBouncer: only the binary; the transaction-pooler tests (pgtest.Bouncer) run their own.
  if ! command -v pgbouncer >/dev/null 2>&1 && [ ! -x /usr/sbin/pgbouncer ]; then
    log "installing pgbouncer"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq pgbouncer >/dev/null
  fi
  local ver; ver="$(ls /usr/lib/postgresql | sort -V | tail -1)"
  if ! pg_lsclusters -h | awk '{print $1" "$2}' | grep -q "^$ver main$"; then
    $SUDO pg_createcluster "$ver" main >/dev/null
  fi
  if ! pg_lsclusters -h | grep -q "^$ver main .* online"; then
    log "starting postgresql $ver"
    $SUDO pg_ctlcluster "$ver" main start
  fi
  local i
  for ((i = 0; i < 150; i++)); do
    if as_pg psql -qAtc 'select 1' >/dev/null 2>&1; then break; fi
    sleep 0.2
  done
  as_pg psql -qAt -v ON_ERROR_STOP=1 <<'SQL' >/dev/null
SELECT 'x' FROM pg_roles WHERE rolname = 'bookrecon';
DO $$ BEGIN
  IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'bookrecon') THEN
    CREATE ROLE bookrecon LOGIN SUPERUSER PASSWORD 'bookrecon';
  END IF;
END $$;
SQL
  if ! as_pg psql -qAtc "SELECT 1 FROM pg_database WHERE datname='bookrecon'" | grep -q 1; then
    as_pg createdb -O bookrecon bookrecon
  fi
  # Per-test databases (pgtestdb) need connections; apply once, restart only when it changed.
  if [ "$(as_pg psql -qAtc 'show max_connections')" != "300" ]; then
    as_pg psql -qAtc "ALTER SYSTEM SET max_connections = 300" >/dev/null
    $SUDO pg_ctlcluster "$ver" main restart
  fi
  for ((i = 0; i < 150; i++)); do
    if PGPASSWORD=bookrecon psql -h 127.0.0.1 -U bookrecon -d bookrecon -qAtc 'select 1' >/dev/null 2>&1; then
      log "postgresql ready: $PG_URL"; return 0
    fi
    sleep 0.2
  done
  log "postgresql did not become ready"; return 1
}

kafka_libs() {
  if [ -n "${STACK_KAFKA_LIBS:-}" ]; then
    ls "$LIBS"/kafka_2.13-*.jar >/dev/null 2>&1 || { log "STACK_KAFKA_LIBS=$LIBS holds no Kafka jars"; return 1; }
    return 0
  fi
  if [ ! -f "$KDIR/libs/.complete" ]; then
    log "resolving the Kafka broker's jars with mvn into $KDIR/libs (first run only: about 50 jars, a minute or two)"
    rm -rf "$KDIR/libs"
    # Batch mode without colours (Maven 3.8 still writes ANSI resets in -q mode otherwise); a
    # progress line every 10 s while it runs.
    (MAVEN_OPTS="${MAVEN_OPTS:-} -Djansi.force=false -Dstyle.color=never" \
      mvn -q -B -Dstyle.color=never -f "$ROOT/scripts/kafka/pom.xml" dependency:copy-dependencies \
      -DoutputDirectory="$KDIR/libs" -DincludeScope=runtime 2>&1 | sed -e 's/\x1b\[[0-9;]*m//g' >&2) &
    local pid=$! n
    while kill -0 "$pid" 2>/dev/null; do
      sleep "${STACK_PROGRESS_EVERY:-10}"
      kill -0 "$pid" 2>/dev/null || break
      # mvn creates libs/ only when it copies the first jar: until then find fails, which
      # pipefail and set -e would turn into the script's death (mvn left running alone).
      n=$( (find "$KDIR/libs" -name '*.jar' 2>/dev/null || true) | wc -l)
      log "still resolving Kafka jars: $n copied so far"
    done
    wait "$pid" || { log "mvn failed: see its output above"; return 1; }
    log "Kafka jars ready: $(find "$KDIR/libs" -name '*.jar' | wc -l) jars"
    touch "$KDIR/libs/.complete"
  fi
}

kafka_java() {
  java -Xms256m -Xmx1g -XX:+UseG1GC -Djava.awt.headless=true \
    -Dlog4j2.configurationFile="$ROOT/scripts/kafka/log4j2.properties" \
    -cp "$LIBS/*" "$@"
}

kafka_running() {
  [ -f "$KDIR/broker.pid" ] && kill -0 "$(cat "$KDIR/broker.pid")" 2>/dev/null
}

kafka_up() {
  command -v java >/dev/null || { log "java not found"; return 1; }
  kafka_libs
  mkdir -p "$KDIR"
  if kafka_running && wait_port 127.0.0.1 19092 1; then log "kafka already running: $KAFKA_ADDR"; return 0; fi
  if wait_port 127.0.0.1 19092 1; then
    log "kafka: $KAFKA_ADDR is already served by a broker this checkout did not start (another checkout's?); using it"
    return 0
  fi
  sed "s#^log.dirs=.*##" "$ROOT/scripts/kafka/server.properties" >"$KDIR/server.properties"
  echo "log.dirs=$KDIR/data" >>"$KDIR/server.properties"
  if [ ! -f "$KDIR/data/meta.properties" ]; then
    log "formatting KRaft storage"
    local id; id="$(kafka_java kafka.tools.StorageTool random-uuid | tail -1)"
    kafka_java kafka.tools.StorageTool format -t "$id" -c "$KDIR/server.properties" >/dev/null
  fi
  log "starting kafka broker"
  nohup java -Xms256m -Xmx1g -XX:+UseG1GC -Djava.awt.headless=true \
    -Dlog4j2.configurationFile="$ROOT/scripts/kafka/log4j2.properties" \
    -cp "$LIBS/*" kafka.Kafka "$KDIR/server.properties" >"$KDIR/broker.log" 2>&1 &
  echo $! >"$KDIR/broker.pid"
  if ! wait_port 127.0.0.1 19092 90; then
    log "kafka did not open $KAFKA_ADDR; last log lines:"; tail -30 "$KDIR/broker.log" >&2; return 1
  fi
  log "kafka ready: $KAFKA_ADDR"
}

kafka_down() {
  if kafka_running; then
    local pid; pid="$(cat "$KDIR/broker.pid")"
    kill "$pid" 2>/dev/null || true
    for ((i = 0; i < 150; i++)); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
    kill -9 "$pid" 2>/dev/null || true
  fi
  rm -f "$KDIR/broker.pid"
}

# --- Redis (the idempotency package's optional in-flight limiter) ------------------------------

redis_running() { [ -f "$RDIR/redis.pid" ] && kill -0 "$(cat "$RDIR/redis.pid")" 2>/dev/null; }

redis_up() {
  if ! command -v redis-server >/dev/null 2>&1; then
    log "installing redis-server"
    $SUDO apt-get update -qq
    # Where systemd runs, the package starts its own service on 6379; that one is then used.
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq redis-server >/dev/null
  fi
  if redis_running && wait_port 127.0.0.1 "$REDIS_PORT" 1; then log "redis already running: $REDIS_URL"; return 0; fi
  if wait_port 127.0.0.1 "$REDIS_PORT" 1; then
    log "redis: 127.0.0.1:$REDIS_PORT is already served by a server this checkout did not start (the system's, or another checkout's); using it"
    return 0
  fi
  mkdir -p "$RDIR"
  log "starting redis"
  redis-server --bind 127.0.0.1 --port "$REDIS_PORT" --save "" --appendonly no --daemonize yes \
    --pidfile "$RDIR/redis.pid" --logfile "$RDIR/redis.log" --dir "$RDIR"
  if ! wait_port 127.0.0.1 "$REDIS_PORT" 15; then
    log "redis did not open 127.0.0.1:$REDIS_PORT; last log lines:"; tail -20 "$RDIR/redis.log" >&2; return 1
  fi
  log "redis ready: $REDIS_URL"
}

redis_down() {
  if redis_running; then
    local pid i; pid="$(cat "$RDIR/redis.pid")"
    kill "$pid" 2>/dev/null || true
    for ((i = 0; i < 50; i++)); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
    kill -9 "$pid" 2>/dev/null || true
  fi
  rm -f "$RDIR/redis.pid"
}

redis_status() {
  if redis_running; then echo "redis: running ($REDIS_URL, pid $(cat "$RDIR/redis.pid"))"
  elif wait_port 127.0.0.1 "$REDIS_PORT" 1; then echo "redis: 127.0.0.1:$REDIS_PORT served by a server this checkout did not start"
  else echo "redis: stopped"; fi
}

# --- the three-node cluster (fault tests) -----------------------------------------------------

node_check() { [[ "${1:-}" =~ ^[123]$ ]] || { log "node must be 1, 2 or 3, not '${1:-}'"; exit 2; }; }
node_port() { echo $((29091 + $1)); }
node_running() { [ -f "$CDIR/node$1/pid" ] && kill -0 "$(cat "$CDIR/node$1/pid")" 2>/dev/null; }

node_config() { # n: the single broker's settings with this node's ids, ports, replication and data
  local n=$1 d="$CDIR/node$1"
  mkdir -p "$d"
  sed -e '/^#/d' -e '/^node.id=/d' -e '/^controller.quorum.voters=/d' -e '/^listeners=/d' -e '/^advertised.listeners=/d' \
    -e '/replication.factor=/d' -e '/min.isr=/d' -e '/^log.dirs=/d' "$ROOT/scripts/kafka/server.properties" >"$d/server.properties"
  cat >>"$d/server.properties" <<EOF
node.id=$n
controller.quorum.voters=1@127.0.0.1:29192,2@127.0.0.1:29193,3@127.0.0.1:29194
listeners=PLAINTEXT://127.0.0.1:$((29091 + n)),CONTROLLER://127.0.0.1:$((29191 + n))
advertised.listeners=PLAINTEXT://127.0.0.1:$((29091 + n))
default.replication.factor=3
min.insync.replicas=2
offsets.topic.replication.factor=3
transaction.state.log.replication.factor=3
transaction.state.log.min.isr=2
share.coordinator.state.topic.replication.factor=3
share.coordinator.state.topic.min.isr=2
log.dirs=$d/data
EOF
}

node_start() { # n: start node n on its data (formatted by cluster_up)
  local n=$1 d="$CDIR/node$1"
  if node_running "$n"; then log "cluster node $n already running (pid $(cat "$d/pid"))"; return 0; fi
  if wait_port 127.0.0.1 "$(node_port "$n")" 1; then
    log "cluster node $n: 127.0.0.1:$(node_port "$n") is served by a process this checkout did not start"; return 1
  fi
  nohup java -Xms128m -Xmx512m -XX:+UseG1GC -Djava.awt.headless=true \
    -Dlog4j2.configurationFile="$ROOT/scripts/kafka/log4j2.properties" \
    -cp "$LIBS/*" kafka.Kafka "$d/server.properties" >>"$d/broker.log" 2>&1 &
  echo $! >"$d/pid"
  log "cluster node $n started (pid $!)"
}

node_wait() { # n
  if ! wait_port 127.0.0.1 "$(node_port "$1")" 90; then
    log "cluster node $1 did not open 127.0.0.1:$(node_port "$1"); last log lines:"; tail -30 "$CDIR/node$1/broker.log" >&2; return 1
  fi
}

node_kill() { # n: SIGKILL, as a machine that dies
  local n=$1 pid i
  node_running "$n" || { log "cluster node $n is not running"; return 1; }
  pid="$(cat "$CDIR/node$n/pid")"
  kill -9 "$pid"
  for ((i = 0; i < 150; i++)); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  rm -f "$CDIR/node$n/pid"
  log "cluster node $n killed (SIGKILL, pid $pid)"
}

node_stop() { # n: orderly stop, SIGKILL after 30s
  local n=$1 pid i
  node_running "$n" || { rm -f "$CDIR/node$n/pid"; return 0; }
  pid="$(cat "$CDIR/node$n/pid")"
  kill "$pid" 2>/dev/null || true
  for ((i = 0; i < 150; i++)); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
  kill -9 "$pid" 2>/dev/null || true
  rm -f "$CDIR/node$n/pid"
}

cluster_id() { # prints the cluster's id, made on first use and kept in $CDIR/cluster.id
  # A Kafka Uuid: 16 random bytes, base64url without padding. Like Kafka's own Uuid.randomUuid,
  # never one that starts with '-': kafka-storage format reads "-t -…" as a missing argument, and
  # every node's format fails (1 id in 64). A kept id that starts with '-' formatted no node, so it
  # is replaced.
  local id
  id="$(cat "$CDIR/cluster.id" 2>/dev/null || true)"
  while [ -z "$id" ] || [ "${id#-}" != "$id" ]; do
    id="$(head -c16 /dev/urandom | base64 | tr '+/' '-_' | tr -d '=\n')"
  done
  mkdir -p "$CDIR"
  printf '%s' "$id" >"$CDIR/cluster.id"
  echo "$id"
}

cluster_up() {
  command -v java >/dev/null || { log "java not found"; return 1; }
  kafka_libs
  mkdir -p "$CDIR"
  local n
  for n in 1 2 3; do node_config "$n"; done
  local id; id="$(cluster_id)"
  for n in 1 2 3; do
    if [ ! -f "$CDIR/node$n/data/meta.properties" ]; then
      log "formatting KRaft storage of cluster node $n"
      java -Xmx128m -Dlog4j2.configurationFile="$ROOT/scripts/kafka/log4j2.properties" -cp "$LIBS/*" \
        kafka.tools.StorageTool format -t "$id" -c "$CDIR/node$n/server.properties" >/dev/null &
    fi
  done
  wait
  for n in 1 2 3; do node_start "$n"; done
  for n in 1 2 3; do node_wait "$n"; done
  log "cluster ready: $CLUSTER_ADDRS"
}

cluster() {
  local n
  case "${1:-}" in
    up) cluster_up ;;
    down) for n in 1 2 3; do node_stop "$n" & done; wait; log "cluster stopped" ;;
    reset) for n in 1 2 3; do node_stop "$n" & done; wait; rm -rf "$CDIR"; log "cluster data removed" ;;
    kill) node_check "${2:-}"; node_kill "$2" ;;
    start) node_check "${2:-}"; kafka_libs; node_config "$2"; node_start "$2"; node_wait "$2" ;;
    status)
      for n in 1 2 3; do
        if node_running "$n"; then echo "node $n: running (127.0.0.1:$(node_port "$n"), pid $(cat "$CDIR/node$n/pid"))"
        else echo "node $n: stopped"; fi
      done ;;
    env) echo "export BOOKRECON_KAFKA_BROKERS='$CLUSTER_ADDRS'" ;;
    id) cluster_id ;;
    *) echo "usage: $0 cluster up|down|reset|status|env|id|kill N|start N" >&2; exit 2 ;;
  esac
}

case "${1:-}" in
  cluster) shift; cluster "$@" ;;
  redis)
    case "${2:-}" in
      up) redis_up ;;
      down) redis_down; log "redis stopped" ;;
      status) redis_status ;;
      *) echo "usage: $0 redis up|down|status" >&2; exit 2 ;;
    esac ;;
  up) pg_up; kafka_up; redis_up ;;
  jars) kafka_libs ;;
  down) kafka_down; redis_down; log "kafka and redis stopped (postgresql left to the system)" ;;
  reset) kafka_down; rm -rf "$KDIR/data"; log "kafka data removed" ;;
  status)
    if kafka_running; then echo "kafka: running ($KAFKA_ADDR, pid $(cat "$KDIR/broker.pid"))"
    elif wait_port 127.0.0.1 19092 1; then echo "kafka: $KAFKA_ADDR served by a broker this checkout did not start"
    else echo "kafka: stopped"; fi
    redis_status
    pg_lsclusters 2>/dev/null || echo "postgresql: not installed" ;;
  env)
    echo "export BOOKRECON_DATABASE_URL='$PG_URL'"
    echo "export BOOKRECON_KAFKA_BROKERS='$KAFKA_ADDR'"
    echo "export BOOKRECON_REDIS_URL='$REDIS_URL'" ;;
  *) echo "usage: $0 up|down|reset|status|env|jars | redis up|down|status | cluster up|down|reset|status|env|id|kill N|start N" >&2; exit 2 ;;
esac
