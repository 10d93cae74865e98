"""OpenAI Chat Completions normalization: fixtures and the quirks of compatible servers."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agents.core.messages import (
    AssistantMessage,
    Finish,
    ModelRequest,
    StreamPart,
    TextDelta,
    ThinkingDelta,
    ToolCall,
    ToolCallArgs,
    ToolCallStart,
    ToolResultMessage,
    ToolSpec,
    UsageReport,
    UserMessage,
)
from agents.core.sse import SseDecoder
from agents.core.turn import TurnAssembler
from agents.core.wire.openai_chat import OpenAIChatNormalizer, encode_request
from agents.errors import ProviderError, StreamTruncated

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "sse"


def run_fixture(name: str) -> list[StreamPart]:
    decoder, norm = SseDecoder(), OpenAIChatNormalizer()
    parts: list[StreamPart] = []
    for event in decoder.feed((FIXTURES / name).read_bytes()):
        parts += norm.feed(event.data)
    parts += norm.end()
    return parts


def feed(*chunks: dict[str, Any] | str, end: bool = True) -> list[StreamPart]:
    norm = OpenAIChatNormalizer()
    parts: list[StreamPart] = []
    for c in chunks:
        parts += norm.feed(c if isinstance(c, str) else json.dumps(c))
    if end:
        parts += norm.end()
    return parts


def ch(
    delta: dict[str, Any] | None = None, finish: str | None = None, **extra: Any
) -> dict[str, Any]:
    choice: dict[str, Any] = {"index": 0, "finish_reason": finish}
    if delta is not None:
        choice["delta"] = delta
    return {"id": "c", "object": "chat.completion.chunk", "choices": [choice], **extra}


def tc(
    index: int | None = None,
    id: str | None = None,
    name: str | None = None,
    args: str | None = None,
) -> dict[str, Any]:
    frag: dict[str, Any] = {}
    if index is not None:
        frag["index"] = index
    if id is not None:
        frag["id"] = id
    fn: dict[str, Any] = {}
    if name is not None:
        fn["name"] = name
    if args is not None:
        fn["arguments"] = args
    if fn:
        frag["function"] = fn
    return {"tool_calls": [frag]}


def assemble(parts: list[StreamPart]) -> AssistantMessage:
    turn = TurnAssembler()
    for part in parts:
        turn.apply(part)
    return turn.message()


def test_text_fixture() -> None:
    parts = run_fixture("openai_chat_text.sse")
    assert parts == [TextDelta("Hello"), Finish("stop"), UsageReport(9, 2)]


def test_parallel_tools_fixture_interleaved() -> None:
    message = assemble(run_fixture("openai_chat_parallel_tools.sse"))
    assert message.tool_calls == (
        ToolCall(id="call_A", name="get_weather", arguments='{"city":"Paris"}'),
        ToolCall(id="call_B", name="get_time", arguments='{"tz":"CET"}'),
    )


def test_midstream_error_fixture() -> None:
    with pytest.raises(ProviderError, match="server_error") as info:
        run_fixture("openai_chat_midstream_error.sse")
    assert info.value.error_type == "server_error"


def test_first_chunk_without_choices_and_choice_without_delta() -> None:
    parts = feed(
        {"id": "c", "choices": [], "prompt_filter_results": [{"prompt_index": 0}]},
        ch({"content": "Hi"}),
        {"id": "c", "choices": [{"index": 0, "finish_reason": None, "content_filter_results": {}}]},
        ch({}, finish="stop"),
    )
    assert parts == [TextDelta("Hi"), Finish("stop")]


def test_missing_index_new_id_starts_new_call() -> None:
    message = assemble(
        feed(
            ch(tc(id="a", name="f", args='{"x":')),
            ch(tc(args="1}")),
            ch(tc(id="b", name="g", args="{}")),
            ch({}, finish="tool_calls"),
        )
    )
    assert [(c.id, c.name, c.arguments) for c in message.tool_calls] == [
        ("a", "f", '{"x":1}'),
        ("b", "g", "{}"),
    ]


def test_index_always_zero_with_distinct_ids() -> None:
    message = assemble(
        feed(
            ch(tc(0, "a", "f", '{"q":"one"}')),
            ch(tc(0, "b", "f", '{"q":"two"}')),
            ch({}, finish="tool_calls"),
        )
    )
    assert [(c.id, c.arguments) for c in message.tool_calls] == [
        ("a", '{"q":"one"}'),
        ("b", '{"q":"two"}'),
    ]


def test_empty_ids_on_continuations_and_repeated_id_and_name() -> None:
    message = assemble(
        feed(
            ch(tc(0, "call_1", "lookup", "")),
            ch(tc(0, "", None, '{"k"')),
            ch(tc(0, "call_1", "lookup", ':"v"}')),  # LiteLLM/sglang repeat id and name
            ch({}, finish="tool_calls"),
        )
    )
    assert message.tool_calls == (ToolCall(id="call_1", name="lookup", arguments='{"k":"v"}'),)


def test_missing_ids_are_synthesized_and_whole_args_accepted() -> None:
    message = assemble(
        feed(ch(tc(0, None, "f", '{"a":1}')), ch(tc(1, None, "g", '{"b":2}')), ch({}, "tool_calls"))
    )
    assert [(c.id, c.name, c.arguments) for c in message.tool_calls] == [
        ("call_0", "f", '{"a":1}'),
        ("call_1", "g", '{"b":2}'),
    ]


def test_finish_reason_repeated_is_acted_on_once() -> None:
    parts = feed(ch({"content": "x"}), ch({}, "stop"), ch({}, "stop"), "[DONE]")
    assert parts == [TextDelta("x"), Finish("stop")]


def test_done_without_finish_reason_is_unknown_finish() -> None:
    parts = feed(ch(tc(0, "a", "f", '{"a"')), ch(tc(0, None, None, ":1}")), "[DONE]")
    assert parts[-1] == Finish("unknown")
    assert assemble(parts).tool_calls[0].arguments == '{"a":1}'


def test_eof_without_finish_or_done_is_truncated() -> None:
    with pytest.raises(StreamTruncated, match="after partial output") as info:
        feed(ch({"content": "Par"}))
    assert info.value.error_type == "stream_truncated"


def test_eof_after_finish_without_done_is_fine() -> None:
    assert feed(ch({"content": "ok"}), ch({}, "stop")) == [TextDelta("ok"), Finish("stop")]


def test_reasoning_content_and_reasoning_become_thinking() -> None:
    parts = feed(
        ch({"reasoning_content": "think "}),
        ch({"reasoning": "more"}),
        ch({"content": "answer", "reasoning_content": None}),
        ch({}, "stop"),
    )
    assert parts == [
        ThinkingDelta("think "),
        ThinkingDelta("more"),
        TextDelta("answer"),
        Finish("stop"),
    ]


def test_usage_chunk_without_choices_and_extra_fields() -> None:
    parts = feed(
        ch({"content": "a"}, timings={"predicted_ms": 3}),
        ch({}, "stop"),
        {
            "id": "c",
            "choices": [],
            "usage": {"prompt_tokens": 5, "completion_tokens": 7},
            "timings": {},
        },
        "[DONE]",
    )
    assert parts[-1] == UsageReport(5, 7)


def test_empty_and_null_content_dropped() -> None:
    parts = feed(ch({"role": "assistant", "content": ""}), ch({"content": None}), ch({}, "stop"))
    assert parts == [Finish("stop")]


def test_name_arriving_after_first_fragment() -> None:
    parts = feed(ch(tc(0, "a", None, '{"x"')), ch(tc(0, None, "f", ":1}")), ch({}, "tool_calls"))
    assert parts[:3] == [
        ToolCallStart(0, "a", "f"),
        ToolCallArgs(0, '{"x"'),
        ToolCallArgs(0, ":1}"),
    ]


def test_malformed_chunk_is_provider_error_naming_it() -> None:
    with pytest.raises(ProviderError, match="malformed stream chunk"):
        feed("{not json")


def test_other_choices_ignored() -> None:
    parts = feed(
        {"choices": [{"index": 1, "delta": {"content": "no"}}]},
        ch({"content": "yes"}),
        ch({}, "stop"),
    )
    assert parts == [TextDelta("yes"), Finish("stop")]


def test_encode_request_round_trips_conversation() -> None:
    request = ModelRequest(
        system="sys",
        messages=(
            UserMessage(text="hi"),
            AssistantMessage(text="", tool_calls=(ToolCall(id="c1", name="f", arguments=""),)),
            ToolResultMessage(tool_call_id="c1", name="f", content="r"),
        ),
        tools=(ToolSpec(name="f", description="d", parameters={"type": "object"}),),
    )
    body = encode_request(request, model="m", params={"temperature": 0})
    assert body["messages"] == [
        {"role": "system", "content": "sys"},
        {"role": "user", "content": "hi"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "r"},
    ]
    assert body["stream"] is True and body["stream_options"] == {"include_usage": True}
    assert body["tools"][0]["function"]["name"] == "f" and body["temperature"] == 0


def test_final_chunk_repeating_the_full_text_adds_only_the_new_suffix() -> None:
    parts = feed(
        ch({"content": "Hello"}),
        ch({"content": " wor"}),
        ch({"content": "Hello world"}, finish="stop"),  # RAGFlow-style full resend
        "[DONE]",
    )
    assert parts == [TextDelta("Hello"), TextDelta(" wor"), TextDelta("ld"), Finish("stop")]
    exact = feed(ch({"content": "Hi"}), ch({"content": "Hi"}, finish="stop"))
    assert exact == [TextDelta("Hi"), Finish("stop")]


def test_full_message_object_in_stream_is_ignored() -> None:
    parts = feed(
        ch({"content": "ok"}),
        {
            "choices": [
                {"index": 0, "delta": {}, "message": {"content": "ok"}, "finish_reason": "stop"}
            ]
        },
    )
    assert parts == [TextDelta("ok"), Finish("stop")]


@pytest.mark.parametrize("name", sorted(p.name for p in FIXTURES.glob("openai_chat_*.sse")))
@given(data=st.data())
def test_normalized_stream_ignores_chunk_boundaries(name: str, data: st.DataObject) -> None:
    raw = (FIXTURES / name).read_bytes()
    cuts = sorted(data.draw(st.lists(st.integers(0, len(raw)), max_size=30)))

    def run(points: list[int]) -> list[StreamPart] | str:
        decoder, norm = SseDecoder(), OpenAIChatNormalizer()
        parts: list[StreamPart] = []
        last = 0
        try:
            for cut in [*points, len(raw)]:
                for event in decoder.feed(raw[last:cut]):
                    parts += norm.feed(event.data)
                last = cut
            return parts + norm.end()
        except ProviderError as exc:
            return f"error: {exc}"

    assert run(cuts) == run([])
