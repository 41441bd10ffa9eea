#!/usr/bin/env bash
# The gateway in one minute, on loopback only:
#   1. a local TLS server stands in for api.anthropic.com (its own throw-away CA);
#   2. `nestbox gateway` holds the real key (in its own environment) and a policy binding it
#      to that API, for caged workers only;
#   3. a caged step calls the API with the placeholder; the server receives the real key, the
#      step only ever saw the placeholder;
#   4. the same placeholder sent elsewhere is refused, with the reason.
#
# Needs: a built nestbox (cargo build --release), python3, openssl, curl.
# Usage: examples/gateway-demo.sh   (NESTBOX=/path/to/nestbox to choose the binary)
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
NESTBOX="${NESTBOX:-}"
for candidate in "$here/target/release/nestbox" "$here/target/debug/nestbox" \
                 "${CARGO_TARGET_DIR:-/nonexistent}/release/nestbox" \
                 "${CARGO_TARGET_DIR:-/nonexistent}/debug/nestbox" "$(command -v nestbox || true)"; do
  [ -n "$NESTBOX" ] && break
  [ -n "$candidate" ] && [ -x "$candidate" ] && NESTBOX="$candidate"
done
[ -x "$NESTBOX" ] || { echo "build nestbox first: cargo build --release (or set NESTBOX=)" >&2; exit 1; }
for tool in python3 openssl curl; do
  command -v "$tool" >/dev/null || { echo "$tool is needed: apt-get install -y $tool" >&2; exit 1; }
done

work="$(mktemp -d /tmp/nestbox-gateway-demo.XXXXXX)"
chmod 755 "$work"
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$work"; }
trap cleanup EXIT
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
say() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

say "1. a TLS server standing in for api.anthropic.com (test CA in $work)"
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 1 \
  -subj "/CN=demo test CA" -keyout "$work/test-ca.key" -out "$work/test-ca.pem" 2>/dev/null
openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -subj "/CN=api.anthropic.com" \
  -keyout "$work/api.key" -out "$work/api.csr" 2>/dev/null
printf 'subjectAltName=DNS:api.anthropic.com\n' > "$work/san"
openssl x509 -req -in "$work/api.csr" -CA "$work/test-ca.pem" -CAkey "$work/test-ca.key" \
  -CAcreateserial -days 1 -extfile "$work/san" -out "$work/api.pem" 2>/dev/null
api_port="$(free_port)"
cat > "$work/api.py" <<'PY'
import http.server, json, ssl, sys
port, cert, key, log = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]
class Api(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("content-length") or 0))
        with open(log, "a") as f:
            f.write(json.dumps({"path": self.path, "x-api-key": self.headers.get("x-api-key")}) + "\n")
        out = b'{"type":"message","content":[{"type":"text","text":"hello from the stand-in API"}]}\n'
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)
    def log_message(self, *args): pass
server = http.server.ThreadingHTTPServer(("127.0.0.1", port), Api)
ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
ctx.load_cert_chain(cert, key)
server.socket = ctx.wrap_socket(server.socket, server_side=True)
server.serve_forever()
PY
python3 "$work/api.py" "$api_port" "$work/api.pem" "$work/api.key" "$work/received.jsonl" &
pids+=($!)
echo "listening on 127.0.0.1:$api_port"

say "2. the gateway, holding the real key"
gw_port="$(free_port)"
cat > "$work/gateway.toml" <<TOML
[gateway]
upstream_ca = ["$work/test-ca.pem"]   # the demo server's CA (real APIs verify with system roots)

[[rule]]
name = "workers call the model API"
cell = "worker"
hosts = ["api.anthropic.com"]
ports = [$api_port]
tls = "inspect"
addresses = ["127.0.0.1"]             # demo only: the stand-in API listens on loopback

[[credential]]
name = "ANTHROPIC_API_KEY"
env = "ANTHROPIC_API_KEY"
endpoints = [{ host = "api.anthropic.com", port = $api_port, path = "/v1/**" }]
callers = [{ cell = "worker" }]
TOML
"$NESTBOX" policy check "$work/gateway.toml"
ANTHROPIC_API_KEY="sk-ant-demo-REAL-KEY-only-the-gateway-holds" \
  "$NESTBOX" gateway --policy "$work/gateway.toml" --listen "127.0.0.1:$gw_port" \
  --dir "$work/state" --audit "$work/audit.jsonl" \
  --resolve "api.anthropic.com=127.0.0.1" 2> "$work/gateway.log" &
pids+=($!)
for _ in $(seq 100); do [ -S "$work/state/control.sock" ] && break; sleep 0.05; done
cat "$work/gateway.log"

say "3. a caged step calls the API with the placeholder"
url="https://api.anthropic.com:$api_port/v1/messages"
"$NESTBOX" run --gateway "http://127.0.0.1:$gw_port" --gateway-dir "$work/state" \
  --credential ANTHROPIC_API_KEY -- /bin/sh -c "
    echo \"the step holds ANTHROPIC_API_KEY=\$ANTHROPIC_API_KEY\"
    curl -sS -H \"x-api-key: \$ANTHROPIC_API_KEY\" -H 'content-type: application/json' \
         -d '{\"model\":\"demo\",\"messages\":[]}' $url"
echo "the server received:"
cat "$work/received.jsonl"

say "4. the same placeholder sent to another path is refused"
"$NESTBOX" run --gateway "http://127.0.0.1:$gw_port" --gateway-dir "$work/state" \
  --credential ANTHROPIC_API_KEY -- /bin/sh -c "
    curl -sS -H \"x-api-key: \$ANTHROPIC_API_KEY\" -d '{}' \
         -w '\nHTTP %{http_code}, X-Nestbox-Denied: %header{x-nestbox-denied}\n' \
         https://api.anthropic.com:$api_port/admin/keys"
echo "the server received nothing more: $(wc -l < "$work/received.jsonl") request(s) in all"

say "the gateway's audit lines (credential names, never values)"
cut -c1-240 "$work/audit.jsonl"
