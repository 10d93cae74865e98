"""`orchestrator mcp`: a server's subagents as MCP tools, over stdio.

Imported only by `orchestrator mcp` (it needs the `mcp` extra). An MCP client
(Claude Desktop, Claude Code, an IDE) starts this command; each subagent
of the server it talks to is one tool (`{task}` in, the final answer out). A call
starts a run on the server over the WebSocket protocol — so the run is in the
server's journal like any other and its console shows it live — and reports the
tree's progress (agents started and finished, where the newest event came from) as
MCP progress notifications. Cancelling the MCP call cancels the run.
"""

from __future__ import annotations

import json
import sys

import trio
from mcp.server.mcpserver import Context
from mcp.server.mcpserver.exceptions import ToolError
from websockets.trio.client import connect

from orchestrator.cli.watch import refusal
from orchestrator.client import Client, ClientError, auth_headers
from orchestrator.mcp.expose import Answer, TreeProgress, subagent_server

__all__ = ["mcp_main"]


class _Server:
    """How the bridge reaches the orchestrator server."""

    def __init__(self, url: str, token: str | None, origin: str | None) -> None:
        self.url = url
        self.headers = auth_headers(token, origin)

    async def run(self, agent_id: str, task: str, thread_id: str | None, ctx: Context) -> Answer:
        """Run `agent_id` on `task` (in the thread `thread_id`) to its end; its final
        answer with its ids (or a ToolError)."""
        async with connect(self.url, additional_headers=self.headers, max_size=None) as ws:
            run = {"op": "run", "id": 1, "agent": agent_id, "input": task}
            if thread_id is not None:
                run["threadId"] = thread_id
            await ws.send(json.dumps(run))
            ack = json.loads(await ws.recv())
            if ack.get("op") != "ack":
                raise ToolError(f"{ack.get('code')}: {ack.get('message')}")
            run_id = ack["runId"]
            progress, final = TreeProgress(ctx, agent_id), None
            try:
                while True:
                    frame = json.loads(await ws.recv())
                    if frame.get("op") == "end":
                        break
                    for event in frame.get("events", ()):
                        source = event["source"]
                        path = source["path"] if source else None
                        progress.see(event["type"], path, event["data"])
                        if event["type"] == "RUN_FINISHED":
                            final = event["data"]
                    if frame.get("events"):
                        await progress.report()
            except BaseException:
                with trio.CancelScope(shield=True), trio.move_on_after(5):
                    # The MCP call was cancelled (or the bridge is stopping): so is the run.
                    await self._cancel(run_id)
                raise
        if final is None or final.get("status") != "completed":
            status = (final or {}).get("status", "unknown")
            raise ToolError(f"run {run_id} {status}: {(final or {}).get('error', '')}".rstrip(": "))
        answer = Answer(
            result=str(final.get("result", "")), runId=run_id, threadId=ack.get("threadId")
        )
        if "structured" in final:
            answer["structured"] = final["structured"]
        return answer

    async def _cancel(self, run_id: str) -> None:
        """Cancel the run over a connection of its own (the call's is being torn down)."""
        cancel = {"op": "cancel", "id": 2, "runId": run_id, "reason": "the MCP call was cancelled"}
        async with connect(self.url, additional_headers=self.headers) as ws:
            await ws.send(json.dumps(cancel))
            await ws.recv()


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
