"""Per-CONNECT added latency: time N sequential (connect, CONNECT, 200, 1-byte echo, close)
through the relay (to the IP, and to `localhost`, which the relay resolves) against N
sequential (connect, 1-byte echo, close) straight to the echo server. Prints the best of 5
rounds of each, interleaved, and the difference per connection."""
import socket, sys, time

relay, echo, n = int(sys.argv[1]), int(sys.argv[2]), 1000

def direct():
    s = socket.create_connection(("127.0.0.1", echo))
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    s.sendall(b"x"); assert s.recv(1) == b"x"
    s.close()

def request(host):
    return f"CONNECT {host}:{echo} HTTP/1.1\r\nHost: {host}:{echo}\r\n\r\n".encode()

def via_relay(req):
    s = socket.create_connection(("127.0.0.1", relay))
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    s.sendall(req)
    head = b""
    while not head.endswith(b"\r\n\r\n"):
        head += s.recv(1)
    assert head.startswith(b"HTTP/1.1 200"), head
    s.sendall(b"x"); assert s.recv(1) == b"x"
    s.close()

by_ip, by_name = request("127.0.0.1"), request("localhost")
variants = (("direct", direct), ("relay", lambda: via_relay(by_ip)),
            ("relay-name", lambda: via_relay(by_name)))
best = {name: 1e9 for name, _ in variants}
for _ in range(5):
    for name, f in variants:
        t = time.perf_counter()
        for _ in range(n):
            f()
        best[name] = min(best[name], (time.perf_counter() - t) / n)
print(f"  direct {best['direct']*1e3:.3f} ms/conn; relay by IP {best['relay']*1e3:.3f} ms/conn, "
      f"added {(best['relay']-best['direct'])*1e3:.3f} ms per CONNECT; relay by name (localhost, "
      f"getaddrinfo) {best['relay-name']*1e3:.3f} ms/conn, added "
      f"{(best['relay-name']-best['direct'])*1e3:.3f} ms")
