"""Events into GenAI spans, without I/O: ids derived from the run, a run that ends with
agents still open, content only when asked, and the conventions' own attribute names."""

from __future__ import annotations

from typing import Any

import pytest

pytest.importorskip("opentelemetry.semconv", reason="traces need the `otel` extra")

from opentelemetry.semconv._incubating.attributes import gen_ai_attributes

from orchestrator.core.events import Event, EventType, Source
from orchestrator.telemetry.trace import TraceBuilder, span_id_of, trace_id_of


def child_source() -> Source:
    return Source(
        agent_key="agent:leaf:1",
        agent_id="leaf",
        agent_name="Leaf",
        session_id="sub-1",
        parent_session_id="sess-1",
        depth=1,
        path="sess-1/leaf",
        task_id=None,
        parent_tool_call_id="call_0",
    )


def events() -> list[Event]:
    data: list[tuple[EventType, Source | None, bool, dict[str, Any]]] = [
        (EventType.RUN_STARTED, None, False, {"agentId": "boss", "input": "the task"}),
        (EventType.REASONING, None, False, {"delta": "Go."}),
        (
            EventType.REASONING,
            None,
            True,
            {
                "text": "Go.",
                "toolCalls": [],
                "finishReason": "tool_calls",
                "usage": {"inputTokens": 7, "outputTokens": 3},
            },
        ),
        (
            EventType.TOOL_CALL,
            None,
            False,
            {
                "toolCallId": "call_0",
                "name": "agent_spawn",
                "args": {"agent_id": "leaf", "task": "t"},
            },
        ),
        (EventType.AGENT_STARTED, child_source(), False, {"agentId": "leaf", "task": "t"}),
        (EventType.REASONING, child_source(), False, {"delta": "working"}),
        (
            EventType.RUN_FINISHED,
            None,
            True,
            {"status": "interrupted", "error": "the server stopped"},
        ),
    ]
    return [
        Event("run-1", i + 1, 100.0 + i, kind, source, last, d)
        for i, (kind, source, last, d) in enumerate(data)
    ]


def test_ids_are_derived_and_a_run_ending_closes_every_open_span() -> None:
    builder = TraceBuilder("run-1", lambda agent_id: ("openai", "gpt-x"))
    done = [span for event in events() for span in builder.feed(event)]
    assert builder.open_spans == 0
    names = sorted(s.name for s in done)
    assert names == sorted(
        [
            "chat gpt-x",
            "chat gpt-x",
            "invoke_agent Leaf",
            "invoke_agent boss",
            "execute_tool agent_spawn",
        ]
    )
    assert {s.trace_id for s in done} == {trace_id_of("run-1")}
    by_name = {s.name: s for s in done}
    boss, leaf = by_name["invoke_agent boss"], by_name["invoke_agent Leaf"]
    spawn = by_name["execute_tool agent_spawn"]
    assert boss.span_id == span_id_of("run-1", "agent:root") and boss.parent_id is None
    assert spawn.parent_id == boss.span_id and leaf.parent_id == spawn.span_id
    for span in (boss, leaf, spawn):
        assert span.error is not None and span.end == 106.0
    assert boss.attributes["error.type"] == "interrupted"
    assert spawn.attributes["error.type"] == "cancelled"
    chat = done[0]
    assert chat.start == 100.0 and chat.end == 102.0 and chat.kind == "client"
    assert chat.attributes[gen_ai_attributes.GEN_AI_USAGE_INPUT_TOKENS] == 7
    assert chat.attributes[gen_ai_attributes.GEN_AI_RESPONSE_FINISH_REASONS] == ("tool_calls",)
    assert gen_ai_attributes.GEN_AI_INPUT_MESSAGES not in boss.attributes
    # The same events give the same ids: a resumed run continues the same spans.
    second = TraceBuilder("run-1", lambda a: ("openai", "gpt-x"))
    again = [span for event in events() for span in second.feed(event)]
    assert [(s.span_id, s.parent_id) for s in again] == [(s.span_id, s.parent_id) for s in done]


def test_content_only_when_asked() -> None:
    builder = TraceBuilder("run-1", lambda agent_id: ("anthropic", "claude"), capture_content=True)
    done = [span for event in events() for span in builder.feed(event)]
    boss = next(s for s in done if s.name == "invoke_agent boss")
    assert "the task" in boss.attributes[gen_ai_attributes.GEN_AI_INPUT_MESSAGES]
    spawn = next(s for s in done if s.name == "execute_tool agent_spawn")
    assert '"task": "t"' in spawn.attributes[gen_ai_attributes.GEN_AI_TOOL_CALL_ARGUMENTS]
    assert boss.attributes[gen_ai_attributes.GEN_AI_PROVIDER_NAME] == "anthropic"


def test_a_model_fallback_is_on_the_agent_span_and_names_the_next_chat() -> None:
    builder = TraceBuilder(
        "run-1",
        lambda agent_id: ("anthropic", "claude-x"),
        model_keys=lambda key: {"gpt": ("openai", "gpt-x")}.get(key, ("unknown", key)),
    )
    fell = {"from": "claude", "to": "gpt", "reason": "overloaded", "error": "HTTP 529"}
    turn = {"text": "hi", "toolCalls": [], "finishReason": "stop", "model": "gpt"}
    data: list[tuple[EventType, bool, dict[str, Any]]] = [
        (EventType.RUN_STARTED, False, {"agentId": "boss", "input": "t"}),
        (EventType.MODEL_FALLBACK, False, fell),
        (EventType.REASONING, False, {"delta": "hi"}),
        (EventType.REASONING, True, turn),
        (EventType.RUN_FINISHED, True, {"status": "completed", "result": "hi"}),
    ]
    spans = [
        span
        for i, (kind, last, d) in enumerate(data)
        for span in builder.feed(Event("run-1", i + 1, 100.0 + i, kind, None, last, d))
    ]
    chat = next(s for s in spans if s.kind == "client")
    assert chat.name == "chat gpt-x"
    assert chat.attributes[gen_ai_attributes.GEN_AI_REQUEST_MODEL] == "gpt-x"
    agent = next(s for s in spans if s.attributes.get("orchestrator.model_fallbacks"))
    assert agent.attributes["orchestrator.model_fallbacks"] == ("claude -> gpt (overloaded)",)
