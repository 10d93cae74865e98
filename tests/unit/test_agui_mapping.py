"""Our events as AG-UI events, without I/O: reasoning before text, a failed and a
cancelled run, events AG-UI has no type for, and a feed that starts mid-turn — each
AG-UI event round-tripped through the `ag-ui-protocol` package's own models."""

from __future__ import annotations

from typing import Any

import pytest

pytest.importorskip("ag_ui.core", reason="AG-UI needs the `agui` extra")

from ag_ui.core import Event as AguiEvent
from ag_ui.encoder import EventEncoder
from pydantic import TypeAdapter

from orchestrator.agui.mapping import (
    AguiStream,
    answer_of,
    interrupt_id,
    parse_interrupt_id,
)
from orchestrator.core.approvals import Answer
from orchestrator.core.events import Event, EventType

DECODE = TypeAdapter(AguiEvent)


def run(steps: list[tuple[EventType, bool, dict[str, Any]]], stream: AguiStream) -> list[Any]:
    out: list[Any] = []
    encoder = EventEncoder()
    for seq, (kind, last, data) in enumerate(steps, 1):
        for event in stream.feed(Event("run-1", seq, 1.5 + seq, kind, None, last, data)):
            line = encoder.encode(event)
            assert line.startswith("data: ") and line.endswith("\n\n")
            out.append(DECODE.validate_json(line.removeprefix("data: ")))
    return out


def test_reasoning_comes_before_the_text_and_each_closes() -> None:
    steps: list[tuple[EventType, bool, dict[str, Any]]] = [
        (EventType.RUN_STARTED, False, {"agentId": "solo", "input": "x"}),
        (EventType.REASONING, False, {"thinkingDelta": "hmm, "}),
        (EventType.REASONING, False, {"thinkingDelta": "yes"}),
        (EventType.REASONING, False, {"delta": "Hello"}),
        (EventType.REASONING, False, {"delta": ""}),  # nothing to say: nothing sent
        (EventType.REASONING, False, {"delta": " there"}),
        (EventType.REASONING, True, {"text": "Hello there", "toolCalls": []}),
        (EventType.USER_MESSAGE, False, {"text": "more", "from": "client"}),
        (EventType.RUN_FINISHED, True, {"status": "failed", "error": "boom"}),
    ]
    out = run(steps, AguiStream("run-1", thread_id="t", agui_run_id="r"))
    assert [e.type.value for e in out] == [
        "RUN_STARTED",
        "REASONING_START",
        "REASONING_MESSAGE_START",
        "REASONING_MESSAGE_CONTENT",
        "REASONING_MESSAGE_CONTENT",
        "REASONING_MESSAGE_END",
        "REASONING_END",
        "TEXT_MESSAGE_START",
        "TEXT_MESSAGE_CONTENT",
        "TEXT_MESSAGE_CONTENT",
        "TEXT_MESSAGE_END",
        "CUSTOM",
        "RUN_ERROR",
    ]
    assert out[0].thread_id == "t" and out[0].run_id == "r"
    assert out[-2].name == "orchestrator.USER_MESSAGE" and out[-2].value["text"] == "more"
    assert out[-1].message == "boom" and out[-1].code == "failed"
    assert [e.metadata["seq"] for e in out] == sorted(e.metadata["seq"] for e in out)
    assert out[1].timestamp == 3500  # milliseconds


def test_a_cancelled_run_and_a_feed_that_starts_mid_turn() -> None:
    steps: list[tuple[EventType, bool, dict[str, Any]]] = [
        (EventType.REASONING, False, {"delta": "mid-"}),  # its start was never seen
        (EventType.TOOL_CALL, False, {"toolCallId": "c1", "name": "wait", "args": {"seconds": 1}}),
        (EventType.RUN_FINISHED, True, {"status": "cancelled", "by": "user"}),
    ]
    out = run(steps, AguiStream("run-1"))
    kinds = [e.type.value for e in out]
    assert kinds == [
        "TEXT_MESSAGE_START",
        "TEXT_MESSAGE_CONTENT",
        "TOOL_CALL_START",
        "TOOL_CALL_ARGS",
        "TOOL_CALL_END",
        "TEXT_MESSAGE_END",
        "RUN_FINISHED",
    ]
    assert out[2].parent_message_id == out[0].message_id  # the call belongs to the turn
    assert out[3].delta == '{"seconds": 1}'
    assert out[-1].outcome.type == "cancelled" and out[-1].run_id == "run-1"


def child(key: str, depth: int = 1) -> Any:
    from orchestrator.core.events import Source

    return Source(
        agent_key=key,
        agent_id="writer",
        agent_name="Writer",
        session_id=f"s-{key}",
        parent_session_id="s-root",
        depth=depth,
        path=f"root/{key}",
        task_id=f"t-{key}",
        parent_tool_call_id="call_0",
    )


def tree_events() -> list[Event]:
    """A root that spawned a writer whose write_file waits, while its text streams."""
    w = child("w")
    steps: list[tuple[EventType, Any, bool, dict[str, Any]]] = [
        (EventType.RUN_STARTED, None, False, {"agentId": "boss", "input": "x"}),
        (EventType.TOOL_CALL, None, False, {"toolCallId": "call_0", "name": "agent_spawn"}),
        (EventType.AGENT_STARTED, w, False, {"task": "write"}),
        (EventType.REASONING, w, False, {"delta": "Writing"}),
        (EventType.TOOL_CALL_DELTA, w, False, {"toolCallId": "call_0", "name": "write_file"}),
        (EventType.TOOL_CALL, w, False, {"toolCallId": "call_0", "name": "write_file", "args": {}}),
        (
            EventType.APPROVAL_REQUESTED,
            w,
            False,
            {"toolCallId": "call_0", "name": "write_file", "args": {}, "edit": False},
        ),
    ]
    return [
        Event("run-1", seq, 10.0 + seq, kind, source, last, data)
        for seq, (kind, source, last, data) in enumerate(steps, 1)
    ]


def test_waiting_calls_end_a_segment_with_an_interrupt() -> None:
    stream = AguiStream("run-1")
    for event in tree_events():
        stream.feed(event)
    out: list[Any] = stream.interrupt()
    kinds = [e.type.value for e in out]
    assert kinds == [
        "TEXT_MESSAGE_END",
        "STEP_FINISHED",
        "SUBAGENT_FINISHED",
        "RUN_FINISHED",
    ]
    (item,) = out[-1].outcome.interrupts
    assert item.subagent_run_id == "w" and item.reason == "tool_approval"
    assert item.tool_call_id == "call_0~2"  # the root's spawn said call_0 first
    assert item.metadata["toolCallId"] == "call_0" and item.metadata["path"] == "root/w"
    assert "args" not in item.response_schema["properties"]  # edits not allowed
    assert parse_interrupt_id(item.id) == ("run-1", 7, 7)
    assert out[2].outcome.type == "suspended" and out[2].outcome.interrupt_ids == [item.id]


def test_a_primed_stream_reopens_what_is_open_under_the_same_ids() -> None:
    events = tree_events()
    whole = AguiStream("run-1")
    sent: list[Any] = [e for event in events[:5] for e in whole.feed(event)]
    later = AguiStream("run-1", agui_run_id="again")
    later.prime(events[:5])
    opened: list[Any] = later.begin()
    assert [e.type.value for e in opened] == [
        "RUN_STARTED",
        "SUBAGENT_STARTED",
        "STEP_STARTED",
        "TEXT_MESSAGE_START",
        "TOOL_CALL_START",
    ]
    text = next(e for e in sent if e.type.value == "TEXT_MESSAGE_START")
    call = next(e for e in sent if e.type.value == "TOOL_CALL_START" and e.subagent_run_id)
    assert opened[3].message_id == text.message_id
    assert opened[4].tool_call_id == call.tool_call_id == "call_0~2"
    assert all(e.metadata["seq"] == 5 for e in opened)
    # The rest goes on as in one stream: the call ends, no second start.
    rest = [e.type.value for e in later.feed(events[5])]
    assert rest == ["TOOL_CALL_END"]


@pytest.mark.parametrize(
    ("status", "payload", "expected"),
    [
        ("resolved", True, Answer(tool_call_id="c1", agent_key=None, decision="approve", by="ann")),
        (
            "resolved",
            {"approved": False, "reason": "no"},
            Answer(tool_call_id="c1", agent_key=None, decision="deny", by="ann", reason="no"),
        ),
        (
            "resolved",
            {"approved": True, "args": {"a": 1}},
            Answer(tool_call_id="c1", agent_key=None, decision="approve", by="ann", args={"a": 1}),
        ),
        (
            "cancelled",
            None,
            Answer(
                tool_call_id="c1",
                agent_key=None,
                decision="deny",
                by="ann",
                reason="cancelled by the client",
            ),
        ),
        ("resolved", {"ok": 1}, None),
        ("resolved", {"approved": True, "args": [1]}, None),
        ("resolved", {"approved": True, "reason": 3}, None),
    ],
)
def test_resume_payloads_become_decisions(status: str, payload: Any, expected: Any) -> None:
    got = answer_of(status, payload, tool_call_id="c1", agent_key=None, by="ann")
    if expected is None:
        assert isinstance(got, str)
    else:
        assert got == expected


def test_interrupt_ids_round_trip_and_refuse_others() -> None:
    assert parse_interrupt_id(interrupt_id("run-a@b", 3, 9)) == ("run-a@b", 3, 9)
    for text in ("", "x", "run#3", "run@x#3", "@1#2", "r@1#" + "9" * 600):
        assert parse_interrupt_id(text) is None


def test_a_result_whose_call_started_before_the_feed_keeps_the_runs_id() -> None:
    """A feed that starts after a call's TOOL_CALL (a filtered or resumed one) still
    gives its TOOL_RESULT the run's own id, once: not `call_0~2`."""
    steps: list[tuple[EventType, bool, dict[str, Any]]] = [
        (EventType.RUN_STARTED, False, {"agentId": "solo", "input": "x"}),
        (
            EventType.TOOL_RESULT,
            False,
            {"toolCallId": "call_0", "name": "read_file", "content": "ok", "isError": False},
        ),
        (EventType.RUN_FINISHED, True, {"status": "completed", "result": "done"}),
    ]
    out = run(steps, AguiStream("run-1"))
    (result,) = [e for e in out if e.type.value == "TOOL_CALL_RESULT"]
    assert result.tool_call_id == "call_0"


def test_a_threads_chat_is_its_inputs_answers_and_tool_calls_with_the_servers_ids() -> None:
    from agents.core import messages as m
    from orchestrator.agui.mapping import chat_of

    history: list[m.Message] = [
        m.UserMessage(text="plan a trip"),
        m.AssistantMessage(
            text="", tool_calls=(m.ToolCall(id="c", name="agent_spawn", arguments="{}"),)
        ),
        m.ToolResultMessage(tool_call_id="c", name="agent_spawn", content="done"),
        m.AssistantMessage(text="Here is the plan."),
        m.UserMessage(text="(summary of 3 turns)", summarized_turns=3),
    ]
    chat = chat_of("t", history, "and the budget?")
    assert [(x.id, x.role, x.content) for x in chat] == [
        ("t:0", "user", "plan a trip"),
        ("t:1", "assistant", None),  # its tool calls (issue 57, defect 9)
        ("t:2", "tool", "done"),
        ("t:3", "assistant", "Here is the plan."),
        ("t:5", "user", "and the budget?"),  # (a compaction's summary is not shown)
    ]
    calls = getattr(chat[1], "tool_calls", None)
    assert calls is not None
    call = calls[0]
    assert (call.id, call.function.name, call.function.arguments) == ("c", "agent_spawn", "{}")
    assert getattr(chat[2], "tool_call_id", None) == "c"
    assert [x.id for x in chat_of("t", history)] == ["t:0", "t:1", "t:2", "t:3"]
