"""What an MCP tool call costs next to a built-in tool, what a stdio session's start
costs (a session per run against one per process), and what a call of our own `/mcp`
endpoint costs.

The MCP server is the tests' `MCPServer` (tests/fakes/mcp_server.py: `add`), over stdio
and over streamable HTTP on loopback; the built-in tool is `read_file` of a small
file (its own thread hop included). Calls go through the same `Tool.run` the runner
uses, one at a time and 8 at once. The `/mcp` figures are calls of a one-turn
scripted agent on `orchestrator serve` (`server.mcp: true`, memory storage) by the
`mcp` package's client: each call is a whole run.

    .venv/bin/python -m bench.mcp_bench [--calls 500] [--starts 5]
"""

from __future__ import annotations

import argparse
import logging
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
        per_run, per_process = [], []
        async with McpHub.open({"s": stdio}, root) as shared:
            await shared.session("s")
            for _ in range(starts):  # a run's one call, the session already open
                started = time.perf_counter()
                await (await mcp_tool(shared, "s")).run({"a": 1, "b": 2}, context())
                per_process.append(time.perf_counter() - started)
        for _ in range(starts):  # a run's one call with a session of its own
            started = time.perf_counter()
            async with McpHub.open({"s": stdio}, root) as own:
                await (await mcp_tool(own, "s")).run({"a": 1, "b": 2}, context())
            per_run.append(time.perf_counter() - started)
        out["a run's one stdio MCP call, session per process, median ms"] = (
            f"{statistics.median(per_process) * 1000:.1f}"
        )
        out["a run's one stdio MCP call, session per run (start, call, stop), median s"] = (
            f"{statistics.median(per_run):.2f}"
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
        for parallel in (1, 8):
            value = await endpoint_rate(root, calls // 5, parallel)
            out[f"our /mcp endpoint, {parallel} at once, runs/s"] = f"{value:,.0f}"
    return out


async def endpoint_rate(root: Path, calls: int, parallel: int) -> float:
    """Calls per second of a one-turn agent through `/mcp` on a real server."""
    import httpx2
    import yaml
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    from orchestrator.config import load_config
    from orchestrator.server.app import RunningServer, serve

    (root / "agents").mkdir(exist_ok=True)
    spec = {
        "description": "echo",
        "instructions": "i",
        "script": {"token_delay": 0, "turns": [{"say": "ok"}]},
    }
    (root / "agents" / "echo.yaml").write_text(yaml.safe_dump(spec))
    data = {
        "server": {"host": "127.0.0.1", "port": 0, "mcp": True, "resume_runs": False},
        "storage": "memory://",
        "models": {"default": {"provider": "scripted"}},
        "subagents_dir": "agents",
    }
    (root / "server.yaml").write_text(yaml.safe_dump(data))
    config = load_config(root / "server.yaml")
    async with trio.open_nursery() as nursery:
        server: RunningServer = await nursery.start(serve, config)
        url = f"http://{server.host}:{server.port}/mcp"
        per = calls // parallel

        async def caller() -> None:
            async with (
                httpx2.AsyncClient() as http,
                Client(streamable_http_client(url, http_client=http)) as client,
            ):
                await client.call_tool("echo", {"task": "warm up"})
                await ready.wait()
                for _ in range(per):
                    assert not (await client.call_tool("echo", {"task": "t"})).is_error

        ready = trio.Event()
        async with trio.open_nursery() as callers:
            for _ in range(parallel):
                callers.start_soon(caller)
            await trio.sleep(2)  # the sessions are open
            started = time.perf_counter()
            ready.set()
        elapsed = time.perf_counter() - started
        await server.shutdown()
    return per * parallel / elapsed


def parser() -> argparse.ArgumentParser:
    """The command line (docs/benchmarks.md shows it; tests/unit/test_doc_examples.py parses it)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=500)
    parser.add_argument("--starts", type=int, default=5)
    return parser


def main() -> None:
    args = parser().parse_args()
    logging.disable(logging.INFO)  # the HTTP clients and the MCP SDK log every request
    for key, value in trio.run(bench, args.calls, args.starts).items():
        print(f"{key}: {value}")


if __name__ == "__main__":
    main()
