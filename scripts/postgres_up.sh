#!/usr/bin/env bash
# Start a throwaway PostgreSQL (Debian's packages) for tests: postgres_up.sh DATA_DIR PORT [DB]
# Idempotent: installs the package only if missing, initialises DATA_DIR once, starts the server if it
# is not running, creates DB. Prints the SQLAlchemy URL. Stop with: postgres_down.sh DATA_DIR
set -euo pipefail
DATA_DIR=${1:?usage: postgres_up.sh DATA_DIR PORT [DB]}
PORT=${2:?usage: postgres_up.sh DATA_DIR PORT [DB]}
DB=${3:-airflow}

if ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; then
  export DEBIAN_FRONTEND=noninteractive
  for i in 1 2 3 4 5 6 7 8 9 10; do
    apt-get install -y -q postgresql >/dev/null && break
    sleep 6  # the dpkg lock may be held by another installer
  done
fi
BIN=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -1)

# PostgreSQL refuses to run as root: run it as the postgres user (or the caller if not root).
RUN=()
if [ "$(id -u)" = 0 ]; then RUN=(runuser -u postgres --); fi
mkdir -p "$DATA_DIR"
if [ "$(id -u)" = 0 ]; then chown postgres:postgres "$DATA_DIR"; chmod 700 "$DATA_DIR"; fi
SOCK_DIR="$DATA_DIR/sock"
if [ ! -f "$DATA_DIR/PG_VERSION" ]; then
  "${RUN[@]}" "$BIN/initdb" -D "$DATA_DIR" -U postgres --auth=trust -E UTF8 >/dev/null
fi
"${RUN[@]}" mkdir -p "$SOCK_DIR"
if ! "${RUN[@]}" "$BIN/pg_ctl" -D "$DATA_DIR" status >/dev/null 2>&1; then
  "${RUN[@]}" "$BIN/pg_ctl" -D "$DATA_DIR" -l "$DATA_DIR/server.log" -w -t 60 \
    -o "-p $PORT -k $SOCK_DIR -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=200" start >/dev/null
fi
if ! "${RUN[@]}" "$BIN/psql" -h 127.0.0.1 -p "$PORT" -U postgres -tAc "SELECT 1 FROM pg_database WHERE datname='$DB'" | grep -q 1; then
  "${RUN[@]}" "$BIN/createdb" -h 127.0.0.1 -p "$PORT" -U postgres "$DB"
fi
echo "postgresql+psycopg2://postgres@127.0.0.1:$PORT/$DB"
