"""What a tool is to the agent runner."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, Protocol

import msgspec

from agents.core.attachments import Attachment
from agents.core.usage import UsageNode

__all__ = [
    "BackgroundStarter",
    "InstanceState",
    "ProgressReporter",
    "Tool",
    "ToolContext",
    "ToolOutput",
]

ProgressReporter = Callable[[float, "float | None", "str | None"], None]
"""`report(progress, total, message)`: the call moved (a TOOL_PROGRESS event; at most
ten a second per call are sent, and the last one always)."""
BackgroundStarter = Callable[[str, Callable[[], Awaitable[str]]], None]
"""`start(label, work)`: run `work` beside the agent; its text (or failure) comes back
to the agent as a message before its next model turn."""


class ToolOutput(msgspec.Struct, frozen=True):
    """A tool's result with images or files for the model (an MCP tool's image): `run`
    may return one instead of its text."""

    text: str
    attachments: tuple[Attachment, ...] = ()


class InstanceState:
    """Per agent-instance counters that tools share across calls."""

    __slots__ = ("running_children",)

    def __init__(self) -> None:
        self.running_children = 0


class ToolContext:
    """What the runner tells a tool about the call it is serving.

    Attributes:
        call_id: the model's id for this tool call.
        agent_id: the calling agent's agentId.
        agent_key: the calling instance's agentKey (None for the root agent).
        depth: the calling agent's depth (0 for the root).
        usage: the caller's usage node; a child agent's node hangs below it, so
            the child's usage counts for the caller's subtree (and budget) live.
        instance: counters shared by every call of the calling instance.
        start_background: runs work beside the caller (background spawns).
        progress: reports how far the call got (TOOL_PROGRESS), or None.

    What a tool needs beyond the call (a client, a root folder, the run it serves)
    it is given when it is made.
    """

    __slots__ = (
        "agent_id",
        "agent_key",
        "call_id",
        "depth",
        "instance",
        "progress",
        "start_background",
        "usage",
    )

    def __init__(
        self,
        *,
        call_id: str,
        agent_id: str,
        agent_key: str | None,
        depth: int,
        usage: UsageNode,
        instance: InstanceState,
        start_background: BackgroundStarter,
        progress: ProgressReporter | None = None,
    ) -> None:
        self.call_id = call_id
        self.agent_id = agent_id
        self.agent_key = agent_key
        self.depth = depth
        self.usage = usage
        self.instance = instance
        self.start_background = start_background
        self.progress = progress


class Tool(Protocol):
    """A function tool offered to models.

    `run` returns the result text. It raises `ToolError` (or any exception) to
    give the model an error result instead; the agent goes on either way.
    """

    name: str
    """The name models call it by."""

    @property
    def concurrency_safe(self) -> bool:
        """True: may run in parallel with other calls of the same turn; False: calls of
        it run one at a time, in call order."""
        ...

    @property
    def stream_paths(self) -> tuple[str, ...]:
        """Argument paths reported while they stream (TOOL_CALL_DELTA `fields`)."""
        ...

    @property
    def idempotent(self) -> bool:
        """True: a call a worker failure left without a result is run again by the
        worker that takes the run over (else its result is an error saying so)."""
        ...

    def description_for(self, agent_id: str) -> str:
        """The description shown to the model of `agent_id`."""
        ...

    def parameters(self) -> dict[str, Any]:
        """JSON schema of the arguments."""
        ...

    async def run(self, args: dict[str, Any], ctx: ToolContext) -> str | ToolOutput:
        """Do the work; `args` is the parsed JSON object the model sent."""
        ...
