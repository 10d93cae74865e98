"""Provider quirks end to end: an agent over the fake provider serving fixtures."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import trio

from orchestrator.core.events import Event, EventType
from orchestrator.runtime.engine import Orchestrator
from tests.fakes.provider_server import FakeOpenAI, Reply, serve_fake_openai
from tests.helpers import collect, of_type, write_config

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "sse"
ANTHROPIC_TEXT = (FIXTURES / "anthropic_text.sse").read_bytes()
RESPONSES_TEXT = b"".join(
    f"event: {kind}\ndata: {data}\n\n".encode()
    for kind, data in [
        ("response.output_text.delta", '{"type":"response.output_text.delta","delta":"ok"}'),
        (
            "response.completed",
            '{"type":"response.completed","response":{"usage":{"input_tokens":3,'
            '"output_tokens":1}}}',
        ),
    ]
)


async def run_replies(
    tmp_path: Path, api: str, replies: list[bytes], **model: Any
) -> tuple[list[Event], FakeOpenAI]:
    """One agent whose model answers with these recordings, one per call, in order."""
    queue = list(replies)

    def brain(role: str, messages: list[dict[str, Any]], body: dict[str, Any]) -> Reply:
        return Reply(raw=[queue.pop(0)])

    async with trio.open_nursery() as nursery:
        fake = await serve_fake_openai(nursery, brain, pause=0.0)
        agent = {"description": "d", "instructions": "ROLE: q", "model": "m", "max_turns": 3}
        models = {
            "default": {"provider": "scripted"},
            "m": {"provider": api, "base_url": fake.base_url, "retry_base_delay": 0, **model},
        }
        config = write_config(tmp_path, {"quirky": agent}, models=models)
        async with Orchestrator.open(config) as orch:
            events = await collect(orch, "quirky", "go")
        nursery.cancel_scope.cancel()
    return events, fake


async def test_server_tools_show_as_server_events_and_the_answer_is_kept(
    tmp_path: Path,
) -> None:
    """Regression: a web search run by Anthropic was taken for a client tool call —
    an "unknown tool" result, an extra model call, and the turn's answer lost."""
    events, fake = await run_replies(
        tmp_path, "anthropic", [(FIXTURES / "anthropic_server_tool.sse").read_bytes()]
    )
    assert len(fake.requests) == 1
    (call,) = of_type(events, EventType.TOOL_CALL)
    (result,) = of_type(events, EventType.TOOL_RESULT)
    assert call.data == {
        "toolCallId": "srvtoolu_1",
        "name": "web_search",
        "args": {"query": "trio release"},
        "server": True,
    }
    assert result.data["server"] is True and result.data["toolCallId"] == "srvtoolu_1"
    assert "Trio 0.35" in result.data["content"] and not result.data["isError"]
    (answer,) = of_type(events, EventType.AGENT_RESULT)
    assert answer.data["text"] == "Searching. Trio 0.35 is out."
    last = next(e for e in of_type(events, EventType.REASONING) if e.last)
    assert last.data["toolCalls"] == [] and last.data["finishReason"] == "end_turn"


async def test_pause_turn_sends_the_turn_back_and_goes_on(tmp_path: Path) -> None:
    events, fake = await run_replies(
        tmp_path,
        "anthropic",
        [(FIXTURES / "anthropic_pause_turn.sse").read_bytes(), ANTHROPIC_TEXT],
    )
    assert len(fake.requests) == 2
    sent_back = fake.requests[1]["messages"][-1]
    assert sent_back["role"] == "assistant"
    assert sent_back["content"][0] == {
        "type": "server_tool_use",
        "id": "srvtoolu_9",
        "name": "web_search",
        "input": {"query": "long research"},
    }
    (answer,) = of_type(events, EventType.AGENT_RESULT)
    assert answer.data["text"] == "Hello!"


async def test_a_nested_rate_limit_error_is_retried(tmp_path: Path) -> None:
    """Regression: `{type: error, error: {code: rate_limit_exceeded}}` had no code, no
    message, and was never retried."""
    nested = (FIXTURES / "openai_responses_nested_error.sse").read_bytes()
    events, fake = await run_replies(tmp_path, "openai-responses", [nested, RESPONSES_TEXT])
    assert len(fake.requests) == 2
    (answer,) = of_type(events, EventType.AGENT_RESULT)
    assert answer.data["text"] == "ok"


async def test_a_refusal_ends_the_turn_visibly(tmp_path: Path) -> None:
    events, _ = await run_replies(
        tmp_path, "anthropic", [(FIXTURES / "anthropic_refusal.sse").read_bytes()]
    )
    last = next(e for e in of_type(events, EventType.REASONING) if e.last)
    assert last.data["finishReason"] == "refusal" and last.data["text"] == ""


async def test_deltas_read_together_with_an_error_still_reach_the_agent(tmp_path: Path) -> None:
    """Regression (parts batched per network read): an Anthropic `overloaded_error`
    arriving in the same read as the text before it lost that text, because the
    normalizer raised before the read's parts were handed over."""
    recording = (FIXTURES / "anthropic_overloaded_midstream.sse").read_bytes()
    events, _ = await run_replies(tmp_path, "anthropic", [recording], max_retries=0)
    deltas = [e.data["delta"] for e in of_type(events, EventType.REASONING) if "delta" in e.data]
    assert deltas == ["Par"]
    (error,) = of_type(events, EventType.AGENT_ERROR)
    assert error.data["errorType"] == "provider_error" and "Overloaded" in error.data["message"]
