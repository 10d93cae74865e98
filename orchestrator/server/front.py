"""One port for `/ws` and the streaming HTTP endpoints (`/mcp`, `/ag-ui`, `/a2a`):
route each connection by its request head.

The front door accepts every connection, *peeks* at its request head (`MSG_PEEK`:
nothing is consumed, so the socket stays a plain `trio.SocketStream` for websockets and
its direct-send path), and hands it on once the head has arrived whole: a request for
an endpoint's path (or below it) to that endpoint, anything else to websockets'
server, which accepts from a `HandoffListener` instead of the socket. A request
websockets would drop without a word — any method but GET, such as a POST to an
endpoint that is off — is answered here: 404, saying which setting turns the endpoint
on.

A connection that is not a socket (any other trio stream: the test suite serves over
memory streams) has its head read rather than peeked, and is handed on as a `Replayed`
stream that gives those bytes again first.

Nothing unauthenticated holds more than a bounded, short-lived place here: a head
must arrive whole (at most `MAX_HEAD_BYTES`) within `HEAD_SECONDS`, and at most
`MAX_PENDING_HEADS` connections may be sending theirs — past that the one that sent
part of a head and has been idle longest is dropped (never one that sent its head
whole: a burst of honest clients is only not read yet). Waiting for the rest of a
head costs nothing while no byte comes: the socket is waited on for readability with
its low-water mark one byte above what has arrived (`SO_RCVLOWAT`), not polled. Only a
whole head takes an HTTP slot.
"""

from __future__ import annotations

import contextlib
import errno
import socket
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Sequence

import trio

from orchestrator.server.doors import DOORS, Route

__all__ = ["Address", "HandoffListener", "Replayed", "Route", "request_path", "route_connections"]

MAX_HEAD_BYTES = 16 * 1024
"""A request head longer than this is refused (431)."""
HEAD_SECONDS = 5.0
"""How long a connection may take to send its whole request head."""
MAX_PENDING_HEADS = 256
"""Connections still sending their head; past this, the one that sent part of its head
and has been idle longest is dropped (`PendingHeads`)."""
MAX_UNREAD_HEADS = 1024
"""Accepted connections whose head was not looked at yet; past this the oldest goes."""
_FULL_PAUSE = 0.1
_SLOW_PAUSE = 0.05
"""Where the low-water mark cannot be set: the pause between two looks at a head."""
_OUT_OF_RESOURCES = {errno.EMFILE, errno.ENFILE, errno.ENOMEM, errno.ENOBUFS}


def request_path(peeked: bytes) -> bytes | None:
    """The path of a request whose head has arrived whole (query left out); b"": not
    a request head (or too long to be one); None: the head has not all arrived yet."""
    line, newline, _ = peeked.partition(b"\n")
    if newline and len(line.split(b" ")) != 3:
        return b""
    if b"\r\n\r\n" not in peeked and b"\n\n" not in peeked:
        return None if len(peeked) < MAX_HEAD_BYTES else b""
    return line.split(b" ")[1].partition(b"?")[0]


def _serve_of(
    path: bytes, routes: Sequence[Route]
) -> Callable[[trio.abc.Stream], Awaitable[None]] | None:
    for prefix, serve in routes:
        if path == prefix or path.startswith(prefix + b"/"):
            return serve
    return None


class Replayed(trio.abc.Stream):
    """A stream whose first bytes (its request head) were read already: they are
    received again first, then the rest of the stream."""

    def __init__(self, stream: trio.abc.Stream, head: bytes) -> None:
        self.stream = stream
        self._head = head

    async def receive_some(self, max_bytes: int | None = None) -> bytes | bytearray:
        if not self._head:
            return await self.stream.receive_some(max_bytes)
        await trio.lowlevel.checkpoint()
        size = len(self._head) if max_bytes is None else max_bytes
        data, self._head = self._head[:size], self._head[size:]
        return data

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        await self.stream.send_all(data)

    async def wait_send_all_might_not_block(self) -> None:
        await self.stream.wait_send_all_might_not_block()

    async def send_eof(self) -> None:
        if isinstance(self.stream, trio.abc.HalfCloseableStream):
            await self.stream.send_eof()

    async def aclose(self) -> None:
        await self.stream.aclose()


class Address:
    """Where a listener that is not a socket says it listens (websockets logs it, as
    it would a socket's address)."""

    family = socket.AF_INET

    def __init__(self, host: str, port: int) -> None:
        self._name = (host, port)

    def getsockname(self) -> tuple[str, int]:
        return self._name


class HandoffListener(trio.abc.Listener[trio.abc.Stream]):
    """The listener websockets' server accepts from: connections the front door routed
    to it. `socket` is the real listening socket, or the `Address` of a listener that
    is not one (websockets logs it)."""

    def __init__(
        self,
        sock: trio.socket.SocketType | Address,
        streams: trio.MemoryReceiveChannel[trio.abc.Stream],
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
_TOO_LONG_TEXT = b"request head too long (over 16 KiB)\n"
_TOO_LONG = (
    b"HTTP/1.1 431 Request Header Fields Too Large\r\nContent-Type: text/plain\r\n"
    b"Connection: close\r\nContent-Length: %d\r\n\r\n%s" % (len(_TOO_LONG_TEXT), _TOO_LONG_TEXT)
)


class PendingHeads:
    """The connections still sending their request head: those not looked at yet, and
    those looked at and found incomplete (`waiting`), the one idle longest first.

    Past `MAX_PENDING_HEADS`, the waiting head idle longest is dropped (its wait is
    cancelled): a client that sends its whole head at once is never dropped (a burst
    of honest clients is only not looked at yet, and leaves as soon as it is), only
    one that stopped sending part-way. Connections not looked at yet are dropped only
    past `MAX_UNREAD_HEADS`, oldest first.
    """

    def __init__(self) -> None:
        self._unread: OrderedDict[object, trio.CancelScope] = OrderedDict()
        self._waiting: OrderedDict[object, trio.CancelScope] = OrderedDict()
        self.dropped = 0

    def enter(self, stream: object, scope: trio.CancelScope) -> None:
        """A connection was accepted: its head is to be read."""
        self._unread[stream] = scope
        self._shed()

    def waiting(self, stream: object) -> None:
        """Its head was looked at and is not whole yet: it waits for more (and is the
        most recently active waiting head now)."""
        scope = self._unread.pop(stream, None) or self._waiting.pop(stream, None)
        if scope is None:  # dropped meanwhile
            return
        self._waiting[stream] = scope
        self._shed()

    def leave(self, stream: object) -> None:
        """Its head is whole, or it is gone."""
        self._unread.pop(stream, None)
        self._waiting.pop(stream, None)

    def _shed(self) -> None:
        while len(self) > MAX_PENDING_HEADS and self._waiting:
            _, idlest = self._waiting.popitem(last=False)
            idlest.cancel()
            self.dropped += 1
        while len(self._unread) > MAX_UNREAD_HEADS:
            _, oldest = self._unread.popitem(last=False)
            oldest.cancel()
            self.dropped += 1

    def __len__(self) -> int:
        return len(self._unread) + len(self._waiting)


async def _read_head(stream: trio.abc.Stream, pending: PendingHeads) -> bytes:
    """`_head` for a stream that is not a socket: what it sent, read (`Replayed` gives
    it again), once its head is whole, it stopped, or it is over `MAX_HEAD_BYTES`."""
    data = b""
    while request_path(data) is None:
        try:
            chunk = await stream.receive_some(MAX_HEAD_BYTES - len(data))
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            return data
        if not chunk:
            return data
        data += chunk
        pending.waiting(stream)
    return data


async def _head(stream: trio.abc.Stream, pending: PendingHeads) -> bytes:
    """What has arrived of the connection's request head, once it is whole (or the
    client stopped, or it is over `MAX_HEAD_BYTES`): b"" when nothing came."""
    if not isinstance(stream, trio.SocketStream):
        return await _read_head(stream, pending)
    sock = stream.socket
    lowat = True
    try:
        while True:
            try:
                peeked = await sock.recv(MAX_HEAD_BYTES, socket.MSG_PEEK)
            except OSError:
                return b""
            if not peeked or request_path(peeked) is not None:
                return peeked
            pending.waiting(stream)
            try:  # readable again only once more than this has arrived
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVLOWAT, len(peeked) + 1)
            except OSError:
                lowat = False
            if lowat:
                await trio.lowlevel.wait_readable(sock)
            else:
                await trio.sleep(_SLOW_PAUSE)
    finally:
        if lowat:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVLOWAT, 1)


async def _answer_and_close(stream: trio.abc.Stream, answer: bytes) -> None:
    """Send a refusal and close without a reset: the request's bytes still unread are
    read and dropped first (closing on unread data would reset the connection, and the
    client would lose the answer), for at most `HEAD_SECONDS` and 64 KiB."""
    with trio.move_on_after(HEAD_SECONDS):
        try:
            await stream.send_all(answer)
            if isinstance(stream, trio.abc.HalfCloseableStream):
                await stream.send_eof()
            left = 64 * 1024
            while left > 0 and (data := await stream.receive_some(left)):
                left -= len(data)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass
    await trio.aclose_forcefully(stream)


async def _route(
    stream: trio.abc.Stream,
    to_ws: trio.MemorySendChannel[trio.abc.Stream],
    routes: Sequence[Route],
    http_slots: trio.CapacityLimiter,
    pending: PendingHeads,
) -> None:
    peeked = b""
    try:
        with trio.move_on_after(HEAD_SECONDS) as waiting:
            pending.enter(stream, waiting)
            try:
                peeked = await _head(stream, pending)
            finally:
                pending.leave(stream)
    except BaseException:  # the server stops: the connection goes with it
        await trio.aclose_forcefully(stream)
        raise
    if peeked and not isinstance(stream, trio.SocketStream):  # (read, not peeked)
        stream = Replayed(stream, peeked)
    path = request_path(peeked) if peeked else b""
    if not path:  # nothing, not HTTP, too slow or dropped: websockets refuses what it can
        if len(peeked) >= MAX_HEAD_BYTES:
            await _answer_and_close(stream, _TOO_LONG)
            return
        if waiting.cancelled_caught:
            await trio.aclose_forcefully(stream)
            return
    serve = _serve_of(path, routes) if path else None
    if serve is None and path and not peeked.startswith(b"GET "):
        # (websockets would close it unanswered)
        await _answer_and_close(stream, not_routed(peeked.partition(b" ")[0], path))
        return
    if serve is not None:
        try:
            http_slots.acquire_on_behalf_of_nowait(stream)
        except trio.WouldBlock:  # as /ws past server.max_connections: 503, closed
            await _answer_and_close(stream, _BUSY)
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
    listener: trio.abc.Listener[trio.abc.Stream],
    to_ws: trio.MemorySendChannel[trio.abc.Stream],
    routes: Sequence[Route],
    handlers: trio.Nursery,
    http_slots: trio.CapacityLimiter,
) -> None:
    """Accept on `listener` until cancelled; each connection is routed in `handlers`.
    Connections to the HTTP endpoints hold one of `http_slots` while they last (the
    WebSocket ones are counted by the websockets side)."""
    pending = PendingHeads()
    async with listener:
        while True:
            try:
                stream = await listener.accept()
            except OSError as exc:
                if exc.errno not in _OUT_OF_RESOURCES:
                    raise
                await trio.sleep(_FULL_PAUSE)  # as trio.serve_listeners does: wait, retry
                continue
            handlers.start_soon(_route, stream, to_ws, routes, http_slots, pending)
