"""What an MCP tool call costs next to a built-in tool, and what a stdio session's start costs.

The MCP server is the tests' `MCPServer` (tests/fakes/mcp_server.py: `add`), over stdio
and over streamable HTTP on loopback; the built-in tool is `read_file` of a small
file (its own thread hop included). Calls go through the same `Tool.run` the runner
uses, one at a time and 8 at once.

    .venv/bin/python -m bench.mcp_bench [--calls 500] [--starts 5]
"""

from __future__ import annotations

import argparse
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import trio

from agents.core.usage import UsageNode
from agents.tools.base import InstanceState, Tool, ToolContext
from agents.tools.builtin import builtin_tools
from orchestrator.config import McpServerConfig
from orchestrator.mcp.hub import McpHub
from orchestrator.mcp.tool import McpTool

SERVER = str(Path(__file__).resolve().parent.parent / "tests" / "fakes" / "mcp_server.py")


def context() -> ToolContext:
    return ToolContext(
        call_id="c",
        agent_id="bench",
        agent_key=None,
        depth=0,
        usage=UsageNode(),
        instance=InstanceState(),
        start_background=lambda label, work: None,
    )


async def rate(tool: Tool, args: dict[str, Any], calls: int, parallel: int) -> float:
    """Calls per second of `tool` with `parallel` callers."""
    ctx = context()
    per = calls // parallel

    async def caller() -> None:
        for _ in range(per):
            await tool.run(args, ctx)

    started = time.perf_counter()
    async with trio.open_nursery() as nursery:
        for _ in range(parallel):
            nursery.start_soon(caller)
    return per * parallel / (time.perf_counter() - started)


async def mcp_tool(hub: McpHub, server: str) -> Tool:
    info = (await hub.tools(server))[f"{server}__add"]
    return McpTool(hub, info, 100_000)


async def bench(calls: int, starts: int) -> dict[str, str]:
    out: dict[str, str] = {}
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        (root / "f.txt").write_text("hello")
        import httpx

        async with httpx.AsyncClient() as client:
            builtin = builtin_tools(root, client, http_timeout=10)["read_file"]
            for parallel in (1, 8):
                value = await rate(builtin, {"path": "f.txt"}, calls, parallel)
                out[f"built-in read_file, {parallel} at once, calls/s"] = f"{value:,.0f}"
        stdio = McpServerConfig(command=sys.executable, args=[SERVER])
        times = []
        for _ in range(starts):
            async with McpHub.open({"s": stdio}, root) as hub:
                started = time.perf_counter()
                await hub.session("s")
                times.append(time.perf_counter() - started)
        out["stdio session start (process, handshake, tool list), median s"] = (
            f"{statistics.median(times):.2f} (min {min(times):.2f}, max {max(times):.2f})"
        )
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        process = await trio.lowlevel.open_process(
            [sys.executable, SERVER, "--http", str(port)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            for _ in range(200):
                try:
                    stream = await trio.open_tcp_stream("127.0.0.1", port)
                    await stream.aclose()
                    break
                except OSError:
                    await trio.sleep(0.1)
            http = McpServerConfig(url=f"http://127.0.0.1:{port}/mcp")
            async with McpHub.open({"s": stdio, "h": http}, root) as hub:
                for name, server in (("stdio", "s"), ("HTTP", "h")):
                    tool = await mcp_tool(hub, server)
                    for parallel in (1, 8):
                        value = await rate(tool, {"a": 1, "b": 2}, calls, parallel)
                        out[f"MCP over {name}, {parallel} at once, calls/s"] = f"{value:,.0f}"
        finally:
            process.kill()
            await process.wait()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=500)
    parser.add_argument("--starts", type=int, default=5)
    args = parser.parse_args()
    for key, value in trio.run(bench, args.calls, args.starts).items():
        print(f"{key}: {value}")


if __name__ == "__main__":
    main()
