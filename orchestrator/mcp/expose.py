"""Our subagents as MCP tools: one tool per subagent, `{task}` in, the final answer out.

Shared by the two ways of serving them — `orchestrator mcp` over stdio (a bridge to
a running server) and `/mcp` on `orchestrator serve` (streamable HTTP, in-process).
Each supplies `call`, which runs the subagent's tree and reports its progress
through a `TreeProgress`. Imported only where the `mcp` extra is installed.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable
from typing import Any

import trio
from mcp.server.mcpserver import Context, MCPServer

__all__ = ["PROGRESS_EVERY", "TreeProgress", "subagent_server"]

PROGRESS_EVERY = 0.25
"""Seconds between two progress notifications of one call."""

Call = Callable[[str, str, Context], Awaitable[str]]
"""`call(agent_id, task, ctx)`: run the tree, report progress on `ctx`, return the answer."""


class TreeProgress:
    """A run's agents counted from its events, told as MCP progress (at most every
    `PROGRESS_EVERY` seconds): `finished / started`, and where the newest event came from."""

    def __init__(self, ctx: Context, root: str) -> None:
        self.ctx = ctx
        self.started, self.finished = 1, 0
        self.where = root
        self._next = 0.0

    def see(self, kind: str, path: str | None) -> None:
        """Count one event of the run (`path`: its source's, None for the run's own)."""
        if kind == "AGENT_STARTED":
            self.started += 1
        elif kind in ("AGENT_RESULT", "AGENT_ERROR"):
            self.finished += 1
        if path is not None:
            self.where = path

    async def report(self) -> None:
        """Send a progress notification, unless one went out too recently."""
        now = trio.current_time()
        if now < self._next:
            return
        self._next = now + PROGRESS_EVERY
        message = f"{self.finished}/{self.started} agents done · {self.where}"
        await self.ctx.report_progress(self.finished, self.started, message)


def subagent_server(agents: Iterable[tuple[str, str]], call: Call) -> MCPServer:
    """An MCP server with one tool per `(agent_id, description)`."""
    app = MCPServer("orchestrator")
    for agent_id, description in agents:

        def make(agent_id: str) -> Any:
            async def run_agent(task: str, ctx: Context) -> str:
                return await call(agent_id, task, ctx)

            return run_agent

        app.add_tool(
            make(agent_id),
            name=agent_id,
            description=f"{description} (runs the {agent_id!r} agent and its whole tree of "
            "sub-agents on the task; returns its final answer)",
        )
    return app
