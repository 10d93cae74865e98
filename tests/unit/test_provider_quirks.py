"""Quirks seen in real provider streams, on fixtures written here (tests/fixtures/sse/).

Each class of quirk the recorded streams showed (issue 9) and its neighbours from
the providers' docs and the widely used clients: typed content parts in Chat
Completions, server-run tools and `pause_turn`/`refusal` in Anthropic, nested
`error` events, rotating item ids, refusals, server tool items and
`response.incomplete` in Responses.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agents.core.messages import (
    AssistantMessage,
    Finish,
    ModelRequest,
    ServerToolCall,
    ServerToolResult,
    StreamPart,
    TextDelta,
    ThinkingDelta,
    ToolCall,
    UsageReport,
    UserMessage,
)
from agents.core.sse import SseDecoder
from agents.core.turn import TurnAssembler
from agents.core.wire import anthropic, openai_chat, openai_responses
from agents.errors import ProviderError

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "sse"
Normalizer = (
    openai_chat.OpenAIChatNormalizer
    | anthropic.AnthropicNormalizer
    | openai_responses.ResponsesNormalizer
)


def replay(fixture: str, cuts: list[int] | None = None) -> tuple[list[StreamPart], Normalizer]:
    raw = (FIXTURES / fixture).read_bytes()
    norm: Normalizer
    if fixture.startswith("anthropic"):
        norm = anthropic.AnthropicNormalizer()
    elif fixture.startswith("openai_responses"):
        norm = openai_responses.ResponsesNormalizer()
    else:
        norm = openai_chat.OpenAIChatNormalizer()
    decoder, parts, last = SseDecoder(), [], 0
    for cut in [*sorted(cuts or []), len(raw)]:
        for event in decoder.feed(raw[last:cut]):
            parts += norm.feed_event(event)
        last = cut
    return parts + norm.end(), norm


def assemble(parts: list[StreamPart]) -> AssistantMessage:
    turn = TurnAssembler()
    for part in parts:
        turn.apply(part)
    return turn.message()


def text_of(parts: list[StreamPart]) -> str:
    return "".join(p.text for p in parts if isinstance(p, TextDelta))


def thinking_of(parts: list[StreamPart]) -> str:
    return "".join(p.text for p in parts if isinstance(p, ThinkingDelta))


cuts = st.lists(st.integers(0, 6000), max_size=12)


@given(cuts=cuts)
def test_chat_content_as_typed_parts(cuts: list[int]) -> None:
    """Mistral's reasoning models: `content` is a list of thinking and text parts (a
    string before); `output_text` and `refusal` parts are text; an `image_url` part
    is counted, never silently dropped."""
    parts, norm = replay("openai_chat_content_parts.sse", cuts)
    assert thinking_of(parts) == "17*23: 340 + 51 = 391."
    assert text_of(parts) == "391 (no more)"
    assert parts[-1] == UsageReport(28, 9) and Finish("stop") in parts
    assert norm.ignored == {"content part 'image_url'": 1}


def test_chat_content_parts_helper_edge_cases() -> None:
    ignored: dict[str, int] = {}
    assert openai_chat.content_parts("plain", ignored) == [TextDelta("plain")]
    assert openai_chat.content_parts([{"type": "custom", "text": "kept"}], ignored) == [
        TextDelta("kept")
    ]
    assert openai_chat.content_parts([{"type": "reasoning", "summary": "why"}], ignored) == [
        ThinkingDelta("why")
    ]
    assert openai_chat.content_parts({"odd": 1}, ignored) == []
    assert openai_chat.content_parts(["bare string"], ignored) == []
    assert ignored == {"content of type dict": 1, "content part None": 1}


@given(cuts=cuts)
def test_anthropic_server_tools_are_shown_not_run(cuts: list[int]) -> None:
    """Web search run by Anthropic: a server call and its result, never a client call;
    the text of the same turn is kept; unknown block types are counted."""
    parts, norm = replay("anthropic_server_tool.sse", cuts)
    calls = [p for p in parts if isinstance(p, ServerToolCall)]
    results = [p for p in parts if isinstance(p, ServerToolResult)]
    assert [(c.id, c.name, c.input) for c in calls] == [
        ("srvtoolu_1", "web_search", {"query": "trio release"})
    ]
    assert [(r.tool_call_id, r.name, r.is_error) for r in results] == [
        ("srvtoolu_1", "web_search", False)
    ]
    assert results[0].content[0]["title"] == "Trio 0.35"
    message = assemble(parts)
    assert message.text == "Searching. Trio 0.35 is out."
    assert message.tool_calls == ()
    assert [b["type"] for b in message.server_blocks] == [
        "server_tool_use",
        "web_search_tool_result",
    ]
    assert message.server_blocks[0]["input"] == {"query": "trio release"}
    assert norm.ignored == {"content block 'fallback'": 1}
    assert UsageReport(20, 31) in parts


def test_server_blocks_go_back_verbatim_in_both_formats() -> None:
    parts, _ = replay("anthropic_server_tool.sse")
    message = assemble(parts)
    body = anthropic.encode_request(
        ModelRequest(system="s", messages=(UserMessage(text="q"), message)), model="m"
    )
    blocks = body["messages"][1]["content"]
    assert [b["type"] for b in blocks] == ["server_tool_use", "web_search_tool_result", "text"]
    assert blocks[1]["content"][0]["encrypted_content"] == "abc"
    parts, _ = replay("openai_responses_server_tool_incomplete.sse")
    message = assemble(parts)
    body = openai_responses.encode_request(
        ModelRequest(system="s", messages=(UserMessage(text="q"), message)), model="m"
    )
    assert body["input"][1] == {
        "id": "ws_1",
        "type": "web_search_call",
        "status": "completed",
        "action": {"type": "search", "query": "trio release"},
    }


@pytest.mark.parametrize(
    ("fixture", "reason", "text"),
    [("anthropic_pause_turn.sse", "pause_turn", ""), ("anthropic_refusal.sse", "refusal", "")],
)
def test_anthropic_stop_reasons_pass_through(fixture: str, reason: str, text: str) -> None:
    parts, _ = replay(fixture)
    assert Finish(reason) in parts and text_of(parts) == text


@given(cuts=cuts)
def test_responses_error_nested_under_error_is_read_and_retryable(cuts: list[int]) -> None:
    """`{type: "error", error: {type, code, message}}`: seen in two recordings."""
    with pytest.raises(ProviderError) as info:
        replay("openai_responses_nested_error.sse", cuts)
    error = info.value
    assert error.retryable and error.error_type == "rate_limit_exceeded"
    assert "Rate limit reached for requests per min" in str(error)


def test_responses_error_at_the_top_level_still_works() -> None:
    norm = openai_responses.ResponsesNormalizer()
    with pytest.raises(ProviderError, match=r"insufficient_quota\): no credits") as info:
        norm.feed('{"type":"error","code":"insufficient_quota","message":"no credits"}')
    assert not info.value.retryable


@given(cuts=cuts)
def test_responses_items_are_matched_by_output_index(cuts: list[int]) -> None:
    """GitHub Copilot sends a new item id on every event: the `.done` full text must not
    be emitted a second time, and argument deltas still reach their call."""
    parts, _ = replay("openai_responses_id_rotation.sse", cuts)
    message = assemble(parts)
    assert message.text == "Three r's."
    assert message.tool_calls == (ToolCall(id="call_9", name="count", arguments='{"letter":"r"}'),)
    assert parts[-1] == UsageReport(19, 7)


@given(cuts=cuts)
def test_responses_server_items_refusals_and_incomplete(cuts: list[int]) -> None:
    parts, norm = replay("openai_responses_server_tool_incomplete.sse", cuts)
    calls = [p for p in parts if isinstance(p, ServerToolCall)]
    results = [p for p in parts if isinstance(p, ServerToolResult)]
    assert [(c.id, c.name) for c in calls] == [("ws_1", "web_search")]
    assert calls[0].input == {"action": {"type": "search", "query": "trio release"}}
    assert [(r.tool_call_id, r.content, r.is_error) for r in results] == [
        ("ws_1", "completed", False)
    ]
    assert text_of(parts) == "I can't help with that."  # refusal delta, then its .done
    assert Finish("max_output_tokens") in parts and parts[-1] == UsageReport(30, 16)
    assert norm.ignored == {"output item 'shiny_new_item'": 1}


def test_chat_refusal_field_is_the_text() -> None:
    norm = openai_chat.OpenAIChatNormalizer()
    chunk = '{"choices":[{"index":0,"delta":{"content":null,"refusal":"%s"},"finish_reason":%s}]}'
    parts = norm.feed(chunk % ("I can't", "null")) + norm.feed(chunk % (" do that.", '"stop"'))
    assert text_of(parts) == "I can't do that." and Finish("stop") in parts
