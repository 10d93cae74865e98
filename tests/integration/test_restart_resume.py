"""Runs survive a restart of a real `orchestrator serve` process (SIGTERM and kill -9):
they go on from their journal, finished children are not re-run, a waiting approval
still waits and its call runs once, and watchers resume by afterSeq with no gap."""

from __future__ import annotations

import contextlib
import json
import signal
from collections import Counter
from pathlib import Path
from typing import Any

import trio
from websockets.exceptions import ConnectionClosed
from websockets.trio.client import connect

from tests.integration.test_approvals_server import AGENTS, Client, agent, spawn
from tests.integration.test_server_lifecycle import start_serve_process
from tests.memory_server import autojump
from tests.server_helpers import demo_config, read_until_end, recv, replay, request


def keyed(event: dict[str, Any]) -> str:
    return event["source"]["agentKey"] if event["source"] else "root"


def by(event: dict[str, Any], agent_id: str) -> bool:
    return event["source"] is not None and event["source"]["agentId"] == agent_id


def check_story(events: list[dict[str, Any]]) -> None:
    """One gap-free story: every agent started once and ended once."""
    assert [e["seq"] for e in events] == list(range(1, len(events) + 1))
    started = Counter(keyed(e) for e in events if e["type"] in ("RUN_STARTED", "AGENT_STARTED"))
    ended = Counter(keyed(e) for e in events if e["type"] in ("AGENT_RESULT", "AGENT_ERROR"))
    assert all(n == 1 for n in started.values()), started
    assert all(n == 1 for n in ended.values()), ended
    assert set(ended) == set(started)


async def watch_until_closed(ws: Any, seen: list[dict[str, Any]]) -> None:
    """Read events until the server closes the connection."""
    with contextlib.suppress(ConnectionClosed):
        while True:
            frame = await recv(ws)
            seen += frame.get("events", [])


async def test_a_run_stopped_by_sigterm_goes_on_after_the_restart(tmp_path: Path) -> None:
    config_path = tmp_path / "server.yaml"
    demo_config(tmp_path, token_delay=0.01, storage="sqlite:///journal.db")
    seen: list[dict[str, Any]] = []
    async with trio.open_nursery() as nursery:
        proc, url = await start_serve_process(nursery, config_path)
        async with connect(url, max_size=None) as ws:
            ack = await request(ws, op="run", id=1, agent="planner", input="q")
            run_id = ack["runId"]
            # Stop once a researcher's first answer is in, while the rest still streams.
            while not any(e["type"] == "AGENT_RESULT" for e in seen):
                seen += (await recv(ws)).get("events", [])
            proc.send_signal(signal.SIGTERM)
            await watch_until_closed(ws, seen)
        with trio.fail_after(20):
            await proc.wait()
        assert proc.returncode == 0
    assert not any(e["type"] == "RUN_FINISHED" for e in seen)  # nothing journaled its end

    async with trio.open_nursery() as nursery:
        proc, url = await start_serve_process(nursery, config_path)
        try:
            rest = await replay(url, run_id, after_seq=seen[-1]["seq"])
            everything = await replay(url, run_id)
        finally:
            proc.send_signal(signal.SIGTERM)
    assert rest[0]["seq"] == seen[-1]["seq"] + 1
    resumed = next(e for e in rest if e["type"] == "RUN_RESUMED")
    assert resumed["data"]["reason"] == "restart" and resumed["data"]["attempt"] == 2
    assert everything == seen + rest
    assert rest[-1]["type"] == "RUN_FINISHED" and rest[-1]["data"]["status"] == "completed"
    check_story(everything)
    # The researcher that had answered was not run again.
    first = next(keyed(e) for e in seen if e["type"] == "AGENT_RESULT")
    assert not [e for e in rest if keyed(e) == first]


# The root says its last words slowly: the run is still running when the call is
# answered a second time (the desk forgets a run's answers when it ends; an answer
# to an ended run is `not running`, which a fast run reached first one time in CI).
SLOW_TOP = {
    **AGENTS,
    "top": agent(
        [{"calls": [spawn("mid"), spawn("talker")]}, {"say": "top got: {results}"}],
        ["agent_spawn"],
        token_delay=0.05,
    ),
}


async def test_an_approval_waits_through_kill_9_and_its_call_runs_once(tmp_path: Path) -> None:
    config_path = tmp_path / "server.yaml"
    demo_config(
        tmp_path,
        storage="sqlite:///journal.db",
        extra_agents=SLOW_TOP,
    )
    seen: list[dict[str, Any]] = []
    async with trio.open_nursery() as nursery:
        proc, url = await start_serve_process(nursery, config_path)
        async with connect(url, max_size=None) as ws:
            client = Client(ws)
            ack = await client.ask(op="run", id="r", agent="top", input="go")
            run_id = ack["runId"]
            (asked,) = await client.until("APPROVAL_REQUESTED")
            await client.until("AGENT_RESULT")  # talker is done
            proc.send_signal(signal.SIGKILL)
            seen += client.events
            await watch_until_closed(ws, seen)
    assert proc.returncode == -signal.SIGKILL
    call_id = asked["data"]["toolCallId"]

    async with trio.open_nursery() as nursery:
        proc, url = await start_serve_process(nursery, config_path)
        try:
            async with connect(url, max_size=None) as ws:
                client = Client(ws)
                (item,) = (await client.ask(op="pending", id="p"))["approvals"]
                assert item["toolCallId"] == call_id and item["runId"] == run_id
                assert item["timeoutAt"] == asked["data"]["timeoutAt"]
                assert item["requestedAt"] == asked["ts"]
                watch = await client.ask(
                    op="subscribe", id="s", runId=run_id, afterSeq=seen[-1]["seq"]
                )
                answer = {"runId": run_id, "toolCallId": call_id, "decision": "approve"}
                assert (await client.ask(op="approve", id="a", **answer))["op"] == "ack"
                again = await client.ask(op="approve", id="b", **answer)
                assert again["code"] == "not_found" and "already answered" in again["message"]
                rest, end = await read_until_end(ws, watch["sub"])
                rest = client.events + rest
        finally:
            proc.send_signal(signal.SIGTERM)
    assert end["status"] == "completed"
    everything = seen + rest
    check_story(everything)
    assert [e["type"] for e in everything].count("APPROVAL_REQUESTED") == 1
    (resolved,) = [e for e in rest if e["type"] == "APPROVAL_RESOLVED"]
    assert resolved["data"]["decision"] == "approve" and resolved["source"] == asked["source"]
    results = [
        e for e in everything if e["type"] == "TOOL_RESULT" and e["source"] == asked["source"]
    ]
    assert len(results) == 1 and not results[0]["data"]["isError"]
    assert (tmp_path / "workspace" / "a.txt").read_text() == "A"
    # The talker, which had answered before the crash, was not run again.
    talker = [e for e in everything if e["type"] == "AGENT_STARTED" and by(e, "talker")]
    assert len(talker) == 1


async def test_resume_runs_false_ends_them_interrupted(tmp_path: Path) -> None:
    config_path = tmp_path / "server.yaml"
    demo_config(tmp_path, token_delay=0.02, storage="sqlite:///j.db", server={"resume_runs": False})
    async with trio.open_nursery() as nursery:
        proc, url = await start_serve_process(nursery, config_path)
        async with connect(url, max_size=None) as ws:
            ack = await request(ws, op="run", id=1, agent="planner", input="q")
            assert (await recv(ws))["op"] == "events"
            proc.send_signal(signal.SIGKILL)
    async with trio.open_nursery() as nursery:
        proc, url = await start_serve_process(nursery, config_path)
        try:
            events = await replay(url, ack["runId"])
        finally:
            proc.send_signal(signal.SIGTERM)
    assert events[-1]["data"]["status"] == "interrupted"
    assert not [e for e in events if e["type"] == "RUN_RESUMED"]


BACKGROUND = {
    # The root starts a slow background child and answers at once; it does not finish
    # before the child reports, and then answers again with the child's result.
    "lead": {
        "description": "starts work in the background",
        "instructions": "i",
        "tools": ["agent_spawn"],
        "script": {
            "token_delay": 0.01,
            "turns": [
                {
                    "say": "starting it",
                    "calls": [
                        {
                            "name": "agent_spawn",
                            "args": {"agent_id": "slow", "task": "dig", "timeout_seconds": 0},
                        }
                    ],
                },
                {"say": "waiting for it"},
                {"say": "lead got: {input}"},
            ],
        },
    },
    "slow": {
        "description": "takes its time",
        "instructions": "i",
        "script": {"token_delay": 0.05, "turns": [{"say": " ".join(["dig"] * 60)}]},
    },
}


async def test_a_background_child_goes_on_after_kill_9_under_its_task_id(tmp_path: Path) -> None:
    """Killed while the root waits for its background child: after the restart the
    child goes on (same agentKey and taskId, its cut-off turn asked again), reports to
    the root once, and the root does not repeat the answer it had already given."""
    config_path = tmp_path / "server.yaml"
    demo_config(tmp_path, storage="sqlite:///journal.db", extra_agents=BACKGROUND)
    seen: list[dict[str, Any]] = []
    async with trio.open_nursery() as nursery:
        proc, url = await start_serve_process(nursery, config_path)
        async with connect(url, max_size=None) as ws:
            ack = await request(ws, op="run", id=1, agent="lead", input="go")
            run_id = ack["runId"]

            def answered_and_streaming() -> bool:
                said = [
                    e for e in seen if e["type"] == "REASONING" and e["last"] and not e["source"]
                ]
                return len(said) == 2 and sum(by(e, "slow") for e in seen) > 10

            while not answered_and_streaming():
                seen += (await recv(ws)).get("events", [])
            proc.send_signal(signal.SIGKILL)
            await watch_until_closed(ws, seen)

    async with trio.open_nursery() as nursery:
        proc, url = await start_serve_process(nursery, config_path)
        try:
            with trio.fail_after(30):
                everything = await replay(url, run_id)
        finally:
            proc.send_signal(signal.SIGTERM)
    check_story(everything)
    assert everything[-1]["data"]["status"] == "completed"
    (started,) = [e for e in everything if e["type"] == "AGENT_STARTED"]
    child = started["source"]
    (ended,) = [
        e for e in everything if e["type"] in ("AGENT_RESULT", "AGENT_ERROR") and e["source"]
    ]
    assert ended["type"] == "AGENT_RESULT" and ended["source"] == child  # same key, same taskId
    resumed = next(e["seq"] for e in everything if e["type"] == "RUN_RESUMED")
    assert ended["seq"] > resumed
    reports = [e for e in everything if e["type"] == "USER_MESSAGE" and not e["source"]]
    assert [r["data"]["from"] for r in reports] == [child["taskId"]]
    assert reports[0]["data"]["text"].startswith(f"[{child['taskId']} slow ")
    root_turns = [
        e["data"]["text"]
        for e in everything
        if e["type"] == "REASONING" and e["last"] and not e["source"]
    ]
    assert root_turns == [
        "starting it",
        "waiting for it",
        "lead got: " + reports[0]["data"]["text"],
    ]


@autojump
async def test_a_run_is_resumed_after_at_most_max_restarts(tmp_path: Path) -> None:
    """Each restart's attempt is kept (SQLite), so a run that never gets done within a
    server's life ends `failed` (`interrupted`) after MAX_RESTARTS restarts instead of
    being resumed for ever."""
    from orchestrator.runs.host import MAX_RESTARTS, RunHost
    from orchestrator.runtime.engine import Orchestrator
    from orchestrator.storage.journal import Journal
    from orchestrator.storage.sqlite import SqliteStorage

    config = demo_config(tmp_path, token_delay=0.05, storage="sqlite:///journal.db")
    run_id = ""
    attempts: list[int] = []
    for start in range(MAX_RESTARTS + 2):
        async with (
            SqliteStorage.open(tmp_path / "journal.db") as storage,
            Journal.open(storage, resume=True) as journal,
            Orchestrator.open(config) as orch,
            trio.open_nursery() as nursery,
        ):
            host = RunHost(orch, journal, nursery)
            if start == 0:
                run_id = (await host.start("planner", "never done in time")).run_id
            else:
                assert journal.resumable == [run_id]
                resumed = await host.resume_left(journal.resumable)
                attempts.append(journal.get(run_id).record.attempt)
                if resumed == 0:
                    await journal.flush_run(run_id)
                    break
            await trio.sleep(0.3)
            await host.suspend_all()  # a SIGTERM: the next start resumes it
            await journal.writer.flush()
    assert attempts == list(range(2, MAX_RESTARTS + 3))
    async with SqliteStorage.open(tmp_path / "journal.db") as storage:
        (record,) = await storage.load()
        events = [json.loads(raw) for raw in await storage.read(run_id, 0, 10_000)]
    assert record.status == "failed"
    finished = events[-1]
    assert finished["type"] == "RUN_FINISHED"
    assert finished["data"]["errorType"] == "interrupted"
    assert f"stopped {MAX_RESTARTS + 1} times" in finished["data"]["error"]


SLOW = {
    # A run that takes a few seconds: the words of its answer come 0.05 s apart.
    "slow": agent(
        [{"say": "working on {input} " + "and more " * 20 + "done with {input}"}],
        [],
        token_delay=0.05,
    )
}


async def test_acknowledged_follow_ups_run_in_order_after_kill_9(tmp_path: Path) -> None:
    """Issue 57, defect 3: a thread's run runs, three follow-ups are queued behind it by
    `run {multitask: enqueue}` (each acked) and one by `POST /hooks/slow` (202). After
    kill -9 and a restart, the running run is resumed, then the four run in turn, each
    going on from the one before: none ends `interrupted` unrun."""
    import httpx
    import yaml

    config_path = tmp_path / "server.yaml"
    demo_config(tmp_path, storage="sqlite:///journal.db", server={"hooks": True}, extra_agents=SLOW)
    data = yaml.safe_load(config_path.read_text())
    data["hooks"] = {"slow": {"thread": "{body.thread}", "multitask": "enqueue"}}
    config_path.write_text(yaml.safe_dump(data))
    async with trio.open_nursery() as nursery:
        proc, url = await start_serve_process(nursery, config_path)
        async with connect(url, max_size=None) as ws:
            client = Client(ws)
            first = await client.ask(op="run", id="r", agent="slow", threadId="t", input="zero")
            await client.until("REASONING")  # (it runs: its first words are journaled)
            follow_ups = [
                await client.ask(
                    op="run", id=f"q{n}", threadId="t", input=f"q{n}", multitask="enqueue"
                )
                for n in (1, 2, 3)
            ]
            assert [a["op"] for a in follow_ups] == ["ack"] * 3, follow_ups
        base = url.replace("ws://", "http://").removesuffix("/ws")
        async with httpx.AsyncClient() as http:
            hooked = await http.post(f"{base}/hooks/slow", json={"input": "q4", "thread": "t"})
        assert hooked.status_code == 202, hooked.text
        proc.send_signal(signal.SIGKILL)
        with trio.fail_after(20):
            await proc.wait()
    queued = [a["runId"] for a in follow_ups] + [hooked.json()["runId"]]

    async with trio.open_nursery() as nursery:
        proc, url = await start_serve_process(nursery, config_path)
        try:
            ends = {}
            for run_id in [first["runId"], *queued]:
                events = await replay(url, run_id)
                ends[run_id] = events
        finally:
            proc.send_signal(signal.SIGTERM)
    assert ends[first["runId"]][-1]["data"]["status"] == "completed"
    previous = first["runId"]
    for n, run_id in enumerate(queued, 1):
        events = ends[run_id]
        assert events[0]["type"] == "RUN_STARTED", events[0]
        assert events[0]["data"]["previousRunId"] == previous
        assert events[-1]["type"] == "RUN_FINISHED"
        assert events[-1]["data"]["status"] == "completed", events[-1]
        answer = next(e for e in events if e["type"] == "AGENT_RESULT")
        assert answer["data"]["text"].endswith(f"done with q{n}")
        previous = run_id
    # One at a time: each started after the one before it had ended.
    for before, after in zip([first["runId"], *queued], queued, strict=False):
        assert ends[after][0]["ts"] >= ends[before][-1]["ts"]
