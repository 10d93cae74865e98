"""`/mcp` on `orchestrator serve` (`server.mcp: true`): the subagents as MCP tools over
streamable HTTP, behind the server's tokens.

Imported only when `server.mcp` is on (it needs the `mcp` extra). A connection for
`/mcp` comes through the front door (`front.py`) and the h11 bridge (`asgi.py`) to
the MCP SDK's own session manager; before it, the checks `/ws` makes: origin, token,
and a viewer token may not start runs. A tool call starts a run here like the `run`
op (owned by the token, counted in its `max_concurrent_runs`, in the journal, live
in the console), follows its events in the journal as progress notifications, and
returns its final answer; a cancelled call (MCP's cancellation, or the client
leaving) cancels the run.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, MutableMapping
from contextlib import aclosing, asynccontextmanager
from typing import Any

import msgspec
import trio
from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
from mcp.server.auth.provider import AccessToken
from mcp.server.mcpserver import Context
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.transport_security import TransportSecuritySettings

from orchestrator.core.threads import MAX_THREAD_ID, ThreadAsk
from orchestrator.errors import OrchestratorError
from orchestrator.mcp.expose import SubagentResult, TreeProgress, subagent_server
from orchestrator.server.auth import Principal
from orchestrator.server.endpoints import (
    DoorContext,
    authorize,
    serve_connection,
    start_run,
)
from orchestrator.server.follow import follow_run

__all__ = ["McpEndpoint"]

_PRINCIPAL = "orchestrator.principal"
"""Where the checked principal of a request rides in its ASGI scope (the tool reads it)."""
_CANCEL_SECONDS = 5.0
_FOLLOW_END_SECONDS = 5.0
"""How long a finished call waits for its run's last events to reach its progress."""


class McpEndpoint:
    """The subagents of `app` as an MCP server on `/mcp`."""

    def __init__(self, app: DoorContext) -> None:
        self.app = app
        specs = app.orchestrator.specs.values()
        self.server = subagent_server(
            ((s.id, s.description, s.output_schema) for s in specs), self._call
        )
        self.server.streamable_http_app(  # builds the session manager this endpoint drives
            max_sessions=app.config.server.max_connections,
            # Origins are checked below as on /ws (server.allowed_origins), so the
            # SDK's own localhost-only host check would only refuse proxied clients.
            transport_security=TransportSecuritySettings(enable_dns_rebinding_protection=False),
        )
        self.manager = self.server.session_manager

    @asynccontextmanager
    async def running(self) -> AsyncIterator[McpEndpoint]:
        """Own the MCP sessions: they end when this does."""
        async with self.manager.run():
            yield self

    async def serve(self, stream: trio.abc.Stream) -> None:
        """Serve one connection routed to `/mcp`."""
        await serve_connection(stream, self._asgi, self.app.auth)

    async def _asgi(self, scope: MutableMapping[str, Any], receive: Any, send: Any) -> None:
        principal = await authorize(self.app, scope, send, writes=True)
        if principal is not None:
            scope[_PRINCIPAL] = principal
            # The SDK binds a session to the user that opened it: another token's
            # request with its Mcp-Session-Id is answered 404, as an unknown session.
            # (Only the token's name: the token itself is not kept.)
            who = AccessToken(token="", client_id=principal.name or "", scopes=[])
            scope["user"] = AuthenticatedUser(who)
            await self.manager.handle_request(scope, receive, send)

    async def _call(
        self, agent_id: str, task: str, thread_id: str | None, ctx: Context
    ) -> SubagentResult:
        app = self.app
        principal: Principal = ctx.request_context.request.scope[_PRINCIPAL]  # type: ignore[union-attr]
        if thread_id is not None and not 0 < len(thread_id) <= MAX_THREAD_ID:
            raise ToolError(f"threadId is 1 to {MAX_THREAD_ID} characters")
        thread = ThreadAsk(thread_id=thread_id) if thread_id is not None else None
        try:
            started = await start_run(app, principal, agent_id, task, thread=thread)
        except OrchestratorError as exc:  # (a tool's error names what: errors.py)
            raise ToolError(exc.message) from None
        run_id = started.run_id
        followed = trio.Event()
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._follow, run_id, TreeProgress(ctx, agent_id), followed)
                result = await started.wait()
                # The run's last events may still be on their way through the journal:
                # its progress ends at its total before the answer goes out (bounded).
                with trio.move_on_after(_FOLLOW_END_SECONDS):
                    await followed.wait()
                nursery.cancel_scope.cancel()
        except BaseException:
            with trio.CancelScope(shield=True), trio.move_on_after(_CANCEL_SECONDS):
                # The call was cancelled, or the session is ending: so is the run.
                await app.runs.cancel(run_id, reason="the MCP call was cancelled")
            raise
        if result.status != "completed":
            raise ToolError(f"run {run_id} {result.status}: {result.error or ''}".rstrip(": "))
        answer = SubagentResult(result=result.text or "", runId=run_id, threadId=started.thread_id)
        if result.structured is not msgspec.UNSET:
            answer["structured"] = result.structured
        return answer

    async def _follow(self, run_id: str, progress: TreeProgress, done: trio.Event) -> None:
        """The run's events as progress, read from the journal as they are committed,
        to its end (`done` is set then)."""
        async with aclosing(follow_run(self.app.journal, run_id)) as batches:
            async for entries in batches:
                for entry in entries:
                    source = entry.event.source
                    path = source.path if source is not None else None
                    progress.see(entry.event.type, path, entry.event.data)
                await progress.report()
        done.set()
