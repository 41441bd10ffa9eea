#!/usr/bin/env bash
# sshd-down.sh - stop the sshd started by sshd-up.sh (by its PID), remove the login user it
# created, delete its directory. Idempotent.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/common.sh"
dir=$NESTBOX_SVC_RUN/sshd
[ -d "$dir" ] || { rm -f "$NESTBOX_SVC_RUN/sshd.env"; say "sshd down (nothing to do)"; exit 0; }
if pid_alive "$dir/sshd.pid"; then
  # Established sessions live in the listener's children; end them with it, so the clients'
  # shared connections close and the login user can be removed.
  for child in $(ps -o pid= --ppid "$(cat "$dir/sshd.pid")"); do kill -TERM "$child" 2>/dev/null; done
fi
stop_pid_file "$dir/sshd.pid" 50
if [ -f "$dir/created-user" ]; then
  user=$(cat "$dir/created-user")
  # userdel refuses while the user still runs something: that is a test that left a job behind.
  userdel -r "$user" 2>/dev/null || userdel "$user" 2>/dev/null \
    || say "could not remove user $user (processes left running?): $(ps -o pid=,args= -u "$user" | head -5)"
fi
rm -rf "$dir" "$NESTBOX_SVC_RUN/sshd.env"
say "sshd down"
