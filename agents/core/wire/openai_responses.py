"""OpenAI Responses API wire format (`POST /responses`, streamed), both ways, no I/O.

Semantic events keyed by `type`: text and reasoning deltas, function-call items,
`.done` events that resend full text (only the new suffix is emitted), and the
terminal `response.completed` / `response.incomplete` / `response.failed`.

Items are matched by `output_index` (text parts by `output_index` and
`content_index`), not by `item_id`: some servers (GitHub Copilot) send a new id on
every event, as the widely used clients allow. `error` events carry their details at
the top level or nested under `error`. Server-side tool items (`web_search_call`,
`file_search_call`, `code_interpreter_call`, `image_generation_call`, `mcp_call`)
become `ServerToolCall` + `ServerToolResult` parts and go back verbatim.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import msgspec

from agents.core.attachments import Attachment, after_results, shown
from agents.core.messages import (
    AssistantMessage,
    Finish,
    ModelRequest,
    ServerToolCall,
    ServerToolResult,
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
    request: ModelRequest,
    *,
    model: str,
    params: dict[str, Any] | None = None,
    accepts: Sequence[str] = (),
) -> dict[str, Any]:
    """The JSON body of a streamed Responses request (stateless: the whole input;
    `accepts`: the media types of attachments the model takes, as `input_image` and
    `input_file`)."""
    items: list[dict[str, Any]] = []
    held: list[tuple[str, tuple[Attachment, ...]]] = []  # tool results' attachments
    for msg in request.messages:
        if held and not isinstance(msg, ToolResultMessage):
            items.append(_held_results(held, accepts))
        if isinstance(msg, UserMessage):
            items.append({"role": "user", "content": _content(msg.text, msg.attachments, accepts)})
        elif isinstance(msg, AssistantMessage):
            items.extend(msg.server_blocks)  # server tool items go back as they came
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
            if msg.attachments:
                held.append((f"{msg.name} ({msg.tool_call_id})", msg.attachments))
    if held:
        items.append(_held_results(held, accepts))
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
    output = request.output
    if output is not None:
        if output.tool is not None:
            body["tool_choice"] = "required"  # its answer is a call of `output.tool`
        else:
            body["text"] = {
                "format": {
                    "type": "json_schema",
                    "name": output.name,
                    "schema": output.schema,
                    "strict": output.strict,
                }
            }
    if params:
        body.update(params)
    return body


def _content(
    text: str, attachments: tuple[Attachment, ...], accepts: Sequence[str]
) -> str | list[dict[str, Any]]:
    """A user item's content: its text, or with attachments a list of input parts."""
    if not attachments:
        return text
    parts: list[dict[str, Any]] = [{"type": "input_text", "text": text}] if text else []
    for kind, item in shown(attachments, accepts):
        if isinstance(item, str):
            parts.append({"type": "input_text", "text": item})
        elif kind == "image":
            parts.append({"type": "input_image", "image_url": item.data_url()})
        else:
            parts.append(
                {"type": "input_file", "filename": item.name, "file_data": item.data_url()}
            )
    return parts


def _held_results(
    held: list[tuple[str, tuple[Attachment, ...]]], accepts: Sequence[str]
) -> dict[str, Any]:
    """The results' attachments, in a user item right after them (`held` is emptied)."""
    return {"role": "user", "content": after_results(held, _content, accepts)}


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
    type: str | None = None


class _Response(msgspec.Struct):
    status: str = ""
    usage: _Usage | None = None
    incomplete_details: _IncompleteDetails | None = None
    error: _ErrorBody | None = None


class _Event(msgspec.Struct):
    type: str
    output_index: int = 0
    content_index: int = 0
    item_id: str = ""
    item: msgspec.Raw = msgspec.Raw()  # kept raw: server blocks go back verbatim
    delta: str = ""
    text: str = ""
    refusal: str = ""
    arguments: str | None = None
    response: _Response | None = None
    code: str | None = None
    message: str = ""
    error: _ErrorBody | None = None


_decode_event = msgspec.json.Decoder(_Event).decode
_decode_item = msgspec.json.Decoder(_Item).decode
_decode_any = msgspec.json.Decoder().decode
_RETRYABLE = frozenset(
    {
        "server_error",
        "rate_limit_exceeded",
        "rate_limit_error",
        "overloaded",
        "server_is_overloaded",
    }
)
_SERVER_ITEMS = {
    "web_search_call": "web_search",
    "file_search_call": "file_search",
    "code_interpreter_call": "code_interpreter",
    "image_generation_call": "image_generation",
    "mcp_call": "mcp",
    "mcp_list_tools": "mcp_list_tools",
}
_IGNORED_ITEMS = frozenset({"message", "reasoning", "function_call"})


class ResponsesNormalizer:
    """Turns one streamed Responses answer into `StreamPart`s."""

    def __init__(self) -> None:
        self.ignored: dict[str, int] = {}
        """Output item types with no meaning here, by kind (the provider logs them)."""
        self._keys: dict[int, int] = {}
        """Tool-call key by `output_index`."""
        self._args: dict[int, MonotonicText] = {}
        self._ended: set[int] = set()
        self._texts: dict[tuple[int, int], MonotonicText] = {}
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
        where = (event.output_index, event.content_index)
        if kind == "response.output_text.delta" or kind == "response.refusal.delta":
            return self._text(where, event.delta, full=False)
        if kind == "response.output_text.done":
            return self._text(where, event.text, full=True)
        if kind == "response.refusal.done":
            return self._text(where, event.refusal, full=True)
        if kind in ("response.reasoning_summary_text.delta", "response.reasoning_text.delta"):
            self._output = True
            return [ThinkingDelta(event.delta)] if event.delta else []
        if kind == "response.output_item.added" and event.item:
            return self._item_added(event.output_index, _decode_item(event.item))
        if kind == "response.function_call_arguments.delta":
            key = self._keys.get(event.output_index)
            if key is None or not event.delta:
                return []
            return [ToolCallArgs(key, self._args[key].append(event.delta))]
        if kind == "response.function_call_arguments.done":
            key = self._keys.get(event.output_index)
            if key is None or event.arguments is None:
                return []
            rest = self._args[key].full(event.arguments)
            return [ToolCallArgs(key, rest)] if rest else []
        if kind == "response.output_item.done" and event.item:
            return self._item_done(event.output_index, event.item)
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
        if kind == "error":  # details at the top level, or nested under `error`
            nested = event.error or _ErrorBody()
            code = event.code or nested.code or nested.type
            message = event.message or nested.message
            raise ProviderError(
                f"openai-responses stream error ({code or 'error'}): {message}",
                provider=PROVIDER,
                error_type=code,
                retryable=(code or "") in _RETRYABLE and not self._output,
            )
        return []  # lifecycle, content_part and other event types carry nothing we need

    def end(self) -> list[StreamPart]:
        """EOF: without a terminal event the stream is truncated."""
        if self._done:
            return []
        self._done = True
        raise StreamTruncated.at_eof(PROVIDER, "response.completed", after_output=self._output)

    def _text(self, where: tuple[int, int], text: str, *, full: bool) -> list[StreamPart]:
        tracker = self._texts.setdefault(where, MonotonicText())
        new = tracker.full(text) if full else tracker.append(text)
        if not new:
            return []
        self._output = True
        return [TextDelta(new)]

    def _item_added(self, index: int, item: _Item) -> list[StreamPart]:
        if item.type != "function_call":
            return []
        self._output = True
        key = self._next_key
        self._next_key += 1
        self._keys[index] = key
        self._args[key] = MonotonicText()
        parts: list[StreamPart] = [ToolCallStart(key, item.call_id or item.id, item.name)]
        if item.arguments:
            parts.append(ToolCallArgs(key, self._args[key].append(item.arguments)))
        return parts

    def _item_done(self, index: int, raw: msgspec.Raw) -> list[StreamPart]:
        item = _decode_item(raw)
        if item.type in _SERVER_ITEMS:
            return self._server_item(item.type, _decode_any(raw))
        if item.type not in _IGNORED_ITEMS:
            label = f"output item {item.type!r}"
            self.ignored[label] = self.ignored.get(label, 0) + 1
        key = self._keys.get(index)
        if key is None or key in self._ended:
            return []
        self._ended.add(key)
        parts: list[StreamPart] = []
        rest = self._args[key].full(item.arguments)
        if rest:
            parts.append(ToolCallArgs(key, rest))
        parts.append(ToolCallEnd(key))
        return parts

    def _server_item(self, kind: str, whole: dict[str, Any]) -> list[StreamPart]:
        """One server-run tool item: both its call and its outcome, sent back as it came."""
        self._output = True
        call_id = str(whole.get("id", ""))
        name = _SERVER_ITEMS[kind]
        shown = {k: v for k, v in whole.items() if k not in ("id", "type", "status", "output")}
        status = str(whole.get("status", ""))
        outcome = whole.get("output", whole.get("results", status))
        return [
            ServerToolCall(id=call_id, name=name, input=shown, raw=whole),
            ServerToolResult(
                tool_call_id=call_id,
                name=name,
                content=outcome,
                is_error=status in ("failed", "incomplete"),
            ),
        ]

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
