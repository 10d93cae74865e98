"""Takeover by any live worker, whatever the order in which workers started and runs
were created (issue 31), with real `orchestrator` processes on the machine's Redis.

The production shape: workers already running when the runs are created
(`before`), or one started after the runs were created but before their worker
dies (`between`: it loaded a copy of the journal at start-up that is stale by
then). A worker started after the kill is `test_cluster.py`'s kill -9 and approval
tests. Each order with four runs on the worker that dies: a streaming tree, a call
waiting for approval (answered after the kill), a root waiting for its background
child, and a tree with a remote child on another server.
"""

from __future__ import annotations

import contextlib
import json
from pathlib import Path
from typing import Any

import coredis
import pytest
import trio
from websockets.trio.client import ClientConnection, connect

from tests.chaos import AGENTS as CHAOS_AGENTS
from tests.cluster_helpers import check_tree, cluster, runs_entry, until
from tests.integration.test_remote import remote_server
from tests.integration.test_restart_resume import BACKGROUND
from tests.redis_helpers import redis_url  # noqa: F401  (fixture)
from tests.server_helpers import request

pytestmark = pytest.mark.trio


def agents(far_url: str) -> dict[str, dict[str, Any]]:
    """Boss → writer (appends its task to effects.txt once approved) and a streamer
    still talking while the call waits; lead → a slow background child; asker → far
    (the planner of another server, whose whole tree streams in)."""
    far = {"description": "the other team", "remote": {"url": far_url, "agent": "planner"}}
    asker = {
        "description": "asks the other team",
        "instructions": "i",
        "tools": ["agent_spawn"],
        "script": {
            "turns": [
                {
                    "calls": [
                        {"name": "agent_spawn", "args": {"agent_id": "far", "task": "{input}"}}
                    ]
                },
                {"say": "they said: {results}"},
            ]
        },
    }
    # The background child digs for 20 s (not 3): it must outlast starting the survivor
    # on a loaded machine, or its run ends on the first worker before the kill and has
    # nothing to be taken over (seen: 3 of 4 runs resumed, the 4th completed already).
    slow = {**BACKGROUND["slow"], "script": {"token_delay": 0.05, "turns": [{"say": "dig " * 400}]}}
    return {**CHAOS_AGENTS, **BACKGROUND, "slow": slow, "far": far, "asker": asker}


KINDS = {"tree": "planner", "approval": "boss", "background": "lead", "remote": "asker"}


def far_enough(kind: str, events: list[dict[str, Any]]) -> bool:
    """The run is in the middle of what its kind is about."""
    if kind == "tree":
        return sum(e["type"] == "AGENT_STARTED" for e in events) >= 2 and any(
            e["type"] == "REASONING" and e["source"] for e in events[-3:]
        )
    if kind == "approval":
        return any(e["type"] == "APPROVAL_REQUESTED" for e in events)
    if kind == "background":
        answers = [e for e in events if e["type"] == "REASONING" and e["last"] and not e["source"]]
        return len(answers) == 2 and sum(bool(e["source"]) for e in events) > 10
    return any(e["source"] and "remote" in e["source"] for e in events)


class Watcher:
    """Reads one run's subscription into `events` until its end."""

    def __init__(self, ws: ClientConnection) -> None:
        self.ws = ws
        self.events: list[dict[str, Any]] = []
        self.status: str | None = None

    async def read(self) -> None:
        while self.status is None:
            frame = json.loads(await self.ws.recv())
            self.events.extend(frame.get("events", []))
            if frame["op"] == "end":
                self.status = frame["status"]


async def listed(ws: ClientConnection, run_id: str, call_id: str) -> bool:
    """`pending` lists exactly that call for the run."""
    reply = await request(ws, op="pending", id="p", runId=run_id)
    return [a["toolCallId"] for a in reply["approvals"]] == [call_id]


async def live_leases(redis_url: str) -> list[str]:  # noqa: F811
    """The lease keys left in the cluster's Redis."""
    prefix = redis_url.split("prefix=", 1)[1]
    async with coredis.Redis.from_url(redis_url.split("?", 1)[0]) as client:
        return [key.decode() async for key in client.scan_iter(match=f"{prefix}run:*:lease")]


@pytest.mark.parametrize("order", ["before", "between"])
async def test_a_live_worker_takes_every_kind_of_run_over(
    tmp_path: Path,
    redis_url: str,  # noqa: F811
    order: str,
) -> None:
    (tmp_path / "workspace").mkdir()
    async with (
        remote_server(tmp_path / "far", token_delay=0.05) as (_, far_url),
        cluster(
            tmp_path, redis_url, lease_seconds=2, token_delay=0.05, extra_agents=agents(far_url)
        ) as c,
        trio.open_nursery() as nursery,
        contextlib.AsyncExitStack() as stack,
    ):
        gateway = await c.start("serve")
        first = await c.start("worker")
        survivor = await c.start("worker") if order == "before" else None
        if survivor is not None:
            survivor.stop()  # running since before the runs, but taking none of them yet
        watchers: dict[str, Watcher] = {}
        run_ids: dict[str, str] = {}
        ctl = await stack.enter_async_context(connect(gateway.url, max_size=None))
        for kind, agent in KINDS.items():
            ws = await stack.enter_async_context(connect(gateway.url, max_size=None))
            ack = await request(ws, op="run", id=1, agent=agent, input=f"{kind}-input")
            run_ids[kind] = ack["runId"]
            watchers[kind] = Watcher(ws)
            nursery.start_soon(watchers[kind].read)

        async def all_far_enough() -> bool:
            return all(far_enough(k, w.events) for k, w in watchers.items())

        await until(all_far_enough)
        approval = run_ids["approval"]
        (asked,) = [e for e in watchers["approval"].events if e["type"] == "APPROVAL_REQUESTED"]

        await until(lambda: listed(ctl, approval, asked["data"]["toolCallId"]))
        for run_id in run_ids.values():
            assert (await runs_entry(ctl, run_id))["worker"] == first.name
        if survivor is None:
            survivor = await c.start("worker")  # it loads the journal as it is now
        else:
            survivor.cont()
        first.kill()
        answer = {
            "runId": approval,
            "toolCallId": asked["data"]["toolCallId"],
            "decision": "approve",
        }
        assert (await request(ctl, op="approve", id="a", **answer))["op"] == "ack"

        async def all_resumed() -> bool:
            return all(any(e["type"] == "RUN_RESUMED" for e in w.events) for w in watchers.values())

        # Every run is taken over (how soon — lease_seconds and a few — is a figure of
        # bench/, not a claim here: a loaded machine takes longer).
        await until(all_resumed, within=120)

        async def all_ended() -> bool:
            return all(w.status is not None for w in watchers.values())

        await until(all_ended, within=60)
        for kind, watcher in watchers.items():
            events = watcher.events
            assert watcher.status == "completed", (kind, events[-1])
            check_tree(events)
            (resumed,) = [e for e in events if e["type"] == "RUN_RESUMED"]
            assert resumed["data"]["attempt"] == 2, kind
            assert resumed["data"]["worker"] == survivor.name, kind
            assert resumed["data"]["afterSeq"] == resumed["seq"] - 1, kind
            # Nothing that had finished ran again, and the input is the run's own.
            starts = [e["source"]["agentKey"] for e in events if e["type"] == "AGENT_STARTED"]
            assert len(starts) == len(set(starts)), kind
            (started,) = [e for e in events if e["type"] == "RUN_STARTED"]
            assert started["data"]["input"] == f"{kind}-input", kind
            entry = await runs_entry(ctl, run_ids[kind])
            assert (entry["status"], entry["attempt"], entry["worker"]) == (
                "completed",
                2,
                survivor.name,
            ), kind
        # The approved write ran once, after the takeover.
        writes = [
            e
            for e in watchers["approval"].events
            if e["type"] == "TOOL_RESULT" and e["source"] == asked["source"]
        ]
        assert len(writes) == 1 and not writes[0]["data"]["isError"], writes
        assert (tmp_path / "workspace" / "effects.txt").read_text() == "approval-input\n"
        assert (await request(ctl, op="pending", id="p2"))["approvals"] == []
        # The background child went on under its taskId and reported once.
        events = watchers["background"].events
        (child,) = [e["source"] for e in events if e["type"] == "AGENT_STARTED"]
        (ended,) = [e for e in events if e["type"] == "AGENT_RESULT" and e["source"]]
        assert ended["source"] == child
        reports = [e for e in events if e["type"] == "USER_MESSAGE" and not e["source"]]
        assert [r["data"]["from"] for r in reports] == [child["taskId"]]
        # The remote child's run was followed again: its agents end once, there.
        events = watchers["remote"].events
        at = next(i for i, e in enumerate(events) if e["type"] == "RUN_RESUMED")
        assert any(e["source"] and "remote" in e["source"] for e in events[at:])
        assert await live_leases(redis_url) == []
        failures = [line for line in survivor.lines if "failed" in line and "run-" in line]
        assert not failures, failures


@pytest.mark.parametrize("kind", ["worker", "serve"])
async def test_a_worker_stopped_by_sigterm_hands_its_runs_over(
    tmp_path: Path,
    redis_url: str,  # noqa: F811
    kind: str,
) -> None:
    """A graceful stop (a deploy) of an `orchestrator worker`, or of a `serve` that is
    also a worker, hands the run over at once — no waiting for its lease to expire —
    without using up one of its attempts (`max_attempts: 1` here), and its waiting call
    stays listed all along."""
    (tmp_path / "workspace").mkdir()
    async with cluster(
        tmp_path,
        redis_url,
        lease_seconds=10,
        token_delay=0.05,
        max_attempts=1,
        extra_agents=agents("ws://127.0.0.1:9/unused"),
    ) as c:
        gateway = await c.start("serve")
        first = await c.start(kind, c.worker_config)
        async with connect(gateway.url, max_size=None) as ws, connect(gateway.url) as ctl:
            ack = await request(ws, op="run", id=1, agent="boss", input="handed")
            run_id = ack["runId"]
            watcher = Watcher(ws)
            async with trio.open_nursery() as nursery:
                nursery.start_soon(watcher.read)
                await until(lambda: _true(far_enough("approval", watcher.events)))
                (asked,) = [e for e in watcher.events if e["type"] == "APPROVAL_REQUESTED"]
                call_id = asked["data"]["toolCallId"]

                await until(lambda: listed(ctl, run_id, call_id))
                second = await c.start("worker")
                first.process.terminate()
                await first.process.wait()
                assert first.process.returncode == 0
                assert await listed(ctl, run_id, call_id)  # answerable while nobody runs it
                # Handed over, not taken after its lease expired: with max_attempts 1 an
                # expiry would have ended it worker_lost (it completes: asserted below).
                await until(
                    lambda: _true(any(e["type"] == "RUN_RESUMED" for e in watcher.events)),
                    within=120,
                )
                answer = {"runId": run_id, "toolCallId": call_id, "decision": "approve"}
                assert (await request(ctl, op="approve", id="a", **answer))["op"] == "ack"
                await until(lambda: _true(watcher.status is not None), within=60)
            events = watcher.events
            assert watcher.status == "completed", events[-1]
            check_tree(events)
            (resumed,) = [e for e in events if e["type"] == "RUN_RESUMED"]
            assert resumed["data"]["worker"] == second.name
            assert resumed["data"]["afterSeq"] == resumed["seq"] - 1
            assert (tmp_path / "workspace" / "effects.txt").read_text() == "handed\n"
            entry = await runs_entry(ctl, run_id)
            assert (entry["status"], entry["worker"], entry["attempt"]) == (
                "completed",
                second.name,
                2,
            )
            assert await live_leases(redis_url) == []


async def _true(value: bool) -> bool:
    return value
