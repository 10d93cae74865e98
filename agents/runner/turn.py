"""One model turn: the provider's stream out as events, assembled into a message.

The turn is four steps, each a method of `TurnReader`: ask the model (its stream
goes out as events while tool calls start the moment they are complete), assemble
its message, wait for the tool calls, and hand back the outcome. A provider that
streams forever does not run forever: `TurnLimits` bound a turn's time, parts and
size.
"""

from __future__ import annotations

import logging
import math
from collections.abc import AsyncGenerator
from contextlib import aclosing
from typing import Any, Final

import msgspec
import trio

from agents.core.compaction import CHARS_PER_TOKEN, ContextMeter
from agents.core.events import EventType, Usage
from agents.core.messages import (
    AssistantMessage,
    Message,
    ModelRequest,
    OutputFormat,
    ServerToolCall,
    ServerToolResult,
    StreamPart,
    TextDelta,
    ThinkingDelta,
    ToolCall,
    ToolCallArgs,
    ToolCallStart,
    ToolResultMessage,
    ToolSpec,
    UsageReport,
)
from agents.core.partial_json import PartialJson
from agents.core.payloads import (
    ToolCallData,
    ToolCallDeltaData,
    ToolResultData,
    TurnCallData,
    TurnEndData,
)
from agents.core.replay import Recording, request_key, spec_key
from agents.core.turn import TurnAssembler, parse_arguments
from agents.core.usage import UsageNode
from agents.emitter import Emitter
from agents.errors import AgentFailed
from agents.providers.base import Provider
from agents.providers.fallback import ModelChain
from agents.runner.tools import ToolRoom

__all__ = ["TurnLimits", "TurnOutcome", "TurnReader"]

logger = logging.getLogger("agents.runner")

_REASONING: Final = EventType.REASONING
_CHECK_EVERY = 256
"""A turn's size is checked every this-many stream parts (so a limit may be passed by
up to this many parts; the check costs nothing per delta)."""

TurnOutcome = tuple[AssistantMessage, list[ToolResultMessage], str]
"""A turn's message, its tool results in call order, and its finish reason."""


class TurnLimits(msgspec.Struct, frozen=True, kw_only=True):
    """Bounds on one model turn: a provider that streams forever must not run forever."""

    max_parts: int = 200_000
    """Stream parts (text, reasoning and argument deltas) in one turn."""
    max_bytes: int = 8 * 1024 * 1024
    """Characters of text, reasoning and tool arguments in one turn."""
    timeout: float = 600.0
    """Seconds one turn may stream, start to end (tools it started are not counted)."""


class TurnReader:
    """Reads the model turns of one agent instance.

    Args:
        agent_id, instructions: named in failures; the request's system prompt.
        provider: streams the turn.
        bus: where the turn's REASONING, TOOL_CALL_DELTA and server-tool events go.
        tools: starts each tool call as it is complete; `tool_specs`, what the model
            is told of them.
        limits: bounds on each turn.
        meter: the conversation's size, told each turn's reported usage.
        usage: charged each turn's tokens.
        model: the model entry's name (part of the agent's spec key).
        recording: a forked run's recorded turns (replay): a request found there
            is answered from it, with no provider call.
        output: the schema its final answer must match, as each request asks for it.
    """

    __slots__ = (
        "_agent_id",
        "_bus",
        "_instructions",
        "_meter",
        "_model",
        "_output",
        "_provider",
        "_recording",
        "_tool_specs",
        "_tools",
        "_usage",
        "limits",
        "spec_key",
        "usage_estimated",
    )

    def __init__(
        self,
        *,
        agent_id: str,
        instructions: str,
        provider: Provider,
        bus: Emitter,
        tools: ToolRoom,
        tool_specs: tuple[ToolSpec, ...],
        limits: TurnLimits,
        meter: ContextMeter,
        usage: UsageNode,
        model: str = "",
        recording: Recording | None = None,
        output: OutputFormat | None = None,
    ) -> None:
        self._agent_id = agent_id
        self._model = model
        self._output = output
        self._recording = recording
        self.spec_key = spec_key(model, instructions, tool_specs)
        """What this agent is (its turns say it: a fork's replay keys them with it)."""
        self._instructions = instructions
        self._provider = provider
        self._bus = bus
        self._tools = tools
        self._tool_specs = tool_specs
        self.limits = limits
        self._meter = meter
        self._usage = usage
        if isinstance(provider, ModelChain):
            provider.on_switch = self._fell_back
        self.usage_estimated = False
        """A turn was cut off before its usage was reported: an estimate of it was
        charged (said in the agent's AGENT_ERROR as `usageEstimated`)."""

    async def turn(self, messages: list[Message]) -> TurnOutcome:
        """One model turn on `messages`: its message, results in call order, and
        finish reason."""
        turn = _Turn()
        async with trio.open_nursery() as tools:
            turn.tools = tools
            tools.start_soon(self._read_turn, turn, messages)
        # The nursery has waited for the stream and for every tool call the turn started
        # (the turn's usage was charged when its stream ended: `_charge`).
        if turn.failure is not None:
            raise turn.failure
        message = turn.message
        assert message is not None  # set by `_read_turn` when it did not fail
        if turn.usage is not None:  # the next request holds this turn's message too
            self._meter.turn_ended(
                turn.usage.input_tokens, turn.usage.output_tokens, len(messages) + 1
            )
        reason = turn.assembler.finish_reason or "unknown"
        return message, [turn.results[call.id] for call in message.tool_calls], reason

    def _charge(self, turn: _Turn, messages: list[Message]) -> None:
        """Charge a turn's tokens the moment its stream is over — before its tool calls
        end, so an agent cancelled while they run (its children, say) still counts
        them, as do its ancestors' subtrees and budgets. A stream cut off before the
        provider reported usage is charged an estimate (the request's size as
        compaction measures it, and what streamed at characters ÷ 4), and its agent's
        terminal event says `usageEstimated`; one that failed before any part arrived
        (a refused request) is charged nothing."""
        if turn.replayed:  # no provider call: nothing was spent
            return
        if turn.usage is not None:
            used = Usage(
                input_tokens=turn.usage.input_tokens, output_tokens=turn.usage.output_tokens
            )
        elif turn.streamed:
            used = Usage(
                input_tokens=self._meter.size(messages),
                output_tokens=math.ceil(turn.assembler.output_chars() / CHARS_PER_TOKEN),
            )
            self.usage_estimated = True
        else:
            return
        self._usage.charge(used)

    async def _read_turn(self, turn: _Turn, messages: list[Message]) -> None:
        """Ask the model and assemble its message, in a task of its own beside the
        turn's tool calls.

        Why a task: a task resumes through every frame under it. In the agent's own
        task each delta read from a provider would resume the whole call chain
        (tool task → spawn → run → loop → turn → here); in this one it resumes this
        frame and the provider's stream. A failure is kept for `turn` to raise bare
        (not as a group), and cancels the tool calls already started.
        """
        try:
            try:
                await self._ask_model(turn, messages)
            finally:
                self._charge(turn, messages)  # whole or cut off (a cancel): tokens were spent
            turn.message = await self._assemble(turn)
        except Exception as exc:
            turn.failure = exc
            turn.tools.cancel_scope.cancel()

    async def _ask_model(self, turn: _Turn, messages: list[Message]) -> None:
        """Stream one model turn into `turn`, emitting its events as they arrive.

        Text deltas take the fast paths (one `offer` per delta, or one `offer_deltas`
        per network read, an await only when the outlet is full); every other part
        goes through `_on_part`.

        Raises:
            AgentFailed: the turn streamed past `limits` (time, parts, size).
        """
        limits = self.limits
        request = ModelRequest(
            system=self._instructions,
            messages=tuple(messages),
            tools=self._tool_specs,
            output=self._output,
        )
        recorded = None
        if self._recording is not None:  # a replaying fork: only it hashes conversations
            recorded = self._recording.take(request_key(self.spec_key, messages))
        turn.replayed = recorded is not None
        assembler = turn.assembler
        parts_seen, check_at = 0, _CHECK_EVERY
        # Looked up once: this loop runs for every network read of every agent.
        bus = self._bus
        offer, offer_deltas, wait_writable = bus.offer, bus.offer_deltas, bus.wait_writable
        add_text, add_texts = assembler.text_parts.append, assembler.text_parts.extend
        with trio.CancelScope(relative_deadline=limits.timeout) as deadline:
            stream = _replay(recorded) if recorded is not None else self._provider.stream(request)
            async with aclosing(stream) as batches:
                async for batch in batches:
                    turn.streamed = True
                    parts_seen += len(batch)
                    if parts_seen >= check_at:  # every 256 parts: cheap per delta
                        check_at = parts_seen + _CHECK_EVERY
                        self._check_turn_size(assembler, parts_seen)
                    if len(batch) == 1 and type(batch[0]) is TextDelta:
                        text = batch[0].text  # one delta per read: a slow stream
                        add_text(text)
                        if offer(_REASONING, {"delta": text}):
                            await wait_writable()
                        continue
                    texts: list[str] = []
                    for part in batch:
                        if type(part) is TextDelta:  # the common case, first and exact
                            texts.append(part.text)
                            continue
                        if texts:  # what streamed before this part goes out first
                            add_texts(texts)
                            if offer_deltas(texts):
                                await wait_writable()
                            texts = []
                        await self._on_part(part, turn)
                    if texts:
                        add_texts(texts)
                        if offer_deltas(texts):
                            await wait_writable()
        if deadline.cancelled_caught:
            raise AgentFailed(
                f"agent {self._agent_id!r}: a model turn streamed for over "
                f"{limits.timeout:g} s (limits.turn_timeout_seconds)",
                error_type="turn_timeout",
            )

    async def _on_part(self, part: StreamPart, turn: _Turn) -> None:
        """A stream part other than text: thinking, tool calls, usage, server tools, ends."""
        assembler, bus = turn.assembler, self._bus
        if isinstance(part, ThinkingDelta):
            assembler.add_thinking(part.text)
            await bus.emit(_REASONING, {"thinkingDelta": part.text})
        elif isinstance(part, ToolCallStart):
            assembler.start_call(part.key, part.id, part.name)
            tool = self._tools.tools.get(part.name)
            if tool is not None and tool.stream_paths:
                turn.readers[part.key] = PartialJson(tool.stream_paths)
        elif isinstance(part, ToolCallArgs):
            ready = assembler.add_args(part.key, part.delta)
            call_id, name = assembler.call_name(part.key)
            data: ToolCallDeltaData = {"toolCallId": call_id, "name": name, "argsDelta": part.delta}
            reader = turn.readers.get(part.key)
            if reader is not None:
                fields = reader.feed(part.delta)
                if fields:
                    data["fields"] = fields
            await bus.emit(EventType.TOOL_CALL_DELTA, data)
            if ready is not None:
                await self._tools.start(turn.tools, turn.results, ready)
        elif isinstance(part, UsageReport):
            turn.usage = part
        elif isinstance(part, (ServerToolCall, ServerToolResult)):
            assembler.add_server(part)  # the provider ran it: show, never run
            if isinstance(part, ServerToolCall):
                await bus.emit(EventType.TOOL_CALL, _server_call(part))
            else:
                await bus.emit(EventType.TOOL_RESULT, _server_result(part))
        else:  # ThinkingEnd, ToolCallEnd, Finish: the assembler decides
            for ready in assembler.apply(part):
                await self._tools.start(turn.tools, turn.results, ready)

    async def _assemble(self, turn: _Turn) -> AssistantMessage:
        """The stream ended: start the calls it left complete, emit the turn's `last`
        REASONING (its text and tool calls), and return its message."""
        assembler = turn.assembler
        for ready in assembler.finish("unknown"):
            await self._tools.start(turn.tools, turn.results, ready)
        message = assembler.message()
        data: TurnEndData = {
            "text": message.text,
            "toolCalls": [_call_json(call) for call in message.tool_calls],
            "finishReason": assembler.finish_reason or "unknown",
        }
        if turn.usage is not None:  # this turn's own tokens (traces put them on its span)
            data["usage"] = {
                "inputTokens": turn.usage.input_tokens,
                "outputTokens": turn.usage.output_tokens,
            }
        data["spec"] = self.spec_key
        data["model"] = self._model_now()
        if turn.replayed:
            data["replayed"] = True
        await self._bus.emit(_REASONING, data, last=True)
        return message

    async def _fell_back(self, old: str, new: str, reason: str, error: str) -> None:
        """MODEL_FALLBACK: the model failed a turn; the turn goes to the next one."""
        logger.warning(
            "run %s: agent %s: model %s failed (%s), falling back to %s",
            self._bus.run_id or "-",
            self._bus.agent_key or f"{self._agent_id} (root)",
            old,
            reason,
            new,
        )
        await self._bus.emit(
            EventType.MODEL_FALLBACK, {"from": old, "to": new, "reason": reason, "error": error}
        )

    def _model_now(self) -> str:
        """The model key that answers now (a `ModelChain` may have fallen over)."""
        provider = self._provider
        return provider.model if isinstance(provider, ModelChain) else self._model

    def _check_turn_size(self, assembler: TurnAssembler, parts: int) -> None:
        limits = self.limits
        if parts > limits.max_parts or assembler.output_chars() > limits.max_bytes:
            raise AgentFailed(
                f"agent {self._agent_id!r}: one model turn produced more than "
                f"{limits.max_parts} parts or {limits.max_bytes} characters "
                "(limits.max_turn_events/max_turn_bytes)",
                error_type="output_limit",
            )


class _Turn:
    """One model turn in progress: what the stream assembled, and its tool calls."""

    __slots__ = (
        "assembler",
        "failure",
        "message",
        "readers",
        "replayed",
        "results",
        "streamed",
        "tools",
        "usage",
    )

    def __init__(self) -> None:
        self.replayed = False
        """Answered from a recording: no provider call, no tokens charged."""
        self.assembler = TurnAssembler()
        self.results: dict[str, ToolResultMessage] = {}
        """Tool results by call id, as the calls end."""
        self.readers: dict[int, PartialJson] = {}
        """Streaming-argument readers of calls whose tool has `stream_paths`."""
        self.usage: UsageReport | None = None
        self.streamed = False
        """A part of the answer arrived (the model was at work: its tokens count)."""
        self.tools: trio.Nursery
        """Where the turn's stream is read and its tool calls run (the turn waits for them)."""
        self.message: AssistantMessage | None = None
        """The assembled message, once the stream has ended."""
        self.failure: Exception | None = None
        """Why reading the stream failed (raised by `turn` once the tool calls have ended)."""


def _server_call(part: ServerToolCall) -> ToolCallData:
    """TOOL_CALL with `server: true` for a tool the provider ran."""
    return {"toolCallId": part.id, "name": part.name, "args": part.input, "server": True}


def _server_result(part: ServerToolResult) -> ToolResultData:
    """TOOL_RESULT with `server: true` for a tool the provider ran (its JSON, as text)."""
    content = part.content
    if not isinstance(content, str):
        content = msgspec.json.encode(content).decode()
    return {
        "toolCallId": part.tool_call_id,
        "name": part.name,
        "content": content,
        "isError": part.is_error,
        "server": True,
    }


async def _replay(parts: list[StreamPart]) -> AsyncGenerator[list[StreamPart]]:
    """A recorded turn, streamed as it was recorded: one part per read, no pause."""
    for part in parts:
        yield [part]


def _call_json(call: ToolCall) -> TurnCallData:
    try:
        args: Any = parse_arguments(call.arguments)
    except ValueError:
        args = call.arguments
    return {"toolCallId": call.id, "name": call.name, "args": args}
