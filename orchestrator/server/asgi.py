"""Serve an ASGI app's HTTP requests on one trio stream, parsed by h11.

Why by hand: `/mcp` shares the server's port with `/ws`, so a connection is routed
only after its request head has been read (`front.py`). websockets cannot serve a
request with a body or stream a response, and the ASGI servers that run under trio
(hypercorn) accept connections on listeners they own — handing them a stream that
is already open needs their internal classes. h11 does all the HTTP/1.1 parsing and
framing; this module maps its events to ASGI's `http` messages and bounds time and
size. It serves what the MCP SDK's session manager needs (requests with bodies,
streamed SSE answers, disconnects), not the whole ASGI spec (no websocket scope,
no lifespan: the caller runs the app's own lifespan around it).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, MutableMapping
from http import HTTPStatus
from typing import Any

import h11
import trio

__all__ = ["ASGIApp", "serve_http"]

logger = logging.getLogger(__name__)

Message = MutableMapping[str, Any]
ASGIApp = Callable[
    [
        MutableMapping[str, Any],
        Callable[[], Awaitable[Message]],
        Callable[[Message], Awaitable[None]],
    ],
    Awaitable[None],
]

MAX_HEAD_BYTES = 16 * 1024
"""A request head still incomplete past this many bytes is refused (431)."""
IDLE_SECONDS = 60.0
"""A kept-alive connection with no new request for this long is closed."""
HEAD_SECONDS = 5.0
"""A request head must arrive whole this soon after its first byte."""
BODY_SECONDS = 30.0
"""A request body must arrive whole this soon after its head (a body dripped slower
holds no connection longer): the request is answered 408 and the connection closed."""
READ_SECONDS = 30.0
"""The longest wait to send a refusal, or to read what is left of a refused request."""
MAX_DRAIN_BYTES = 1024 * 1024
"""An unread request body up to this size is skipped to keep the connection; larger: closed."""
_CHUNK = 64 * 1024


class _Closed(Exception):
    """The client went away, or took too long."""


async def serve_http(
    stream: trio.abc.Stream,
    app: ASGIApp,
    *,
    server: tuple[str, int] | None,
    client: tuple[str, int] | None,
) -> None:
    """Serve requests on `stream` until the client leaves, an answer must close the
    connection, or it stays idle."""
    conn = h11.Connection(h11.SERVER, max_incomplete_event_size=MAX_HEAD_BYTES)
    try:
        while True:
            try:
                event = await _next_head(conn, stream)
            except h11.RemoteProtocolError as exc:
                await _refuse(conn, stream, exc.error_status_hint, str(exc))
                return
            if not isinstance(event, h11.Request):
                return  # ConnectionClosed, or bytes after a request we did not read
            exchange = _Exchange(conn, stream, app, event, server, client)
            await exchange.run()
            await _drain(conn, stream, exchange.body_by)
            if conn.our_state is not h11.DONE or conn.their_state is not h11.DONE:
                return
            conn.start_next_cycle()
    except (_Closed, trio.BrokenResourceError, trio.ClosedResourceError, trio.TooSlowError):
        pass
    finally:
        await trio.aclose_forcefully(stream)


async def _next_head(conn: h11.Connection, stream: trio.abc.Stream) -> Any:
    """The next request (or the connection's end): up to `IDLE_SECONDS` for its first
    byte, then `HEAD_SECONDS` for the rest of its head."""
    event = conn.next_event()
    if event is not h11.NEED_DATA:
        return event
    with trio.fail_after(IDLE_SECONDS):
        conn.receive_data(bytes(await stream.receive_some(_CHUNK)))
    with trio.fail_after(HEAD_SECONDS):
        return await _next_event(conn, stream)


async def _next_event(conn: h11.Connection, stream: trio.abc.Stream) -> Any:
    while (event := conn.next_event()) is h11.NEED_DATA:
        conn.receive_data(bytes(await stream.receive_some(_CHUNK)))
    return event


async def _drain(conn: h11.Connection, stream: trio.abc.Stream, deadline: float) -> None:
    """Read what is left of a request the app answered without reading (a refusal), so
    the connection can serve the next one, by the body's `deadline`; a large or late
    rest is not worth it: close."""
    left = MAX_DRAIN_BYTES
    with trio.move_on_at(deadline):
        while conn.their_state is h11.SEND_BODY and left > 0:
            event = await _next_event(conn, stream)
            if isinstance(event, h11.Data):
                left -= len(event.data)
            elif not isinstance(event, h11.EndOfMessage):
                return


async def _refuse(conn: h11.Connection, stream: trio.abc.Stream, status: int, why: str) -> None:
    if conn.our_state not in (h11.IDLE, h11.SEND_RESPONSE):
        return
    body = f"{why}\n".encode()
    headers = [
        ("content-type", "text/plain; charset=utf-8"),
        ("content-length", str(len(body))),
        ("connection", "close"),
    ]
    with trio.move_on_after(READ_SECONDS):
        response = h11.Response(status_code=status, headers=headers, reason=_phrase(status))
        await stream.send_all(conn.send(response) or b"")
        await stream.send_all(conn.send(h11.Data(data=body)) or b"")
        await stream.send_all(conn.send(h11.EndOfMessage()) or b"")


def _phrase(status: int) -> bytes:
    try:
        return HTTPStatus(status).phrase.encode()
    except ValueError:
        return b""


class _Exchange:
    """One request and its answer, as ASGI's receive and send."""

    def __init__(
        self,
        conn: h11.Connection,
        stream: trio.abc.Stream,
        app: ASGIApp,
        request: h11.Request,
        server: tuple[str, int] | None,
        client: tuple[str, int] | None,
    ) -> None:
        self.conn, self.stream, self.app = conn, stream, app
        target = bytes(request.target)
        path, _, query = target.partition(b"?")
        self.scope: dict[str, Any] = {
            "type": "http",
            "asgi": {"version": "3.0", "spec_version": "2.3"},
            "http_version": request.http_version.decode(),
            "method": request.method.decode(),
            "scheme": "http",
            "path": path.decode("latin-1"),
            "raw_path": path,
            "query_string": query,
            "root_path": "",
            "headers": [(bytes(k).lower(), bytes(v)) for k, v in request.headers],
            "server": server,
            "client": client,
            "state": {},
        }
        self.body_done = False
        self.body_by = trio.current_time() + BODY_SECONDS
        """When the whole body must have arrived."""
        self.disconnected = trio.Event()
        self.started = False
        self.send_lock = trio.Lock()
        self.nursery: trio.Nursery | None = None

    async def run(self) -> None:
        failed = False
        async with trio.open_nursery() as nursery:
            self.nursery = nursery
            try:
                await self.app(self.scope, self.receive, self.send)
            except Exception:
                logger.exception(
                    "the app failed on %s %s", self.scope["method"], self.scope["path"]
                )
                failed = True
            finally:
                nursery.cancel_scope.cancel()  # the disconnect watch
        if failed and not self.started:
            await _refuse(self.conn, self.stream, 500, "internal error")
        if failed or self.disconnected.is_set():
            raise _Closed

    async def receive(self) -> Message:
        if not self.body_done:
            try:
                with trio.fail_at(self.body_by):
                    event = await _next_event(self.conn, self.stream)
            except trio.TooSlowError:  # the app hears the client is gone, as it is
                await self._too_slow()
                self.disconnected.set()
                return {"type": "http.disconnect"}
            if isinstance(event, h11.Data):
                return {"type": "http.request", "body": bytes(event.data), "more_body": True}
            if isinstance(event, h11.EndOfMessage):
                self.body_done = True
                assert self.nursery is not None
                self.nursery.start_soon(self._watch)
                return {"type": "http.request", "body": b"", "more_body": False}
            self.disconnected.set()
        await self.disconnected.wait()
        return {"type": "http.disconnect"}

    async def _too_slow(self) -> None:
        """The body did not arrive in `BODY_SECONDS`: 408, if no answer has started."""
        if not self.started:
            async with self.send_lock:
                self.started = True
                await _refuse(
                    self.conn,
                    self.stream,
                    408,
                    f"request timeout: the body did not arrive within {BODY_SECONDS:g} s",
                )

    async def _watch(self) -> None:
        """Notice the client leaving while the answer streams (a next request is kept
        in h11's buffer for its turn)."""
        try:
            while data := await self.stream.receive_some(_CHUNK):
                if len(data) + len(self.conn.trailing_data[0]) > MAX_HEAD_BYTES:
                    break  # pipelining this much is not a client we need to serve
                self.conn.receive_data(bytes(data))
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass
        self.disconnected.set()

    async def send(self, message: Message) -> None:
        if self.disconnected.is_set():
            return  # the client is gone; the app learns it from receive()
        async with self.send_lock:  # h11's state and the bytes, in the same order
            out = self._frame(message)
            try:
                await self.stream.send_all(out)
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                self.disconnected.set()

    def _frame(self, message: Message) -> bytes:
        kind = message["type"]
        if kind == "http.response.start":
            headers = [(bytes(k), bytes(v)) for k, v in message.get("headers", ())]
            self.started = True
            status = message["status"]
            response = h11.Response(status_code=status, headers=headers, reason=_phrase(status))
            return self.conn.send(response) or b""
        if kind == "http.response.body":
            out = self.conn.send(h11.Data(data=message.get("body", b""))) or b""
            if not message.get("more_body", False):
                out += self.conn.send(h11.EndOfMessage()) or b""
            return out
        raise RuntimeError(f"unsupported ASGI message {kind!r}")
