"""HTTP/1.1 under httpx for provider streams: long responses of small chunks, read
with as little work per chunk as the protocol allows.

httpx stays the API (`client.stream(...)`, its timeouts, headers, exceptions, proxies
from the environment); this is the transport under it for direct connections. Why
not httpcore's, which httpx uses by default: a provider stream is thousands of tiny
SSE events, and per event httpcore and h11 run a pure-Python state machine inside
several context managers, while trio's `SSLStream` hands back one TLS record per
call, each a trip through the scheduler (docs/benchmarks.md measured both). Here,
per wake-up:

- one `recv` on a non-blocking socket takes every byte the kernel holds (trio's
  low-level `wait_readable` only after a short read: the kernel most likely holds
  nothing more then, and a read that fails costs a system call);
- every TLS record in it is decrypted at once (`ssl.MemoryBIO`, the stdlib's own
  sans-I/O TLS; trio's `SSLStream` wraps the same object one record at a time);
- one call of llhttp (`httptools`, the C parser Node.js and uvicorn use) parses it,
  and the body bytes it held are yielded as one piece.

Connections are pooled per origin and reused (keep-alive, as httpcore does), at most
`max_connections` open, idle ones closed after `keepalive_expiry` seconds.
"""

from __future__ import annotations

import contextlib
import math
import select
import socket
import ssl
import time
from typing import Any

import httptools
import httpx
import trio

__all__ = ["StreamTransport"]

_READ = 65536
"""Bytes asked of the socket per receive (what the kernel holds, up to this)."""
_HEAD_BYTES = 64 * 1024
"""The most a response's status line and headers may take."""
_Origin = tuple[bytes, str, int]


class StreamTransport(httpx.AsyncBaseTransport):
    """HTTP/1.1 over non-blocking sockets and stdlib TLS, parsed by llhttp, pooled per
    origin.

    Args:
        ssl_context: what TLS trusts and presents (default: httpx's, so the same
            certificates as before).
        max_connections: connections open at once, idle ones included (a request
            past it waits, up to the pool timeout, or takes an idle one's place).
        keepalive_expiry: seconds an idle connection is kept for reuse.
    """

    def __init__(
        self,
        *,
        ssl_context: ssl.SSLContext | None = None,
        max_connections: int = 1024,
        keepalive_expiry: float = 5.0,
    ) -> None:
        self._ssl = ssl_context if ssl_context is not None else httpx.create_ssl_context()
        self._ssl.set_alpn_protocols(["http/1.1"])
        self._slots = trio.Semaphore(max_connections)
        self._idle: dict[_Origin, list[tuple[float, _Connection]]] = {}
        self._expiry = keepalive_expiry
        self._closed = False

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        timeouts: dict[str, float | None] = request.extensions.get("timeout", {})
        url = request.url
        scheme = url.raw_scheme
        if scheme not in (b"http", b"https"):
            raise httpx.UnsupportedProtocol(f"unsupported URL scheme {url.scheme!r}")
        origin = (scheme, url.host, url.port or (443 if scheme == b"https" else 80))
        body = b"".join([part async for part in request.stream])  # type: ignore[union-attr]
        head = _request_head(request, len(body))
        for attempt in range(2):
            conn, reused = await self._connection(origin, timeouts, request)
            try:
                with contextlib.suppress(httpx.WriteError):
                    # A server may answer before it has read the whole request (413,
                    # too large) and close: what it said is read next, as httpcore does.
                    await conn.send(head + body, timeouts.get("write"), request)
                response = await conn.read_head(timeouts.get("read"), request)
            except httpx.TransportError:
                conn.close()
                self._slots.release()
                # A kept-alive connection the server closed meanwhile: once more, anew.
                if reused and attempt == 0 and not conn.got_bytes:
                    continue
                raise
            except BaseException:
                conn.close()
                self._slots.release()
                raise
            return httpx.Response(
                response.parser.get_status_code(),
                headers=response.headers,
                stream=_Body(self, origin, conn, response, timeouts.get("read"), request),
                extensions={"http_version": b"HTTP/1.1", "reason_phrase": response.reason},
            )
        raise AssertionError("unreachable")  # pragma: no cover

    async def aclose(self) -> None:
        self._closed = True
        for idle in self._idle.values():
            for _, conn in idle:
                conn.close()
                self._slots.release()
        self._idle.clear()

    # -- the pool ----------------------------------------------------------------

    async def _connection(
        self, origin: _Origin, timeouts: dict[str, float | None], request: httpx.Request
    ) -> tuple[_Connection, bool]:
        """A connection to `origin` holding one of the pool's slots: an idle one that
        is still good, or a new one; and whether it was reused."""
        idle = self._idle.get(origin)
        now = time.monotonic()
        while idle:
            since, conn = idle.pop()
            if now - since < self._expiry and conn.reusable():
                return conn, True
            conn.close()
            self._slots.release()
        try:
            self._slots.acquire_nowait()
        except trio.WouldBlock:
            if self._close_one_idle():
                self._slots.acquire_nowait()
            else:
                pool = timeouts.get("pool")
                with trio.move_on_after(pool if pool is not None else float("inf")) as waited:
                    await self._slots.acquire()
                if waited.cancelled_caught:
                    raise httpx.PoolTimeout(
                        "no connection became free in time", request=request
                    ) from None
        try:
            conn = await _Connection.open(origin, self._ssl, timeouts.get("connect"), request)
        except BaseException:
            self._slots.release()
            raise
        return conn, False

    def _close_one_idle(self) -> bool:
        """Close the oldest idle connection of any origin (its slot frees)."""
        oldest: tuple[float, _Origin] | None = None
        for origin, idle in self._idle.items():
            if idle and (oldest is None or idle[0][0] < oldest[0]):
                oldest = (idle[0][0], origin)
        if oldest is None:
            return False
        _, conn = self._idle[oldest[1]].pop(0)
        conn.close()
        self._slots.release()
        return True

    def give_back(self, origin: _Origin, conn: _Connection, reusable: bool) -> None:
        """A response is done with `conn`: keep it for the next request, or close it."""
        if reusable and not self._closed and not self._slots.statistics().tasks_waiting:
            self._idle.setdefault(origin, []).append((time.monotonic(), conn))
            return  # (a request waiting for a slot gets this one's instead)
        conn.close()
        self._slots.release()


def _request_head(request: httpx.Request, length: int) -> bytes:
    """The request line and headers (httpx has set Host, Content-Length and the rest)."""
    lines = [b"%s %s HTTP/1.1\r\n" % (request.method.encode(), request.url.raw_path)]
    has_length = False
    for name, value in request.headers.raw:
        if name.lower() == b"transfer-encoding":
            continue  # the body is sent whole, with its length
        has_length = has_length or name.lower() == b"content-length"
        lines.append(b"%s: %s\r\n" % (name, value))
    if not has_length and (length or request.method not in ("GET", "HEAD")):
        lines.append(b"Content-Length: %d\r\n" % length)
    lines.append(b"\r\n")
    return b"".join(lines)


class _Head:
    """What llhttp has parsed of one response (its callbacks' target)."""

    __slots__ = ("body", "done", "head_done", "headers", "keep_alive", "parser", "reason")

    def __init__(self) -> None:
        self.headers: list[tuple[bytes, bytes]] = []
        self.reason = b""
        self.body: list[bytes] = []
        self.head_done = False
        self.done = False
        self.keep_alive = False
        self.parser: Any = httptools.HttpResponseParser(self)

    def on_status(self, status: bytes) -> None:
        self.reason += status

    def on_header(self, name: bytes, value: bytes) -> None:
        self.headers.append((name, value))

    def on_headers_complete(self) -> None:
        if 100 <= self.parser.get_status_code() < 200:  # an interim answer (100 Continue):
            self.headers, self.reason = [], b""  # the response follows it
            return
        self.head_done = True
        self.keep_alive = self.parser.should_keep_alive()  # (False again once complete)

    def on_body(self, body: bytes) -> None:
        self.body.append(body)

    def on_message_complete(self) -> None:
        self.done = self.head_done

    def until_close(self) -> bool:
        """A body that ends when the server closes (no length, not chunked)."""
        for name, value in self.headers:
            lowered = name.lower()
            if lowered == b"content-length" or (
                lowered == b"transfer-encoding" and b"chunked" in value.lower()
            ):
                return False
        return True


class _Connection:
    """One HTTP/1.1 connection: a non-blocking socket of its own (trio's low-level
    waits), TLS through memory BIOs when https."""

    __slots__ = ("_eof", "_in", "_out", "_tls", "_wait_first", "got_bytes", "sock")

    def __init__(
        self,
        sock: socket.socket,
        tls: ssl.SSLObject | None,
        incoming: ssl.MemoryBIO,
        outgoing: ssl.MemoryBIO,
    ) -> None:
        self.sock = sock
        self._tls = tls
        self._in = incoming
        self._out = outgoing
        self._eof = False
        self._wait_first = True
        """Wait for the socket before reading: the last read was short, so the kernel
        most likely holds nothing more (a read that fails costs a system call)."""
        self.got_bytes = False
        """Whether the current response has sent anything (a retry is no longer safe)."""

    @classmethod
    async def open(
        cls, origin: _Origin, context: ssl.SSLContext, within: float | None, request: httpx.Request
    ) -> _Connection:
        scheme, host, port = origin
        with trio.CancelScope(deadline=_deadline(within)) as scope:
            try:
                stream = await trio.open_tcp_stream(host, port)  # (happy eyeballs, DNS)
                sock = socket.socket(fileno=stream.socket.detach())
                sock.setblocking(False)
                incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
                tls = None
                if scheme == b"https":
                    tls = context.wrap_bio(incoming, outgoing, server_hostname=host)
                conn = cls(sock, tls, incoming, outgoing)
                try:
                    if tls is not None:
                        await conn._handshake()
                except BaseException:
                    conn.close()
                    raise
                return conn
            except (OSError, ssl.SSLError) as exc:
                raise httpx.ConnectError(_words(exc), request=request) from exc
        assert scope.cancelled_caught
        raise httpx.ConnectTimeout(f"connecting to {host}:{port} timed out", request=request)

    async def _handshake(self) -> None:
        assert self._tls is not None
        while True:
            try:
                self._tls.do_handshake()
                break
            except ssl.SSLWantReadError:
                await self._flush()
                data = await self._recv()
                if data:
                    self._in.write(data)
                else:
                    self._in.write_eof()
        await self._flush()

    async def _recv(self) -> bytes:
        """What the kernel holds (b"": the server closed), waiting for it if need be."""
        sock = self.sock
        if self._wait_first:
            await trio.lowlevel.wait_readable(sock)
        else:
            await trio.lowlevel.checkpoint()  # (a read that never waits still yields)
        while True:
            try:
                data = sock.recv(_READ)
            except BlockingIOError:
                await trio.lowlevel.wait_readable(sock)
                continue
            self._wait_first = len(data) < _READ
            return data

    async def _send_raw(self, data: bytes) -> None:
        sock = self.sock
        view = memoryview(data)
        await trio.lowlevel.wait_writable(sock)
        while view:
            try:
                view = view[sock.send(view) :]
            except BlockingIOError:
                await trio.lowlevel.wait_writable(sock)

    async def _flush(self) -> None:
        if self._out.pending:
            await self._send_raw(self._out.read())

    async def send(self, data: bytes, within: float | None, request: httpx.Request) -> None:
        """Send a whole request."""
        self.got_bytes = False
        with trio.CancelScope(deadline=_deadline(within)) as scope:
            try:
                if self._tls is None:
                    await self._send_raw(data)
                else:
                    self._tls.write(data)
                    await self._flush()
                return
            except (OSError, ssl.SSLError) as exc:
                raise httpx.WriteError(_words(exc), request=request) from exc
        assert scope.cancelled_caught
        raise httpx.WriteTimeout("sending the request timed out", request=request)

    async def receive(self, within: float | None, request: httpx.Request) -> bytes:
        """Every byte of the response that one wake-up brings (b"": the server closed)."""
        with trio.CancelScope(deadline=_deadline(within)) as scope:
            try:
                data = await self._receive()
            except (OSError, ssl.SSLError) as exc:
                raise httpx.ReadError(_words(exc), request=request) from exc
            if data:
                self.got_bytes = True
            return data
        assert scope.cancelled_caught
        raise httpx.ReadTimeout("reading the response timed out", request=request)

    async def _receive(self) -> bytes:
        if self._tls is None:
            return await self._recv()
        while True:
            data = self._decrypted()
            if data or self._eof:
                return data
            raw = await self._recv()
            if raw:
                self._in.write(raw)
            else:
                self._in.write_eof()
            data = self._decrypted()
            if self._out.pending:  # (a key update the server asked for)
                await self._flush()
            if data or self._eof:
                return data

    def _decrypted(self) -> bytes:
        """What the records received so far hold, all of it."""
        assert self._tls is not None
        pieces = []
        while True:
            try:
                piece = self._tls.read(_READ)
            except ssl.SSLWantReadError:
                break
            except (ssl.SSLZeroReturnError, ssl.SSLEOFError):
                self._eof = True
                break
            if not piece:
                self._eof = True
                break
            pieces.append(piece)
        if not pieces:
            return b""
        return pieces[0] if len(pieces) == 1 else b"".join(pieces)

    async def read_head(self, within: float | None, request: httpx.Request) -> _Head:
        """Receive until the status line and headers are in (body bytes that came with
        them wait in the head)."""
        head = _Head()
        received = 0
        while not head.head_done:
            data = await self.receive(within, request)
            if not data:
                raise httpx.RemoteProtocolError(
                    "the server closed the connection without sending a response",
                    request=request,
                )
            received += len(data)
            _feed(head.parser, data, request)
            if not head.head_done and received > _HEAD_BYTES:
                raise httpx.RemoteProtocolError(
                    f"response headers larger than {_HEAD_BYTES} bytes", request=request
                )
        if request.method == "HEAD":  # (its Content-Length is of a body not sent)
            head.done = True
        return head

    def reusable(self) -> bool:
        """Still open, with nothing unread (a server that closed it is readable)."""
        sock = self.sock
        if sock.fileno() < 0 or self._eof or self._in.pending:
            return False
        readable, _, _ = select.select([sock], [], [], 0)
        return not readable

    def close(self) -> None:
        if self.sock.fileno() >= 0:
            trio.lowlevel.notify_closing(self.sock)
            self.sock.close()


def _deadline(within: float | None) -> float:
    """The deadline of a step that may take `within` seconds (None: no limit)."""
    return math.inf if within is None else trio.current_time() + within


def _feed(parser: Any, data: bytes, request: httpx.Request) -> None:
    try:
        parser.feed_data(data)
    except httptools.HttpParserError as exc:
        raise httpx.RemoteProtocolError(f"malformed HTTP response: {exc}", request=request) from exc


def _words(exc: BaseException) -> str:
    return str(exc) or type(exc).__name__


class _Body(httpx.AsyncByteStream):
    """A response's body, as each wake-up brings it; the connection goes back to the
    pool once the body is whole, else it is closed."""

    def __init__(
        self,
        transport: StreamTransport,
        origin: _Origin,
        conn: _Connection,
        head: _Head,
        timeout: float | None,
        request: httpx.Request,
    ) -> None:
        self._transport = transport
        self._origin = origin
        self._conn: _Connection | None = conn
        self._head = head
        self._timeout = timeout
        self._request = request

    def __aiter__(self) -> _Body:
        # An iterator, not an async generator: nothing is left for the garbage
        # collector to finalize when httpx's wrappers stop iterating early.
        return self

    async def __anext__(self) -> bytes:
        head = self._head
        body = head.body
        while not body:
            conn = self._conn
            if head.done or conn is None:
                raise StopAsyncIteration
            data = await conn.receive(self._timeout, self._request)
            if not data:
                if not head.until_close():
                    raise httpx.RemoteProtocolError(
                        "peer closed connection without sending complete message body",
                        request=self._request,
                    )
                head.done = True
                head.keep_alive = False
                raise StopAsyncIteration
            _feed(head.parser, data, self._request)
        chunk = body[0] if len(body) == 1 else b"".join(body)
        body.clear()
        return chunk

    async def aclose(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            done = self._head.done and self._head.keep_alive
            self._transport.give_back(self._origin, conn, done)
