"""Drives `nestbox mcp` with the official MCP Python SDK (PyPI `mcp`), as an agent would.

Usage: client.py SCENARIO NESTBOX_BIN [SERVER ARGS...]

Prints one JSON object per line: what the client saw at each step (results dumped as they
came over the wire, camelCase). The Rust tests in main.rs assert on them.
"""

import asyncio
import json
import os
import sys

from mcp import ClientSession, StdioServerParameters, stdio_client


def dump(label, value):
    if hasattr(value, "model_dump"):
        value = value.model_dump(mode="json", by_alias=True, exclude_none=True)
    print(json.dumps({"step": label, "value": value}), flush=True)


async def call(session, label, tool, args):
    result = await session.call_tool(tool, args)
    dump(label, result)
    return result.model_dump(mode="json", by_alias=True, exclude_none=True)


async def scenario(name, session):
    if name == "handshake":
        dump("tools", await session.list_tools())
        await session.send_ping()
        dump("ping", "ok")
    elif name == "run":
        await call(session, "caged", "run", {"command": "echo hello; cat /etc/shadow; echo rc=$?"})
        await call(session, "refused", "run", {"command": "cd /tmp && sudo rm -rf --no-preserve-root /"})
        await call(session, "needs_approval", "run", {"command": "git push --force origin main"})
        await call(session, "bad_args", "run", {"comand": "ls"})
    elif name == "background":
        started = await call(session, "spawn", "run", {"command": "for i in 1 2 3; do echo tick $i; sleep 0.2; done", "background": True})
        job = started["structuredContent"]["job_id"]
        for _ in range(100):
            polled = await call(session, "poll", "process", {"action": "poll", "job_id": job})
            if polled["structuredContent"]["state"] != "running":
                break
            await asyncio.sleep(0.1)
        await call(session, "log", "process", {"action": "log", "job_id": job, "offset": 0})
        await call(session, "list", "process", {"action": "list"})
        slow = await call(session, "spawn_slow", "run", {"command": "sleep 300", "background": True})
        slow_job = slow["structuredContent"]["job_id"]
        await call(session, "wait_short", "process", {"action": "wait", "job_id": slow_job, "timeout": 0.5})
        await call(session, "kill", "process", {"action": "kill", "job_id": slow_job})
    else:
        raise SystemExit(f"unknown scenario {name}")


async def main():
    name, binary, *args = sys.argv[1:]
    # The SDK starts servers with a minimal environment; pass on what the example hook reads.
    env = {k: v for k, v in os.environ.items() if k == "NESTBOX_HOOK_LOG"}
    params = StdioServerParameters(command=binary, args=["mcp", *args], env=env)
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write) as session:
            dump("initialize", await session.initialize())
            await scenario(name, session)


asyncio.run(main())
