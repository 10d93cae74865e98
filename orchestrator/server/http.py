"""Plain HTTP on the server's port: the console's files, /auth, /healthz, /metrics,
and the checks on a WebSocket upgrade (origin, token, connection count).

websockets calls `process_request` for every request before the handshake: a
Response answers it (and ends it), None lets the upgrade to /ws go on.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Sized
from http import HTTPStatus
from importlib import resources
from typing import TYPE_CHECKING, Protocol
from urllib.parse import urlsplit

from prometheus_client import CollectorRegistry, generate_latest
from websockets.http11 import Request, Response
from websockets.trio.server import ServerConnection

from orchestrator.config import ServerConfig
from orchestrator.server.auth import Auth, bad_headers, unauthorized
from orchestrator.server.endpoints import HOST_REFUSED, refused_host
from orchestrator.storage.journal import Journal

if TYPE_CHECKING:  # (the cluster, and with it the Redis client, loads only in cluster mode)
    from orchestrator.cluster.node import Node

__all__ = ["STATIC_FILES", "RouteContext", "Routes"]

STATIC_FILES = {
    "app.js": "text/javascript; charset=utf-8",
    "chat.js": "text/javascript; charset=utf-8",
    "conn.js": "text/javascript; charset=utf-8",
    "client/index.js": "text/javascript; charset=utf-8",
    "client/client.js": "text/javascript; charset=utf-8",
    "client/tree.js": "text/javascript; charset=utf-8",
    "markdown.js": "text/javascript; charset=utf-8",
    "inbox.js": "text/javascript; charset=utf-8",
    "vendor/marked.esm.js": "text/javascript; charset=utf-8",
    "vendor/purify.es.mjs": "text/javascript; charset=utf-8",
    "style.css": "text/css; charset=utf-8",
    "favicon.svg": "image/svg+xml",
}
"""The console's files under /static/ (a fixed list: no path from a request reaches the disk)."""
CONSOLE_CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' blob:; "
    "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)
"""The console page's Content-Security-Policy: its own scripts, styles and images only,
no inline script, nothing loaded from elsewhere (a model's Markdown is sanitized too:
static/markdown.js), and only its own origin to talk to (the WebSocket included); an
attachment's thumbnail is a `blob:` URL of bytes it asked for over the socket."""


class RouteContext(Protocol):
    """What the HTTP routes use of the server: settings and tokens, how many are
    connected, the journal's and the cluster's health, the metrics."""

    @property
    def config(self) -> ServerConfig: ...
    @property
    def auth(self) -> Auth: ...
    @property
    def connections(self) -> Sized: ...
    @property
    def journal(self) -> Journal: ...
    @property
    def node(self) -> Node | None: ...
    @property
    def registry(self) -> CollectorRegistry: ...


class Routes:
    """The server's HTTP routes (`process_request` for websockets' `serve`)."""

    def __init__(self, app: RouteContext) -> None:
        self.app = app

    def process_request(self, conn: ServerConnection, request: Request) -> Response | None:
        """Plain HTTP routes; origin, token and connection-count checks on the upgrade."""
        app = self.app
        url = urlsplit(request.path)
        malformed = bad_headers(request.headers)
        if malformed is not None:
            return conn.respond(HTTPStatus.BAD_REQUEST, malformed + "\n")
        host = request.headers.get("Host")
        if not app.auth.host_allowed(host):
            refused_host(host, url.path)
            return conn.respond(HTTPStatus.FORBIDDEN, HOST_REFUSED + "\n")
        if url.path in ("/", "/index.html"):
            page = _respond(conn, HTTPStatus.OK, _static("index.html"), "text/html; charset=utf-8")
            page.headers["Content-Security-Policy"] = CONSOLE_CSP
            return page
        if url.path.startswith("/static/"):
            name = url.path.removeprefix("/static/")
            kind = STATIC_FILES.get(name)
            if kind is None:
                return conn.respond(HTTPStatus.NOT_FOUND, "not found\n")
            return _respond(conn, HTTPStatus.OK, _static(name), kind)
        if url.path == "/healthz":
            return self._health(conn)
        if url.path == "/auth":  # the console asks before connecting (200 either way:
            # a 401 would be a console error in every browser)
            principal = app.auth.identify(request.headers, url.query)
            body: dict[str, object] = {
                "authorized": principal is not None,
                # what the page checks before it sends (a frame past these closes with 1009)
                "maxInputBytes": app.config.limits.max_input_bytes,
                "maxFrameBytes": app.config.server.max_frame_bytes,
            }
            if principal is not None:
                body["name"], body["admin"] = principal.name, principal.admin
                body["readOnly"] = principal.read_only
            return _respond(conn, HTTPStatus.OK, json.dumps(body).encode(), "application/json")
        if url.path == "/metrics":
            if not app.auth.may_read_metrics(request.headers, url.query):
                return conn.respond(
                    HTTPStatus.UNAUTHORIZED,
                    "unauthorized: /metrics needs an admin token or server.metrics_token\n",
                )
            return _respond(
                conn,
                HTTPStatus.OK,
                generate_latest(app.registry),
                "text/plain; version=0.0.4; charset=utf-8",
            )
        if url.path != "/ws":
            return conn.respond(
                HTTPStatus.NOT_FOUND,
                "not found: use /, /ws, /auth, /healthz or /metrics "
                "(/mcp needs server.mcp: true)\n",
            )
        if not app.auth.origin_allowed(request.headers):
            return conn.respond(
                HTTPStatus.FORBIDDEN,
                "forbidden: cross-site WebSocket (add the page's origin to "
                "server.allowed_origins)\n",
            )
        if app.auth.identify(request.headers, url.query) is None:
            return conn.respond(
                HTTPStatus.UNAUTHORIZED, unauthorized(request.headers, url.query) + "\n"
            )
        if len(app.connections) >= app.config.server.max_connections:
            return conn.respond(
                HTTPStatus.SERVICE_UNAVAILABLE,
                f"too many connections (server.max_connections is "
                f"{app.config.server.max_connections})\n",
            )
        return None

    def _health(self, conn: ServerConnection) -> Response:
        app = self.app
        healthy = app.journal.writer.healthy
        body: dict[str, object] = (
            {"status": "ok"}
            if healthy
            else {"status": "degraded", "storage": "failing", "runs": "refused"}
        )
        node = app.node
        if node is not None:
            body["cluster"] = node.config.name
            body["role"] = node.role
            if node.worker is not None:
                body["worker"] = node.worker.name
                body["runs"] = len(node.worker.owned) if healthy else "refused"
        status = HTTPStatus.OK if healthy else HTTPStatus.SERVICE_UNAVAILABLE
        return _respond(conn, status, json.dumps(body).encode(), "application/json")


@functools.cache
def _static(name: str) -> bytes:
    """A file of the live tree console (static; it talks to /ws like any client)."""
    return (resources.files("orchestrator.server") / "static" / name).read_bytes()


def _respond(
    conn: ServerConnection, status: HTTPStatus, body: bytes, content_type: str
) -> Response:
    response = conn.respond(status, "")
    response.body = body
    del response.headers["Content-Type"]
    del response.headers["Content-Length"]
    response.headers["Content-Type"] = content_type
    response.headers["Content-Length"] = str(len(body))
    return response
