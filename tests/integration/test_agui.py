"""`POST /ag-ui/AGENT` (`server.ag_ui: true`): a three-level run with a failing child and
a cancelled one streams as AG-UI events, each decoded with the `ag-ui-protocol`
package's own models; the tree is told apart by `subagentRunId` and `metadata`; a
client that drops can follow the run on /ws; bad requests are refused clearly."""

from __future__ import annotations

from collections.abc import AsyncGenerator
from contextlib import aclosing
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio
from websockets.trio.client import connect

from tests.integration.test_telemetry import AGENTS
from tests.memory_server import autojump, memory_server
from tests.server_helpers import demo_config, read_until_end, request, running_server

pytest.importorskip("ag_ui.core", reason="AG-UI needs the `agui` extra: pip install -e '.[dev]'")

from ag_ui.core import Event
from pydantic import TypeAdapter

EVENT = TypeAdapter(Event)
TOKENS = [
    {"name": "ann", "token": "a-secret", "role": "user"},
    {"name": "vic", "token": "v-secret", "role": "viewer"},
]


def run_input(text: str, **extra: Any) -> dict[str, Any]:
    return {
        "threadId": "thread-1",
        "runId": "client-run-1",
        "messages": [{"id": "m1", "role": "user", "content": text}],
        "tools": [],
        "context": [],
        "state": {},
        "forwardedProps": {},
        **extra,
    }


async def events_of(response: httpx.Response) -> AsyncGenerator[Any, None]:
    """The AG-UI events of an SSE response, each validated by the package's models."""
    async for line in response.aiter_lines():
        if line.startswith("data: "):
            yield EVENT.validate_json(line.removeprefix("data: "))


def base(server: Any) -> str:
    return f"http://{server.host}:{server.port}"


@autojump
async def test_a_tree_with_a_failing_child_and_a_cancel_streams_as_ag_ui(tmp_path: Path) -> None:
    config = demo_config(tmp_path, server={"ag_ui": True, "tokens": TOKENS}, extra_agents=AGENTS)
    auth = {"Authorization": "Bearer a-secret"}
    got: list[Any] = []
    async with memory_server(config) as server, httpx.AsyncClient(timeout=30) as http:
        async with http.stream(
            "POST", f"{base(server)}/ag-ui/boss", json=run_input("go"), headers=auth
        ) as response:
            assert response.status_code == 200
            assert response.headers["content-type"].startswith("text/event-stream")
            run_id = response.headers["x-orchestrator-run-id"]
            async for event in events_of(response):
                got.append(event)
                if event.type == "SUBAGENT_STARTED" and event.name == "sleepy":
                    async with connect(server.url, additional_headers=auth) as ws:
                        cancel = {"runId": run_id, "agentKey": event.subagent_run_id}
                        assert (await request(ws, op="cancel", id=1, **cancel))["op"] == "ack"
        async with connect(server.url, additional_headers=auth) as ws:
            (listed,) = (await request(ws, op="runs", id=2))["runs"]
    assert listed["runId"] == run_id and listed["owner"] == "ann"  # in the journal
    first, last = got[0], got[-1]
    assert first.type == "RUN_STARTED" and first.thread_id == "thread-1"
    assert first.run_id == "client-run-1" and first.metadata["runId"] == run_id
    assert last.type == "RUN_FINISHED" and last.outcome.type == "success"
    assert "mid: leaf" in last.result
    seqs = [e.metadata["seq"] for e in got]
    assert seqs == sorted(seqs)  # the run's order, every event saying where it is
    started = {e.name: e for e in got if e.type == "SUBAGENT_STARTED"}
    assert set(started) == {"Middle", "leaf", "bomb", "sleepy"}
    mid, leaf = started["Middle"], started["leaf"]
    assert mid.parent_subagent_run_id is None and mid.parent_tool_call_id
    assert leaf.parent_subagent_run_id == mid.subagent_run_id  # the tree, level by level
    assert leaf.metadata["depth"] == 2 and leaf.metadata["path"].endswith("/mid/leaf")
    errors = {e.subagent_run_id: e.code for e in got if e.type == "SUBAGENT_ERROR"}
    assert errors == {
        started["bomb"].subagent_run_id: "provider_error",
        started["sleepy"].subagent_run_id: "cancelled",
    }
    finished = {e.subagent_run_id: e.result for e in got if e.type == "SUBAGENT_FINISHED"}
    assert finished == {leaf.subagent_run_id: "leaf", mid.subagent_run_id: "mid: leaf"}
    steps = [(e.type, e.step_name) for e in got if e.type in ("STEP_STARTED", "STEP_FINISHED")]
    assert sorted(steps) == sorted(
        [(kind, name) for name in started for kind in ("STEP_STARTED", "STEP_FINISHED")]
    )
    # Text of a child is its own message, marked as the child's.
    leaf_text = [
        e
        for e in got
        if e.type == "TEXT_MESSAGE_CONTENT" and e.subagent_run_id == leaf.subagent_run_id
    ]
    assert "".join(e.delta for e in leaf_text) == "leaf"
    # Tool calls: start, args, end, result; a tool's error is its result.
    (read,) = [e for e in got if e.type == "TOOL_CALL_START" and e.tool_call_name == "read_file"]
    result = next(
        e for e in got if e.type == "TOOL_CALL_RESULT" and e.tool_call_id == read.tool_call_id
    )
    assert "missing.txt" in result.content
    for kind in ("TEXT_MESSAGE", "TOOL_CALL"):
        opened = [e for e in got if e.type == f"{kind}_START"]
        closed = [e for e in got if e.type == f"{kind}_END"]
        assert len(opened) == len(closed) > 0
    # Tool-call ids are unique in the run (regression: the boss and mid both said
    # `call_0`, which @ag-ui/client refuses), and each means one call everywhere.
    calls = {e.tool_call_id: e for e in got if e.type == "TOOL_CALL_START"}
    assert len(calls) == len([e for e in got if e.type == "TOOL_CALL_START"])
    assert len({e.metadata["toolCallId"] for e in calls.values()}) < len(calls)  # ids repeat
    for e in got:
        if e.type in ("TOOL_CALL_ARGS", "TOOL_CALL_END", "TOOL_CALL_RESULT"):
            assert calls[e.tool_call_id].subagent_run_id == e.subagent_run_id
    for child in started.values():
        spawn = calls[child.parent_tool_call_id]
        assert spawn.tool_call_name == "agent_spawn"
        assert spawn.subagent_run_id == child.parent_subagent_run_id


@autojump
async def test_a_client_that_drops_follows_the_run_on_ws(tmp_path: Path) -> None:
    config = demo_config(tmp_path, token_delay=0.01, server={"ag_ui": True})
    async with memory_server(config) as server, httpx.AsyncClient(timeout=30) as http:
        async with (
            http.stream(
                "POST",
                f"{base(server)}/ag-ui",
                json=run_input("trio", forwardedProps={"agent": "planner"}),
            ) as response,
            aclosing(events_of(response)) as events,
        ):
            async for event in events:
                if event.type == "RUN_STARTED":
                    run_id = event.metadata["runId"]
                    break  # the client goes away; the run does not
        async with connect(server.url, max_size=None) as ws:
            ack = await request(ws, op="subscribe", id=1, runId=run_id)
            followed, _ = await read_until_end(ws, ack["sub"])
    assert followed[-1]["type"] == "RUN_FINISHED"
    assert followed[-1]["data"]["status"] == "completed"


@autojump
async def test_bad_requests_are_refused_saying_why(tmp_path: Path) -> None:
    config = demo_config(tmp_path, server={"ag_ui": True, "tokens": TOKENS})
    auth = {"Authorization": "Bearer a-secret"}
    async with memory_server(config) as server, httpx.AsyncClient(timeout=30) as http:
        url = f"{base(server)}/ag-ui/planner"
        cases = [
            (await http.post(url, json=run_input("x")), 401, "unauthorized"),
            (
                await http.post(
                    url, json=run_input("x"), headers={"Authorization": "Bearer v-secret"}
                ),
                403,
                "viewer",
            ),
            (await http.post(url, json={"threadId": "t"}, headers=auth), 400, "RunAgentInput"),
            (
                await http.post(f"{base(server)}/ag-ui", json=run_input("x"), headers=auth),
                400,
                "name the agent",
            ),
            (await http.post(f"{url}x", json=run_input("x"), headers=auth), 404, "unknown agent"),
            (await http.put(url, json=run_input("x"), headers=auth), 405, "POST"),
            (
                await http.post(
                    url,
                    json=run_input(
                        "x", messages=[{"id": "a", "role": "assistant", "content": "?"}]
                    ),
                    headers=auth,
                ),
                400,
                "no user message",
            ),
        ]
        for response, status, words in cases:
            assert response.status_code == status, (response.status_code, response.text)
            assert words in response.json()["error"]


@autojump
async def test_the_same_mapping_as_a_websocket_subscription_format(tmp_path: Path) -> None:
    config = demo_config(tmp_path, extra_agents=AGENTS)
    async with memory_server(config) as server, connect(server.url, max_size=None) as ws:
        ack = await request(ws, op="run", id=1, agent="mid", input="x", format="ag-ui")
        frames, end = await read_until_end(ws, ack["sub"])
        assert end["status"] == "completed"
        decoded: list[Any] = [EVENT.validate_python(e) for e in frames]
        assert decoded[0].type == "RUN_STARTED" and decoded[-1].type == "RUN_FINISHED"
        assert [e.name for e in decoded if e.type == "SUBAGENT_STARTED"] == ["leaf"]
        # Filters apply first: the root's own events only, still a valid AG-UI stream.
        ack = await request(
            ws, op="subscribe", id=2, runId=ack["runId"], format="ag-ui", filter={"maxDepth": 0}
        )
        shallow, _ = await read_until_end(ws, ack["sub"])
        root_only: list[Any] = [EVENT.validate_python(e) for e in shallow]
        assert not any(getattr(e, "subagent_run_id", None) for e in root_only)
        assert root_only[-1].type == "RUN_FINISHED"


async def test_http_connections_are_bounded_like_websocket_ones(tmp_path: Path) -> None:
    config = demo_config(tmp_path, server={"ag_ui": True, "max_connections": 2})
    head = b"POST /ag-ui/planner HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n"
    async with running_server(config) as server:
        held = []
        for _ in range(2):  # each waits for a body that does not come: a slot each
            stream = await trio.open_tcp_stream(server.host, server.port)
            await stream.send_all(head)
            held.append(stream)
        await trio.sleep(0.3)
        third = await trio.open_tcp_stream(server.host, server.port)
        await third.send_all(head)
        with trio.fail_after(5):
            answer = await third.receive_some()
        assert answer.startswith(b"HTTP/1.1 503") and b"server.max_connections" in answer
        for stream in held:
            await stream.aclose()
        await third.aclose()
