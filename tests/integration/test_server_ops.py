"""Server ops, bad input, auth, limits and plain HTTP, against the real server in memory
(tests/memory_server.py) under an autojump clock."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio
from websockets.exceptions import ConnectionClosedError, InvalidStatus
from websockets.trio.client import connect

from tests.memory_server import autojump, memory_server
from tests.server_helpers import (
    demo_config,
    read_until_end,
    recv,
    replay,
    request,
    run_to_end,
    send,
)

pytestmark = autojump


async def test_cancel_reaches_every_agent_and_ends_the_run(tmp_path: Path) -> None:
    async with memory_server(demo_config(tmp_path, token_delay=0.05)) as server:
        async with connect(server.url, max_size=None) as ws:
            ack = await request(ws, op="run", id=1, agent="planner", input="q")
            events: list[dict[str, Any]] = []
            while not any(
                e["type"] == "AGENT_STARTED" and e["source"]["agentId"] == "critic" for e in events
            ):
                frame = await recv(ws)
                if frame["op"] == "events":
                    events += frame["events"]
            with trio.fail_after(1):  # the run ends cancelled within a second
                await send(ws, op="cancel", id=2, runId=ack["runId"])
                rest, end = await read_until_end(ws, ack["sub"])
        acks = [e for e in rest if e.get("op") == "ack"]
        assert not acks
        events += rest
        assert end["status"] == "cancelled"
        running = {
            e["source"]["agentKey"] if e["source"] else "root"
            for e in events
            if e["type"] == "AGENT_STARTED"
        } | {"root"}
        errors = [e for e in events if e["type"] == "AGENT_ERROR"]
        assert {e["source"]["agentKey"] if e["source"] else "root" for e in errors} == running
        assert all(e["data"]["errorType"] == "cancelled" for e in errors)
        assert events[-1]["type"] == "RUN_FINISHED" and events[-1]["data"]["status"] == "cancelled"
        assert [e["seq"] for e in events] == list(range(1, len(events) + 1))


@pytest.mark.parametrize(
    ("frame", "code", "needle"),
    [
        ("{not json", "bad_request", "malformed JSON"),
        ("[1, 2]", "bad_request", "must be a JSON object, got list"),
        ('{"id": 7}', "bad_request", "missing field `op`"),
        ('{"op": "fly", "id": 7}', "unknown_op", "unknown op 'fly'"),
        (
            '{"op": "subscribe", "id": 7, "runId": 12}',
            "bad_request",
            "Expected `str`, got `int` - at `$.runId`",
        ),
        ('{"op": "subscribe", "id": 7}', "bad_request", "missing required field `runId`"),
        (
            '{"op": "subscribe", "id": 7, "runId": "run-x", "afterSeq": "3"}',
            "bad_request",
            "at `$.afterSeq`",
        ),
        (
            '{"op": "subscribe", "id": 7, "runId": "run-x", "afterSeq": -1}',
            "bad_request",
            "afterSeq must be 0 or more",
        ),
        (
            '{"op": "subscribe", "id": 7, "runId": "run-x", "filter": {"maxDepth": "2"}}',
            "bad_request",
            "at `$.filter.maxDepth`",
        ),
        (
            '{"op": "subscribe", "id": 7, "runId": "run-x", "filter": {"types": ["NOPE"]}}',
            "bad_request",
            "unknown event type 'NOPE'",
        ),
        (
            '{"op": "subscribe", "id": 7, "runId": "run-x", "fliter": {}}',
            "bad_request",
            "unknown field `fliter`",
        ),
        (
            '{"op": "subscribe", "id": 7, "runId": "run-nope"}',
            "not_found",
            "unknown run 'run-nope'",
        ),
        (
            '{"op": "run", "id": 7, "agent": "ghost", "input": "x"}',
            "not_found",
            "unknown agent 'ghost'",
        ),
        (
            '{"op": "run", "id": 7, "agent": "critic"}',
            "bad_request",
            "missing required field `input`",
        ),
        ('{"op": "unsubscribe", "id": 7, "sub": "s99"}', "not_found", "no subscription 's99'"),
        ('{"op": "cancel", "id": 7, "runId": "run-nope"}', "not_found", "unknown run"),
        (
            '{"op": "send", "id": 7, "runId": "run-nope", "message": "hi"}',
            "not_found",
            "unknown run",
        ),
        # Regressions from the hardening review (issue 8): each must stay a precise error.
        ("[" * 100_000 + "]" * 100_000, "bad_request", "nested too deeply"),
        (
            '{"op": "subscribe", "id": 7, "runId": "r", "filter": {"pathGlob": "'
            + "*/" * 70
            + 'Z"}}',
            "bad_request",
            "more than 64 segments",
        ),
        (
            '{"op": "subscribe", "id": 7, "runId": "r", "filter": {"pathGlob": "'
            + "a" * 600
            + '"}}',
            "bad_request",
            "longer than 512 characters",
        ),
        (
            '{"op": "subscribe", "id": 7, "runId": "r", "filter": {"pathGlob": "/"}}',
            "bad_request",
            "pathGlob must not be empty",
        ),
        (
            '{"op": "subscribe", "id": 7, "runId": "r", "filter": {"agentIds": ['
            + ",".join(['"a"'] * 300)
            + "]}}",
            "bad_request",
            "agentIds has more than 256",
        ),
        ('{"op": "subscribe", "id": 7, "runId": "r", "detail": "all"}', "bad_request", "detail"),
        ('{"op": "subscribe", "id": 7, "runId": "r", "filter": []}', "bad_request", "filter"),
        ('{"op": "runs", "id": 7, "limit": 0}', "bad_request", "limit must be 1 to 1000"),
        ('{"op": "runs", "id": 7, "limit": "all"}', "bad_request", "at `$.limit`"),
        ('{"op": "runs", "id": 7, "before": "run-nope"}', "not_found", "unknown run"),
        ('{"op": "run", "id": 7, "agent": "critic", "input": 5}', "bad_request", "$.input"),
        (
            '{"op": "run", "id": 7, "agent": "critic", "input": "x", "stream": "yes"}',
            "bad_request",
            "$.stream",
        ),
        ('{"op": "ping", "id": 7, "extra": 1}', "bad_request", "unknown field `extra`"),
        ('{"op": "send", "id": 7, "runId": "r"}', "bad_request", "missing required field"),
        ('{"op": "unsubscribe", "id": 7}', "bad_request", "missing required field `sub`"),
        ('{"op": null, "id": 7}', "bad_request", "`op` must be a string naming an op, got null"),
        ('{"op": 5, "id": 7}', "bad_request", "`op` must be a string naming an op, got int"),
        ('"just a string"', "bad_request", "got str"),
        ("", "bad_request", "malformed JSON"),
        ('{"op": "ping", "id":7} trailing', "bad_request", "trailing characters"),
    ],
)
async def test_bad_input_gets_an_error_and_the_connection_stays_usable(
    tmp_path: Path, frame: str, code: str, needle: str
) -> None:
    async with memory_server(demo_config(tmp_path)) as server, connect(server.url) as ws:
        await ws.send(frame)
        reply = await recv(ws)
        assert reply["op"] == "error" and reply["code"] == code, reply
        assert needle in reply["message"], reply
        assert reply.get("id") == (7 if '"id": 7' in frame else None)
        assert await request(ws, op="ping", id="after") == {"op": "pong", "id": "after"}


async def test_binary_and_oversized_frames(tmp_path: Path) -> None:
    config = demo_config(tmp_path, server={"max_frame_bytes": 4096})
    async with memory_server(config) as server:
        async with connect(server.url) as ws:
            await ws.send(b'{"op": "ping"}')
            reply = await recv(ws)
            assert reply["code"] == "bad_request" and "binary frames" in reply["message"]
            assert (await request(ws, op="ping"))["op"] == "pong"
        async with connect(server.url) as ws:
            await ws.send(json.dumps({"op": "ping", "pad": "x" * 10000}))
            with pytest.raises(ConnectionClosedError) as info:
                await recv(ws)
            assert info.value.rcvd is not None and info.value.rcvd.code == 1009


async def test_runs_agents_ping_and_blocking_run(tmp_path: Path) -> None:
    async with memory_server(demo_config(tmp_path)) as server, connect(server.url) as ws:
        assert await request(ws, op="ping", id=1) == {"op": "pong", "id": 1}
        agents = await request(ws, op="agents", id=2)
        assert sorted(a["id"] for a in agents["agents"]) == ["critic", "planner", "researcher"]
        assert {"id", "name", "description", "model", "example", "outputSchema"} == set(
            agents["agents"][0]
        )
        ack = await request(ws, op="run", id=3, agent="planner", input="blocking", stream=False)
        assert ack == {"op": "ack", "id": 3, "runId": ack["runId"]}
        result = await recv(ws)
        assert result["op"] == "result" and result["id"] == 3 and result["runId"] == ack["runId"]
        assert result["status"] == "completed" and "blocking" in result["text"]
        runs = await request(ws, op="runs", id=4)
        (listed,) = runs["runs"]
        assert listed["runId"] == ack["runId"] and listed["agentId"] == "planner"
        assert listed["status"] == "completed" and isinstance(listed["createdAt"], float)
        # A blocking run produced no events; subscribing to it just ends.
        assert await replay(server.url, ack["runId"]) == []


async def test_send_reaches_the_running_root_agent(tmp_path: Path) -> None:
    slow_root = {
        "description": "d",
        "instructions": "i",
        "tools": ["agent_spawn"],
        "script": {
            "token_delay": 0.01,
            "turns": [
                {
                    "say": "working on it",
                    "calls": [{"name": "agent_spawn", "args": {"agent_id": "critic", "task": "t"}}],
                },
                {"say": "latest: {input}"},
            ],
        },
    }
    config = demo_config(tmp_path, token_delay=0.01, extra_agents={"boss": slow_root})
    async with memory_server(config) as server, connect(server.url, max_size=None) as ws:
        ack = await request(ws, op="run", id=1, agent="boss", input="first")
        while True:
            frame = await recv(ws)
            if frame["op"] == "events" and any(
                e["type"] == "AGENT_STARTED" for e in frame["events"]
            ):
                break
        await send(ws, op="send", id=2, runId=ack["runId"], message="also this")
        events: list[dict[str, Any]] = []
        while True:
            frame = await recv(ws)
            if frame["op"] == "ack":
                assert frame == {"op": "ack", "id": 2}
            elif frame["op"] == "events":
                events += frame["events"]
            elif frame["op"] == "end":
                break
        (message,) = [e for e in events if e["type"] == "USER_MESSAGE"]
        assert message["source"] is None and message["data"] == {
            "text": "also this",
            "from": "client",
        }
        final = next(e for e in events if e["type"] == "AGENT_RESULT" and e["source"] is None)
        assert final["data"]["text"] == "latest: also this"
        # The run is over: nobody is left to receive a message.
        reply = await request(ws, op="send", id=3, runId=ack["runId"], message="late")
        assert reply["code"] == "not_found" and "is not running" in reply["message"]
        reply = await request(
            ws, op="send", id=4, runId=ack["runId"], agentKey="agent:x:y", message="?"
        )
        assert reply["code"] == "not_found"


async def test_bearer_token_auth(tmp_path: Path) -> None:
    config = demo_config(tmp_path, server={"tokens": ["s3cret"]})
    async with memory_server(config) as server:
        for headers, url in [(None, server.url), ({"Authorization": "Bearer wrong"}, server.url)]:
            with pytest.raises(InvalidStatus) as info:
                async with connect(url, additional_headers=headers):
                    pass
            assert info.value.response.status_code == 401
        async with connect(server.url, additional_headers={"Authorization": "Bearer s3cret"}) as ws:
            assert (await request(ws, op="ping"))["op"] == "pong"
        async with connect(server.url + "?token=s3cret") as ws:
            assert (await request(ws, op="ping"))["op"] == "pong"


async def test_allowed_origins(tmp_path: Path) -> None:
    config = demo_config(tmp_path, server={"allowed_origins": ["https://ui.example"]})
    async with memory_server(config) as server:
        with pytest.raises(InvalidStatus) as info:
            async with connect(server.url, origin="https://evil.example"):  # type: ignore[arg-type]
                pass
        assert info.value.response.status_code == 403
        async with connect(server.url, origin="https://ui.example") as ws:  # type: ignore[arg-type]
            assert (await request(ws, op="ping"))["op"] == "pong"


async def test_subscription_and_concurrent_run_limits(tmp_path: Path) -> None:
    config = demo_config(
        tmp_path,
        token_delay=0.05,
        server={"max_subscriptions": 2},
        limits={"max_concurrent_runs": 1},
    )
    async with memory_server(config) as server, connect(server.url) as ws:
        ack = await request(ws, op="run", id=1, agent="critic", input="x")
        reply = await request(ws, op="run", id=2, agent="critic", input="y")
        while reply["op"] == "events":
            reply = await recv(ws)
        assert reply["code"] == "limit_exceeded" and "max_concurrent_runs" in reply["message"]
        await send(ws, op="subscribe", id=3, runId=ack["runId"])
        await send(ws, op="subscribe", id=4, runId=ack["runId"])
        while True:
            frame = await recv(ws)
            if frame["op"] == "error":
                assert frame["id"] == 4 and frame["code"] == "limit_exceeded"
                assert "max_subscriptions" in frame["message"]
                break


async def test_healthz_metrics_and_404(tmp_path: Path) -> None:
    async with memory_server(demo_config(tmp_path)) as server:
        await run_to_end(server.url, agent="critic")
        base = f"http://{server.host}:{server.port}"
        async with httpx.AsyncClient() as client:
            health = await client.get(base + "/healthz")
            assert health.status_code == 200 and health.json() == {"status": "ok"}
            assert health.headers["content-type"] == "application/json"
            metrics = await client.get(base + "/metrics")
            assert metrics.status_code == 200
            text = metrics.text
            assert 'orchestrator_runs{status="completed"} 1.0' in text
            assert "orchestrator_events_journaled_total" in text
            assert "orchestrator_connections 0.0" in text
            assert "orchestrator_subscriptions 0.0" in text
            assert "orchestrator_slowest_client_lag_events 0.0" in text
            page = await client.get(base + "/")
            assert page.status_code == 200
            assert page.headers["content-type"] == "text/html; charset=utf-8"
            assert '<script type="module" src="/static/app.js">' in page.text
            script = await client.get(base + "/static/app.js")
            assert script.status_code == 200 and "new Connection" in script.text
            assert script.headers["content-type"] == "text/javascript; charset=utf-8"
            missing = await client.get(base + "/nope")
            assert missing.status_code == 404


async def test_blocks_detail_merges_deltas_and_keeps_cursors(tmp_path: Path) -> None:
    async with memory_server(demo_config(tmp_path)) as server:
        run_id, full, _ = await run_to_end(server.url)
        blocks = await replay(server.url, run_id, detail="blocks")
        full_deltas = [e for e in full if e["type"] == "REASONING" and "delta" in e["data"]]
        block_deltas = [e for e in blocks if e["type"] == "REASONING" and "delta" in e["data"]]
        assert len(block_deltas) < len(full_deltas) / 3
        assert [e for e in blocks if e["type"] != "REASONING" or "delta" not in e["data"]] == [
            e for e in full if e["type"] != "REASONING" or "delta" not in e["data"]
        ]
        for key in {(e["source"] or {}).get("agentKey") for e in full}:

            def text(events: list[dict[str, Any]], k: str | None = key) -> str:
                return "".join(
                    e["data"]["delta"]
                    for e in events
                    if e["type"] == "REASONING"
                    and "delta" in e["data"]
                    and (e["source"] or {}).get("agentKey") == k
                )

            assert text(blocks) == text(full)
        # Resuming a blocks feed after any block's seq loses nothing.
        cut = block_deltas[len(block_deltas) // 2]["seq"]
        rest = await replay(server.url, run_id, after_seq=cut, detail="blocks")
        seen = [e for e in blocks if e["seq"] <= cut]
        joined = "".join(
            e["data"].get("delta", "") for e in seen + rest if e["type"] == "REASONING"
        )
        assert joined == "".join(
            e["data"].get("delta", "") for e in full if e["type"] == "REASONING"
        )


async def test_send_op_to_running_and_idle_children(tmp_path: Path) -> None:
    boss = {
        "description": "d",
        "instructions": "i",
        "tools": ["agent_spawn"],
        "script": {
            "turns": [
                {
                    "calls": [
                        {
                            "name": "agent_spawn",
                            "args": {"agent_id": "helper", "task": "t", "timeout_seconds": 0},
                        }
                    ]
                },
                {"calls": [{"name": "wait", "args": {"seconds": 0.6}}]},
                {"say": "done"},
            ]
        },
    }
    boss["tools"] = ["agent_spawn", "wait"]
    helper = {
        "description": "d",
        "instructions": "i",
        "script": {
            "token_delay": 0.01,
            "turns": [{"say": "working " * 10}, {"say": "re: {input}"}],
        },
    }
    config = demo_config(tmp_path, extra_agents={"boss": boss, "helper": helper})
    async with memory_server(config) as server, connect(server.url, max_size=None) as ws:
        ack = await request(ws, op="run", id=1, agent="boss", input="go")
        events: list[dict[str, Any]] = []
        key = None
        sent_running = sent_idle = False
        while True:
            frame = await recv(ws)
            if frame["op"] == "events":
                events += frame["events"]
                for e in frame["events"]:
                    if e["type"] == "AGENT_STARTED" and not sent_running:
                        key = e["source"]["agentKey"]
                        await send(
                            ws, op="send", id=2, runId=ack["runId"], agentKey=key, message="hurry"
                        )
                        sent_running = True
                    if e["type"] == "AGENT_RESULT" and e["source"] and not sent_idle:
                        await send(
                            ws,
                            op="send",
                            id=3,
                            runId=ack["runId"],
                            agentKey=key,
                            message="one more",
                        )
                        sent_idle = True
            elif frame["op"] == "ack":
                assert frame["id"] in (2, 3)
            elif frame["op"] == "error":
                raise AssertionError(frame)
            elif frame["op"] == "end":
                break
        helper_msgs = [
            e["data"]["text"] for e in events if e["type"] == "USER_MESSAGE" and e["source"]
        ]
        assert helper_msgs[:1] == ["hurry"] and "one more" in helper_msgs
        helper_results = [
            e["data"]["text"] for e in events if e["type"] == "AGENT_RESULT" and e["source"]
        ]
        assert helper_results[0] == "re: hurry" and helper_results[-1] == "re: one more"
