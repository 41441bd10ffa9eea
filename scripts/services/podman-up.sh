#!/usr/bin/env bash
# podman-up.sh - make rootful Podman (Debian 12: 4.3) work on this kind of machine and serve
# its Docker-compatible API on a private unix socket, then give it localhost/busybox.
# Idempotent.
#
# Two settings are needed here, written to one containers.conf drop-in (and nothing else in
# /etc is changed):
#  - root has no CAP_SYS_RESOURCE, so Podman's default rlimits for root containers (nofile and
#    nproc far above the current hard limits) make the OCI runtime fail with "setrlimit ...:
#    Operation not permitted". Podman also lowers its own nproc hard limit to 32768 when it
#    starts, so nproc must stay at or below that. Containers get the current hard limits.
#  - crun refuses the cgroup v1/v2 hybrid layout when a controller sits on v2; runc copes.
# Without systemd and journald: cgroupfs and a file events log. exit_command_delay 15 s: every
# API exec otherwise keeps a conmon pair alive for five minutes.
#
# Env: NESTBOX_SVC_RUN (default /run/nestbox-test).
# Prints (and writes to $NESTBOX_SVC_RUN/podman.env): export NESTBOX_TEST_PODMAN=<socket>
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/common.sh"
state=$NESTBOX_SVC_RUN/podman
sock=$state/podman.sock
pidfile=$state/service.pid
envline="export NESTBOX_TEST_PODMAN=$sock"

if pid_alive "$pidfile" && engine_answers "$sock"; then
  "$here/busybox-image.sh" "$sock"
  echo "$envline"; exit 0
fi
need_packages podman runc catatonit uidmap

nofile=$(ulimit -Hn); nproc=$(ulimit -Hu)
[ "$nofile" = unlimited ] && nofile=1048576
if [ "$nproc" = unlimited ] || [ "$nproc" -gt 32768 ]; then nproc=32768; fi
conf=/etc/containers/containers.conf.d/60-nestbox-test.conf
want=$(cat <<CONF
# Written by nestbox scripts/services/podman-up.sh for the test suite.
[containers]
default_ulimits = ["nofile=$nofile:$nofile", "nproc=$nproc:$nproc"]
[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
events_logger = "file"
exit_command_delay = 15
CONF
)
mkdir -p "$(dirname "$conf")"
[ "$(cat "$conf" 2>/dev/null)" = "$want" ] || printf '%s\n' "$want" > "$conf"

mkdir -p "$state"
rm -f "$sock"
# --time=0: the service never exits on idle.
setsid podman system service --time=0 "unix://$sock" </dev/null >"$state/service.log" 2>&1 &
echo $! > "$pidfile"
if ! wait_until "$pidfile" 100 engine_answers "$sock"; then
  cat "$state/service.log" >&2
  die "podman's API service did not answer on $sock (log: $state/service.log)"
fi
"$here/busybox-image.sh" "$sock"
echo "$envline" > "$NESTBOX_SVC_RUN/podman.env"
echo "$envline"
