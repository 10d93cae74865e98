"""Assembles one streamed model turn and says when each tool call is ready to run.

This is the pure half of the streaming tool executor: a call is ready as soon as
its arguments are complete — when the provider ends it, when the turn finishes,
or when its accumulated arguments already parse as a JSON object (a complete
object cannot be extended into valid JSON, so nothing the model still streams
can change it). The runner starts a ready call at once, while the model may
still be streaming the rest of its turn.
"""

from __future__ import annotations

from typing import Any

import msgspec

from agents.core.messages import (
    AssistantMessage,
    Finish,
    ServerToolCall,
    ServerToolResult,
    StreamPart,
    TextDelta,
    ThinkingBlock,
    ThinkingDelta,
    ThinkingEnd,
    ToolCall,
    ToolCallArgs,
    ToolCallEnd,
    ToolCallStart,
)

__all__ = ["TurnAssembler", "parse_arguments"]

_decode_json = msgspec.json.decode


class _Call:
    __slots__ = ("args", "id", "name", "ready")

    def __init__(self, call_id: str, name: str) -> None:
        self.id = call_id
        self.name = name
        self.args: list[str] = []
        self.ready = False

    def tool_call(self) -> ToolCall:
        return ToolCall(id=self.id, name=self.name, arguments="".join(self.args))


def parse_arguments(raw: str) -> dict[str, object]:
    """Parse a call's JSON arguments; an empty string means no arguments.

    Raises:
        ValueError: naming what is wrong, for an error tool result.
    """
    if not raw.strip():
        return {}
    try:
        value = _decode_json(raw)
    except msgspec.DecodeError as exc:
        raise ValueError(f"invalid JSON arguments ({exc}): {raw[:200]!r}") from None
    if not isinstance(value, dict):
        raise ValueError(f"arguments must be a JSON object, got {type(value).__name__}")
    return value


class TurnAssembler:
    """Collects a turn's text, thinking and tool calls, in the order they started."""

    __slots__ = (
        "_args_chars",
        "_block_start",
        "_blocks",
        "_calls",
        "_chars",
        "_keys",
        "_seen_text",
        "_seen_thinking",
        "_server_blocks",
        "_thinking",
        "_used_ids",
        "finish_reason",
        "text_parts",
    )

    def __init__(self) -> None:
        self.text_parts: list[str] = []
        self._thinking: list[str] = []
        self._blocks: list[ThinkingBlock] = []
        self._block_start = 0
        self._calls: list[_Call] = []
        self._keys: dict[int, _Call] = {}
        self._used_ids: set[str] = set()
        self.finish_reason: str | None = None
        self._chars = self._args_chars = self._seen_text = self._seen_thinking = 0
        self._server_blocks: list[dict[str, Any]] = []

    def output_chars(self) -> int:
        """Characters of text, thinking and arguments so far (incremental: cheap to poll)."""
        text, thinking = self.text_parts, self._thinking
        self._chars += sum(map(len, text[self._seen_text :]))
        self._chars += sum(map(len, thinking[self._seen_thinking :]))
        self._seen_text, self._seen_thinking = len(text), len(thinking)
        return self._chars + self._args_chars

    @property
    def text(self) -> str:
        """The turn's visible text so far."""
        return "".join(self.text_parts)

    def add_thinking(self, delta: str) -> None:
        """Record a thinking delta."""
        self._thinking.append(delta)

    def end_thinking(self, signature: str, redacted: str | None = None) -> None:
        """Close the current thinking block with its signature (kept verbatim)."""
        text = "".join(self._thinking[self._block_start :])
        self._block_start = len(self._thinking)
        self._blocks.append(ThinkingBlock(thinking=text, signature=signature, redacted=redacted))

    def start_call(self, key: int, call_id: str, name: str) -> str:
        """Open a call; returns its id, made unique within the turn."""
        unique = call_id or f"call_{key}"
        n = 2
        while unique in self._used_ids:
            unique = f"{call_id}_{n}"
            n += 1
        self._used_ids.add(unique)
        call = _Call(unique, name)
        self._calls.append(call)
        self._keys[key] = call
        return unique

    def call_name(self, key: int) -> tuple[str, str]:
        """(id, name) of an open call."""
        call = self._keys[key]
        return call.id, call.name

    def add_args(self, key: int, delta: str) -> ToolCall | None:
        """Append an argument fragment; returns the call if that made it complete."""
        self._args_chars += len(delta)
        call = self._keys.get(key)
        if call is None or call.ready:
            return None  # fragments after completion cannot change a started call
        call.args.append(delta)
        if delta.rstrip().endswith("}"):
            raw = "".join(call.args)
            try:
                value = _decode_json(raw)
            except msgspec.DecodeError:
                return None
            if isinstance(value, dict):
                call.ready = True
                return call.tool_call()
        return None

    def end_call(self, key: int) -> ToolCall | None:
        """The provider closed the call; returns it unless it was ready already."""
        call = self._keys.get(key)
        if call is None or call.ready:
            return None
        call.ready = True
        return call.tool_call()

    def finish(self, reason: str) -> list[ToolCall]:
        """The turn ended: every call not yet ready is ready now, in start order."""
        if self.finish_reason is None:
            self.finish_reason = reason
        ready = []
        for call in self._calls:
            if not call.ready:
                call.ready = True
                ready.append(call.tool_call())
        return ready

    def apply(self, part: StreamPart) -> list[ToolCall]:
        """Take any stream part; returns the tool calls it made ready (usually none)."""
        if isinstance(part, TextDelta):
            self.text_parts.append(part.text)
        elif isinstance(part, ThinkingDelta):
            self.add_thinking(part.text)
        elif isinstance(part, ThinkingEnd):
            self.end_thinking(part.signature, part.redacted)
        elif isinstance(part, ToolCallStart):
            self.start_call(part.key, part.id, part.name)
        elif isinstance(part, ToolCallArgs):
            ready = self.add_args(part.key, part.delta)
            return [ready] if ready is not None else []
        elif isinstance(part, ToolCallEnd):
            ready = self.end_call(part.key)
            return [ready] if ready is not None else []
        elif isinstance(part, (ServerToolCall, ServerToolResult)):
            self.add_server(part)
        elif isinstance(part, Finish):
            return self.finish(part.reason)
        return []

    def add_server(self, part: ServerToolCall | ServerToolResult) -> None:
        """Keep a provider-run tool's block for the conversation (it is never run here)."""
        if part.raw is not None:
            self._server_blocks.append(part.raw)

    def message(self) -> AssistantMessage:
        """The finished turn as a conversation message."""
        return AssistantMessage(
            text=self.text,
            tool_calls=tuple(call.tool_call() for call in self._calls),
            thinking="".join(self._thinking),
            thinking_blocks=tuple(self._blocks),
            server_blocks=tuple(self._server_blocks),
        )
