"""Compaction's pure part: where a conversation may be cut (never between a call and its
result, never a running background call), sizes, the summarizer's transcript, and the
provider errors that say a prompt is too long."""

from __future__ import annotations

import json

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from agents.core.compaction import (
    MAX_MESSAGE_CHARS,
    ContextMeter,
    estimate_messages,
    overflow_of,
    plan_cut,
    summary_message,
    transcript,
)
from agents.core.messages import (
    AssistantMessage,
    Message,
    ToolCall,
    ToolResultMessage,
    UserMessage,
)
from agents.errors import ProviderError
from agents.providers.http import error_type_of


def turn(n: int, calls: int = 1) -> list[Message]:
    ids = [f"c{n}-{i}" for i in range(calls)]
    message = AssistantMessage(
        text=f"turn {n}", tool_calls=tuple(ToolCall(id=i, name="t", arguments="{}") for i in ids)
    )
    return [message, *(ToolResultMessage(tool_call_id=i, name="t", content=f"r{i}") for i in ids)]


def conversation(turns: int) -> list[Message]:
    messages: list[Message] = [UserMessage(text="the task")]
    for n in range(turns):
        messages += turn(n)
    return messages


def test_the_last_turns_stay_and_the_task_always_does() -> None:
    messages = conversation(4)
    cut = plan_cut(messages, keep_last_turns=2)
    assert cut is not None and cut.turns == 2
    assert messages[cut.at] == messages[5]  # the third turn's assistant message
    assert plan_cut(conversation(2), keep_last_turns=2) is None  # nothing older to summarize
    everything = plan_cut(messages, keep_last_turns=0)
    assert everything is not None and everything.at == len(messages) and everything.turns == 4


def test_messages_from_outside_after_the_cut_stay() -> None:
    messages = [*conversation(3), UserMessage(text="a message sent in")]
    cut = plan_cut(messages, keep_last_turns=0)
    assert cut is not None and messages[cut.at :] == [UserMessage(text="a message sent in")]


def test_a_running_background_call_is_never_summarized_away() -> None:
    messages = conversation(5)
    cut = plan_cut(messages, keep_last_turns=1, protected=frozenset({"c1-0"}))
    assert cut is not None and cut.at == 3 and cut.turns == 1  # only turn 0 goes
    assert plan_cut(messages, 1, protected=frozenset({"c0-0"})) is None


def test_a_summary_counts_the_turns_it_stands_for() -> None:
    messages: list[Message] = [UserMessage(text="task"), summary_message("notes", 7)]
    for n in range(3):
        messages += turn(n)
    cut = plan_cut(messages, keep_last_turns=1)
    assert cut is not None and cut.turns == 7 + 2


@given(
    st.lists(
        st.one_of(st.integers(min_value=0, max_value=3), st.just(-1)), min_size=0, max_size=12
    ),
    st.integers(min_value=0, max_value=4),
)
def test_a_cut_never_splits_a_call_from_its_result(shape: list[int], keep: int) -> None:
    """Any conversation (turns of 0-3 calls, messages sent in between): the cut is at a
    turn boundary, and every result sits on the same side as its call."""
    messages: list[Message] = [UserMessage(text="task")]
    for n, calls in enumerate(shape):
        messages += [UserMessage(text="sent in")] if calls < 0 else turn(n, calls)
    cut = plan_cut(messages, keep)
    if cut is None:
        return
    assert 1 < cut.at <= len(messages)
    older, kept = messages[1 : cut.at], messages[cut.at :]
    calls_older = {c.id for m in older if isinstance(m, AssistantMessage) for c in m.tool_calls}
    for m in older:
        if isinstance(m, ToolResultMessage):
            assert m.tool_call_id in calls_older
    for m in kept:
        if isinstance(m, ToolResultMessage):
            assert m.tool_call_id not in calls_older
    assert not kept or not isinstance(kept[0], ToolResultMessage)
    assert cut.turns == sum(isinstance(m, AssistantMessage) for m in older)


def test_sizes_use_the_providers_count_and_estimate_the_rest() -> None:
    messages = conversation(2)
    meter = ContextMeter(fixed=100)
    assert meter.size(messages) == 100 + estimate_messages(messages)
    meter.turn_ended(input_tokens=1000, output_tokens=50, length=len(messages))
    messages.append(UserMessage(text="x" * 400))
    assert meter.size(messages) == 1050 + 4 + 100


@given(
    counted=st.integers(min_value=1, max_value=100_000),
    turns=st.integers(min_value=2, max_value=8),
    keep=st.integers(min_value=0, max_value=2),
    summary=st.text(max_size=400),
)
def test_a_compaction_is_measured_in_the_scale_it_started_in(
    counted: int, turns: int, keep: int, summary: str
) -> None:
    """Regression: `afterTokens` (an estimate) came out above `beforeTokens` (the
    provider's count, in words for the scripted model): 454 > 270."""
    messages = conversation(turns)
    meter = ContextMeter(fixed=100)
    meter.turn_ended(input_tokens=counted, output_tokens=0, length=len(messages))
    before = meter.size(messages)
    cut = plan_cut(messages, keep)
    assume(cut is not None)
    assert cut is not None
    after_messages = [messages[0], summary_message(summary, cut.turns), *messages[cut.at :]]
    shrank = estimate_messages(after_messages) <= estimate_messages(messages)
    after = meter.rewritten(messages, after_messages)
    assert after >= 1 and (after <= before or not shrank)
    assert meter.size(after_messages) == after  # later sizes build on it
    more = [*after_messages, UserMessage(text="x" * 400)]
    assert meter.size(more) == after + estimate_messages(more[-1:])


def test_the_transcript_says_who_said_what_and_is_bounded() -> None:
    messages: list[Message] = [
        summary_message("old notes", 3),
        *turn(0),
        ToolResultMessage(tool_call_id="x", name="read", content="y" * 50_000, is_error=True),
    ]
    text = transcript(messages)
    assert "[earlier summary]" in text and "[assistant] turn 0" in text
    assert "[assistant calls t] {}" in text and "[tool error of read]" in text
    assert "characters left out" in text and len(text) < MAX_MESSAGE_CHARS + 2000
    assert len(transcript(messages, max_chars=1000)) <= 1000 + 60


def error(message: str, **kw: object) -> ProviderError:
    return ProviderError(message, provider="p", **kw)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("exc", "limit", "actual"),
    [
        (
            error(
                "openai: HTTP 400: This model's maximum context length is 128000 tokens. "
                "However, your messages resulted in 130532 tokens.",
                status=400,
                error_type="context_length_exceeded",
            ),
            128000,
            130532,
        ),
        (
            error(
                "anthropic: HTTP 400: prompt is too long: 208310 tokens > 200000 maximum",
                status=400,
                error_type="invalid_request_error",
            ),
            200000,
            208310,
        ),
        (
            error(
                "openai-responses: response failed (context_length_exceeded): Your input "
                "exceeds the context window of this model.",
                error_type="context_length_exceeded",
            ),
            None,
            None,
        ),
        (
            error("anthropic: HTTP 413: too big", status=413, error_type="request_too_large"),
            None,
            None,
        ),
    ],
)
def test_prompt_too_long_in_each_providers_words(
    exc: ProviderError, limit: int | None, actual: int | None
) -> None:
    found = overflow_of(exc)
    assert found is not None and (found.limit, found.actual) == (limit, actual)
    if limit and actual:
        assert found.describe() == f"{actual - limit} tokens over ({actual} > {limit})"


def test_other_errors_are_not_overflows() -> None:
    assert overflow_of(error("HTTP 429: rate limited", status=429)) is None
    assert overflow_of(error("HTTP 400: max_tokens: 10000 > 4096", status=400)) is None
    assert overflow_of(error("stream error", error_type="server_error")) is None


def test_error_bodies_give_the_providers_code() -> None:
    openai = {
        "error": {
            "message": "m",
            "type": "invalid_request_error",
            "code": "context_length_exceeded",
        }
    }
    anthropic = {"type": "error", "error": {"type": "request_too_large", "message": "m"}}
    assert error_type_of(json.dumps(openai).encode()) == "context_length_exceeded"
    assert error_type_of(json.dumps(anthropic).encode()) == "request_too_large"
    assert error_type_of(b"<html>bad gateway</html>") is None
    assert error_type_of(b'{"error": "plain"}') is None
