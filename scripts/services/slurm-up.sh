#!/usr/bin/env bash
# slurm-up.sh - a private single-node Slurm cluster for the test suite: munged, slurmctld and
# slurmd, each in the foreground under setsid (no systemd), PIDs written down, all state in
# one directory (own munge key and socket, own slurm.conf, spool, logs, a shared jobs dir).
# /etc/slurm and /etc/munge are never read or written; clients find this cluster through
# SLURM_CONF. Idempotent: a cluster that still answers is reused.
#
# Env: NESTBOX_SVC_RUN (default /run/nestbox-test), NESTBOX_SLURM_PROCTRACK (cgroup|linuxproc|
#      pgid; default cgroup when the v1 freezer hierarchy is writable, else linuxproc).
# Prints (and writes to $NESTBOX_SVC_RUN/slurm.env): NESTBOX_TEST_SLURM_CONF,
#      NESTBOX_TEST_SLURM_PARTITION, NESTBOX_TEST_SLURM_JOBS, NESTBOX_TEST_SLURM_PROCTRACK.
#
# One such cluster per machine: the node is named after the short hostname, and proctrack/cgroup
# uses /sys/fs/cgroup/freezer/slurm_<host>.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/common.sh"
dir=$NESTBOX_SVC_RUN/slurm
envfile=$NESTBOX_SVC_RUN/slurm.env
host=$(hostname -s)

# Our daemon: its PID file names a live process whose command line mentions our directory.
ours() {
  local f=$dir/pids/$1 p
  [ -f "$f" ] || return 1
  p=$(cat "$f")
  [ -r "/proc/$p/cmdline" ] && tr '\0' ' ' <"/proc/$p/cmdline" 2>/dev/null | grep -qF "$dir/"
}
if [ -f "$envfile" ] && ours munged && ours slurmctld && ours slurmd &&
   [ -n "$(SLURM_CONF=$dir/slurm.conf sinfo -h -n "$host" -o %T 2>/dev/null)" ]; then
  cat "$envfile"; exit 0
fi
# Leftovers of a half-started or crashed cluster go first.
[ -d "$dir" ] && "$here/slurm-down.sh" >/dev/null 2>&1
need_packages slurm-wlm munge
mkdir -p "$dir"/{pids,munge,state,spool,log,jobs}
# munged refuses a socket directory that others cannot traverse; the key itself stays 0600.
chmod 755 "$NESTBOX_SVC_RUN" "$dir" "$dir/munge"
chmod 1777 "$dir/jobs"

# Ports: slurmctld and slurmd bind 0.0.0.0 with SO_REUSEADDR, so a port in TIME_WAIT from a
# previous cluster is fine; only a listener makes a port busy.
ctld_port=$(free_port 6817)
slurmd_port=$(free_port $((ctld_port + 1)))

key=$dir/munge/munge.key
sock=$dir/munge/munge.socket
[ -s "$key" ] || mungekey --create --keyfile="$key" 2>/dev/null || head -c 1024 /dev/urandom >"$key"
chmod 600 "$key"
setsid munged --foreground --socket="$sock" --key-file="$key" --pid-file="$dir/munge/munged.pid" \
  --seed-file="$dir/munge/seed" --log-file="$dir/log/munged.log" \
  </dev/null >>"$dir/log/munged.out" 2>&1 &
echo $! >"$dir/pids/munged"
munge_works() { munge -n -S "$sock" 2>/dev/null | unmunge -S "$sock" >/dev/null 2>&1; }
wait_until "$dir/pids/munged" 50 munge_works || { tail -5 "$dir/log/munged.out" >&2; die "munged did not start"; }

proctrack=${NESTBOX_SLURM_PROCTRACK:-}
if [ -z "$proctrack" ]; then
  probe=/sys/fs/cgroup/freezer/nestbox-probe.$$
  if grep -qE '^cgroup /sys/fs/cgroup/freezer cgroup .*freezer' /proc/mounts && mkdir "$probe" 2>/dev/null; then
    rmdir "$probe"; proctrack=cgroup
  else
    proctrack=linuxproc
  fi
fi
rm -f "$dir/cgroup.conf"
if [ "$proctrack" = cgroup ]; then
  # Process tracking only: the freezer hierarchy; no core, memory or device confinement.
  printf '%s\n' CgroupPlugin=cgroup/v1 CgroupMountpoint=/sys/fs/cgroup ConstrainCores=no \
    ConstrainRAMSpace=no ConstrainSwapSpace=no ConstrainDevices=no >"$dir/cgroup.conf"
fi

# The node's topology as slurmd reports it (a bare CPUs= count makes slurmd complain), and a
# RealMemory a GiB under the real total (above it, the node is drained for "Low RealMemory").
topology=$(slurmd -C | head -1 | grep -oE '(CPUs|Boards|SocketsPerBoard|CoresPerSocket|ThreadsPerCore)=[0-9]+' | tr '\n' ' ')
memory=$(( $(free -m | awk '/^Mem:/ {print $2}') - 1024 ))
[ "$memory" -ge 256 ] || memory=256
cat >"$dir/slurm.conf" <<CONF
# written by nestbox scripts/services/slurm-up.sh
ClusterName=nestbox-test
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$ctld_port
SlurmdPort=$slurmd_port
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$sock
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/state/slurmctld.pid
SlurmdPidFile=$dir/spool/slurmd.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd.log
ProctrackType=proctrack/$proctrack
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
# No slurmdbd: finished jobs land in this file, which 'sacct -c' reads.
JobCompType=jobcomp/filetxt
JobCompLoc=$dir/log/jobcomp.txt
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SchedulerType=sched/backfill
# Batch jobs start at once instead of after the default 3 s batch delay.
SchedulerParameters=batch_sched_delay=0,sched_min_interval=0
MpiDefault=none
SwitchType=switch/none
ReturnToService=2
MailProg=/bin/true
KillWait=5
MinJobAge=600
NodeName=$host NodeAddr=127.0.0.1 $topology RealMemory=$memory State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
CONF
export SLURM_CONF=$dir/slurm.conf
# The marker lets slurm-down.sh find this cluster's slurmstepd processes by environment.
export NESTBOX_SLURM_DIR=$dir
setsid slurmctld -D -f "$SLURM_CONF" </dev/null >>"$dir/log/slurmctld.out" 2>&1 &
echo $! >"$dir/pids/slurmctld"
setsid slurmd -D -f "$SLURM_CONF" </dev/null >>"$dir/log/slurmd.out" 2>&1 &
echo $! >"$dir/pids/slurmd"

node_idle() {
  local s
  ours slurmctld && ours slurmd || return 1
  s=$(sinfo -h -n "$host" -o %T 2>/dev/null || true)
  case $s in
  idle) return 0 ;;
  down*|drain*|unknown*) scontrol update nodename="$host" state=resume >/dev/null 2>&1 || true ;;
  esac
  return 1
}
if ! wait_until "$dir/pids/slurmd" 300 node_idle; then
  tail -15 "$dir/log/slurmctld.log" "$dir/log/slurmd.log" >&2 2>/dev/null || true
  "$here/slurm-down.sh" >&2 || true
  die "the Slurm node $host did not become idle within 30 s"
fi

cat >"$envfile" <<ENV
export NESTBOX_TEST_SLURM_CONF=$dir/slurm.conf
export NESTBOX_TEST_SLURM_PARTITION=debug
export NESTBOX_TEST_SLURM_JOBS=$dir/jobs
export NESTBOX_TEST_SLURM_PROCTRACK=$proctrack
ENV
say "slurm up: proctrack/$proctrack, slurmctld :$ctld_port, slurmd :$slurmd_port"
cat "$envfile"
