#!/usr/bin/env bash
# relay-bench.sh - quick side-by-side figures for the relay, on loopback only:
#   1. 100 MiB download: direct vs through the relay (plain HTTP and CONNECT), interleaved
#   2. added latency per CONNECT (tunnel set-up + one echo round trip) vs a direct connection
#   3. relay RSS with 1,000 idle tunnels
# Usage: crates/net/bench/relay-bench.sh [path/to/nestbox]   (default: release build)
# Needs: curl, python3. Everything listens on 127.0.0.1 and stops by itself.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
NESTBOX=${1:-${CARGO_TARGET_DIR:-target}/release/nestbox}
WORK=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$WORK"; }
trap cleanup EXIT
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
wait_port() { for _ in $(seq 100); do (exec 3<>/dev/tcp/127.0.0.1/"$1") 2>/dev/null && return 0; sleep 0.05; done; echo "port $1 never opened" >&2; exit 1; }

head -c $((100 * 1024 * 1024)) /dev/urandom > "$WORK/big.bin"
HTTP=$(free_port)
(cd "$WORK" && exec python3 -m http.server "$HTTP" --bind 127.0.0.1) >/dev/null 2>&1 & pids+=($!)
ECHO=$(free_port)
python3 "$here/echo_server.py" "$ECHO" & pids+=($!)
RELAY=$(free_port)
"$NESTBOX" relay --listen "127.0.0.1:$RELAY" --no-upstream --max-tunnels 2000 \
  --allow "127.0.0.1:$HTTP" --allow "127.0.0.1:$ECHO" --allow "localhost:$ECHO" \
  2>"$WORK/relay.log" & pids+=($!)
RELAY_PID=$!
wait_port "$HTTP"; wait_port "$ECHO"; wait_port "$RELAY"

echo "== 1. 100 MiB download, curl, 30 interleaved rounds (includes curl start-up, ~5 ms)"
url="http://127.0.0.1:$HTTP/big.bin"
cpu_ticks() { awk '{print $14 + $15}' "/proc/$RELAY_PID/stat"; }
ticks_before=$(cpu_ticks)
python3 "$here/interleave.py" 30 $((100 * 1024 * 1024)) \
  "direct=curl -sS -o /dev/null --noproxy '' $url" \
  "relay-http=curl -sS -o /dev/null --noproxy '' -x http://127.0.0.1:$RELAY $url" \
  "relay-connect=curl -sS -o /dev/null --noproxy '' -p -x http://127.0.0.1:$RELAY $url"
ticks=$(( $(cpu_ticks) - ticks_before ))
hz=$(getconf CLK_TCK)
echo "  relay CPU (user+system): $(( ticks * 1000 / hz )) ms for 60 x 100 MiB = $(( ticks * 1000 / hz / 60 )) ms per 100 MiB"

echo "== 2. per-CONNECT cost (1,000 sequential set-ups + 1-byte echo, best of 5)"
python3 "$here/connect_latency.py" "$RELAY" "$ECHO"

echo "== 3. RSS with 1,000 idle tunnels"
python3 "$here/idle_tunnels.py" "$RELAY" "$ECHO" "$RELAY_PID" 1000
