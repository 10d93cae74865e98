"""The `fork` op through the real WebSocket protocol against a real server, on SQLite
and on Redis: at seq 1, at the last seq, inside a waiting approval, at an unknown run
or seq; who may fork; the lineage in `runs` (docs/fork.md)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from websockets.trio.client import connect

from tests.integration.test_approvals_server import AGENTS, TOKENS, Client, bearer
from tests.memory_server import autojump, memory_server
from tests.server_helpers import demo_config, read_until_end, replay, running_server

pytestmark = pytest.mark.trio


@pytest.fixture(params=["sqlite", "redis"])
def durable_storage(request: pytest.FixtureRequest) -> str | dict[str, Any]:
    if request.param == "redis":
        return {"url": request.getfixturevalue("redis_url"), "durability": "relaxed"}
    return "sqlite:///data/journal.db"


def turns(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [e for e in events if e["type"] == "REASONING" and e.get("last")]


async def test_forks_at_the_first_and_last_seq_end_as_the_original(
    tmp_path: Path, durable_storage: str | dict[str, Any]
) -> None:
    config = demo_config(tmp_path, storage=durable_storage)
    async with running_server(config) as server, connect(server.url, max_size=None) as ws:
        client = Client(ws)
        ack = await client.ask(op="run", id="r", agent="planner", input="q")
        original, end = await read_until_end(ws, ack["sub"])
        run_id, last = ack["runId"], original[-1]["seq"]
        assert end["status"] == "completed"
        assert all(len(t["data"]["spec"]) == 32 for t in turns(original))

        for at, replayed in ((1, True), (last, False)):
            client.end = None
            fork = await client.ask(op="fork", id=f"f{at}", runId=run_id, atSeq=at, replay=replayed)
            assert fork["op"] == "ack" and fork["runId"] != run_id, fork
            events, end = await read_until_end(ws, fork["sub"])
            assert end["status"] == "completed"
            assert events[0]["data"]["forkedFrom"] == {"runId": run_id, "seq": at}
            assert [e["seq"] for e in events] == list(range(1, len(events) + 1))
            assert events[-1]["data"]["result"] == original[-1]["data"]["result"]
            # The copy ends at `at` (a RUN_FINISHED there is left out: the fork goes on).
            resumed = next(i for i, e in enumerate(events) if e["type"] == "RUN_RESUMED")
            assert resumed == (at - 1 if at == last else at)
            after = events[resumed:]
            assert after[0]["data"] == {"attempt": 1, "afterSeq": resumed, "reason": "fork"}
            if replayed:  # every turn answered from the recording
                assert turns(after) and all(t["data"]["replayed"] for t in turns(after))
            else:  # it had ended: only the run's end is new
                assert [e["type"] for e in after] == ["RUN_RESUMED", "RUN_FINISHED"]

        runs = (await client.ask(op="runs", id="l"))["runs"]
        assert [r.get("forkedFrom") for r in runs] == [
            {"runId": run_id, "seq": last},
            {"runId": run_id, "seq": 1},
            None,
        ]
        # Forks of forks: the lineage is one step each.
        first_fork = runs[1]["runId"]
        again = await client.ask(op="fork", id="ff", runId=first_fork, atSeq=5, replay=True)
        events, end = await read_until_end(ws, again["sub"])
        assert end["status"] == "completed"
        assert events[0]["data"]["forkedFrom"] == {"runId": first_fork, "seq": 5}

        # The original is never changed.
        assert await replay(server.url, run_id) == original

        # Unknown runs and seqs: a clear error, nothing started.
        nope = await client.ask(op="fork", id="n1", runId="run-nope", atSeq=1)
        assert nope["code"] == "not_found" and "run-nope" in nope["message"]
        for at in (0, last + 1):
            bad = await client.ask(op="fork", id=f"n{at}", runId=run_id, atSeq=at)
            assert bad["code"] == "bad_request"
            assert f"has no seq {at} (its events are 1..{last})" in bad["message"]
        lonely = await client.ask(op="fork", id="n3", runId=run_id, atSeq=1, agentKey="agent:x")
        assert lonely["code"] == "bad_request" and "give one" in lonely["message"]
        assert len((await client.ask(op="runs", id="l2"))["runs"]) == 4


async def test_a_fork_inside_a_waiting_approval_waits_again(
    tmp_path: Path, durable_storage: str | dict[str, Any]
) -> None:
    config = demo_config(tmp_path, storage=durable_storage, extra_agents=AGENTS)
    async with running_server(config) as server, connect(server.url, max_size=None) as ws:
        client = Client(ws)
        ack = await client.ask(op="run", id="r", agent="top", input="go")
        run_id = ack["runId"]
        (asked,) = await client.until("APPROVAL_REQUESTED")
        answer = {"op": "approve", "toolCallId": asked["data"]["toolCallId"]}
        assert (await client.ask(id="a", runId=run_id, decision="deny", **answer))["op"] == "ack"
        original, end = await read_until_end(ws, ack["sub"])
        original = client.events + original
        assert end["status"] == "completed"

        client.events, client.end = [], None
        fork = await client.ask(op="fork", id="f", runId=run_id, atSeq=asked["seq"])
        fork_id = fork["runId"]
        (waiting,) = (await client.ask(op="pending", id="p", runId=fork_id))["approvals"]
        assert waiting["toolCallId"] == asked["data"]["toolCallId"]
        assert waiting["agentKey"] == asked["source"]["agentKey"]
        approved = await client.ask(id="b", runId=fork_id, decision="approve", **answer)
        assert approved["op"] == "ack"
        events, end = await read_until_end(ws, fork["sub"])
        events = client.events + events
        assert end["status"] == "completed"
        (resolved,) = [e for e in events if e["type"] == "APPROVAL_RESOLVED"]
        assert resolved["data"]["decision"] == "approve"
        assert (tmp_path / "workspace" / "a.txt").read_text() == "A"
        # The original still says what it said: denied, nothing written by it.
        assert await replay(server.url, run_id) == original


@autojump
async def test_who_may_fork(tmp_path: Path) -> None:
    """Forking is authorized like `run`, plus seeing the original: a viewer may not,
    another user's run is not found."""
    config = demo_config(tmp_path, server={"tokens": TOKENS})
    async with (
        memory_server(config) as server,
        connect(server.url, additional_headers=bearer("ann-secret")) as ann_ws,
        connect(server.url, additional_headers=bearer("bob-secret")) as bob_ws,
        connect(server.url, additional_headers=bearer("eve-secret")) as eve_ws,
    ):
        ann, bob, eve = Client(ann_ws), Client(bob_ws), Client(eve_ws)
        ack = await ann.ask(op="run", id="r", agent="critic", input="q")
        await read_until_end(ann_ws, ack["sub"])
        fork = {"op": "fork", "runId": ack["runId"], "atSeq": 1}
        viewer = await eve.ask(id="e", **fork)
        assert viewer["code"] == "unauthorized" and "'fork' is refused" in viewer["message"]
        other = await bob.ask(id="b", **fork)
        assert other["code"] == "not_found" and ack["runId"] in other["message"]
        mine = await ann.ask(id="a", **fork, replay=True)
        assert mine["op"] == "ack"
        _, end = await read_until_end(ann_ws, mine["sub"])
        assert end["status"] == "completed"
        listed = (await ann.ask(op="runs", id="l"))["runs"]
        assert listed[0]["owner"] == "ann" and listed[0]["forkedFrom"]["runId"] == ack["runId"]


async def test_the_cli_and_the_typed_client_fork(tmp_path: Path) -> None:
    from orchestrator.client import Client, ClientError
    from tests.integration.test_server_lifecycle import cli

    async with running_server(demo_config(tmp_path, token_delay=0.001)) as server:
        ws_url = server.url
        ack = await Client(ws_url).start("planner", "q")
        original = await replay(ws_url, ack)
        at = original[len(original) // 2]["seq"]
        followed = await cli("fork", ack, "--at", str(at), "--replay", "--json", "--url", ws_url)
        assert followed.returncode == 0, followed.stderr
        events = [json.loads(line) for line in followed.stdout.decode().splitlines()]
        fork_id = events[0]["runId"]
        assert followed.stderr.decode() == f"forked {ack} at seq {at}: {fork_id}\n"
        assert events[0]["data"]["forkedFrom"] == {"runId": ack, "seq": at}
        assert events[-1]["data"]["status"] == "completed"
        tree = await cli("fork", ack, "--at", "1", "--url", ws_url)
        assert tree.returncode == 0, tree.stderr
        assert "completed" in tree.stdout.decode()
        detached = await cli("fork", ack, "--at", "1", "--detach", "--url", ws_url)
        (detached_id,) = detached.stdout.decode().split()
        assert detached_id.startswith("run-") and detached_id != fork_id
        refused = await cli("fork", ack, "--at", "99999", "--url", ws_url)
        assert refused.returncode == 1
        assert f"bad_request: run {ack!r} has no seq 99999" in refused.stderr.decode()
        lonely = await cli("fork", ack, "--at", "1", "--agent", "agent:x", "--url", ws_url)
        assert lonely.returncode == 2 and b"give one" in lonely.stderr

        client = Client(ws_url)
        typed = await client.fork(ack, 1, message="and more", replay=True)
        async with client.follow(typed) as stream:
            seen = [event async for event in stream]
        assert client.ended is not None and client.ended.status == "completed"
        told = [e for e in seen if e.type == "USER_MESSAGE"]
        assert [(e.source, e.data["text"]) for e in told] == [(None, "and more")]
        try:
            await client.fork(ack, 0)
        except ClientError as exc:
            assert exc.code == "bad_request"
        else:
            raise AssertionError("a fork at seq 0 was accepted")


async def test_a_fork_whose_copy_was_cut_short_is_completed_after_a_restart(
    tmp_path: Path,
) -> None:
    """The fork's record says what it was asked: a server that stopped while it copied
    the original's history completes the copy where it stopped, then goes on."""
    import msgspec
    import trio

    from orchestrator.runs.fork import fork_record
    from orchestrator.runs.host import RunHost
    from orchestrator.runtime.engine import Orchestrator
    from orchestrator.storage.base import ForkPoint
    from orchestrator.storage.open import open_journal

    config = demo_config(tmp_path, storage="sqlite:///journal.db")
    async with running_server(config) as server, connect(server.url, max_size=None) as ws:
        ack = await Client(ws).ask(op="run", id="r", agent="planner", input="q")
        original, _ = await read_until_end(ws, ack["sub"])
    at = len(original) // 2
    async with open_journal(config) as journal:  # a server that stopped mid-copy
        log = journal.get(ack["runId"])
        record = fork_record(log.record, ForkPoint(run_id=ack["runId"], seq=at), owner=None)
        journal.create_run(record)
        entries = await journal.read_all(ack["runId"], at)
        outlet = journal.outlet(record.run_id)
        for entry in entries[:5]:
            outlet.put_nowait(msgspec.structs.replace(entry.event, run_id=record.run_id))
        await journal.writer.flush()
    async with (
        open_journal(config) as journal,
        Orchestrator.open(config) as orch,
        trio.open_nursery() as nursery,
    ):
        assert record.run_id in journal.resumable
        host = RunHost(orch, journal, nursery)
        assert await host.resume_left(journal.resumable) == 1
        await journal.wait_finished(record.run_id)
        events = [e.event for e in await journal.read_all(record.run_id, 10**6)]
    assert [e.seq for e in events] == list(range(1, len(events) + 1))
    assert events[at].type == "RUN_RESUMED" and events[at].data["reason"] == "fork"
    assert [(e.type, e.data) for e in events[1:at]] == [
        (o["type"], o["data"]) for o in original[1:at]
    ]
    assert events[-1].data["status"] == "completed"


async def test_a_background_child_goes_on_in_the_fork_under_its_task_id(tmp_path: Path) -> None:
    from tests.integration.test_restart_resume import BACKGROUND, check_story

    config = demo_config(tmp_path, storage="sqlite:///journal.db", extra_agents=BACKGROUND)
    async with running_server(config) as server, connect(server.url, max_size=None) as ws:
        client = Client(ws)
        ack = await client.ask(op="run", id="r", agent="lead", input="go")
        original, end = await read_until_end(ws, ack["sub"])
        assert end["status"] == "completed"
        answered = [e for e in original if e["type"] == "REASONING" and e["last"]]
        slow = [e for e in original if e["source"] and e["type"] == "REASONING"]
        # The root has said "waiting for it" while the background child still streams.
        at = next(e["seq"] for e in slow if e["seq"] > answered[1]["seq"])
        fork = await client.ask(op="fork", id="f", runId=ack["runId"], atSeq=at, replay=True)
        events, end = await read_until_end(ws, fork["sub"])
    assert end["status"] == "completed"
    check_story(events)
    (started,) = [e for e in events if e["type"] == "AGENT_STARTED"]
    child = started["source"]
    assert child["taskId"]
    (ended,) = [e for e in events if e["type"] == "AGENT_RESULT" and e["source"]]
    assert ended["seq"] > at and ended["source"] == child  # same agentKey, same taskId
    reports = [e for e in events if e["type"] == "USER_MESSAGE" and not e["source"]]
    assert [r["data"]["from"] for r in reports] == [child["taskId"]]
    assert events[-1]["data"]["result"] == original[-1]["data"]["result"]


@autojump
async def test_a_running_run_can_be_forked_and_both_go_on(tmp_path: Path) -> None:
    config = demo_config(tmp_path, token_delay=0.01, storage="sqlite:///journal.db")
    async with memory_server(config) as server, connect(server.url, max_size=None) as ws:
        client = Client(ws)
        ack = await client.ask(op="run", id="r", agent="planner", input="q")
        await client.until("AGENT_STARTED", 2)
        at = max(e["seq"] for e in client.events)
        assert client.end is None  # still running
        async with connect(server.url, max_size=None) as other:
            forker = Client(other)
            fork = await forker.ask(op="fork", id="f", runId=ack["runId"], atSeq=at, replay=True)
            assert fork["op"] == "ack", fork
            forked, fork_end = await read_until_end(other, fork["sub"])
        original, end = await read_until_end(ws, ack["sub"])
    assert end["status"] == fork_end["status"] == "completed"
    assert forked[-1]["data"]["result"] == original[-1]["data"]["result"]
    assert [e["seq"] for e in forked] == list(range(1, len(forked) + 1))
