"""Opens N tunnels through the relay to the echo server, sends one round trip on each (so
both directions have carried data, as after a TLS handshake), leaves them idle and reads the
relay's VmRSS and fd count. Prints the RSS before and after."""
import resource, socket, sys, time

relay, echo, pid, n = (int(a) for a in sys.argv[1:5])
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))

def status(field):
    for line in open(f"/proc/{pid}/status"):
        if line.startswith(field):
            return line.split(":")[1].strip()

def fds():
    import os
    return len(os.listdir(f"/proc/{pid}/fd"))

before = status("VmRSS")
req = f"CONNECT 127.0.0.1:{echo} HTTP/1.1\r\n\r\n".encode()
socks = []
for i in range(n):
    s = socket.create_connection(("127.0.0.1", relay))
    s.sendall(req)
    head = b""
    while not head.endswith(b"\r\n\r\n"):
        head += s.recv(1)
    assert head.startswith(b"HTTP/1.1 200"), (i, head)
    s.sendall(b"hello"); assert s.recv(5) == b"hello"
    socks.append(s)
time.sleep(0.5)
print(f"  relay VmRSS before {before}, with {n} idle tunnels {status('VmRSS')} "
      f"(VmHWM {status('VmHWM')}), relay fds {fds()}")
for s in socks:
    s.close()
