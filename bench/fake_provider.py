"""A fake model provider for the benches, in a process of its own.

It speaks both dialects, by the path asked: OpenAI's Chat Completions
(`…/chat/completions`) and Anthropic's Messages (`…/messages`), over HTTP/1.1 with
keep-alive, plain or TLS. A system prompt holding `ROLE: lead` asks for `children`
`agent_spawn` calls, then (once the tool results come) says done; any other
conversation gets `words` words at `pace` words/s, each its own SSE event, HTTP
chunk and write (and so its own TLS record), as real providers send tokens. Each
word is the time it was written (`time.time()`), which is what bench/capacity.py
measures latency from. A pace above 1e6 is "as fast as it can": 256 words a write.

Why not trio, like everything else here: the provider has to cost the measured
server nothing. On trio (a task per stream, `SSLStream`) it took ~40 µs of CPU a
word and one core at 25k words/s, on a machine whose other core the server needs;
one `selectors` loop over non-blocking stdlib sockets, whose TLS is OpenSSL's own,
and one heap of due streams, cost a fraction of that (docs/benchmarks.md).

    python -m bench.fake_provider PACE WORDS CHILDREN [http|https]

It prints `provider listening on <base url>` once it listens; with `https` it
serves a certificate of a CA of its own making, whose certificate it writes to
`ca.pem` in the working directory (the server trusts it through a model's `tls`).
"""

from __future__ import annotations

import heapq
import json
import selectors
import socket
import ssl
import sys
import time
from typing import Any, Protocol

__all__ = ["main", "serve"]


class Dialect(Protocol):
    """What a provider says, as the bytes of SSE events."""

    lead: bool
    answered: bool

    def opening_text(self) -> list[bytes]:
        """What comes before a text's first word."""
        ...

    def spawns(self, count: int) -> list[bytes]:
        """A whole answer asking for `count` spawns."""
        ...

    def text(self, text: str) -> bytes:
        """One word of text."""
        ...

    def closing(self) -> list[bytes]:
        """What ends a text answer."""
        ...


class _OpenAIDialect:
    """Chat Completions chunks (`POST …/chat/completions`)."""

    def __init__(self, body: dict[str, Any]) -> None:
        messages = body.get("messages", [])
        self.lead = "ROLE: lead" in json.dumps(messages[:1])
        self.answered = any(m.get("role") == "tool" for m in messages)

    @staticmethod
    def _chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
        body = {"id": "c", "object": "chat.completion.chunk", "created": 0, "model": "paced"}
        body["choices"] = [{"index": 0, "delta": delta, "finish_reason": finish}]
        return b"data: " + json.dumps(body).encode() + b"\n\n"

    def opening_text(self) -> list[bytes]:
        """What comes before a text's first word."""
        return []

    def spawns(self, count: int) -> list[bytes]:
        args = json.dumps({"agent_id": "leaf", "task": "talk"})
        calls = [
            self._chunk(
                {
                    "tool_calls": [
                        {
                            "index": i,
                            "id": f"call_{i}",
                            "type": "function",
                            "function": {"name": "agent_spawn", "arguments": args},
                        }
                    ]
                }
            )
            for i in range(count)
        ]
        return [*calls, self._chunk({}, "tool_calls")]

    def text(self, text: str) -> bytes:
        return self._chunk({"content": text})

    def closing(self) -> list[bytes]:
        return [self._chunk({}, "stop"), b"data: [DONE]\n\n"]


class _AnthropicDialect:
    """Messages stream events (`POST …/messages`), as Anthropic's API sends them."""

    def __init__(self, body: dict[str, Any]) -> None:
        self.lead = "ROLE: lead" in json.dumps(body.get("system", ""))
        self.answered = "tool_result" in json.dumps(body.get("messages", []))

    @staticmethod
    def _event(kind: str, data: dict[str, Any]) -> bytes:
        return b"event: %s\ndata: %s\n\n" % (
            kind.encode(),
            json.dumps({"type": kind, **data}).encode(),
        )

    def _start(self) -> list[bytes]:
        message: dict[str, Any] = {
            "id": "msg_paced",
            "type": "message",
            "role": "assistant",
            "model": "paced",
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": {"input_tokens": 10, "output_tokens": 1},
        }
        return [self._event("message_start", {"message": message})]

    def _block(
        self, index: int, block: dict[str, Any], deltas: list[dict[str, Any]]
    ) -> list[bytes]:
        return [
            self._event("content_block_start", {"index": index, "content_block": block}),
            *(self._event("content_block_delta", {"index": index, "delta": d}) for d in deltas),
            self._event("content_block_stop", {"index": index}),
        ]

    def _end(self, reason: str) -> list[bytes]:
        return [
            self._event(
                "message_delta",
                {
                    "delta": {"stop_reason": reason, "stop_sequence": None},
                    "usage": {"output_tokens": 1},
                },
            ),
            self._event("message_stop", {}),
        ]

    def spawns(self, count: int) -> list[bytes]:
        args = json.dumps({"agent_id": "leaf", "task": "talk"})
        blocks: list[bytes] = []
        for i in range(count):
            block = {"type": "tool_use", "id": f"toolu_{i}", "name": "agent_spawn", "input": {}}
            blocks += self._block(i, block, [{"type": "input_json_delta", "partial_json": args}])
        return [*self._start(), *blocks, *self._end("tool_use")]

    def text(self, text: str) -> bytes:
        delta = {"type": "text_delta", "text": text}
        return self._event("content_block_delta", {"index": 0, "delta": delta})

    def opening_text(self) -> list[bytes]:
        """What comes before a text's first word: the message and its text block."""
        return [
            *self._start(),
            self._event(
                "content_block_start", {"index": 0, "content_block": {"type": "text", "text": ""}}
            ),
        ]

    def closing(self) -> list[bytes]:
        return [self._event("content_block_stop", {"index": 0}), *self._end("end_turn")]


_READ, _WRITE = selectors.EVENT_READ, selectors.EVENT_WRITE


class _Connection:
    """One client connection: its TLS handshake, requests, and the answer it streams."""

    def __init__(self, sock: socket.socket, handshaking: bool) -> None:
        self.sock = sock
        self.handshaking = handshaking
        self.inbox = b""
        self.outbox = bytearray()
        self.dialect: Dialect | None = None
        self.word = 0
        self.started = 0.0
        self.closed = False


class _Server:
    def __init__(
        self, pace: float, words: int, children: int, context: ssl.SSLContext | None
    ) -> None:
        self.delay = 1.0 / pace
        self.fast = pace > 1e6
        self.words = words
        self.children = children
        self.context = context
        self.selector = selectors.DefaultSelector()
        self.due: list[tuple[float, int, _Connection]] = []
        """(when, a tie-breaker, connection): streams whose next word is due then."""

    # -- I/O ----------------------------------------------------------------------------

    def _want(self, conn: _Connection, events: int) -> None:
        if not conn.closed:
            self.selector.modify(conn.sock, events, conn)

    def _close(self, conn: _Connection) -> None:
        if not conn.closed:
            conn.closed = True
            self.selector.unregister(conn.sock)
            conn.sock.close()

    def _send(self, conn: _Connection, payload: bytes) -> None:
        """One HTTP chunk, written now (one TLS record) unless writes are backed up."""
        if conn.closed:
            return
        conn.outbox += b"%x\r\n%s\r\n" % (len(payload), payload)
        self._flush(conn)

    def _flush(self, conn: _Connection) -> None:
        try:
            while conn.outbox:
                sent = conn.sock.send(conn.outbox)
                del conn.outbox[:sent]
        except (ssl.SSLWantWriteError, BlockingIOError):
            self._want(conn, _READ | _WRITE)
            return
        except (ssl.SSLWantReadError, OSError):
            self._close(conn)
            return
        self._want(conn, _READ)

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                raw, _ = listener.accept()
            except BlockingIOError:
                return
            raw.setblocking(False)
            raw.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            sock: socket.socket = raw
            if self.context is not None:
                sock = self.context.wrap_socket(
                    raw, server_side=True, do_handshake_on_connect=False
                )
            conn = _Connection(sock, handshaking=self.context is not None)
            self.selector.register(sock, _READ, conn)
            self._ready(conn)

    def _ready(self, conn: _Connection) -> None:
        """The socket can be read or written: go on with what the connection does."""
        if conn.handshaking:
            assert isinstance(conn.sock, ssl.SSLSocket)
            try:
                conn.sock.do_handshake()
            except ssl.SSLWantReadError:
                self._want(conn, _READ)
                return
            except ssl.SSLWantWriteError:
                self._want(conn, _READ | _WRITE)
                return
            except OSError:
                self._close(conn)
                return
            conn.handshaking = False
        if conn.outbox:
            self._flush(conn)
        while not conn.closed:
            try:
                data = conn.sock.recv(65536)
            except (ssl.SSLWantReadError, BlockingIOError):
                break
            except (ssl.SSLWantWriteError, OSError):
                self._close(conn)
                return
            if not data:
                self._close(conn)
                return
            conn.inbox += data
        self._requests(conn)

    # -- HTTP and the answers -----------------------------------------------------------

    def _requests(self, conn: _Connection) -> None:
        """Answer the next request in the inbox, if it is whole and none is streaming."""
        while conn.dialect is None and not conn.closed and b"\r\n\r\n" in conn.inbox:
            head, _, rest = conn.inbox.partition(b"\r\n\r\n")
            length = 0
            for line in head.split(b"\r\n")[1:]:
                name, _, value = line.partition(b":")
                if name.strip().lower() == b"content-length":
                    length = int(value)
            if len(rest) < length:
                return
            body: dict[str, Any] = json.loads(rest[:length])
            conn.inbox = rest[length:]
            target = head.split(b" ", 2)[1].split(b"?")[0]
            dialect: Dialect = (
                _AnthropicDialect(body) if target.endswith(b"/messages") else _OpenAIDialect(body)
            )
            conn.outbox += (
                b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
                b"transfer-encoding: chunked\r\n\r\n"
            )
            self._answer(conn, dialect)

    def _answer(self, conn: _Connection, dialect: Dialect) -> None:
        if dialect.lead:
            said = (
                dialect.spawns(self.children)
                if not dialect.answered
                else [
                    *dialect.opening_text(),
                    dialect.text("done"),
                    *dialect.closing(),
                ]
            )
            for payload in said:
                self._send(conn, payload)
            self._end(conn)
            return
        for payload in dialect.opening_text():
            self._send(conn, payload)
        if self.fast:
            for start in range(0, self.words, 256):
                part = [
                    dialect.text(f"{time.time():.6f} ")
                    for _ in range(start, min(start + 256, self.words))
                ]
                conn.outbox += b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in part)
                self._flush(conn)
            for payload in dialect.closing():
                self._send(conn, payload)
            self._end(conn)
            return
        conn.dialect, conn.word, conn.started = dialect, 0, time.monotonic()
        heapq.heappush(self.due, (conn.started, id(conn), conn))

    def _next_word(self, conn: _Connection) -> None:
        dialect = conn.dialect
        assert dialect is not None
        self._send(conn, dialect.text(f"{time.time():.6f} "))
        conn.word += 1
        if conn.word < self.words:
            heapq.heappush(self.due, (conn.started + conn.word * self.delay, id(conn), conn))
            return
        for payload in dialect.closing():
            self._send(conn, payload)
        conn.dialect = None
        self._end(conn)
        self._requests(conn)

    def _end(self, conn: _Connection) -> None:
        conn.outbox += b"0\r\n\r\n"
        self._flush(conn)

    # -- the loop -------------------------------------------------------------------------

    def run(self, listener: socket.socket) -> None:
        listener.setblocking(False)
        self.selector.register(listener, _READ, None)
        due, select = self.due, self.selector.select
        while True:
            timeout = None if not due else max(0.0, due[0][0] - time.monotonic())
            for key, _ in select(timeout):
                if key.data is None:
                    self._accept(listener)
                else:
                    self._ready(key.data)
            now = time.monotonic()
            while due and due[0][0] <= now:
                conn = heapq.heappop(due)[2]
                if not conn.closed:
                    self._next_word(conn)


def serve(pace: float, words: int, children: int, https: bool = False) -> None:
    """Listen on a free loopback port, say where, and serve until killed."""
    context = None
    if https:
        import trustme

        ca = trustme.CA()
        ca.cert_pem.write_to_path("ca.pem")
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        ca.issue_cert("127.0.0.1").configure_cert(context)
    listener = socket.create_server(("127.0.0.1", 0), backlog=4096)
    port = listener.getsockname()[1]
    print(f"provider listening on {'https' if https else 'http'}://127.0.0.1:{port}/v1", flush=True)
    _Server(pace, words, children, context).run(listener)


def main() -> None:
    pace, words, children = float(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
    serve(pace, words, children, https=len(sys.argv) > 4 and sys.argv[4] == "https")


if __name__ == "__main__":
    main()
