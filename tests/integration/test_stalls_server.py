"""Stalls through a real server: an agent silent for `limits.stall_seconds` is marked
(AGENT_STALLED, journaled, in `detail: status` too, in /metrics) and unmarked when it
streams again; an agent waiting for a person is not stalled (docs/events.md)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import trio
from websockets.trio.client import connect

from tests.integration.test_approvals_server import Client, agent, spawn
from tests.memory_server import autojump, memory_server
from tests.redis_helpers import redis_url  # noqa: F401  (fixture)
from tests.server_helpers import demo_config, recv, replay

AGENTS = {
    "sleeper_boss": agent(
        [{"calls": [spawn("sleeper")]}, {"say": "boss got: {results}"}], ["agent_spawn"]
    ),
    # The model answers its second turn only after 2.5 s of silence.
    "sleeper": agent(
        [
            {"say": "first words", "calls": [{"name": "read_file", "args": {"path": "x"}}]},
            {"sleep": 2.5, "say": "awake again"},
        ],
        ["read_file"],
    ),
    "asker": agent(
        [
            {"calls": [{"name": "write_file", "args": {"path": "a.txt", "content": "A"}}]},
            {"say": "asked"},
        ],
        ["write_file"],
        approval=["write_file"],
    ),
}


def stalls(events: list[dict[str, Any]]) -> list[tuple[str, bool]]:
    return [
        (e["source"]["agentId"] if e["source"] else "root", e["data"]["stalled"])
        for e in events
        if e["type"] == "AGENT_STALLED"
    ]


async def metric(port: int) -> float:
    async with httpx.AsyncClient() as http:
        text = (await http.get(f"http://127.0.0.1:{port}/metrics")).text
    (line,) = [x for x in text.splitlines() if x.startswith("orchestrator_agents_stalled ")]
    return float(line.split()[1])


@autojump
async def test_a_silent_agent_is_marked_then_unmarked(tmp_path: Path) -> None:
    config = demo_config(tmp_path, extra_agents=AGENTS, limits={"stall_seconds": 1})
    async with memory_server(config) as server, connect(server.url, max_size=None) as ws:
        await ws.send(json.dumps({"op": "run", "id": "r", "agent": "sleeper_boss", "input": "go"}))
        streams: dict[str, list[dict[str, Any]]] = {}
        subs: dict[str, str] = {}  # "full" / "status" -> sub
        ended: set[str] = set()
        counted = False
        while len(ended) < 2:
            frame = await recv(ws)
            if frame.get("id") == "r":  # then a second subscription: status only
                subs["full"] = frame["sub"]
                status = {"op": "subscribe", "id": "s", "runId": frame["runId"], "afterSeq": 0}
                await ws.send(json.dumps({**status, "detail": "status"}))
            elif frame.get("id") == "s":
                subs["status"] = frame["sub"]
            elif frame["op"] == "events":
                streams.setdefault(frame["sub"], []).extend(frame["events"])
            elif frame["op"] == "end":
                ended.add(frame["sub"])
            full_events = streams.get(subs.get("full", ""), [])
            if not counted and stalls(full_events) == [("sleeper", True)]:
                assert await metric(server.port) == 1  # while it is marked
                counted = True
        assert counted and await metric(server.port) == 0
    everything, statuses = streams[subs["full"]], streams[subs["status"]]
    assert stalls(everything) == stalls(statuses) == [("sleeper", True), ("sleeper", False)]
    marked, unmarked = [e for e in everything if e["type"] == "AGENT_STALLED"]
    assert marked["source"]["agentId"] == "sleeper"  # not the boss: it waits for it
    assert marked["data"]["silentSeconds"] >= 1 and "tool" not in marked["data"]
    between = [e for e in everything if marked["seq"] < e["seq"] < unmarked["seq"]]
    assert between and between[0]["type"] == "REASONING"  # its words end the silence
    assert between[0]["source"]["agentId"] == "sleeper"
    assert unmarked["data"]["lastSeq"] == between[0]["seq"]
    assert unmarked["data"]["silentSeconds"] >= 2
    assert not any(e["type"] == "REASONING" and not e.get("last") for e in statuses)


@autojump
async def test_waiting_for_a_person_is_not_a_stall_and_a_late_watcher_sees_marks(
    tmp_path: Path,
) -> None:
    config = demo_config(tmp_path, extra_agents=AGENTS, limits={"stall_seconds": 0.5})
    async with memory_server(config) as server, connect(server.url, max_size=None) as ws:
        client = Client(ws)
        ack = await client.ask(op="run", id="r", agent="asker", input="go")
        (asked,) = await client.until("APPROVAL_REQUESTED")
        await trio.sleep(1.5)  # three times stall_seconds
        answer = {"op": "approve", "toolCallId": asked["data"]["toolCallId"]}
        await client.ask(id="a", runId=ack["runId"], decision="approve", **answer)
        await client.finish()
        assert stalls(client.events) == []
        late = await replay(server.url, ack["runId"])
        assert [e["seq"] for e in late] == [e["seq"] for e in client.events]


async def test_a_gateway_counts_the_stalls_of_the_clusters_workers(
    tmp_path: Path,
    redis_url: str,  # noqa: F811
) -> None:
    """Stalls are detected where runs execute: a gateway's orchestrator_agents_stalled
    counted none of a cluster's; it now sums its live workers' (their heartbeats)."""
    from tests.cluster_helpers import cluster

    sleepy = {"dozer": agent([{"sleep": 30, "say": "late"}], [])}
    async with cluster(tmp_path, redis_url, extra_agents=sleepy, limits={"stall_seconds": 1}) as c:
        gateway = await c.start("serve")
        await c.start("worker")
        port = int(gateway.url.rsplit(":", 1)[1].split("/")[0])
        async with connect(gateway.url) as ws:
            await ws.send(json.dumps({"op": "run", "id": 1, "agent": "dozer", "input": "zz"}))
            assert json.loads(await ws.recv())["op"] == "ack"
            seen: list[float] = []

            async def stalled() -> bool:
                seen.append(await metric(port))
                return seen[-1] >= 1

            with trio.fail_after(60):
                while not await stalled():  # noqa: ASYNC110 - other processes' state
                    await trio.sleep(0.5)
