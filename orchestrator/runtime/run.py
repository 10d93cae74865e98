"""One run: the root agent on an input, from RUN_STARTED to RUN_FINISHED.

A run owns one cancel scope (cancel reaches every descendant, each of which
emits AGENT_ERROR `cancelled`) and one deadline (`run_timeout_seconds`).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Literal

import msgspec
import trio

from agents.core.usage import UsageNode
from agents.errors import AgentFailed
from agents.runner import AgentRunner
from orchestrator.core.bus import Bus, RunSink, current_bus, new_run_id
from orchestrator.core.events import EventType, Usage
from orchestrator.runtime.spawn import RunLimits, run_agents, run_limits

if TYPE_CHECKING:
    from orchestrator.runtime.orchestrator import Orchestrator

__all__ = ["Run", "RunResult", "RunStatus"]

logger = logging.getLogger(__name__)

RunStatus = Literal["running", "completed", "failed", "cancelled", "interrupted"]


class RunResult(msgspec.Struct, frozen=True, kw_only=True):
    """How a run ended."""

    run_id: str
    status: RunStatus
    text: str | None = None
    error: str | None = None
    usage: Usage = msgspec.field(default_factory=Usage)
    """The whole tree's token usage."""


class Run:
    """Executes one run; `sink` is None for a non-streaming call."""

    def __init__(
        self,
        orchestrator: Orchestrator,
        agent_id: str,
        input: str,
        *,
        limits: RunLimits,
        sink: RunSink | None = None,
        run_id: str | None = None,
    ) -> None:
        self.orchestrator = orchestrator
        self.agent_id = agent_id
        self.input = input
        self.limits = limits
        self.sink = sink
        self.run_id = sink.run_id if sink is not None else (run_id or new_run_id())
        self.scope = trio.CancelScope()
        self.result: RunResult | None = None
        self.agents: dict[str, AgentRunner] = {}
        """Running child instances by agentKey (streaming runs only)."""
        self.root: AgentRunner | None = None
        self._interrupted = False
        self._failure: str | None = None

    def cancel(self) -> None:
        """Cancel the whole tree; the run ends `cancelled`."""
        self.scope.cancel()

    def fail(self, reason: str) -> None:
        """Stop the run from outside (its events cannot be stored); it ends `failed`."""
        self._failure = reason
        self.scope.cancel()

    def interrupt(self) -> None:
        """Stop the run because the server is stopping; it ends `interrupted`."""
        self._interrupted = True
        self.scope.cancel()

    def agent(self, agent_key: str | None) -> AgentRunner | None:
        """A running agent of this run: the root for None, else by agentKey."""
        if agent_key is None:
            return self.root
        return self.agents.get(agent_key)

    async def execute(self) -> RunResult:
        """Run the root agent to the end and emit RUN_FINISHED."""
        orch = self.orchestrator
        spec = orch.specs[self.agent_id]
        bus = Bus(self.sink) if self.sink is not None else None
        if bus is not None:
            bus.emit_nowait(EventType.RUN_STARTED, {"agentId": spec.id, "input": self.input})
        bus_token = current_bus.set(bus)
        limits_token = run_limits.set(self.limits)
        agents_token = run_agents.set(self.agents)
        status: RunStatus = "failed"
        text = error = None
        timeout = orch.config.limits.run_timeout_seconds
        deadline = trio.CancelScope(relative_deadline=timeout)
        budgets = [
            (b, src)
            for b, src in (
                (orch.config.limits.max_tokens, "limits.max_tokens"),
                (spec.budget_tokens, "budget_tokens"),
            )
            if b is not None
        ]
        budget, source = min(budgets) if budgets else (None, "budget_tokens")
        runner = AgentRunner(
            spec,
            orch.providers.for_agent(spec),
            orch.tools,
            bus,
            depth=0,
            timeout_scope=deadline,
            usage=UsageNode(budget=budget, budget_source=source),
            turn_limits=self.limits.turn,
        )
        self.root = runner
        try:
            with self.scope, deadline:
                try:
                    outcome = await runner.run(self.input)
                    status, text = "completed", outcome.text
                except AgentFailed as exc:
                    error = f"{exc.error_type}: {exc}"
                except Exception as exc:  # a bug: end the run visibly, keep the trace
                    logger.exception("run %s crashed", self.run_id)
                    error = f"internal: {type(exc).__name__}: {exc}"
            if deadline.cancelled_caught:
                error = f"timeout: run exceeded run_timeout_seconds ({timeout:g} s)"
            elif self.scope.cancelled_caught and self._failure is not None:
                status, error = "failed", self._failure
            elif self.scope.cancelled_caught and self._interrupted:
                status, error = "interrupted", "the server stopped while the run was running"
            elif self.scope.cancelled_caught:
                status, error = "cancelled", "cancelled"
        finally:
            current_bus.reset(bus_token)
            run_limits.reset(limits_token)
            run_agents.reset(agents_token)
        self.result = RunResult(
            run_id=self.run_id,
            status=status,
            text=text,
            error=error,
            usage=runner.subtree_usage.copy(),
        )
        if bus is not None:
            data: dict[str, object] = {"status": status}
            if text is not None:
                data["result"] = text
            if error is not None:
                data["error"] = error
            data["usage"] = runner.subtree_usage.to_dict()
            bus.emit_nowait(EventType.RUN_FINISHED, data, last=True)
        return self.result
