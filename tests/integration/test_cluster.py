"""Cluster mode with real `orchestrator` processes on the machine's Redis (issue 12)."""

from __future__ import annotations

import json
from base64 import b64encode
from pathlib import Path
from typing import Any

import pytest
import trio
from websockets.trio.client import ClientConnection, connect

from tests.cluster_helpers import (
    check_tree,
    cluster,
    raw_events,
    runs_entry,
    seqs,
    until,
    watch_all,
)
from tests.helpers import REPO
from tests.redis_helpers import redis_url  # noqa: F401  (fixture)
from tests.server_helpers import request

pytestmark = pytest.mark.trio


async def until_a_child_started(ws: ClientConnection) -> list[dict[str, Any]]:
    """The events of the subscription on `ws` up to the first AGENT_STARTED."""
    seen: list[dict[str, Any]] = []
    with trio.fail_after(30):
        while not any(e["type"] == "AGENT_STARTED" for e in seen):
            frame = json.loads(await ws.recv())
            seen.extend(frame.get("events", []))
    return seen


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
            seen = await until_a_child_started(b)
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


async def test_kill_9_of_the_worker_mid_tree_another_worker_continues_the_run(
    tmp_path: Path,
    redis_url: str,  # noqa: F811
) -> None:
    async with cluster(tmp_path, redis_url, lease_seconds=2, token_delay=0.02) as c:
        gateway = await c.start("serve")
        first = await c.start("worker")
        async with connect(gateway.url, max_size=None) as ws:
            ack = await request(ws, op="run", id=1, agent="planner", input="survive a crash")
            seen: list[dict[str, Any]] = []
            with trio.fail_after(30):  # children are streaming
                while sum(e["type"] == "AGENT_STARTED" for e in seen) < 2 or not any(
                    e["type"] == "REASONING" and e["source"] for e in seen[-3:]
                ):
                    frame = json.loads(await ws.recv())
                    seen.extend(frame.get("events", []))
            first.kill()
            killed_at = trio.current_time()
            second = await c.start("worker")
            # The takeover comes within lease_seconds + 5 s of the kill.
            with trio.fail_after(2 + 5 - (trio.current_time() - killed_at)):
                while not any(e["type"] == "RUN_RESUMED" for e in seen):
                    seen.extend(json.loads(await ws.recv()).get("events", []))
            rest, status = await watch_all(ws, within=60)
            events = seen + rest
            assert status == "completed", events[-1]
            resumed = [e for e in events if e["type"] == "RUN_RESUMED"]
            assert len(resumed) == 1
            assert resumed[0]["data"]["attempt"] == 2
            assert resumed[0]["data"]["worker"] == second.name
            assert resumed[0]["data"]["afterSeq"] == resumed[0]["seq"] - 1
            check_tree(events)
            # The children streaming at the crash go on under their own agentKeys: their
            # cut-off turns are marked, asked again, and they end once, after the takeover.
            at = events.index(resumed[0])
            before = {e["source"]["agentKey"] for e in events[:at] if e["type"] == "AGENT_STARTED"}
            abandoned = {e["source"]["agentKey"] for e in events if e["type"] == "TURN_ABANDONED"}
            assert abandoned and abandoned <= before
            for agent_key in abandoned:
                (end,) = [
                    e
                    for e in events
                    if e["type"] in ("AGENT_RESULT", "AGENT_ERROR")
                    and e["source"]
                    and e["source"]["agentKey"] == agent_key
                ]
                assert end["type"] == "AGENT_RESULT" and end["seq"] > resumed[0]["seq"]
        async with connect(gateway.url, max_size=None) as ws2:
            sub = await request(ws2, op="subscribe", id=1, runId=ack["runId"])
            assert sub["op"] == "ack"
            journal, _ = await watch_all(ws2)
            assert journal == events
            runs = await request(ws2, op="runs", id=2)
            assert runs["runs"][0]["attempt"] == 2 and runs["runs"][0]["worker"] == second.name


async def test_a_paused_worker_past_its_lease_is_fenced_off(
    tmp_path: Path,
    redis_url: str,  # noqa: F811
) -> None:
    async with cluster(tmp_path, redis_url, lease_seconds=2, token_delay=0.02) as c:
        gateway = await c.start("serve")
        paused = await c.start("worker")
        async with connect(gateway.url, max_size=None) as ws, connect(gateway.url) as ctl:
            ack = await request(ws, op="run", id=1, agent="planner", input="pause me")
            seen: list[dict[str, Any]] = []
            with trio.fail_after(30):
                while not any(e["type"] == "AGENT_STARTED" for e in seen):
                    seen.extend(json.loads(await ws.recv()).get("events", []))
            paused.stop()  # SIGSTOP: its lease runs out while it sleeps
            taker = await c.start("worker")

            async def taken_over() -> bool:
                entry = await runs_entry(ctl, ack["runId"])
                return bool(entry["attempt"] == 2 and entry["worker"] == taker.name)

            await until(taken_over)
            paused.cont()  # it wakes up believing it still owns the run
            rest, status = await watch_all(ws)
            events = seen + rest
            assert status == "completed"
            check_tree(events)
            assert [e["type"] for e in events].count("RUN_RESUMED") == 1
            # It learnt it lost the lease (refused renewal or append) and stopped its copy.
            await until(
                lambda: _true(any("lost the lease of run" in line for line in paused.lines))
            )
            assert paused.process.returncode is None  # it lives on, serving other runs
            ok = await request(
                ctl, op="run", id=2, agent="critic", input="still fine", stream=False
            )
            result = json.loads(await ctl.recv()) if ok["op"] == "ack" else ok
            assert result["status"] == "completed"


async def _true(value: bool) -> bool:
    return value


async def test_a_run_whose_worker_always_dies_fails_after_max_attempts(
    tmp_path: Path,
    redis_url: str,  # noqa: F811
) -> None:
    async with cluster(tmp_path, redis_url, lease_seconds=1, token_delay=0.05) as c:
        gateway = await c.start("serve")
        worker = await c.start("worker")
        async with connect(gateway.url, max_size=None) as ws, connect(gateway.url) as ctl:
            ack = await request(ws, op="run", id=1, agent="planner", input="doomed")
            for attempt in (1, 2, 3):

                async def running(attempt: int = attempt, name: str = worker.name) -> bool:
                    entry = await runs_entry(ctl, ack["runId"])
                    return bool(entry["attempt"] == attempt and entry["worker"] == name)

                await until(running)
                await trio.sleep(0.3)
                worker.kill()
                # Other runs keep flowing meanwhile, on another worker.
                worker = await c.start("worker")
                done = await request(
                    ctl, op="run", id=attempt, agent="critic", input="x", stream=False
                )
                assert done["op"] == "ack"
                assert json.loads(await ctl.recv())["status"] in ("completed",)
            events, status = await watch_all(ws)
            assert status == "failed"
            check_tree(events)
            finished = events[-1]
            assert finished["data"]["errorType"] == "worker_lost"
            assert [e["data"]["attempt"] for e in events if e["type"] == "RUN_RESUMED"] == [2, 3]
            lost = [e for e in events if e["type"] == "AGENT_ERROR"]
            assert lost and all(e["data"]["errorType"] in ("worker_lost",) for e in lost[-1:])


async def test_a_cancel_sent_while_the_run_has_no_worker_reaches_every_agent(
    tmp_path: Path,
    redis_url: str,  # noqa: F811
) -> None:
    """The worker dies; the cancel comes through the other gateway before anyone took
    the run over; the next worker continues the run and cancels it at once."""
    async with cluster(tmp_path, redis_url, lease_seconds=1, token_delay=0.05) as c:
        g1 = await c.start("serve")
        g2 = await c.start("serve")
        first = await c.start("worker")
        async with connect(g1.url, max_size=None) as a, connect(g2.url, max_size=None) as b:
            ack = await request(b, op="run", id=1, agent="planner", input="cancel in flight")
            seen: list[dict[str, Any]] = []
            with trio.fail_after(30):
                while sum(e["type"] == "AGENT_STARTED" for e in seen) < 2:
                    seen.extend(json.loads(await b.recv()).get("events", []))
            first.kill()
            assert (await request(a, op="cancel", id=2, runId=ack["runId"]))["op"] == "ack"
            await c.start("worker")
            rest, status = await watch_all(b)
            events = seen + rest
            assert status == "cancelled", [
                (
                    e["seq"],
                    e["type"],
                    e["source"] and e["source"]["agentKey"][:12],
                    str(e["data"])[:60],
                )
                for e in events
                if e["type"] != "REASONING" or e["last"]
            ]
            check_tree(events)
            assert [e["type"] for e in events].count("RUN_RESUMED") == 1
            errors = [e for e in events if e["type"] == "AGENT_ERROR"]
            assert errors and all(e["data"]["errorType"] == "cancelled" for e in errors)


async def test_a_subtree_cancel_through_one_gateway_reaches_the_worker(
    tmp_path: Path,
    redis_url: str,  # noqa: F811
) -> None:
    async with cluster(tmp_path, redis_url, token_delay=0.05) as c:
        g1 = await c.start("serve")
        g2 = await c.start("serve")
        await c.start("worker")
        async with connect(g1.url, max_size=None) as a, connect(g2.url, max_size=None) as b:
            ack = await request(b, op="run", id=1, agent="planner", input="half of it")
            seen = await until_a_child_started(b)
            first = next(e["source"]["agentKey"] for e in seen if e["type"] == "AGENT_STARTED")
            reply = await request(
                a, op="cancel", id=2, runId=ack["runId"], agentKey=first, reason="one is enough"
            )
            assert reply["op"] == "ack"
            rest, status = await raw_events(b)
            events = seen + [json.loads(r) for r in rest]
            assert status == "completed"
            errors = [e for e in events if e["type"] == "AGENT_ERROR"]
            assert first in {e["source"]["agentKey"] for e in errors}
            assert all(e["data"]["reason"] == "one is enough" for e in errors)
            results = [e for e in events if e["type"] == "TOOL_RESULT" and e["source"] is None]
            assert [r["data"]["content"] for r in results if r["data"]["isError"]] == [
                "cancelled by the user: one is enough"
            ]


async def test_an_approval_survives_its_worker_and_is_answered_through_another_gateway(
    tmp_path: Path,
    redis_url: str,  # noqa: F811
) -> None:
    from tests.integration.test_approvals_server import AGENTS

    async with cluster(tmp_path, redis_url, lease_seconds=2, extra_agents=AGENTS) as c:
        one, two = await c.start("serve"), await c.start("serve")
        first = await c.start("worker")
        async with connect(one.url, max_size=None) as ws:
            ack = await request(ws, op="run", id=1, agent="top", input="go")
            run_id = ack["runId"]
            seen: list[dict[str, Any]] = []
            with trio.fail_after(30):
                while not any(e["type"] == "APPROVAL_REQUESTED" for e in seen):
                    seen.extend(json.loads(await ws.recv()).get("events", []))
        (asked,) = [e for e in seen if e["type"] == "APPROVAL_REQUESTED"]
        call_id = asked["data"]["toolCallId"]
        async with connect(two.url, max_size=None) as ws:

            async def listed() -> bool:
                reply = await request(ws, op="pending", id="p", runId=run_id)
                return [a["toolCallId"] for a in reply["approvals"]] == [call_id]

            await until(listed)  # the worker publishes it a moment after the event
            first.kill()
            # The call stays listed and answerable with no worker at all.
            assert await listed()
            bad = await request(
                ws,
                op="approve",
                id="x",
                runId=run_id,
                toolCallId=call_id,
                decision="approve",
                args={"path": 1},
            )
            assert bad["code"] == "bad_request" and "args are not valid" in bad["message"]
            answer = {"runId": run_id, "toolCallId": call_id, "decision": "approve"}
            assert (await request(ws, op="approve", id="a", reason="ok", **answer))["op"] == "ack"
            again = await request(ws, op="approve", id="b", **answer)
            assert again["code"] == "not_found" and "already answered (approve)" in again["message"]
            second = await c.start("worker")
            sub = await request(ws, op="subscribe", id="s", runId=run_id)
            assert sub["op"] == "ack"
            events, status = await watch_all(ws, within=60)
        assert status == "completed", events[-1]
        check_tree(events)
        resumed = [e for e in events if e["type"] == "RUN_RESUMED"]
        assert len(resumed) == 1 and resumed[0]["data"]["worker"] == second.name
        assert [e["type"] for e in events].count("APPROVAL_REQUESTED") == 1
        (resolved,) = [e for e in events if e["type"] == "APPROVAL_RESOLVED"]
        assert resolved["data"]["decision"] == "approve" and resolved["data"]["reason"] == "ok"
        assert resolved["seq"] > resumed[0]["seq"]
        results = [
            e for e in events if e["type"] == "TOOL_RESULT" and e["source"] == asked["source"]
        ]
        assert len(results) == 1 and not results[0]["data"]["isError"]
        async with connect(one.url, max_size=None) as ws:
            assert (await request(ws, op="pending", id="p"))["approvals"] == []


async def test_two_agents_waiting_on_the_same_call_id_are_two_calls(
    tmp_path: Path,
    redis_url: str,  # noqa: F811
) -> None:
    """Regression: the cluster's list and its claims knew a run's waiting calls by id
    alone, so two agents' `call_0` were one entry and one answer. Now an answer that
    does not say whose is refused, and each, named by agentKey, runs once."""
    from tests.integration.test_agui_resume import AGENTS

    async with cluster(tmp_path, redis_url, extra_agents=AGENTS) as c:
        gateway = await c.start("serve")
        await c.start("worker")
        async with connect(gateway.url, max_size=None) as ws:
            ack = await request(ws, op="run", id=1, agent="pair", input="go", stream=False)
            run_id = ack["runId"]

            async def both_listed() -> bool:
                reply = await request(ws, op="pending", id="p", runId=run_id)
                return len(reply["approvals"]) == 2

            await until(both_listed)
            listed = (await request(ws, op="pending", id="p", runId=run_id))["approvals"]
            assert {a["toolCallId"] for a in listed} == {"call_0"}
            answer = {"runId": run_id, "toolCallId": "call_0", "decision": "approve"}
            vague = await request(ws, op="approve", id="v", **answer)
            assert vague["code"] == "bad_request" and "agentKey" in vague["message"]
            for n, item in enumerate(listed):
                named = {**answer, "agentKey": item["agentKey"]}
                assert (await request(ws, op="approve", id=f"a{n}", **named))["op"] == "ack"
                again = await request(ws, op="approve", id=f"b{n}", **named)
                assert "already answered (approve)" in again["message"]
            sub = await request(ws, op="subscribe", id="s", runId=run_id)
            assert sub["op"] == "ack"
            events, status = await watch_all(ws, within=60)
    assert status == "completed", events[-1]
    writes = [
        e
        for e in events
        if e["type"] == "TOOL_RESULT"
        and e["source"] is not None
        and e["source"]["agentId"].startswith("writer_")
        and e["data"]["toolCallId"] == "call_0"
    ]
    assert len(writes) == 2 and not any(e["data"]["isError"] for e in writes)


async def test_a_fork_started_at_any_gateway_runs_on_a_worker(
    tmp_path: Path,
    redis_url: str,  # noqa: F811
) -> None:
    """docs/fork.md: the gateway checks the fork against the journal and queues it; a
    worker copies the original's history and goes on from it."""
    async with cluster(tmp_path, redis_url) as c:
        g1 = await c.start("serve")
        g2 = await c.start("serve")
        await c.start("worker")
        async with connect(g1.url, max_size=None) as a, connect(g2.url, max_size=None) as b:
            ack = await request(a, op="run", id=1, agent="planner", input="spread the work")
            original, status = await watch_all(a)
            assert status == "completed"
            last = original[-1]["seq"]
            bad = await request(b, op="fork", id=2, runId=ack["runId"], atSeq=last + 1)
            assert bad["code"] == "bad_request" and f"has no seq {last + 1}" in bad["message"]
            critic = next(
                e["source"]["agentKey"]
                for e in original
                if e["type"] == "AGENT_STARTED" and e["source"]["agentId"] == "critic"
            )
            started = next(
                e["seq"]
                for e in original
                if e["type"] == "REASONING" and e["source"] and e["source"]["agentKey"] == critic
            )
            fork = await request(
                b,
                op="fork",
                id=3,
                runId=ack["runId"],
                atSeq=started,
                agentKey=critic,
                message="one more thing",
                replay=True,
            )
            assert fork["op"] == "ack", fork
            events, status = await watch_all(b)
            assert status == "completed", c.logs()
            check_tree(events)
            assert events[0]["data"]["forkedFrom"] == {"runId": ack["runId"], "seq": started}
            told = [e for e in events if e["type"] == "USER_MESSAGE" and e["seq"] > started]
            assert [(e["source"]["agentKey"], e["data"]["text"]) for e in told] == [
                (critic, "one more thing")
            ]
            entry = await runs_entry(a, fork["runId"])
            assert entry["forkedFrom"] == {"runId": ack["runId"], "seq": started}
            assert entry["worker"] == c.instances[2].name


async def test_attachments_reach_a_worker_and_its_children_by_id(
    tmp_path: Path,
    redis_url: str,  # noqa: F811
) -> None:
    """docs/structured.md#attachments: a gateway stores a run's image (and a message's)
    in Redis; the worker reads the bytes back, the root hands the image to its child
    by id, and the scripted models say how many bytes they got."""
    png = (REPO / "orchestrator" / "server" / "static" / "favicon.svg").read_bytes()
    image = {"name": "logo.svg", "mediaType": "image/svg+xml", "data": b64encode(png).decode()}
    agents = {
        "viewer": {
            "description": "hands its image to a looker",
            "instructions": "look",
            "tools": ["agent_spawn", "wait"],
            "approval": ["wait"],  # the run waits for a person while the message comes
            "script": {
                "turns": [
                    {
                        "calls": [
                            {
                                "name": "agent_spawn",
                                "args": {
                                    "agent_id": "looker",
                                    "task": "look",
                                    "attachments": ["{attachment}"],
                                },
                            }
                        ]
                    },
                    {"calls": [{"name": "wait", "args": {"seconds": 0}}]},
                    {"say": "I got {attachments}"},
                ]
            },
        },
        "looker": {
            "description": "says what it got",
            "instructions": "look",
            "script": {"turns": [{"say": "I got {attachments}"}]},
        },
    }
    async with cluster(tmp_path, redis_url, extra_agents=agents) as c:
        g1 = await c.start("serve")
        g2 = await c.start("serve")
        await c.start("worker")
        async with connect(g1.url, max_size=None) as a, connect(g2.url, max_size=None) as b:
            ack = await request(
                a, op="run", id=1, agent="viewer", input="look", attachments=[image]
            )
            assert ack["op"] == "ack", ack
            events: list[dict[str, Any]] = []

            async def until_seen(kind: str) -> dict[str, Any]:
                with trio.fail_after(60):
                    while not any(e["type"] == kind for e in events):
                        frame = json.loads(await a.recv())
                        events.extend(frame.get("events", []))
                return next(e for e in events if e["type"] == kind)

            asked = await until_seen("APPROVAL_REQUESTED")
            note = {
                "name": "note.txt",
                "mediaType": "text/plain",
                "data": b64encode(b"hi").decode(),
            }
            sent = await request(
                b, op="send", id=2, runId=ack["runId"], message="also", attachments=[note]
            )
            assert sent["op"] == "ack", sent
            await until_seen("USER_MESSAGE")  # delivered: the worker read its bytes
            call = asked["data"]["toolCallId"]
            answer = {"runId": ack["runId"], "toolCallId": call, "decision": "approve"}
            assert (await request(b, op="approve", id=3, **answer))["op"] == "ack"
            rest, status = await watch_all(a)
            events += rest
    assert status == "completed", c.logs()
    said = f"logo.svg (image/svg+xml, {len(png)} bytes)"
    child = next(e for e in events if e["type"] == "AGENT_RESULT" and e["source"])
    assert child["data"]["text"] == f"I got {said}"
    assert events[-1]["data"]["result"] == f"I got {said}, note.txt (text/plain, 2 bytes)"
