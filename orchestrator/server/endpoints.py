"""What the streaming HTTP endpoints (`/mcp`, `/ag-ui`) share: the checks `/ws` makes
before a request is served, and plain JSON refusals."""

from __future__ import annotations

import json
import logging
from collections.abc import MutableMapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

import trio
from websockets.datastructures import Headers

from agents.core.attachments import AttachmentIn, infos
from orchestrator.config import ServerConfig
from orchestrator.core.threads import ThreadAsk
from orchestrator.errors import OrchestratorError, Refused, shown
from orchestrator.runs.service import RunService, StartedRun
from orchestrator.runtime.engine import Orchestrator
from orchestrator.server.asgi import ASGIApp, Message, serve_http
from orchestrator.server.auth import Auth, Principal, bad_headers, unauthorized
from orchestrator.storage.base import RunOptions
from orchestrator.storage.journal import Journal

if TYPE_CHECKING:
    from orchestrator.webhooks.outbox import Outbox

__all__ = [
    "HOST_REFUSED",
    "DoorContext",
    "Refused",
    "authorize",
    "refuse",
    "refused_host",
    "serve_connection",
    "start_run",
]

logger = logging.getLogger(__name__)


class DoorContext(Protocol):
    """What an HTTP door (`/mcp`, `/ag-ui`, `/a2a`) uses of the server: its settings and
    tokens, the runs, their journal, and the agents."""

    @property
    def config(self) -> ServerConfig: ...
    @property
    def auth(self) -> Auth: ...
    @property
    def runs(self) -> RunService: ...
    @property
    def journal(self) -> Journal: ...
    @property
    def orchestrator(self) -> Orchestrator: ...
    @property
    def closing(self) -> bool: ...
    @property
    def outbox(self) -> Outbox | None: ...


async def start_run(
    app: DoorContext,
    principal: Principal,
    agent_id: str,
    task: str,
    context_id: str | None = None,
    thread: ThreadAsk | None = None,
    attachments: Sequence[AttachmentIn] = (),
) -> StartedRun:
    """Start a run as the `run` op does: the task bounded, owned by the token, within
    its run limits; in `thread` (None: a new one); with `attachments` (checked, fetched
    and stored as the op's are: docs/structured.md#attachments).

    Raises:
        Refused: 413 task too long, 400 a bad attachment, 404 unknown agent (or agent
            of the thread), 429 a run limit (or a run of the thread running), 400 a
            thread that cannot go on as asked, 503 shutting down or storage failing.
    """
    limit = app.config.limits.max_input_bytes
    if len(task.encode()) > limit:
        raise Refused(413, f"the task is over limits.max_input_bytes ({limit} bytes)")
    if app.closing:
        raise Refused(503, "the server is shutting down")
    try:
        given = await app.orchestrator.catalog.receive(attachments) if attachments else []
        options = RunOptions(attachments=tuple(infos(given))) if given else None
        return await app.runs.start(
            agent_id,
            task,
            owner=principal.name,
            max_runs=principal.max_runs if principal.name is not None else None,
            context_id=context_id,
            thread=thread,
            options=options,
            blobs={a.id: a.data for a in given} or None,
        )
    except OrchestratorError as exc:  # every family, shown by its code (errors.py)
        raise Refused(shown(exc).http, exc.message) from None


async def serve_connection(stream: trio.abc.Stream, app: ASGIApp, auth: Auth) -> None:
    """Serve one connection the front door routed to an endpoint, as HTTP/1.1 to `app`;
    each request's `Host` is checked first (`Auth.host_allowed`: DNS rebinding)."""
    server: tuple[str, int] | None = None
    client: tuple[str, int] | None = None
    if isinstance(stream, trio.SocketStream):  # (else a stream with no address)
        try:
            server, client = stream.socket.getsockname()[:2], stream.socket.getpeername()[:2]
        except OSError:  # it is gone already
            await trio.aclose_forcefully(stream)
            return

    async def checked(scope: MutableMapping[str, Any], receive: Any, send: Any) -> None:
        headers = Headers((k.decode("latin-1"), v.decode("latin-1")) for k, v in scope["headers"])
        malformed = bad_headers(headers)
        if malformed is not None:
            await refuse(send, 400, malformed)
            return
        host = headers.get("Host")
        if not auth.host_allowed(host):
            refused_host(host, scope.get("path", "?"))
            await refuse(send, 403, HOST_REFUSED)
            return
        await app(scope, receive, send)

    await serve_http(stream, checked, server=server, client=client)


HOST_REFUSED = (
    "forbidden: this server is not reachable by that Host name (DNS rebinding?); "
    "add it to server.allowed_hosts"
)


def refused_host(host: str | None, path: str) -> None:
    """One log line for a refused Host (bounded: it is the client's text)."""
    logger.warning("refused a request for %.100s with Host %.100r", path, host)


async def authorize(
    app: DoorContext, scope: MutableMapping[str, Any], send: Any, *, writes: bool
) -> Principal | None:
    """The request's principal, or None once it was refused: a cross-site `Origin`
    (403), no or a wrong token (401), a viewer token where the request `writes` (403)."""
    auth = app.auth
    headers = Headers((k.decode("latin-1"), v.decode("latin-1")) for k, v in scope["headers"])
    if not auth.origin_allowed(headers):
        await refuse(
            send,
            403,
            "forbidden: cross-site request (add the page's origin to server.allowed_origins)",
        )
        return None
    principal = auth.identify(headers, scope["query_string"].decode("latin-1"))
    if principal is None:
        await refuse(
            send,
            401,
            unauthorized(headers, scope["query_string"].decode("latin-1")),
            [(b"www-authenticate", b"Bearer")],
        )
        return None
    if writes and principal.read_only:
        await refuse(send, 403, "forbidden: a viewer token may not start runs")
        return None
    return principal


async def read_body(receive: Any, limit: int) -> bytes | None:
    """A request's whole body, or None past `limit` bytes (a chunked body says no
    length up front: it is counted as it comes); a client gone mid-body gives what came."""
    body = bytearray()
    while True:
        message = await receive()
        if message["type"] != "http.request":
            return bytes(body)
        body += message.get("body", b"")
        if len(body) > limit:
            return None
        if not message.get("more_body"):
            return bytes(body)


def replayed(body: bytes, receive: Any) -> Any:
    """`receive` for an app, once the body was read here: the body first, then the
    connection's own messages (the client leaving)."""
    given = False

    async def again() -> Any:
        nonlocal given
        if not given:
            given = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return again


async def refuse(
    send: Any, status: int, text: str, extra: list[tuple[bytes, bytes]] | None = None
) -> None:
    """Answer `{"error": text}` with `status`."""
    body = json.dumps({"error": text}).encode()
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
    ]
    start: Message = {
        "type": "http.response.start",
        "status": status,
        "headers": headers + (extra or []),
    }
    await send(start)
    await send({"type": "http.response.body", "body": body})
