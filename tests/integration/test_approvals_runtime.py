"""Approvals in-process: a call waits, the rest goes on; approve, deny, edit, timeout,
cancel; the in-process API (`RunStream.approve`, `pending_approvals`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing
import yaml

from agents.errors import SpecError
from orchestrator import ApprovalError, Orchestrator
from orchestrator.config import load_config
from orchestrator.core.events import Event, EventType
from orchestrator.runtime.engine import RunStream
from tests.helpers import collect, write_config
from tests.memory_server import autojump


def agent(turns: list[dict[str, Any]], tools: list[str], **extra: Any) -> dict[str, Any]:
    return {
        "description": "test agent",
        "instructions": "test",
        "tools": tools,
        "script": {"turns": turns},
        **extra,
    }


WRITE = {"name": "write_file", "args": {"path": "out.txt", "content": "hello"}}
AGENTS = {
    # boss spawns a writer (whose write_file waits) and a quick sibling in parallel.
    "boss": agent(
        [
            {
                "calls": [
                    {"name": "agent_spawn", "args": {"agent_id": "writer", "task": "w"}},
                    {"name": "agent_spawn", "args": {"agent_id": "quick", "task": "q"}},
                ]
            },
            {"say": "boss got: {results}"},
        ],
        ["agent_spawn"],
    ),
    "writer": agent(
        [{"calls": [WRITE, {"name": "wait", "args": {"seconds": 0}}]}, {"say": "wrote: {results}"}],
        ["write_file", "wait"],
        approval=["write_file"],
        approval_edit=True,
        approval_timeout_seconds=30,
    ),
    "quick": agent([{"say": "quick done"}], []),
    "fixed": agent(
        [{"calls": [WRITE]}, {"say": "fixed: {results}"}], ["write_file"], approval=["*"]
    ),
}


async def until(run: RunStream, events: list[Event], kind: str) -> Event:
    """Read the run's events into `events` until one of type `kind`; that event."""
    async for event in run:
        events.append(event)
        if event.type == kind:
            return event
    raise AssertionError(f"the run ended before a {kind}")


def by(event: Event, agent_id: str) -> bool:
    return event.source is not None and event.source.agent_id == agent_id


async def rest(run: RunStream, events: list[Event]) -> list[Event]:
    async for event in run:
        events.append(event)
    return events


@pytest.fixture
async def orch(tmp_path: Path) -> Any:
    config = write_config(tmp_path, AGENTS, tools={"root": str(tmp_path / "ws")})
    (tmp_path / "ws").mkdir()
    async with Orchestrator.open(config) as orch:
        yield orch


@autojump
async def test_a_waiting_call_holds_only_itself_and_runs_once_when_approved(
    orch: Orchestrator, tmp_path: Path
) -> None:
    events: list[Event] = []
    async with orch.stream("boss", "go") as run:
        asked = await until(run, events, "APPROVAL_REQUESTED")
        assert asked.source is not None and asked.source.agent_id == "writer"
        assert asked.data["name"] == "write_file" and asked.data["args"] == WRITE["args"]
        assert asked.data["edit"] is True
        assert asked.data["timeoutAt"] == pytest.approx(asked.ts + 30, abs=1)
        # The sibling and the writer's other call of that turn go on meanwhile.
        while not (
            any(e.type == "AGENT_RESULT" and by(e, "quick") for e in events)
            and any(e.type == "TOOL_RESULT" and e.data["name"] == "wait" for e in events)
        ):
            events.append(await run.__anext__())
        assert not (tmp_path / "ws" / "out.txt").exists()
        (pending,) = run.pending_approvals
        assert pending.request.tool_call_id == asked.data["toolCallId"]
        info = pending.info(agent_id="boss", root_path="x")
        assert info.agent_key == asked.source.agent_key and info.path == asked.source.path
        run.approve(asked.data["toolCallId"], reason="looks fine")
        with pytest.raises(ApprovalError, match="already answered"):
            run.approve(asked.data["toolCallId"], "deny")
        await rest(run, events)
    (resolved,) = [e for e in events if e.type == "APPROVAL_RESOLVED"]
    assert resolved.source == asked.source
    assert resolved.data == {
        "toolCallId": asked.data["toolCallId"],
        "decision": "approve",
        "by": "client",
        "reason": "looks fine",
        "edited": False,
    }
    assert (tmp_path / "ws" / "out.txt").read_text() == "hello"
    results = [e for e in events if e.type == "TOOL_RESULT" and e.data["name"] == "write_file"]
    assert len(results) == 1 and not results[0].data["isError"]
    assert events[-1].data["status"] == "completed"
    assert not run.pending_approvals


@autojump
async def test_an_edited_call_runs_with_the_new_args_and_bad_edits_change_nothing(
    orch: Orchestrator, tmp_path: Path
) -> None:
    events: list[Event] = []
    async with orch.stream("boss", "go") as run:
        asked = await until(run, events, "APPROVAL_REQUESTED")
        call_id = asked.data["toolCallId"]
        with pytest.raises(ApprovalError, match="content") as bad:
            run.approve(call_id, args={"path": "x.txt"})
        assert bad.value.code == "bad_request"
        with pytest.raises(ApprovalError, match="only come with decision 'approve'"):
            run.approve(call_id, "deny", args={"path": "x.txt", "content": "y"})
        with pytest.raises(ApprovalError, match="no tool call 'nope'") as unknown:
            run.approve("nope")
        assert unknown.value.code == "not_found"
        assert len(run.pending_approvals) == 1
        run.approve(call_id, args={"path": "edited.txt", "content": "changed"})
        await rest(run, events)
    (resolved,) = [e for e in events if e.type == "APPROVAL_RESOLVED"]
    assert resolved.data["edited"] is True
    assert resolved.data["args"] == {"path": "edited.txt", "content": "changed"}
    assert (tmp_path / "ws" / "edited.txt").read_text() == "changed"
    assert not (tmp_path / "ws" / "out.txt").exists()


@autojump
async def test_an_agent_that_may_not_be_edited_refuses_args(orch: Orchestrator) -> None:
    events: list[Event] = []
    async with orch.stream("fixed", "go") as run:
        asked = await until(run, events, "APPROVAL_REQUESTED")
        with pytest.raises(ApprovalError, match="may not be edited"):
            run.approve(asked.data["toolCallId"], args={"path": "a", "content": "b"})
        run.approve(asked.data["toolCallId"], "deny", reason="not today")
        await rest(run, events)
    result = next(e for e in events if e.type == "TOOL_RESULT")
    assert result.data["isError"] is True
    assert result.data["content"] == "tool 'write_file' was not run: denied by client: not today"
    assert events[-1].data["result"].startswith("fixed: ")
    assert "denied by client: not today" in events[-1].data["result"]


@autojump
async def test_nobody_answering_is_a_timeout(
    orch: Orchestrator, tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    events: list[Event] = []
    async with orch.stream("boss", "go") as run:
        await rest(run, events)
    (resolved,) = [e for e in events if e.type == "APPROVAL_RESOLVED"]
    assert resolved.data["decision"] == "timeout" and resolved.data["by"] == "server"
    assert resolved.data["reason"] == "no decision within 30 s"
    result = next(e for e in events if e.type == "TOOL_RESULT" and e.data["name"] == "write_file")
    assert result.data["isError"] and "nobody approved it in time" in result.data["content"]
    assert events[-1].data["status"] == "completed"
    assert not (tmp_path / "ws" / "out.txt").exists()


@autojump
async def test_cancelling_the_waiting_agent_resolves_its_approval_cancelled(
    orch: Orchestrator,
) -> None:
    events: list[Event] = []
    async with orch.stream("boss", "go") as run:
        asked = await until(run, events, "APPROVAL_REQUESTED")
        assert asked.source is not None
        run.cancel(asked.source.agent_key, reason="no writes")
        await rest(run, events)
        assert not run.pending_approvals
        with pytest.raises(ApprovalError, match="has ended"):
            run.approve(asked.data["toolCallId"])
    kinds = [e.type for e in events if e.source == asked.source]
    assert kinds[-2:] == ["APPROVAL_RESOLVED", "AGENT_ERROR"]
    (resolved,) = [e for e in events if e.type == "APPROVAL_RESOLVED"]
    assert resolved.data == {
        "toolCallId": asked.data["toolCallId"],
        "decision": "cancelled",
        "by": "user",
        "reason": "no writes",
        "edited": False,
    }
    assert events[-1].data["status"] == "completed"


@autojump
async def test_a_call_without_a_watcher_is_denied(orch: Orchestrator, tmp_path: Path) -> None:
    result = await orch.call("fixed", "go")
    assert result.status == "completed"
    assert result.text is not None and "nobody can approve the call" in result.text
    assert not (tmp_path / "ws" / "out.txt").exists()


@autojump
async def test_cancelling_the_run_resolves_a_waiting_call_cancelled(orch: Orchestrator) -> None:
    events: list[Event] = []
    async with orch.stream("boss", "go") as run:
        asked = await until(run, events, "APPROVAL_REQUESTED")
        run.cancel(reason="all stop")  # an ancestor of the waiting agent: the root
        await rest(run, events)
    (resolved,) = [e for e in events if e.type == "APPROVAL_RESOLVED"]
    assert resolved.source == asked.source
    assert resolved.data["decision"] == "cancelled" and resolved.data["by"] == "user"
    assert resolved.data["reason"] == "all stop"
    assert events[-1].data["status"] == "cancelled"
    assert not [e for e in events if e.type == "TOOL_RESULT" and e.data["name"] == "write_file"]


@autojump
async def test_a_background_child_waits_the_same_way(tmp_path: Path) -> None:
    agents = {
        **AGENTS,
        "bg": agent(
            [
                {
                    "calls": [
                        {
                            "name": "agent_spawn",
                            "args": {"agent_id": "fixed", "task": "t", "timeout_seconds": 0},
                        }
                    ]
                },
                {"say": "started: {results}"},
                {"say": "bg got: {input}"},
            ],
            ["agent_spawn"],
        ),
    }
    config = write_config(tmp_path, agents, tools={"root": str(tmp_path / "ws")})
    (tmp_path / "ws").mkdir()
    events: list[Event] = []
    async with Orchestrator.open(config) as orch, orch.stream("bg", "go") as run:
        asked = await until(run, events, "APPROVAL_REQUESTED")
        assert asked.source is not None and asked.source.task_id is not None
        run.approve(asked.data["toolCallId"])
        await rest(run, events)
    assert events[-1].data["status"] == "completed"
    assert (tmp_path / "ws" / "out.txt").read_text() == "hello"
    assert "bg got: [task-" in events[-1].data["result"]


@autojump
async def test_the_server_list_applies_where_a_subagent_says_nothing(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    pause = {"name": "wait", "args": {"seconds": 1}}  # (no thread: the clock autojumps)
    agents = {
        "plain": agent([{"calls": [pause]}, {"say": "plain: {results}"}], ["wait"]),
        "opted_out": agent([{"calls": [pause]}, {"say": "out: {results}"}], ["wait"], approval=[]),
    }
    config = write_config(tmp_path, agents).model_copy(update={"approval": ["wait"]})
    async with Orchestrator.open(config) as orch:
        plain = await collect(orch, "plain", "go")  # nobody answers: it times out
        opted_out = await collect(orch, "opted_out", "go")
    assert [e.type for e in plain].count(EventType.APPROVAL_REQUESTED) == 1
    # It waited the whole default hour, four times run_timeout_seconds (900): the run's
    # clock stands still while a call waits for a person.
    assert plain[-1].data["status"] == "completed"
    assert "nobody approved it in time" in plain[-1].data["result"]
    assert not [e for e in opted_out if e.type.startswith("APPROVAL_")]
    assert opted_out[-1].data["result"].startswith("out: ")


@autojump
async def test_unknown_tools_in_approval_lists_are_clear_errors(tmp_path: Path) -> None:
    bad = {"x": agent([], ["write_file"], approval=["write_fiel"])}
    with pytest.raises(SpecError, match=r"x\.yaml: approval\[0\]: unknown tool 'write_fiel'"):
        write_config(tmp_path, bad)
        async with Orchestrator.open(load_config(tmp_path / "server.yaml")):
            pass
    (tmp_path / "x.yaml").unlink(missing_ok=True)
    (tmp_path / "subagents" / "x.yaml").write_text(yaml.safe_dump(agent([], [])))
    config = load_config(tmp_path / "server.yaml").model_copy(update={"approval": ["*", "nope"]})
    with pytest.raises(SpecError, match=r"server\.yaml: approval\[1\]: unknown tool 'nope'"):
        async with Orchestrator.open(config):
            pass
