"""`orchestrator mcp`: our subagents as MCP tools, driven by the `mcp` package's own client
over stdio against a real server: a tree that completes with progress, and a cancel."""

from __future__ import annotations

import itertools
import sys
from pathlib import Path
from typing import Any

import pytest
import trio
from websockets.trio.client import connect

from tests.helpers import REPO
from tests.server_helpers import demo_config, request, running_server

pytest.importorskip("mcp", reason="MCP tests need the `mcp` extra: pip install -e '.[dev]'")


def bridge(url: str) -> Any:
    from mcp.client.stdio import StdioServerParameters

    return StdioServerParameters(
        command=sys.executable,
        args=["-m", "orchestrator", "mcp", "--url", url],
        env={"PYTHONPATH": str(REPO)},
        cwd=str(REPO),
    )


async def runs(url: str) -> list[dict[str, Any]]:
    async with connect(url) as ws:
        listed: list[dict[str, Any]] = (await request(ws, op="runs", id=1))["runs"]
        return listed


async def test_an_mcp_client_runs_a_tree_and_sees_it_move(tmp_path: Path) -> None:
    from mcp import Client

    config = demo_config(tmp_path, token_delay=0.002)
    async with running_server(config) as server, Client(bridge(server.url)) as client:
        tools = {tool.name: tool for tool in (await client.list_tools()).tools}
        assert {"planner", "researcher", "critic"} <= set(tools)
        assert tools["planner"].input_schema["required"] == ["task"]
        seen: list[tuple[float, float | None, str | None]] = []

        async def on_progress(progress: float, total: float | None, message: str | None) -> None:
            seen.append((progress, total, message))

        result = await client.call_tool(
            "planner", {"task": "compare trio and asyncio"}, progress_callback=on_progress
        )
        assert not result.is_error
        assert "research team found" in getattr(result.content[0], "text", "")
        assert seen and seen[-1][0] >= 1 and "agents done" in (seen[-1][2] or "")
        values = [progress for progress, _, _ in seen]  # the spec: MUST increase each time
        assert all(a < b for a, b in itertools.pairwise(values)), values
        last, total, message = seen[-1]  # the run's end ends its progress at its total
        assert last == total and (message or "").startswith("5/5 agents done · ")
        (run,) = await runs(server.url)  # in the journal like any other run
        assert run["agentId"] == "planner" and run["status"] == "completed"


async def test_cancelling_the_mcp_call_cancels_the_run(tmp_path: Path) -> None:
    from mcp import Client

    config = demo_config(tmp_path, token_delay=0.05)
    async with running_server(config) as server, Client(bridge(server.url)) as client:
        with trio.move_on_after(2):
            await client.call_tool("planner", {"task": "slowly"})
        with trio.fail_after(15):
            while not (listed := await runs(server.url)) or listed[0]["status"] == "running":  # noqa: ASYNC110
                await trio.sleep(0.1)
        assert listed[0]["status"] == "cancelled"


async def bridge_alone(*argv: str, hide_mcp: bool = False) -> tuple[int, str]:
    """`orchestrator mcp …` with its stdin closed: its exit code and stderr."""
    start = "import sys; sys.modules['mcp'] = None; " if hide_mcp else "import sys; "
    code = start + "from orchestrator.cli.main import main; sys.exit(main(sys.argv[1:]))"
    done = await trio.run_process(
        [sys.executable, "-c", code, "mcp", *argv],
        stdin=b"",
        capture_stdout=True,
        capture_stderr=True,
        check=False,
        env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"},
    )
    return done.returncode, done.stderr.decode()


async def test_a_bridge_that_cannot_start_says_why_in_one_line(tmp_path: Path) -> None:
    """Regression: a missing extra, a dead URL and a wrong token each ended in a
    traceback (exit 1); the MCP client saw only "Connection closed"."""
    code, err = await bridge_alone("--url", "ws://127.0.0.1:9/ws", hide_mcp=True)
    assert (code, err) == (
        2,
        "error: `orchestrator mcp` needs the mcp extra: pip install 'agent-orchestrator[mcp]'\n",
    )
    code, err = await bridge_alone("--url", "ws://127.0.0.1:9/ws")
    assert code == 2 and err.startswith("error: ws://127.0.0.1:9/ws: ") and err.count("\n") == 1
    config = demo_config(tmp_path, server={"tokens": [{"name": "ann", "token": "ann-1"}]})
    async with running_server(config) as server:
        code, err = await bridge_alone("--url", server.url, "--token", "wrong-1")
    assert code == 2 and err.count("\n") == 1 and "Traceback" not in err
    assert "HTTP 401" in err and "--token or $ORCHESTRATOR_TOKEN" in err and "wrong-1" not in err
