"""The HTTP doors on the server's port besides `/ws` — MCP, hooks, AG-UI, A2A — as one table,
like the ops (`ops.py`): a door is a path prefix, the setting that turns it on, and how
to make its endpoint. `open_doors` makes the endpoints that are on; the front door
(`front.py`) routes each connection to the first whose prefix its path has.

To add a door: write its endpoint (a class made from a `DoorContext`, what a door may
use of the server, with `serve(stream)` for one routed connection and, if it owns
something while the server runs, an async context manager `running()`), add its
setting to `ServerSection`, and add a row here.
Each endpoint's module is imported only when its door is on: it may need an extra.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Protocol

import trio

from orchestrator.server.endpoints import DoorContext

__all__ = ["DOORS", "Door", "Endpoint", "Route", "open_doors"]

Route = tuple[bytes, Callable[[trio.abc.Stream], Awaitable[None]]]
"""(path, serve): connections whose request path is `path` or below it go to `serve`
(`front.route_connections`)."""


class Endpoint(Protocol):
    """What a door's endpoint does: serve one connection routed to it."""

    async def serve(self, stream: trio.abc.Stream) -> None: ...


@dataclass(frozen=True)
class Door:
    prefix: bytes
    """The path prefix routed to it (`/mcp`)."""
    setting: str
    """The `server.` setting that turns it on."""
    make: Callable[[DoorContext], Endpoint]
    running: Callable[[Endpoint], contextlib.AbstractAsyncContextManager[object]] | None = None
    """What the endpoint owns while the server runs (entered once, before serving)."""


def _mcp(app: DoorContext) -> Endpoint:
    from orchestrator.server.mcp_http import McpEndpoint  # the `mcp` extra, only here

    return McpEndpoint(app)


def _mcp_running(endpoint: Endpoint) -> contextlib.AbstractAsyncContextManager[object]:
    from orchestrator.server.mcp_http import McpEndpoint

    assert isinstance(endpoint, McpEndpoint)
    return endpoint.running()


def _agui(app: DoorContext) -> Endpoint:
    from orchestrator.server.agui_http import AguiEndpoint  # the `agui` extra

    return AguiEndpoint(app)


def _a2a(app: DoorContext) -> Endpoint:
    from orchestrator.server.a2a_http import A2aEndpoint  # the `a2a` extra

    return A2aEndpoint(app)


def _hooks(app: DoorContext) -> Endpoint:
    from orchestrator.server.hooks_http import HooksEndpoint

    return HooksEndpoint(app)


DOORS: tuple[Door, ...] = (
    Door(b"/mcp", "mcp", _mcp, _mcp_running),
    Door(b"/hooks", "hooks", _hooks),
    Door(b"/ag-ui", "ag_ui", _agui),
    Door(b"/a2a", "a2a", _a2a),
)


@contextlib.asynccontextmanager
async def open_doors(app: DoorContext) -> AsyncIterator[list[Route]]:
    """The routes of the doors that are on, their endpoints running until this ends."""
    routes: list[Route] = []
    async with contextlib.AsyncExitStack() as stack:
        for door in DOORS:
            if not getattr(app.config.server, door.setting):
                continue
            endpoint = door.make(app)
            if door.running is not None:
                await stack.enter_async_context(door.running(endpoint))
            serve: Callable[[trio.abc.Stream], Awaitable[None]] = endpoint.serve
            routes.append((door.prefix, serve))
        yield routes
