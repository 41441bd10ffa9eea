#!/usr/bin/env bash
# The relay side by side with tinyproxy and srt's proxy, on loopback, in one run:
#   1. 100 MiB download (curl): direct, through each proxy (CONNECT), interleaved rounds
#   2. cost of a new connection: 1,000 sequential CONNECT + echo vs direct
#   3. memory with 1,000 idle tunnels
#   4. start-up of a caged step with its relay vs without, and srt's start-up
# Usage: bench/relay.sh     (needs: curl python3 tinyproxy hyperfine; srt from npm, as in
# bench/cage-startup.sh; installs what is missing unless INSTALL=0)
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh
here=$PWD/bench/relay
WORK=${WORK:-$HOME/.cache/nestbox-bench}
ROUNDS=${ROUNDS:-20}
mkdir -p "$WORK"
if [ "${INSTALL:-1}" = 1 ]; then
  need_packages hyperfine tinyproxy curl socat ripgrep bubblewrap
  need_srt "$WORK"
fi
NESTBOX=$(release_nestbox)
SRT="$WORK/node_modules/.bin/srt"

TMP=$(mktemp -d)
pids=(); pgids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for g in "${pgids[@]}"; do kill -TERM -- "-$g" 2>/dev/null || true; done
  rm -rf "$TMP"
}
trap cleanup EXIT
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
wait_port() { for _ in $(seq 200); do (exec 3<>/dev/tcp/127.0.0.1/"$1") 2>/dev/null && return 0; sleep 0.05; done; echo "port $1 never opened" >&2; exit 1; }

head -c $((100 * 1024 * 1024)) /dev/urandom > "$TMP/big.bin"
HTTP=$(free_port); ECHO=$(free_port); RELAY=$(free_port); TINY=$(free_port)
(cd "$TMP" && exec python3 -m http.server "$HTTP" --bind 127.0.0.1) >/dev/null 2>&1 & pids+=($!)
python3 "$here/echo_server.py" "$ECHO" & pids+=($!)
"$NESTBOX" relay --listen "127.0.0.1:$RELAY" --no-upstream --max-tunnels 2000 \
  --allow "127.0.0.1:$HTTP" --allow "127.0.0.1:$ECHO" 2>"$TMP/relay.log" & pids+=($!)
RELAY_PID=$!
chown nobody:nogroup "$TMP" 2>/dev/null || true
cat > "$TMP/tinyproxy.conf" <<CONF
Port $TINY
Listen 127.0.0.1
Timeout 600
MaxClients 2000
LogLevel Critical
Allow 127.0.0.1
DisableViaHeader Yes
$( [ "$(id -u)" = 0 ] && printf 'User nobody\nGroup nogroup\n' )
CONF
tinyproxy -d -c "$TMP/tinyproxy.conf" >/dev/null 2>&1 & pids+=($!)
TINY_PID=$!
wait_port "$HTTP"; wait_port "$ECHO"; wait_port "$RELAY"; wait_port "$TINY"

# srt: a long-lived instance; its host-side HTTP proxy (with the credentials srt hands its
# sandbox) is what a sandboxed client's CONNECT reaches.
cat > "$TMP/srt.json" <<JSON
{"network":{"allowedDomains":["127.0.0.1","localhost"],"deniedDomains":[]},"filesystem":{"denyRead":[],"allowWrite":["$TMP"],"denyWrite":[]}}
JSON
setsid "$SRT" --settings "$TMP/srt.json" -- sleep 3600 </dev/null >"$TMP/srt.log" 2>&1 & pgids+=($!)
SRT_PID=$!
INNER=
for _ in $(seq 100); do
  INNER=$(for p in $(pgrep -x sleep); do tr '\0' '\n' </proc/$p/environ 2>/dev/null | grep -q '^HTTP_PROXY=' && echo $p; done | head -1)
  [ -n "$INNER" ] && break; sleep 0.1
done
SRT_SPEC=
if [ -n "$INNER" ]; then
  PROXY_IN=$(tr '\0' '\n' </proc/"$INNER"/environ | sed -n 's/^HTTP_PROXY=//p')
  MUX=$(tr '\0' '\n' </proc/"$INNER"/environ | sed -n 's/^CLAUDE_CODE_HOST_HTTP_PROXY_PORT=//p')
  CRED=${PROXY_IN#http://}; CRED=${CRED%@*}
  SRT_SPEC="srt=127.0.0.1:$MUX@$CRED"
  SRT_URL="http://$CRED@127.0.0.1:$MUX"
else
  echo "srt did not start; its columns are left out" >&2
fi

url="http://127.0.0.1:$HTTP/big.bin"
echo "== 1. 100 MiB download through each proxy (curl, CONNECT), $ROUNDS interleaved rounds"
variants=("direct=curl -sS -o /dev/null --noproxy '' $url"
          "relay=curl -sS -o /dev/null --noproxy '' -p -x http://127.0.0.1:$RELAY $url"
          "tinyproxy=curl -sS -o /dev/null --noproxy '' -p -x http://127.0.0.1:$TINY $url")
[ -n "$SRT_SPEC" ] && variants+=("srt=curl -sS -o /dev/null --noproxy '' -p -x $SRT_URL $url")
python3 "$here/interleave.py" "$ROUNDS" $((100 * 1024 * 1024)) "${variants[@]}"

echo "== 2. new connection: 1,000 sequential CONNECT + 1-byte echo (best of 5 rounds)"
python3 "$here/proxy_latency.py" "$ECHO" 1000 "relay=127.0.0.1:$RELAY" "tinyproxy=127.0.0.1:$TINY" ${SRT_SPEC:+"$SRT_SPEC"}

echo "== 3. memory with 1,000 idle tunnels"
echo " relay:";     python3 "$here/idle_tunnels.py" "$RELAY" "$ECHO" 1000 "$RELAY_PID"
echo " tinyproxy:"; python3 "$here/idle_tunnels.py" "$TINY" "$ECHO" 1000 "$TINY_PID"
if [ -n "$SRT_SPEC" ]; then
  echo " srt (its node process tree):"
  python3 "$here/idle_tunnels.py" "$MUX" "$ECHO" 1000 "$SRT_PID" "--auth=$CRED"
fi

echo "== 4. start-up: a caged /bin/true with and without its relay, and srt"
# the long-lived srt would share its fixed ports with the ones measured here
for g in "${pgids[@]}"; do kill -TERM -- "-$g" 2>/dev/null || true; done; pgids=(); sleep 1
cd "$TMP"
hyperfine -N -i --warmup 5 --min-runs 30 --style basic \
  -n 'nestbox run (no network)' "$NESTBOX run -- /bin/true" \
  -n 'nestbox run --allow (netns + relay)' "$NESTBOX run --allow 127.0.0.1:$HTTP -- /bin/true" \
  -n 'nestbox run --allow --net-mode port' "$NESTBOX run --net-mode port --allow 127.0.0.1:$HTTP -- /bin/true" \
  -n 'srt (with its proxies)' "$SRT --settings $TMP/srt.json -- /bin/true"
