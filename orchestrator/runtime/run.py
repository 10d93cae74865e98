"""One run: the root agent on an input, from RUN_STARTED to RUN_FINISHED.

A run owns one cancel scope (cancel reaches every descendant, each of which
emits AGENT_ERROR `cancelled`) and one deadline (`run_timeout_seconds`).
"""

from __future__ import annotations

import logging
import time

import msgspec
import trio

from agents.approval import ApprovalRequest
from agents.core.payloads import agent_error
from agents.core.replay import Recording
from agents.core.turn import parse_arguments
from agents.core.usage import UsageNode
from agents.errors import AgentFailed
from agents.runner import AgentRunner, Cancellation
from agents.spec import AgentSpec
from orchestrator.core.approvals import Answer
from orchestrator.core.bus import (
    AnyBus,
    Bus,
    NullBus,
    RunSink,
    current_bus,
    new_run_id,
    new_session_id,
)
from orchestrator.core.events import EventType, RunStatus, Usage
from orchestrator.core.rebuild import ResumePlan
from orchestrator.mcp.hub import McpError
from orchestrator.runtime.approvals import ApprovalError, PendingApproval
from orchestrator.runtime.context import AgentCatalog, RunContext, RunLimits
from orchestrator.runtime.remote import RemoteLink
from orchestrator.runtime.spawn import run_tools

__all__ = ["AgentGone", "Run", "RunResult", "RunStatus"]

logger = logging.getLogger(__name__)


class AgentGone(LookupError):
    """A cancel named an agent instance that is not there to cancel."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class RunResult(msgspec.Struct, frozen=True, kw_only=True):
    """How a run ended."""

    run_id: str
    status: RunStatus
    text: str | None = None
    error: str | None = None
    usage: Usage = msgspec.field(default_factory=Usage)
    """The whole tree's token usage."""


_LOST = {"restart": "when the server restarted", "fork": "in the fork (its subtree ran elsewhere)"}
"""How an orphan's AGENT_ERROR says it was lost, by RUN_RESUMED's `reason`."""


class Run:
    """Executes one run; `sink` is None for a non-streaming call (a `NullBus` run)."""

    def __init__(
        self,
        catalog: AgentCatalog,
        agent_id: str,
        input: str,
        *,
        limits: RunLimits,
        sink: RunSink | None = None,
        run_id: str | None = None,
        resume: ResumePlan | None = None,
        resumed: dict[str, object] | None = None,
        recording: Recording | None = None,
    ) -> None:
        self.catalog = catalog
        self.agent_id = agent_id
        self.input = input
        self.limits = limits
        self.sink = sink
        self.run_id = sink.run_id if sink is not None else (run_id or new_run_id())
        self.scope = trio.CancelScope()
        self.result: RunResult | None = None
        self.context = RunContext(catalog, limits)
        self.context.tools = run_tools(self.context)
        self.context.recording = recording
        self.agents: dict[str, AgentRunner] = self.context.agents
        """Child instances by agentKey (valid for `agent_send` until the run ends)."""
        self.root: AgentRunner | None = None
        self._interrupted = False
        self._suspended = False
        self._failure: str | None = None
        self._cancelled: Cancellation | None = None
        self.resume = resume
        """Cluster takeover: continue the run from its journal instead of starting it."""
        self.resumed = resumed or {}
        self._orphaned: set[str] = set()
        """RUN_RESUMED's data (`attempt`, `worker`, `afterSeq`)."""
        if resume is not None and sink is not None:
            self._adopt_approvals(resume)

    def _adopt_approvals(self, plan: ResumePlan) -> None:
        """Calls that waited for a decision when the journal stopped wait again, and can
        be listed and answered from now on (before their agents reach them)."""
        now = time.time()
        for agent in plan.agents.values():
            if agent.ended or agent.key in plan.remote:  # (a remote subtree's wait there)
                continue
            spec = self.catalog.specs.get(agent.agent_id)
            policy = self.catalog.approval_policy(spec) if spec is not None else None
            for call in agent.pending:
                prior = agent.approvals.get(call.id)
                tool = self.context.tools.get(call.name)
                if not isinstance(prior, tuple) or tool is None:
                    continue
                try:
                    args = parse_arguments(call.arguments)
                except ValueError:
                    continue
                requested_at, timeout_at = prior
                self.catalog.desk.adopt(
                    self.run_id,
                    agent.source,
                    ApprovalRequest(
                        tool_call_id=call.id,
                        name=call.name,
                        args=args,
                        requested_at=requested_at,
                        timeout_at=timeout_at,
                        wait=max(0.0, timeout_at - now),
                        edit=policy.edit if policy is not None else False,
                        parameters=tool.parameters(),
                    ),
                )

    def cancel(self, by: str = "user", reason: str | None = None) -> None:
        """Cancel the whole tree; the run ends `cancelled`.

        Every running agent reports AGENT_ERROR `cancelled` with `by` and `reason`.
        """
        if self._cancelled is None:
            self._cancelled = Cancellation(by, reason)
            for runner in self._runners():
                if runner.running:
                    runner.cancel(self._cancelled, stop=False)  # the run's scope stops it
        self.scope.cancel()

    def cancel_agent(self, agent_key: str, by: str = "user", reason: str | None = None) -> None:
        """Cancel one agent instance and its whole subtree (background children too);
        the rest of the run goes on, and its parent gets an error tool result.

        An idle instance ends `cancelled` at once and takes no more messages.

        Raises:
            AgentGone: the run has ended, or no such instance, or it was already cancelled.
        """
        if self.result is not None:
            raise AgentGone(f"run {self.run_id!r} has ended")
        remote = self.context.remotes.get(agent_key)
        if remote is not None and remote.child_key == agent_key:
            if remote.cancellation is not None:
                raise AgentGone(f"agent {agent_key!r} was already cancelled")
            remote.cancel(Cancellation(by, reason))  # and its run there with it
            return
        if remote is not None:
            raise AgentGone(
                f"agent {agent_key!r} runs on another server: cancel it with the cancel op"
            )
        runner = self.agents.get(agent_key)
        if runner is None:
            raise AgentGone(f"no agent {agent_key!r} in run {self.run_id!r}")
        cancellation = Cancellation(by, reason)
        if not runner.cancel(cancellation):
            raise AgentGone(f"agent {agent_key!r} was already cancelled")
        for key in self.context.descendants(agent_key):
            # Running ones are stopped by the cancelled ancestor's scope; idle ones end now.
            self.agents[key].cancel(cancellation, stop=False)

    def remote_link(self, agent_key: str | None) -> RemoteLink | None:
        """The remote child whose run (on another server) `agent_key` belongs to, if
        it is one of a remote subtree running now (docs/remote.md)."""
        return self.context.remotes.get(agent_key) if agent_key is not None else None

    @property
    def pending_approvals(self) -> list[PendingApproval]:
        """The run's tool calls that wait for a decision now (`approve` answers them)."""
        return self.catalog.desk.pending(self.run_id)

    def approve(self, answer: Answer) -> PendingApproval:
        """Answer a waiting tool call of this run, in this process: approved, it runs
        (once, with `args` when the agent allows edits); denied, its agent gets an
        error result with `reason`.

        Raises:
            ApprovalError: no such waiting call, already answered, or bad `args`.
        """
        if self.result is not None:
            raise ApprovalError("not_found", f"run {self.run_id!r} has ended")
        return self.catalog.desk.answer_here(self.run_id, answer)

    def _runners(self) -> list[AgentRunner]:
        return [*([self.root] if self.root is not None else []), *self.agents.values()]

    def fail(self, reason: str) -> None:
        """Stop the run from outside (its events cannot be stored); it ends `failed`."""
        self._failure = reason
        self.scope.cancel()

    def interrupt(self) -> None:
        """Stop the run because the server is stopping; it ends `interrupted`."""
        self._interrupted = True
        self.scope.cancel()

    def suspend(self) -> None:
        """Stop the run because the server is stopping, to resume it at the next start:
        nothing it emits from now on is journaled (no AGENT_ERROR, no RUN_FINISHED), so
        its journal ends as it was, still `running` — the same as after a crash."""
        self._suspended = True
        if self.sink is not None:
            self.sink.drop()
        self.scope.cancel()

    def agent(self, agent_key: str | None) -> AgentRunner | None:
        """A running agent of this run: the root for None, else by agentKey."""
        if agent_key is None:
            return self.root
        return self.agents.get(agent_key)

    async def execute(self) -> RunResult:
        """Run the root agent to the end and emit RUN_FINISHED."""
        spec = self.catalog.spec(self.agent_id)
        bus: AnyBus = (
            Bus(self.sink)
            if self.sink is not None
            else NullBus(self.run_id, new_session_id(root=True))
        )
        plan = self.resume
        if plan is None:
            bus.emit_nowait(EventType.RUN_STARTED, {"agentId": spec.id, "input": self.input})
        else:
            self._announce_resume(bus, plan)
            self.context.resume = plan
        bus_token = current_bus.set(bus)
        status: RunStatus = "failed"
        text = error = None
        timeout = self.limits.run_timeout
        deadline = trio.CancelScope(relative_deadline=timeout)
        budget, source = self._root_budget(spec)
        unavailable = None
        if self.catalog.uses_mcp(spec):  # its MCP servers start (bounded by their timeouts)
            try:
                await self.catalog.prepare(spec)
            except McpError as exc:
                unavailable = str(exc)
        runner = self.catalog.runner(
            spec,
            bus,
            self.context,
            depth=0,
            timeout_scope=deadline,
            usage=UsageNode(budget=budget, budget_source=source),
        )
        self.root = self.context.root = runner
        try:
            with self.scope, deadline:
                try:
                    if unavailable is not None:
                        runner.fail("mcp_unavailable", unavailable)
                    text = await self._drive(runner, plan)
                    status = "completed"
                except AgentFailed as exc:
                    error = f"{exc.error_type}: {exc}"
                except Exception as exc:  # a bug: end the run visibly, keep the trace
                    logger.exception("run %s crashed", self.run_id)
                    error = f"internal: {type(exc).__name__}: {exc}"
            if deadline.cancelled_caught:
                error = f"timeout: run exceeded run_timeout_seconds ({timeout:g} s)"
            elif self.scope.cancelled_caught and self._failure is not None:
                status, error = "failed", self._failure
            elif self.scope.cancelled_caught and (self._interrupted or self._suspended):
                status, error = "interrupted", "the server stopped while the run was running"
            elif self.scope.cancelled_caught:
                status = "cancelled"
                error = self._cancelled.describe() if self._cancelled is not None else "cancelled"
        finally:
            current_bus.reset(bus_token)
            self.catalog.desk.forget_run(self.run_id)
        self.result = RunResult(
            run_id=self.run_id,
            status=status,
            text=text,
            error=error,
            usage=runner.subtree_usage.copy(),
        )
        if plan is not None and not self._suspended:
            self._end_unresumed(bus, plan, status)
        self._emit_finished(bus, runner)
        return self.result

    def _root_budget(self, spec: AgentSpec) -> tuple[int | None, str]:
        """The root's token budget: the smaller of the run's and the agent's, and
        which setting it is (named when it trips)."""
        budgets = [
            (b, src)
            for b, src in (
                (self.limits.max_tokens, "limits.max_tokens"),
                (spec.budget_tokens, "budget_tokens"),
            )
            if b is not None
        ]
        return min(budgets) if budgets else (None, "budget_tokens")

    async def _drive(self, runner: AgentRunner, plan: ResumePlan | None) -> str:
        """The root agent's final text: run on the input, or continued from `plan`."""
        if plan is not None and plan.root.ended:  # only RUN_FINISHED was missing
            if plan.root.result is None:
                raise AgentFailed(plan.root.error or "failed", error_type="failed")
            return plan.root.result
        if plan is not None:
            runner.messages = list(plan.root.messages)
            root = plan.root
            outcome = await runner.continue_run(
                tuple(root.pending),
                tuple(root.done),
                root.approvals,
                self.context.background_again(root),
                root.inbox,
            )
            return outcome.text
        return (await runner.run(self.input)).text

    def _emit_finished(self, bus: AnyBus, runner: AgentRunner) -> None:
        """RUN_FINISHED, from `self.result` (and who cancelled the run)."""
        result = self.result
        assert result is not None
        data: dict[str, object] = {"status": result.status}
        if result.text is not None:
            data["result"] = result.text
        if result.error is not None:
            data["error"] = result.error
        if result.status == "cancelled" and self._cancelled is not None:
            data["by"] = self._cancelled.by
            if self._cancelled.reason is not None:
                data["reason"] = self._cancelled.reason
        data["usage"] = runner.subtree_usage.to_dict()
        bus.emit_nowait(EventType.RUN_FINISHED, data, last=True)

    def _end_unresumed(self, bus: AnyBus, plan: ResumePlan, status: str) -> None:
        """Rebuilt children the run ended before continuing (a cancel during the
        takeover): their terminal event, so every agent still ends exactly once."""
        if not isinstance(bus, Bus):
            return
        skip = self.context.continued | self._orphaned
        # A remote child followed again brings its subtree's ends from its server.
        followed = tuple(
            child.source.path + "/"
            for key in self.context.continued
            if (child := plan.agents.get(key)) is not None and child.source is not None
        )
        for agent in plan.agents.values():
            if agent.key is None or agent.ended or agent.key in skip:
                continue
            if agent.key in plan.remote and agent.source and agent.source.path.startswith(followed):
                continue
            Bus(bus.sink, agent.source).emit_nowait(
                EventType.AGENT_ERROR,
                agent_error(
                    "cancelled" if status == "cancelled" else "worker_lost",
                    f"agent {agent.agent_id!r}: the run ended ({status}) before "
                    "it was continued after its worker's failure",
                ),
                last=True,
            )

    def _announce_resume(self, bus: AnyBus, plan: ResumePlan) -> None:
        """RUN_RESUMED, then TURN_ABANDONED for cut-off turns and AGENT_ERROR for orphans."""
        if not isinstance(bus, Bus):
            return
        bus.emit_nowait(EventType.RUN_RESUMED, dict(self.resumed))
        attempt = self.resumed.get("attempt")
        reason = self.resumed.get("reason", "worker_lost")
        lost = _LOST.get(str(reason), "with its worker")
        for agent in plan.cut_off():
            Bus(bus.sink, agent.source).emit_nowait(
                EventType.TURN_ABANDONED, {"reason": reason, "attempt": attempt}
            )
        for agent in plan.orphans():
            assert agent.key is not None
            self._orphaned.add(agent.key)
            Bus(bus.sink, agent.source).emit_nowait(
                EventType.AGENT_ERROR,
                agent_error(
                    "worker_lost",
                    f"agent {agent.agent_id!r} was lost {lost} and nobody waits for it any more",
                ),
                last=True,
            )
        for agent in plan.end_now:
            Bus(bus.sink, agent.source).emit_nowait(
                EventType.AGENT_ERROR,
                agent_error(agent.error_type or "failed", agent.error or "ended"),
                last=True,
            )
