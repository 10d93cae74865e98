"""OpenAI Chat Completions wire format, both ways, with no I/O.

`encode_request` builds the request body from a `ModelRequest`;
`OpenAIChatNormalizer` turns the streamed chunks into `StreamPart`s, hardened
against the quirks of OpenAI-compatible servers (docs/providers.md lists each
with its source). Feed it the `data` of each SSE event, then call `end()` at EOF.
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
    StreamPart,
    TextDelta,
    ThinkingDelta,
    ToolCallArgs,
    ToolCallStart,
    ToolResultMessage,
    UsageReport,
    UserMessage,
)
from agents.core.monotonic import MonotonicText
from agents.core.sse import SseEvent
from agents.errors import ProviderError, StreamTruncated

__all__ = ["OpenAIChatNormalizer", "encode_request"]

PROVIDER = "openai"
_RETRYABLE = frozenset({"server_error", "rate_limit_error", "overloaded_error", "timeout"})


def encode_request(
    request: ModelRequest,
    *,
    model: str,
    params: dict[str, Any] | None = None,
    accepts: Sequence[str] = (),
) -> dict[str, Any]:
    """The JSON body of a streamed Chat Completions request (`accepts`: the media types
    of attachments the model takes: `image_url` and `file` parts)."""
    messages: list[dict[str, Any]] = [{"role": "system", "content": request.system}]
    held: list[tuple[str, tuple[Attachment, ...]]] = []  # tool results' attachments
    for msg in request.messages:
        if held and not isinstance(msg, ToolResultMessage):
            messages.append(_held_results(held, accepts))
        if isinstance(msg, UserMessage):
            messages.append(
                {"role": "user", "content": _content(msg.text, msg.attachments, accepts)}
            )
        elif isinstance(msg, AssistantMessage):
            out: dict[str, Any] = {"role": "assistant", "content": msg.text or None}
            if msg.tool_calls:
                out["tool_calls"] = [
                    {
                        "id": call.id,
                        "type": "function",
                        "function": {"name": call.name, "arguments": call.arguments or "{}"},
                    }
                    for call in msg.tool_calls
                ]
            messages.append(out)
        elif isinstance(msg, ToolResultMessage):
            messages.append(
                {"role": "tool", "tool_call_id": msg.tool_call_id, "content": msg.content}
            )
            if msg.attachments:
                held.append((f"{msg.name} ({msg.tool_call_id})", msg.attachments))
    if held:
        messages.append(_held_results(held, accepts))
    body: dict[str, Any] = {
        "model": model,
        "messages": messages,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    if request.tools:
        body["tools"] = [
            {
                "type": "function",
                "function": {
                    "name": tool.name,
                    "description": tool.description,
                    "parameters": tool.parameters,
                },
            }
            for tool in request.tools
        ]
    output = request.output
    if output is not None:
        if output.tool is not None:
            body["tool_choice"] = "required"  # its answer is a call of `output.tool`
        else:
            body["response_format"] = {
                "type": "json_schema",
                "json_schema": {
                    "name": output.name,
                    "schema": output.schema,
                    "strict": output.strict,
                },
            }
    if params:
        body.update(params)
    return body


def _content(
    text: str, attachments: tuple[Attachment, ...], accepts: Sequence[str]
) -> str | list[dict[str, Any]]:
    """A user message's content: its text, or with attachments a list of parts."""
    if not attachments:
        return text
    parts: list[dict[str, Any]] = [{"type": "text", "text": text}] if text else []
    for kind, item in shown(attachments, accepts):
        if isinstance(item, str):
            parts.append({"type": "text", "text": item})
        elif kind == "image":
            parts.append({"type": "image_url", "image_url": {"url": item.data_url()}})
        else:
            parts.append(
                {"type": "file", "file": {"filename": item.name, "file_data": item.data_url()}}
            )
    return parts


def _held_results(
    held: list[tuple[str, tuple[Attachment, ...]]], accepts: Sequence[str]
) -> dict[str, Any]:
    """A tool message holds no image: the results' attachments follow them in a user
    message (and `held` is emptied)."""
    return {"role": "user", "content": after_results(held, _content, accepts)}


class _Function(msgspec.Struct):
    name: str | None = None
    arguments: str | None = None


class _ToolCallFragment(msgspec.Struct):
    index: int | None = None
    id: str | None = None
    function: _Function | None = None


class _Delta(msgspec.Struct):
    content: Any = None
    refusal: Any = None
    reasoning_content: Any = None
    reasoning: Any = None
    tool_calls: list[_ToolCallFragment] | None = None


class _Choice(msgspec.Struct):
    index: int = 0
    delta: _Delta | None = None
    finish_reason: str | None = None


class _Usage(msgspec.Struct):
    prompt_tokens: int = 0
    completion_tokens: int = 0


class _Error(msgspec.Struct):
    message: str = ""
    type: str | None = None
    code: str | int | None = None


class _Chunk(msgspec.Struct):
    choices: list[_Choice] | None = None
    usage: _Usage | None = None
    error: _Error | None = None


_decode_chunk = msgspec.json.Decoder(_Chunk).decode


class _Slot(msgspec.Struct):
    key: int
    id: str
    name: str
    started: bool
    pending_args: list[str]


_TEXT_PARTS = frozenset({"text", "output_text", "refusal"})
_THINKING_PARTS = frozenset({"thinking", "reasoning", "reasoning_text"})


def _part_text(value: Any) -> str:
    """The text of a part's payload: a string, or a list of `{type: text, text}` chunks."""
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        return "".join(_part_text(item.get("text")) for item in value if isinstance(item, dict))
    return ""


def content_parts(content: Any, ignored: dict[str, int]) -> list[StreamPart]:
    """`delta.content` as text and thinking deltas: a string, or a list of typed parts.

    Mistral's reasoning models send `[{type: "thinking", thinking: [{type: "text",
    text}]}, {type: "text", text}]`; others use `output_text`, `refusal` or
    `reasoning` parts. A part of another type that carries a string `text` counts
    as text; anything else is counted in `ignored` (the provider logs it), never
    dropped without a trace.
    """
    if isinstance(content, str):
        return [TextDelta(content)] if content else []
    if not isinstance(content, list):
        if content is not None:
            label = f"content of type {type(content).__name__}"
            ignored[label] = ignored.get(label, 0) + 1
        return []
    parts: list[StreamPart] = []
    cls: type[TextDelta] | type[ThinkingDelta] | None
    for item in content:
        kind = item.get("type") if isinstance(item, dict) else None
        if not isinstance(item, dict):
            text, cls = "", None
        elif kind in _THINKING_PARTS:
            text = _part_text(item.get(kind) or item.get("text") or item.get("summary"))
            cls = ThinkingDelta
        elif kind in _TEXT_PARTS or isinstance(item.get("text"), str):
            text = _part_text(item.get("text") if kind != "refusal" else item.get("refusal"))
            cls = TextDelta
        else:
            text, cls = "", None
        if cls is None:
            label = f"content part {kind!r}"
            ignored[label] = ignored.get(label, 0) + 1
        elif text:
            parts.append(cls(text))
    return parts


class OpenAIChatNormalizer:
    """Turns one streamed Chat Completions response into `StreamPart`s.

    Tool-call fragments are keyed by their `index`, with the fixes the wild needs:
    a missing index continues the last call unless a new id appears; a fragment
    at an occupied index with a different non-empty id starts a new call; `""`
    ids count as no id; ids and names are never concatenated; missing ids are
    synthesized as `call_<n>`. Only choice 0 is read (we always ask for n=1).
    `delta.content` may be a string or a list of typed parts (`content_parts`).
    """

    def __init__(self) -> None:
        self.ignored: dict[str, int] = {}
        """What the stream carried that has no meaning here, by kind (logged)."""
        self._slots: dict[int, _Slot] = {}
        self._by_id: dict[str, _Slot] = {}
        self._last: _Slot | None = None
        self._next_key = 0
        self._finished = False
        self._done = False
        self._saw_output = False
        self._text = MonotonicText()

    @property
    def finished(self) -> bool:
        """True once a finish reason or `[DONE]` was seen."""
        return self._finished

    def feed_event(self, event: SseEvent) -> list[StreamPart]:
        """Normalize one SSE event (an `event: error` is a provider error)."""
        if event.event == "error":
            raise ProviderError(
                f"openai stream error event: {event.data[:500]}", provider=PROVIDER, retryable=True
            )
        return self.feed(event.data)

    def feed(self, data: str) -> list[StreamPart]:
        """Normalize the `data` of one SSE event."""
        if self._done:
            return []
        if data.startswith("[DONE]"):
            self._done = True
            return self._finish("unknown") if not self._finished else []
        try:
            chunk = _decode_chunk(data)
        except msgspec.DecodeError as exc:
            raise ProviderError(
                f"openai: malformed stream chunk ({exc}): {data[:200]!r}", provider=PROVIDER
            ) from exc
        if chunk.error is not None:
            err = chunk.error
            raise ProviderError(
                f"openai stream error ({err.type or err.code or 'error'}): {err.message}",
                provider=PROVIDER,
                error_type=err.type,
                retryable=err.type in _RETRYABLE,
            )
        parts: list[StreamPart] = []
        for choice in chunk.choices or ():
            if choice.index != 0:
                continue
            delta = choice.delta
            if delta is not None:
                self._delta(delta, parts, final=bool(choice.finish_reason))
            if choice.finish_reason and not self._finished:
                parts.extend(self._finish(choice.finish_reason))
        if chunk.usage is not None:
            usage = chunk.usage
            parts.append(UsageReport(usage.prompt_tokens, usage.completion_tokens))
        return parts

    def end(self) -> list[StreamPart]:
        """The HTTP body ended. A finish-less, DONE-less stream is truncated."""
        if self._done or self._finished:
            self._done = True
            return []
        self._done = True
        raise StreamTruncated.at_eof(
            PROVIDER, "its finish_reason or [DONE]", after_output=self._saw_output
        )

    # -- internals ------------------------------------------------------------

    def _delta(self, delta: _Delta, parts: list[StreamPart], *, final: bool) -> None:
        for value, cls in (
            (delta.reasoning_content, ThinkingDelta),
            (delta.reasoning, ThinkingDelta),
        ):
            if isinstance(value, str) and value:
                self._saw_output = True
                parts.append(cls(value))
        typed = content_parts(delta.content, self.ignored) if delta.content else []
        if isinstance(delta.refusal, str) and delta.refusal:
            typed.append(TextDelta(delta.refusal))
        for part in typed:
            if isinstance(part, ThinkingDelta):
                self._saw_output = True
                parts.append(part)
                continue
            assert isinstance(part, TextDelta)
            value = part.text
            # Some proxies repeat the whole text on the finishing chunk: emit only
            # what is new (monotonic append), so the deltas still join to the text.
            if final and self._text.text and value.startswith(self._text.text):
                value = self._text.full(value)
            else:
                self._text.append(value)
            if value:
                self._saw_output = True
                parts.append(TextDelta(value))
        if delta.tool_calls:
            for fragment in delta.tool_calls:
                self._fragment(fragment, parts)

    def _fragment(self, frag: _ToolCallFragment, parts: list[StreamPart]) -> None:
        self._saw_output = True
        fid = frag.id or None
        fn = frag.function
        name = fn.name if fn is not None and fn.name else None
        args = fn.arguments if fn is not None and fn.arguments else ""
        slot = self._find_slot(frag.index, fid)
        if slot is None:
            slot = self._new_slot(frag.index, fid)
        if not slot.started and name:
            slot.name = name
        if not slot.started and slot.name:
            slot.started = True
            parts.append(ToolCallStart(slot.key, slot.id, slot.name))
            for pending in slot.pending_args:
                parts.append(ToolCallArgs(slot.key, pending))
            slot.pending_args.clear()
        if args:
            if slot.started:
                parts.append(ToolCallArgs(slot.key, args))
            else:
                slot.pending_args.append(args)
        self._last = slot

    def _find_slot(self, index: int | None, fid: str | None) -> _Slot | None:
        if index is None:
            if fid is not None:
                return self._by_id.get(fid)  # unknown id: a new call
            return self._last
        slot = self._slots.get(index)
        if slot is None and fid is not None:
            return self._by_id.get(fid)
        if slot is not None and fid is not None and fid != slot.id:
            # Same index, different id: a parallel call from a server that numbers
            # every call 0 (or an id we have seen under another index).
            return self._by_id.get(fid)
        return slot

    def _new_slot(self, index: int | None, fid: str | None) -> _Slot:
        key = self._next_key
        self._next_key += 1
        call_id = fid if fid is not None and fid not in self._by_id else f"call_{key}"
        slot = _Slot(key=key, id=call_id, name="", started=False, pending_args=[])
        self._slots[index if index is not None else -1 - key] = slot
        self._by_id[call_id] = slot
        return slot

    def _finish(self, reason: str) -> list[StreamPart]:
        self._finished = True
        parts: list[StreamPart] = []
        for slot in self._by_id.values():
            if not slot.started:  # never got a name: surface it, the loop reports it
                slot.started = True
                parts.append(ToolCallStart(slot.key, slot.id, slot.name))
                parts.extend(ToolCallArgs(slot.key, a) for a in slot.pending_args)
                slot.pending_args.clear()
        parts.append(Finish(reason))
        return parts
