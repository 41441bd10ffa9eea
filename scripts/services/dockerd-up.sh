#!/usr/bin/env bash
# dockerd-up.sh - start a private Docker engine (Debian's docker.io) for the test suite, without
# systemd and without touching /var/run/docker.sock, then give it localhost/busybox.
# Idempotent: when the engine from an earlier call still answers, it only prints the env line.
#
# No bridge, no iptables rules, no NAT: the tests run containers with NetworkMode none, and this
# machine may not send traffic beyond loopback anyway.
#
# Env: NESTBOX_SVC_RUN (default /run/nestbox-test), NESTBOX_DOCKERD_DATA (default
#      /var/lib/nestbox-dockerd).
# Prints (and writes to $NESTBOX_SVC_RUN/dockerd.env): export NESTBOX_TEST_DOCKER=<socket>
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/common.sh"
state=$NESTBOX_SVC_RUN/dockerd
data=${NESTBOX_DOCKERD_DATA:-/var/lib/nestbox-dockerd}
sock=$state/docker.sock
pidfile=$state/dockerd.pid
envline="export NESTBOX_TEST_DOCKER=$sock"

if pid_alive "$pidfile" && engine_answers "$sock"; then
  "$here/busybox-image.sh" "$sock"
  echo "$envline"; exit 0
fi
need_packages docker.io runc tini
mkdir -p "$state" "$data"
rm -f "$sock"
# dockerd runs its own containerd under --exec-root when no system containerd is running.
setsid dockerd --data-root "$data" --exec-root "$state/exec" --pidfile "$state/docker.pid" \
  -H "unix://$sock" --iptables=false --ip-masq=false --bridge=none \
  </dev/null >"$state/dockerd.log" 2>&1 &
echo $! > "$pidfile"
if ! wait_until "$pidfile" 300 engine_answers "$sock"; then
  tail -20 "$state/dockerd.log" >&2
  die "dockerd did not answer on $sock (log: $state/dockerd.log)"
fi
"$here/busybox-image.sh" "$sock"
echo "$envline" > "$NESTBOX_SVC_RUN/dockerd.env"
echo "$envline"
