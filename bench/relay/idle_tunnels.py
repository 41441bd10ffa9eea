"""Opens N tunnels through a proxy to the echo server, one round trip on each, leaves them idle
and prints the summed RSS of the proxy's processes (the given pids and their descendants).
Usage: idle_tunnels.py PROXY_PORT ECHO_PORT N PID [PID...] [--auth user:password]"""
import base64, os, resource, socket, sys, time

args = [a for a in sys.argv[1:] if not a.startswith("--auth")]
auth = b""
for a in sys.argv[1:]:
    if a.startswith("--auth="):
        auth = b"Proxy-Authorization: Basic " + base64.b64encode(a[7:].encode()) + b"\r\n"
proxy, echo, n = int(args[0]), int(args[1]), int(args[2])
roots = [int(p) for p in args[3:]]
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))

def tree(pids):
    children = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                stat = open(f"/proc/{d}/stat").read()
                children.setdefault(int(stat[stat.rfind(")") + 2:].split()[1]), []).append(int(d))
            except OSError:
                pass
    out, todo = [], list(pids)
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(children.get(p, []))
    return out

def rss_kib():
    total = 0
    for p in tree(roots):
        try:
            for line in open(f"/proc/{p}/status"):
                if line.startswith("VmRSS"):
                    total += int(line.split()[1])
        except OSError:
            pass
    return total

before = rss_kib()
req = f"CONNECT 127.0.0.1:{echo} HTTP/1.1\r\n".encode() + auth + b"\r\n"
socks = []
for i in range(n):
    s = socket.create_connection(("127.0.0.1", proxy))
    s.sendall(req)
    head = b""
    while not head.endswith(b"\r\n\r\n"):
        c = s.recv(1)
        if not c:
            print(f"  closed after {i} tunnels: {head!r}")
            break
        head += c
    if not head.startswith(b"HTTP/1.") or b" 200" not in head.split(b"\r\n")[0]:
        print(f"  refused after {i} tunnels: {head[:60]!r}")
        break
    s.sendall(b"hello"); assert s.recv(5) == b"hello"
    socks.append(s)
time.sleep(0.5)
print(f"  {len(socks)} idle tunnels: RSS {before/1024:.1f} MiB before, {rss_kib()/1024:.1f} MiB with them")
for s in socks:
    s.close()
