#!/usr/bin/env python3
"""Load for bench/gateway.sh (bench/gateway/load.py): an HTTPS server standing in for an API, and a client that reaches
it directly or through a proxy (CONNECT, then TLS inside), with keep-alive.

  load.py server PORT CERT KEY
  load.py client --name HOST --port PORT [--proxy H:P] [--addr IP] --cafile F
                         [--header 'k: v'] [--conns C] [--requests N] [--idle N]

The client prints one JSON line: requests per second over all connections, latency
percentiles, errors; with --idle N it opens N connections (tunnel, TLS, one request each),
prints {"ready": N}, holds them until stdin closes, then prints the summary.
"""
import argparse
import asyncio
import json
import os
import ssl
import sys
import time

BODY = b'{"type":"message","content":[{"type":"text","text":"ok"}]}'


EXPECT = os.environ.get("BENCH_EXPECT_KEY", "").encode()


async def serve_conn(reader, writer):
    try:
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            length, key = 0, None
            for line in head.split(b"\r\n"):
                if line[:15].lower() == b"content-length:":
                    length = int(line[15:])
                elif line[:10].lower() == b"x-api-key:":
                    key = line[10:].strip()
            if length:
                await reader.readexactly(length)
            # the key must have been put in (by the proxy, or by a direct client)
            status = b"200 OK" if not EXPECT or key == EXPECT else b"401 Unauthorized"
            writer.write(b"HTTP/1.1 %s\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n%s"
                         % (status, len(BODY), BODY))
            await writer.drain()
    except (asyncio.IncompleteReadError, ConnectionError, ssl.SSLError, asyncio.LimitOverrunError):
        pass
    finally:
        writer.close()


async def server(port, cert, key):
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(cert, key)
    ctx.set_alpn_protocols(["http/1.1"])
    srv = await asyncio.start_server(serve_conn, "127.0.0.1", port, ssl=ctx, reuse_port=True, backlog=4096)
    async with srv:
        await srv.serve_forever()


async def open_conn(a, ctx):
    if a.proxy:
        host, port = a.proxy.rsplit(":", 1)
        reader, writer = await asyncio.open_connection(host, int(port))
        writer.write(f"CONNECT {a.name}:{a.port} HTTP/1.1\r\nHost: {a.name}:{a.port}\r\n\r\n".encode())
        await writer.drain()
        head = await reader.readuntil(b"\r\n\r\n")
        if not head.startswith(b"HTTP/1.1 200"):
            raise ConnectionError(head.split(b"\r\n")[0].decode())
    else:
        reader, writer = await asyncio.open_connection(a.addr, a.port)
    await writer.start_tls(ctx, server_hostname=a.name)
    return reader, writer


def request_bytes(a):
    lines = [f"POST {a.path} HTTP/1.1", f"Host: {a.name}:{a.port}", "Content-Type: application/json",
             "Content-Length: 2"]
    lines += a.header
    return ("\r\n".join(lines) + "\r\n\r\n{}").encode()


async def one(reader, writer, req):
    writer.write(req)
    await writer.drain()
    head = await reader.readuntil(b"\r\n\r\n")
    status = head[9:12]
    length = 0
    for line in head.split(b"\r\n"):
        if line[:15].lower() == b"content-length:":
            length = int(line[15:])
    await reader.readexactly(length)
    return status


async def worker(a, ctx, count, lat, errors):
    req = request_bytes(a)
    try:
        reader, writer = await open_conn(a, ctx)
    except Exception as e:  # noqa: BLE001 - any failure counts as one error
        errors.append(str(e))
        return
    for _ in range(count):
        t = time.perf_counter()
        try:
            status = await one(reader, writer, req)
        except Exception as e:  # noqa: BLE001
            errors.append(str(e))
            return
        if status != b"200":
            errors.append(status.decode())
        lat.append(time.perf_counter() - t)
    writer.close()


def pct(sorted_list, p):
    if not sorted_list:
        return None
    return sorted_list[min(len(sorted_list) - 1, int(len(sorted_list) * p))]


async def client(a):
    ctx = ssl.create_default_context(cafile=a.cafile)
    ctx.set_alpn_protocols(["http/1.1"])
    if a.idle:
        conns, errors = [], []
        req = request_bytes(a)
        sem = asyncio.Semaphore(50)

        async def opener():
            async with sem:
                try:
                    r, w = await open_conn(a, ctx)
                    await one(r, w, req)
                    conns.append((r, w))
                except Exception as e:  # noqa: BLE001
                    errors.append(str(e))
        await asyncio.gather(*(opener() for _ in range(a.idle)))
        print(json.dumps({"ready": len(conns), "errors": len(errors), "first_error": errors[:1]}), flush=True)
        await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)
        return
    lat, errors = [], []
    per = a.requests // a.conns
    start = time.perf_counter()
    await asyncio.gather(*(worker(a, ctx, per, lat, errors) for _ in range(a.conns)))
    took = time.perf_counter() - start
    lat.sort()
    print(json.dumps({
        "requests": len(lat), "seconds": round(took, 3), "rps": round(len(lat) / took, 1),
        "p50_ms": round(pct(lat, 0.50) * 1000, 3) if lat else None,
        "p99_ms": round(pct(lat, 0.99) * 1000, 3) if lat else None,
        "errors": len(errors), "first_error": errors[:1],
    }), flush=True)


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "server":
        port, cert, key = int(sys.argv[2]), sys.argv[3], sys.argv[4]
        asyncio.run(server(port, cert, key))
        return
    p = argparse.ArgumentParser()
    p.add_argument("mode", choices=["client"])
    p.add_argument("--name", required=True)
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--addr", default="127.0.0.1")
    p.add_argument("--proxy")
    p.add_argument("--cafile", required=True)
    p.add_argument("--path", default="/v1/messages")
    p.add_argument("--header", action="append", default=[])
    p.add_argument("--conns", type=int, default=1)
    p.add_argument("--requests", type=int, default=1000)
    p.add_argument("--idle", type=int, default=0)
    a = p.parse_args()
    asyncio.run(client(a))


if __name__ == "__main__":
    main()
