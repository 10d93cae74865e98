"""Takeover by any live worker, whatever the order in which workers started and runs
were created (issue 31), with real `orchestrator` processes on the machine's Redis.

The production shape: workers already running when a run is created (`before`), or
one started after the run was created but before its worker dies (`between`: it
loaded a copy of the journal at start-up that is stale by then). A worker started
after the kill is `test_cluster.py`'s kill -9 and approval tests. Each order with a
streaming tree and with a call waiting for approval.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import coredis
import pytest
import trio
from websockets.trio.client import connect

from tests.cluster_helpers import Instance, check_tree, cluster, runs_entry, until, watch_all
from tests.redis_helpers import redis_url  # noqa: F401  (fixture)
from tests.server_helpers import request

pytestmark = pytest.mark.trio


def _agent(
    turns: list[dict[str, Any]], tools: list[str], delay: float = 0.0, **extra: Any
) -> dict[str, Any]:
    script = {"turns": turns, "token_delay": delay}
    return {"description": "d", "instructions": "i", "tools": tools, "script": script, **extra}


AGENTS = {
    # boss → writer (appends its task to effects.txt, once a person approves) and a
    # streamer that is still talking while the call waits.
    "boss": _agent(
        [
            {
                "calls": [
                    {"name": "agent_spawn", "args": {"agent_id": "writer", "task": "{input}"}},
                    {"name": "agent_spawn", "args": {"agent_id": "streamer", "task": "{input}"}},
                ]
            },
            {"say": "boss: {results}"},
        ],
        ["agent_spawn"],
    ),
    "writer": _agent(
        [
            {
                "calls": [
                    {
                        "name": "write_file",
                        "args": {"path": "effects.txt", "content": "{input}\n", "append": True},
                    }
                ]
            },
            {"say": "wrote {input}"},
        ],
        ["write_file"],
        approval=["write_file"],
    ),
    "streamer": _agent([{"say": " ".join(f"word{i}" for i in range(80))}], [], delay=0.05),
}


async def live_leases(redis_url: str) -> list[str]:  # noqa: F811
    """The lease keys left in the cluster's Redis."""
    prefix = redis_url.split("prefix=", 1)[1]
    async with coredis.Redis.from_url(redis_url.split("?", 1)[0]) as client:
        return [key.decode() async for key in client.scan_iter(match=f"{prefix}run:*:lease")]


@pytest.mark.parametrize("waiting", [False, True], ids=["streaming", "approval"])
@pytest.mark.parametrize("order", ["before", "between"])
async def test_a_live_worker_takes_the_run_over(
    tmp_path: Path,
    redis_url: str,  # noqa: F811
    order: str,
    waiting: bool,
) -> None:
    (tmp_path / "workspace").mkdir()
    async with cluster(
        tmp_path, redis_url, lease_seconds=2, token_delay=0.03, extra_agents=AGENTS
    ) as c:
        gateway = await c.start("serve")
        workers = [await c.start("worker")]
        if order == "before":
            workers.append(await c.start("worker"))
        async with connect(gateway.url, max_size=None) as ws, connect(gateway.url) as ctl:
            agent, text = ("boss", "effect-1") if waiting else ("planner", "take me over")
            ack = await request(ws, op="run", id=1, agent=agent, input=text)
            run_id = ack["runId"]
            seen: list[dict[str, Any]] = []
            with trio.fail_after(30):  # the call waits, or children stream

                def far_enough() -> bool:
                    if waiting:
                        return any(e["type"] == "APPROVAL_REQUESTED" for e in seen)
                    return sum(e["type"] == "AGENT_STARTED" for e in seen) >= 2 and any(
                        e["type"] == "REASONING" and e["source"] for e in seen[-3:]
                    )

                while not far_enough():
                    seen.extend(json.loads(await ws.recv()).get("events", []))
            if order == "between":
                workers.append(await c.start("worker"))
            owner_name = (await runs_entry(ctl, run_id))["worker"]
            (owner,) = [w for w in workers if w.name == owner_name]
            (survivor,) = [w for w in workers if w is not owner]
            call_id, asked = None, {}
            if waiting:
                (asked,) = [e for e in seen if e["type"] == "APPROVAL_REQUESTED"]
                call_id = asked["data"]["toolCallId"]

                async def listed() -> bool:
                    reply = await request(ctl, op="pending", id="p", runId=run_id)
                    return [a["toolCallId"] for a in reply["approvals"]] == [call_id]

                await until(listed)
            owner.kill()
            killed_at = trio.current_time()
            if waiting:
                answer = {"runId": run_id, "toolCallId": call_id, "decision": "approve"}
                assert (await request(ctl, op="approve", id="a", **answer))["op"] == "ack"
            # The survivor takes the run over within lease_seconds and a few seconds.
            with trio.fail_after(2 + 5 - (trio.current_time() - killed_at)):
                while not any(e["type"] == "RUN_RESUMED" for e in seen):
                    seen.extend(json.loads(await ws.recv()).get("events", []))
            rest, status = await watch_all(ws, within=60)
            events = seen + rest
            assert status == "completed", events[-1]
            check_tree(events)
            (resumed,) = [e for e in events if e["type"] == "RUN_RESUMED"]
            assert resumed["data"]["attempt"] == 2
            assert resumed["data"]["worker"] == survivor.name
            assert resumed["data"]["afterSeq"] == resumed["seq"] - 1
            # Nothing that had finished ran again: one AGENT_STARTED per agent, and the
            # input is the run's own.
            starts = [e["source"]["agentKey"] for e in events if e["type"] == "AGENT_STARTED"]
            assert len(starts) == len(set(starts))
            assert [e["data"]["input"] for e in events if e["type"] == "RUN_STARTED"] == [text]
            entry = await runs_entry(ctl, run_id)
            assert (entry["status"], entry["attempt"], entry["worker"]) == (
                "completed",
                2,
                survivor.name,
            )
            if waiting:
                results = [
                    e
                    for e in events
                    if e["type"] == "TOOL_RESULT"
                    and e["data"]["toolCallId"] == call_id
                    and e["source"] == asked["source"]
                ]
                assert len(results) == 1 and not results[0]["data"]["isError"], results
                assert (tmp_path / "workspace" / "effects.txt").read_text() == "effect-1\n"
                assert (await request(ctl, op="pending", id="p2"))["approvals"] == []
            assert await live_leases(redis_url) == []
            _no_failed_takeover(survivor)


def _no_failed_takeover(worker: Instance) -> None:
    bad = [line for line in worker.lines if "failed" in line and "run-" in line]
    assert not bad, bad
