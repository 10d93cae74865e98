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

from orchestrator.agui.mapping import AguiStream
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
