"""A2A agents as subagents (`remote: {a2a: URL}`), against the `a2a-sdk`'s own server
(`tests/a2a_reference_agent.py`, a separate process): its task streams in as the
child's events, its answer is the spawn's result; a task that asks for input asks a
person here (a waiting call of the child), whose answer goes back to it; a failed
task, a question nobody answers, a refused token and an unreachable agent are error
results the parent goes on from; cancelling the child cancels the task there."""

from __future__ import annotations

import functools
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import trio
from websockets.trio.client import connect

from tests.integration.test_approvals_server import Client
from tests.server_helpers import demo_config, read_until_end, request, running_server

REPO = Path(__file__).resolve().parents[2]

pytest.importorskip("a2a", reason="the A2A tests need the `a2a` extra (pip install -e '.[dev]')")


@asynccontextmanager
async def reference_agent(markers: Path) -> AsyncIterator[str]:
    """The SDK's A2A server in a process of its own; its base URL."""
    async with trio.open_nursery() as nursery:
        command = [sys.executable, str(REPO / "tests" / "a2a_reference_agent.py"), str(markers)]
        proc: trio.Process = await nursery.start(
            functools.partial(trio.run_process, command, stdout=subprocess.PIPE, check=False)
        )
        assert proc.stdout is not None
        line = b""
        with trio.fail_after(20):
            while b"\n" not in line:
                line += await proc.stdout.receive_some(100)
        try:
            yield f"http://127.0.0.1:{int(line.split()[-1])}"
        finally:
            proc.kill()


def agents(url: str, **remote: Any) -> dict[str, dict[str, Any]]:
    spawn = {"name": "agent_spawn", "args": {"agent_id": "researcher", "task": "{input}"}}
    return {
        "researcher": {"description": "their A2A agent", "remote": {"a2a": url, **remote}},
        "boss": {
            "description": "asks them",
            "instructions": "lead",
            "tools": ["agent_spawn"],
            "script": {"turns": [{"calls": [spawn]}, {"say": "They said: {results}"}]},
        },
    }


async def run_boss(url: str, task: str) -> list[dict[str, Any]]:
    async with connect(url, max_size=None) as ws:
        ack = await request(ws, op="run", id=1, agent="boss", input=task)
        events, _ = await read_until_end(ws, ack["sub"])
    return events


def child_events(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [e for e in events if e["source"] and e["source"]["depth"] == 1]


def spawn_result(events: list[dict[str, Any]]) -> dict[str, Any]:
    result: dict[str, Any] = next(
        e for e in events if e["type"] == "TOOL_RESULT" and e["source"] is None
    )["data"]
    return result


async def test_an_a2a_task_streams_in_as_the_child(tmp_path: Path) -> None:
    async with reference_agent(tmp_path) as a2a_url:
        config = demo_config(tmp_path, extra_agents=agents(a2a_url))
        async with running_server(config) as server:
            events = await run_boss(server.url, "compare trio")
    child = child_events(events)
    started = child[0]
    assert started["type"] == "AGENT_STARTED" and started["data"]["remote"] == {"a2a": a2a_url}
    deltas = [e["data"]["delta"] for e in child if e["type"] == "REASONING" and not e["last"]]
    assert deltas[:3] == ["reading ", "comparing ", "writing "]
    assert "trio: " in deltas and "structured (compare trio)" in deltas
    turn, end = child[-2], child[-1]
    assert turn["type"] == "REASONING" and turn["last"] and turn["data"]["text"] == "".join(deltas)
    assert (
        end["type"] == "AGENT_RESULT" and end["data"]["text"] == "trio: structured (compare trio)"
    )
    assert [e["seq"] for e in events] == list(range(1, len(events) + 1))
    result = spawn_result(events)
    assert not result["isError"] and result["content"] == "trio: structured (compare trio)"
    assert events[-1]["data"]["result"] == "They said: trio: structured (compare trio)"


async def test_failed_tasks_and_unreachable_agents_are_error_results(tmp_path: Path) -> None:
    async with reference_agent(tmp_path) as a2a_url:
        config = demo_config(tmp_path, extra_agents=agents(a2a_url))
        async with running_server(config) as server:
            failed = await run_boss(server.url, "fail this")
        (tmp_path / "b").mkdir()
        wrong = agents(a2a_url, token_env="A2A_TOKEN")
        with pytest.MonkeyPatch.context() as env:
            env.setenv("A2A_TOKEN", "wrong")
            async with running_server(demo_config(tmp_path / "b", extra_agents=wrong)) as server:
                refused = await run_boss(server.url, "compare trio")
    (tmp_path / "c").mkdir()
    gone = agents("http://127.0.0.1:9", timeout_seconds=2)
    async with running_server(demo_config(tmp_path / "c", extra_agents=gone)) as server:
        with trio.fail_after(15):
            unreachable = await run_boss(server.url, "anyone?")
    for events, says in (
        (failed, "failed: no sources found"),
        (refused, "401"),
        (unreachable, "remote agent 'researcher' (A2A agent at http://127.0.0.1:9)"),
    ):
        result = spawn_result(events)
        assert result["isError"] and says in result["content"], result
        ends = [e for e in child_events(events) if e["type"] in ("AGENT_RESULT", "AGENT_ERROR")]
        assert [e["type"] for e in ends] == ["AGENT_ERROR"]  # the child ended once
        assert events[-1]["data"]["status"] == "completed"  # the parent went on


async def test_a_task_that_asks_for_input_asks_a_person_here(tmp_path: Path) -> None:
    async with reference_agent(tmp_path) as a2a_url:
        config = demo_config(tmp_path, extra_agents=agents(a2a_url))
        async with running_server(config) as server, connect(server.url, max_size=None) as ws:
            client = Client(ws)
            ack = await client.ask(op="run", id=1, agent="boss", input="ask me")
            (asked,) = await client.until("APPROVAL_REQUESTED")
            assert asked["source"]["depth"] == 1, asked  # the child's waiting call
            assert asked["data"]["name"] == "a2a_input" and asked["data"]["edit"] is True
            assert asked["data"]["args"]["question"] == "which?"
            listed = await client.ask(op="pending", id=2, runId=ack["runId"])
            assert [a["toolCallId"] for a in listed["approvals"]] == [asked["data"]["toolCallId"]]
            answer = await client.ask(
                op="approve",
                id=3,
                runId=ack["runId"],
                toolCallId=asked["data"]["toolCallId"],
                decision="approve",
                args={"reply": "the second one"},
            )
            assert answer["op"] == "ack", answer
            end = await client.finish()
        assert end["status"] == "completed", end
        result = spawn_result(client.events)
        assert not result["isError"], result
        assert result["content"] == "trio: structured (the second one)"
        (resolved,) = [e for e in client.events if e["type"] == "APPROVAL_RESOLVED"]
        assert resolved["data"]["decision"] == "approve" and resolved["data"]["edited"]
        ends = [
            e for e in child_events(client.events) if e["type"] in ("AGENT_RESULT", "AGENT_ERROR")
        ]
        assert [e["type"] for e in ends] == ["AGENT_RESULT"]


async def test_a_question_nobody_answers_ends_the_child_and_its_task(tmp_path: Path) -> None:
    async with reference_agent(tmp_path) as a2a_url:
        config = demo_config(
            tmp_path, extra_agents=agents(a2a_url), limits={"approval_timeout_seconds": 1}
        )
        async with running_server(config) as server:
            with trio.fail_after(30):
                events = await run_boss(server.url, "ask me")
        result = spawn_result(events)
        assert result["isError"] and "input_required" in result["content"], result
        assert "no decision within" in result["content"], result
        assert events[-1]["data"]["status"] == "completed"  # the parent went on
        with trio.fail_after(10):
            while not (tmp_path / "cancelled").exists():  # noqa: ASYNC110 - another process
                await trio.sleep(0.05)


async def test_cancelling_the_child_cancels_the_task_there(tmp_path: Path) -> None:
    async with reference_agent(tmp_path) as a2a_url:
        config = demo_config(tmp_path, extra_agents=agents(a2a_url))
        async with running_server(config) as server, connect(server.url, max_size=None) as ws:
            client = Client(ws)
            ack = await client.ask(op="run", id=1, agent="boss", input="wait for it")
            (started,) = await client.until("AGENT_STARTED")
            await client.until("REASONING", 3)
            cancel = {"runId": ack["runId"], "agentKey": started["source"]["agentKey"]}
            assert (await client.ask(op="cancel", id=2, reason="enough", **cancel))["op"] == "ack"
            end = await client.finish()
        with trio.fail_after(10):
            while not (tmp_path / "cancelled").exists():  # noqa: ASYNC110 (another process)
                await trio.sleep(0.05)
    assert end["status"] == "completed"
    (error,) = [e for e in client.events if e["type"] == "AGENT_ERROR"]
    assert error["data"]["errorType"] == "cancelled" and error["data"]["reason"] == "enough"
    result = spawn_result(client.events)
    assert result["isError"] and "cancelled by the user: enough" in result["content"]
