"""Structured output's pure parts (agents/core/structured.py), the schema files beside a
subagent (agents/schema_files.py), the answer check (agents/runner/answer.py) and the
model chain's fallback decisions (agents/providers/fallback.py)."""

from __future__ import annotations

import json
from collections.abc import AsyncGenerator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agents.core.loop import AgentLoop, Fail, NextTurn, WaitQuiet
from agents.core.messages import ModelRequest, StreamPart, TextDelta
from agents.core.structured import (
    MAX_SCHEMA_BYTES,
    SchemaError,
    Violations,
    answer_tool_parameters,
    check_schema,
    compact,
    parse_answer,
    strict_compatible,
)
from agents.core.wire import anthropic, openai_chat, openai_responses
from agents.errors import ProviderError, SpecError
from agents.providers.fallback import ModelChain, fallback_reason
from agents.runner.answer import Accepted, AnswerCheck, Refused
from agents.schema_files import inline_file_refs
from agents.spec import load_specs

PERSON = {
    "type": "object",
    "properties": {
        "name": {"type": "string"},
        "age": {"type": "integer", "minimum": 0},
        "tags": {"type": "array", "items": {"type": "string"}},
    },
    "required": ["name", "age"],
    "additionalProperties": False,
}


# -- schemas ---------------------------------------------------------------------------


def test_a_bad_schema_is_refused_naming_where() -> None:
    with pytest.raises(SchemaError, match=r"^output_schema\.properties\.age\.type: "):
        check_schema(
            {"type": "object", "properties": {"age": {"type": "int"}}}, where="output_schema"
        )
    with pytest.raises(SchemaError, match="a JSON Schema object, not list"):
        check_schema([], where="output_schema")


def test_a_remote_ref_is_refused_and_an_inner_one_is_kept() -> None:
    with pytest.raises(SchemaError, match=r"\.properties\.x\.\$ref: 'https://e\.com/s\.json'"):
        check_schema(
            {"type": "object", "properties": {"x": {"$ref": "https://e.com/s.json"}}}, where="s"
        )
    inner = {"$defs": {"n": {"type": "integer"}}, "type": "array", "items": {"$ref": "#/$defs/n"}}
    assert check_schema(inner, where="s") == inner
    assert Violations(inner).of([1, "2"]) == ["$[1]: '2' is not of type 'integer'"]


def test_a_client_schema_may_not_carry_a_regular_expression() -> None:
    schema = {"type": "object", "properties": {"id": {"type": "string", "pattern": "^(a+)+$"}}}
    assert check_schema(schema, where="output_schema") == schema  # an operator's: allowed
    with pytest.raises(SchemaError, match=r"outputSchema\.properties\.id\.pattern: not allowed"):
        check_schema(schema, where="outputSchema", untrusted=True)


def test_a_schema_is_bounded_in_size_and_depth() -> None:
    big = {"type": "object", "description": "x" * MAX_SCHEMA_BYTES}
    with pytest.raises(SchemaError, match="bytes of JSON"):
        check_schema(big, where="s")
    deep: dict[str, Any] = {"type": "integer"}
    for _ in range(40):
        deep = {"type": "array", "items": deep}
    with pytest.raises(SchemaError, match="nested deeper than 32"):
        check_schema(deep, where="s")


def test_strict_mode_only_for_closed_objects_with_every_property_required() -> None:
    assert not strict_compatible(PERSON)  # `tags` is optional
    closed = {**PERSON, "required": ["name", "age", "tags"]}
    assert strict_compatible(closed)
    assert not strict_compatible({**closed, "additionalProperties": True})
    assert not strict_compatible({"type": "array", "items": {"type": "string"}})


def test_the_answer_tool_wraps_a_schema_that_is_not_an_object() -> None:
    assert answer_tool_parameters(PERSON) == (PERSON, False)
    params, wrapped = answer_tool_parameters({"type": "array"})
    assert wrapped and params["properties"] == {"value": {"type": "array"}}


# -- answers ---------------------------------------------------------------------------


def test_an_answer_is_read_as_json_fenced_or_not() -> None:
    assert parse_answer('  {"a": 1} ') == ({"a": 1}, None)
    assert parse_answer('```json\n{"a": 1}\n```') == ({"a": 1}, None)
    assert parse_answer("```\n[1, 2]\n```") == ([1, 2], None)
    value, problem = parse_answer("Sure! Here it is: {")
    assert value is None and problem is not None and problem.startswith("the answer is not JSON")
    assert parse_answer("   ")[1] == "the answer is empty: it must be a JSON value"


def test_violations_name_the_field_and_what_was_expected_in_order() -> None:
    problems = Violations(PERSON).of({"age": -1, "tags": [1], "extra": True})
    assert problems == [
        "$: 'name' is a required property",
        "$: Additional properties are not allowed ('extra' was unexpected)",
        "$.age: -1 is less than the minimum of 0",
        "$.tags[0]: 1 is not of type 'string'",
    ]


def test_a_violation_quoting_a_long_value_is_cut() -> None:
    (problem,) = Violations({"type": "integer"}).of("x" * 5000)
    assert len(problem) < 320 and problem.endswith("…")


@given(
    st.recursive(
        st.none() | st.booleans() | st.integers() | st.text(),
        lambda c: st.lists(c) | st.dictionaries(st.text(), c),
        max_leaves=20,
    )
)
def test_compact_json_reads_back_as_the_same_value(value: Any) -> None:
    assert parse_answer(compact(value)) == (value, None)


def test_the_check_refuses_then_gives_up_after_its_retries() -> None:
    check = AnswerCheck("judge", PERSON, retries=1, mode="native")
    assert check.format is not None and check.format.tool is None and not check.format.strict
    first = check.judge('{"name": "Ada"}')
    assert isinstance(first, Refused) and first.failure is None
    assert "$: 'age' is a required property" in first.feedback
    assert "Answer again with only the JSON value" in first.feedback
    second = check.judge("not json")
    assert isinstance(second, Refused) and second.failure is not None
    assert "after 2 tries: the answer is not JSON" in second.failure
    assert check.judge('{"name": "Ada", "age": 36}') == Accepted(
        {"name": "Ada", "age": 36}, '{"name":"Ada","age":36}'
    )


def test_instruction_mode_puts_the_schema_in_the_system_prompt() -> None:
    check = AnswerCheck("judge", PERSON, retries=0, mode="instruction")
    assert check.format is None and check.tool is None
    prompt = check.instructions("Judge it.")
    assert prompt.startswith("Judge it.\n\nYour final answer must be a single JSON value")
    assert json.dumps(PERSON, separators=(",", ":")) in prompt


async def test_tool_mode_keeps_a_valid_call_and_refuses_an_invalid_one() -> None:
    check = AnswerCheck("judge", PERSON, retries=0, mode="tool")
    tool = check.tool
    assert tool is not None and check.format is not None and check.format.tool == "final_answer"
    assert [s.name for s in check.tool_specs()] == ["final_answer"]
    with pytest.raises(Exception, match=r"Call final_answer again") as refused:
        await tool.run({"name": "Ada"}, None)  # type: ignore[arg-type]
    assert "'age' is a required property" in str(refused.value)
    assert tool.failure is not None  # no retries: that was its last try
    loop = AgentLoop("judge", max_turns=4)
    assert isinstance(check.after_turn(loop, NextTurn()), Fail)
    check2 = AnswerCheck("judge", PERSON, retries=0, mode="tool")
    assert check2.tool is not None
    said = await check2.tool.run({"name": "Ada", "age": 1}, None)  # type: ignore[arg-type]
    assert said.startswith("Accepted")
    assert check2.after_turn(loop, NextTurn()) == WaitQuiet()
    assert loop.quiet(inbox=False).text == '{"name":"Ada","age":1}'  # type: ignore[union-attr]


def test_a_refused_answer_is_not_final_and_the_loop_asks_again() -> None:
    loop = AgentLoop("a", max_turns=3)
    loop.ready()
    assert loop.turn_ended("{", called_tools=False, finish_reason="stop") == WaitQuiet()
    assert loop.refused() == NextTurn()
    assert loop.answer is None


# -- requests --------------------------------------------------------------------------


def test_each_wire_asks_for_the_schema_its_own_way() -> None:
    check = AnswerCheck("j", PERSON, retries=0, mode="native")
    request = ModelRequest(system="s", messages=(), output=check.format)
    chat = openai_chat.encode_request(request, model="m")
    assert chat["response_format"]["json_schema"] == {
        "name": "final_answer",
        "schema": PERSON,
        "strict": False,
    }
    responses = openai_responses.encode_request(request, model="m")
    assert responses["text"]["format"]["type"] == "json_schema"
    assert responses["text"]["format"]["schema"] == PERSON
    tool = AnswerCheck("j", PERSON, retries=0, mode="tool")
    forced = ModelRequest(system="s", messages=(), tools=tool.tool_specs(), output=tool.format)
    body = anthropic.encode_request(forced, model="m")
    assert body["tool_choice"] == {"type": "tool", "name": "final_answer"}
    thinking = anthropic.encode_request(forced, model="m", params={"thinking": {"type": "enabled"}})
    assert "tool_choice" not in thinking  # extended thinking takes no forced tool
    assert openai_chat.encode_request(forced, model="m")["tool_choice"] == "required"


# -- schema files ----------------------------------------------------------------------


def test_file_refs_are_read_beside_the_spec_and_never_outside(tmp_path: Path) -> None:
    sub = tmp_path / "subagents"
    (sub / "schemas").mkdir(parents=True)
    (sub / "schemas" / "person.json").write_text(json.dumps(PERSON))
    (sub / "schemas" / "team.yaml").write_text(
        "type: array\nitems: {$ref: person.json}\n", encoding="utf-8"
    )
    inlined = inline_file_refs({"$ref": "schemas/team.yaml"}, sub, sub)
    assert inlined == {"type": "array", "items": PERSON}
    kept = inline_file_refs({"$ref": "schemas/person.json", "title": "P"}, sub, sub)
    assert kept == {"allOf": [PERSON], "title": "P"}
    (tmp_path / "secret.json").write_text("{}")
    with pytest.raises(ValueError, match="outside the subagents folder"):
        inline_file_refs({"$ref": "../secret.json"}, sub, sub)
    (sub / "schemas" / "loop.json").write_text('{"items": {"$ref": "loop.json"}}')
    with pytest.raises(ValueError, match="refers back to itself"):
        inline_file_refs({"$ref": "schemas/loop.json"}, sub, sub)
    with pytest.raises(ValueError, match="cannot read"):
        inline_file_refs({"$ref": "nope.json"}, sub, sub)


def test_a_subagent_file_with_a_bad_schema_or_fallback_names_the_file_and_key(
    tmp_path: Path,
) -> None:
    (tmp_path / "judge.yaml").write_text(
        "description: d\ninstructions: i\noutput_schema: {type: object, required: 3}\n"
    )
    with pytest.raises(
        SpecError, match=r"judge\.yaml: output_schema: .*required: 3 is not of type 'array'"
    ):
        load_specs(tmp_path)
    (tmp_path / "judge.yaml").write_text(
        "description: d\ninstructions: i\noutput_schema: {$ref: v.json}\nfallback_models: [big]\n"
    )
    (tmp_path / "v.json").write_text(json.dumps(PERSON))
    specs = load_specs(tmp_path)
    assert specs["judge"].output_schema == PERSON
    with pytest.raises(SpecError, match=r"fallback_models\[0\]: 'big' is not a key"):
        load_specs(tmp_path, models={"default"})


# -- fallback --------------------------------------------------------------------------


def test_fallback_reasons_of_provider_errors() -> None:
    def err(status: int | None = None, kind: str | None = None, retry: bool = False) -> str | None:
        exc = ProviderError("x", provider="p", status=status, error_type=kind, retryable=retry)
        return fallback_reason(exc)

    assert err(529) == "overloaded"
    assert err(None, "overloaded_error", True) == "overloaded"  # (an SSE error event)
    assert err(429) == "rate_limit"
    assert err(400, "context_length_exceeded") == "context_length"
    assert err(503) == "unavailable"
    assert err(None, "connection", True) == "unavailable"
    assert err(401) is None and err(400, "invalid_request_error") is None


class _Fails:
    kind = "fake"

    def __init__(self, error: ProviderError | None, text: str = "ok", after: bool = False) -> None:
        self.error, self.text, self.after, self.calls = error, text, after, 0

    async def stream(self, request: ModelRequest) -> AsyncGenerator[list[StreamPart], None]:
        self.calls += 1
        if self.error is not None and not self.after:
            raise self.error
        yield [TextDelta(self.text)]
        if self.error is not None:
            raise self.error


async def _drain(chain: ModelChain) -> list[StreamPart]:
    return [
        part async for batch in chain.stream(ModelRequest(system="", messages=())) for part in batch
    ]


async def test_the_chain_falls_over_for_listed_reasons_and_stays() -> None:
    busy = _Fails(ProviderError("busy", provider="p", status=529))
    good = _Fails(None, "from b")
    switches: list[tuple[str, str, str, str]] = []

    async def told(*switch: str) -> None:
        switches.append(switch)  # type: ignore[arg-type]

    chain = ModelChain([("a", busy), ("b", good)], ["overloaded"])
    chain.on_switch = told
    assert await _drain(chain) == [TextDelta("from b")]
    assert await _drain(chain) == [TextDelta("from b")]
    assert busy.calls == 1 and good.calls == 2 and chain.model == "b"
    assert switches == [("a", "b", "overloaded", "busy")]


async def test_the_chain_does_not_fall_over_otherwise() -> None:
    limited = _Fails(ProviderError("slow", provider="p", status=429))
    chain = ModelChain([("a", limited), ("b", _Fails(None))], ["overloaded"])
    with pytest.raises(ProviderError, match="slow"):
        await _drain(chain)  # 429 is not listed
    late = _Fails(ProviderError("cut", provider="p", status=529), after=True)
    chain = ModelChain([("a", late), ("b", _Fails(None))], ["overloaded"])
    with pytest.raises(ProviderError, match="cut"):
        await _drain(chain)  # its output is out already
    last = ModelChain(
        [("a", _Fails(ProviderError("busy", provider="p", status=529)))], ["overloaded"]
    )
    with pytest.raises(ProviderError, match="busy"):
        await _drain(last)  # nothing to fall back to


def test_the_tree_view_shows_a_fallback_and_keeps_a_structured_answer() -> None:
    from orchestrator.core.events import Event, EventType
    from orchestrator.core.tree import TreeView

    view = TreeView()
    fell = {"from": "claude", "to": "gpt", "reason": "rate_limit", "error": "429"}
    answer = {
        "text": '{"ok":true}',
        "structured": {"ok": True},
        "usage": {"inputTokens": 1, "outputTokens": 1},
        "subtreeUsage": {"inputTokens": 1, "outputTokens": 1},
    }
    view.apply(
        Event("r", 1, 1.0, EventType.RUN_STARTED, None, False, {"agentId": "a", "input": "t"})
    )
    view.apply(Event("r", 2, 2.0, EventType.MODEL_FALLBACK, None, False, fell))
    assert view.root.model == "gpt" and view.root.text == "⇄ model claude → gpt (rate_limit)"
    view.apply(Event("r", 3, 3.0, EventType.AGENT_RESULT, None, True, answer))
    assert view.root.structured == {"ok": True} and view.root.result == '{"ok":true}'
