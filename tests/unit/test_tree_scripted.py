"""The tree view model and the scripted provider's pure helpers."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from agents.core.messages import AssistantMessage, ModelRequest, ToolResultMessage, UserMessage
from agents.providers.scripted import ScriptedProvider, render, split_tokens
from agents.spec import ScriptSpec, ScriptStep
from orchestrator.core.bus import Bus, RunSink
from orchestrator.core.events import Event, EventType
from orchestrator.core.tree import TreeView
from tests.unit.test_events_bus import ListOutlet


@given(st.text())
def test_tokens_join_back_exactly(text: str) -> None:
    assert "".join(split_tokens(text)) == text


def test_render_fills_placeholders_deeply() -> None:
    value: Any = {"a": ["{input}!", {"b": "{results}"}], "n": 3}
    assert render(value, {"input": "x", "results": "r"}) == {"a": ["x!", {"b": "r"}], "n": 3}


def test_scripted_turn_follows_conversation() -> None:
    provider = ScriptedProvider(ScriptSpec(turns=[ScriptStep(say="one"), ScriptStep(say="two")]))
    first = ModelRequest(system="s", messages=(UserMessage(text="t"),))
    assert provider.step_for(first).say == "one"
    second = ModelRequest(
        system="s",
        messages=(
            UserMessage(text="t"),
            AssistantMessage(text="one"),
            ToolResultMessage(tool_call_id="c", name="f", content="r"),
        ),
    )
    assert provider.step_for(second).say == "two"
    third = ModelRequest(system="s", messages=(*second.messages, AssistantMessage(text="two")))
    assert provider.step_for(third).say == "two"  # past the end: last final turn again
    assert ScriptedProvider(None).step_for(first).say == "Done: {input}"


def tree_events() -> list[Event]:
    outlet = ListOutlet()
    root = Bus(RunSink("run-1", "sess-1", outlet))
    root.emit_nowait(EventType.RUN_STARTED, {"agentId": "planner", "input": "q"})
    a = root.child(agent_id="researcher", agent_name="R")
    b = root.child(agent_id="researcher", agent_name="R")
    c = a.child(agent_id="critic", agent_name="C")
    a.emit_nowait(EventType.AGENT_STARTED, {"agentId": "researcher", "task": "ta"})
    b.emit_nowait(EventType.AGENT_STARTED, {"agentId": "researcher", "task": "tb"})
    a.emit_nowait(EventType.REASONING, {"delta": "hel"})
    a.emit_nowait(EventType.REASONING, {"delta": "lo"})
    c.emit_nowait(EventType.AGENT_STARTED, {"agentId": "critic", "task": "tc"})
    a.emit_nowait(EventType.TOOL_CALL, {"toolCallId": "x", "name": "agent_spawn", "args": {}})
    c.emit_nowait(EventType.AGENT_ERROR, {"errorType": "timeout", "message": "slow"})
    a.emit_nowait(
        EventType.TOOL_RESULT,
        {"toolCallId": "x", "name": "agent_spawn", "content": "e", "isError": True},
    )
    a.emit_nowait(EventType.REASONING, {"text": "hello", "toolCalls": []}, last=True)  # type: ignore[call-overload]
    a.emit_nowait(EventType.REASONING, {"delta": "next"})
    b.emit_nowait(  # type: ignore[call-overload]
        EventType.AGENT_RESULT,
        {"text": "done b", "usage": {}, "subtreeUsage": {"inputTokens": 1, "outputTokens": 2}},
        last=True,
    )
    root.emit_nowait(EventType.RUN_FINISHED, {"status": "completed", "result": "fin"}, last=True)
    return outlet.events


def test_tree_view_builds_nested_tree() -> None:
    view = TreeView()
    for event in tree_events():
        view.apply(event)
    nodes = list(view.walk())
    assert [(n.depth, n.agent_id) for n in nodes] == [
        (0, "planner"),
        (1, "researcher"),
        (2, "critic"),
        (1, "researcher"),
    ]
    _root, a, c, b = nodes
    assert a.text == "next" and a.turns == 1 and a.status == "running" and not a.tools_running
    assert c.status == "timeout" and c.error == "slow"
    assert (
        b.status == "done"
        and b.result == "done b"
        and b.usage == {"inputTokens": 1, "outputTokens": 2}
    )
    assert view.run_status == "completed" and view.result == "fin" and view.last_seq == 13


def test_tree_view_tolerates_a_partial_feed() -> None:
    view = TreeView()
    events = tree_events()
    for event in events[6:]:  # resumed mid-run: the critic's parent never started here
        view.apply(event)
    agents = sorted(n.agent_id for n in view.walk())
    assert agents == ["critic", "researcher", "researcher", "root"]


def test_tree_view_and_its_rendering_show_a_call_waiting_for_approval() -> None:
    from rich.console import Console

    from orchestrator.cli.render import render_tree

    def event(seq: int, kind: EventType, data: dict[str, Any]) -> Event:
        return Event("run-1", seq, 0.0, kind, None, False, data)

    view = TreeView()
    view.apply(event(1, EventType.RUN_STARTED, {"agentId": "writer", "input": "x"}))
    view.apply(event(2, EventType.TOOL_CALL, {"toolCallId": "c1", "name": "write_file"}))
    view.apply(event(3, EventType.APPROVAL_REQUESTED, {"toolCallId": "c1", "name": "write_file"}))
    console = Console(width=120, record=True)
    console.print(render_tree(view, 120))
    assert "⏸ waiting for approval: write_file" in console.export_text()
    view.apply(event(4, EventType.APPROVAL_RESOLVED, {"toolCallId": "c1", "decision": "approve"}))
    assert view.root.waiting == {}
    console = Console(width=120, record=True)
    console.print(render_tree(view, 120))
    assert "⚙ write_file" in console.export_text()


def test_tree_view_and_its_rendering_show_a_compaction() -> None:
    from rich.console import Console

    from orchestrator.cli.render import render_tree

    def event(seq: int, kind: EventType, data: dict[str, Any]) -> Event:
        return Event("run-1", seq, 0.0, kind, None, False, data)

    def shown() -> str:
        console = Console(width=120, record=True)
        console.print(render_tree(view, 120))
        return console.export_text()

    view = TreeView()
    view.apply(event(1, EventType.RUN_STARTED, {"agentId": "reader", "input": "x"}))
    view.apply(event(2, EventType.COMPACTION_STARTED, {"reason": "threshold", "beforeTokens": 9}))
    assert view.root.compacting and "⟲ compacting its conversation" in shown()
    view.apply(event(3, EventType.COMPACTION_FINISHED, {"afterTokens": 3, "summary": "s"}))
    assert not view.root.compacting and view.root.compactions == 1
    assert "[compacted ×1]" in shown()
