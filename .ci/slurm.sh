#!/usr/bin/env bash
# Single-node SLURM on 127.0.0.1 for the dask-jobqueue test.
#   .ci/slurm.sh start   install (if needed), configure and start munged, slurmctld, slurmd
#   .ci/slurm.sh stop    stop them by PID
set -euo pipefail
STATE=/tmp/lsd-dask-slurm
CONF=/etc/slurm/slurm.conf

start() {
  if ! command -v slurmctld >/dev/null 2>&1; then
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -q
    apt-get install -y -q slurmctld slurmd slurm-client munge
  fi
  mkdir -p "$STATE" /etc/slurm /var/spool/slurmctld /var/spool/slurmd /var/log/slurm /run/munge
  local host cpus mem
  host=$(hostname -s)
  cpus=$(nproc)
  mem=$(( $(awk '/MemTotal/ {print $2}' /proc/meminfo) / 1024 - 1024 ))
  cat > "$CONF" <<CONF
ClusterName=lsdci
SlurmctldHost=${host}(127.0.0.1)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
MpiDefault=none
ReturnToService=2
SlurmctldPidFile=${STATE}/slurmctld.pid
SlurmdPidFile=${STATE}/slurmd.pid
StateSaveLocation=/var/spool/slurmctld
SlurmdSpoolDir=/var/spool/slurmd
SlurmctldLogFile=/var/log/slurm/slurmctld.log
SlurmdLogFile=/var/log/slurm/slurmd.log
SchedulerType=sched/backfill
NodeName=${host} NodeAddr=127.0.0.1 CPUs=${cpus} RealMemory=${mem} State=UNKNOWN
PartitionName=debug Nodes=${host} Default=YES MaxTime=INFINITE State=UP
CONF
  # munge: key, runtime dir owned by the munge user, daemon as that user
  if [ ! -s /etc/munge/munge.key ]; then
    dd if=/dev/urandom bs=1 count=1024 of=/etc/munge/munge.key 2>/dev/null
  fi
  chown munge:munge /etc/munge/munge.key /run/munge
  chmod 400 /etc/munge/munge.key
  chmod 755 /run/munge
  if ! pgrep -x munged >/dev/null; then
    su -s /bin/sh munge -c "/usr/sbin/munged --pid-file=/run/munge/munged.pid"
    cp /run/munge/munged.pid "$STATE/munged.pid" 2>/dev/null || pgrep -x munged > "$STATE/munged.pid"
  fi
  # a second slurmctld would kill the first: start only if none answers
  if ! scontrol ping 2>/dev/null | grep -q UP; then
    slurmctld
  fi
  if ! pgrep -x slurmd >/dev/null; then
    slurmd
  fi
  for _ in $(seq 1 60); do
    if sinfo -h -o %T 2>/dev/null | grep -qE '^(idle|mixed|allocated)'; then
      echo "SLURM up: $(sinfo -h -o '%P %D %T %c %m')"
      return 0
    fi
    sleep 1
  done
  echo "SLURM did not come up" >&2
  tail -n 30 /var/log/slurm/slurmctld.log /var/log/slurm/slurmd.log >&2 || true
  return 1
}

stop() {
  for name in slurmd slurmctld munged; do
    if [ -s "$STATE/$name.pid" ]; then
      kill "$(cat "$STATE/$name.pid")" 2>/dev/null || true
    fi
  done
}

"${1:-start}"
