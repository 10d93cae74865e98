"""Cluster mode with real `orchestrator` processes on the machine's Redis (issue 12)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import msgspec
import pytest
import trio
from websockets.trio.client import ClientConnection, connect

from tests.cluster_helpers import cluster
from tests.redis_helpers import redis_url  # noqa: F401  (fixture)
from tests.server_helpers import request

pytestmark = pytest.mark.trio


class _Frame(msgspec.Struct):
    op: str
    events: list[msgspec.Raw] = []
    status: str | None = None


_decode_frame = msgspec.json.Decoder(_Frame).decode


async def raw_events(ws: ClientConnection, *, within: float = 60) -> tuple[list[bytes], str]:
    """Every event of the subscription on `ws`, as the bytes the server sent, and the end status."""
    out: list[bytes] = []
    with trio.fail_after(within):
        while True:
            frame = _decode_frame(await ws.recv(decode=False))
            if frame.op == "events":
                out.extend(bytes(raw) for raw in frame.events)
            elif frame.op == "end":
                return out, frame.status or ""


def seqs(raws: list[bytes]) -> list[int]:
    return [json.loads(raw)["seq"] for raw in raws]


async def test_a_run_submitted_on_one_gateway_is_watched_live_on_another(
    tmp_path: Path,
    redis_url: str,  # noqa: F811
) -> None:
    async with cluster(tmp_path, redis_url) as c:
        g1 = await c.start("serve")
        g2 = await c.start("serve")
        await c.start("worker")
        async with (
            connect(g1.url, max_size=None) as a,
            connect(g2.url, max_size=None) as b,
        ):
            ack = await request(b, op="run", id=1, agent="planner", input="spread the work")
            assert ack["op"] == "ack" and ack["runId"].startswith("run-")
            sub = await request(a, op="subscribe", id=1, runId=ack["runId"])
            assert sub["op"] == "ack", sub
            async with trio.open_nursery() as nursery:
                got: dict[str, tuple[list[bytes], str]] = {}

                async def read(name: str, ws: ClientConnection) -> None:
                    got[name] = await raw_events(ws)

                nursery.start_soon(read, "a", a)
                nursery.start_soon(read, "b", b)
            live_a, end_a = got["a"]
            live_b, end_b = got["b"]
            assert end_a == end_b == "completed"
            assert seqs(live_b) == list(range(1, len(live_b) + 1))
            assert live_a == live_b  # byte for byte, in order
            agents = {json.loads(r)["type"] for r in live_b}
            assert {"RUN_STARTED", "AGENT_STARTED", "AGENT_RESULT", "RUN_FINISHED"} <= agents
            # A resume with afterSeq on gateway 1 is gateway 2's live feed from there on.
            half = len(live_b) // 2
            resumed = await request(a, op="subscribe", id=2, runId=ack["runId"], afterSeq=half)
            assert resumed["op"] == "ack"
            tail, _ = await raw_events(a)
            assert tail == live_b[half:]
            runs = await request(a, op="runs", id=3)
            (entry,) = runs["runs"]
            assert entry["status"] == "completed" and entry["attempt"] == 1
            assert entry["worker"] == c.instances[2].name


async def test_a_cancel_through_one_gateway_reaches_every_running_agent(
    tmp_path: Path,
    redis_url: str,  # noqa: F811
) -> None:
    async with cluster(tmp_path, redis_url, token_delay=0.05) as c:
        g1 = await c.start("serve")
        g2 = await c.start("serve")
        await c.start("worker")
        async with connect(g1.url, max_size=None) as a, connect(g2.url, max_size=None) as b:
            ack = await request(b, op="run", id=1, agent="planner", input="to be cancelled")
            # Wait until children are streaming, then cancel through the other gateway.
            seen: list[dict[str, Any]] = []
            with trio.fail_after(30):
                while not any(e["type"] == "AGENT_STARTED" for e in seen):
                    frame = json.loads(await b.recv())
                    seen.extend(frame.get("events", []))
            assert (await request(a, op="cancel", id=2, runId=ack["runId"]))["op"] == "ack"
            rest, status = await raw_events(b)
            events = seen + [json.loads(r) for r in rest]
            assert status == "cancelled"
            started = {
                e["source"]["agentKey"] if e["source"] else None
                for e in events
                if e["type"] in ("RUN_STARTED", "AGENT_STARTED")
            }
            errors = [e for e in events if e["type"] == "AGENT_ERROR"]
            assert errors and all(e["data"]["errorType"] == "cancelled" for e in errors)
            ended = {
                e["source"]["agentKey"] if e["source"] else None
                for e in events
                if e["type"] in ("AGENT_ERROR", "AGENT_RESULT")
            }
            assert started == ended  # every agent has exactly one terminal event
            terminal = [e for e in events if e["type"] in ("AGENT_ERROR", "AGENT_RESULT")]
            assert len(terminal) == len(started)


async def test_ten_runs_spread_over_three_workers_within_max_runs(
    tmp_path: Path,
    redis_url: str,  # noqa: F811
) -> None:
    async with cluster(tmp_path, redis_url, max_runs=2, token_delay=0.01) as c:
        gateway = await c.start("serve")
        workers = [await c.start("worker") for _ in range(3)]
        async with connect(gateway.url, max_size=None) as ws:
            run_ids = []
            for i in range(10):
                ack = await request(ws, op="run", id=i, agent="critic", input=f"r{i}", stream=False)
                run_ids.append(ack["runId"])
            with trio.fail_after(90):
                results = [json.loads(await ws.recv()) for _ in run_ids]
            assert sorted(r["runId"] for r in results) == sorted(run_ids)
            assert all(r["status"] == "completed" for r in results)
            listing = await request(ws, op="runs", id="l", limit=20)
            by_worker: dict[str, list[str]] = {}
            for entry in listing["runs"]:
                by_worker.setdefault(entry["worker"], []).append(entry["runId"])
            assert set(by_worker) == {w.name for w in workers}  # all three took runs
            # No worker ever ran more than max_runs at once (from the journaled times).
            for ids in by_worker.values():
                spans = []
                for run_id in ids:
                    sub = await request(ws, op="subscribe", id=run_id, runId=run_id)
                    assert sub["op"] == "ack"
                    events = [json.loads(r) for r in (await raw_events(ws))[0]]
                    spans.append((events[0]["ts"], events[-1]["ts"]))
                for start, _ in spans:
                    running = sum(1 for s, e in spans if s <= start < e)
                    assert running <= 2
