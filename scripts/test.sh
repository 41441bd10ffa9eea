#!/usr/bin/env bash
# The test suite, on a fresh Debian 12 machine: installs what the tests need, then runs every
# test of the workspace (unit, integration, escape). Extra arguments go to `cargo test`.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-test-deps.sh

# The exec tests need a real dockerd, Podman's API service and a private sshd: started here
# (each script is idempotent and tracks its own PID), stopped when this script exits. The
# tests fail, never skip, when a service is missing.
stop_services() {
  scripts/services/sshd-down.sh
  scripts/services/podman-down.sh
  scripts/services/dockerd-down.sh
} >/dev/null 2>&1
trap stop_services EXIT
eval "$(scripts/services/dockerd-up.sh)"
eval "$(scripts/services/podman-up.sh)"
eval "$(scripts/services/sshd-up.sh)"

cargo test --workspace --locked "$@"
