"""Cancel one subtree of a live run (`cancel` with `agentKey`), through the real
WebSocket protocol against a real server; the races at the runtime's edge."""

from __future__ import annotations

import json
import os
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import trio
import trio.testing
from websockets.trio.client import ClientConnection, connect

from agents.runner import Phase
from orchestrator.runtime.engine import Orchestrator
from tests.helpers import REPO, write_config
from tests.memory_server import autojump, memory_server
from tests.server_helpers import demo_config, read_until_end, recv, request, running_server

LONG = " ".join(["word"] * 400)
"""At 0.02 s a word: 8 s, far longer than any test here waits."""


def agent(turns: list[dict[str, Any]], tools: list[str], delay: float = 0.0) -> dict[str, Any]:
    return {
        "description": "test agent",
        "instructions": "test",
        "tools": tools,
        "script": {"token_delay": delay, "turns": turns},
    }


def spawn(agent_id: str, **args: Any) -> dict[str, Any]:
    return {"name": "agent_spawn", "args": {"agent_id": agent_id, "task": "t", **args}}


AGENTS = {
    # boss runs a slow subtree and a quick child in parallel, then answers.
    "boss": agent(
        [{"calls": [spawn("slow"), spawn("quick")]}, {"say": "boss got: {results}"}],
        ["agent_spawn"],
    ),
    "slow": agent([{"calls": [spawn("leaf")]}, {"say": "slow done"}], ["agent_spawn"]),
    "leaf": agent([{"say": LONG}], [], delay=0.02),
    "quick": agent([{"say": "quick done"}], []),
    # bgboss runs mid, which runs a slow leaf in the background and waits for it.
    "bgboss": agent([{"calls": [spawn("mid")]}, {"say": "bgboss got: {results}"}], ["agent_spawn"]),
    "mid": agent(
        [{"calls": [spawn("leaf", timeout_seconds=0)]}, {"say": "mid waits"}, {"say": "mid done"}],
        ["agent_spawn"],
    ),
    # keeper spawns quick (which then sits idle), waits, and answers.
    "keeper": agent(
        [
            {"calls": [spawn("quick")]},
            {"calls": [{"name": "wait", "args": {"seconds": 1.5}}]},
            {"say": "kept"},
        ],
        ["agent_spawn", "wait"],
    ),
}


def key_of(event: dict[str, Any]) -> str:
    return event["source"]["agentKey"] if event["source"] else "root"


async def events_until(
    ws: ClientConnection, events: list[dict[str, Any]], done: Any
) -> list[dict[str, Any]]:
    """Read event frames into `events` until `done(events)` holds."""
    while not done(events):
        frame = await recv(ws)
        if frame["op"] == "events":
            events.extend(frame["events"])
    return events


async def boss_until_leaf(ws: ClientConnection) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Start `boss` on `ws` and read until its leaf streams: the run's ack, the events."""
    ack = await request(ws, op="run", id=1, agent="boss", input="q")
    events: list[dict[str, Any]] = []
    await events_until(ws, events, lambda ev: started(ev, "leaf"))
    return ack, events


def started(events: list[dict[str, Any]], agent_id: str) -> list[str]:
    return [
        key_of(e)
        for e in events
        if e["type"] == "AGENT_STARTED" and e["source"]["agentId"] == agent_id
    ]


def terminal_counts(events: list[dict[str, Any]]) -> Counter[str]:
    return Counter(key_of(e) for e in events if e["type"] in ("AGENT_RESULT", "AGENT_ERROR"))


@autojump
async def test_cancelling_one_subtree_stops_it_and_the_run_goes_on(tmp_path: Path) -> None:
    config = demo_config(tmp_path, extra_agents=AGENTS)
    async with memory_server(config) as server, connect(server.url, max_size=None) as ws:
        ack, events = await boss_until_leaf(ws)
        (slow,), (leaf,) = started(events, "slow"), started(events, "leaf")
        await events_until(  # the leaf has streamed a word or two
            ws, events, lambda ev: any(e["type"] == "REASONING" and key_of(e) == leaf for e in ev)
        )
        await ws.send(
            f'{{"op":"cancel","id":2,"runId":"{ack["runId"]}","agentKey":"{slow}",'
            '"reason":"enough of that"}'
        )
        rest, end = await read_until_end(ws, ack["sub"])
    acks = [e for e in rest if e.get("op") == "ack"]
    assert not acks
    events += rest
    assert end["status"] == "completed"
    errors = {key_of(e): e["data"] for e in events if e["type"] == "AGENT_ERROR"}
    assert set(errors) == {slow, leaf}
    for data in errors.values():
        assert data["errorType"] == "cancelled" and data["by"] == "user"
        assert data["reason"] == "enough of that"
    # The parent got an error tool result for that spawn, and went on.
    spawn_results = [e for e in events if e["type"] == "TOOL_RESULT" and e["source"] is None]
    cancelled = [r for r in spawn_results if r["data"]["isError"]]
    assert [r["data"]["content"] for r in cancelled] == ["cancelled by the user: enough of that"]
    assert "quick done" in events[-1]["data"]["result"]
    # Every agent ended exactly once; the leaf stopped streaming at once.
    assert all(n == 1 for n in terminal_counts(events).values())
    leaf_error = next(e["seq"] for e in events if e["type"] == "AGENT_ERROR" and key_of(e) == leaf)
    assert not [e for e in events if key_of(e) == leaf and e["seq"] > leaf_error]
    assert [e["seq"] for e in events] == list(range(1, len(events) + 1))
    # Their tokens were spent, so they count (regression: both reported 0/0 and the
    # run's usage left them out): slow's reported turn, and an estimate of the leaf's
    # cut-off one, said to be one.
    spent = {k: d["usage"]["inputTokens"] + d["usage"]["outputTokens"] for k, d in errors.items()}
    assert spent[slow] > 0 and "usageEstimated" not in errors[slow]
    assert spent[leaf] > 0 and errors[leaf]["usageEstimated"] is True
    subtree = errors[slow]["subtreeUsage"]
    assert subtree["inputTokens"] + subtree["outputTokens"] == spent[slow] + spent[leaf]
    run = events[-1]["data"]["usage"]
    assert run["inputTokens"] >= subtree["inputTokens"]
    assert run["outputTokens"] >= subtree["outputTokens"]


@autojump
async def test_an_idle_child_ends_cancelled_and_takes_no_more_messages(tmp_path: Path) -> None:
    config = demo_config(tmp_path, extra_agents=AGENTS)
    async with memory_server(config) as server, connect(server.url, max_size=None) as ws:
        ack = await request(ws, op="run", id=1, agent="keeper", input="q")
        run_id = ack["runId"]
        events: list[dict[str, Any]] = []
        # quick answered; keeper is in its `wait`: quick is idle.
        await events_until(
            ws,
            events,
            lambda ev: any(e["type"] == "TOOL_CALL" and e["data"]["name"] == "wait" for e in ev),
        )
        (quick,) = started(events, "quick")
        replies: dict[Any, dict[str, Any]] = {}

        async def ask(**op: Any) -> None:
            await ws.send(json.dumps(op))
            while op["id"] not in replies:
                frame = await recv(ws)
                if frame["op"] == "events":
                    events.extend(frame["events"])
                elif frame.get("id") is not None:
                    replies[frame["id"]] = frame

        await ask(op="cancel", id="c1", runId=run_id, agentKey=quick, reason="not needed")
        await ask(op="send", id="s1", runId=run_id, agentKey=quick, message="still there?")
        await ask(op="cancel", id="c2", runId=run_id, agentKey=quick)
        await ask(op="cancel", id="c3", runId=run_id, agentKey="agent:quick:nope")
        rest, end = await read_until_end(ws, ack["sub"])
    events += rest
    assert replies["c1"]["op"] == "ack"
    assert replies["s1"]["op"] == "error" and replies["s1"]["code"] == "not_found"
    assert "cancelled by the user: not needed" in replies["s1"]["message"]
    assert replies["c2"]["code"] == "not_found" and "already cancelled" in replies["c2"]["message"]
    assert replies["c3"]["code"] == "not_found" and "no agent" in replies["c3"]["message"]
    assert end["status"] == "completed" and events[-1]["data"]["result"] == "kept"
    quick_ends = [e for e in events if key_of(e) == quick and e["type"].startswith("AGENT_")]
    assert [e["type"] for e in quick_ends] == ["AGENT_STARTED", "AGENT_RESULT", "AGENT_ERROR"]
    assert quick_ends[-1]["data"]["reason"] == "not needed"
    assert not [e for e in events if e["type"] == "USER_MESSAGE"]


@autojump
async def test_a_child_and_its_parent_cancelled_at_once_each_end_once(tmp_path: Path) -> None:
    config = demo_config(tmp_path, extra_agents=AGENTS)
    async with memory_server(config) as server, connect(server.url, max_size=None) as ws:
        ack, events = await boss_until_leaf(ws)
        run_id = ack["runId"]
        (slow,), (leaf,) = started(events, "slow"), started(events, "leaf")
        for n, key in enumerate((leaf, slow)):  # back to back: no wait for the first ack
            await ws.send(
                f'{{"op":"cancel","id":{n},"runId":"{run_id}","agentKey":"{key}","reason":"r{n}"}}'
            )
        rest, end = await read_until_end(ws, ack["sub"])
    events += [e for e in rest if "type" in e]
    assert end["status"] == "completed"
    counts = terminal_counts(events)
    assert counts[leaf] == counts[slow] == 1 and all(n == 1 for n in counts.values())
    errors = {key_of(e): e["data"] for e in events if e["type"] == "AGENT_ERROR"}
    assert errors[leaf]["errorType"] == errors[slow]["errorType"] == "cancelled"
    assert errors[slow]["reason"] == "r1"


@autojump
async def test_cancelling_the_whole_run_says_who_and_why(tmp_path: Path) -> None:
    config = demo_config(tmp_path, extra_agents=AGENTS)
    async with memory_server(config) as server, connect(server.url, max_size=None) as ws:
        ack, events = await boss_until_leaf(ws)
        reply = await request(ws, op="cancel", id=2, runId=ack["runId"], reason="stop all")
        rest, end = await read_until_end(ws, ack["sub"])
    events += [e for e in rest if "type" in e]
    assert reply["op"] in ("ack", "events")
    assert end["status"] == "cancelled"
    finished = events[-1]["data"]
    assert finished["by"] == "user" and finished["reason"] == "stop all"
    assert finished["error"] == "cancelled by the user: stop all"
    running = {"root", *started(events, "slow"), *started(events, "leaf")}
    errors = {key_of(e): e["data"] for e in events if e["type"] == "AGENT_ERROR"}
    assert running <= set(errors)
    assert all(d["by"] == "user" and d["reason"] == "stop all" for d in errors.values())


@autojump
async def test_a_child_publishing_its_answer_as_the_cancel_arrives_ends_once(
    tmp_path: Path,
) -> None:
    """Race: the cancel reaches a child blocked publishing its AGENT_RESULT."""
    config = write_config(tmp_path, AGENTS)
    async with (
        Orchestrator.open(config) as orch,
        orch.stream("keeper", "q", capacity=1) as stream,
    ):
        events = []
        run = stream._run
        while not run.agents:
            events += await stream.next_batch()
        ((key, child),) = run.agents.items()
        # Read one batch at a time until the child is stuck publishing its answer.
        while child.phase is not Phase.FINISHING:
            events += await stream.next_batch()
            await trio.testing.wait_all_tasks_blocked()
        stream.cancel(key, reason="too late")
        async for batch in stream.batches():
            events += batch
    ends = [
        e
        for e in events
        if e.source
        and e.source.agent_key == key
        and e.type.value in ("AGENT_RESULT", "AGENT_ERROR")
    ]
    assert [e.type.value for e in ends] == ["AGENT_RESULT"]
    assert events[-1].data["status"] == "completed" and events[-1].data["result"] == "kept"
    results = [e for e in events if e.type.value == "TOOL_RESULT" and e.source is None]
    assert results[0].data["content"] == "quick done" and not results[0].data["isError"]


async def orchestrator_cli(*args: str) -> tuple[int, str, str]:
    proc = await trio.run_process(
        [sys.executable, "-m", "orchestrator", *args],
        capture_stdout=True,
        capture_stderr=True,
        check=False,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    return proc.returncode, proc.stdout.decode(), proc.stderr.decode()


async def test_the_cancel_command_stops_a_subtree_or_says_why_not(tmp_path: Path) -> None:
    config = demo_config(tmp_path, extra_agents=AGENTS)
    async with running_server(config) as server, connect(server.url, max_size=None) as ws:
        ack, events = await boss_until_leaf(ws)
        run_id = ack["runId"]
        (slow,) = started(events, "slow")
        code, out, err = await orchestrator_cli(
            "cancel", run_id, "--agent", slow, "--reason", "from a shell", "--url", server.url
        )
        assert (code, err) == (0, "") and f"cancelling agent {slow} of run {run_id}" in out
        rest, end = await read_until_end(ws, ack["sub"])
        events += rest
        assert end["status"] == "completed"
        error = next(e for e in events if e["type"] == "AGENT_ERROR" and key_of(e) == slow)
        assert error["data"]["reason"] == "from a shell"
        code, out, err = await orchestrator_cli("cancel", run_id, "--url", server.url)
        assert code == 0  # a finished run is left as it is
        code, out, err = await orchestrator_cli(
            "cancel", run_id, "--agent", slow, "--url", server.url
        )
        assert code == 1 and "not_found" in err and "is not running" in err
        code, out, err = await orchestrator_cli("cancel", "run-nope", "--url", server.url)
        assert code == 1 and "not_found: unknown run 'run-nope'" in err


async def cancel_in_bgboss(
    tmp_path: Path, target: str, reason: str
) -> tuple[list[dict[str, Any]], dict[str, Any], str, str]:
    """Run bgboss, cancel its `mid` or `leaf` once the leaf streams, read to the end:
    the events, the `end` frame, and mid's and leaf's agentKeys."""
    config = demo_config(tmp_path, extra_agents=AGENTS)
    async with running_server(config) as server, connect(server.url, max_size=None) as ws:
        ack = await request(ws, op="run", id=1, agent="bgboss", input="q")
        events: list[dict[str, Any]] = []
        await events_until(ws, events, lambda ev: started(ev, "leaf"))
        (mid,), (leaf,) = started(events, "mid"), started(events, "leaf")
        key = {"mid": mid, "leaf": leaf}[target]
        await ws.send(
            json.dumps(
                {"op": "cancel", "id": 2, "runId": ack["runId"], "agentKey": key, "reason": reason}
            )
        )
        rest, end = await read_until_end(ws, ack["sub"])
    return events + [e for e in rest if "type" in e], end, mid, leaf


@autojump
async def test_cancelling_a_parent_stops_its_background_children(tmp_path: Path) -> None:
    events, end, mid, leaf = await cancel_in_bgboss(tmp_path, "mid", "whole branch")
    assert end["status"] == "completed"
    errors = {key_of(e): e["data"] for e in events if e["type"] == "AGENT_ERROR"}
    assert set(errors) == {mid, leaf}
    assert errors[leaf]["by"] == "user" and errors[leaf]["reason"] == "whole branch"
    assert all(n == 1 for n in terminal_counts(events).values())
    assert events[-1]["data"]["result"] == "bgboss got: cancelled by the user: whole branch"


@autojump
async def test_cancelling_a_background_child_tells_its_parent(tmp_path: Path) -> None:
    events, end, mid, leaf = await cancel_in_bgboss(tmp_path, "leaf", "no need")
    assert end["status"] == "completed"
    errors = {key_of(e): e["data"] for e in events if e["type"] == "AGENT_ERROR"}
    assert set(errors) == {leaf} and errors[leaf]["reason"] == "no need"
    told = [e for e in events if e["type"] == "USER_MESSAGE" and key_of(e) == mid]
    assert len(told) == 1 and "failed (cancelled)]" in told[0]["data"]["text"]
    assert "cancelled by the user: no need" in told[0]["data"]["text"]
    assert events[-1]["data"]["result"] == "bgboss got: mid done"
