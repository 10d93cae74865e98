"""What a tool is to the agent runner."""

from __future__ import annotations

from typing import Any, Protocol

from orchestrator.core.events import Usage

__all__ = ["InstanceState", "Tool", "ToolContext"]


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
        depth: the calling agent's depth (0 for the root).
        subtree_usage: the caller's running total of its own and its
            descendants' usage; a tool that runs a child agent adds the
            child's subtree usage here.
        instance: counters shared by every call of the calling instance.
    """

    __slots__ = ("agent_id", "call_id", "depth", "instance", "subtree_usage")

    def __init__(
        self,
        *,
        call_id: str,
        agent_id: str,
        depth: int,
        subtree_usage: Usage,
        instance: InstanceState,
    ) -> None:
        self.call_id = call_id
        self.agent_id = agent_id
        self.depth = depth
        self.subtree_usage = subtree_usage
        self.instance = instance


class Tool(Protocol):
    """A function tool offered to models.

    `run` returns the result text. It raises `ToolError` (or any exception) to
    give the model an error result instead; the agent goes on either way.
    """

    name: str
    """The name models call it by."""

    def description_for(self, agent_id: str) -> str:
        """The description shown to the model of `agent_id`."""
        ...

    def parameters(self) -> dict[str, Any]:
        """JSON schema of the arguments."""
        ...

    async def run(self, args: dict[str, Any], ctx: ToolContext) -> str:
        """Do the work; `args` is the parsed JSON object the model sent."""
        ...
