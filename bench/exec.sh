#!/usr/bin/env bash
# Per-command cost of the exec layer, side by side with what an agent would otherwise call,
# each group in one hyperfine run so the ratios hold on a noisy machine:
#
#  docker: a trivial command in a warm container through `nestbox exec --backend docker`,
#          vs the `docker exec` CLI into a warm container, vs a fresh `docker run --rm`.
#  ssh:    `nestbox exec --backend ssh` (its shared connection stays up between calls), vs a
#          plain `ssh` per command (a new connection each time), vs plain `ssh` multiplexed
#          over a warm ControlMaster.
#
#   bench/exec.sh                   # dockerd; starts the services it needs
#   ENGINE=podman bench/exec.sh     # the docker group against Podman's API instead
#   RUNS=50 bench/exec.sh
# Needs: hyperfine, the docker CLI; a nestbox binary with `exec` (NESTBOX=path to override).
# Writes bench/results/exec-*.md and .json.
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh
RUNS=${RUNS:-30}
ENGINE=${ENGINE:-dockerd}
OUT=bench/results
mkdir -p "$OUT"
need_packages hyperfine

NESTBOX=${NESTBOX:-$(release_nestbox)}
"$NESTBOX" exec --help >/dev/null 2>&1 || { echo "bench: $NESTBOX has no exec command (is exec_cmd wired into main.rs?)" >&2; exit 1; }

case "$ENGINE" in
dockerd) eval "$(scripts/services/dockerd-up.sh)"; SOCK=$NESTBOX_TEST_DOCKER ;;
podman)  eval "$(scripts/services/podman-up.sh)";  SOCK=$NESTBOX_TEST_PODMAN ;;
*) echo "ENGINE must be dockerd or podman" >&2; exit 2 ;;
esac
eval "$(scripts/services/sshd-up.sh)"
export DOCKER_HOST=unix://$SOCK
STATE=$(mktemp -d /tmp/nestbox-bench-exec.XXXXXX)
CM=$(mktemp -d /tmp/nbb-cm.XXXXXX)
WARM=nestbox-bench-warm-$$
cleanup() {
  docker rm -f "$WARM" >/dev/null 2>&1 || true
  ssh -o ControlPath="$CM/plain.sock" -O exit x >/dev/null 2>&1 || true
  # nestbox's warm container would go when its lease is reaped; the lease names it.
  for lease in "$STATE"/docker-leases/*.lease; do
    [ -e "$lease" ] && docker rm -f "$(basename "$lease" .lease)" >/dev/null 2>&1
  done
  rm -rf "$STATE" "$CM"
}
trap cleanup EXIT

NB_DOCKER=("$NESTBOX" exec --state-dir "$STATE" --backend docker --image localhost/busybox --)
"${NB_DOCKER[@]}" true   # creates the warm container (then reused by label and lease)
# The docker CLI's warm container gets the same hardening nestbox applies.
docker run -d --name "$WARM" --init --network none --cap-drop ALL --security-opt no-new-privileges \
  --pids-limit 1024 --user 65534:65534 localhost/busybox sh -c 'while :; do sleep 3600; done' >/dev/null

H=(hyperfine -N --warmup 3 --style basic --min-runs "$RUNS")
echo "== docker ($ENGINE): a trivial command"
"${H[@]}" --export-markdown "$OUT/exec-docker-$ENGINE.md" --export-json "$OUT/exec-docker-$ENGINE.json" \
  -n 'nestbox exec (warm container)' "${NB_DOCKER[*]} true" \
  -n 'docker exec (warm container)' "docker exec $WARM true" \
  -n 'docker run --rm (new container)' "docker run --rm --network none localhost/busybox true"

SSH_OPTS=(-F /dev/null -p "$NESTBOX_TEST_SSH_PORT" -i "$NESTBOX_TEST_SSH_KEY" -o IdentitiesOnly=yes
          -o BatchMode=yes -o UserKnownHostsFile="$NESTBOX_TEST_SSH_KNOWN_HOSTS" -o StrictHostKeyChecking=yes)
DEST=$NESTBOX_TEST_SSH_USER@$NESTBOX_TEST_SSH_HOST
NB_SSH=("$NESTBOX" exec --state-dir "$STATE" --backend ssh --host "$NESTBOX_TEST_SSH_HOST" --port "$NESTBOX_TEST_SSH_PORT"
        --ssh-user "$NESTBOX_TEST_SSH_USER" --identity "$NESTBOX_TEST_SSH_KEY" --known-hosts "$NESTBOX_TEST_SSH_KNOWN_HOSTS" --)
"${NB_SSH[@]}" true   # opens nestbox's shared connection (ControlPersist keeps it)
ssh "${SSH_OPTS[@]}" -o ControlMaster=yes -o ControlPath="$CM/plain.sock" -o ControlPersist=120 -N -f "$DEST"
echo "== ssh: a trivial command"
"${H[@]}" --export-markdown "$OUT/exec-ssh.md" --export-json "$OUT/exec-ssh.json" \
  -n 'nestbox exec (shared connection)' "${NB_SSH[*]} true" \
  -n 'ssh, multiplexed' "ssh ${SSH_OPTS[*]} -o ControlPath=$CM/plain.sock $DEST true" \
  -n 'ssh, new connection' "ssh ${SSH_OPTS[*]} -o ControlMaster=no -o ControlPath=none $DEST true"
