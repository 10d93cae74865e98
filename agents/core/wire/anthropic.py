"""Anthropic Messages wire format, both ways, with no I/O.

`encode_request` builds the request body (system prompt apart, tool results as
user `tool_result` blocks, signed thinking blocks sent back verbatim);
`AnthropicNormalizer` turns the streamed events into `StreamPart`s: text_delta,
input_json_delta, thinking_delta and signature_delta, cumulative usage, `ping`,
mid-stream `error` events, `message_stop` as the terminal event. Server tools
(`server_tool_use`, `mcp_tool_use` and every `*_tool_result` block: web search,
web fetch, code execution, run by Anthropic) become `ServerToolCall` and
`ServerToolResult` parts — shown, kept verbatim for the conversation, never run
here. Stop reasons pass through (`pause_turn`: the runner asks Claude to go on).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import msgspec

from agents.core.attachments import Attachment, shown
from agents.core.messages import (
    AssistantMessage,
    Finish,
    ModelRequest,
    ServerToolCall,
    ServerToolResult,
    StreamPart,
    TextDelta,
    ThinkingDelta,
    ThinkingEnd,
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

__all__ = ["AnthropicNormalizer", "encode_request"]

PROVIDER = "anthropic"
_RETRYABLE = frozenset({"overloaded_error", "api_error", "rate_limit_error", "timeout_error"})


def encode_request(
    request: ModelRequest,
    *,
    model: str,
    params: dict[str, Any] | None = None,
    accepts: Sequence[str] = (),
) -> dict[str, Any]:
    """The JSON body of a streamed Messages request (`accepts`: the media types of
    attachments the model takes, as `image` and `document` blocks)."""
    messages: list[dict[str, Any]] = []

    def add(role: str, blocks: list[dict[str, Any]]) -> None:
        if messages and messages[-1]["role"] == role:  # roles must alternate: merge
            messages[-1]["content"].extend(blocks)
        else:
            messages.append({"role": role, "content": blocks})

    for msg in request.messages:
        if isinstance(msg, UserMessage):
            text = [{"type": "text", "text": msg.text}] if msg.text or not msg.attachments else []
            add("user", text + _blocks(msg.attachments, accepts))
        elif isinstance(msg, ToolResultMessage):
            content: str | list[dict[str, Any]] = msg.content
            if msg.attachments:  # a tool result holds images and documents itself
                content = [{"type": "text", "text": msg.content or "(no text)"}]
                content += _blocks(msg.attachments, accepts)
            add(
                "user",
                [
                    {
                        "type": "tool_result",
                        "tool_use_id": msg.tool_call_id,
                        "content": content,
                        "is_error": msg.is_error,
                    }
                ],
            )
        elif isinstance(msg, AssistantMessage):
            add("assistant", _assistant_blocks(msg) or [{"type": "text", "text": ""}])
    body: dict[str, Any] = {
        "model": model,
        "max_tokens": 4096,
        "system": request.system,
        "messages": messages,
        "stream": True,
    }
    if request.tools:
        body["tools"] = [
            {"name": t.name, "description": t.description, "input_schema": t.parameters}
            for t in request.tools
        ]
    output = request.output
    if output is not None and output.tool is not None and "thinking" not in (params or {}):
        # The answer is a call of `output.tool`: forced, alone or among the agent's
        # tools. (With extended thinking Anthropic takes no forced tool choice: the
        # model is told to call it, and a text answer is validated just the same.)
        body["tool_choice"] = (
            {"type": "tool", "name": output.tool} if len(request.tools) == 1 else {"type": "any"}
        )
    if params:
        body.update(params)
    return body


def _assistant_blocks(msg: AssistantMessage) -> list[dict[str, Any]]:
    """A model turn as content blocks: its thinking (signed, sent back verbatim), the
    server tools' blocks as they came, its text, its tool calls."""
    blocks: list[dict[str, Any]] = []
    for block in msg.thinking_blocks:
        if block.redacted is not None:
            blocks.append({"type": "redacted_thinking", "data": block.redacted})
        else:
            thinking = {"type": "thinking", "thinking": block.thinking}
            blocks.append({**thinking, "signature": block.signature})
    blocks.extend(msg.server_blocks)
    if msg.text:
        blocks.append({"type": "text", "text": msg.text})
    for call in msg.tool_calls:
        try:
            args = msgspec.json.decode(call.arguments) if call.arguments.strip() else {}
        except msgspec.DecodeError:
            args = {}
        use = {"type": "tool_use", "id": call.id, "name": call.name}
        blocks.append({**use, "input": args if isinstance(args, dict) else {}})
    return blocks


def _blocks(attachments: tuple[Attachment, ...], accepts: Sequence[str]) -> list[dict[str, Any]]:
    """Attachments as content blocks: `image` and `document` with a base64 source."""
    out: list[dict[str, Any]] = []
    for kind, item in shown(attachments, accepts):
        if isinstance(item, str):
            out.append({"type": "text", "text": item})
        else:
            source = {"type": "base64", "media_type": item.media_type, "data": item.base64()}
            block: dict[str, Any] = {"type": kind if kind == "image" else "document"}
            block["source"] = source
            if kind != "image":
                block["title"] = item.name
            out.append(block)
    return out


class _Block(msgspec.Struct):
    type: str
    id: str = ""
    name: str = ""
    text: str = ""
    thinking: str = ""
    data: str = ""
    tool_use_id: str = ""


_SERVER_CALLS = frozenset({"server_tool_use", "mcp_tool_use"})
_KNOWN_BLOCKS = frozenset({"text", "thinking", "redacted_thinking", "tool_use"})
_KNOWN_DELTAS = frozenset(
    {"text_delta", "input_json_delta", "thinking_delta", "signature_delta", "citations_delta"}
)


def is_server_result(kind: str) -> bool:
    """Is it a server tool's result (`web_search_tool_result`, `mcp_tool_result`, …)?"""
    return kind.endswith("_tool_result")


class _Delta(msgspec.Struct):
    type: str = ""
    text: str = ""
    partial_json: str = ""
    thinking: str = ""
    signature: str = ""
    stop_reason: str | None = None


class _Usage(msgspec.Struct):
    input_tokens: int | None = None
    output_tokens: int | None = None


class _Message(msgspec.Struct):
    usage: _Usage | None = None


class _Error(msgspec.Struct):
    type: str = "error"
    message: str = ""


class _Event(msgspec.Struct):
    type: str
    index: int = 0
    content_block: msgspec.Raw = msgspec.Raw()  # kept raw: server blocks go back verbatim
    delta: _Delta | None = None
    usage: _Usage | None = None
    message: _Message | None = None
    error: _Error | None = None


_decode_event = msgspec.json.Decoder(_Event).decode
_decode_block = msgspec.json.Decoder(_Block).decode
_decode_any = msgspec.json.Decoder().decode


class AnthropicNormalizer:
    """Turns one streamed Messages response into `StreamPart`s."""

    def __init__(self) -> None:
        self.ignored: dict[str, int] = {}
        """Block and delta types with no meaning here, by kind (the provider logs them)."""
        self._server: dict[int, tuple[dict[str, Any], list[str]]] = {}
        """Open server tool calls: the block as started, and its input JSON pieces."""
        self._blocks: dict[int, _Block] = {}
        self._signatures: dict[int, str] = {}
        self._text: dict[int, MonotonicText] = {}
        self._input_tokens = 0
        self._output_tokens = 0
        self._stop_reason: str | None = None
        self._done = False
        self._output = False

    def feed_event(self, event: SseEvent) -> list[StreamPart]:
        """Normalize one SSE event."""
        return self.feed(event.event, event.data)

    def feed(self, event_name: str, data: str) -> list[StreamPart]:
        """Normalize one SSE event (its `event:` name and `data`)."""
        if self._done:
            return []
        try:
            event = _decode_event(data)
        except msgspec.DecodeError as exc:
            raise ProviderError(
                f"anthropic: malformed {event_name or 'stream'} event ({exc}): {data[:200]!r}",
                provider=PROVIDER,
            ) from exc
        kind = event.type
        if kind == "content_block_delta" and event.delta is not None:
            return self._delta(event.index, event.delta)
        if kind == "content_block_start" and event.content_block:
            return self._start(event.index, event.content_block)
        if kind == "content_block_stop":
            return self._stop(event.index)
        if kind == "message_start":
            if event.message is not None and event.message.usage is not None:
                self._usage(event.message.usage)
            return []
        if kind == "message_delta":
            if event.usage is not None:
                self._usage(event.usage)
            if event.delta is not None and event.delta.stop_reason:
                self._stop_reason = event.delta.stop_reason
            return []
        if kind == "message_stop":
            self._done = True
            return [
                Finish(self._stop_reason or "unknown"),
                UsageReport(self._input_tokens, self._output_tokens),
            ]
        if kind == "error":
            err = event.error or _Error()
            raise ProviderError(
                f"anthropic stream error ({err.type}): {err.message}",
                provider=PROVIDER,
                error_type=err.type,
                retryable=err.type in _RETRYABLE,
            )
        return []  # ping and event types added later: ignored, as the API asks

    def end(self) -> list[StreamPart]:
        """The HTTP body ended; without `message_stop` the stream is truncated."""
        if self._done:
            return []
        self._done = True
        raise StreamTruncated.at_eof(PROVIDER, "message_stop", after_output=self._output)

    def _usage(self, usage: _Usage) -> None:
        # message_delta usage is cumulative: the latest value wins.
        if usage.input_tokens is not None:
            self._input_tokens = usage.input_tokens
        if usage.output_tokens is not None:
            self._output_tokens = usage.output_tokens

    def _start(self, index: int, raw: msgspec.Raw) -> list[StreamPart]:
        block = _decode_block(raw)
        self._blocks[index] = block
        if block.type in _SERVER_CALLS:
            self._output = True
            self._server[index] = (_decode_any(raw), [])
            return []
        if is_server_result(block.type):
            self._output = True
            whole: dict[str, Any] = _decode_any(raw)
            content = whole.get("content")
            failed = isinstance(content, dict) and str(content.get("type", "")).endswith("_error")
            return [
                ServerToolResult(
                    tool_call_id=block.tool_use_id,
                    name=block.type.removesuffix("_tool_result"),
                    content=content,
                    is_error=failed,
                    raw=whole,
                )
            ]
        if block.type not in _KNOWN_BLOCKS:
            label = f"content block {block.type!r}"
            self.ignored[label] = self.ignored.get(label, 0) + 1
        if block.type == "tool_use":
            self._output = True
            return [ToolCallStart(index, block.id, block.name)]
        if block.type == "text":
            self._text[index] = MonotonicText()
            return self._text_parts(index, block.text, full=False)
        if block.type == "thinking" and block.thinking:
            return [ThinkingDelta(block.thinking)]
        return []

    def _delta(self, index: int, delta: _Delta) -> list[StreamPart]:
        kind = delta.type
        if kind == "text_delta":
            return self._text_parts(index, delta.text, full=False)
        if kind == "input_json_delta":
            server = self._server.get(index)
            if server is not None:
                server[1].append(delta.partial_json)
                return []
            return [ToolCallArgs(index, delta.partial_json)] if delta.partial_json else []
        if kind == "thinking_delta":
            self._output = True
            return [ThinkingDelta(delta.thinking)] if delta.thinking else []
        if kind == "signature_delta":
            self._signatures[index] = self._signatures.get(index, "") + delta.signature
        elif kind not in _KNOWN_DELTAS:  # citations_delta: metadata on text, dropped
            label = f"delta {kind!r}"
            self.ignored[label] = self.ignored.get(label, 0) + 1
        return []

    def _text_parts(self, index: int, text: str, *, full: bool) -> list[StreamPart]:
        tracker = self._text.setdefault(index, MonotonicText())
        new = tracker.full(text) if full else tracker.append(text)
        if new:
            self._output = True
            return [TextDelta(new)]
        return []

    def _stop(self, index: int) -> list[StreamPart]:
        block = self._blocks.get(index)
        if block is None:
            return []
        server = self._server.pop(index, None)
        if server is not None:
            whole, pieces = server
            text = "".join(pieces)
            try:
                args = _decode_any(text) if text.strip() else whole.get("input", {})
            except msgspec.DecodeError:
                args = text
            whole["input"] = args
            return [ServerToolCall(id=block.id, name=block.name, input=args, raw=whole)]
        if block.type == "tool_use":
            return [ToolCallEnd(index)]
        if block.type == "thinking":
            return [ThinkingEnd(signature=self._signatures.get(index, ""))]
        if block.type == "redacted_thinking":
            return [ThinkingEnd(redacted=block.data)]
        return []
