#!/usr/bin/env bash
# sshd-down.sh - stop the sshd started by sshd-up.sh (by its PID), remove the login user it
# created, delete its directory. Idempotent.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/common.sh"
dir=$NESTBOX_SVC_RUN/sshd
[ -d "$dir" ] || { rm -f "$NESTBOX_SVC_RUN/sshd.env"; say "sshd down (nothing to do)"; exit 0; }
stop_pid_file "$dir/sshd.pid" 50
if [ -f "$dir/created-user" ]; then
  user=$(cat "$dir/created-user")
  # userdel refuses while the user still runs something: that is a test that left a job behind.
  userdel -r "$user" 2>/dev/null || userdel "$user" 2>/dev/null \
    || say "could not remove user $user (processes left running?): $(ps -o pid=,args= -u "$user" | head -5)"
fi
rm -rf "$dir" "$NESTBOX_SVC_RUN/sshd.env"
say "sshd down"
