"""A fake OpenAI-compatible Chat Completions server speaking real HTTP + SSE on loopback.

Test double for integration tests: a `Brain` decides, from the request's system
prompt (`ROLE: <role>` on its first line) and conversation, what to stream; the
server writes it as `text/event-stream` chunks with small pauses, so parallel
agents really interleave on the wire.
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

    def chunks(self) -> list[bytes]:
        if self.raw is not None:
            return self.raw
        out = [chunk({"role": "assistant", "content": ""})]
        words = self.text.split(" ")
        for i, word in enumerate(words):
            piece = word if i == len(words) - 1 else word + " "
            if piece:
                out.append(chunk({"content": piece}))
        for index, (name, args) in enumerate(self.calls):
            call_id = f"call_{index}_{abs(hash(json.dumps(args, sort_keys=True))) % 10**8}"
            raw_args = json.dumps(args)
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
        out.append(chunk({}, finish="tool_calls" if self.calls else "stop"))
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


def role_of(body: dict[str, Any]) -> str:
    """The `ROLE: x` marker on the first line of the system prompt."""
    system: str = body["messages"][0]["content"]
    first = system.splitlines()[0]
    return first.removeprefix("ROLE:").strip()


class FakeOpenAI:
    """Holds the brain, the pause between chunks, and every request received."""

    def __init__(self, brain: Brain, *, pause: float = 0.002) -> None:
        self.brain = brain
        self.pause = pause
        self.requests: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []
        self.port = 0

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    async def handle(self, stream: trio.SocketStream) -> None:
        try:
            await self._handle(stream)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass  # the client went away (a cancelled agent): fine
        finally:
            await stream.aclose()

    async def _handle(self, stream: trio.SocketStream) -> None:
        buf = b""
        while b"\r\n\r\n" not in buf:
            data = await stream.receive_some(65536)
            if not data:
                return
            buf += data
        head, _, body = buf.partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
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
        reply = self.brain(role_of(request), request["messages"], request)
        if reply.status != 200:
            payload = reply.error_body.encode()
            await stream.send_all(
                f"HTTP/1.1 {reply.status} Error\r\nContent-Type: application/json\r\n"
                f"Content-Length: {len(payload)}\r\nConnection: close\r\n\r\n".encode()
                + payload
            )
            return
        await stream.send_all(
            b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
            b"Cache-Control: no-cache\r\nConnection: close\r\n\r\n"
        )
        for piece in reply.chunks():
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
