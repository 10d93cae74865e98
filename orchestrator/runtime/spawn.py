"""`agent_spawn`: the tool through which a parent agent runs a child agent.

The tool finds the caller's bus in `current_bus`. With a bus (a streaming run)
the child gets a child bus that stamps its Source on every event and publishes
straight into the run's sink, so its events reach the consumer live, at any
depth. Without one (a `call()`), the child runs blocking and emits nothing.
Either way a child that fails, times out or is refused becomes an error tool
result (a `ToolError`), and the parent goes on.
"""

from __future__ import annotations

import contextvars
import math
from typing import TYPE_CHECKING, Any

import msgspec
import trio

from agents.errors import AgentFailed, ToolError
from agents.runner import AgentRunner
from agents.tools.base import ToolContext
from orchestrator.core.bus import current_bus
from orchestrator.core.events import EventType

if TYPE_CHECKING:
    from orchestrator.runtime.orchestrator import Orchestrator

__all__ = ["AgentSpawnTool", "RunLimits", "run_agents", "run_limits"]


class RunLimits(msgspec.Struct, frozen=True):
    """The limits of the run in this context (the config's, or a per-run override)."""

    max_depth: int
    max_children: int


run_limits: contextvars.ContextVar[RunLimits | None] = contextvars.ContextVar(
    "run_limits", default=None
)
run_agents: contextvars.ContextVar[dict[str, AgentRunner] | None] = contextvars.ContextVar(
    "run_agents", default=None
)
"""The running agent instances of the run in this context, by agentKey (streaming runs)."""


class SpawnArgs(msgspec.Struct, forbid_unknown_fields=True):
    """The arguments of an `agent_spawn` call."""

    agent_id: str
    task: str
    timeout_seconds: float | None = None


_decode_args = msgspec.convert


class AgentSpawnTool:
    """Runs a new child instance of a subagent and returns its final text."""

    name = "agent_spawn"
    stream_paths = ("$.agent_id", "$.task")
    """Argument paths reported while they stream (TOOL_CALL_DELTA `fields`)."""

    def __init__(self, orchestrator: Orchestrator) -> None:
        self._orch = orchestrator

    def description_for(self, agent_id: str) -> str:
        """Lists the subagents the calling agent may spawn, with their descriptions."""
        lines = [
            "Run a subagent on a task and get its final answer back. Several calls in "
            "one turn run in parallel. Available subagents:"
        ]
        for spec in self._orch.specs.values():
            lines.append(f"- {spec.id}: {spec.description.strip()}")
        return "\n".join(lines)

    def parameters(self) -> dict[str, Any]:
        """JSON schema of `{agent_id, task, timeout_seconds?}`."""
        return {
            "type": "object",
            "properties": {
                "agent_id": {
                    "type": "string",
                    "enum": sorted(self._orch.specs),
                    "description": "Which subagent to run.",
                },
                "task": {"type": "string", "description": "What the subagent should do."},
                "timeout_seconds": {
                    "type": "number",
                    "exclusiveMinimum": 0,
                    "description": "Bound on the subagent's whole run, in seconds.",
                },
            },
            "required": ["agent_id", "task"],
            "additionalProperties": False,
        }

    async def run(self, args: dict[str, Any], ctx: ToolContext) -> str:
        """Spawn, run to completion, return the child's final text."""
        try:
            spawn = _decode_args(args, SpawnArgs)
        except msgspec.ValidationError as exc:
            raise ToolError(f"agent_spawn: invalid arguments: {exc}") from None
        orch = self._orch
        spec = orch.specs.get(spawn.agent_id)
        if spec is None:
            known = ", ".join(sorted(orch.specs)) or "none"
            raise ToolError(f"agent_spawn: unknown agent {spawn.agent_id!r} (known: {known})")
        limits = run_limits.get() or orch.default_limits()
        depth = ctx.depth + 1
        if depth > limits.max_depth:
            raise ToolError(
                f"agent_spawn: depth limit reached: {spawn.agent_id!r} would run at depth "
                f"{depth}, max_depth is {limits.max_depth}"
            )
        if ctx.instance.running_children >= limits.max_children:
            raise ToolError(
                f"agent_spawn: max_children reached: {ctx.agent_id!r} already has "
                f"{ctx.instance.running_children} children running (limit {limits.max_children})"
            )
        timeout = (
            spawn.timeout_seconds if spawn.timeout_seconds is not None else spec.timeout_seconds
        )
        if timeout is not None and (timeout <= 0 or not math.isfinite(timeout)):
            raise ToolError(
                f"agent_spawn: timeout_seconds must be a positive number of seconds, got {timeout}"
                + (" (background spawns are not available in this version)" if timeout == 0 else "")
            )

        parent_bus = current_bus.get()
        child_bus = None
        if parent_bus is not None:
            child_bus = parent_bus.child(
                agent_id=spec.id, agent_name=spec.display_name, parent_tool_call_id=ctx.call_id
            )
        scope = trio.CancelScope()
        if timeout is not None:
            scope.relative_deadline = timeout
        runner = AgentRunner(
            spec,
            orch.providers.for_agent(spec),
            orch.tools,
            child_bus,
            depth=depth,
            timeout_scope=scope,
        )
        token = current_bus.set(child_bus)
        ctx.instance.running_children += 1
        registry = run_agents.get()
        key = child_bus.source.agent_key if child_bus is not None and child_bus.source else None
        if registry is not None and key is not None:
            registry[key] = runner
        try:
            if child_bus is not None:
                child_bus.emit_nowait(
                    EventType.AGENT_STARTED, {"agentId": spec.id, "task": spawn.task}
                )
            with scope:
                outcome = await runner.run(spawn.task)
        except AgentFailed as exc:
            raise ToolError(f"subagent {spec.id!r} failed ({exc.error_type}): {exc}") from None
        finally:
            if registry is not None and key is not None:
                registry.pop(key, None)
            ctx.instance.running_children -= 1
            current_bus.reset(token)
            ctx.subtree_usage.add(runner.subtree_usage)
        if scope.cancelled_caught:
            raise ToolError(f"subagent {spec.id!r} timed out after {timeout:g} s")
        return outcome.text
