"""`orchestrator mcp`: a server's subagents as MCP tools, over stdio.

Imported only by `orchestrator mcp` (it needs the `mcp` extra). An MCP client
(Claude Desktop, Claude Code, an IDE) starts this command; each subagent
of the server it talks to is one tool (`{task}` in, the final answer out). A call
starts a run on the server through the typed client (`orchestrator.client`) — so the run is in the
server's journal like any other and its console shows it live — and reports the
tree's progress (agents started and finished, where the newest event came from) as
MCP progress notifications. Cancelling the MCP call cancels the run.
"""

from __future__ import annotations

import contextlib
import sys
from typing import cast

import trio
from mcp.server.mcpserver import Context
from mcp.server.mcpserver.exceptions import ToolError

from agents.core.payloads import RunFinishedData, RunStartedData
from orchestrator.cli.watch import refusal
from orchestrator.client import Client, ClientError
from orchestrator.core.events import EventType
from orchestrator.mcp.expose import SubagentResult, TreeProgress, subagent_server

__all__ = ["mcp_main"]


class _Server:
    """How the bridge reaches the orchestrator server: the typed client."""

    def __init__(self, url: str, token: str | None, origin: str | None) -> None:
        self.url, self.token, self.origin = url, token, origin

    async def run(
        self, agent_id: str, task: str, thread_id: str | None, ctx: Context
    ) -> SubagentResult:
        """Run `agent_id` on `task` (in the thread `thread_id`) to its end; its final
        answer with its ids (or a ToolError)."""
        client = Client(self.url, token=self.token, origin=self.origin)
        try:
            run_id = await client.start(agent_id, task, thread_id=thread_id)
        except ClientError as exc:
            raise ToolError(str(exc)) from None
        progress = TreeProgress(ctx, agent_id)
        final: RunFinishedData | None = None
        thread: str | None = None
        try:
            async with client.follow_batches(run_id) as batches:
                async for batch in batches:
                    for event in batch:
                        path = event.source.path if event.source is not None else None
                        progress.see(event.type, path, event.data)
                        if event.type == EventType.RUN_STARTED:
                            thread = cast(RunStartedData, event.data).get("threadId")
                        elif event.type == EventType.RUN_FINISHED:
                            final = cast(RunFinishedData, event.data)
                    await progress.report()
        except BaseException:
            # The MCP call was cancelled (or the bridge is stopping): so is the run (over
            # a connection of its own: the call's is being torn down).
            shielded = trio.CancelScope(shield=True)
            with shielded, trio.move_on_after(5), contextlib.suppress(ClientError):
                await client.cancel(run_id, reason="the MCP call was cancelled")
            raise
        if final is None or final["status"] != "completed":
            status = final["status"] if final is not None else "unknown"
            error = final.get("error", "") if final is not None else ""
            raise ToolError(f"run {run_id} {status}: {error}".rstrip(": "))
        answer = SubagentResult(result=final.get("result", ""), runId=run_id, threadId=thread)
        if "structured" in final:
            answer["structured"] = final["structured"]
        return answer


async def mcp_main(url: str, *, token: str | None, origin: str | None = None) -> int:
    """Serve the subagents of the server at `url` over stdio until stdin closes."""
    try:  # one line naming the cause, before any MCP client is answered
        listed = await Client(url, token=token, origin=origin, give_up_after=10).agents()
    except ClientError as exc:
        message, _ = refusal(exc, token_hint="--token or $ORCHESTRATOR_TOKEN")
        print(f"error: {message}", file=sys.stderr)
        return 2
    server = _Server(url, token, origin)
    agents = [(agent.id, agent.description, agent.output_schema) for agent in listed]
    await subagent_server(agents, server.run).run_stdio_async()
    return 0
