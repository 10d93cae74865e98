"""One run: the root agent on an input, from RUN_STARTED to RUN_FINISHED.

A run owns one cancel scope (cancel reaches every descendant, each of which
emits AGENT_ERROR `cancelled`) and one deadline (`run_timeout_seconds`). It takes
one path whether it starts fresh or goes on from its journal: its `Continuation`
(`runtime/continuation.py`) says what opens it and how its root starts, and a stop
from outside is one `StopReason`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal, cast

import msgspec
import trio

from agents.approval import ApprovalRequest
from agents.core.attachments import Attachment, AttachmentInfo, from_infos, infos
from agents.core.messages import Inbound
from agents.core.payloads import RunFinishedData
from agents.core.replay import Recording
from agents.core.turn import parse_arguments
from agents.core.usage import UsageNode
from agents.errors import AgentFailed, OrchestratorError
from agents.runner import AgentRunner, Cancellation
from agents.spec import AgentSpec
from orchestrator.core.approvals import Answer
from orchestrator.core.bus import (
    AnyBus,
    AnySink,
    NullSink,
    RunSink,
    current_bus,
    new_run_id,
    new_session_id,
)
from orchestrator.core.continuation import (
    Answered,
    Continuation,
    Continue,
    Fresh,
    Kind,
    Opening,
    ThreadStart,
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


class AgentGone(OrchestratorError, LookupError):
    """A cancel named an agent instance that is not there to cancel."""

    code = "not_found"


class RunResult(msgspec.Struct, frozen=True, kw_only=True):
    """How a run ended."""

    run_id: str
    status: RunStatus
    text: str | None = None
    error: str | None = None
    usage: Usage = msgspec.field(default_factory=Usage)
    """The whole tree's token usage."""
    structured: Any = msgspec.UNSET
    """The root's validated answer, when it has an output schema (`text` is its JSON)."""


@dataclass(frozen=True, slots=True)
class StopReason:
    """Why a run was stopped from outside, and how it then ends. A stronger reason
    replaces a weaker one (`rank`): a run whose journal failed ends `failed` even if a
    person cancelled it first."""

    status: RunStatus
    error: str
    rank: int
    cancellation: Cancellation | None = None
    """Who cancelled it, and why (RUN_FINISHED says so)."""

    @staticmethod
    def cancelled(cancellation: Cancellation) -> StopReason:
        """A person (or a client) cancelled the run."""
        return StopReason("cancelled", cancellation.describe(), 0, cancellation)

    @staticmethod
    def server_stopped() -> StopReason:
        """The server is stopping (the run is interrupted, or suspended to resume)."""
        return StopReason("interrupted", "the server stopped while the run was running", 1)

    @staticmethod
    def failed(reason: str) -> StopReason:
        """Its events cannot be stored."""
        return StopReason("failed", reason, 2)


class Run:
    """Executes one run: from its input, or going on from its journal (`plan`: the plan
    rebuilt from it, announced with `resumed`; none: the empty plan of a fresh run).
    Without a `sink` (a non-streaming call) its events go nowhere (`NullSink`).
    `thread`: where it stands in its thread (its root starts from the thread's
    conversation). `output_schema`: the one its root's answer must match instead of
    its spec's (the `run` op's `outputSchema`); `attachments`: its input's images and
    files; `trigger`: the trigger that started it."""

    def __init__(
        self,
        catalog: AgentCatalog,
        agent_id: str,
        input: str,
        *,
        limits: RunLimits,
        sink: RunSink | None = None,
        run_id: str | None = None,
        plan: ResumePlan | None = None,
        resumed: dict[str, object] | None = None,
        recording: Recording | None = None,
        thread: ThreadStart | None = None,
        output_schema: dict[str, Any] | None = None,
        attachments: Sequence[AttachmentInfo] = (),
        trigger: dict[str, Any] | None = None,
    ) -> None:
        self.catalog = catalog
        self.agent_id = agent_id
        self.input = input
        self.output_schema = output_schema
        self.trigger = trigger
        """The trigger that started it (`{name, scheduledFor}`), said in RUN_STARTED."""
        self.attachments = tuple(attachments)
        """Its input's attachments (their bytes are read from the blob store as it
        starts, into `_given`)."""
        self._given: tuple[Attachment, ...] = ()
        self.limits = limits
        self.sink: AnySink = sink or NullSink(run_id or new_run_id(), new_session_id(root=True))
        self.run_id = self.sink.run_id
        self.scope = trio.CancelScope()
        self.result: RunResult | None = None
        kinds = {spec.id: _kind(spec) for spec in catalog.specs.values()}
        continuation = Continuation(plan or ResumePlan(), kinds, resumed or {}, thread)
        self.context = RunContext(
            catalog, limits, runtime=run_tools, continuation=continuation, recording=recording
        )
        self.agents: dict[str, AgentRunner] = self.context.live.agents
        """Child instances by agentKey (valid for `agent_send` until the run ends)."""
        self.root: AgentRunner | None = None
        self._stop: StopReason | None = None
        self._adopt_approvals()

    def _adopt_approvals(self) -> None:
        """Calls that waited for a decision when the journal stopped wait again, and can
        be listed and answered from now on (before their agents reach them)."""
        now = time.time()
        for waiting in self.context.continuation.approvals():
            agent, call = waiting.agent, waiting.call
            tool = self.context.tools.get(call.name)
            if tool is None:
                continue
            try:
                args = parse_arguments(call.arguments)
            except ValueError:
                continue
            spec = self.catalog.specs.get(agent.agent_id)
            policy = self.catalog.approval_policy(spec) if spec is not None else None
            self.catalog.desk.adopt(
                self.run_id,
                agent.source,
                ApprovalRequest(
                    tool_call_id=call.id,
                    name=call.name,
                    args=args,
                    requested_at=waiting.requested_at,
                    timeout_at=waiting.timeout_at,
                    wait=max(0.0, waiting.timeout_at - now),
                    edit=policy.edit if policy is not None else False,
                    parameters=tool.parameters(),
                ),
            )

    def _stopped(self, reason: StopReason) -> None:
        """Stop the run from outside: it ends as the strongest reason given says."""
        if self._stop is None or reason.rank > self._stop.rank:
            self._stop = reason
        self.scope.cancel()

    def cancel(self, by: str = "user", reason: str | None = None) -> None:
        """Cancel the whole tree; the run ends `cancelled`.

        Every running agent reports AGENT_ERROR `cancelled` with `by` and `reason`.
        """
        if self._stop is None or self._stop.cancellation is None:
            cancellation = Cancellation(by, reason)
            for runner in self._runners():
                if runner.running:
                    runner.cancel(cancellation, stop=False)  # the run's scope stops it
            self._stopped(StopReason.cancelled(cancellation))
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
        remote = self.context.live.remotes.get(agent_key)
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
        live, continuation = self.context.live, self.context.continuation
        if runner is None:  # (one of the journal not started again yet: it ends now)
            waiting = continuation.waiting(agent_key, live.continued)
            if waiting is None:
                raise AgentGone(f"no agent {agent_key!r} in run {self.run_id!r}")
            self._emit(
                continuation.cancel_early(
                    waiting, live.continued, by=by, reason=reason, itself=True
                )
            )
            return
        cancellation = Cancellation(by, reason)
        if not runner.cancel(cancellation):
            raise AgentGone(f"agent {agent_key!r} was already cancelled")
        for key in live.descendants(agent_key):
            # Running ones are stopped by the cancelled ancestor's scope; idle ones end now.
            self.agents[key].cancel(cancellation, stop=False)
        rebuilt = continuation.journaled(agent_key)
        if rebuilt is not None:  # those of its journal it has not started again end too
            self._emit(
                continuation.cancel_early(
                    rebuilt, live.continued, by=by, reason=reason, itself=False
                )
            )

    def hold(
        self,
        agent_key: str | None,
        message: str,
        control: str | None,
        attachments: tuple[Attachment, ...] = (),
    ) -> bool:
        """Keep a person's message for an agent of the journal that has not started
        again yet (it gets it as it goes on); False: no such agent."""
        live = self.context.live
        if agent_key is None and self.root is not None:
            return False
        waiting = self.context.continuation.waiting(agent_key, live.continued)
        if waiting is None:
            return False
        waiting.inbox.append(Inbound(message, control, attachments))
        return True

    def _emit(self, openings: list[Opening]) -> None:
        """Events the run emits from outside any agent (a cancel's, for agents of its
        journal that have not started again)."""
        bus = self.sink.bus()
        for opening in openings:
            bus.at(opening.source).emit_any(opening.type, opening.data, opening.last)

    def remote_link(self, agent_key: str | None) -> RemoteLink | None:
        """The remote child whose run (on another server) `agent_key` belongs to, if
        it is one of a remote subtree running now (docs/remote.md)."""
        return self.context.live.remotes.get(agent_key) if agent_key is not None else None

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
        return self.catalog.desk.answer(self.run_id, answer, here=True)

    def _runners(self) -> list[AgentRunner]:
        return [*([self.root] if self.root is not None else []), *self.agents.values()]

    def fail(self, reason: str) -> None:
        """Stop the run from outside (its events cannot be stored); it ends `failed`."""
        self._stopped(StopReason.failed(reason))

    def interrupt(self) -> None:
        """Stop the run because the server is stopping; it ends `interrupted`."""
        self._stopped(StopReason.server_stopped())

    def suspend(self) -> None:
        """Stop the run because the server is stopping, to resume it at the next start:
        nothing it emits from now on is journaled (no AGENT_ERROR, no RUN_FINISHED), so
        its journal ends as it was, still `running` — the same as after a crash. A
        blocking call, which has no journal, ends `interrupted`."""
        self.sink.drop()
        self._stopped(StopReason.server_stopped())

    def agent(self, agent_key: str | None) -> AgentRunner | None:
        """A running agent of this run: the root for None, else by agentKey."""
        if agent_key is None:
            return self.root
        return self.agents.get(agent_key)

    async def execute(self) -> RunResult:
        """Run the root agent to the end and emit RUN_FINISHED (first the run's opening:
        RUN_STARTED, or RUN_RESUMED and what the continuation ends at once)."""
        spec = self.catalog.spec(self.agent_id)
        bus = self.sink.bus()
        continuation = self.context.continuation
        given = await self._attachments()
        started: dict[str, object] = {}
        if self.output_schema is not None:
            started["outputSchema"] = self.output_schema
        if given:
            started["attachments"] = infos(given)
        if self.trigger is not None:
            started["trigger"] = self.trigger
        for opening in continuation.opening(spec.id, self.input, started):
            bus.at(opening.source).emit_any(opening.type, opening.data, opening.last)
        bus_token = current_bus.set(bus)
        status: RunStatus = "failed"
        text = error = None
        structured: Any = msgspec.UNSET
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
            output_schema=self.output_schema,
        )
        self.root = runner
        self.context.live.set_root(runner)
        try:
            with self.scope, deadline:
                try:
                    if unavailable is not None:
                        runner.fail("mcp_unavailable", unavailable)
                    text, structured = await self._drive(runner)
                    status = "completed"
                except AgentFailed as exc:
                    error = f"{exc.error_type}: {exc}"
                except Exception as exc:  # a bug: end the run visibly, keep the trace
                    logger.exception("run %s crashed", self.run_id)
                    error = f"internal: {type(exc).__name__}: {exc}"
            if deadline.cancelled_caught:
                error = f"timeout: run exceeded run_timeout_seconds ({timeout:g} s)"
            elif self.scope.cancelled_caught and self._stop is not None:
                status, error = self._stop.status, self._stop.error
        finally:
            current_bus.reset(bus_token)
            self.catalog.desk.forget_run(self.run_id)
        self.result = RunResult(
            run_id=self.run_id,
            status=status,
            text=text,
            error=error,
            usage=runner.subtree_usage.copy(),
            structured=structured,
        )
        for end in continuation.unresumed(self.context.live.continued, status):
            bus.at(end.source).emit_any(end.type, end.data, end.last)
        self._emit_finished(bus, runner)
        return self.result

    async def _attachments(self) -> tuple[Attachment, ...]:
        """Its input's attachments with their bytes, known to the run by id."""
        named = self.attachments
        blobs = await self.catalog.blobs.get_blobs([a["id"] for a in named]) if named else {}
        self._given = from_infos(named, blobs)
        self.context.attachments.update((a.id, a) for a in self._given)
        return self._given

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

    async def _drive(self, runner: AgentRunner) -> tuple[str, Any]:
        """The root agent's final text and its structured value (UNSET: none): run on
        the input, continued from the journal, or the journaled one (only RUN_FINISHED
        was missing)."""
        match self.context.continuation.root():
            case Answered() as answered:
                if answered.result is None:
                    raise AgentFailed(answered.error, error_type="failed")
                return answered.result, answered.structured
            case Continue(plan=root):
                runner.messages = list(root.messages)
                outcome = await runner.continue_run(
                    tuple(root.pending),
                    tuple(root.done),
                    root.approvals,
                    self.context.background_again(root),
                    root.inbox,
                )
                return outcome.text, outcome.structured
            case Fresh(history=history):
                runner.messages = list(history)  # (a thread's conversation so far)
                outcome = await runner.run(self.input, self._given)
                return outcome.text, outcome.structured

    def _emit_finished(self, bus: AnyBus, runner: AgentRunner) -> None:
        """RUN_FINISHED, from `self.result` (and who cancelled the run)."""
        result = self.result
        assert result is not None
        ended = cast(Literal["completed", "failed", "cancelled", "interrupted"], result.status)
        data: RunFinishedData = {"status": ended}
        if result.text is not None:
            data["result"] = result.text
        if result.structured is not msgspec.UNSET:
            data["structured"] = result.structured
        if result.error is not None:
            data["error"] = result.error
        cancellation = self._stop.cancellation if self._stop is not None else None
        if result.status == "cancelled" and cancellation is not None:
            data["by"] = cancellation.by
            if cancellation.reason is not None:
                data["reason"] = cancellation.reason
        data["usage"] = runner.subtree_usage.to_dict()
        bus.emit_nowait(EventType.RUN_FINISHED, data, last=True)


def _kind(spec: AgentSpec) -> Kind:
    """How a subagent runs: here, on another of our servers, or as an A2A task."""
    if spec.remote is None:
        return "local"
    return "a2a" if spec.remote.a2a else "remote"
