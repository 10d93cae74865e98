"""`server.mcp: true`: our subagents as MCP tools over streamable HTTP at `/mcp` on the
server's own port, driven by the `mcp` package's own client: a tree completes with
progress (owned by the token, in the journal), a cancelled call cancels its run, the
tokens and origins of /ws apply, and /ws, the console and /healthz still answer."""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio
from websockets.trio.client import connect

from tests.server_helpers import demo_config, read_until_end, request, running_server

pytest.importorskip("mcp", reason="MCP tests need the `mcp` extra: pip install -e '.[dev]'")

TOKENS = [
    {"name": "alice", "token": "a-secret", "role": "user"},
    {"name": "root", "token": "r-secret", "role": "admin"},
    {"name": "eve", "token": "v-secret", "role": "viewer"},
]


HELLO = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "t", "version": "1"},
    },
}
"""An MCP `initialize` request, as a raw client sends it."""


@asynccontextmanager
async def mcp_client(base: str, token: str | None = None, **headers: str) -> AsyncIterator[Any]:
    import httpx2
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    async with (
        httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(30.0, read=300.0)) as http,
        Client(streamable_http_client(f"{base}/mcp", http_client=http)) as client,
    ):
        yield client


async def final_status(server: Any, token: str) -> str:
    """The status of the server's one run, once it has ended."""
    with trio.fail_after(15):
        while True:
            listed = await runs(server, token)
            if listed and listed[0]["status"] != "running":
                return str(listed[0]["status"])
            await trio.sleep(0.05)


def base_url(server: Any) -> str:
    return f"http://{server.host}:{server.port}"


async def runs(server: Any, token: str) -> list[dict[str, Any]]:
    async with connect(server.url, additional_headers={"Authorization": f"Bearer {token}"}) as ws:
        listed: list[dict[str, Any]] = (await request(ws, op="runs", id=1))["runs"]
        return listed


async def test_an_mcp_client_runs_a_tree_over_http_and_sees_it_move(tmp_path: Path) -> None:
    config = demo_config(tmp_path, token_delay=0.002, server={"mcp": True, "tokens": TOKENS})
    async with running_server(config) as server, mcp_client(base_url(server), "a-secret") as client:
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
        assert seen and "agents done" in (seen[-1][2] or "")
        values = [progress for progress, _, _ in seen]  # the spec: MUST increase each time
        assert all(a < b for a, b in itertools.pairwise(values)), values
        last, total, message = seen[-1]  # the run's end ends its progress at its total
        assert last == total and (message or "").startswith("5/5 agents done · ")
        (run,) = await runs(server, "a-secret")  # in the journal, owned by the token
        assert run["agentId"] == "planner" and run["status"] == "completed"
        assert run["owner"] == "alice"
        # The same port still serves the WebSocket protocol and the plain HTTP routes.
        async with connect(
            server.url, additional_headers={"Authorization": "Bearer r-secret"}
        ) as ws:
            ack = await request(ws, op="run", id=2, agent="critic", input="x")
            assert (await read_until_end(ws, ack["sub"]))[-1]["status"] == "completed"
        async with httpx.AsyncClient() as http:
            assert (await http.get(f"{base_url(server)}/healthz")).json()["status"] == "ok"
            assert "<html" in (await http.get(f"{base_url(server)}/")).text.lower()


async def test_cancelling_the_mcp_call_cancels_the_run(tmp_path: Path) -> None:
    config = demo_config(tmp_path, token_delay=0.05, server={"mcp": True, "tokens": TOKENS})
    async with running_server(config) as server, mcp_client(base_url(server), "a-secret") as client:
        with trio.move_on_after(1.5):
            await client.call_tool("planner", {"task": "slowly"})
        assert await final_status(server, "a-secret") == "cancelled"
        # The session goes on: the next call runs to its end.
        result = await client.call_tool("critic", {"task": "again"})
        assert not result.is_error


async def test_mcp_over_http_takes_the_same_tokens_and_origins_as_ws(tmp_path: Path) -> None:
    config = demo_config(tmp_path, server={"mcp": True, "tokens": TOKENS})
    hello = HELLO
    accept = {"Accept": "application/json, text/event-stream"}
    async with running_server(config) as server, httpx.AsyncClient() as http:
        url = f"{base_url(server)}/mcp"
        refused = await http.post(url, json=hello, headers=accept)
        assert refused.status_code == 401 and refused.headers["www-authenticate"] == "Bearer"
        wrong = await http.post(url, json=hello, headers={**accept, "Authorization": "Bearer no"})
        assert wrong.status_code == 401
        viewer = await http.post(
            url, json=hello, headers={**accept, "Authorization": "Bearer v-secret"}
        )
        assert viewer.status_code == 403 and "viewer" in viewer.json()["error"]
        cross_site = await http.post(
            url,
            json=hello,
            headers={**accept, "Authorization": "Bearer a-secret", "Origin": "http://evil.test"},
        )
        assert cross_site.status_code == 403 and "allowed_origins" in cross_site.json()["error"]
        ok = await http.post(
            url, json=hello, headers={**accept, "Authorization": "Bearer a-secret"}
        )
        assert ok.status_code == 200 and ok.headers.get("mcp-session-id")
    # A viewer token lists nothing and starts nothing; the others' runs are untouched.
    async with running_server(config) as server:
        with pytest.raises(Exception):  # noqa: B017 - the client reports the 403 its own way
            async with mcp_client(base_url(server), "v-secret") as client:
                await client.list_tools()


async def test_a_server_without_mcp_answers_404_on_mcp(tmp_path: Path) -> None:
    config = demo_config(tmp_path)
    async with running_server(config) as server, httpx.AsyncClient() as http:
        assert (await http.get(f"{base_url(server)}/mcp")).status_code == 404


async def test_shutdown_ends_the_mcp_sessions_and_the_calls_in_flight(tmp_path: Path) -> None:
    config = demo_config(tmp_path, token_delay=0.05, server={"mcp": True})
    outcome: list[Any] = []
    with trio.fail_after(30):
        async with running_server(config) as server, trio.open_nursery() as nursery:

            async def call() -> None:
                try:
                    async with mcp_client(base_url(server)) as client:
                        outcome.append(await client.call_tool("planner", {"task": "slowly"}))
                except Exception as exc:
                    outcome.append(exc)

            nursery.start_soon(call)
            with trio.fail_after(10):
                while not server.app.host.active:  # noqa: ASYNC110
                    await trio.sleep(0.05)
            await server.shutdown()
    (ended,) = outcome  # the call ended (an error result, or the session closed): no hang
    if not isinstance(ended, Exception):
        assert ended.is_error and "interrupted" in ended.content[0].text


async def test_sigterm_of_serve_with_an_mcp_call_in_flight_exits_cleanly(tmp_path: Path) -> None:
    import signal

    from tests.integration.test_server_lifecycle import start_serve_process

    demo_config(tmp_path, token_delay=0.05, server={"mcp": True}, storage="sqlite:///j.db")
    outcome: list[Any] = []
    async with trio.open_nursery() as nursery:
        proc, url = await start_serve_process(nursery, tmp_path / "server.yaml")
        base = url.removeprefix("ws://").removesuffix("/ws")

        async def call() -> None:
            try:
                async with mcp_client(f"http://{base}") as client:
                    outcome.append(await client.call_tool("planner", {"task": "slowly"}))
            except Exception as exc:
                outcome.append(exc)

        nursery.start_soon(call)
        await trio.sleep(1.5)  # the run is under way
        proc.send_signal(signal.SIGTERM)
        with trio.fail_after(20):
            await proc.wait()
        with trio.fail_after(10):
            while not outcome:  # noqa: ASYNC110 - the client notices the end
                await trio.sleep(0.05)
    assert proc.returncode == 0


async def test_an_mcp_session_is_its_tokens(tmp_path: Path) -> None:
    """With alice's Mcp-Session-Id, bob listed her tools, cancelled her call and
    deleted her session: a session now answers only the token that opened it."""
    tokens = [*TOKENS, {"name": "bob", "token": "b-secret", "role": "user"}]
    config = demo_config(tmp_path, server={"mcp": True, "tokens": tokens})
    hello = HELLO
    accept = {"Accept": "application/json, text/event-stream"}
    listing = {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}
    async with running_server(config) as server, httpx.AsyncClient() as http:
        url = f"{base_url(server)}/mcp"
        opened = await http.post(
            url, json=hello, headers={**accept, "Authorization": "Bearer a-secret"}
        )
        session = {
            "mcp-session-id": opened.headers["mcp-session-id"],
            "mcp-protocol-version": "2025-06-18",
        }

        def by(token: str) -> dict[str, str]:
            return {**accept, **session, "Authorization": f"Bearer {token}"}

        await http.post(
            url,
            json={"jsonrpc": "2.0", "method": "notifications/initialized"},
            headers=by("a-secret"),
        )
        for token in ("b-secret", "r-secret"):  # another user, even an admin: not theirs
            other = await http.post(url, json=listing, headers=by(token))
            assert other.status_code == 404, other.text
            gone = await http.delete(url, headers=by(token))
            assert gone.status_code == 404, gone.text
        mine = await http.post(url, json=listing, headers=by("a-secret"))
        assert mine.status_code == 200 and "planner" in mine.text


async def test_mcp_names_its_version_and_refuses_arguments_a_tool_does_not_take(
    tmp_path: Path,
) -> None:
    """serverInfo.version was "" and unknown tool arguments were dropped silently."""
    from importlib import metadata

    from mcp.shared.exceptions import MCPError

    config = demo_config(tmp_path, server={"mcp": True})
    async with running_server(config) as server, httpx.AsyncClient() as http:
        hello = HELLO
        opened = await http.post(
            f"{base_url(server)}/mcp",
            json=hello,
            headers={"Accept": "application/json, text/event-stream"},
        )
        assert metadata.version("agent-orchestrator") in opened.text
        assert '"version":""' not in opened.text.replace(" ", "")
        async with mcp_client(base_url(server)) as client:
            tools = {tool.name: tool for tool in (await client.list_tools()).tools}
            assert set(tools["critic"].input_schema["properties"]) == {"task", "threadId"}
            with pytest.raises(MCPError, match="unknown arguments priority"):
                await client.call_tool("critic", {"task": "check", "priority": "high"})
            done = await client.call_tool("critic", {"task": "check"})
            assert not done.is_error and done.structured_content["runId"].startswith("run-")
