#!/usr/bin/env bash
# dockerd-down.sh - stop the engine started by dockerd-up.sh (by its PID), after removing the
# containers it still runs, and unmount what its exec root left. Idempotent.
# PURGE=1 also deletes its data directory (images included).
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/common.sh"
state=$NESTBOX_SVC_RUN/dockerd
data=${NESTBOX_DOCKERD_DATA:-/var/lib/nestbox-dockerd}
sock=$state/docker.sock
if pid_alive "$state/dockerd.pid"; then
  if engine_answers "$sock"; then
    for id in $(curl -sf --unix-socket "$sock" 'http://engine/v1.41/containers/json?all=1' \
                | grep -o '"Id":"[0-9a-f]*"' | cut -d'"' -f4); do
      curl -sf -X DELETE --unix-socket "$sock" "http://engine/v1.41/containers/$id?force=1&v=1" >/dev/null || true
    done
  fi
  stop_pid_file "$state/dockerd.pid" 200
fi
if grep -q " $state/exec" /proc/mounts; then
  awk -v root="$state/exec" 'index($2, root) == 1 {print $2}' /proc/mounts | sort -r | xargs -r -n1 umount -l
fi
rm -f "$NESTBOX_SVC_RUN/dockerd.env" "$sock"
[ "${PURGE:-0}" = 1 ] && rm -rf "$data" "$state"
say "dockerd down"
