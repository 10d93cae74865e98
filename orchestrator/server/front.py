"""One port for `/ws` and the streaming HTTP endpoints (`/mcp`, `/ag-ui`, `/a2a`):
route each connection by its request line.

The front door accepts every connection, *peeks* at
its request line (`MSG_PEEK`: nothing is consumed, so the socket stays a plain
`trio.SocketStream` for websockets and its direct-send path), and hands it on: a
request for an endpoint's path (or below it) to that endpoint, anything else to
websockets' server, which accepts from a `HandoffListener` instead of the socket.
A request websockets would drop without a word — any method but GET, such as a POST
to an endpoint that is off — is answered here: 404, saying which setting turns the
endpoint on.
"""

from __future__ import annotations

import errno
import socket
from collections.abc import Awaitable, Callable, Sequence

import trio

from orchestrator.server.doors import DOORS, Route

__all__ = ["HandoffListener", "Route", "request_path", "route_connections"]

MAX_REQUEST_LINE = 8 * 1024
"""Bytes looked at for the request line (longer lines go to websockets, which refuses them)."""
PEEK_SECONDS = 10.0
"""How long a connection may take to send its request line (websockets' open timeout)."""
_PEEK_PAUSE = 0.01
_FULL_PAUSE = 0.1
_OUT_OF_RESOURCES = {errno.EMFILE, errno.ENFILE, errno.ENOMEM, errno.ENOBUFS}


def request_path(peeked: bytes) -> bytes | None:
    """The path of a request line (query left out); b"": not a request line (or too
    long to be one of ours); None: the line has not all arrived yet."""
    line, newline, _ = peeked.partition(b"\n")
    if not newline:
        return None if len(peeked) < MAX_REQUEST_LINE else b""
    parts = line.split(b" ")
    if len(parts) != 3:
        return b""
    return parts[1].partition(b"?")[0]


def _serve_of(
    path: bytes, routes: Sequence[Route]
) -> Callable[[trio.SocketStream], Awaitable[None]] | None:
    for prefix, serve in routes:
        if path == prefix or path.startswith(prefix + b"/"):
            return serve
    return None


class HandoffListener(trio.abc.Listener[trio.abc.Stream]):
    """The listener websockets' server accepts from: connections the front door routed
    to it. `socket` is the real listening socket (websockets logs its address)."""

    def __init__(
        self, sock: trio.socket.SocketType, streams: trio.MemoryReceiveChannel[trio.SocketStream]
    ) -> None:
        self.socket = sock
        self._streams = streams

    async def accept(self) -> trio.abc.Stream:
        try:
            return await self._streams.receive()
        except (trio.EndOfChannel, trio.ClosedResourceError):
            raise trio.ClosedResourceError("the front door is closed") from None

    async def aclose(self) -> None:
        await self._streams.aclose()


ENDPOINT_SETTINGS = {door.prefix: f"server.{door.setting}" for door in DOORS}
"""The streaming endpoints and the setting that turns each on."""


def not_routed(method: bytes, path: bytes) -> bytes:
    """The 404 for a request that is not a GET and goes to no endpoint that is on."""
    where = path.decode("ascii", "replace")[:200]
    first = path.split(b"/", 2)[1] if path.startswith(b"/") else b""
    setting = ENDPOINT_SETTINGS.get(b"/" + first)
    why = (
        f"{where} is off ({setting}: true turns it on)"
        if setting
        else f"{method.decode('ascii', 'replace')[:16]} {where}: use GET /, /ws, /auth, "
        "/healthz or /metrics"
    )
    text = f"not found: {why}\n".encode()
    return (
        b"HTTP/1.1 404 Not Found\r\nContent-Type: text/plain; charset=utf-8\r\n"
        b"Connection: close\r\nContent-Length: %d\r\n\r\n%s" % (len(text), text)
    )


_BUSY_TEXT = b"too many connections (server.max_connections)\n"
_BUSY = (
    b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain\r\nConnection: close\r\n"
    b"Content-Length: %d\r\n\r\n%s" % (len(_BUSY_TEXT), _BUSY_TEXT)
)


async def _route(
    stream: trio.SocketStream,
    to_ws: trio.MemorySendChannel[trio.SocketStream],
    routes: Sequence[Route],
    http_slots: trio.CapacityLimiter,
) -> None:
    path: bytes | None = None
    peeked = b""
    with trio.move_on_after(PEEK_SECONDS):
        while True:
            try:
                peeked = await stream.socket.recv(MAX_REQUEST_LINE, socket.MSG_PEEK)
            except OSError:
                peeked = b""
            path = request_path(peeked) if peeked else b""
            if path is not None:
                break
            await trio.sleep(_PEEK_PAUSE)  # part of a line: wait for the rest
    serve = _serve_of(path, routes) if path else None
    if serve is None and path and not peeked.startswith(b"GET "):
        with trio.move_on_after(PEEK_SECONDS):  # (websockets would close it unanswered)
            await stream.send_all(not_routed(peeked.partition(b" ")[0], path))
        await trio.aclose_forcefully(stream)
        return
    if serve is not None:
        try:
            http_slots.acquire_on_behalf_of_nowait(stream)
        except trio.WouldBlock:  # as /ws past server.max_connections: 503, closed
            with trio.move_on_after(PEEK_SECONDS):
                await stream.send_all(_BUSY)
            await trio.aclose_forcefully(stream)
            return
        try:
            await serve(stream)
        finally:
            http_slots.release_on_behalf_of(stream)
        return
    try:
        await to_ws.send(stream)  # websockets answers, refuses or times it out
    except (trio.BrokenResourceError, trio.ClosedResourceError):
        await trio.aclose_forcefully(stream)  # it is shutting down


async def route_connections(
    listener: trio.SocketListener,
    to_ws: trio.MemorySendChannel[trio.SocketStream],
    routes: Sequence[Route],
    handlers: trio.Nursery,
    http_slots: trio.CapacityLimiter,
) -> None:
    """Accept on `listener` until cancelled; each connection is routed in `handlers`.
    Connections to the HTTP endpoints hold one of `http_slots` while they last (the
    WebSocket ones are counted by the websockets side)."""
    async with listener:
        while True:
            try:
                stream = await listener.accept()
            except OSError as exc:
                if exc.errno not in _OUT_OF_RESOURCES:
                    raise
                await trio.sleep(_FULL_PAUSE)  # as trio.serve_listeners does: wait, retry
                continue
            handlers.start_soon(_route, stream, to_ws, routes, http_slots)
