"""Background children, messages into agents, built-in tools, budgets, and their races."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing

from agents.errors import AgentFailed
from agents.runner import AgentRunner
from orchestrator.core.events import Event, EventType
from orchestrator.runtime.context import RunContext
from orchestrator.runtime.engine import Orchestrator
from orchestrator.runtime.spawn import run_tools, send_to
from tests.helpers import collect, of_type, write_config


def agent(
    turns: list[dict[str, Any]], *, tools: list[str] | None = None, delay: float = 0, **extra: Any
) -> dict[str, Any]:
    return {
        "description": "test agent",
        "instructions": "test",
        "tools": tools if tools is not None else ["agent_spawn", "agent_send"],
        "script": {"token_delay": delay, "turns": turns},
        **extra,
    }


def spawn(agent_id: str, task: str = "t", **args: Any) -> dict[str, Any]:
    return {"name": "agent_spawn", "args": {"agent_id": agent_id, "task": task, **args}}


async def run(
    tmp_path: Path, agents: dict[str, dict[str, Any]], root: str = "boss", **kw: Any
) -> list[Event]:
    config = write_config(tmp_path, agents, **kw)
    async with Orchestrator.open(config) as orch:
        return await collect(orch, root, "go")


def by_agent(events: list[Event], agent_id: str) -> list[Event]:
    return [e for e in events if e.source is not None and e.source.agent_id == agent_id]


# -- background spawns ---------------------------------------------------------------


async def test_background_spawn_returns_at_once_and_wakes_the_parent(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    events = await run(
        tmp_path,
        {
            "boss": agent(
                [
                    {"say": "starting", "calls": [spawn("slow", "dig", timeout_seconds=0)]},
                    {"say": "I will answer when the digging is done."},
                    {"say": "final: {input}"},
                ]
            ),
            "slow": agent([{"sleep": 30, "say": "found gold"}], tools=[]),
        },
    )
    (result,) = [e for e in of_type(events, EventType.TOOL_RESULT) if e.source is None]
    handle = json.loads(result.data["content"])
    assert handle["taskId"].startswith("task-") and handle["agentKey"].startswith("agent:slow:")
    child = by_agent(events, "slow")
    assert all(e.source and e.source.task_id == handle["taskId"] for e in child)
    assert child[0].seq > result.seq  # the tool returned before the child did anything
    message = next(e for e in of_type(events, EventType.USER_MESSAGE) if e.source is None)
    assert message.data["from"] == handle["taskId"] and "found gold" in message.data["text"]
    finals = [e for e in of_type(events, EventType.REASONING) if e.source is None and e.last]
    assert [f.data["text"].split(":")[0] for f in finals] == [
        "starting",
        "I will answer when the digging is done.",
        "final",
    ]
    assert events[-1].data["status"] == "completed"
    assert "found gold" in events[-1].data["result"]
    assert trio.current_time() >= 30  # the run waited for its background child


async def test_background_failure_reaches_parent_as_message(tmp_path: Path) -> None:
    events = await run(
        tmp_path,
        {
            "boss": agent(
                [
                    {"calls": [spawn("bad", timeout_seconds=0)]},
                    {"say": "ok"},
                    {"say": "saw: {input}"},
                ]
            ),
            "bad": agent([{"fail": "exploded"}], tools=[]),
        },
    )
    message = next(e for e in of_type(events, EventType.USER_MESSAGE) if e.source is None)
    assert "failed (provider_error)" in message.data["text"] and "exploded" in message.data["text"]
    assert events[-1].data["status"] == "completed"


async def test_cancel_during_background_spawn_reaches_the_child(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    config = write_config(
        tmp_path,
        {
            "boss": agent([{"calls": [spawn("slow", timeout_seconds=0)]}, {"say": "waiting"}]),
            "slow": agent([{"sleep": 100, "say": "late"}], tools=[]),
        },
    )
    events: list[Event] = []
    async with Orchestrator.open(config) as orch, orch.stream("boss", "go") as stream:
        async for event in stream:
            events.append(event)
            if event.type == EventType.AGENT_STARTED:
                stream.cancel()
    errors = of_type(events, EventType.AGENT_ERROR)
    assert sorted(e.source.agent_id if e.source else "root" for e in errors) == ["root", "slow"]
    assert all(e.data["errorType"] == "cancelled" for e in errors)
    assert events[-1].type == EventType.RUN_FINISHED and events[-1].data["status"] == "cancelled"
    assert trio.current_time() < 100


# -- agent_send -------------------------------------------------------------------------


async def test_agent_send_to_running_and_idle_children(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    send = {
        "name": "agent_send",
        "args": {"agent_key": "{agent_key}", "message": "also check silver"},
    }
    events = await run(
        tmp_path,
        {
            "boss": agent(
                [
                    {"calls": [spawn("miner", "dig", timeout_seconds=0)]},
                    {"calls": [send]},  # the miner is still running: queued
                    {"say": "waiting"},
                    {
                        "sleep": 1,
                        "calls": [
                            {
                                "name": "agent_send",
                                "args": {"agent_key": "{results}", "message": "summarize"},
                            }
                        ],
                    },
                    {"say": "done: {results}"},
                ]
            ),
            "miner": agent(
                [
                    {"sleep": 10, "say": "gold"},
                    {"say": "seen: {input}"},
                    {"say": "summary for: {input}"},
                ],
                tools=[],
            ),
        },
    )
    miner_messages = [
        e.data
        for e in of_type(events, EventType.USER_MESSAGE)
        if e.source and e.source.agent_id == "miner"
    ]
    assert miner_messages[0]["text"] == "also check silver" and miner_messages[0]["from"] == "root"
    miner_results = [
        e.data["text"] for e in by_agent(events, "miner") if e.type == EventType.AGENT_RESULT
    ]
    assert (
        miner_results[0] == "seen: also check silver"
    )  # the queued message was seen before its next turn
    assert events[-1].data["status"] == "completed"


async def test_send_to_an_agent_that_is_just_finishing(tmp_path: Path) -> None:
    """Race: a message arrives while the agent is publishing its final answer."""
    from orchestrator.core.bus import Bus, RunSink
    from orchestrator.runtime.queue import EventQueue

    config = write_config(
        tmp_path, {"echo": agent([{"say": "first"}, {"say": "again: {input}"}], tools=[])}
    )
    async with Orchestrator.open(config) as orch:
        queue = EventQueue(capacity=1)
        bus = Bus(RunSink("run-x", "sess-x", queue)).child(agent_id="echo", agent_name="echo")
        spec = orch.specs["echo"]
        runner = AgentRunner(spec, orch.providers.for_agent(spec), orch.tools, bus, depth=1)
        replies: list[str] = []
        async with trio.open_nursery() as nursery:
            nursery.start_soon(runner.run, "hi")
            # The consumer is not reading: the runner blocks publishing its last events.
            while not (runner.running and not runner.accepting):
                await queue.get_batch()
                await trio.testing.wait_all_tasks_blocked()
            assert runner.running and not runner.accepting

            async def send() -> None:
                replies.append(await send_to(runner, "late news", "client"))

            nursery.start_soon(send)
            while runner.running or not replies:
                try:
                    await queue.get_batch()
                except trio.EndOfChannel:
                    break
                await trio.testing.wait_all_tasks_blocked()
        assert replies == ["again: late news"]


# -- built-in tools ------------------------------------------------------------------------


async def test_file_tools_are_confined_and_unsafe_ones_run_in_call_order(tmp_path: Path) -> None:
    (tmp_path / "workspace").mkdir()
    (tmp_path / "workspace" / "notes.txt").write_text("hello notes")
    calls = [
        {"name": "write_file", "args": {"path": "out/log.txt", "content": "one\n"}},
        {"name": "wait", "args": {"seconds": 0.5}},
        {"name": "write_file", "args": {"path": "out/log.txt", "content": "two\n", "append": True}},
        {"name": "wait", "args": {"seconds": 0.5}},
        {"name": "read_file", "args": {"path": "notes.txt"}},
        {"name": "read_file", "args": {"path": "../server.yaml"}},
        {"name": "wait", "args": {"seconds": "soon"}},
    ]
    start = trio.current_time()
    events = await run(
        tmp_path,
        {
            "boss": agent(
                [{"calls": calls}, {"say": "{results}"}], tools=["read_file", "write_file", "wait"]
            )
        },
    )
    assert trio.current_time() - start < 0.95  # the two waits ran in parallel
    assert (tmp_path / "workspace" / "out" / "log.txt").read_text() == "one\ntwo\n"
    results = {e.data["toolCallId"]: e.data for e in of_type(events, EventType.TOOL_RESULT)}
    assert results["call_4"]["content"] == "hello notes"
    assert (
        results["call_5"]["isError"] and "outside the allowed root" in results["call_5"]["content"]
    )
    assert (
        results["call_6"]["isError"]
        and "wait: invalid arguments: seconds" in results["call_6"]["content"]
    )
    writes = [
        e.seq for e in of_type(events, EventType.TOOL_RESULT) if e.data["name"] == "write_file"
    ]
    assert writes == sorted(writes)


async def test_http_get_and_schemas(tmp_path: Path) -> None:
    async def handler(stream: trio.SocketStream) -> None:
        await stream.receive_some(65536)
        await stream.send_all(
            b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nConnection: close\r\n\r\nhowdy"
        )
        await stream.aclose()

    async with trio.open_nursery() as nursery:
        import functools

        listeners = await nursery.start(
            functools.partial(trio.serve_tcp, handler, 0, host="127.0.0.1")
        )
        port = listeners[0].socket.getsockname()[1]
        calls = [
            {"name": "http_get", "args": {"url": f"http://127.0.0.1:{port}/x"}},
            {"name": "http_get", "args": {"url": "ftp://nope"}},
        ]
        agents = {"boss": agent([{"calls": calls}, {"say": "ok"}], tools=["http_get"])}
        config = write_config(tmp_path, agents)
        async with Orchestrator.open(config) as orch:
            schema = orch.tools["http_get"].parameters()
            refused = await collect(orch, "boss", "go")
        config = write_config(tmp_path, agents, tools={"http_allowed_hosts": ["127.0.0.1"]})
        async with Orchestrator.open(config) as orch:
            events = await collect(orch, "boss", "go")
        nursery.cancel_scope.cancel()
    assert schema["required"] == ["url"] and schema["additionalProperties"] is False
    # Loopback (the server's own /metrics, say) is refused unless allowed.
    blocked = next(e.data for e in of_type(refused, EventType.TOOL_RESULT) if "127" in str(e.data))
    assert blocked["isError"] and "non-public address (127.0.0.1)" in blocked["content"]
    results = {e.data["toolCallId"]: e.data for e in of_type(events, EventType.TOOL_RESULT)}
    assert results["call_0"]["content"] == "HTTP 200\nhowdy"
    assert results["call_1"]["isError"] and "url" in results["call_1"]["content"]


async def test_a_tool_that_fails_while_others_run(tmp_path: Path) -> None:
    calls = [
        {"name": "wait", "args": {"seconds": 0.3}},
        {"name": "read_file", "args": {"path": "missing.txt"}},
        {"name": "wait", "args": {"seconds": 0.2}},
    ]
    (tmp_path / "workspace").mkdir()
    events = await run(
        tmp_path,
        {"boss": agent([{"calls": calls}, {"say": "{results}"}], tools=["read_file", "wait"])},
    )
    results = {e.data["toolCallId"]: e.data for e in of_type(events, EventType.TOOL_RESULT)}
    assert (
        results["call_1"]["isError"] and "cannot read 'missing.txt'" in results["call_1"]["content"]
    )
    assert not results["call_0"]["isError"] and not results["call_2"]["isError"]
    assert events[-1].data.get("error") is None, events[-1].data
    assert events[-1].data["result"].splitlines()[0] == "waited 0.3 s"  # call order to the model


# -- budgets -------------------------------------------------------------------------------


async def test_child_budget_cancels_its_subtree(tmp_path: Path) -> None:
    long_text = "word " * 200
    events = await run(
        tmp_path,
        {
            "boss": agent([{"calls": [spawn("spender")]}, {"say": "{results}"}]),
            "spender": agent(
                [{"say": long_text, "calls": [spawn("leaf")]}, {"say": "never"}], budget_tokens=100
            ),
            "leaf": agent([{"say": long_text}], tools=[]),
        },
    )
    error = next(
        e
        for e in of_type(events, EventType.AGENT_ERROR)
        if e.source and e.source.agent_id == "spender"
    )
    assert error.data["errorType"] == "budget" and "budget_tokens is 100" in error.data["message"]
    (result,) = [e for e in of_type(events, EventType.TOOL_RESULT) if e.source is None]
    assert result.data["isError"] and "failed (budget)" in result.data["content"]
    assert events[-1].data["status"] == "completed"


async def test_budget_crossed_by_parallel_children(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    chunk = "word " * 60
    events = await run(
        tmp_path,
        {
            "boss": agent([{"calls": [spawn("parent")]}, {"say": "{results}"}]),
            "parent": agent(
                [{"calls": [spawn("kid", "a"), spawn("kid", "b")]}, {"say": "never"}],
                budget_tokens=150,
            ),
            "kid": agent(
                [{"say": chunk}, {"sleep": 1, "say": chunk}, {"sleep": 50, "say": "late"}],
                tools=["wait"],
            ),
        },
    )
    kid_errors = [
        e for e in of_type(events, EventType.AGENT_ERROR) if e.source and e.source.agent_id == "kid"
    ]
    parent_error = next(
        e
        for e in of_type(events, EventType.AGENT_ERROR)
        if e.source and e.source.agent_id == "parent"
    )
    assert parent_error.data["errorType"] == "budget"
    assert {e.data["errorType"] for e in kid_errors} <= {"cancelled"}
    assert all(e.seq < parent_error.seq for e in kid_errors)
    assert trio.current_time() < 50
    assert events[-1].data["status"] == "completed"


async def test_run_max_tokens_fails_the_run(tmp_path: Path) -> None:
    events = await run(
        tmp_path, {"boss": agent([{"say": "word " * 100}], tools=[])}, limits={"max_tokens": 20}
    )
    assert of_type(events, EventType.AGENT_ERROR)[0].data["errorType"] == "budget"
    assert (
        events[-1].data["status"] == "failed"
        and "limits.max_tokens is 20" in events[-1].data["error"]
    )


async def test_spawn_schema_offers_background_spawns(tmp_path: Path) -> None:
    config = write_config(tmp_path, {"boss": agent([{"say": "hi"}])})
    async with Orchestrator.open(config) as orch:
        run = RunContext(orch.catalog, orch.default_limits(), runtime=run_tools)
        tool = run.tools["agent_spawn"]
        schema = tool.parameters()["properties"]["timeout_seconds"]
    assert schema["minimum"] == 0 and "exclusiveMinimum" not in schema
    assert "background" in schema["description"]


async def test_an_instance_cancelled_before_it_starts_never_runs(tmp_path: Path) -> None:
    """A background child is known to the run (`agent_send`, `cancel`) a moment before
    its task starts; a cancel in that moment ends it once, and it does not run after."""
    from agents.runner import Cancellation
    from orchestrator.core.bus import Bus, RunSink
    from orchestrator.runtime.queue import EventQueue

    config = write_config(tmp_path, {"echo": agent([{"say": "ran anyway"}], tools=[])})
    async with Orchestrator.open(config) as orch:
        queue = EventQueue(capacity=64)
        bus = Bus(RunSink("run-x", "sess-x", queue)).child(agent_id="echo", agent_name="echo")
        spec = orch.specs["echo"]
        runner = AgentRunner(spec, orch.providers.for_agent(spec), orch.tools, bus, depth=1)
        assert runner.cancel(Cancellation("user", "not needed"))
        with pytest.raises(AgentFailed) as failed:
            await runner.run("hi")
        assert failed.value.error_type == "cancelled"
        queue.close()
        events = [e for batch in [await queue.get_batch()] for e in batch]
    assert [(e.type, e.data.get("errorType")) for e in events] == [
        (EventType.AGENT_ERROR, "cancelled")
    ]
