#!/usr/bin/env bash
# Start-up cost of one caged /bin/true, and the per-exec cost inside a cage (a 200-exec shell
# loop), nestbox side by side with bubblewrap, firejail, Anthropic's srt and a minimal C
# launcher (bench/floor.c, the floor any Landlock+seccomp launcher pays), all in one hyperfine
# run per group so the ratios hold on a noisy machine.
#
#   bench/cage-startup.sh                 # needs: hyperfine bwrap firejail gcc; srt via npm
#   RUNS=100 bench/cage-startup.sh        # more runs
# Installs what is missing (apt, npm into ~/.cache/nestbox-bench) unless INSTALL=0.
# Writes bench/results/cage-*.md and .json.
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh
RUNS=${RUNS:-100}
WORK=${WORK:-$HOME/.cache/nestbox-bench}
OUT=bench/results
mkdir -p "$WORK" "$OUT"

if [ "${INSTALL:-1}" = 1 ]; then
  need_packages hyperfine bubblewrap firejail socat ripgrep gcc
  need_srt "$WORK"
fi
NESTBOX=$(release_nestbox)
gcc -O2 -o "$WORK/floor" bench/floor.c
SRT="$WORK/node_modules/.bin/srt"
cat > "$WORK/srt-settings.json" <<JSON
{"network":{"allowedDomains":[],"deniedDomains":[]},"filesystem":{"denyRead":["~/.ssh"],"allowWrite":["$WORK"],"denyWrite":[]}}
JSON
cd "$WORK"   # a neutral working directory for every variant

H=(hyperfine -N --warmup 10 --style basic)
echo "== start-up: /bin/true"
"${H[@]}" --min-runs "$RUNS" --export-markdown "$OLDPWD/$OUT/cage-startup.md" --export-json "$OLDPWD/$OUT/cage-startup.json" \
  -n bare '/bin/true' \
  -n 'C floor (Landlock+seccomp)' "$WORK/floor /bin/true" \
  -n 'nestbox run' "$NESTBOX run -- /bin/true" \
  -n 'nestbox run --user nobody' "$NESTBOX run --user 65534 -- /bin/true" \
  -n 'bwrap --unshare-all' 'bwrap --ro-bind / / --dev /dev --proc /proc --unshare-all -- /bin/true' \
  -n 'firejail --noprofile' 'firejail --quiet --noprofile /bin/true' \
  -n srt "$SRT --settings $WORK/srt-settings.json -- /bin/true"

LOOP='for i in $(seq 200); do /bin/true; done'
echo "== 200 execs inside one cage"
"${H[@]}" --min-runs 20 --export-markdown "$OLDPWD/$OUT/cage-loop.md" --export-json "$OLDPWD/$OUT/cage-loop.json" \
  -n bare "/bin/sh -c '$LOOP'" \
  -n 'C floor' "$WORK/floor /bin/sh -c '$LOOP'" \
  -n 'nestbox run' "$NESTBOX run -- /bin/sh -c '$LOOP'" \
  -n 'bwrap --unshare-all' "bwrap --ro-bind / / --dev /dev --proc /proc --unshare-all -- /bin/sh -c '$LOOP'" \
  -n 'firejail --noprofile' "firejail --quiet --noprofile /bin/sh -c '$LOOP'" \
  -n srt "$SRT --settings $WORK/srt-settings.json -- /bin/sh -c '$LOOP'"
echo "results in $OUT/"
