"""Structured output: an agent's answer as a JSON value its schema accepts.

Pure code. It checks a schema (one an operator wrote in a subagent's YAML, or one a
client sent with a run), reads the answer out of a model's text, validates it, and
words what is wrong — for the model, which is asked again, and for the parent, when
the agent gives up. The runner (`agents/runner/answer.py`) decides when to ask again;
each wire encoder asks its provider the native way (`ModelRequest.output`).

Why `jsonschema`: it is the reference validator of the draft we accept (2020-12) and
its errors carry the path of what failed, which is what the model needs to be told.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any, Literal

import msgspec

from agents.errors import OrchestratorError

__all__ = [
    "ANSWER_TOOL",
    "MAX_SCHEMA_BYTES",
    "OutputMode",
    "SchemaError",
    "Violations",
    "answer_tool_parameters",
    "check_schema",
    "compact",
    "feedback",
    "instruction",
    "parse_answer",
    "strict_compatible",
    "unwrap_tool_answer",
]

ANSWER_TOOL = "final_answer"
"""The tool an agent answers through where the provider is asked by a forced tool."""
MAX_SCHEMA_BYTES = 64 * 1024
"""The largest schema (as compact JSON) a run or a subagent may give."""
MAX_SCHEMA_DEPTH = 32
"""How deeply a schema may nest (objects and arrays)."""
MAX_VIOLATIONS = 5
"""Violations named in one message (the first ones, by their place in the answer)."""
_MESSAGE_CHARS = 300

OutputMode = Literal["native", "tool", "instruction"]
"""How a model is asked for the schema: its provider's own structured output
(`response_format`, `text.format`), a tool it must call, or an instruction."""

_UNTRUSTED = ("pattern", "patternProperties", "$dynamicRef")
"""Keywords a client's schema may not use: a regular expression of the client's would
be matched, with a backtracking engine, against text the model writes."""


class SchemaError(OrchestratorError, ValueError):
    """A schema cannot be used; the message names where and what."""

    code = "bad_request"


def check_schema(schema: object, *, where: str, untrusted: bool = False) -> dict[str, Any]:
    """`schema` as a usable JSON Schema (draft 2020-12), or a `SchemaError`.

    Args:
        schema: the schema as given.
        where: how messages name it (`output_schema`, `run.outputSchema`).
        untrusted: a client sent it: it may not use `pattern`-like keywords.
    """
    import jsonschema  # here: only an agent with a schema pays for the import

    if not isinstance(schema, dict):
        raise SchemaError(f"{where}: a JSON Schema object, not {type(schema).__name__}")
    size = len(msgspec.json.encode(schema))
    if size > MAX_SCHEMA_BYTES:
        raise SchemaError(f"{where}: {size} bytes of JSON; at most {MAX_SCHEMA_BYTES}")
    for path, node in _walk(schema, "", 0, where):
        ref = node.get("$ref")
        if isinstance(ref, str) and not ref.startswith("#"):
            raise SchemaError(
                f"{where}{path}.$ref: {ref!r} is not a reference inside the schema "
                "(remote references are never fetched)"
            )
        if untrusted:
            for key in _UNTRUSTED:
                if key in node:
                    raise SchemaError(
                        f"{where}{path}.{key}: not allowed in a schema a client sends "
                        "(put it in a subagent's output_schema instead)"
                    )
    try:
        jsonschema.Draft202012Validator.check_schema(schema)
    except jsonschema.SchemaError as exc:
        spot = "".join(f"[{p!r}]" if isinstance(p, int) else f".{p}" for p in exc.path)
        raise SchemaError(f"{where}{spot}: {_short(exc.message)}") from None
    return schema


def _walk(
    node: dict[str, Any], path: str, depth: int, where: str
) -> Iterator[tuple[str, dict[str, Any]]]:
    if depth > MAX_SCHEMA_DEPTH:
        raise SchemaError(f"{where}{path}: nested deeper than {MAX_SCHEMA_DEPTH}")
    yield path, node
    for key, value in node.items():
        if isinstance(value, dict):
            yield from _walk(value, f"{path}.{key}", depth + 1, where)
        elif isinstance(value, list):
            for i, item in enumerate(value):
                if isinstance(item, dict):
                    yield from _walk(item, f"{path}.{key}[{i}]", depth + 1, where)


def strict_compatible(schema: dict[str, Any]) -> bool:
    """Whether OpenAI's strict mode accepts `schema` as it is: every object closed
    (`additionalProperties: false`) with every property required. Strict mode then
    guarantees the shape; any other schema is asked for without it (and validated here
    either way)."""
    try:
        nodes = list(_walk(schema, "", 0, ""))
    except SchemaError:
        return False
    for _, node in nodes:
        kind = node.get("type")
        if kind == "object" or "properties" in node:
            props = node.get("properties", {})
            if node.get("additionalProperties") is not False:
                return False
            if not isinstance(props, dict) or set(node.get("required", [])) != set(props):
                return False
    return schema.get("type") == "object"


def answer_tool_parameters(schema: dict[str, Any]) -> tuple[dict[str, Any], bool]:
    """The `final_answer` tool's parameters for `schema`, and whether the answer is
    wrapped: a tool's arguments are an object, so any other schema becomes the one
    property `value` of one."""
    if schema.get("type") == "object":
        return schema, False
    wrapped = {
        "type": "object",
        "properties": {"value": schema},
        "required": ["value"],
        "additionalProperties": False,
    }
    return wrapped, True


def unwrap_tool_answer(args: dict[str, Any], wrapped: bool) -> Any:
    """The answer a `final_answer` call gives (its `value`, when wrapped)."""
    return args.get("value") if wrapped else args


_FENCE = re.compile(r"\A```[A-Za-z0-9_-]{0,20}[ \t]*\n(.*)\n```\Z", re.DOTALL)


def parse_answer(text: str) -> tuple[Any, str | None]:
    """The JSON value of a final answer's text, and None; or None and what is wrong.

    A model asked for JSON sometimes fences it (```json … ```): the fence is taken off.
    """
    body = text.strip()
    fenced = _FENCE.match(body)
    if fenced is not None:
        body = fenced.group(1).strip()
    if not body:
        return None, "the answer is empty: it must be a JSON value"
    try:
        return msgspec.json.decode(body), None
    except msgspec.DecodeError as exc:
        return None, f"the answer is not JSON ({exc})"


class Violations:
    """Validates answers against one schema (checked with `check_schema` first)."""

    __slots__ = ("_validator",)

    def __init__(self, schema: dict[str, Any]) -> None:
        import jsonschema

        self._validator = jsonschema.Draft202012Validator(schema)

    def of(self, value: Any) -> list[str]:
        """What is wrong with `value` (at most `MAX_VIOLATIONS`, each naming where, as a
        JSON path, and what was expected); empty: it is valid."""
        found = []
        for error in self._validator.iter_errors(value):
            found.append((list(map(str, error.absolute_path)), error))
            if len(found) >= MAX_VIOLATIONS:
                break
        found.sort(key=lambda item: item[0])
        return [f"{error.json_path}: {_short(error.message)}" for _, error in found]


def feedback(problems: list[str], *, tool: str | None) -> str:
    """What the model is told when its answer is refused (`tool`: it answers by calling
    that tool)."""
    listed = "\n".join(f"- {p}" for p in problems)
    again = (
        f"Call {tool} again with arguments that match the schema."
        if tool is not None
        else "Answer again with only the JSON value, no other text."
    )
    return f"Your answer does not match the required JSON schema:\n{listed}\n{again}"


def instruction(schema: dict[str, Any]) -> str:
    """Added to the system prompt of a model asked for the schema by instruction."""
    text = msgspec.json.encode(schema).decode()
    return (
        "\n\nYour final answer must be a single JSON value that matches this JSON Schema, "
        f"with no other text before or after it:\n{text}"
    )


def compact(value: Any) -> str:
    """A structured answer as its parent sees it: compact JSON."""
    return msgspec.json.encode(value).decode()


def _short(message: str) -> str:
    """A validator message bounded (it quotes the offending value, which may be long)."""
    if len(message) <= _MESSAGE_CHARS:
        return message
    return message[: _MESSAGE_CHARS - 1] + "…"
