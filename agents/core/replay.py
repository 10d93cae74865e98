"""Replay: answer a model turn from a recording when its request is the same.

A turn's request is its agent's *spec* — the model entry, the system prompt and the
tools it is offered, fingerprinted once per agent instance (`spec_key`) and written on
each turn's `last` REASONING as `spec` — and the conversation up to the turn. A fork
with `replay` (docs/fork.md) reads the original run's journal into a `Recording`: the
conversation before each turn is rebuilt from the journal (`core/fork.py`), as a
resume rebuilds it, and keyed with the turn's `spec` (`turn_key`); the turn's stream
parts are kept in the order they streamed. A turn of the fork whose key is recorded is
answered from there, with no provider call; any other turn asks the model.

The key is of the conversation as the journal can rebuild it, so that a turn asked
live has the key its recorded twin had: each message's role and text, each tool
call's id, name and arguments (parsed and encoded again, so that spacing does not
count), each tool result's call id, name, content and error flag. Thinking blocks and
provider-side tool blocks are not in the journal, so not in the key either.

Pure: no I/O. A run that is never forked pays one fingerprint per agent instance and
nothing per turn or event; a replaying fork hashes each conversation it asks with.
"""

from __future__ import annotations

import hashlib
from collections import deque
from collections.abc import Sequence
from typing import Any, cast

import msgspec

from agents.core.events import EventType
from agents.core.messages import (
    AssistantMessage,
    Finish,
    Message,
    StreamPart,
    TextDelta,
    ThinkingDelta,
    ToolCallArgs,
    ToolCallStart,
    ToolResultMessage,
    ToolSpec,
    UsageReport,
    UserMessage,
)
from agents.core.payloads import (
    ReasoningData,
    ToolCallDeltaData,
    TurnEndData,
)

__all__ = [
    "HANDLES",
    "IGNORES",
    "Recorder",
    "Recording",
    "conversation_digest",
    "request_key",
    "spec_key",
    "turn_key",
]

_encode = msgspec.json.Encoder(order="sorted").encode
_decode = msgspec.json.decode


def _args(raw: str) -> Any:
    try:
        return _decode(raw)
    except msgspec.DecodeError:
        return raw


def _message(message: Message) -> tuple[Any, ...]:
    if isinstance(message, UserMessage):
        return ("user", message.text)
    if isinstance(message, AssistantMessage):
        calls = [(c.id, c.name, _args(c.arguments)) for c in message.tool_calls]
        return ("assistant", message.text, calls)
    assert isinstance(message, ToolResultMessage)
    return ("tool", message.tool_call_id, message.name, message.content, message.is_error)


def spec_key(model: str, system: str, tools: Sequence[ToolSpec]) -> str:
    """The fingerprint of what an agent is (model entry, system prompt, tools offered)."""
    body = (model, system, [(t.name, t.description, t.parameters) for t in tools])
    return hashlib.blake2b(_encode(body), digest_size=16).hexdigest()


def conversation_digest(messages: Sequence[Message]) -> bytes:
    """The digest of a conversation, as the journal can rebuild it."""
    return hashlib.blake2b(_encode([_message(m) for m in messages]), digest_size=16).digest()


def turn_key(spec: str, digest: bytes) -> str:
    """What a model turn asks: its agent's spec and its conversation's digest."""
    return hashlib.blake2b(spec.encode() + digest, digest_size=16).hexdigest()


def request_key(spec: str, messages: Sequence[Message]) -> str:
    """`turn_key` of a live conversation."""
    return turn_key(spec, conversation_digest(messages))


HANDLES = frozenset(
    {
        EventType.REASONING,
        EventType.TOOL_CALL_DELTA,
        EventType.TURN_ABANDONED,
    }
)
"""Event types a `Recorder` reads: a turn's text, thinking and calls as they stream, its
end, and a turn cut off."""
IGNORES = frozenset(
    {
        EventType.RUN_STARTED,
        EventType.AGENT_STARTED,
        EventType.TOOL_CALL,
        EventType.TOOL_RESULT,
        EventType.AGENT_RESULT,
        EventType.AGENT_ERROR,
        EventType.USER_MESSAGE,
        EventType.TOOL_PROGRESS,
        EventType.RUN_RESUMED,
        EventType.APPROVAL_REQUESTED,
        EventType.APPROVAL_RESOLVED,
        EventType.COMPACTION_STARTED,
        EventType.COMPACTION_FINISHED,
        EventType.AGENT_STALLED,
        EventType.MODEL_FALLBACK,
        EventType.RUN_FINISHED,
    }
)
"""Event types it leaves aside (a turn's parts are all in the three it reads);
tests/unit/test_payloads.py checks that every type is in one of the two."""


class Recording:
    """Recorded turns by request key: the stream parts of each, in order.

    A key recorded more than once (the same request asked twice) is answered by its
    recordings in turn, then by the last one again.
    """

    __slots__ = ("_turns",)

    def __init__(self) -> None:
        self._turns: dict[str, deque[list[StreamPart]]] = {}

    def add(self, key: str, parts: list[StreamPart]) -> None:
        """One recorded turn asked with `key`."""
        self._turns.setdefault(key, deque()).append(parts)

    def take(self, key: str) -> list[StreamPart] | None:
        """The parts that answer `key` (None: not recorded: ask the model)."""
        turns = self._turns.get(key)
        if not turns:
            return None
        return turns.popleft() if len(turns) > 1 else turns[0]

    def __len__(self) -> int:
        return sum(len(turns) for turns in self._turns.values())


class Recorder:
    """Reads a run's events, in seq order, into a `Recording`.

    Per agent (by agentKey; the root is None) it keeps the parts of the turn that is
    streaming: a REASONING delta is text, a `thinkingDelta` thinking, a
    TOOL_CALL_DELTA a call's start (the first time its id is seen) and arguments. The
    turn's `last` REASONING closes it: calls that streamed no arguments start there,
    then come the usage and the finish reason. A TURN_ABANDONED drops what the agent
    had streamed (the turn was asked again, with the same conversation). Whoever
    rebuilds the conversations says where each turn began (`turn_started`). A turn
    without a `spec` (journaled before there was one) is not recorded.
    """

    __slots__ = ("_digests", "_open", "recording")

    def __init__(self) -> None:
        self.recording = Recording()
        self._open: dict[str | None, _OpenTurn] = {}
        self._digests: dict[str | None, bytes] = {}

    def turn_started(self, agent_key: str | None, digest: bytes) -> None:
        """The agent's next turn asks with the conversation of `digest`."""
        self._digests[agent_key] = digest

    def feed(self, agent_key: str | None, kind: EventType, last: bool, data: object) -> None:
        """One event of the run (those not in `HANDLES` are ignored)."""
        if kind is EventType.REASONING:
            turn = self._open.setdefault(agent_key, _OpenTurn())
            reasoning = cast(ReasoningData, data)
            if last:
                del self._open[agent_key]
                end = cast(TurnEndData, reasoning)
                spec, digest = end.get("spec"), self._digests.get(agent_key)
                if spec is not None and digest is not None:
                    self.recording.add(turn_key(spec, digest), turn.close(end))
            elif "delta" in reasoning:
                turn.parts.append(TextDelta(reasoning["delta"]))
            elif "thinkingDelta" in reasoning:
                turn.parts.append(ThinkingDelta(reasoning["thinkingDelta"]))
        elif kind is EventType.TOOL_CALL_DELTA:
            turn = self._open.setdefault(agent_key, _OpenTurn())
            turn.args(cast(ToolCallDeltaData, data))
        elif kind is EventType.TURN_ABANDONED:
            self._open.pop(agent_key, None)


class _OpenTurn:
    __slots__ = ("calls", "parts")

    def __init__(self) -> None:
        self.parts: list[StreamPart] = []
        self.calls: dict[str, int] = {}
        """Call id → its key in the stream (the order it started in)."""

    def args(self, data: ToolCallDeltaData) -> None:
        call_id = data["toolCallId"]
        key = self.calls.get(call_id)
        if key is None:
            key = self.calls[call_id] = len(self.calls)
            self.parts.append(ToolCallStart(key, call_id, data["name"]))
        self.parts.append(ToolCallArgs(key, data["argsDelta"]))

    def close(self, end: TurnEndData) -> list[StreamPart]:
        parts = self.parts
        for call in end["toolCalls"]:
            if call["toolCallId"] in self.calls:
                continue
            key = self.calls[call["toolCallId"]] = len(self.calls)
            args = call["args"]
            parts.append(ToolCallStart(key, call["toolCallId"], call["name"]))
            parts.append(
                ToolCallArgs(key, args if isinstance(args, str) else _encode(args).decode())
            )
        usage = end.get("usage")
        if usage is not None:
            parts.append(UsageReport(usage["inputTokens"], usage["outputTokens"]))
        parts.append(Finish(end["finishReason"]))
        return parts
