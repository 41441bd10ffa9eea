#!/usr/bin/env bash
# podman-down.sh - stop the API service started by podman-up.sh (by its PID), after removing
# the containers the test suite left (those labelled dev.nestbox.managed). Idempotent.
# CLEAN=1 also removes the containers.conf drop-in it wrote.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/common.sh"
state=$NESTBOX_SVC_RUN/podman
if command -v podman >/dev/null; then
  podman ps -aq --filter label=dev.nestbox.managed | xargs -r podman rm -f -t 0 >/dev/null 2>&1 || true
fi
stop_pid_file "$state/service.pid" 50
rm -f "$state/podman.sock" "$NESTBOX_SVC_RUN/podman.env"
[ "${CLEAN:-0}" = 1 ] && rm -f /etc/containers/containers.conf.d/60-nestbox-test.conf
say "podman service down"
