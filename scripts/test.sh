#!/usr/bin/env bash
# The test suite, on a fresh Debian 12 machine: installs what the tests need, then runs every
# test of the workspace (unit, integration, escape). Extra arguments go to `cargo test`.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-test-deps.sh
exec cargo test --workspace --locked "$@"
