"""A loopback echo server for the relay benchmarks (asyncio; thousands of connections)."""
import asyncio, sys

async def echo(reader, writer):
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    except ConnectionError:
        pass
    finally:
        writer.close()

async def main(port):
    server = await asyncio.start_server(echo, "127.0.0.1", port, backlog=4096)
    async with server:
        await server.serve_forever()

asyncio.run(main(int(sys.argv[1])))
