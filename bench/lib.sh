# Sourced by the bench scripts, from the repository root: what every one of them needs first.

# Installs the Debian packages among the arguments that are missing.
need_packages() {
  local missing=() p
  for p in "$@"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
  [ ${#missing[@]} -eq 0 ] ||
    DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${missing[@]}" >/dev/null
}

# Installs Anthropic's srt from npm into the folder $1 when it is missing there.
need_srt() {
  [ -x "$1/node_modules/.bin/srt" ] ||
    (cd "$1" && npm install --no-audit --no-fund @anthropic-ai/sandbox-runtime >/dev/null)
}

# Prints the path of the release nestbox after building it: cargo rebuilds what changed, so a
# figure never comes from a stale binary.
release_nestbox() {
  cargo build --release --locked -q -p nestbox
  printf '%s/release/nestbox\n' "$(cargo metadata --format-version 1 --no-deps |
    python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')"
}
