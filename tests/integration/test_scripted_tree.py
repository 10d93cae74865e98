"""The offline scripted model: the shipped demo tree, timeouts and limits in virtual time."""

from __future__ import annotations

from collections.abc import AsyncGenerator
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing

from agents.core.messages import ModelRequest, StreamPart
from agents.providers.scripted import ScriptedProvider
from orchestrator.config import load_config
from orchestrator.core.events import EventType
from orchestrator.runtime.engine import Orchestrator
from tests.helpers import REPO, collect, of_type, write_config
from tests.memory_server import autojump


@autojump
async def test_shipped_demo_tree_runs_offline(autojump_clock: trio.testing.MockClock) -> None:
    config = load_config(REPO / "configs" / "server.yaml")
    async with Orchestrator.open(config) as orch:
        events = await collect(orch, "planner", "structured concurrency")
    finished = events[-1]
    assert finished.type == EventType.RUN_FINISHED and finished.data["status"] == "completed"
    started = of_type(events, EventType.AGENT_STARTED)
    assert sorted((e.source.depth, e.source.agent_id) for e in started if e.source) == [
        (1, "researcher"),
        (1, "researcher"),
        (2, "critic"),
        (2, "critic"),
    ]
    assert "structured concurrency" in finished.data["result"]
    thinking = [e for e in of_type(events, EventType.REASONING) if "thinkingDelta" in e.data]
    assert thinking, "the demo streams reasoning too"
    # Thinking never leaks into the visible text.
    for e in of_type(events, EventType.REASONING):
        if e.last:
            assert "Two angles" not in e.data["text"]


def _spawner(child: str, *, timeout: float | None = None) -> dict[str, Any]:
    args: dict[str, Any] = {"agent_id": child, "task": "sub-{input}"}
    if timeout is not None:
        args["timeout_seconds"] = timeout
    return {
        "description": f"spawns {child}",
        "instructions": "spawn",
        "tools": ["agent_spawn"],
        "script": {
            "turns": [
                {"say": "delegating", "calls": [{"name": "agent_spawn", "args": args}]},
                {"say": "got: {results}"},
            ]
        },
    }


@autojump
async def test_timeout_cancels_the_whole_subtree(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    config = write_config(
        tmp_path,
        {
            "top": _spawner("middle", timeout=5),
            "middle": _spawner("leaf"),
            "leaf": {
                "description": "slow",
                "instructions": "slow",
                "script": {"turns": [{"sleep": 100, "say": "too late"}]},
            },
        },
    )
    async with Orchestrator.open(config) as orch:
        start = trio.current_time()
        events = await collect(orch, "top", "x")
        elapsed = trio.current_time() - start
    assert 5 <= elapsed < 6
    errors = {
        e.source.agent_id: e.data["errorType"]
        for e in of_type(events, EventType.AGENT_ERROR)
        if e.source
    }
    assert errors == {"middle": "timeout", "leaf": "cancelled"}
    leaf_error = next(
        e
        for e in events
        if e.type == EventType.AGENT_ERROR and e.source and e.source.agent_id == "leaf"
    )
    middle_error = next(
        e
        for e in events
        if e.type == EventType.AGENT_ERROR and e.source and e.source.agent_id == "middle"
    )
    assert leaf_error.seq < middle_error.seq
    (result,) = [e for e in of_type(events, EventType.TOOL_RESULT) if e.source is None]
    assert result.data["isError"] and "'middle' timed out after 5 s" in result.data["content"]
    assert events[-1].data == {
        "status": "completed",
        "result": "got: " + result.data["content"],
        "usage": events[-1].data["usage"],
    }


@autojump
async def test_yaml_timeout_default_applies(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    config = write_config(
        tmp_path,
        {
            "top": _spawner("leaf"),
            "leaf": {
                "description": "slow",
                "instructions": "slow",
                "timeout_seconds": 2,
                "script": {"turns": [{"sleep": 100}]},
            },
        },
    )
    async with Orchestrator.open(config) as orch:
        events = await collect(orch, "top", "x")
    (error,) = of_type(events, EventType.AGENT_ERROR)
    assert error.data["errorType"] == "timeout"
    assert "timed out after 2 s" in of_type(events, EventType.TOOL_RESULT)[0].data["content"]


@autojump
async def test_run_timeout_fails_the_run(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    config = write_config(
        tmp_path,
        {"slow": {"description": "d", "instructions": "i", "script": {"turns": [{"sleep": 50}]}}},
        limits={"run_timeout_seconds": 10},
    )
    async with Orchestrator.open(config) as orch:
        events = await collect(orch, "slow", "x")
    assert of_type(events, EventType.AGENT_ERROR)[0].data["errorType"] == "timeout"
    assert events[-1].data["status"] == "failed"
    assert "run_timeout_seconds" in events[-1].data["error"]


@autojump
async def test_max_turns_is_a_failure(tmp_path: Path) -> None:
    looping = {
        "description": "loops",
        "instructions": "loop",
        "tools": ["agent_spawn"],
        "max_turns": 2,
        "script": {
            "turns": [
                {"calls": [{"name": "agent_spawn", "args": {"agent_id": "ghost", "task": "t"}}]}
            ]
            * 3
        },
    }
    config = write_config(tmp_path, {"looper": looping, "top": _spawner("looper")})
    async with Orchestrator.open(config) as orch:
        events = await collect(orch, "top", "x")
    (error,) = of_type(events, EventType.AGENT_ERROR)
    assert error.data["errorType"] == "max_turns"
    top_result = next(e for e in of_type(events, EventType.TOOL_RESULT) if e.source is None)
    assert top_result.data["isError"] and "max_turns" in top_result.data["content"]


@autojump
async def test_scripted_failure_and_unlisted_tool(tmp_path: Path) -> None:
    config = write_config(
        tmp_path,
        {
            "top": {
                "description": "d",
                "instructions": "i",
                "tools": ["agent_spawn"],
                "script": {
                    "turns": [
                        {
                            "calls": [
                                {
                                    "name": "agent_spawn",
                                    "args": {"agent_id": "broken", "task": "t"},
                                },
                                {"name": "web_search", "args": {"q": "x"}},
                                {"name": "agent_spawn", "args": {"task": "no agent id"}},
                            ]
                        },
                        {"say": "{results}"},
                    ]
                },
            },
            "broken": {
                "description": "d",
                "instructions": "i",
                "script": {"turns": [{"fail": "model exploded"}]},
            },
        },
    )
    async with Orchestrator.open(config) as orch:
        events = await collect(orch, "top", "x")
    by_id = {
        e.data["toolCallId"]: e.data["content"] for e in of_type(events, EventType.TOOL_RESULT)
    }
    contents = [by_id["call_0"], by_id["call_1"], by_id["call_2"]]
    assert (
        "subagent 'broken' failed (provider_error): scripted failure: model exploded" in contents[0]
    )
    assert contents[1] == "unknown tool 'web_search' (available: agent_spawn)"
    assert "invalid arguments" in contents[2] and "agent_id" in contents[2]
    assert events[-1].data["status"] == "completed"


@autojump
async def test_max_children_limit(tmp_path: Path) -> None:
    calls = [
        {"name": "agent_spawn", "args": {"agent_id": "leaf", "task": str(i)}} for i in range(3)
    ]
    config = write_config(
        tmp_path,
        {
            "top": {
                "description": "d",
                "instructions": "i",
                "tools": ["agent_spawn"],
                "script": {"turns": [{"calls": calls}, {"say": "{results}"}]},
            },
            "leaf": {
                "description": "d",
                "instructions": "i",
                "script": {"token_delay": 0.01, "turns": [{"say": "a b c d"}]},
            },
        },
        limits={"max_children": 2},
    )
    async with Orchestrator.open(config) as orch:
        events = await collect(orch, "top", "x")
    results = [e.data for e in of_type(events, EventType.TOOL_RESULT) if e.source is None]
    assert sum(r["isError"] for r in results) == 1
    assert any("max_children reached" in r["content"] for r in results)
    assert len(of_type(events, EventType.AGENT_STARTED)) == 2


@autojump
async def test_consumer_leaving_early_cancels_the_run(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    config = write_config(
        tmp_path,
        {
            "slow": {
                "description": "d",
                "instructions": "i",
                "script": {"token_delay": 1, "turns": [{"say": "one two three four five six"}]},
            }
        },
    )
    async with Orchestrator.open(config) as orch:
        async with orch.stream("slow", "x") as run:
            async for event in run:
                if event.type == EventType.REASONING:
                    break
        assert run.result is not None and run.result.status == "cancelled"
        assert trio.current_time() < 3


@autojump
async def test_child_that_raises_becomes_error_result(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    original = ScriptedProvider.stream

    def stream(
        self: ScriptedProvider, request: ModelRequest
    ) -> AsyncGenerator[list[StreamPart], None]:
        if request.system == "explode":
            raise RuntimeError("kaboom")
        return original(self, request)

    monkeypatch.setattr(ScriptedProvider, "stream", stream)
    config = write_config(
        tmp_path,
        {
            "top": _spawner("bomb"),
            "bomb": {"description": "d", "instructions": "explode"},
        },
    )
    async with Orchestrator.open(config) as orch:
        events = await collect(orch, "top", "x")
    (error,) = of_type(events, EventType.AGENT_ERROR)
    assert error.source is not None and error.source.agent_id == "bomb"
    assert error.data["errorType"] == "internal" and "RuntimeError: kaboom" in error.data["message"]
    (result,) = of_type(events, EventType.TOOL_RESULT)
    assert result.data["isError"] and "subagent 'bomb' failed (internal)" in result.data["content"]
    assert events[-1].data["status"] == "completed"
    # The model got a message; the log got the traceback, with the run and the agent.
    (record,) = [r for r in caplog.records if "crashed" in r.getMessage()]
    assert events[0].run_id in record.getMessage()
    assert error.source.agent_key in record.getMessage()
    assert record.exc_info is not None and "kaboom" in str(record.exc_info[1])
