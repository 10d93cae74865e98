"""Structured answers and fallback models against a fake provider speaking real SSE.

A `judge` child has an `output_schema`; its parent spawns it and gets its answer as
compact JSON. Its model is asked the native way (OpenAI `response_format`), by a
forced `final_answer` tool (Anthropic), or by instruction (`scripted`); a refused
answer is told what is wrong and asked again, up to `output_retries`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import trio

from orchestrator.core.events import Event, EventType
from orchestrator.runtime.engine import Orchestrator
from tests.fakes.provider_server import FakeOpenAI, Reply, serve_fake_openai
from tests.helpers import collect, of_type, write_config

VERDICT = {
    "type": "object",
    "properties": {
        "verdict": {"enum": ["pass", "fail"]},
        "score": {"type": "integer", "minimum": 0, "maximum": 10},
    },
    "required": ["verdict", "score"],
    "additionalProperties": False,
}


def agents(retries: int = 2, judge_model: str = "default") -> dict[str, dict[str, Any]]:
    return {
        "boss": {
            "description": "Asks the judge.",
            "instructions": "ROLE: boss\nAsk the judge.",
            "tools": ["agent_spawn"],
        },
        "judge": {
            "description": "Judges a draft.",
            "instructions": "ROLE: judge\nJudge the draft.",
            "model": judge_model,
            "output_schema": VERDICT,
            "output_retries": retries,
        },
    }


def boss_turn(messages: list[dict[str, Any]]) -> Reply:
    """Spawn the judge; then report what it said."""
    results = [m["content"] for m in messages if m["role"] == "tool"]
    if not results:
        return Reply(calls=[("agent_spawn", {"agent_id": "judge", "task": "the draft"})])
    return Reply(f"judge said: {results[0]}")


def model(fake: FakeOpenAI, provider: str, **extra: Any) -> dict[str, Any]:
    return {
        "provider": provider,
        "base_url": fake.base_url,
        "model": provider + "-model",
        "retry_base_delay": 0.01,
        **extra,
    }


async def run(
    tmp_path: Path, brain: Any, models: Any, retries: int = 2, judge_model: str = "default"
) -> tuple[list[Event], FakeOpenAI]:
    async with trio.open_nursery() as nursery:
        fake = await serve_fake_openai(nursery, brain)
        config = write_config(tmp_path, agents(retries, judge_model), models=models(fake))
        async with Orchestrator.open(config) as orch:
            events = await collect(orch, "boss", "judge it")
        nursery.cancel_scope.cancel()
    return events, fake


def judged(events: list[Event]) -> Event:
    (result,) = [
        e for e in of_type(events, EventType.AGENT_RESULT) if e.source and e.source.depth == 1
    ]
    return result


def boss_results(events: list[Event]) -> list[dict[str, Any]]:
    return [e.data for e in of_type(events, EventType.TOOL_RESULT) if e.source is None]


async def test_openai_native_schema_invalid_then_valid(tmp_path: Path) -> None:
    answers = iter(['{"verdict": "maybe", "score": 7}', '{"verdict": "pass", "score": 7}'])

    def brain(role: str, messages: list[dict[str, Any]], body: dict[str, Any]) -> Reply:
        if role == "boss":
            return boss_turn(messages)
        return Reply(next(answers))

    events, fake = await run(tmp_path, brain, lambda f: {"default": model(f, "openai")})
    judge_requests = [r for r in fake.requests if "ROLE: judge" in r["messages"][0]["content"]]
    assert len(judge_requests) == 2
    asked = judge_requests[0]["response_format"]
    assert asked == {
        "type": "json_schema",
        "json_schema": {"name": "final_answer", "schema": VERDICT, "strict": True},
    }
    told = judge_requests[1]["messages"][-1]
    assert told["role"] == "user" and "$.verdict" in told["content"]
    assert "'maybe' is not one of ['pass', 'fail']" in told["content"]
    result = judged(events)
    assert result.data["structured"] == {"verdict": "pass", "score": 7}
    assert result.data["text"] == '{"verdict":"pass","score":7}'
    (tool_result,) = boss_results(events)
    assert tool_result["content"] == '{"verdict":"pass","score":7}' and not tool_result["isError"]
    refusal = [e for e in of_type(events, EventType.USER_MESSAGE) if e.data.get("outputInvalid")]
    assert len(refusal) == 1 and refusal[0].data["from"] == "orchestrator"
    assert events[-1].data["status"] == "completed"


async def test_anthropic_forced_tool_invalid_then_valid(tmp_path: Path) -> None:
    answers = iter([{"verdict": "pass", "score": 11}, {"verdict": "fail", "score": 2}])

    def brain(role: str, messages: list[dict[str, Any]], body: dict[str, Any]) -> Reply:
        if role == "boss":
            return boss_turn(messages)
        return Reply(calls=[("final_answer", next(answers))])

    events, fake = await run(tmp_path, brain, lambda f: {"default": model(f, "anthropic")})
    judge_requests = [r for r in fake.requests if r["system"].startswith("ROLE: judge")]
    assert len(judge_requests) == 2
    first = judge_requests[0]
    assert first["tool_choice"] == {"type": "tool", "name": "final_answer"}
    assert [t["name"] for t in first["tools"]] == ["final_answer"]
    assert first["tools"][0]["input_schema"] == VERDICT
    refused = judge_requests[1]["messages"][-1]["content"][0]
    assert refused["type"] == "tool_result" and refused["is_error"] is True
    assert "$.score: 11 is greater than the maximum of 10" in refused["content"]
    result = judged(events)
    assert result.data["structured"] == {"verdict": "fail", "score": 2}
    (tool_result,) = boss_results(events)
    assert json.loads(tool_result["content"]) == {"verdict": "fail", "score": 2}
    assert events[-1].data["status"] == "completed"


async def test_never_valid_fails_with_the_violation_and_the_parent_goes_on(
    tmp_path: Path,
) -> None:
    def brain(role: str, messages: list[dict[str, Any]], body: dict[str, Any]) -> Reply:
        if role == "boss":
            return boss_turn(messages)
        return Reply('{"verdict": "pass"}')

    events, fake = await run(tmp_path, brain, lambda f: {"default": model(f, "openai")}, retries=1)
    judge_requests = [r for r in fake.requests if "ROLE: judge" in r["messages"][0]["content"]]
    assert len(judge_requests) == 2  # 1 + output_retries
    (error,) = [
        e for e in of_type(events, EventType.AGENT_ERROR) if e.source and e.source.depth == 1
    ]
    assert error.data["errorType"] == "output_invalid"
    assert "after 2 tries" in error.data["message"]
    assert "$: 'score' is a required property" in error.data["message"]
    (tool_result,) = boss_results(events)
    assert tool_result["isError"] and "'score' is a required property" in tool_result["content"]
    assert events[-1].data["status"] == "completed"  # the boss went on


async def test_fallback_on_529_and_429(tmp_path: Path) -> None:
    """The judge's Anthropic model is overloaded (529); its first fallback is rate
    limited (429, no retries left); the second answers, and keeps the later turns."""

    def brain(role: str, messages: list[dict[str, Any]], body: dict[str, Any]) -> Reply:
        if role == "boss":
            return boss_turn(messages)
        if body["model"] == "anthropic-model":
            return Reply(
                status=529,
                error_body='{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}',
            )
        if body["model"] == "openai-model":
            return Reply(
                status=429,
                error_body='{"error":{"message":"slow down","type":"rate_limit_exceeded"}}',
            )
        return Reply('{"verdict": "pass", "score": 3}')

    def models(fake: FakeOpenAI) -> dict[str, Any]:
        return {
            "default": model(fake, "openai", model="boss-model"),
            "claude": model(fake, "anthropic", max_retries=0),
            "gpt": model(fake, "openai", max_retries=0),
            "backup": model(fake, "openai-responses", model="backup-model"),
        }

    async with trio.open_nursery() as nursery:
        fake = await serve_fake_openai(nursery, brain)
        spec = agents(judge_model="claude")
        spec["judge"]["fallback_models"] = ["gpt", "backup"]
        config = write_config(tmp_path, spec, models=models(fake))
        async with Orchestrator.open(config) as orch:
            events = await collect(orch, "boss", "judge it")
        nursery.cancel_scope.cancel()
    falls = [e.data for e in of_type(events, EventType.MODEL_FALLBACK)]
    assert [(f["from"], f["to"], f["reason"]) for f in falls] == [
        ("claude", "gpt", "overloaded"),
        ("gpt", "backup", "rate_limit"),
    ]
    assert "529" in falls[0]["error"] and "429" in falls[1]["error"]
    turns = [
        e.data
        for e in of_type(events, EventType.REASONING)
        if e.last and e.source and e.source.depth == 1
    ]
    assert [t["model"] for t in turns] == ["backup"]
    assert judged(events).data["structured"] == {"verdict": "pass", "score": 3}
    assert events[-1].data["status"] == "completed"
