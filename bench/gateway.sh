#!/usr/bin/env bash
# gateway.sh - side-by-side figures for the gateway, in one run, on loopback only:
#   1. header injection (x-api-key placeholder -> key) over inspected TLS: requests per second
#      and added latency, through the gateway vs through mitmproxy doing the same rewrite (a
#      small addon), vs direct
#   2. a passthrough tunnel through the gateway vs the relay alone vs direct
#   3. the gateway's memory with 1,000 open connections (passthrough, then inspected)
# The stand-in API (bench/gateway/load.py server) answers 401 unless the real key arrived, so a
# proxy that forgot to inject shows up as errors.
# Usage: bench/gateway.sh [path/to/nestbox]   (default: the release build, rebuilt if stale)
# Installs mitmproxy (Debian package) when missing: the bench needs it, CI does not.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
. "$here/lib.sh"
NESTBOX=${1:-$(cd "$root" && release_nestbox)}
need_packages mitmproxy
for tool in python3 openssl; do command -v "$tool" >/dev/null || { echo "$tool is needed" >&2; exit 1; }; done
ulimit -n 16384 2>/dev/null || ulimit -n "$(ulimit -Hn)"

WORK=$(mktemp -d /tmp/nestbox-gateway-bench.XXXXXX)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$WORK"; }
trap cleanup EXIT
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
wait_port() { for _ in $(seq 200); do (exec 3<>/dev/tcp/127.0.0.1/"$1") 2>/dev/null && return 0; sleep 0.05; done; echo "port $1 never opened" >&2; exit 1; }
rss_kib() { awk '/^VmRSS/ {print $2}' "/proc/$1/status"; }
export BENCH_KEY="sk-ant-bench-key-0123456789" BENCH_EXPECT_KEY="sk-ant-bench-key-0123456789"
PH="nestbox:resolve:env:ANTHROPIC_API_KEY"

# --- the stand-in API (two processes on one port) and its test CA
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 1 -subj "/CN=bench CA" \
  -keyout "$WORK/ca.key" -out "$WORK/ca.pem" 2>/dev/null
openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -subj "/CN=api.anthropic.com" \
  -keyout "$WORK/api.key" -out "$WORK/api.csr" 2>/dev/null
printf 'subjectAltName=DNS:api.anthropic.com,DNS:pass.test\n' > "$WORK/san"
openssl x509 -req -in "$WORK/api.csr" -CA "$WORK/ca.pem" -CAkey "$WORK/ca.key" -CAcreateserial \
  -days 1 -extfile "$WORK/san" -out "$WORK/api.pem" 2>/dev/null
API=$(free_port)
for _ in 1 2; do python3 "$here/gateway/load.py" server "$API" "$WORK/api.pem" "$WORK/api.key" 2>/dev/null & pids+=($!); done
wait_port "$API"

# --- the gateway: inspect + inject for api.anthropic.com, passthrough for pass.test
GW=$(free_port)
cat > "$WORK/gateway.toml" <<TOML
[gateway]
upstream_ca = ["$WORK/ca.pem"]
[[rule]]
name = "inject"
any = true
hosts = ["api.anthropic.com"]
ports = [$API]
tls = "inspect"
http2 = false
addresses = ["127.0.0.1"]
[[rule]]
name = "tunnel"
any = true
hosts = ["pass.test"]
ports = [$API]
addresses = ["127.0.0.1"]
[[credential]]
name = "ANTHROPIC_API_KEY"
env = "BENCH_KEY"
endpoints = [{ host = "api.anthropic.com", port = $API }]
callers = [{ any = true }]
TOML
start_gateway() {
  "$NESTBOX" gateway --policy "$WORK/gateway.toml" --listen "127.0.0.1:$GW" --dir "$WORK/state" \
    --resolve api.anthropic.com=127.0.0.1 --resolve pass.test=127.0.0.1 2>>"$WORK/gateway.log" & pids+=($!)
  GW_PID=$!
  wait_port "$GW"
  for _ in $(seq 200); do [ -S "$WORK/state/control.sock" ] && break; sleep 0.05; done
}
start_gateway
"$NESTBOX" gateway ca --dir "$WORK/state" > "$WORK/gateway-ca.pem" 2>/dev/null

# --- the relay alone, for the passthrough comparison
RELAY=$(free_port)
"$NESTBOX" relay --listen "127.0.0.1:$RELAY" --no-upstream --max-tunnels 4000 \
  --allow "pass.test:$API" --allow "127.0.0.1:$API" --resolve pass.test=127.0.0.1 2>"$WORK/relay.log" & pids+=($!)
wait_port "$RELAY"

# --- mitmproxy with the same rewrite
MITM=$(free_port)
mitmdump -q --listen-host 127.0.0.1 --listen-port "$MITM" --set confdir="$WORK/mitm" \
  --set ssl_verify_upstream_trusted_ca="$WORK/ca.pem" -s "$here/gateway/mitm_addon.py" \
  >"$WORK/mitm.log" 2>&1 & pids+=($!)
MITM_PID=$!
wait_port "$MITM"
for _ in $(seq 100); do [ -s "$WORK/mitm/mitmproxy-ca-cert.pem" ] && break; sleep 0.05; done

load() { python3 "$here/gateway/load.py" client --port "$API" "$@"; }
direct=(--name api.anthropic.com --cafile "$WORK/ca.pem" --header "x-api-key: $BENCH_KEY")
via_gw=(--name api.anthropic.com --proxy "127.0.0.1:$GW" --cafile "$WORK/gateway-ca.pem" --header "x-api-key: $PH")
via_mitm=(--name api.anthropic.com --proxy "127.0.0.1:$MITM" --cafile "$WORK/mitm/mitmproxy-ca-cert.pem" --header "x-api-key: $PH")
pass_gw=(--name pass.test --proxy "127.0.0.1:$GW" --cafile "$WORK/ca.pem" --header "x-api-key: $BENCH_KEY")
pass_relay=(--name pass.test --proxy "127.0.0.1:$RELAY" --cafile "$WORK/ca.pem" --header "x-api-key: $BENCH_KEY")
field() { python3 -c "import json,sys; print(json.loads(sys.argv[1])[sys.argv[2]])" "$1" "$2"; }

# warm up (leaf certificates, mitmproxy's CA, Python imports)
for v in direct via_gw via_mitm pass_gw pass_relay; do declare -n a=$v; load "${a[@]}" --requests 50 >/dev/null; done

echo "== 1. header injection over inspected TLS (HTTP/1.1 keep-alive, 8 connections, 3 interleaved rounds, best)"
declare -A best_rps
for round in 1 2 3; do
  for v in direct via_gw via_mitm; do
    declare -n a=$v
    n=8000; [ $v = via_mitm ] && n=2400
    out=$(load "${a[@]}" --conns 8 --requests $n)
    [ "$(field "$out" errors)" = 0 ] || { echo "$v: errors: $out" >&2; exit 1; }
    r=$(field "$out" rps)
    best_rps[$v]=$(python3 -c "print(max(float('${best_rps[$v]:-0}'), $r))")
  done
done
printf '  %-28s %10s req/s\n' "direct" "${best_rps[direct]}" "gateway (inspect + inject)" "${best_rps[via_gw]}" "mitmproxy (same rewrite)" "${best_rps[via_mitm]}"
python3 -c "print('  gateway / mitmproxy throughput: %.1fx' % (${best_rps[via_gw]} / ${best_rps[via_mitm]}))"

echo "== 1b. latency: one connection, sequential requests, 3 interleaved rounds, median of each percentile"
echo "     (added = through the proxy - direct)"
lat() {
  declare -n a=$1
  out=$(load "${a[@]}" --conns 1 --requests "$2")
  [ "$(field "$out" errors)" = 0 ] || { echo "$1: errors: $out" >&2; exit 1; }
  echo "$1 $(field "$out" p50_ms) $(field "$out" p99_ms)"
}
for round in 1 2 3; do
  lat direct 2000; lat via_gw 2000; lat via_mitm 1000; lat pass_gw 2000; lat pass_relay 2000
done > "$WORK/latency.txt"
python3 - "$WORK/latency.txt" <<'PY'
import statistics, sys
rows = {}
for line in open(sys.argv[1]):
    name, p50, p99 = line.split()
    rows.setdefault(name, []).append((float(p50), float(p99)))
med = {k: (statistics.median(a for a, _ in v), statistics.median(b for _, b in v)) for k, v in rows.items()}
d50, d99 = med["direct"]
for name, label in [("direct", "direct"), ("via_gw", "gateway (inspect + inject)"),
                    ("via_mitm", "mitmproxy (same rewrite)"), ("pass_gw", "gateway passthrough"),
                    ("pass_relay", "relay alone")]:
    p50, p99 = med[name]
    extra = "" if name == "direct" else f"   added p50 {p50 - d50:6.3f} ms, p99 {p99 - d99:6.3f} ms"
    print(f"  {label:28s} p50 {p50:7.3f} ms  p99 {p99:7.3f} ms{extra}")
PY

echo "== 2. passthrough tunnel: gateway vs relay alone (8 connections x 1,000 requests, 3 interleaved rounds, best)"
declare -A pass_rps
for round in 1 2 3; do
  for v in pass_gw pass_relay direct; do
    declare -n a=$v
    out=$(load "${a[@]}" --conns 8 --requests 8000)
    [ "$(field "$out" errors)" = 0 ] || { echo "$v: errors: $out" >&2; exit 1; }
    r=$(field "$out" rps)
    pass_rps[$v]=$(python3 -c "print(max(float('${pass_rps[$v]:-0}'), $r))")
  done
done
printf '  %-28s %10s req/s\n' "gateway passthrough" "${pass_rps[pass_gw]}" "relay alone" "${pass_rps[pass_relay]}" \
  "direct" "${pass_rps[direct]}"

echo "== 3. gateway memory with 1,000 open connections (a fresh gateway for each count)"
echo "  after the runs above: $(( $(rss_kib $GW_PID) / 1024 )) MiB"
restart_gateway() {
  kill "$GW_PID"; wait "$GW_PID" 2>/dev/null || true
  rm -f "$WORK/state/control.sock"
  start_gateway
  load "${via_gw[@]}" --requests 10 >/dev/null   # its leaf certificate, like a warm gateway
  echo "  fresh, at rest: $(( $(rss_kib $GW_PID) / 1024 )) MiB"
}
restart_gateway
hold() {
  local v=$1
  declare -n a=$v
  coproc HOLD { load "${a[@]}" --idle 1000; }
  read -r line <&"${HOLD[0]}"
  sleep 1
  echo "  $2: $(( $(rss_kib ${3:-$GW_PID}) / 1024 )) MiB RSS ($line)"
  eval "exec ${HOLD[1]}>&-"
  wait "$HOLD_PID" 2>/dev/null || true
}
hold pass_gw "1,000 passthrough tunnels"
restart_gateway
hold via_gw "1,000 inspected connections"
echo "  mitmproxy for comparison, before: $(( $(rss_kib $MITM_PID) / 1024 )) MiB"
hold via_mitm "mitmproxy, 1,000 inspected connections" "$MITM_PID"
