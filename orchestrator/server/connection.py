"""One WebSocket client: a reader that dispatches ops, and its feeds.

The reader and the feeds send their frames themselves, one at a time under one
lock, so replies keep their order (an `ack` goes out before the events of its
subscription). There is no queue of frames: a feed reads the journal only once its
previous frame is on the socket, so everything that arrived meanwhile goes out in
its next frame. A client (or a server busy with many clients) that is behind thus
gets fewer, bigger frames instead of a growing backlog — the latency of a live
event is one send, not a queue of them — and the server holds at most one frame
per subscription for it. Feeds wait on the socket, never the run. A send that
makes no progress for `slow_client_timeout` seconds closes the client with code
4000; it reconnects and resumes with `afterSeq`.

A caught-up feed follows its run (`Feed.offer`): the journal's writer hands it
each committed batch and it writes the frame through `send_now` — only when the
connection is idle, so the order above holds; what the socket did not take is
kept in `_unsent` and goes out before any other frame.

The ops themselves, and how each is authorized, are the table in `server/ops.py`.
"""

from __future__ import annotations

import importlib.util
import logging
from collections import Counter
from collections.abc import Awaitable
from typing import Protocol

import trio
from websockets.exceptions import ConnectionClosed
from websockets.trio.server import ServerConnection

from orchestrator import protocol
from orchestrator.core.filters import FilterSpec
from orchestrator.protocol import ProtocolError
from orchestrator.runs.service import StartedRun
from orchestrator.server import direct_send
from orchestrator.server.auth import Principal
from orchestrator.server.feed import Feed, Sent
from orchestrator.server.ops import OpContext, dispatch
from orchestrator.storage.runlog import UnknownRun

__all__ = ["SLOW_CLIENT_CLOSE", "Connection", "release"]

logger = logging.getLogger(__name__)
SLOW_CLIENT_CLOSE = 4000


async def release(ws: ServerConnection) -> None:
    """Make sure a connection whose handler is done really ends.

    websockets' trio receive task waits on its flow-control event before it reads
    again; when the handler stopped reading with a full receive queue (a client
    that sends and never reads), only a reader draining the queue sets that event.
    A review saw such tasks outlive their connections (and block shutdown); the
    scenario did not reproduce here on websockets 17.4, so this is defensive:
    close the socket, then set the event so the task sees the closed socket.
    """
    if ws.state.name != "CLOSED":
        with trio.move_on_after(1):
            await ws.aclose()
    await trio.aclose_forcefully(ws.stream)
    flow = getattr(ws, "recv_flow_control", None)
    if flow is not None:
        flow.set()


class _FeedSink:
    """What a live feed writes through (`LiveSink`): its connection and subscription."""

    __slots__ = ("_connection", "_scope")

    def __init__(self, connection: Connection, scope: trio.CancelScope) -> None:
        self._connection = connection
        self._scope = scope

    def send_now(self, frame: bytes) -> Sent:
        return self._connection.send_now(frame, self._scope)

    async def flush(self) -> None:
        await self._connection.flush()


class ConnectionContext(OpContext, Protocol):
    """What a connection uses of the server, besides what its ops read."""

    @property
    def frame_bytes(self) -> int: ...
    @property
    def feed_ended(self) -> trio.lowlevel.ParkingLot: ...
    @property
    def subscriptions(self) -> Counter[str | None]: ...
    def subscriptions_of(self, principal: Principal) -> int: ...


class Connection:
    """Serves one client until it disconnects."""

    def __init__(self, app: ConnectionContext, ws: ServerConnection, principal: Principal) -> None:
        self.app = app
        self.ws = ws
        self.principal = principal
        self._send_lock = trio.Lock()
        self._fd = direct_send.socket_fd(ws) if app.config.server.direct_send else None
        self._compress_from = app.config.server.compression_threshold
        """Frames this long or longer are compressed (if the client accepted it)."""
        self._unsent = b""
        """The rest of a frame the socket did not take at once: goes out before anything."""
        self.feeds: dict[str, Feed] = {}
        self._scopes: dict[str, trio.CancelScope] = {}
        self._calls: set[StartedRun] = set()
        """Blocking (`stream: false`) runs started here: cancelled if the client leaves."""
        self._next_sub = 0
        self._sending_since: float | None = None
        self._nursery: trio.Nursery | None = None
        self._closing = False

    async def serve(self) -> None:
        """Read and dispatch client messages until the connection closes."""
        try:
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                nursery.start_soon(self._watchdog)
                try:
                    while True:  # recv(), not `async for`: leaving early needs no cleanup
                        await self._handle(await self.ws.recv())
                except (ConnectionClosed, trio.ClosedResourceError, trio.BrokenResourceError):
                    pass
                finally:
                    nursery.cancel_scope.cancel()
        finally:
            for run in list(self._calls):  # nobody is left to get their result
                with trio.CancelScope(shield=True), trio.move_on_after(2):
                    try:  # in the cluster: asks its worker, briefly
                        await self.app.runs.cancel(
                            run.run_id, reason="the client that started it disconnected"
                        )
                    except Exception as exc:
                        logger.warning("cancelling run %s: %s", run.run_id, exc)

    # -- output ----------------------------------------------------------------

    async def reply(self, frame: bytes) -> None:
        """Send one frame, whole and in turn (waits while the client is behind).

        If the connection is gone, the connection's tasks are cancelled: the caller
        sees `trio.Cancelled`, never an error of its own.
        """
        if self._closing:
            return
        # A frame may go out without a wait (no checkpoint): a feed whose subscription
        # was just ended (`unsubscribe` cancels it, then acks) must not send after that.
        await trio.lowlevel.checkpoint_if_cancelled()
        lock = self._send_lock
        try:  # the usual case, free: no extra trip through the scheduler per frame
            lock.acquire_nowait()
        except trio.WouldBlock:
            await lock.acquire()
        try:
            await self._send(frame)
        finally:
            lock.release()

    def send_now(self, frame: bytes, scope: trio.CancelScope) -> Sent:
        """Write a feed's frame at once, from any task, if nothing stands in the way.

        For live feeds that the journal hands new events directly (`Feed.offer`):
        nothing awaits, so the frame goes out only if the connection is idle —
        no send under way, nothing left over, the feed's subscription (`scope`) not
        ended. Bytes the socket did not take are kept and go out first with the
        next `reply` or `flush`.
        """
        if (
            self._closing
            or self._fd is None
            or self._unsent
            or scope.cancel_called
            or self._send_lock.locked()
        ):
            return Sent.NOT_NOW
        try:
            rest = self._write_now(self._fd, frame)
        except OSError:  # the feed's own send finds the broken socket and ends things
            return Sent.NOT_NOW
        if rest is None:
            return Sent.NOT_NOW
        if rest:
            self._unsent = rest
            self._sending_since = trio.current_time()
            return Sent.PARTLY
        return Sent.WHOLE

    async def flush(self) -> None:
        """Write what `send_now` left over, if anything."""
        if self._unsent and not self._closing:
            async with self._send_lock:
                await self._write_rest()

    async def _send(self, frame: bytes) -> None:
        ws = self.ws
        if self._unsent:
            await self._write_rest()
            if self._closing:
                return
        if self._fd is not None:
            try:
                rest = self._write_now(self._fd, frame)
            except OSError:
                await trio.aclose_forcefully(ws.stream)
                self._gone()
                await trio.lowlevel.checkpoint_if_cancelled()
                return
            if rest == b"":
                return
        else:
            rest = None
        if rest is None:
            await self._shielded(ws.send(frame, text=True))
        else:
            self._unsent = rest
            await self._write_rest()

    def _write_now(self, fd: int, frame: bytes) -> bytes | None:
        """`direct_send.write_now`, compressing from `server.compression_threshold` up."""
        return direct_send.write_now(self.ws, fd, frame, compress=len(frame) >= self._compress_from)

    async def _write_rest(self) -> None:
        """Write `_unsent` (under the send lock): the rest of a frame half written."""
        ws, rest = self.ws, self._unsent
        self._unsent = b""

        async def write() -> None:
            async with ws.send_lock:
                await ws.stream.send_all(rest)

        await self._shielded(write())

    async def _shielded(self, sending: Awaitable[None]) -> None:
        """Await a send whole: a cancelled feed must not cut a frame in half (that would
        break the stream for every subscription), so the send is shielded — bounded by
        a deadline past the watchdog's, after which the socket is dropped."""
        ws = self.ws
        timeout = self.app.config.server.slow_client_timeout
        self._sending_since = trio.current_time()
        try:
            with trio.CancelScope(shield=True) as shield:
                shield.relative_deadline = timeout + 10
                await sending
        except (ConnectionClosed, trio.ClosedResourceError, trio.BrokenResourceError):
            self._gone()
        finally:
            self._sending_since = None
        if shield.cancelled_caught:
            await trio.aclose_forcefully(ws.stream)
            self._gone()
        await trio.lowlevel.checkpoint_if_cancelled()

    def _gone(self) -> None:
        """The socket is closed: end the reader and every feed of this connection."""
        self._closing = True
        if self._nursery is not None:
            self._nursery.cancel_scope.cancel()

    async def finish(self, code: int, reason: str) -> None:
        """Close gracefully: the frame being sent goes out whole, then the close frame."""
        self._closing = True
        for scope in list(self._scopes.values()):
            scope.cancel()
        async with self._send_lock:
            await self.ws.aclose(code, reason)

    async def _watchdog(self) -> None:
        timeout = self.app.config.server.slow_client_timeout
        while True:
            await trio.sleep(min(1.0, timeout / 4))
            since = self._sending_since
            if since is not None and trio.current_time() - since > timeout:
                await self._close_slow()
                return

    async def _close_slow(self) -> None:
        stream = self.ws.stream
        peer = stream.socket.getpeername() if isinstance(stream, trio.SocketStream) else stream
        logger.info("closing a slow client (%s)", peer)
        with trio.move_on_after(5):
            await self.ws.aclose(
                SLOW_CLIENT_CLOSE, "slow consumer: reconnect and resume with afterSeq"
            )
        await trio.aclose_forcefully(self.ws.stream)
        if self._nursery is not None:
            self._nursery.cancel_scope.cancel()

    # -- input -----------------------------------------------------------------

    async def _handle(self, message: str | bytes) -> None:
        msg_id: protocol.MessageId = None
        try:
            op = protocol.parse(message)
            msg_id = op.id
            await dispatch(self, op)
        except ProtocolError as exc:
            await self.reply(protocol.error_frame(exc.code, exc.message, exc.id or msg_id))
        except Exception as exc:
            logger.exception("op failed")
            await self.reply(
                protocol.error_frame("internal", f"{type(exc).__name__}: {exc}", msg_id)
            )

    def await_result(self, run: StartedRun, msg_id: protocol.MessageId) -> None:
        """Send a blocking run's `result` frame once it ends (cancelled if the client leaves)."""
        assert self._nursery is not None
        self._calls.add(run)
        self._nursery.start_soon(self._await_result, run, msg_id)

    async def _await_result(self, run: StartedRun, msg_id: protocol.MessageId) -> None:
        result = await run.wait()
        self._calls.discard(run)
        frame = protocol.Result(
            run_id=result.run_id,
            status=result.status,
            text=result.text,
            id=msg_id,
            error=result.error,
            structured=result.structured,
        )
        await self.reply(protocol.encode(frame))

    # -- subscriptions ---------------------------------------------------------

    def check_sub_limit(self, msg_id: protocol.MessageId) -> None:
        """Refuse a new subscription over the connection's or the token's limit."""
        limit = self.app.config.server.max_subscriptions
        if len(self._scopes) >= limit:
            raise ProtocolError(
                "limit_exceeded",
                f"this connection already has {len(self._scopes)} subscriptions "
                f"(server.max_subscriptions is {limit})",
                msg_id,
            )
        mine = self.app.subscriptions_of(self.principal)
        if mine >= self.principal.max_subscriptions:
            raise ProtocolError(
                "limit_exceeded",
                f"token {self.principal.name!r} already holds {mine} subscriptions "
                f"(its limit is {self.principal.max_subscriptions})",
                msg_id,
            )

    def new_feed(
        self,
        run_id: str,
        after_seq: int,
        filter: FilterSpec | None,
        detail: str,
        msg_id: protocol.MessageId,
        format: str = "events",
    ) -> Feed:
        """A new subscription's feed (not started yet: its `ack` goes out first).

        Raises:
            ProtocolError: `format: "ag-ui"` without the `agui` extra.
        """
        self.check_sub_limit(msg_id)
        if format == "ag-ui" and importlib.util.find_spec("ag_ui") is None:
            raise ProtocolError(
                "bad_request",
                "format ag-ui needs the `agui` extra on the server: "
                "pip install 'agent-orchestrator[agui]'",
                msg_id,
            )
        self._next_sub += 1
        sub = f"s{self._next_sub}"
        return Feed(
            self.app.journal,
            sub,
            run_id,
            after_seq=after_seq,
            filter=filter,
            detail=detail,
            ag_ui=format == "ag-ui",
            frame_bytes=self.app.frame_bytes,
            coalesce=self.app.config.server.live_coalesce_ms / 1000,
        )

    def start_feed(self, feed: Feed) -> None:
        """Run a feed in this connection's nursery until it ends or is unsubscribed."""
        scope = trio.CancelScope()
        self._scopes[feed.sub] = scope
        self.feeds[feed.sub] = feed
        self.app.subscriptions[self.principal.name] += 1
        assert self._nursery is not None
        self._nursery.start_soon(self._run_feed, feed, scope)

    def end_feed(self, sub: str) -> bool:
        """End a subscription (False: there is none by that name)."""
        scope = self._scopes.pop(sub, None)
        if scope is None:
            return False
        scope.cancel()
        self.feeds.pop(sub, None)
        return True

    async def _run_feed(self, feed: Feed, scope: trio.CancelScope) -> None:
        try:
            with scope:
                try:
                    await feed.run(
                        self.reply, _FeedSink(self, scope) if self._fd is not None else None
                    )
                except UnknownRun:
                    await self.reply(
                        protocol.error_frame(
                            "not_found",
                            f"run {feed.run_id!r} was deleted by the retention policy "
                            f"(subscription {feed.sub} ended)",
                        )
                    )
                except Exception as exc:  # storage read failed: end this feed, not the client
                    logger.warning("feed %s of run %s failed: %s", feed.sub, feed.run_id, exc)
                    await self.reply(
                        protocol.error_frame(
                            "unavailable",
                            f"storage unavailable ({type(exc).__name__}); subscription "
                            f"{feed.sub} ended at seq {feed.cursor}: resubscribe with "
                            f"afterSeq {feed.cursor}",
                        )
                    )
        finally:
            if self._scopes.get(feed.sub) is scope:
                del self._scopes[feed.sub]
                self.feeds.pop(feed.sub, None)
            self.app.subscriptions[self.principal.name] -= 1
            self.app.feed_ended.unpark_all()
