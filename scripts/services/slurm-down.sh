#!/usr/bin/env bash
# slurm-down.sh - stop the cluster of slurm-up.sh: cancel its jobs and wait for the queue to
# empty, stop slurmd, slurmctld and munged by their recorded PIDs, end what is left of this
# cluster (found by PID through its environment, never by process name), remove the empty
# cgroup directories slurmd made, delete the state directory. Idempotent.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/common.sh"
dir=$NESTBOX_SVC_RUN/slurm
host=$(hostname -s)
[ -d "$dir" ] || { rm -f "$NESTBOX_SVC_RUN/slurm.env"; say "slurm down (nothing to do)"; exit 0; }
export SLURM_CONF=$dir/slurm.conf

# The PID recorded for NAME, if that process is still ours.
pid_of() {
  local f=$dir/pids/$1 p
  [ -f "$f" ] || return 1
  p=$(cat "$f")
  [ -r "/proc/$p/cmdline" ] && tr '\0' ' ' <"/proc/$p/cmdline" 2>/dev/null | grep -qF "$dir/" || return 1
  echo "$p"
}
# SIGTERM to all given PIDs, up to 10 s for them to go, then SIGKILL.
end_all() {
  [ $# -gt 0 ] || return 0
  kill -TERM "$@" 2>/dev/null
  local live p
  for _ in $(seq 1 100); do
    live=(); for p in "$@"; do kill -0 "$p" 2>/dev/null && live+=("$p"); done
    [ ${#live[@]} -eq 0 ] && return 0
    sleep 0.1
  done
  kill -KILL "${live[@]}" 2>/dev/null; sleep 0.2
}

# 1. slurmd leaves running steps alone when it stops: cancel every job first.
if pid_of slurmctld >/dev/null && [ -f "$SLURM_CONF" ]; then
  jobs=$(squeue -h -o %i 2>/dev/null)
  if [ -n "$jobs" ]; then
    # shellcheck disable=SC2086
    scancel $jobs 2>/dev/null
    for _ in $(seq 1 150); do [ -z "$(squeue -h -o %i 2>/dev/null)" ] && break; sleep 0.1; done
  fi
fi

# 2. The daemons: slurmd and slurmctld together (each takes ~1.5 s), munged after them.
daemons=(); for d in slurmd slurmctld; do p=$(pid_of "$d") && daemons+=("$p"); done
end_all "${daemons[@]}"
p=$(pid_of munged) && end_all "$p"

# 3. What is left: slurmstepd (it inherits NESTBOX_SLURM_DIR from slurmd) and job processes
#    that escaped process tracking (their environment names this cluster's SLURM_CONF and a
#    job id). Never this shell or its ancestors.
spare=" $$ "; a=$$
while [ "${a:-1}" -gt 1 ] 2>/dev/null; do
  a=$(sed 's/.*) //' "/proc/$a/stat" 2>/dev/null | cut -d' ' -f2); spare+="${a:-1} "
done
left=()
for e in $( { grep -lzxF "NESTBOX_SLURM_DIR=$dir" /proc/[0-9]*/environ
              grep -lzxF "SLURM_CONF=$SLURM_CONF" /proc/[0-9]*/environ | xargs -r grep -lz '^SLURM_JOB_ID=' ; } 2>/dev/null | sort -u); do
  p=${e#/proc/}; p=${p%/environ}
  case $spare in *" $p "*) continue ;; esac
  left+=("$p")
done
if [ ${#left[@]} -gt 0 ]; then
  say "ending leftover processes of the cluster: ${left[*]}"
  kill -KILL "${left[@]}" 2>/dev/null
fi

# 4. proctrack/cgroup leaves empty directories behind; rmdir refuses busy ones.
for m in /sys/fs/cgroup/*/slurm_"$host"; do
  [ -d "$m" ] && find "$m" -depth -type d -exec rmdir {} \; 2>/dev/null
done
rm -rf "$dir" "$NESTBOX_SVC_RUN/slurm.env"
say "slurm down"
