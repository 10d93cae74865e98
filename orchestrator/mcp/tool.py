"""An MCP server's tool as the runner sees it: a `Tool` that calls the server."""

from __future__ import annotations

from typing import Any

from agents.errors import ToolError
from agents.tools.base import ToolContext, ToolOutput
from orchestrator.mcp.hub import McpError, McpHub, ToolInfo
from orchestrator.mcp.results import result_attachments, result_text

__all__ = ["McpTool"]


class McpTool:
    """`<server>__<tool>`: the server's description and JSON schema; a call goes to the
    server's session. A protocol error, a crash, a timeout or `isError: true` is an
    error result for the model (`ToolError`); the agent goes on."""

    concurrency_safe = True
    """Calls of one turn run in parallel; the server orders what it must."""
    stream_paths: tuple[str, ...] = ()
    idempotent = False
    """Not known: a call cut off by a worker failure is not run again."""

    def __init__(self, hub: McpHub, info: ToolInfo, max_chars: int) -> None:
        self.name = info.exposed
        self._hub = hub
        self._info = info
        self._max_chars = max_chars

    def description_for(self, agent_id: str) -> str:
        """The server's description of the tool."""
        return self._info.description

    def parameters(self) -> dict[str, Any]:
        """The server's JSON schema of the arguments."""
        return self._info.parameters

    async def run(self, args: dict[str, Any], ctx: ToolContext) -> str | ToolOutput:
        """Call the tool on its server; the result as text (results.py)."""
        try:
            content, structured, is_error = await self._hub.call(self._info, args, ctx.progress)
        except McpError as exc:
            raise ToolError(str(exc)) from None
        text = result_text(content, structured, self._max_chars)
        if is_error:
            raise ToolError(text or f"{self.name}: the MCP server reported an error")
        attachments = result_attachments(content, self.name)
        return ToolOutput(text, attachments) if attachments else text
