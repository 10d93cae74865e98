"""A webhook receiver on loopback (h11 over trio sockets): it answers each POST with the
status its `answer` says, verifies Standard Webhooks signatures with the
`standardwebhooks` package (the spec's own library), and keeps what it got."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import h11
import trio
from standardwebhooks import Webhook

__all__ = ["Received", "WebhookReceiver"]


@dataclass
class Received:
    """One request, and the status it was answered."""

    path: str
    headers: dict[str, str]
    body: bytes
    status: int
    verified: bool

    @property
    def json(self) -> Any:
        return json.loads(self.body)


@dataclass
class WebhookReceiver:
    """`answer(n)` gives the status of the n-th request (1-based); `secret` verifies."""

    secret: str | None = None
    answer: Callable[[int], int] = lambda n: 200
    delay: float = 0.0
    """Seconds each answer takes (a slow receiver)."""
    got: list[Received] = field(default_factory=list)
    port: int = 0
    arrived: trio.Event = field(default_factory=trio.Event)

    def url(self, path: str = "/hook") -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    @property
    def delivered(self) -> list[Received]:
        """The requests answered 2xx."""
        return [r for r in self.got if 200 <= r.status < 300]

    async def serve(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
        self.port = listeners[0].socket.getsockname()[1]
        task_status.started()
        await trio.serve_listeners(self._connection, listeners)

    async def _connection(self, stream: trio.SocketStream) -> None:
        conn = h11.Connection(h11.SERVER)
        try:
            while True:
                request, body = await self._read(stream, conn)
                if request is None:
                    return
                await trio.sleep(self.delay)
                status = self._keep(request, body)
                reply = conn.send(
                    h11.Response(status_code=status, headers=[("content-length", "0")])
                )
                await stream.send_all((reply or b"") + (conn.send(h11.EndOfMessage()) or b""))
                if conn.our_state is h11.MUST_CLOSE:
                    return
                conn.start_next_cycle()
        except (trio.BrokenResourceError, trio.ClosedResourceError, h11.RemoteProtocolError):
            pass
        finally:
            await stream.aclose()

    async def _read(
        self, stream: trio.SocketStream, conn: h11.Connection
    ) -> tuple[h11.Request | None, bytes]:
        request, body = None, b""
        while True:
            event = conn.next_event()
            if event is h11.NEED_DATA:
                data = await stream.receive_some(65536)
                conn.receive_data(data)
                if not data and request is None:
                    return None, b""
            elif isinstance(event, h11.Request):
                request = event
            elif isinstance(event, h11.Data):
                body += bytes(event.data)
            elif isinstance(event, h11.EndOfMessage):
                return request, body
            elif isinstance(event, h11.ConnectionClosed):
                return None, b""

    def _keep(self, request: h11.Request, body: bytes) -> int:
        headers = {k.decode().lower(): v.decode() for k, v in request.headers}
        status = self.answer(len(self.got) + 1)
        verified = False
        if self.secret is not None:
            try:
                Webhook(self.secret).verify(body, headers)
                verified = True
            except Exception:
                verified = False
        self.got.append(Received(request.target.decode(), headers, body, status, verified))
        self.arrived.set()
        self.arrived = trio.Event()
        return status
