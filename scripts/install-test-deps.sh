#!/usr/bin/env bash
# Installs the Debian packages the test suite uses, when missing. Idempotent; needs root (or
# sudo) only when something is missing.
set -euo pipefail
PACKAGES=(
  python3          # probes inside the cage (/usr/bin/python3 with ctypes)
  python3-venv     # the venv that holds the MCP Python SDK (below)
  util-linux       # setpriv (the unprivileged runs), unshare (controls)
  git              # a real tool inside the cage
  # the exec layer's integration tests run against real engines and a real sshd
  docker.io        # dockerd (20.10), with containerd and docker-init
  runc             # the OCI runtime for dockerd and Podman
  tini             # dockerd's init for `Init: true`
  podman           # Podman's Docker-compatible API service
  catatonit        # Podman's init for `Init: true`
  uidmap           # newuidmap/newgidmap for Podman
  busybox-static   # the localhost/busybox image, built without a registry
  openssh-server   # the private sshd on 127.0.0.1
  openssh-client   # ssh with ControlMaster
  slurm-wlm        # slurmctld, slurmd and the client tools: a real single-node cluster
  munge            # Slurm's authentication daemon
  curl             # a real client through the relay; the service scripts talk to the engines' sockets
  iproute2         # ip: the relay tests find this machine's own address
  python3-pip      # pip download through the relay
  tinyproxy        # the real upstream proxy the relay chains through
  openssl          # TLS servers (openssl s_server) in the relay tests; the gateway demo's test CA
  ca-certificates  # TLS roots for the real registries
)
# The MCP tests drive `nestbox mcp` with the official MCP Python SDK (a client nobody here
# wrote), pinned, in a venv under the cache directory (tests read NESTBOX_TEST_VENV, else this).
MCP_SDK_VERSION=2.3.0
install_mcp_sdk() {
  local venv="${NESTBOX_TEST_VENV:-$HOME/.cache/nestbox-test-venv}"
  if "$venv/bin/python" -c "import mcp, importlib.metadata as m; assert m.version('mcp') == '$MCP_SDK_VERSION'" 2>/dev/null; then
    return
  fi
  python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet --disable-pip-version-check "mcp==$MCP_SDK_VERSION"
}

missing=()
for p in "${PACKAGES[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
[ ${#missing[@]} -eq 0 ] && { install_mcp_sdk; exit 0; }
SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
export DEBIAN_FRONTEND=noninteractive
APT=($SUDO apt-get -o DPkg::Lock::Timeout=600)
for p in "${missing[@]}"; do
  if ! apt-cache policy "$p" 2>/dev/null | grep -q 'Candidate: [0-9]'; then "${APT[@]}" update -qq; break; fi
done
"${APT[@]}" install -y --no-install-recommends "${missing[@]}" >/dev/null
install_mcp_sdk
