"""Threads in cluster mode (docs/threads.md), with real `orchestrator` processes on the
machine's Redis and a fake provider that records what it is sent: a thread's next run
goes on from its conversation through any gateway, on any worker; two gateways that
take two inputs of one thread at once still run one at a time (`reject`), `steer` and
`enqueue` work across gateways; and a thread's run taken over after its worker's
death is rebuilt with the thread's conversation."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import trio
from websockets.trio.client import ClientConnection, connect

from tests.cluster_helpers import Cluster, cluster
from tests.fakes.provider_server import FakeOpenAI, serve_fake_openai
from tests.helpers import eventually
from tests.integration.test_threads import AGENTS, asked, brain
from tests.redis_helpers import redis_url  # noqa: F401  (fixture)
from tests.server_helpers import read_until_end, request

pytestmark = pytest.mark.trio


@asynccontextmanager
async def threads_cluster(root: Path, redis: str) -> AsyncIterator[tuple[Cluster, FakeOpenAI]]:
    async with trio.open_nursery() as nursery:
        fake = await serve_fake_openai(nursery, brain, pause=0.001)
        model = {"provider": "openai", "base_url": fake.base_url, "model": "fake"}
        async with cluster(root, redis, extra_agents=AGENTS, model=model) as c:
            yield c, fake
        nursery.cancel_scope.cancel()


async def completed(ws: ClientConnection, ack: dict[str, Any]) -> list[dict[str, Any]]:
    assert ack["op"] == "ack", ack
    events, end = await read_until_end(ws, ack["sub"])
    assert end["status"] == "completed", end
    return events


async def once(url: str, **op: Any) -> dict[str, Any]:
    """One request on a connection of its own (no other subscription's frames)."""
    async with connect(url) as ws:
        return await request(ws, **op)


def chats(fake: FakeOpenAI) -> int:
    return sum("ROLE: chat" in str(body["messages"][0]) for body in fake.requests)


async def test_a_thread_goes_on_through_any_gateway_one_run_at_a_time(
    tmp_path: Path,
    redis_url: str,  # noqa: F811
) -> None:
    async with threads_cluster(tmp_path, redis_url) as (c, fake):
        a, b = await c.start("serve"), await c.start("serve")
        await c.start("worker")
        async with connect(a.url) as on_a, connect(b.url) as on_b:
            first = await request(on_a, op="run", id=1, agent="chat", input="my name is Ann")
            thread = first["threadId"]
            await completed(on_a, first)
            second = await request(on_b, op="run", id=2, threadId=thread, input="who am I?")
            events = await completed(on_b, second)
            assert events[0]["data"]["previousRunId"] == first["runId"]
            assert asked(fake, "chat") == [
                ("user", "my name is Ann"),
                ("assistant", "you said my name is Ann"),
                ("user", "who am I?"),
            ]
            # Two gateways take an input of the thread at once: one run, one refusal.
            answers: dict[str, dict[str, Any]] = {}

            async def ask(name: str, ws: ClientConnection) -> None:
                answers[name] = await request(ws, op="run", id=3, threadId=thread, input="hold on")

            async with trio.open_nursery() as both:
                both.start_soon(ask, "a", on_a)
                both.start_soon(ask, "b", on_b)
            ops = sorted(answer["op"] for answer in answers.values())
            assert ops == ["ack", "error"], answers
            (refused,) = [x for x in answers.values() if x["op"] == "error"]
            assert refused["code"] == "limit_exceeded" and "reject" in refused["message"]
            (held,) = [x for x in answers.values() if x["op"] == "ack"]
            await eventually(lambda: chats(fake) >= 3)
            # `steer` through the other gateway goes into the running run.
            steer = await once(
                b.url, op="run", id=4, threadId=thread, input="psst", multitask="steer"
            )
            assert steer["op"] == "ack" and steer["runId"] == held["runId"], steer
        # `enqueue` waits for it: cancelled, then the queued run goes on from it.
        async with connect(a.url) as ws:
            queued = await request(
                ws, op="run", id=5, threadId=thread, input="after", multitask="enqueue"
            )
            assert queued["op"] == "ack" and queued["runId"] != held["runId"], queued
            cancel = await once(b.url, op="cancel", id=6, runId=held["runId"])
            assert cancel["op"] == "ack", cancel
            events = await completed(ws, queued)
        assert events[0]["data"]["previousRunId"] == held["runId"]
        for url in (a.url, b.url):  # each gateway lists the thread's runs, oldest first
            listed = await once(url, op="threads", id=7, threadId=thread)
            (info,) = listed["threads"]
            assert info["runs"] == [first["runId"], second["runId"], held["runId"], queued["runId"]]
            chat = [r.get("answer") for r in info["detail"]]
            assert chat == [
                "you said my name is Ann",
                "you said who am I?",
                None,
                "you said after",
            ]
        said = [text for role, text in asked(fake, "chat") if role == "user"]
        assert said == ["my name is Ann", "who am I?", "hold on", "psst", "after"]
        # Deleted through one gateway: gone for both, and its id starts a new thread.
        gone = await once(b.url, op="threads", id=8, threadId=thread, action="delete")
        assert len(gone["deleted"]) == 4, gone
        missing = await once(a.url, op="threads", id=9, threadId=thread)
        assert missing["op"] == "error" and missing["code"] == "not_found", missing
        async with connect(a.url) as ws:
            again = await request(ws, op="run", id=10, agent="chat", threadId=thread, input="hi")
            events = await completed(ws, again)
        assert "previousRunId" not in events[0]["data"]
        assert asked(fake, "chat") == [("user", "hi")]


async def test_a_threads_run_taken_over_keeps_its_conversation(
    tmp_path: Path,
    redis_url: str,  # noqa: F811
) -> None:
    async with threads_cluster(tmp_path, redis_url) as (c, fake):
        gateway = await c.start("serve")
        first_worker = await c.start("worker")
        async with connect(gateway.url) as ws:
            first = await request(ws, op="run", id=1, agent="chat", input="remember 7")
            await completed(ws, first)
            held = await request(
                ws, op="run", id=2, threadId=first["threadId"], input="hold that thought"
            )
            assert held["op"] == "ack", held
            await eventually(lambda: chats(fake) == 2)
            first_worker.kill()
            await c.start("worker")
            await eventually(lambda: chats(fake) == 3, within=60)
            assert asked(fake, "chat") == [
                ("user", "remember 7"),
                ("assistant", "you said remember 7"),
                ("user", "hold that thought"),
            ]
        cancel = await once(gateway.url, op="cancel", id=3, runId=held["runId"])
        assert cancel["op"] == "ack", cancel


async def test_two_interrupts_at_once_and_queued_runs_through_a_worker_kill(
    tmp_path: Path,
    redis_url: str,  # noqa: F811
) -> None:
    """Issue 57, defects 4 and 3 on a cluster: two gateways take an `interrupt` of one
    thread at once — the second stops the first's new run, the chain stays straight —
    then three runs are queued behind the running one through both gateways, its
    worker is killed -9, and after the takeover each queued run runs in turn, from
    the one before it."""
    async with threads_cluster(tmp_path, redis_url) as (c, fake):
        a, b = await c.start("serve"), await c.start("serve")
        worker = await c.start("worker")
        first = await once(a.url, op="run", id=1, agent="chat", input="hold zero")
        thread = first["threadId"]
        await eventually(lambda: chats(fake) >= 1)
        answers: dict[str, dict[str, Any]] = {}
        async with connect(a.url) as on_a, connect(b.url) as on_b:

            async def ask(name: str, ws: ClientConnection) -> None:
                answers[name] = await request(
                    ws, op="run", id=2, threadId=thread, input=f"hold {name}", multitask="interrupt"
                )

            async with trio.open_nursery() as both:
                both.start_soon(ask, "a", on_a)
                both.start_soon(ask, "b", on_b)
        assert {x["op"] for x in answers.values()} == {"ack"}, answers
        listed = await once(a.url, op="threads", id=3, threadId=thread)
        detail = {r["runId"]: r for r in listed["threads"][0]["detail"]}
        previous = {name: detail[x["runId"]].get("previousRunId") for name, x in answers.items()}
        (earlier,) = [n for n in answers if previous[n] == first["runId"]]
        later = "a" if earlier == "b" else "b"
        assert previous[later] == answers[earlier]["runId"], (previous, answers)
        running = answers[later]["runId"]
        queued = []
        for n, url in enumerate((a.url, b.url, a.url)):
            ack = await once(
                url, op="run", id=4 + n, threadId=thread, input=f"later {n}", multitask="enqueue"
            )
            assert ack["op"] == "ack", ack
            queued.append(ack["runId"])
        await eventually(lambda: any("hold " + later in str(r["messages"]) for r in fake.requests))
        worker.kill()
        await c.start("worker")
        await eventually(
            lambda: sum("hold " + later in str(r["messages"][-1]) for r in fake.requests) >= 2,
            within=60,
        )
        cancel = await once(b.url, op="cancel", id=9, runId=running)
        assert cancel["op"] == "ack", cancel
        async with connect(a.url) as ws:
            ends = []
            for run_id in queued:
                ack = await request(ws, op="subscribe", id=f"s-{run_id}", runId=run_id)
                events, end = await read_until_end(ws, ack["sub"])
                assert end["status"] == "completed", (run_id, end)
                ends.append(events)
        for events, before in zip(ends, [running, *queued], strict=False):
            assert events[0]["data"]["previousRunId"] == before
        said = [text for role, text in asked(fake, "chat") if role == "user"]
        assert said[-3:] == ["later 0", "later 1", "later 2"]
