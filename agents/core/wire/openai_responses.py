"""OpenAI Responses API wire format (`POST /responses`, streamed), both ways, no I/O.

Semantic events keyed by `type`: text and reasoning deltas, function-call items
whose argument deltas are mapped through `item_id`, `.done` events that resend
full text (only the new suffix is emitted), and the terminal
`response.completed` / `response.incomplete` / `response.failed`.
"""

from __future__ import annotations

from typing import Any

import msgspec

from agents.core.messages import (
    AssistantMessage,
    Finish,
    ModelRequest,
    StreamPart,
    TextDelta,
    ThinkingDelta,
    ToolCallArgs,
    ToolCallEnd,
    ToolCallStart,
    ToolResultMessage,
    UsageReport,
    UserMessage,
)
from agents.core.monotonic import MonotonicText
from agents.core.sse import SseEvent
from agents.errors import ProviderError, StreamTruncated

__all__ = ["ResponsesNormalizer", "encode_request"]

PROVIDER = "openai-responses"


def encode_request(
    request: ModelRequest, *, model: str, params: dict[str, Any] | None = None
) -> dict[str, Any]:
    """The JSON body of a streamed Responses request (stateless: the whole input)."""
    items: list[dict[str, Any]] = []
    for msg in request.messages:
        if isinstance(msg, UserMessage):
            items.append({"role": "user", "content": msg.text})
        elif isinstance(msg, AssistantMessage):
            if msg.text:
                items.append({"role": "assistant", "content": msg.text})
            for call in msg.tool_calls:
                items.append(
                    {
                        "type": "function_call",
                        "call_id": call.id,
                        "name": call.name,
                        "arguments": call.arguments or "{}",
                    }
                )
        elif isinstance(msg, ToolResultMessage):
            items.append(
                {"type": "function_call_output", "call_id": msg.tool_call_id, "output": msg.content}
            )
    body: dict[str, Any] = {
        "model": model,
        "instructions": request.system,
        "input": items,
        "stream": True,
        "store": False,
    }
    if request.tools:
        body["tools"] = [
            {
                "type": "function",
                "name": t.name,
                "description": t.description,
                "parameters": t.parameters,
            }
            for t in request.tools
        ]
    if params:
        body.update(params)
    return body


class _Item(msgspec.Struct):
    type: str = ""
    id: str = ""
    call_id: str = ""
    name: str = ""
    arguments: str = ""


class _Usage(msgspec.Struct):
    input_tokens: int = 0
    output_tokens: int = 0


class _IncompleteDetails(msgspec.Struct):
    reason: str = "incomplete"


class _ErrorBody(msgspec.Struct):
    code: str | None = None
    message: str = ""


class _Response(msgspec.Struct):
    status: str = ""
    usage: _Usage | None = None
    incomplete_details: _IncompleteDetails | None = None
    error: _ErrorBody | None = None


class _Event(msgspec.Struct):
    type: str
    output_index: int = 0
    item_id: str = ""
    item: _Item | None = None
    delta: str = ""
    text: str = ""
    arguments: str | None = None
    response: _Response | None = None
    code: str | None = None
    message: str = ""


_decode_event = msgspec.json.Decoder(_Event).decode
_RETRYABLE = frozenset({"server_error", "rate_limit_exceeded", "overloaded"})


class ResponsesNormalizer:
    """Turns one streamed Responses answer into `StreamPart`s."""

    def __init__(self) -> None:
        self._keys: dict[str, int] = {}
        self._args: dict[int, MonotonicText] = {}
        self._ended: set[int] = set()
        self._texts: dict[str, MonotonicText] = {}
        self._next_key = 0
        self._done = False
        self._output = False

    def feed_event(self, event: SseEvent) -> list[StreamPart]:
        """Normalize one SSE event (its `type` is in the data)."""
        return self.feed(event.data)

    def feed(self, data: str) -> list[StreamPart]:
        """Normalize one SSE event's data."""
        if self._done:
            return []
        try:
            event = _decode_event(data)
        except msgspec.DecodeError as exc:
            raise ProviderError(
                f"openai-responses: malformed event ({exc}): {data[:200]!r}", provider=PROVIDER
            ) from exc
        kind = event.type
        if kind == "response.output_text.delta" or kind == "response.refusal.delta":
            return self._text(event.item_id, event.delta, full=False)
        if kind == "response.output_text.done":
            return self._text(event.item_id, event.text, full=True)
        if kind in ("response.reasoning_summary_text.delta", "response.reasoning_text.delta"):
            self._output = True
            return [ThinkingDelta(event.delta)] if event.delta else []
        if kind == "response.output_item.added" and event.item is not None:
            return self._item_added(event.item)
        if kind == "response.function_call_arguments.delta":
            key = self._keys.get(event.item_id)
            if key is None or not event.delta:
                return []
            return [ToolCallArgs(key, self._args[key].append(event.delta))]
        if kind == "response.function_call_arguments.done":
            key = self._keys.get(event.item_id)
            if key is None or event.arguments is None:
                return []
            rest = self._args[key].full(event.arguments)
            return [ToolCallArgs(key, rest)] if rest else []
        if kind == "response.output_item.done" and event.item is not None:
            return self._item_done(event.item)
        if kind == "response.completed":
            return self._finish(event.response, "stop")
        if kind == "response.incomplete":
            details = event.response.incomplete_details if event.response else None
            return self._finish(event.response, details.reason if details else "incomplete")
        if kind == "response.failed":
            err = event.response.error if event.response and event.response.error else _ErrorBody()
            raise ProviderError(
                f"openai-responses: response failed ({err.code or 'error'}): {err.message}",
                provider=PROVIDER,
                error_type=err.code,
                retryable=(err.code or "") in _RETRYABLE and not self._output,
            )
        if kind == "error":
            raise ProviderError(
                f"openai-responses stream error ({event.code or 'error'}): {event.message}",
                provider=PROVIDER,
                error_type=event.code,
                retryable=(event.code or "") in _RETRYABLE,
            )
        return []  # lifecycle, content_part and other event types carry nothing we need

    def end(self) -> list[StreamPart]:
        """EOF: without a terminal event the stream is truncated."""
        if self._done:
            return []
        self._done = True
        raise StreamTruncated.at_eof(PROVIDER, "response.completed", after_output=self._output)

    def _text(self, item_id: str, text: str, *, full: bool) -> list[StreamPart]:
        tracker = self._texts.setdefault(item_id, MonotonicText())
        new = tracker.full(text) if full else tracker.append(text)
        if not new:
            return []
        self._output = True
        return [TextDelta(new)]

    def _item_added(self, item: _Item) -> list[StreamPart]:
        if item.type != "function_call":
            return []
        self._output = True
        key = self._next_key
        self._next_key += 1
        self._keys[item.id or item.call_id] = key
        self._args[key] = MonotonicText()
        parts: list[StreamPart] = [ToolCallStart(key, item.call_id or item.id, item.name)]
        if item.arguments:
            parts.append(ToolCallArgs(key, self._args[key].append(item.arguments)))
        return parts

    def _item_done(self, item: _Item) -> list[StreamPart]:
        key = self._keys.get(item.id or item.call_id)
        if key is None or key in self._ended:
            return []
        self._ended.add(key)
        parts: list[StreamPart] = []
        rest = self._args[key].full(item.arguments)
        if rest:
            parts.append(ToolCallArgs(key, rest))
        parts.append(ToolCallEnd(key))
        return parts

    def _finish(self, response: _Response | None, reason: str) -> list[StreamPart]:
        self._done = True
        parts: list[StreamPart] = []
        for key in sorted(self._args):
            if key not in self._ended:
                self._ended.add(key)
                parts.append(ToolCallEnd(key))
        parts.append(Finish(reason))
        usage = response.usage if response is not None else None
        if usage is not None:
            parts.append(UsageReport(usage.input_tokens, usage.output_tokens))
        return parts
