"""MCP servers as tools, against a real MCP server (the `mcp` package's `MCPServer`) over
stdio and streamable HTTP: listed and called by a scripted model, progress, a crash
mid-call, a hang past the timeout, a cancel mid-call, the environment it gets, and no
process left behind."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import trio
from websockets.trio.client import connect

from agents.errors import SpecError
from orchestrator import Orchestrator
from orchestrator.config import ServerConfig
from orchestrator.core.events import Event, EventType
from tests.helpers import REPO, collect, write_config

pytest.importorskip("mcp", reason="MCP tests need the `mcp` extra: pip install -e '.[dev]'")

SERVER = str(REPO / "tests" / "fakes" / "mcp_server.py")


def agent(turns: list[dict[str, Any]], tools: list[str], **extra: Any) -> dict[str, Any]:
    return {
        "description": "d",
        "instructions": "i",
        "tools": tools,
        "script": {"turns": turns},
        **extra,
    }


def call(tool: str, /, **args: Any) -> dict[str, Any]:
    return {"name": tool, "args": args}


def mcp_config(tmp_path: Path, agents: dict[str, dict[str, Any]], **server: Any) -> ServerConfig:
    config = write_config(tmp_path, agents)
    entry = {"command": sys.executable, "args": [SERVER], **server}
    return ServerConfig.model_validate(
        {**config.model_dump(), "mcp_servers": {"demo": entry}, "base_dir": tmp_path}
    )


def results(events: list[Event]) -> list[dict[str, Any]]:
    """Tool results in call order (parallel calls end in any order; the scripted model
    numbers calls per turn, so each TOOL_CALL is paired with the next result of its id)."""
    out: list[dict[str, Any]] = []
    for i, event in enumerate(events):
        if event.type == EventType.TOOL_CALL:
            call_id = event.data["toolCallId"]
            out.extend(
                [
                    e.data
                    for e in events[i:]
                    if e.type == EventType.TOOL_RESULT and e.data["toolCallId"] == call_id
                ][:1]
            )
    return out


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


async def gone(pid: int, within: float = 10) -> bool:
    with trio.move_on_after(within):
        while alive(pid):  # noqa: ASYNC110 - another process's state
            await trio.sleep(0.05)
    return not alive(pid)


async def test_a_model_lists_and_calls_mcp_tools_and_sees_their_progress(tmp_path: Path) -> None:
    agents = {
        "user": agent(
            [
                {"calls": [call("demo__add", a=2, b=3), call("demo__slow", steps=3)]},
                {"calls": [call("demo__fail"), call("demo__odd_name_")]},
                {"say": "done: {results}"},
            ],
            ["demo__*"],
        )
    }
    os.environ["ORCHESTRATOR_TEST_SECRET"] = "s3cret"
    config = mcp_config(tmp_path, agents, env={"GREETING": "hi"})
    async with Orchestrator.open(config) as orch:
        events = await collect(orch, "user", "go")
        assert orch.mcp is not None and orch.mcp.starts == 1
        tools = orch.catalog._resolved["user"][1]
        assert tools["demo__add"].parameters()["required"] == ["a", "b"]
        assert tools["demo__add"].description_for("user") == "Add two numbers."
    first, second, third, fourth = results(events)
    assert first == {
        "toolCallId": first["toolCallId"],
        "name": "demo__add",
        "content": "5",
        "isError": False,
    }
    assert second["content"] == "counted to 3" and not second["isError"]
    assert third["isError"] and "it went wrong on purpose" in third["content"]
    assert fourth["content"] == "odd"
    progress = [e.data for e in events if e.type == EventType.TOOL_PROGRESS]
    # Reports closer than 0.1 s are dropped (a busy machine bunches them): those sent
    # are in order, and the last one always goes out.
    values = [p["progress"] for p in progress]
    assert values == sorted(values) and set(values) <= {1, 2, 3} and values[-1] == 3
    assert progress[-1] == {
        "toolCallId": second["toolCallId"],
        "progress": 3,
        "total": 3,
        "message": "step 3",
    }
    assert events[-1].data["status"] == "completed"
    assert "s3cret" not in repr(events)


async def test_the_server_gets_only_the_environment_its_entry_names(tmp_path: Path) -> None:
    agents = {
        "user": agent(
            [
                {
                    "calls": [
                        call("demo__env", name="GREETING"),
                        call("demo__env", name="TOKEN"),
                        call("demo__env", name="ORCHESTRATOR_TEST_SECRET"),
                    ]
                },
                {"say": "{results}"},
            ],
            ["demo__env"],
        )
    }
    os.environ["ORCHESTRATOR_TEST_SECRET"] = "s3cret"
    config = mcp_config(
        tmp_path, agents, env={"GREETING": "hi"}, env_from={"TOKEN": "ORCHESTRATOR_TEST_SECRET"}
    )
    async with Orchestrator.open(config) as orch:
        events = await collect(orch, "user", "go")
    assert [r["content"] for r in results(events)] == ["hi", "s3cret", "<unset>"]


async def test_a_crash_mid_call_and_a_hang_become_error_results_and_the_next_call_works(
    tmp_path: Path,
) -> None:
    agents = {
        "user": agent(
            [
                {"calls": [call("demo__crash")]},
                {"calls": [call("demo__add", a=1, b=1)]},
                {"calls": [call("demo__hang", marker=str(tmp_path / "m"))]},
                {"calls": [call("demo__add", a=2, b=2)]},
                {"say": "{results}"},
            ],
            ["demo__add", "demo__crash", "demo__hang"],
        )
    }
    config = mcp_config(tmp_path, agents, timeout_seconds=2)
    async with Orchestrator.open(config) as orch:
        events = await collect(orch, "user", "go")
        assert orch.mcp is not None and orch.mcp.starts == 3
    crashed, after_crash, hung, after_hang = results(events)
    assert crashed["isError"] and "failed during 'crash'" in crashed["content"]
    assert "started again for the next call" in crashed["content"]
    assert after_crash["content"] == "2" and not after_crash["isError"]
    assert hung["isError"] and "did not answer 'hang' within 2 s" in hung["content"]
    assert "mcp_servers.demo.timeout_seconds" in hung["content"]
    assert after_hang["content"] == "4"
    assert events[-1].data["status"] == "completed"


async def test_cancelling_the_agent_cancels_the_call_and_no_process_is_left(
    tmp_path: Path,
) -> None:
    marker = tmp_path / "cancelled"
    agents = {
        "user": agent(
            [{"calls": [call("demo__pid"), call("demo__hang", marker=str(marker))]}],
            ["demo__pid", "demo__hang"],
        )
    }
    config = mcp_config(tmp_path, agents)
    events: list[Event] = []
    async with Orchestrator.open(config) as orch:
        async with orch.stream("user", "go") as run:
            async for event in run:
                events.append(event)
                if event.type == EventType.TOOL_RESULT:  # the pid: hang now runs
                    await trio.sleep(0.5)
                    run.cancel(reason="enough")
        pid = int(results(events)[0]["content"])
        assert alive(pid)  # the session outlives the run: it is the process's
        with trio.fail_after(10):
            while not marker.exists() or not marker.read_text():  # noqa: ASYNC110 - the server writes it
                await trio.sleep(0.05)
        assert marker.read_text() == "cancelled"  # MCP's cancellation reached the server
    assert events[-1].data["status"] == "cancelled"
    assert await gone(pid)  # closing the orchestrator stopped the server


async def test_sigterm_of_the_server_stops_the_mcp_server(tmp_path: Path) -> None:
    from tests.integration.test_server_lifecycle import start_serve_process
    from tests.server_helpers import read_until_end, request

    agents = {"user": agent([{"calls": [call("demo__pid")]}, {"say": "{results}"}], ["demo__pid"])}
    config = mcp_config(tmp_path, agents)
    data = config.model_dump(mode="json", exclude={"base_dir"})
    data["server"]["port"] = 0
    import yaml

    (tmp_path / "server.yaml").write_text(yaml.safe_dump(data))
    async with trio.open_nursery() as nursery:
        proc, url = await start_serve_process(nursery, tmp_path / "server.yaml")
        async with connect(url, max_size=None) as ws:
            ack = await request(ws, op="run", id=1, agent="user", input="go")
            events, _ = await read_until_end(ws, ack["sub"])
        pid = int(next(e for e in events if e["type"] == "TOOL_RESULT")["data"]["content"])
        assert alive(pid)
        proc.send_signal(signal.SIGTERM)
        with trio.fail_after(20):
            await proc.wait()
    assert await gone(pid)


async def test_unknown_servers_and_patterns_that_match_nothing_are_clear_errors(
    tmp_path: Path,
) -> None:
    (tmp_path / "a").mkdir()
    with pytest.raises(SpecError, match=r"tools\[0\]: 'gh__search' names MCP server 'gh'"):
        config = mcp_config(tmp_path / "a", {"x": agent([], ["gh__search"])})
        async with Orchestrator.open(config):
            pass
    (tmp_path / "b").mkdir()
    agents = {
        "boss": agent(
            [{"calls": [call("agent_spawn", agent_id="wrong", task="t")]}, {"say": "{results}"}],
            ["agent_spawn"],
        ),
        "wrong": agent([{"say": "never"}], ["demo__nothing_*"]),
    }
    config = mcp_config(tmp_path / "b", agents)
    async with Orchestrator.open(config) as orch:
        spawned = await collect(orch, "boss", "go")
        direct = await collect(orch, "wrong", "go")
    (refused,) = results(spawned)
    assert refused["isError"]
    assert (
        "wrong.yaml: tools[0]: 'demo__nothing_*' matches no tool of MCP server 'demo'"
        in (refused["content"])
    )
    assert "demo__add" in refused["content"]  # it says what the server has
    assert direct[-1].data["status"] == "failed"
    assert direct[-1].data["error"].startswith("mcp_unavailable: wrong.yaml: tools[0]")


@asynccontextmanager
async def http_mcp_server(port: int | None = None) -> AsyncIterator[str]:
    """The test MCP server over streamable HTTP on loopback (a free port unless given);
    its URL."""
    import socket

    if port is None:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
    server = await trio.lowlevel.open_process(
        [sys.executable, SERVER, "--http", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        with trio.fail_after(20):  # until it listens
            while True:
                try:
                    stream = await trio.open_tcp_stream("127.0.0.1", port)
                    await stream.aclose()
                    break
                except OSError:
                    await trio.sleep(0.1)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        server.kill()
        await server.wait()


def http_config(tmp_path: Path, agents: dict[str, dict[str, Any]], **web: Any) -> ServerConfig:
    config = write_config(tmp_path, agents)
    return ServerConfig.model_validate(
        {**config.model_dump(), "base_dir": tmp_path, "mcp_servers": {"web": web}}
    )


async def test_a_server_over_streamable_http_with_a_token_from_the_environment(
    tmp_path: Path,
) -> None:
    agents = {
        "user": agent(
            [
                {
                    "calls": [
                        call("web__add", a=20, b=22),
                        call("web__header", name="Authorization"),
                        call("web__slow", steps=2),
                    ]
                },
                {"say": "ok"},
            ],
            ["web__*"],
        )
    }
    os.environ["ORCHESTRATOR_TEST_TOKEN"] = "t0ken"
    async with http_mcp_server() as url:
        config = http_config(tmp_path, agents, url=url, token_env="ORCHESTRATOR_TEST_TOKEN")
        async with Orchestrator.open(config) as orch:
            events = await collect(orch, "user", "go")
    added, auth, counted = results(events)
    assert added["content"] == "42"
    assert auth["content"] == "Bearer t0ken"
    assert counted["content"] == "counted to 2"
    assert [e.data["progress"] for e in events if e.type == EventType.TOOL_PROGRESS] == [1, 2]
    # The token reached the server's request (above), and nothing of ours said it.
    assert "t0ken" not in repr([e for e in events if e.type != EventType.TOOL_RESULT])


async def test_mcp_tools_go_through_approvals(tmp_path: Path) -> None:
    agents = {
        "user": agent(
            [{"calls": [call("demo__add", a=1, b=2)]}, {"say": "{results}"}],
            ["demo__*"],
            approval=["demo__a*"],
            approval_edit=True,
        )
    }
    config = mcp_config(tmp_path, agents)
    events: list[Event] = []
    async with Orchestrator.open(config) as orch, orch.stream("user", "go") as run:
        async for event in run:
            events.append(event)
            if event.type == EventType.APPROVAL_REQUESTED:
                assert event.data["name"] == "demo__add"
                with pytest.raises(Exception, match="args are not valid"):
                    run.approve(event.data["toolCallId"], args={"a": "one", "b": 2})
                run.approve(event.data["toolCallId"], args={"a": 40, "b": 2})
    (result,) = results(events)
    assert result["content"] == "42"


async def test_over_http_a_hang_is_an_error_result_and_the_next_call_works(
    tmp_path: Path,
) -> None:
    agents = {
        "user": agent(
            [
                {"calls": [call("web__hang", marker=str(tmp_path / "m"))]},
                {"calls": [call("web__add", a=1, b=2)]},
                {"say": "ok"},
            ],
            ["web__*"],
        )
    }
    async with http_mcp_server() as url:
        config = http_config(tmp_path, agents, url=url, timeout_seconds=1)
        async with Orchestrator.open(config) as orch:
            events = await collect(orch, "user", "go")
            assert orch.mcp is not None and orch.mcp.starts == 2
    hung, added = results(events)
    assert hung["isError"] and "did not answer 'hang' within 1 s" in hung["content"]
    assert added["content"] == "3" and not added["isError"]


async def test_over_http_a_server_that_dies_mid_call_is_an_error_and_a_new_session_follows(
    tmp_path: Path,
) -> None:
    """The HTTP server's process exits during the call: an error result; the next call
    (held at its approval until the server is back on the same port) opens a new session."""
    agents = {
        "user": agent(
            [
                {"calls": [call("web__crash")]},
                {"calls": [call("web__add", a=2, b=3)]},
                {"say": "ok"},
            ],
            ["web__*"],
            approval=["web__add"],
        )
    }
    events: list[Event] = []
    async with http_mcp_server() as url:
        config = http_config(tmp_path, agents, url=url, timeout_seconds=5)
        port = int(url.split(":")[2].split("/")[0])
        async with Orchestrator.open(config) as orch, orch.stream("user", "go") as run:
            async for event in run:
                events.append(event)
                if event.type == EventType.APPROVAL_REQUESTED:
                    async with http_mcp_server(port):  # back, as a service manager would
                        run.approve(event.data["toolCallId"])
                        async for later in run:
                            events.append(later)
            assert orch.mcp is not None and orch.mcp.starts == 2
    crashed, added = results(events)
    assert crashed["isError"] and "MCP server 'web' failed during 'crash'" in crashed["content"]
    assert added["content"] == "5" and not added["isError"]
    assert events[-1].data["status"] == "completed"


async def test_over_http_cancelling_the_agent_sends_mcp_cancellation(tmp_path: Path) -> None:
    marker = tmp_path / "cancelled"
    agents = {
        "user": agent([{"calls": [call("web__hang", marker=str(marker))]}], ["web__*"]),
    }
    events: list[Event] = []
    async with http_mcp_server() as url:
        config = http_config(tmp_path, agents, url=url)
        async with Orchestrator.open(config) as orch, orch.stream("user", "go") as run:
            async for event in run:
                events.append(event)
                if event.type == EventType.TOOL_CALL:
                    await trio.sleep(0.5)  # the call reached the server
                    run.cancel(reason="enough")
        with trio.fail_after(10):
            while not marker.exists() or not marker.read_text():  # noqa: ASYNC110 - the server writes it
                await trio.sleep(0.05)
    assert marker.read_text() == "cancelled"  # the cancellation reached the server
    assert events[-1].data["status"] == "cancelled"
