"""The server under misbehaving clients, tenants, failing storage and oversized data."""

from __future__ import annotations

import json
import logging
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio
from websockets.exceptions import InvalidStatus
from websockets.trio.client import connect

import orchestrator.server.app as app_module
import orchestrator.storage.open as storage_open
from orchestrator.cli.dispatch import ACCESS_LOGGERS
from orchestrator.config import ServerConfig
from orchestrator.storage.base import RunRecord, Storage
from orchestrator.storage.memory import MemoryStorage
from orchestrator.storage.retention import Retention, RetentionPolicy
from tests.helpers import eventually
from tests.raw_client import raw_client
from tests.server_helpers import (
    demo_config,
    read_until_end,
    recv,
    replay,
    request,
    run_to_end,
    running_server,
    send,
)

TALKER = {
    "description": "talks",
    "instructions": "i",
    "script": {"turns": [{"say": "word " * 40000}]},
}


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


async def test_a_client_that_never_reads_leaves_no_task_behind(tmp_path: Path) -> None:
    """Regression: 40 subscribes without reading left the handler waiting forever on
    websockets' receive flow control after the 4000 close (192 stuck tasks at 180
    such sockets), and shutdown then never completed (issue 8.2)."""
    config = demo_config(
        tmp_path, server={"slow_client_timeout": 0.5}, extra_agents={"talker": TALKER}
    )
    async with running_server(config) as server:
        run_id, _, _ = await run_to_end(server.url, agent="talker")
        handlers = server.ws_server.handler_nursery
        async with raw_client(server.url) as client:
            for n in range(40):
                await client.send_text(json.dumps({"op": "subscribe", "id": n, "runId": run_id}))
            await eventually(
                lambda: not handlers.child_tasks and not server.app.connections, within=20
            )
        assert not server.ws_server.all_connections


async def test_shutdown_is_bounded_whatever_clients_do(tmp_path: Path) -> None:
    config = demo_config(
        tmp_path,
        token_delay=0.01,
        server={"slow_client_timeout": 600, "shutdown_timeout": 2},
        extra_agents={"talker": TALKER},
    )
    async with trio.open_nursery() as nursery:
        server = await nursery.start(app_module.serve, config)
        run_id, _, _ = await run_to_end(server.url, agent="talker")
        async with raw_client(server.url) as client:
            for n in range(40):
                await client.send_text(json.dumps({"op": "subscribe", "id": n, "runId": run_id}))
            await trio.sleep(0.5)
            with trio.fail_after(10):  # 2 s of grace, then everything is dropped
                await server.shutdown()


async def test_users_see_and_control_only_their_runs(tmp_path: Path) -> None:
    tokens = [
        {"name": "ann", "token": "ann-secret", "role": "user"},
        {"name": "bob", "token": "bob-secret", "role": "user", "max_concurrent_runs": 1},
        {"name": "ops", "token": "ops-secret", "role": "admin"},
    ]
    config = demo_config(tmp_path, token_delay=0.05, server={"tokens": tokens})
    async with running_server(config) as server:
        url = server.url
        async with (
            connect(url, additional_headers=bearer("ann-secret")) as ann,
            connect(url, additional_headers=bearer("bob-secret")) as bob,
            connect(url, additional_headers=bearer("ops-secret")) as ops,
        ):
            mine = await request(ann, op="run", id=1, agent="critic", input="ann's secret task")
            run_id = mine["runId"]
            for op in (
                {"op": "subscribe", "runId": run_id},
                {"op": "cancel", "runId": run_id},
                {"op": "send", "runId": run_id, "message": "hi"},
            ):
                reply = await request(bob, id=9, **op)
                assert reply == {
                    "op": "error",
                    "id": 9,
                    "code": "not_found",
                    "message": f"unknown run {run_id!r}",
                }
            assert (await request(bob, op="runs"))["runs"] == []
            listed = (await request(ops, op="runs"))["runs"]
            assert [(r["runId"], r["owner"]) for r in listed] == [(run_id, "ann")]
            # Bob may run one at a time; the second is refused while the first runs.
            first = await request(bob, op="run", id=2, agent="critic", input="x", stream=False)
            assert first["op"] == "ack"
            second = await request(bob, op="run", id=3, agent="critic", input="y", stream=False)
            assert second["code"] == "limit_exceeded" and "'bob'" in second["message"]
            # The admin can watch and cancel Ann's run.
            watch = await request(ops, op="subscribe", id=4, runId=run_id)
            assert watch["op"] == "ack"
            await send(ops, op="cancel", id=5, runId=run_id)
            _, end = await read_until_end(ops, watch["sub"])
            assert end["status"] == "cancelled"


async def test_a_viewer_sees_every_run_and_changes_nothing(tmp_path: Path) -> None:
    tokens = [
        {"name": "ann", "token": "ann-secret", "role": "user"},
        {"name": "eve", "token": "eve-secret", "role": "viewer"},
    ]
    config = demo_config(tmp_path, token_delay=0.02, server={"tokens": tokens})
    async with running_server(config) as server:
        url = server.url
        async with (
            connect(url, additional_headers=bearer("ann-secret")) as ann,
            connect(url, additional_headers=bearer("eve-secret")) as eve,
        ):
            mine = await request(ann, op="run", id=1, agent="critic", input="ann's task")
            run_id = mine["runId"]
            await read_until_end(ann, mine["sub"])
            listed = (await request(eve, op="runs", id=2))["runs"]
            assert [(r["runId"], r["owner"]) for r in listed] == [(run_id, "ann")]
            for op, verb in (
                ({"op": "run", "agent": "critic", "input": "x"}, "run"),
                ({"op": "cancel", "runId": run_id}, "cancel"),
                ({"op": "cancel", "runId": "run-nope"}, "cancel"),
                ({"op": "send", "runId": run_id, "message": "hi"}, "send"),
            ):
                reply = await request(eve, id=9, **op)
                assert reply["op"] == "error" and reply["code"] == "unauthorized", reply
                assert f"a viewer (read-only): {verb!r} is refused" in reply["message"]
            watch = await request(eve, op="subscribe", id=3, runId=run_id)
            assert watch["op"] == "ack"
            events, end = await read_until_end(eve, watch["sub"])
            assert end["status"] == "completed" and events[0]["type"] == "RUN_STARTED"
            assert (await request(eve, op="agents", id=4))["op"] == "agents"
        async with httpx.AsyncClient() as http:
            auth = await http.get(
                f"http://127.0.0.1:{server.port}/auth", headers=bearer("eve-secret")
            )
        said = auth.json()
        assert {k: said[k] for k in ("authorized", "name", "admin", "readOnly")} == {
            "authorized": True,
            "name": "eve",
            "admin": False,
            "readOnly": True,
        }
        assert said["maxInputBytes"] == 256 * 1024  # (the page checks sizes before sending)


async def test_per_token_subscription_limit(tmp_path: Path) -> None:
    tokens = [{"name": "ann", "token": "ann-secret", "role": "user", "max_subscriptions": 2}]
    config = demo_config(tmp_path, token_delay=0.05, server={"tokens": tokens})
    async with running_server(config) as server:
        headers = bearer("ann-secret")
        async with (
            connect(server.url, additional_headers=headers) as one,
            connect(server.url, additional_headers=headers) as two,
        ):
            first = await request(one, op="run", id=1, agent="critic", input="x")
            second = await request(two, op="subscribe", id=2, runId=first["runId"])
            assert second["op"] == "ack"
            third = await request(two, op="subscribe", id=3, runId=first["runId"])
            while third["op"] == "events":
                third = await recv(two)
            assert third["code"] == "limit_exceeded" and "token 'ann'" in third["message"]


async def test_cross_site_pages_metrics_and_tokens_in_logs(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    tokens = [{"name": "ann", "token": "ann-secret-123", "role": "user"}]
    config = demo_config(
        tmp_path, server={"tokens": [*tokens, "root-secret-456"], "metrics_token": "scrape-789"}
    )
    caplog.set_level(logging.DEBUG)
    for name in ACCESS_LOGGERS:  # as `serve --access-log` does; an earlier CLI test may quiet them
        caplog.set_level(logging.DEBUG, logger=name)
    async with running_server(config) as server:
        # A page on another site cannot drive the server, even with a token.
        with pytest.raises(InvalidStatus) as info:
            async with connect(
                server.url + "?token=ann-secret-123",
                origin="https://evil.example",  # type: ignore[arg-type]
            ):
                pass
        assert info.value.response.status_code == 403
        own = f"http://127.0.0.1:{server.port}"
        async with connect(
            server.url + "?token=ann-secret-123",
            origin=own,  # type: ignore[arg-type]
        ) as ws:
            assert (await request(ws, op="ping"))["op"] == "pong"
        with pytest.raises(InvalidStatus):
            async with connect(server.url, additional_headers=bearer("wrong-000")):
                pass
        base = f"http://127.0.0.1:{server.port}"
        async with httpx.AsyncClient() as http:
            assert (await http.get(f"{base}/metrics")).status_code == 401
            user = await http.get(f"{base}/metrics", headers=bearer("ann-secret-123"))
            assert user.status_code == 401
            for secret in ("scrape-789", "root-secret-456"):
                scraped = await http.get(f"{base}/metrics", headers=bearer(secret))
                assert (
                    scraped.status_code == 200
                    and "orchestrator_storage_healthy 1.0" in scraped.text
                )
            assert (await http.get(f"{base}/healthz")).json() == {"status": "ok"}
    # The server's log lines (the test's own websockets client logs its requests too).
    logged = "\n".join(
        r.getMessage() for r in caplog.records if not r.name.startswith("websockets.client")
    )
    assert "GET /ws?token=[redacted]" in logged
    for secret in ("ann-secret-123", "root-secret-456", "scrape-789", "wrong-000"):
        assert secret not in logged


class SwitchableStorage(MemoryStorage):
    """Memory storage whose writes can be made to fail."""

    failing = False

    async def write(self, records: list[RunRecord], events: list[tuple[str, int, bytes]]) -> None:
        if SwitchableStorage.failing:
            raise ConnectionError("Redis went away")


async def test_storage_failure_degrades_runs_not_the_server(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Regression: a failed journal write killed the server within a second (issue 8.3)."""

    def open_storage(config: ServerConfig) -> AbstractAsyncContextManager[Storage]:
        return SwitchableStorage.open()

    monkeypatch.setattr(storage_open, "open_storage", open_storage)
    monkeypatch.setattr(SwitchableStorage, "failing", False)
    config = demo_config(tmp_path, token_delay=0.01, extra_agents={"talker": TALKER})
    async with running_server(config) as server:
        base = f"http://127.0.0.1:{server.port}"
        async with connect(server.url, max_size=None) as ws, httpx.AsyncClient() as http:
            ack = await request(ws, op="run", id=1, agent="critic", input="x")
            seen: list[dict[str, Any]] = []
            while not seen:
                frame = await recv(ws)
                seen += frame.get("events", [])
            SwitchableStorage.failing = True
            await eventually(lambda: not server.app.journal.writer.healthy)
            health = await http.get(f"{base}/healthz")
            assert health.status_code == 503 and health.json()["storage"] == "failing"
            refused = await request(ws, op="run", id=2, agent="critic", input="y")
            while refused["op"] == "events":
                refused = await recv(ws)
            assert refused["code"] == "unavailable" and "read-only" in refused["message"]
            assert (await request(ws, op="ping", id=3))["op"] in ("pong", "events")
            SwitchableStorage.failing = False
            events, end = await read_until_end(ws, ack["sub"])
            assert end["status"] == "completed"
            assert [e["seq"] for e in seen + events] == list(range(1, len(seen + events) + 1))
            assert (await http.get(f"{base}/healthz")).status_code == 200


async def test_huge_tool_arguments_are_cut_for_clients_but_not_for_the_tool(
    tmp_path: Path,
) -> None:
    content = "z" * 3_000_000
    writer = {
        "description": "writes",
        "instructions": "i",
        "tools": ["write_file"],
        "script": {
            "turns": [
                {
                    "calls": [
                        {"name": "write_file", "args": {"path": "big.txt", "content": content}}
                    ]
                },
                {"say": "done"},
            ]
        },
    }
    config = demo_config(tmp_path, extra_agents={"writer": writer})
    # A client with websockets' default 1 MiB frame limit gets the whole run.
    async with running_server(config) as server, connect(server.url) as ws:
        ack = await request(ws, op="run", id=1, agent="writer", input="x")
        events, end = await read_until_end(ws, ack["sub"])
    assert end["status"] == "completed"
    assert all(len(json.dumps(e)) <= 256 * 1024 for e in events)
    call = next(e for e in events if e["type"] == "TOOL_CALL")
    assert call["data"]["truncated"] is True and call["data"]["name"] == "write_file"
    assert (tmp_path / "workspace" / "big.txt").read_text() == content


async def test_runs_are_listed_in_pages(tmp_path: Path) -> None:
    async with running_server(demo_config(tmp_path)) as server:
        ids = [(await run_to_end(server.url, agent="critic"))[0] for _ in range(5)]
        async with connect(server.url) as ws:
            page = await request(ws, op="runs", limit=2)
            assert [r["runId"] for r in page["runs"]] == ids[::-1][:2] and page["more"]
            page = await request(ws, op="runs", limit=2, before=page["runs"][-1]["runId"])
            assert [r["runId"] for r in page["runs"]] == ids[::-1][2:4] and page["more"]
            page = await request(ws, op="runs", limit=2, before=page["runs"][-1]["runId"])
            assert [r["runId"] for r in page["runs"]] == ids[:1] and not page["more"]


async def test_a_blocking_run_ends_when_its_client_leaves(tmp_path: Path) -> None:
    """Regression: one client could fill every run slot with stream:false runs and leave."""
    async with running_server(demo_config(tmp_path, token_delay=0.05)) as server:
        async with connect(server.url) as ws:
            ack = await request(ws, op="run", id=1, agent="planner", input="x", stream=False)
        await eventually(lambda: not server.app.host.active)
        log = server.app.journal.get(ack["runId"])
        assert log.record.status == "cancelled"


async def test_a_gap_frame_replaces_what_retention_trimmed(tmp_path: Path) -> None:
    config = demo_config(
        tmp_path,
        storage={"url": "memory://", "retention": {"max_run_events": 100}},
        extra_agents={"talker": TALKER},
    )
    async with running_server(config) as server:
        run_id, events, _ = await run_to_end(server.url, agent="talker")
        await Retention(server.app.journal, RetentionPolicy(max_run_events=100)).apply()
        last = events[-1]["seq"]
        async with connect(server.url, max_size=None) as ws:
            ack = await request(ws, op="subscribe", id=1, runId=run_id, afterSeq=5)
            gap = await recv(ws)
            assert gap == {"op": "gap", "sub": ack["sub"], "fromSeq": 6, "toSeq": last - 100}
            rest, end = await read_until_end(ws, ack["sub"])
        assert [e["seq"] for e in rest] == list(range(last - 99, last + 1))
        assert rest == events[-100:] and end["status"] == "completed"


async def test_a_self_spawning_agent_stops_at_max_agents(tmp_path: Path) -> None:
    """Regression: a self-spawning agent reached 28,431 agents in 45 s (issue 8.6)."""
    spawner = {
        "description": "spawns itself",
        "instructions": "i",
        "tools": ["agent_spawn"],
        "script": {
            "turns": [
                {
                    "calls": [
                        {"name": "agent_spawn", "args": {"agent_id": "spawner", "task": "again"}},
                        {"name": "agent_spawn", "args": {"agent_id": "spawner", "task": "again"}},
                    ]
                },
                {"say": "ok"},
            ]
        },
    }
    config = demo_config(
        tmp_path, limits={"max_depth": 64, "max_agents": 40}, extra_agents={"spawner": spawner}
    )
    async with running_server(config) as server:
        _, events, end = await run_to_end(server.url, agent="spawner")
    assert end["status"] == "completed"
    started = [e for e in events if e["type"] == "AGENT_STARTED"]
    assert len(started) == 39  # 40 with the root
    refused = [
        e for e in events if e["type"] == "TOOL_RESULT" and "max_agents" in e["data"]["content"]
    ]
    assert refused and all(e["data"]["isError"] for e in refused)


async def test_a_turn_that_streams_too_much_fails_its_agent(tmp_path: Path) -> None:
    config = demo_config(tmp_path, limits={"max_turn_events": 500}, extra_agents={"talker": TALKER})
    async with running_server(config) as server:
        _, events, end = await run_to_end(server.url, agent="talker")
    assert end["status"] == "failed"
    error = next(e for e in events if e["type"] == "AGENT_ERROR")
    assert error["data"]["errorType"] == "output_limit"
    assert len([e for e in events if e["type"] == "REASONING"]) <= 500 + 256  # checked per 256


async def test_many_clients_and_never_reading_ones(tmp_path: Path) -> None:
    """What held under attack and must keep holding: 500 clients on one run all get
    every event in order, and 50 clients that never read leave a reader unaffected."""
    config = demo_config(tmp_path, token_delay=0.002, extra_agents={"talker": TALKER})
    async with running_server(config) as server:
        run_id, reference, _ = await run_to_end(server.url, agent="critic")
        results: list[list[dict[str, Any]]] = []

        async def watch() -> None:
            results.append(await replay(server.url, run_id))

        async with trio.open_nursery() as nursery:
            for _ in range(500):
                nursery.start_soon(watch)
        assert len(results) == 500 and all(r == reference for r in results)

        talk_id, talk_events, _ = await run_to_end(server.url, agent="talker")
        async with trio.open_nursery() as nursery:
            for _ in range(50):

                async def stall() -> None:
                    async with raw_client(server.url) as client:
                        await client.send_text(json.dumps({"op": "subscribe", "runId": talk_id}))
                        await trio.sleep_forever()

                nursery.start_soon(stall)
            await trio.sleep(0.5)
            with trio.fail_after(30):
                assert await replay(server.url, talk_id) == talk_events
            nursery.cancel_scope.cancel()


async def test_a_post_to_an_endpoint_that_is_off_is_a_404_that_says_so(tmp_path: Path) -> None:
    """Regression: websockets' server dropped any non-GET request unanswered (curl exit
    52), so a POST to /ag-ui or /mcp while off got an empty reply, not the 404 the docs
    promise."""
    async with running_server(demo_config(tmp_path)) as server, httpx.AsyncClient() as http:
        base = f"http://127.0.0.1:{server.port}"
        for path, setting in (("/ag-ui/planner", "ag_ui"), ("/mcp", "mcp"), ("/a2a/x", "a2a")):
            reply = await http.post(base + path, json={})
            assert reply.status_code == 404
            assert reply.text == f"not found: {path} is off (server.{setting}: true turns it on)\n"
        other = await http.delete(base + "/runs")
        assert other.status_code == 404 and other.text.startswith("not found: DELETE /runs")
        assert (await http.get(base + "/healthz")).status_code == 200
        async with connect(server.url) as ws:  # /ws still goes to websockets
            assert (await request(ws, op="ping"))["op"] == "pong"
