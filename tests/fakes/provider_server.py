"""A fake model provider speaking real HTTP + SSE on loopback, in three wire formats.

Test double for integration tests: a `Brain` decides, from the request's system
prompt (`ROLE: <role>` on its first line) and conversation, what to stream; the
server writes it as `text/event-stream` in the format the path asks for —
`/chat/completions` (OpenAI Chat Completions), `/responses` (OpenAI Responses) or
`/messages` (Anthropic) — with small pauses, so parallel agents really interleave
on the wire. The brain sees every format's conversation as the same simple list
of `{role: user|assistant|tool, content}`.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import trio

__all__ = ["Brain", "FakeOpenAI", "Reply", "chunk", "serve_fake_openai", "sse"]


def sse(payload: dict[str, Any] | str) -> bytes:
    """One SSE event carrying `payload` (a dict is JSON-encoded)."""
    data = payload if isinstance(payload, str) else json.dumps(payload)
    return f"data: {data}\n\n".encode()


def chunk(delta: dict[str, Any] | None = None, finish: str | None = None, **extra: Any) -> bytes:
    """A `chat.completion.chunk` with one choice."""
    choice: dict[str, Any] = {"index": 0, "delta": delta or {}, "finish_reason": finish}
    body = {
        "id": "chatcmpl-fake",
        "object": "chat.completion.chunk",
        "created": 1700000000,
        "model": "fake",
        "choices": [choice],
        **extra,
    }
    return sse(body)


@dataclass
class Reply:
    """What the fake answers to one request."""

    text: str = ""
    calls: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    status: int = 200
    error_body: str = ""
    hang: bool = False
    """Stream the text, then never finish (a stalled model)."""
    truncate: bool = False
    """Close the connection after the text, without finish_reason or [DONE]."""
    usage: tuple[int, int] = (10, 5)
    raw: list[bytes] | None = None
    """Send exactly these bytes chunks instead."""
    retry_after: str | None = None
    """Retry-After header of an error status."""
    fail_midway: bool = False
    """Stream the text, then a provider error event (in the format's own way)."""
    thinking: str = ""
    """Anthropic: a signed thinking block before the text."""
    bad_args: bool = False
    """Send tool-call arguments that are not valid JSON (the closing brace is lost)."""
    cut: bool = False
    """The turn ends cut by the output limit: finish_reason `length` (chat), stop_reason
    `max_tokens` (Anthropic), `response.incomplete` for `max_output_tokens` (Responses)."""

    def _raw_args(self, args: dict[str, Any]) -> str:
        raw = json.dumps(args)
        return raw[:-1] if self.bad_args else raw

    def chunks(self, fmt: str = "openai") -> list[bytes]:
        if self.raw is not None:
            return self.raw
        if fmt == "anthropic":
            return self._anthropic()
        if fmt == "responses":
            return self._responses()
        return self._openai()

    def _words(self) -> list[str]:
        words = self.text.split(" ")
        return [
            w if i == len(words) - 1 else w + " "
            for i, w in enumerate(words)
            if w or i < len(words) - 1
        ]

    def _anthropic(self) -> list[bytes]:
        def ev(kind: str, **data: Any) -> bytes:
            return f"event: {kind}\ndata: {json.dumps({'type': kind, **data})}\n\n".encode()

        out = [
            ev(
                "message_start",
                message={
                    "id": "msg",
                    "content": [],
                    "usage": {"input_tokens": self.usage[0], "output_tokens": 1},
                },
            )
        ]
        index = 0
        if self.thinking:
            out.append(
                ev(
                    "content_block_start",
                    index=index,
                    content_block={"type": "thinking", "thinking": ""},
                )
            )
            out.append(
                ev(
                    "content_block_delta",
                    index=index,
                    delta={"type": "thinking_delta", "thinking": self.thinking},
                )
            )
            out.append(
                ev(
                    "content_block_delta",
                    index=index,
                    delta={"type": "signature_delta", "signature": f"sig:{self.thinking}"},
                )
            )
            out.append(ev("content_block_stop", index=index))
            index += 1
        if self.text:
            out.append(
                ev("content_block_start", index=index, content_block={"type": "text", "text": ""})
            )
            out.append(ev("ping"))
            for word in self._words():
                out.append(
                    ev(
                        "content_block_delta",
                        index=index,
                        delta={"type": "text_delta", "text": word},
                    )
                )
            if self.fail_midway:
                return [
                    *out,
                    ev("error", error={"type": "api_error", "message": "internal failure"}),
                ]
            out.append(ev("content_block_stop", index=index))
            index += 1
        if self.hang or self.truncate:
            return out
        for n, (name, args) in enumerate(self.calls):
            raw = self._raw_args(args)
            out.append(
                ev(
                    "content_block_start",
                    index=index,
                    content_block={
                        "type": "tool_use",
                        "id": f"toolu_{n}",
                        "name": name,
                        "input": {},
                    },
                )
            )
            for piece in ("", raw[: len(raw) // 2], raw[len(raw) // 2 :]):
                out.append(
                    ev(
                        "content_block_delta",
                        index=index,
                        delta={"type": "input_json_delta", "partial_json": piece},
                    )
                )
            out.append(ev("content_block_stop", index=index))
            index += 1
        stop = "tool_use" if self.calls else "max_tokens" if self.cut else "end_turn"
        out.append(
            ev("message_delta", delta={"stop_reason": stop}, usage={"output_tokens": self.usage[1]})
        )
        out.append(ev("message_stop"))
        return out

    def _responses(self) -> list[bytes]:
        seq = iter(range(10**6))

        def ev(kind: str, **data: Any) -> bytes:
            payload = json.dumps({"type": kind, "sequence_number": next(seq), **data})
            return f"event: {kind}\ndata: {payload}\n\n".encode()

        out = [
            ev("response.created", response={"id": "resp", "status": "in_progress", "output": []})
        ]
        index = 0
        if self.text:
            out.append(
                ev(
                    "response.output_item.added",
                    output_index=0,
                    item={"type": "message", "id": "msg_0"},
                )
            )
            for word in self._words():
                out.append(
                    ev(
                        "response.output_text.delta",
                        item_id="msg_0",
                        output_index=0,
                        content_index=0,
                        delta=word,
                    )
                )
            if self.fail_midway:
                return [*out, ev("error", code="server_error", message="internal failure")]
            out.append(
                ev(
                    "response.output_text.done",
                    item_id="msg_0",
                    output_index=0,
                    content_index=0,
                    text=self.text,
                )
            )
            out.append(
                ev(
                    "response.output_item.done",
                    output_index=0,
                    item={"type": "message", "id": "msg_0"},
                )
            )
            index = 1
        if self.hang or self.truncate:
            return out
        for n, (name, args) in enumerate(self.calls):
            raw = self._raw_args(args)
            item = {
                "type": "function_call",
                "id": f"fc_{n}",
                "call_id": f"call_{n}",
                "name": name,
                "arguments": "",
            }
            out.append(ev("response.output_item.added", output_index=index + n, item=item))
            for piece in (raw[: len(raw) // 2], raw[len(raw) // 2 :]):
                out.append(
                    ev(
                        "response.function_call_arguments.delta",
                        item_id=f"fc_{n}",
                        output_index=index + n,
                        delta=piece,
                    )
                )
            out.append(
                ev(
                    "response.function_call_arguments.done",
                    item_id=f"fc_{n}",
                    output_index=index + n,
                    arguments=raw,
                )
            )
            out.append(
                ev(
                    "response.output_item.done",
                    output_index=index + n,
                    item={**item, "arguments": raw},
                )
            )
        usage = {
            "input_tokens": self.usage[0],
            "output_tokens": self.usage[1],
            "total_tokens": sum(self.usage),
        }
        if self.cut:
            response = {
                "id": "resp",
                "status": "incomplete",
                "usage": usage,
                "incomplete_details": {"reason": "max_output_tokens"},
            }
            out.append(ev("response.incomplete", response=response))
            return out
        out.append(
            ev("response.completed", response={"id": "resp", "status": "completed", "usage": usage})
        )
        return out

    def _openai(self) -> list[bytes]:
        out = [chunk({"role": "assistant", "content": ""})]
        words = self.text.split(" ")
        for i, word in enumerate(words):
            piece = word if i == len(words) - 1 else word + " "
            if piece:
                out.append(chunk({"content": piece}))
        if self.fail_midway:
            return [*out, sse({"error": {"message": "internal failure", "type": "server_error"}})]
        for index, (name, args) in enumerate(self.calls):
            call_id = f"call_{index}_{abs(hash(json.dumps(args, sort_keys=True))) % 10**8}"
            raw_args = self._raw_args(args)
            half = len(raw_args) // 2
            out.append(
                chunk(
                    {
                        "tool_calls": [
                            {
                                "index": index,
                                "id": call_id,
                                "type": "function",
                                "function": {"name": name, "arguments": ""},
                            }
                        ]
                    }
                )
            )
            for part in (raw_args[:half], raw_args[half:]):
                out.append(
                    chunk({"tool_calls": [{"index": index, "function": {"arguments": part}}]})
                )
        if self.hang or self.truncate:
            return out
        out.append(
            chunk({}, finish="tool_calls" if self.calls else "length" if self.cut else "stop")
        )
        out.append(
            sse(
                {
                    "id": "chatcmpl-fake",
                    "object": "chat.completion.chunk",
                    "choices": [],
                    "usage": {
                        "prompt_tokens": self.usage[0],
                        "completion_tokens": self.usage[1],
                        "total_tokens": sum(self.usage),
                    },
                }
            )
        )
        out.append(sse("[DONE]"))
        return out


Brain = Callable[[str, list[dict[str, Any]], dict[str, Any]], Reply]
"""(role, messages, whole request body) -> Reply."""


def format_of(path: str) -> str:
    """Which wire format a request path asks for."""
    if path.endswith("/messages"):
        return "anthropic"
    if path.endswith("/responses"):
        return "responses"
    return "openai"


def role_of(body: dict[str, Any], fmt: str = "openai") -> str:
    """The `ROLE: x` marker on the first line of the system prompt."""
    if fmt == "anthropic":
        system: str = body["system"]
    elif fmt == "responses":
        system = body["instructions"]
    else:
        system = body["messages"][0]["content"]
    return system.splitlines()[0].removeprefix("ROLE:").strip()


def common_messages(body: dict[str, Any], fmt: str) -> list[dict[str, Any]]:
    """Every format's conversation as `[{role: user|assistant|tool, content}]`."""
    if fmt == "openai":
        return [m for m in body["messages"] if m["role"] != "system"]
    out: list[dict[str, Any]] = []
    if fmt == "responses":
        for item in body["input"]:
            if item.get("type") == "function_call_output":
                out.append({"role": "tool", "content": item["output"]})
            elif item.get("type") == "function_call":
                out.append({"role": "assistant", "content": "", "call": item})
            else:
                out.append({"role": item["role"], "content": item["content"]})
        return out
    for msg in body["messages"]:
        for block in msg["content"]:
            if block["type"] == "tool_result":
                out.append({"role": "tool", "content": block["content"]})
            elif block["type"] == "text":
                out.append({"role": msg["role"], "content": block["text"]})
            else:
                out.append({"role": msg["role"], "content": "", "block": block})
    return out


class FakeOpenAI:
    """Holds the brain, the pause between chunks, and every request received."""

    def __init__(self, brain: Brain, *, pause: float = 0.002) -> None:
        self.brain = brain
        self.pause = pause
        self.requests: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []
        self.formats: list[str] = []
        self.port = 0

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    async def handle(self, stream: trio.abc.Stream) -> None:
        try:
            await self._handle(stream)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass  # the client went away (a cancelled agent): fine
        finally:
            await stream.aclose()

    async def _handle(self, stream: trio.abc.Stream) -> None:
        buf = b""
        while b"\r\n\r\n" not in buf:
            data = await stream.receive_some(65536)
            if not data:
                return
            buf += data
        head, _, body = buf.partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        fmt = format_of(lines[0].split(" ")[1])
        headers = {}
        for line in lines[1:]:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
        length = int(headers.get("content-length", "0"))
        while len(body) < length:
            data = await stream.receive_some(65536)
            if not data:
                return
            body += data
        request = json.loads(body)
        self.requests.append(request)
        self.headers.append(headers)
        self.formats.append(fmt)
        reply = self.brain(role_of(request, fmt), common_messages(request, fmt), request)
        if reply.status != 200:
            payload = reply.error_body.encode()
            extra = f"Retry-After: {reply.retry_after}\r\n" if reply.retry_after else ""
            await stream.send_all(
                f"HTTP/1.1 {reply.status} Error\r\nContent-Type: application/json\r\n{extra}"
                f"Content-Length: {len(payload)}\r\nConnection: close\r\n\r\n".encode()
                + payload
            )
            return
        await stream.send_all(
            b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
            b"Cache-Control: no-cache\r\nConnection: close\r\n\r\n"
        )
        for piece in reply.chunks(fmt):
            await stream.send_all(piece)
            await trio.sleep(self.pause)
        if reply.hang:
            await trio.sleep_forever()


async def serve_fake_openai(
    nursery: trio.Nursery, brain: Brain, *, pause: float = 0.002
) -> FakeOpenAI:
    """Start the fake on a free loopback port; it lives as long as `nursery`."""
    fake = FakeOpenAI(brain, pause=pause)
    listeners = await nursery.start(
        functools.partial(trio.serve_tcp, fake.handle, 0, host="127.0.0.1")
    )
    fake.port = listeners[0].socket.getsockname()[1]
    return fake
