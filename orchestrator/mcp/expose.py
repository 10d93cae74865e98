"""Our subagents as MCP tools: one tool per subagent, `{task}` in, the final answer out.

Shared by the two ways of serving them — `orchestrator mcp` over stdio (a bridge to
a running server) and `/mcp` on `orchestrator serve` (streamable HTTP, in-process).
Each supplies `call`, which runs the subagent's tree and reports its progress
through a `TreeProgress`. Imported only where the `mcp` extra is installed.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Mapping
from importlib import metadata
from typing import Annotated, Any, NotRequired, TypedDict, cast

import trio
from mcp.server.mcpserver import Context, MCPServer
from mcp.shared.exceptions import MCPError
from mcp.types import INVALID_PARAMS, CallToolResult, TextContent
from pydantic import ConfigDict, Field, with_config

from agents.core.events import EventType
from agents.core.payloads import ApprovalRequestedData, ApprovalResolvedData

__all__ = [
    "HANDLES",
    "IGNORES",
    "PROGRESS_EVERY",
    "SubagentResult",
    "TreeProgress",
    "subagent_server",
]

PROGRESS_EVERY = 0.25
"""Seconds between two progress notifications of one call."""


@with_config(ConfigDict(title="Answer"))  # (its outputSchema's title, as clients know it)
class SubagentResult(TypedDict):
    """A subagent tool's structured result: the answer, and the run and thread it came
    from (the thread goes on with `threadId` on the next call: docs/threads.md)."""

    result: str
    runId: str
    threadId: str | None
    structured: NotRequired[Any]
    """The validated answer of an agent with an output schema (its tool's outputSchema
    says its shape; `result` is its JSON)."""


ExposedAgent = tuple[str, str, dict[str, Any] | None]
"""(agentId, description, its output schema or None): one tool."""


Call = Callable[[str, str, str | None, Context], Awaitable[SubagentResult]]
"""`call(agent_id, task, thread_id, ctx)`: run the tree (in the thread `thread_id`, or
a new one), report progress on `ctx`, return the answer with its ids."""


HANDLES = frozenset(
    {
        EventType.AGENT_STARTED,
        EventType.AGENT_RESULT,
        EventType.AGENT_ERROR,
        EventType.APPROVAL_REQUESTED,
        EventType.APPROVAL_RESOLVED,
    }
)
"""Event types MCP progress counts: agents' starts and ends, approvals asked and answered."""
IGNORES = frozenset(
    {
        EventType.RUN_STARTED,
        EventType.REASONING,
        EventType.TOOL_CALL_DELTA,
        EventType.TOOL_CALL,
        EventType.TOOL_RESULT,
        EventType.USER_MESSAGE,
        EventType.TOOL_PROGRESS,
        EventType.RUN_RESUMED,
        EventType.TURN_ABANDONED,
        EventType.COMPACTION_STARTED,
        EventType.COMPACTION_FINISHED,
        EventType.AGENT_STALLED,
        EventType.MODEL_FALLBACK,
        EventType.RUN_FINISHED,
    }
)
"""Event types that only move where the progress says the run is;
tests/unit/test_payloads.py checks that every type is in one of the two."""


class TreeProgress:
    """A run's agents counted from its events, told as MCP progress.

    The spec says progress MUST increase with each notification, so the number is the
    run's steps seen — each agent's start and end, each approval's request and answer
    — over the steps known (two per agent and per approval), and a notification goes
    out only when it grew: at most every `PROGRESS_EVERY` seconds, at once when a call
    starts or stops waiting for a person, and at once when every step is done (the last
    one says total of total). The message speaks of agents: `finished / started`, then
    what the run waits for, or where the newest event came from."""

    def __init__(self, ctx: Context, root: str) -> None:
        self.ctx = ctx
        self.started, self.finished = 1, 0
        self.asked = self.answered = 0
        self.where = root
        self.waiting: dict[tuple[str | None, str], str] = {}
        """Calls that wait for approval: (path, toolCallId) → the tool's name."""
        self._next = 0.0
        self._sent = 0
        """The progress of the last notification (each must be higher)."""

    @property
    def progress(self) -> int:
        """Steps seen: agents started and finished, approvals asked and answered."""
        return self.started + self.finished + self.asked + self.answered

    @property
    def total(self) -> int:
        """Steps known: two per agent, two per approval."""
        return 2 * (self.started + self.asked)

    def see(self, kind: str, path: str | None, data: Mapping[str, Any] | None = None) -> None:
        """Count one event of the run (`kind`: its type, as the wire says it; `path`:
        its source's, None for the run's own; `data`: its data, read for approvals)."""
        if kind == EventType.AGENT_STARTED:
            self.started += 1
        elif kind in (EventType.AGENT_RESULT, EventType.AGENT_ERROR):
            self.finished += 1
        elif kind == EventType.APPROVAL_REQUESTED and data is not None:
            asked = cast(ApprovalRequestedData, data)
            self.asked += 1
            self.waiting[(path, str(asked.get("toolCallId", "")))] = str(
                asked.get("name", "a tool")
            )
            self._next = 0.0  # said at once: this is what a person needs to know
        elif kind == EventType.APPROVAL_RESOLVED and data is not None:
            resolved = cast(ApprovalResolvedData, data)
            if self.waiting.pop((path, str(resolved.get("toolCallId", ""))), None) is not None:
                self.answered += 1
            self._next = 0.0
        if path is not None:
            self.where = path

    def message(self) -> str:
        """What the progress notification says."""
        done = f"{self.finished}/{self.started} agents done"
        if not self.waiting:
            return f"{done} · {self.where}"
        (path, _), name = next(iter(self.waiting.items()))
        who = path or "the root agent"
        more = f" (and {len(self.waiting) - 1} more)" if len(self.waiting) > 1 else ""
        return (
            f"{done} · waiting for a person to approve {name} by {who}{more} "
            "(orchestrator pending / approve)"
        )

    async def report(self) -> None:
        """Send a progress notification if the progress grew, unless one went out too
        recently (and the run is not done: the last one always goes out)."""
        progress, total = self.progress, self.total
        if progress <= self._sent:
            return
        now = trio.current_time()
        if now < self._next and progress < total:
            return
        self._next, self._sent = now + PROGRESS_EVERY, progress
        await self.ctx.report_progress(progress, total, self.message())


def subagent_server(agents: Iterable[ExposedAgent], call: Call) -> MCPServer:
    """An MCP server with one tool per agent. An agent with an output schema answers in
    `structuredContent.structured` too, and its tool's `outputSchema` says its shape."""
    app = MCPServer("orchestrator", version=_version(), middleware=[_known_arguments])
    for agent_id, description, schema in agents:

        def make(agent_id: str) -> Any:
            async def run_agent(
                task: Annotated[str, Field(description="What the agent should do.")],
                ctx: Context,
                threadId: Annotated[
                    str | None,
                    Field(
                        description="Go on in this thread: the conversation of the runs "
                        "that carried this threadId (from an earlier result); absent: a "
                        "new thread.",
                    ),
                ] = None,
            ) -> Annotated[CallToolResult, SubagentResult]:
                answer = await call(agent_id, task, threadId, ctx)
                return CallToolResult(
                    content=[TextContent(type="text", text=answer["result"])],
                    structured_content=dict(answer),
                )

            return run_agent

        app.add_tool(
            make(agent_id),
            name=agent_id,
            description=f"{description} (runs the {agent_id!r} agent and its whole tree of "
            "sub-agents on the task; returns its final answer)",
        )
        if schema is not None:
            _declare_structured(app, agent_id, schema)
    return app


def _declare_structured(app: MCPServer, agent_id: str, schema: dict[str, Any]) -> None:
    """The tool's outputSchema, with `structured` required and shaped as `schema`.

    The SDK derives a tool's outputSchema from its return annotation, and one Python
    function cannot say a schema per agent; its metadata is read live on each call and
    listing (`FuncMetadata`), so it is set here (no public setter exists)."""
    tool = app._tool_manager.get_tool(agent_id)
    assert tool is not None and tool.fn_metadata.output_schema is not None
    derived = tool.fn_metadata.output_schema
    tool.fn_metadata.output_schema = {
        **derived,
        "properties": {**derived.get("properties", {}), "structured": schema},
        "required": [*derived.get("required", []), "structured"],
    }


TOOL_ARGUMENTS = frozenset({"task", "threadId"})
"""What an agent tool takes (its inputSchema says no more: additionalProperties false)."""


async def _known_arguments(ctx: Any, call_next: Any) -> Any:
    """Refuse a tool call with arguments its tool does not take (the SDK would drop
    them silently): JSON-RPC invalid params (-32602), naming them."""
    params = ctx.params
    if ctx.method == "tools/call" and isinstance(params, dict):
        arguments = params.get("arguments")
        if isinstance(arguments, dict):
            unknown = sorted(str(k) for k in arguments if k not in TOOL_ARGUMENTS)[:8]
            if unknown:
                raise MCPError(
                    INVALID_PARAMS,
                    f"unknown arguments {', '.join(unknown)}: an agent tool takes task "
                    "and threadId",
                )
    return await call_next(ctx)


def _version() -> str:
    """This package's version (serverInfo.version)."""
    try:
        return metadata.version("agent-orchestrator")
    except metadata.PackageNotFoundError:  # (run from a tree that is not installed)
        return "0"
