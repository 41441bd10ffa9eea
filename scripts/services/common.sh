# shellcheck shell=bash
# Helpers shared by the service scripts in this folder. Sourced, never run.
#
# Every service these scripts start is private to the test suite: its own socket or port, its
# own state directory under /run (or $NESTBOX_SVC_RUN), its PID written down so the matching
# *-down.sh stops exactly that process and nothing else.

NESTBOX_SVC_RUN=${NESTBOX_SVC_RUN:-/run/nestbox-test}

say() { echo "services: $*" >&2; }
die() { echo "services: $*" >&2; exit 1; }

# Installs the Debian packages that are missing. apt-get update runs only when a package has no
# install candidate yet (a fresh machine), and waits for another apt user instead of failing.
need_packages() {
  local missing=() p
  for p in "$@"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
  [ ${#missing[@]} -eq 0 ] && return 0
  local sudo=""; [ "$(id -u)" -eq 0 ] || sudo=sudo
  local apt=($sudo env DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600)
  for p in "${missing[@]}"; do
    if ! apt-cache policy "$p" 2>/dev/null | grep -q 'Candidate: [0-9]'; then
      "${apt[@]}" update -qq; break
    fi
  done
  say "installing ${missing[*]}"
  "${apt[@]}" install -y --no-install-recommends "${missing[@]}" >/dev/null
}

# True when the PID in FILE names a live process.
pid_alive() { [ -f "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null; }

# Stops the process whose PID is in FILE: SIGTERM, up to WAIT tenths of a second, then SIGKILL.
stop_pid_file() {
  local file=$1 wait=${2:-50} pid
  [ -f "$file" ] || return 0
  pid=$(cat "$file")
  if kill -0 "$pid" 2>/dev/null; then
    kill -TERM "$pid" 2>/dev/null
    for _ in $(seq 1 "$wait"); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    if kill -0 "$pid" 2>/dev/null; then say "PID $pid ignored SIGTERM; sending SIGKILL"; kill -KILL "$pid"; fi
  fi
  rm -f "$file"
}

# True when an engine answers /_ping on the unix socket SOCK.
engine_answers() { curl -sf --max-time 2 --unix-socket "$1" http://engine/_ping >/dev/null 2>&1; }

# Waits up to N tenths of a second for CMD... to succeed while the process in PIDFILE lives.
wait_until() {
  local pidfile=$1 n=$2; shift 2
  for _ in $(seq 1 "$n"); do
    "$@" && return 0
    pid_alive "$pidfile" || return 1
    sleep 0.1
  done
  "$@"
}

# First TCP port from START on 127.0.0.1 that nothing listens on.
free_port() {
  local p
  for p in $(seq "$1" $(($1 + 200))); do
    (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null || { echo "$p"; return 0; }
  done
  die "no free port from $1"
}
