"""Anthropic and OpenAI Responses normalizers (sans-I/O), monotonic append, retry policy."""

from __future__ import annotations

import json
from collections.abc import AsyncGenerator
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing
from hypothesis import given
from hypothesis import strategies as st

from agents.core.messages import (
    AssistantMessage,
    Finish,
    ModelRequest,
    StreamPart,
    TextDelta,
    ThinkingBlock,
    ThinkingDelta,
    ToolCall,
    ToolCallArgs,
    ToolResultMessage,
    UsageReport,
    UserMessage,
)
from agents.core.monotonic import MonotonicText
from agents.core.sse import SseDecoder
from agents.core.turn import TurnAssembler
from agents.core.wire import anthropic, openai_responses
from agents.errors import ProviderError, StreamTruncated
from agents.providers.http import classify_status, parse_retry_after
from agents.providers.retry import RetryingProvider, backoff_delay

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "sse"


def run_anthropic(raw: bytes, cuts: list[int] | None = None) -> list[StreamPart]:
    decoder, norm = SseDecoder(), anthropic.AnthropicNormalizer()
    parts: list[StreamPart] = []
    last = 0
    for cut in [*sorted(cuts or []), len(raw)]:
        for event in decoder.feed(raw[last:cut]):
            parts += norm.feed(event.event, event.data)
        last = cut
    return parts + norm.end()


def run_responses(raw: bytes, cuts: list[int] | None = None) -> list[StreamPart]:
    decoder, norm = SseDecoder(), openai_responses.ResponsesNormalizer()
    parts: list[StreamPart] = []
    last = 0
    for cut in [*sorted(cuts or []), len(raw)]:
        for event in decoder.feed(raw[last:cut]):
            parts += norm.feed(event.data)
        last = cut
    return parts + norm.end()


def assemble(parts: list[StreamPart]) -> AssistantMessage:
    turn = TurnAssembler()
    for part in parts:
        turn.apply(part)
    return turn.message()


def sse(event: str, data: dict[str, Any]) -> bytes:
    return f"event: {event}\ndata: {json.dumps({'type': event, **data})}\n\n".encode()


# -- anthropic ---------------------------------------------------------------------


def test_anthropic_text_fixture() -> None:
    parts = run_anthropic((FIXTURES / "anthropic_text.sse").read_bytes())
    assert parts == [TextDelta("Hello"), TextDelta("!"), Finish("end_turn"), UsageReport(25, 15)]


def test_anthropic_thinking_and_tool_fixture() -> None:
    parts = run_anthropic((FIXTURES / "anthropic_thinking_tool.sse").read_bytes())
    message = assemble(parts)
    assert message.thinking == "Need the weather tool."
    assert message.thinking_blocks == (
        ThinkingBlock(thinking="Need the weather tool.", signature="EqQBCgIYAhIM..."),
    )
    assert message.tool_calls == (
        ToolCall(id="toolu_01", name="get_weather", arguments='{"location": "San Francisco, CA"}'),
    )
    assert message.text == ""
    assert parts[-2:] == [Finish("tool_use"), UsageReport(472, 89)]


def test_anthropic_overloaded_midstream_is_retryable_error() -> None:
    with pytest.raises(ProviderError, match="overloaded_error") as info:
        run_anthropic((FIXTURES / "anthropic_overloaded_midstream.sse").read_bytes())
    assert info.value.retryable and info.value.error_type == "overloaded_error"


@pytest.mark.parametrize("name", ["anthropic_text.sse", "anthropic_thinking_tool.sse"])
@given(data=st.data())
def test_anthropic_ignores_chunk_boundaries(name: str, data: st.DataObject) -> None:
    raw = (FIXTURES / name).read_bytes()
    cuts = data.draw(st.lists(st.integers(0, len(raw)), max_size=30))
    assert run_anthropic(raw, cuts) == run_anthropic(raw)


def test_anthropic_truncated_and_unknown_events() -> None:
    raw = sse("message_start", {"message": {"usage": {"input_tokens": 3, "output_tokens": 1}}})
    raw += sse("content_block_start", {"index": 0, "content_block": {"type": "text", "text": ""}})
    raw += sse("some_future_event", {"x": 1})
    raw += sse("content_block_delta", {"index": 0, "delta": {"type": "text_delta", "text": "Par"}})
    with pytest.raises(StreamTruncated, match="before message_stop \\(after partial output\\)"):
        run_anthropic(raw)


def test_anthropic_redacted_thinking_kept() -> None:
    raw = sse(
        "content_block_start",
        {"index": 0, "content_block": {"type": "redacted_thinking", "data": "opaque"}},
    )
    raw += sse("content_block_stop", {"index": 0})
    raw += sse(
        "message_delta", {"delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 4}}
    )
    raw += sse("message_stop", {})
    assert assemble(run_anthropic(raw)).thinking_blocks == (ThinkingBlock(redacted="opaque"),)


def test_anthropic_request_sends_signed_thinking_back_verbatim() -> None:
    request = ModelRequest(
        system="sys",
        messages=(
            UserMessage(text="hi"),
            AssistantMessage(
                text="checking",
                tool_calls=(ToolCall(id="toolu_1", name="f", arguments='{"a": 1}'),),
                thinking_blocks=(ThinkingBlock(thinking="t", signature="sig=="),),
            ),
            ToolResultMessage(tool_call_id="toolu_1", name="f", content="r", is_error=True),
            UserMessage(text="and this"),
        ),
    )
    body = anthropic.encode_request(request, model="claude-x")
    assert body["system"] == "sys" and body["stream"] is True and body["max_tokens"] == 4096
    assert body["messages"] == [
        {"role": "user", "content": [{"type": "text", "text": "hi"}]},
        {
            "role": "assistant",
            "content": [
                {"type": "thinking", "thinking": "t", "signature": "sig=="},
                {"type": "text", "text": "checking"},
                {"type": "tool_use", "id": "toolu_1", "name": "f", "input": {"a": 1}},
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "toolu_1", "content": "r", "is_error": True},
                {"type": "text", "text": "and this"},
            ],
        },
    ]


# -- openai responses ------------------------------------------------------------------


def test_responses_tool_fixture() -> None:
    parts = run_responses((FIXTURES / "openai_responses_tool.sse").read_bytes())
    message = assemble(parts)
    assert message.tool_calls == (
        ToolCall(id="call_1", name="get_weather", arguments='{"city":"Paris"}'),
    )
    assert parts[-2:] == [Finish("stop"), UsageReport(12, 9)]
    # `.done` events resend the whole arguments: nothing is emitted twice.
    args = "".join(p.delta for p in parts if isinstance(p, ToolCallArgs))
    assert args == '{"city":"Paris"}'


@given(data=st.data())
def test_responses_ignores_chunk_boundaries(data: st.DataObject) -> None:
    raw = (FIXTURES / "openai_responses_tool.sse").read_bytes()
    cuts = data.draw(st.lists(st.integers(0, len(raw)), max_size=30))
    assert run_responses(raw, cuts) == run_responses(raw)


def r_event(kind: str, **data: Any) -> bytes:
    return f"event: {kind}\ndata: {json.dumps({'type': kind, **data})}\n\n".encode()


def test_responses_text_done_emits_only_new_suffix() -> None:
    raw = r_event("response.output_item.added", item={"type": "message", "id": "m1"})
    raw += r_event("response.output_text.delta", item_id="m1", delta="Hel")
    raw += r_event("response.output_text.delta", item_id="m1", delta="lo")
    raw += r_event("response.output_text.done", item_id="m1", text="Hello world")
    raw += r_event("response.reasoning_summary_text.delta", item_id="r1", delta="hmm")
    raw += r_event(
        "response.completed",
        response={"status": "completed", "usage": {"input_tokens": 1, "output_tokens": 2}},
    )
    parts = run_responses(raw)
    assert parts == [
        TextDelta("Hel"),
        TextDelta("lo"),
        TextDelta(" world"),
        ThinkingDelta("hmm"),
        Finish("stop"),
        UsageReport(1, 2),
    ]


def test_responses_args_only_in_done_and_failures() -> None:
    raw = r_event(
        "response.output_item.added",
        item={"type": "function_call", "id": "fc", "call_id": "c", "name": "f"},
    )
    raw += r_event(
        "response.output_item.done",
        item={
            "type": "function_call",
            "id": "fc",
            "call_id": "c",
            "name": "f",
            "arguments": '{"x":1}',
        },
    )
    raw += r_event(
        "response.incomplete", response={"incomplete_details": {"reason": "max_output_tokens"}}
    )
    parts = run_responses(raw)
    assert assemble(parts).tool_calls == (ToolCall(id="c", name="f", arguments='{"x":1}'),)
    assert Finish("max_output_tokens") in parts
    failed = r_event(
        "response.failed", response={"error": {"code": "server_error", "message": "boom"}}
    )
    with pytest.raises(ProviderError, match="server_error") as info:
        run_responses(failed)
    assert info.value.retryable
    with pytest.raises(StreamTruncated):
        run_responses(r_event("response.created", response={}))


def test_responses_request_shape() -> None:
    request = ModelRequest(
        system="sys",
        messages=(
            UserMessage(text="hi"),
            AssistantMessage(text="", tool_calls=(ToolCall(id="c1", name="f", arguments=""),)),
            ToolResultMessage(tool_call_id="c1", name="f", content="r"),
        ),
    )
    body = openai_responses.encode_request(request, model="gpt")
    assert body["instructions"] == "sys" and body["stream"] is True and body["store"] is False
    assert body["input"] == [
        {"role": "user", "content": "hi"},
        {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c1", "output": "r"},
    ]


# -- monotonic append -------------------------------------------------------------------


@given(text=st.text(max_size=30), data=st.data())
def test_monotonic_resends_never_duplicate(text: str, data: st.DataObject) -> None:
    tracker = MonotonicText()
    out = []
    pos = 0
    while pos < len(text):
        step = data.draw(st.integers(1, len(text) - pos))
        if data.draw(st.booleans()):
            out.append(tracker.append(text[pos : pos + step]))
        else:
            out.append(tracker.full(text[: pos + step]))
        pos += step
        if data.draw(st.booleans()):  # a resend of everything so far adds nothing
            assert tracker.full(text[:pos]) == ""
    assert "".join(out) == text == tracker.text


def test_monotonic_ignores_divergent_resend() -> None:
    tracker = MonotonicText()
    tracker.append("Hello")
    assert tracker.full("Help me") == ""
    assert tracker.full("Hello there") == " there"


# -- retry --------------------------------------------------------------------------


def test_retry_after_and_status_classes() -> None:
    assert parse_retry_after("3") == 3.0
    assert parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT", now=1445412470.0) == 10.0
    assert parse_retry_after("soon") is None and parse_retry_after(None) is None
    assert [classify_status(s) for s in (400, 401, 408, 429, 500, 503, 529)] == [
        False,
        False,
        True,
        True,
        True,
        True,
        True,
    ]
    assert backoff_delay(1, 0.5, None) == 0.5 and backoff_delay(3, 0.5, None) == 2.0
    assert backoff_delay(2, 0.5, 7.0) == 7.0 and backoff_delay(2, 0.5, 900.0) == 60.0


class FlakyProvider:
    kind = "flaky"

    def __init__(self, failures: list[ProviderError], fail_after_output: bool = False) -> None:
        self.failures = failures
        self.calls = 0
        self.fail_after_output = fail_after_output

    async def stream(self, request: ModelRequest) -> AsyncGenerator[list[StreamPart], None]:
        self.calls += 1
        if self.fail_after_output:
            yield [TextDelta("partial")]
        if self.failures:
            raise self.failures.pop(0)
        yield [TextDelta("ok")]
        yield [Finish("stop")]


REQUEST = ModelRequest(system="s", messages=(UserMessage(text="x"),))


async def collect(provider: RetryingProvider) -> list[StreamPart]:
    return [part async for batch in provider.stream(REQUEST) for part in batch]


async def test_retries_before_output_with_backoff(autojump_clock: trio.testing.MockClock) -> None:
    errors = [
        ProviderError("429", provider="p", status=429, retryable=True, retry_after=5),
        ProviderError("503", provider="p", status=503, retryable=True),
    ]
    inner = FlakyProvider(errors)
    provider = RetryingProvider(inner, max_retries=3, base_delay=1.0)
    start = trio.current_time()
    assert await collect(provider) == [TextDelta("ok"), Finish("stop")]
    assert inner.calls == 3 and provider.retries == 2
    assert trio.current_time() - start == pytest.approx(5 + 2)  # Retry-After, then 1 × 2^1


async def test_no_retry_after_output_or_when_not_retryable(
    autojump_clock: trio.testing.MockClock,
) -> None:
    inner = FlakyProvider(
        [ProviderError("boom", provider="p", retryable=True)], fail_after_output=True
    )
    with pytest.raises(ProviderError, match="boom"):
        await collect(RetryingProvider(inner, max_retries=3, base_delay=1.0))
    assert inner.calls == 1
    inner = FlakyProvider([ProviderError("401", provider="p", status=401)])
    with pytest.raises(ProviderError, match="401"):
        await collect(RetryingProvider(inner, max_retries=3, base_delay=1.0))
    assert inner.calls == 1


async def test_retries_are_bounded_and_cancellable(autojump_clock: trio.testing.MockClock) -> None:
    failures = [ProviderError("503", provider="p", retryable=True) for _ in range(5)]
    inner = FlakyProvider(failures)
    with pytest.raises(ProviderError, match=r"503 \(after 2 retries\)"):
        await collect(RetryingProvider(inner, max_retries=2, base_delay=1.0))
    assert inner.calls == 3
    inner = FlakyProvider([ProviderError("503", provider="p", retryable=True, retry_after=30)])
    with trio.move_on_after(10) as scope:
        await collect(RetryingProvider(inner, max_retries=2, base_delay=1.0))
    assert scope.cancelled_caught and inner.calls == 1
