#!/usr/bin/env bash
# Stop the test Slurm cluster started by scripts/slurm_up.sh (by pid file; munged only if slurm_up started it).
set -uo pipefail
DIR="${CURATION_SLURM_DIR:-/tmp/curation-slurm}"

stop() {  # stop <pidfile>: TERM, wait, then KILL
  local f="$1" pid
  [ -s "$f" ] || return 0
  pid="$(cat "$f")"
  kill "$pid" 2>/dev/null || { rm -f "$f"; return 0; }
  for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  kill -9 "$pid" 2>/dev/null || true
  rm -f "$f"
}

export SLURM_CONF="$DIR/slurm.conf"
[ -f "$SLURM_CONF" ] && scancel --full --quiet -u "$(id -un)" 2>/dev/null || true
stop "$DIR/run/slurmd.pid"
stop "$DIR/run/slurmctld.pid"
if [ -f "$DIR/run/munged.ours" ]; then
  stop /run/munge/munged.pid
  rm -f "$DIR/run/munged.ours"
fi
# Job state of this throwaway cluster: start clean next time.
rm -rf "$DIR/state" "$DIR/spool"
echo "slurm down"
