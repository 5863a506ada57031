#!/usr/bin/env bash
# Start a one-node Slurm cluster (munged, slurmctld, slurmd) for the tests. Idempotent: does nothing when
# it is already up. Needs root and Debian's slurm-wlm + munge (scripts/install_system_deps.sh installs them;
# this script installs them itself if they are missing).
#
# Everything lives under $CURATION_SLURM_DIR (default /tmp/curation-slurm); clients find the cluster with
#   export SLURM_CONF=$CURATION_SLURM_DIR/slurm.conf
# Stop it with scripts/slurm_down.sh.
set -euo pipefail

DIR="${CURATION_SLURM_DIR:-/tmp/curation-slurm}"
HOST="$(hostname -s)"
CONF="$DIR/slurm.conf"
export SLURM_CONF="$CONF"

if ! command -v sbatch >/dev/null || ! command -v munged >/dev/null || ! command -v slurmctld >/dev/null; then
  for i in 1 2 3 4 5 6; do
    if DEBIAN_FRONTEND=noninteractive apt-get install -y -q slurm-wlm munge >/dev/null 2>&1; then break; fi
    [ "$i" = 1 ] && apt-get update -q >/dev/null 2>&1 || true
    sleep 5
  done
fi

alive() { [ -s "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null; }

mkdir -p "$DIR"/{state,spool,run,log}
# A running controller keeps its configuration: rewrite it only when starting afresh.
if ! alive "$DIR/run/slurmctld.pid" || [ ! -s "$CONF" ]; then
cat > "$CONF.tmp" <<CONF
ClusterName=curationtest
SlurmctldHost=$HOST(127.0.0.1)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
MpiDefault=none
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SwitchType=switch/none
ReturnToService=2
StateSaveLocation=$DIR/state
SlurmdSpoolDir=$DIR/spool
SlurmctldPidFile=$DIR/run/slurmctld.pid
SlurmdPidFile=$DIR/run/slurmd.pid
SlurmctldLogFile=$DIR/log/slurmctld.log
SlurmdLogFile=$DIR/log/slurmd.log
SlurmctldPort=${CURATION_SLURMCTLD_PORT:-6817}
SlurmdPort=${CURATION_SLURMD_PORT:-6818}
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/filetxt
JobCompLoc=$DIR/log/jobcomp.txt
MaxArraySize=${CURATION_SLURM_MAX_ARRAY_SIZE:-1001}
# How long slurmctld keeps a finished job for scontrol: a DAG test on a loaded 2-core machine can take
# longer than the default 300 s between its first job and the assertion that reads it back.
MinJobAge=1800
KillWait=5
# Use the configured CPUs even on a smaller machine (the tests need 2 slots), and loopback addresses
# so that the host name need not resolve.
SlurmdParameters=config_overrides
NodeName=$HOST NodeAddr=127.0.0.1 CPUs=${CURATION_SLURM_CPUS:-2} State=UNKNOWN
PartitionName=debug Nodes=$HOST Default=YES MaxTime=INFINITE State=UP
CONF
mv "$CONF.tmp" "$CONF"
fi

# munge: the key comes with the package; create one if a minimal image lacks it.
if ! pgrep -x munged >/dev/null; then
  mkdir -p /run/munge /var/log/munge /var/lib/munge
  chown munge:munge /run/munge /var/log/munge /var/lib/munge 2>/dev/null || true
  if [ ! -s /etc/munge/munge.key ]; then
    mkdir -p /etc/munge
    dd if=/dev/urandom bs=1 count=1024 of=/etc/munge/munge.key 2>/dev/null
    chown munge:munge /etc/munge/munge.key; chmod 400 /etc/munge/munge.key
  fi
  runuser -u munge -- /usr/sbin/munged
  touch "$DIR/run/munged.ours"
fi

alive "$DIR/run/slurmctld.pid" || /usr/sbin/slurmctld -f "$CONF"
alive "$DIR/run/slurmd.pid" || /usr/sbin/slurmd -f "$CONF"

# Wait until the node takes jobs (slurmd registers within a few seconds).
for _ in $(seq 1 120); do
  state="$(sinfo -h -N -o '%t' 2>/dev/null | head -1 || true)"
  case "$state" in
    idle|mix|alloc|comp) echo "slurm up: $CONF (node $HOST $state)"; exit 0 ;;
    down*|drain*|fail*) scontrol update nodename="$HOST" state=resume >/dev/null 2>&1 || true ;;
  esac
  sleep 0.5
done
echo "slurm did not come up; see $DIR/log" >&2
tail -20 "$DIR/log/slurmctld.log" "$DIR/log/slurmd.log" >&2 || true
exit 1
