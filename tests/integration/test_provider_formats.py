"""The three-level tree through a fake server in each provider's wire format:
the same tree, the same events, a 429 that succeeds on retry, a stream that fails
midway, signed thinking sent back verbatim, spawn arguments visible while streaming."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest
import trio

from orchestrator.core.events import Event, EventType
from orchestrator.runtime.engine import Orchestrator
from tests.fakes.provider_server import Brain, FakeOpenAI, Reply, serve_fake_openai
from tests.helpers import collect, of_type, write_config
from tests.integration.test_openai_tree import agents, tree_brain

FIXTURES_SSE = Path(__file__).resolve().parent.parent / "fixtures" / "sse"

PROVIDERS = ["openai", "openai-responses", "anthropic"]
FORMAT = {"openai": "openai", "openai-responses": "responses", "anthropic": "anthropic"}


async def run_tree(
    tmp_path: Path, provider: str, brain: Brain = tree_brain
) -> tuple[list[Event], FakeOpenAI]:
    async with trio.open_nursery() as nursery:
        fake = await serve_fake_openai(nursery, brain)
        config = write_config(
            tmp_path,
            agents(),
            models={
                "default": {
                    "provider": provider,
                    "base_url": fake.base_url,
                    "model": "fake-model",
                    "retry_base_delay": 0.01,
                }
            },
        )
        async with Orchestrator.open(config) as orch:
            events = await collect(orch, "planner", "the question")
        nursery.cancel_scope.cancel()
    return events, fake


@pytest.mark.parametrize("provider", PROVIDERS)
async def test_same_tree_in_every_format(tmp_path: Path, provider: str) -> None:
    events, fake = await run_tree(tmp_path, provider)
    assert set(fake.formats) == {FORMAT[provider]}
    assert events[-1].data["status"] == "completed"
    assert (
        "alpha reviewed: critique of review alpha: looks fine overall" in events[-1].data["result"]
    )
    assert [e.seq for e in events] == list(range(1, len(events) + 1))
    started = of_type(events, EventType.AGENT_STARTED)
    assert sorted((e.source.depth, e.source.agent_id) for e in started if e.source) == [
        (1, "researcher"),
        (1, "researcher"),
        (2, "critic"),
        (2, "critic"),
    ]
    turns: dict[str | None, list[str]] = {}
    for e in of_type(events, EventType.REASONING):
        key = e.source.agent_key if e.source else None
        if e.last:
            assert "".join(turns.pop(key, [])) == e.data["text"]
        elif "delta" in e.data:
            turns.setdefault(key, []).append(e.data["delta"])
    assert events[-1].data["usage"] == {"inputTokens": 80, "outputTokens": 40}
    root_result = next(e for e in of_type(events, EventType.AGENT_RESULT) if e.source is None)
    assert root_result.data["usage"] == {"inputTokens": 20, "outputTokens": 10}
    assert root_result.data["subtreeUsage"] == {"inputTokens": 80, "outputTokens": 40}


@pytest.mark.parametrize("provider", PROVIDERS)
async def test_429_then_success_is_retried(tmp_path: Path, provider: str) -> None:
    refused: set[str] = set()

    def brain(role: str, messages: list[dict[str, Any]], body: dict[str, Any]) -> Reply:
        task = [m for m in messages if m["role"] == "user"][-1]["content"]
        if role == "critic" and task not in refused:
            refused.add(task)
            return Reply(status=429, retry_after="0", error_body='{"error": "slow down"}')
        return tree_brain(role, messages, body)

    events, fake = await run_tree(tmp_path, provider, brain)
    assert len(fake.requests) == 10  # 8 turns + one refused request per critic
    assert not of_type(events, EventType.AGENT_ERROR)
    assert events[-1].data["status"] == "completed"
    assert "critique of review beta" in events[-1].data["result"]


@pytest.mark.parametrize("provider", PROVIDERS)
async def test_stream_failing_midway_is_an_agent_error_without_duplicates(
    tmp_path: Path, provider: str
) -> None:
    def brain(role: str, messages: list[dict[str, Any]], body: dict[str, Any]) -> Reply:
        if role == "critic":
            return Reply("half of a critique", fail_midway=True)
        return tree_brain(role, messages, body)

    events, fake = await run_tree(tmp_path, provider, brain)
    assert len(fake.requests) == 8  # output had gone out: no retry
    errors = of_type(events, EventType.AGENT_ERROR)
    assert len(errors) == 2
    for error in errors:
        assert error.source is not None and error.source.agent_id == "critic"
        assert (
            error.data["errorType"] == "provider_error"
            and "internal failure" in error.data["message"]
        )
        deltas = [
            e.data["delta"]
            for e in of_type(events, EventType.REASONING)
            if e.source and e.source.agent_key == error.source.agent_key and "delta" in e.data
        ]
        assert "".join(deltas) == "half of a critique"
    results = [
        e for e in of_type(events, EventType.TOOL_RESULT) if e.source and e.source.depth == 1
    ]
    assert all(r.data["isError"] and "internal failure" in r.data["content"] for r in results)
    assert events[-1].data["status"] == "completed"


async def test_anthropic_signed_thinking_goes_back_verbatim(tmp_path: Path) -> None:
    def brain(role: str, messages: list[dict[str, Any]], body: dict[str, Any]) -> Reply:
        reply = tree_brain(role, messages, body)
        if role == "researcher" and not any(m["role"] == "tool" for m in messages):
            reply.thinking = "weigh the sources"
        return reply

    events, fake = await run_tree(tmp_path, "anthropic", brain)
    thinking = [e for e in of_type(events, EventType.REASONING) if "thinkingDelta" in e.data]
    assert {e.data["thinkingDelta"] for e in thinking} == {"weigh the sources"}
    assert all("weigh" not in e.data.get("text", "") for e in of_type(events, EventType.REASONING))
    second_turns = [
        r
        for r in fake.requests
        if r["system"].startswith("ROLE: researcher") and len(r["messages"]) > 1
    ]
    assert len(second_turns) == 2
    for request in second_turns:
        assistant = request["messages"][1]
        assert assistant["role"] == "assistant"
        assert assistant["content"][0] == {
            "type": "thinking",
            "thinking": "weigh the sources",
            "signature": "sig:weigh the sources",
        }


@pytest.mark.parametrize("provider", PROVIDERS)
async def test_spawn_task_shows_before_the_call_completes(tmp_path: Path, provider: str) -> None:
    events, _ = await run_tree(tmp_path, provider)
    root = [e for e in events if e.source is None]
    deltas = [e for e in root if e.type == EventType.TOOL_CALL_DELTA and "fields" in e.data]
    assert deltas
    first_call = next(e for e in root if e.type == EventType.TOOL_CALL)
    early = [e for e in deltas if e.data["toolCallId"] == first_call.data["toolCallId"]]
    assert early[0].seq < first_call.seq
    # String fields arrive as pieces that concatenate to the value.
    agent_ids = [e.data["fields"]["$.agent_id"] for e in early if "$.agent_id" in e.data["fields"]]
    assert "".join(agent_ids) == "researcher"
    seen_task = [e.data["fields"]["$.task"] for e in early if "$.task" in e.data["fields"]]
    assert seen_task and "".join(seen_task) == "alpha"


@pytest.mark.parametrize("provider", PROVIDERS)
async def test_invalid_tool_arguments_go_back_to_the_model(tmp_path: Path, provider: str) -> None:
    def brain(role: str, messages: list[dict[str, Any]], body: dict[str, Any]) -> Reply:
        results = [m["content"] for m in messages if m["role"] == "tool"]
        if role == "planner" and not results:
            return Reply(
                "trying",
                calls=[("agent_spawn", {"agent_id": "critic", "task": "x"})],
                bad_args=True,
            )
        if role == "planner":
            return Reply("recovered from: " + results[0])
        return tree_brain(role, messages, body)

    events, fake = await run_tree(tmp_path, provider, brain)
    (result,) = of_type(events, EventType.TOOL_RESULT)
    assert result.data["isError"] and "invalid JSON arguments" in result.data["content"]
    (call,) = of_type(events, EventType.TOOL_CALL)
    assert isinstance(call.data["args"], str)  # the raw text, since it is not JSON
    assert not of_type(events, EventType.AGENT_STARTED)
    assert events[-1].data["status"] == "completed"
    assert events[-1].data["result"].startswith("recovered from: tool 'agent_spawn': invalid JSON")
    assert len(fake.requests) == 2


@pytest.mark.parametrize("provider", PROVIDERS)
async def test_read_timeout_per_model(tmp_path: Path, provider: str) -> None:
    def brain(role: str, messages: list[dict[str, Any]], body: dict[str, Any]) -> Reply:
        return Reply("", hang=True) if role == "critic" else tree_brain(role, messages, body)

    async with trio.open_nursery() as nursery:
        fake = await serve_fake_openai(nursery, brain)
        config = write_config(
            tmp_path,
            agents(critic_model="quick"),
            models={
                "default": {
                    "provider": provider,
                    "base_url": fake.base_url,
                    "model": "m",
                    "retry_base_delay": 0.01,
                },
                "quick": {
                    "provider": provider,
                    "base_url": fake.base_url,
                    "model": "m",
                    "read_timeout": 0.3,
                    "max_retries": 1,
                    "retry_base_delay": 0.01,
                },
            },
        )
        async with Orchestrator.open(config) as orch:
            with trio.fail_after(20):
                events = await collect(orch, "planner", "q")
        nursery.cancel_scope.cancel()
    errors = of_type(events, EventType.AGENT_ERROR)
    assert len(errors) == 2
    assert all(
        "timed out" in e.data["message"] and "after 1 retries" in e.data["message"] for e in errors
    )
    assert len(fake.requests) == 2 + 2 * 2 + 2 * 2  # each critic: first try + one retry
    assert events[-1].data["status"] == "completed"


async def test_an_injected_http_client_carries_the_provider_traffic(tmp_path: Path) -> None:
    """`Orchestrator.open(http_client=…)`: a MockTransport where a socket is not the point."""
    stream = (FIXTURES_SSE / "openai_chat_text.sse").read_bytes()
    seen: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(str(request.url))
        return httpx.Response(200, headers={"content-type": "text/event-stream"}, content=stream)

    config = write_config(
        tmp_path,
        {"solo": {"description": "d", "instructions": "i", "model": "mocked"}},
        models={
            "default": {"provider": "scripted"},
            "mocked": {"provider": "openai", "base_url": "http://model.test/v1"},
        },
    )
    async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as client:
        async with Orchestrator.open(config, http_client=client) as orch:
            result = await orch.call("solo", "hi")
        assert not client.is_closed  # the caller's client stays the caller's
    assert seen == ["http://model.test/v1/chat/completions"]
    assert result.status == "completed" and result.text == "Hello"
