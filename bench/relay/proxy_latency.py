"""Cost of a new connection through each proxy: N sequential (connect, CONNECT, 200, 1-byte
echo, close) against N sequential direct (connect, 1-byte echo, close), interleaved in rounds,
best round of each. Usage: proxy_latency.py ECHO_PORT N name=host:port[@user:password] ..."""
import base64, socket, sys, time

echo, n = int(sys.argv[1]), int(sys.argv[2])
proxies = {}
for arg in sys.argv[3:]:
    name, spec = arg.split("=", 1)
    addr, _, cred = spec.partition("@")
    host, port = addr.rsplit(":", 1)
    auth = b""
    if cred:
        auth = b"Proxy-Authorization: Basic " + base64.b64encode(cred.encode()) + b"\r\n"
    proxies[name] = (host, int(port), auth)

def direct():
    s = socket.create_connection(("127.0.0.1", echo))
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    s.sendall(b"x"); assert s.recv(1) == b"x"
    s.close()

def via(host, port, auth):
    req = f"CONNECT 127.0.0.1:{echo} HTTP/1.1\r\nHost: 127.0.0.1:{echo}\r\n".encode() + auth + b"\r\n"
    def once():
        s = socket.create_connection((host, port))
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        s.sendall(req)
        head = b""
        while not head.endswith(b"\r\n\r\n"):
            chunk = s.recv(1)
            if not chunk:
                raise SystemExit(f"proxy {host}:{port} closed: {head!r}")
            head += chunk
        assert b" 200" in head.split(b"\r\n")[0], head
        s.sendall(b"x"); assert s.recv(1) == b"x"
        s.close()
    return once

variants = [("direct", direct)] + [(k, via(*v)) for k, v in proxies.items()]
best = {name: 1e9 for name, _ in variants}
for _ in range(5):
    for name, f in variants:
        t = time.perf_counter()
        for _ in range(n):
            f()
        best[name] = min(best[name], (time.perf_counter() - t) / n)
for name, _ in variants:
    extra = "" if name == "direct" else f", added {(best[name] - best['direct']) * 1e3:.3f} ms"
    print(f"  {name:12} {best[name] * 1e3:.3f} ms per new connection{extra}")
