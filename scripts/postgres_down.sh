#!/usr/bin/env bash
# Stop the PostgreSQL started by postgres_up.sh: postgres_down.sh DATA_DIR
set -euo pipefail
DATA_DIR=${1:?usage: postgres_down.sh DATA_DIR}
BIN=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -1)
RUN=()
if [ "$(id -u)" = 0 ]; then RUN=(runuser -u postgres --); fi
if [ -f "$DATA_DIR/postmaster.pid" ]; then
  "${RUN[@]}" "$BIN/pg_ctl" -D "$DATA_DIR" -m fast -w stop >/dev/null || true
fi
