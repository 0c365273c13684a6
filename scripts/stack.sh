#!/usr/bin/env bash
# The local stack without Docker: Debian PostgreSQL and a real Apache Kafka 4.x broker (KRaft,
# single node) on 127.0.0.1. Idempotent: `up` starts what is not running, `down` stops it.
#
#   scripts/stack.sh up | down | status | env
#
# PostgreSQL: postgresql://bookrecon:bookrecon@127.0.0.1:5432/bookrecon (role may create databases).
# Kafka:      127.0.0.1:19092 (controller 19093). Jars resolved with mvn into .stack/kafka/libs.
# PgBouncer:  Debian's package installed, not started (the tests start their own).
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
STACK="$ROOT/.stack"
KDIR="$STACK/kafka"
SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
as_pg() { if [ "$(id -u)" -eq 0 ]; then runuser -u postgres -- "$@"; else sudo -u postgres "$@"; fi; }
PG_URL="postgres://bookrecon:bookrecon@127.0.0.1:5432/bookrecon?sslmode=disable"
KAFKA_ADDR="127.0.0.1:19092"

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
  if [ ! -f "$KDIR/libs/.complete" ]; then
    log "resolving Kafka jars with mvn (cached in $KDIR/libs)"
    rm -rf "$KDIR/libs"
    mvn -q -B -f "$ROOT/scripts/kafka/pom.xml" dependency:copy-dependencies \
      -DoutputDirectory="$KDIR/libs" -DincludeScope=runtime
    touch "$KDIR/libs/.complete"
  fi
}

kafka_java() {
  java -Xms256m -Xmx1g -XX:+UseG1GC -Djava.awt.headless=true \
    -Dlog4j2.configurationFile="$ROOT/scripts/kafka/log4j2.properties" \
    -cp "$KDIR/libs/*" "$@"
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
    -cp "$KDIR/libs/*" kafka.Kafka "$KDIR/server.properties" >"$KDIR/broker.log" 2>&1 &
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

case "${1:-}" in
  up) pg_up; kafka_up ;;
  down) kafka_down; log "kafka stopped (postgresql left to the system)" ;;
  reset) kafka_down; rm -rf "$KDIR/data"; log "kafka data removed" ;;
  status)
    if kafka_running; then echo "kafka: running ($KAFKA_ADDR, pid $(cat "$KDIR/broker.pid"))"
    elif wait_port 127.0.0.1 19092 1; then echo "kafka: $KAFKA_ADDR served by a broker this checkout did not start"
    else echo "kafka: stopped"; fi
    pg_lsclusters 2>/dev/null || echo "postgresql: not installed" ;;
  env)
    echo "export BOOKRECON_DATABASE_URL='$PG_URL'"
    echo "export BOOKRECON_KAFKA_BROKERS='$KAFKA_ADDR'" ;;
  *) echo "usage: $0 up|down|reset|status|env" >&2; exit 2 ;;
esac
