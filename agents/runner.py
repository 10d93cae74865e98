"""Runs one agent instance: streamed model turn → tool calls → tool results → next turn.

This is the trio shell around the pure `TurnAssembler`. Tool calls start the
moment they are fully assembled, while the model may still stream the rest of
its turn; their results go back to the model in call order. Every event goes
through the instance's `Bus`; with no bus (a non-streaming call) nothing is
emitted and the agent just returns its final text.
"""

from __future__ import annotations

import enum
import functools
import logging
import math
import time
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from contextlib import aclosing
from typing import Any

import msgspec
import trio

from agents.approval import ApprovalGate, ApprovalPolicy, ApprovalRequest, Decision, Prior
from agents.core.compaction import (
    CHARS_PER_TOKEN,
    CONTINUE_PROMPT,
    MAX_SUMMARY_CHARS,
    OUTPUT_LIMIT_REASONS,
    SUMMARY_SYSTEM,
    ContextMeter,
    Overflow,
    estimate_messages,
    estimate_request,
    estimate_text,
    overflow_of,
    plan_cut,
    summary_message,
    transcript,
)
from agents.core.events import EventType, Usage
from agents.core.messages import (
    AssistantMessage,
    Message,
    ModelRequest,
    ServerToolCall,
    ServerToolResult,
    StreamPart,
    TextDelta,
    ThinkingDelta,
    ToolCall,
    ToolCallArgs,
    ToolCallStart,
    ToolResultMessage,
    ToolSpec,
    UsageReport,
    UserMessage,
)
from agents.core.partial_json import PartialJson
from agents.core.turn import TurnAssembler, parse_arguments
from agents.core.usage import UsageNode
from agents.emitter import NULL_EMITTER, Emitter
from agents.errors import AgentFailed, ProviderError, ToolError
from agents.providers.base import Provider
from agents.spec import AgentSpec, CompactionSpec
from agents.tools.base import InstanceState, Tool, ToolContext

__all__ = [
    "AgentOutcome",
    "AgentRunner",
    "Cancellation",
    "Phase",
    "Summarizer",
    "TurnLimits",
    "is_cancellation",
]

Summarizer = Callable[[str, str, ToolContext], Awaitable[str]]
"""`summarize(agent_id, task, ctx)`: run the summarizer subagent `agent_id` as a child
of the compacting agent on `task`; its answer (the runtime's `agent_spawn`)."""

logger = logging.getLogger(__name__)

_REASONING = EventType.REASONING
_PROGRESS_EVERY = 0.1
"""Seconds between two TOOL_PROGRESS events of one call."""
_CHECK_EVERY = 256
"""A turn's size is checked every this-many stream parts (so a limit may be passed by
up to this many parts; the check costs nothing per delta)."""


class Phase(enum.Enum):
    """An agent instance's lifecycle: idle ⇄ running → finishing → idle.

    `RUNNING` takes messages (they reach the next model turn); `FINISHING` is
    publishing its final answer or failure and takes none (a sender waits for
    `IDLE` and runs it again); `IDLE` has no run in progress.
    """

    IDLE = "idle"
    RUNNING = "running"
    FINISHING = "finishing"


class TurnLimits(msgspec.Struct, frozen=True, kw_only=True):
    """Bounds on one model turn: a provider that streams forever must not run forever."""

    max_parts: int = 200_000
    """Stream parts (text, reasoning and argument deltas) in one turn."""
    max_bytes: int = 8 * 1024 * 1024
    """Characters of text, reasoning and tool arguments in one turn."""
    timeout: float = 600.0
    """Seconds one turn may stream, start to end (tools it started are not counted)."""


class Cancellation(msgspec.Struct, frozen=True):
    """Who stopped an agent instance, and why (a person's `cancel`)."""

    by: str
    """`user`: a person asked (the `cancel` op, `orchestrator cancel`, the API)."""
    reason: str | None = None

    def describe(self) -> str:
        """`cancelled by the user[: reason]`: the error result its parent's model sees."""
        who = "the user" if self.by == "user" else self.by
        return f"cancelled by {who}" + (f": {self.reason}" if self.reason else "")


class AgentOutcome(msgspec.Struct, frozen=True):
    """A finished agent instance: its final text and token usage."""

    text: str
    usage: Usage
    subtree_usage: Usage


class AgentRunner:
    """Drives one agent instance to its final answer (and again, if sent a message).

    Args:
        spec: the agent's definition.
        provider: streams its model turns.
        tools: every tool by name; the agent may call those its spec lists.
        bus: where its events go (`NULL_EMITTER`: nowhere, a non-streaming call).
        depth: the instance's depth in the tree (0 for the root).
        timeout_scope: the cancel scope that bounds this instance; when it is
            the one that fired, the instance reports `timeout`, else `cancelled`.
        usage: this instance's usage node (its parent's node above it); a budget
            on it that trips cancels this instance with AGENT_ERROR `budget`.
        turn_limits: bounds on each model turn (`output_limit`, `turn_timeout`).
        approval: which tool calls wait for a person's decision, and `gate`, where
            they wait (the run's); without both, every call runs at once.
        compaction: how the conversation is compacted when it grows too long (the
            spec's, or the server's default); `summarize_with` runs a summarizer
            subagent as a child.
    """

    def __init__(
        self,
        spec: AgentSpec,
        provider: Provider,
        tools: dict[str, Tool],
        bus: Emitter = NULL_EMITTER,
        *,
        depth: int = 0,
        timeout_scope: trio.CancelScope | None = None,
        usage: UsageNode | None = None,
        turn_limits: TurnLimits | None = None,
        approval: ApprovalPolicy | None = None,
        gate: ApprovalGate | None = None,
        compaction: CompactionSpec | None = None,
        summarize_with: Summarizer | None = None,
    ) -> None:
        self.spec = spec
        self.compaction = compaction or spec.compaction or CompactionSpec()
        self._summarize_with = summarize_with
        self._approval = approval if gate is not None and approval is not None else None
        self._gate = gate
        self.turn_limits = turn_limits or TurnLimits()
        self.depth = depth
        self.provider = provider
        self.bus = bus
        self._timeout_scope = timeout_scope
        self._tools = {name: tools[name] for name in spec.tools if name in tools}
        self._tool_specs = tuple(
            ToolSpec(
                name=tool.name,
                description=tool.description_for(spec.id),
                parameters=tool.parameters(),
            )
            for tool in self._tools.values()
        )
        self.messages: list[Message] = []
        self._meter = ContextMeter(
            estimate_request(
                ModelRequest(system=spec.instructions, messages=(), tools=self._tool_specs)
            )
        )
        self._compactions = 0
        self._background_calls: dict[str, int] = {}
        """Tool call id → background work it started that is still running (a
        compaction never summarizes such a call away)."""
        self.usage_node = usage or UsageNode(budget=spec.budget_tokens)
        self.usage_estimated = False
        """A turn of this agent was cut off before its usage was reported: an estimate
        of it is in `usage` (said in the agent's AGENT_ERROR as `usageEstimated`)."""
        self.usage_node.on_trip = self._budget_tripped
        self.state = InstanceState()
        self.inbox: list[tuple[str, str]] = []
        self.phase = Phase.IDLE
        """Where the instance is in its lifecycle (one state, not a set of flags)."""
        self.cancelled: Cancellation | None = None
        """Set once a person cancelled this instance (or an ancestor): it never runs again."""
        self._ended = False
        """This run of the instance has emitted its terminal event (one per run, never two)."""
        self._outcome: AgentOutcome | None = None
        self._scope: trio.CancelScope | None = None
        self._wake = trio.lowlevel.ParkingLot()
        self._idle = trio.lowlevel.ParkingLot()
        self._background: trio.Nursery | None = None
        self._background_running = 0
        self._unsafe_tail: trio.Event | None = None

    @property
    def running(self) -> bool:
        """A run of the agent is in progress (it is not idle)."""
        return self.phase is not Phase.IDLE

    @property
    def accepting(self) -> bool:
        """Messages sent into the agent now will still be seen by its model."""
        return self.phase is Phase.RUNNING

    @property
    def agent_key(self) -> str | None:
        """This instance's agentKey (None for the root agent)."""
        return self.bus.agent_key

    @property
    def timeout_scope(self) -> trio.CancelScope | None:
        """The scope whose deadline bounds this instance (its spawn's, or the run's)."""
        return self._timeout_scope

    @property
    def usage(self) -> Usage:
        """Usage of this instance's own model turns."""
        return self.usage_node.own

    @property
    def subtree_usage(self) -> Usage:
        """Usage of this instance and all its descendants."""
        return self.usage_node.subtree

    def _budget_tripped(self) -> None:
        if self._scope is not None:
            self._scope.cancel()

    def cancel(self, cancellation: Cancellation, *, stop: bool = True) -> bool:
        """A person stops this instance; False if it was already cancelled.

        A running instance is stopped (with `stop`; else it is only told why, because
        an ancestor's cancellation stops it) and reports AGENT_ERROR `cancelled` with
        `by` and `reason`; an idle one reports it now. Either way it never runs again:
        messages sent to it are refused. One that is publishing its final answer as
        the cancel arrives keeps it (its answer was its terminal event).
        """
        if self.cancelled is not None:
            return False
        self.cancelled = cancellation
        if self.phase is Phase.IDLE:
            self._ended = False
            self._error("cancelled", self._cancel_message(False))
        elif stop and self._scope is not None:
            self._scope.cancel()
        return True

    def fail(self, error_type: str, message: str) -> None:
        """The instance cannot even start (its tools are not available): AGENT_ERROR.

        Raises:
            AgentFailed: always, with `error_type` and `message`.
        """
        self._ended = False
        self._error(error_type, message)
        raise AgentFailed(message, error_type=error_type)

    def run(self, task: str) -> Coroutine[Any, Any, AgentOutcome]:
        """Run on `task` until a final answer (await the result).

        Raises:
            AgentFailed: after emitting AGENT_ERROR, if the agent failed.
            trio.Cancelled: after emitting AGENT_ERROR `cancelled`/`timeout`.
        """
        self.messages.append(UserMessage(text=task))
        return self._run()  # not awaited here: one coroutine level less under every delta

    def continue_run(
        self,
        pending: tuple[ToolCall, ...] = (),
        done: tuple[ToolResultMessage, ...] = (),
        prior: dict[str, Prior] | None = None,
        background: Sequence[BackgroundAgain] = (),
    ) -> Coroutine[Any, Any, AgentOutcome]:
        """Go on after a takeover, from a conversation rebuilt into `messages`.

        When `messages` ends with a turn's tool calls, `done` holds the results the
        journal has and `pending` the calls without one: those run again when the
        tool is `idempotent` (an `agent_spawn` continues its child), else their
        result is an error saying so. `prior` holds what the journal says of their
        approvals (call id →): `(requestedAt, timeoutAt)` for a call that was
        waiting for a decision — it waits again, for the rest of its timeout, with
        no second APPROVAL_REQUESTED — or the `Decision` it got (a refused call gets
        its refusal; an approved idempotent one runs again without asking twice). All results then
        follow the turn in call order, and model turns go on as usual. `background`:
        its background work to pick up again (children still running, or whose report
        had not reached it), each reporting to it as before. An agent whose last turn
        was its final answer (it waited for background work) does not answer again.
        """
        return self._run(pending, done, prior or {}, background)

    async def wait_idle(self) -> None:
        """Return once no run of this agent is in progress."""
        while self.running:
            await self._idle.park()

    async def resume(
        self, message: str, sender: str, *, timeout_scope: trio.CancelScope | None = None
    ) -> AgentOutcome:
        """Run an idle instance again on a new message; it keeps its conversation."""
        if self.running:
            raise RuntimeError(f"agent {self.spec.id!r} is running; deliver() instead")
        if self.cancelled is not None:
            raise AgentFailed(
                f"agent {self._who()} was {self.cancelled.describe()}", error_type="cancelled"
            )
        if timeout_scope is not None:
            self._timeout_scope = timeout_scope
        self.bus.emit_nowait(EventType.USER_MESSAGE, {"text": message, "from": sender})
        self.messages.append(UserMessage(text=message))
        return await self._run()

    async def _run(
        self,
        pending: tuple[ToolCall, ...] = (),
        done: tuple[ToolResultMessage, ...] = (),
        prior: dict[str, Prior] | None = None,
        again: Sequence[BackgroundAgain] = (),
    ) -> AgentOutcome:
        self.phase = Phase.RUNNING
        self._ended, self._outcome = False, None
        scope = self._scope = trio.CancelScope()
        failure: Exception | None = None
        try:
            with scope:
                async with trio.open_nursery() as background:
                    self._background = background
                    for label, call_id, work in again:
                        context = self._tool_context(call_id)
                        self.start_background(
                            label, functools.partial(work, context), call_id=call_id
                        )
                    try:
                        outcome = await self._loop(pending, done, prior)
                    except Exception as exc:  # raised bare below, not as a group
                        failure = exc
                        background.cancel_scope.cancel()
            if failure is not None:
                raise failure
            if scope.cancelled_caught:  # a person's cancel, or our own budget trip
                if self._outcome is not None:  # the answer went out before the cancel
                    return self._outcome
                if self.cancelled is not None:
                    raise AgentFailed(self.cancelled.describe(), error_type="cancelled")
                raise AgentFailed(
                    f"agent {self.spec.id!r}: {self.usage_node.describe_trip()}",
                    error_type="budget",
                )
            return outcome
        except AgentFailed as exc:
            self._error(exc.error_type, str(exc))
            raise
        except ProviderError as exc:
            self._error("provider_error", str(exc))
            raise AgentFailed(str(exc), error_type="provider_error") from exc
        except Exception as exc:  # a bug in a provider or tool plumbing: fail this agent only
            detail = f"agent {self.spec.id!r} crashed: {type(exc).__name__}: {exc}"
            logger.exception(  # the model gets a message; the operator gets the traceback
                "run %s: agent %s crashed", self.bus.run_id or "-", self._who()
            )
            self._error("internal", detail)
            raise AgentFailed(detail, error_type="internal") from exc
        except BaseException as exc:
            # Cancellation arrives bare or, out of a nursery, as a group of Cancelled.
            if is_cancellation(exc):
                timed_out = (
                    self.cancelled is None
                    and self._timeout_scope is not None
                    and self._timeout_scope.cancel_called
                )
                self._error(
                    "timeout" if timed_out else "cancelled", self._cancel_message(timed_out)
                )
            raise
        finally:
            self.phase = Phase.IDLE
            self._background = None
            self._idle.unpark_all()

    async def _loop(
        self,
        pending: tuple[ToolCall, ...] = (),
        done: tuple[ToolResultMessage, ...] = (),
        prior: dict[str, Prior] | None = None,
    ) -> AgentOutcome:
        if pending or done:
            last = self.messages[-1] if self.messages else None
            order = last.tool_calls if isinstance(last, AssistantMessage) else ()
            known = {r.tool_call_id: r for r in done}
            rerun = await self._rerun(pending, prior or {})
            known.update((r.tool_call_id, r) for r in rerun)
            self.messages.extend(known[c.id] for c in order if c.id in known)
        elif self.messages and isinstance(answer := self.messages[-1], AssistantMessage):
            # Continued after its final answer (no call in it), waiting for background
            # work: it does not answer again unless that work reports.
            while not self.inbox and self._background_running:
                await self._wake.park()
            if not self.inbox:
                self.phase = Phase.FINISHING
                return await self._finish(answer.text)
        turns = 0
        cut_parts: list[str] = []
        """The texts of a final answer cut by the output limit, continued since."""
        while True:
            if turns >= self.spec.max_turns:
                self.phase = Phase.FINISHING
                raise AgentFailed(
                    f"agent {self.spec.id!r} reached max_turns ({self.spec.max_turns}) "
                    "without a final answer",
                    error_type="max_turns",
                )
            self._take_inbox()
            turns += 1
            threshold = self.compaction.max_context_tokens
            if threshold is not None and self._meter.size(self.messages) > threshold:
                await self._compact("threshold")
            message, results, reason = await self._model_turn()
            self.messages.append(message)
            if message.tool_calls:
                self.messages.extend(results)
                cut_parts.clear()
                continue
            if reason == "pause_turn":  # the provider paused a long server-tool turn
                continue  # sending the conversation back lets it go on
            if reason in OUTPUT_LIMIT_REASONS and self.spec.continue_on_output_limit:
                if len(cut_parts) >= self.spec.continue_on_output_limit:
                    raise AgentFailed(
                        f"agent {self.spec.id!r}: its answer was cut by the model's output "
                        f"limit ({reason}) again after {len(cut_parts)} continuation(s) "
                        "(continue_on_output_limit; or raise the model's max_tokens)",
                        error_type="output_limit",
                    )
                cut_parts.append(message.text)
                self.bus.emit_nowait(
                    EventType.USER_MESSAGE,
                    {"text": CONTINUE_PROMPT, "from": "orchestrator", "continuation": True},
                )
                self.messages.append(UserMessage(text=CONTINUE_PROMPT))
                continue
            # A final answer is final only once nothing more can reach the agent:
            # background children still running wake it for another turn.
            while not self.inbox and self._background_running:
                await self._wake.park()
            if self.inbox:
                continue
            self.phase = Phase.FINISHING
            text = "".join(cut_parts) + message.text
            return await self._finish(text)

    async def _model_turn(self) -> tuple[AssistantMessage, list[ToolResultMessage], str]:
        """A model turn; a prompt the provider says is too long is compacted once and
        the turn asked again (the provider streamed nothing for it)."""
        try:
            return await self._turn()
        except ProviderError as exc:
            overflow = overflow_of(exc)
            if overflow is None:
                raise
        await self._compact("prompt_too_long", overflow)
        try:
            return await self._turn()
        except ProviderError as exc:
            again = overflow_of(exc)
            if again is None:
                raise
            raise AgentFailed(
                f"agent {self.spec.id!r}: the conversation is still too long for the model "
                f"after compaction: {again.describe()}",
                error_type="context_overflow",
            ) from exc

    async def _compact(self, reason: str, overflow: Overflow | None = None) -> None:
        """Replace the older part of the conversation by a summary (COMPACTION_STARTED,
        then COMPACTION_FINISHED). Nothing changes until the summary is in: a cancel or
        a failure while it is written leaves the conversation as it was.

        Raises:
            AgentFailed: `context_overflow` (nothing can be summarized, or the result is
                still over `max_context_tokens`), `compaction_failed` (the summarizer).
        """
        policy, messages = self.compaction, self.messages
        before = self._meter.size(messages)
        protected = frozenset(self._background_calls)
        cut = plan_cut(messages, policy.keep_last_turns, protected)
        if cut is None and reason == "prompt_too_long" and policy.keep_last_turns:
            cut = plan_cut(messages, 0, protected)  # the last turns must go too
        if cut is None and reason == "threshold":
            return  # nothing to summarize yet: the threshold is a target, not the limit
        if cut is None:
            why = overflow.describe() if overflow is not None else f"about {before} tokens"
            raise AgentFailed(
                f"agent {self.spec.id!r}: its conversation is too long for its model "
                f"({why}) and holds nothing more to summarize: the task and the turns kept "
                f"(compaction.keep_last_turns: {policy.keep_last_turns}) are about "
                f"{before} tokens",
                error_type="context_overflow",
            )
        self._compactions += 1
        self.bus.emit_nowait(
            EventType.COMPACTION_STARTED, {"reason": reason, "beforeTokens": before}
        )
        window = overflow.limit if overflow is not None and overflow.limit else None
        window = window or policy.max_context_tokens
        max_chars = window * CHARS_PER_TOKEN * 3 // 4 if window else None
        text = transcript(messages[1 : cut.at], max_chars)
        try:
            summary = (await self._summarize(text)).strip()
        except (ProviderError, ToolError) as exc:
            raise AgentFailed(
                f"agent {self.spec.id!r}: compaction failed: {exc}", error_type="compaction_failed"
            ) from exc
        if not summary or len(summary) > MAX_SUMMARY_CHARS:
            said = f"{len(summary)} characters, over {MAX_SUMMARY_CHARS}" if summary else "nothing"
            raise AgentFailed(
                f"agent {self.spec.id!r}: compaction failed: the summarizer wrote {said}",
                error_type="compaction_failed",
            )
        kept = messages[cut.at :]
        old = list(messages)
        messages[:] = [messages[0], summary_message(summary, cut.turns), *kept]
        after = self._meter.rewritten(old, messages)
        full = self.bus.offer(  # put now: the conversation and its journal change together
            EventType.COMPACTION_FINISHED,
            {
                "afterTokens": after,
                "summarizedTurns": cut.turns,
                "summarizedMessages": cut.at - 1,
                "keptMessages": len(kept),
                "summary": summary,
            },
        )
        limit = policy.max_context_tokens
        if limit is not None and after > limit:
            raise AgentFailed(
                f"agent {self.spec.id!r}: after compaction the conversation is still about "
                f"{after} tokens, {after - limit} over compaction.max_context_tokens ({limit}): "
                f"the summary is about {estimate_text(summary)} tokens and the "
                f"{len(kept)} messages kept about {estimate_messages(kept)}",
                error_type="context_overflow",
            )
        if full:
            await self.bus.wait_writable()

    async def _summarize(self, text: str) -> str:
        """The summary of `text` (a transcript): by the summarizer subagent, run as a child
        of this agent, or by this agent's own model (its usage is this agent's)."""
        policy = self.compaction
        ask = (
            f"{text}\n\n---\nSummarize the conversation above (the earlier part of yours) "
            "as your notes to yourself for the rest of the task."
        )
        if policy.instructions:
            ask += f"\n\n{policy.instructions}"
        if policy.summarizer is not None and self._summarize_with is not None:
            ctx = self._tool_context(f"compaction-{self._compactions}")
            return await self._summarize_with(policy.summarizer, ask, ctx)
        system = SUMMARY_SYSTEM
        if policy.instructions:
            system += f"\n\n{policy.instructions}"
        request = ModelRequest(system=system, messages=(UserMessage(text=ask),), purpose="summary")
        limits = self.turn_limits
        parts: list[str] = []
        size = 0
        usage: UsageReport | None = None
        try:
            with trio.CancelScope(relative_deadline=limits.timeout) as deadline:
                async with aclosing(self.provider.stream(request)) as batches:
                    async for batch in batches:
                        for part in batch:
                            if type(part) is TextDelta:
                                parts.append(part.text)
                                size += len(part.text)
                            elif type(part) is UsageReport:
                                usage = part
                        if size > limits.max_bytes:
                            raise ToolError(
                                f"the summary passed {limits.max_bytes} characters "
                                "(limits.max_turn_bytes)"
                            )
        finally:
            if usage is not None:
                self.usage_node.charge(
                    Usage(input_tokens=usage.input_tokens, output_tokens=usage.output_tokens)
                )
        if deadline.cancelled_caught:
            raise ToolError(f"the summary took over {limits.timeout:g} s")
        return "".join(parts)

    async def _rerun(
        self, calls: tuple[ToolCall, ...], prior: dict[str, Prior]
    ) -> list[ToolResultMessage]:
        """Results for tool calls a worker failure left without one (see `continue_run`)."""
        results: dict[str, ToolResultMessage] = {}
        async with trio.open_nursery() as nursery:
            for call in calls:
                tool = self._tools.get(call.name)
                known = prior.get(call.id)
                never_ran = isinstance(known, tuple) or (  # it waits, or was refused
                    isinstance(known, Decision) and known.decision != "approve"
                )
                if tool is not None and (tool.idempotent or never_ran):
                    try:
                        args: dict[str, Any] | None = parse_arguments(call.arguments)
                        problem = None
                    except ValueError as exc:
                        args, problem = None, str(exc)
                    nursery.start_soon(
                        self._run_tool, call, args, problem, results, None, None, known
                    )
                    continue
                content = (
                    f"tool {call.name!r}: interrupted by a worker failure (it is not "
                    "idempotent, so it was not run again; its effect is unknown)"
                )
                results[call.id] = ToolResultMessage(
                    tool_call_id=call.id, name=call.name, content=content, is_error=True
                )
                await self.bus.emit(
                    EventType.TOOL_RESULT,
                    {"toolCallId": call.id, "name": call.name, "content": content, "isError": True},
                )
        return [results[call.id] for call in calls]

    def start_background(
        self,
        label: str,
        work: Callable[[], Awaitable[str]],
        *,
        report: bool = True,
        call_id: str | None = None,
    ) -> None:
        """Run `work` beside this agent, which does not finish before it.

        With `report`, the work's text (or failure) comes back to the agent as a
        message before its next model turn, from the label's first word. `call_id`:
        the tool call that started it (kept out of compaction while it runs).
        """
        if self._background is None:
            raise RuntimeError("the agent is not running")
        self._background_running += 1
        if call_id is not None:
            self._background_calls[call_id] = self._background_calls.get(call_id, 0) + 1
        self._background.start_soon(self._background_task, label, work, report, call_id)

    async def _background_task(
        self,
        label: str,
        work: Callable[[], Awaitable[str]],
        report: bool,
        call_id: str | None = None,
    ) -> None:
        message = None
        try:
            text = await work()
            message = f"[{label} finished]\n{text}"
        except (AgentFailed, ToolError) as exc:
            kind = exc.error_type if isinstance(exc, AgentFailed) else "error"
            message = f"[{label} failed ({kind})]\n{exc}"
        finally:
            self._background_running -= 1
            if call_id is not None:
                left = self._background_calls.pop(call_id, 1) - 1
                if left:
                    self._background_calls[call_id] = left
            self._wake.unpark_all()
        if report:
            self.deliver(message, label.split(" ")[0])

    def deliver(self, text: str, sender: str) -> bool:
        """Queue a message for the agent's next model turn and emit USER_MESSAGE.

        Returns False (and does nothing) once the agent no longer takes messages.
        """
        if not self.accepting or self.cancelled is not None:
            return False
        self.inbox.append((text, sender))
        if not self.bus.closed:
            self.bus.emit_nowait(EventType.USER_MESSAGE, {"text": text, "from": sender})
        self._wake.unpark_all()
        return True

    def _who(self) -> str:
        return self.agent_key or f"{self.spec.id} (root)"

    def _take_inbox(self) -> None:
        while self.inbox:
            self.messages.append(UserMessage(text=self.inbox.pop(0)[0]))

    def _cancel_message(self, timed_out: bool) -> str:
        if timed_out and self.cancelled is None:
            return f"agent {self.spec.id!r} timed out"
        if self.cancelled is not None:
            return f"agent {self.spec.id!r} was {self.cancelled.describe()}"
        return f"agent {self.spec.id!r} was cancelled"

    def _error(self, error_type: str, message: str) -> None:
        """AGENT_ERROR, unless this run already emitted its terminal event."""
        if self._ended or self.bus.closed:
            return
        self._ended = True
        data: dict[str, Any] = {"errorType": error_type, "message": message}
        if error_type == "cancelled" and self.cancelled is not None:
            data["by"] = self.cancelled.by
            if self.cancelled.reason is not None:
                data["reason"] = self.cancelled.reason
        data["usage"] = self.usage.to_dict()
        data["subtreeUsage"] = self.subtree_usage.to_dict()
        if self.usage_estimated:
            data["usageEstimated"] = True
        self.bus.emit_nowait(EventType.AGENT_ERROR, data, last=True)

    async def _finish(self, text: str) -> AgentOutcome:
        # A budget tripped by the last turn's usage cancels us here, before the result.
        await trio.lowlevel.checkpoint_if_cancelled()
        outcome = AgentOutcome(text, self.usage.copy(), self.subtree_usage.copy())
        # Published before the first checkpoint of `emit`: a cancel arriving while it
        # waits for room finds the answer out, and adds no second terminal event.
        self._ended, self._outcome = True, outcome
        await self.bus.emit(
            EventType.AGENT_RESULT,
            {
                "text": text,
                "usage": outcome.usage.to_dict(),
                "subtreeUsage": outcome.subtree_usage.to_dict(),
            },
            last=True,
        )
        return outcome

    async def _turn(self) -> tuple[AssistantMessage, list[ToolResultMessage], str]:
        """One model turn, in four steps: ask the model (its stream goes out as events
        while tool calls start the moment they are complete), assemble its message,
        wait for the tool calls, and hand back the outcome (message, results in call
        order, finish reason)."""
        turn = _Turn()
        async with trio.open_nursery() as tools:
            turn.tools = tools
            tools.start_soon(self._read_turn, turn)
        # The nursery has waited for the stream and for every tool call the turn started
        # (the turn's usage was charged when its stream ended: `_charge`).
        if turn.failure is not None:
            raise turn.failure
        message = turn.message
        assert message is not None  # set by `_read_turn` when it did not fail
        if turn.usage is not None:  # the next request holds this turn's message too
            self._meter.turn_ended(
                turn.usage.input_tokens, turn.usage.output_tokens, len(self.messages) + 1
            )
        reason = turn.assembler.finish_reason or "unknown"
        return message, [turn.results[call.id] for call in message.tool_calls], reason

    def _charge(self, turn: _Turn) -> None:
        """Charge a turn's tokens the moment its stream is over — before its tool calls
        end, so an agent cancelled while they run (its children, say) still counts
        them, as do its ancestors' subtrees and budgets. A stream cut off before the
        provider reported usage is charged an estimate (the request's size as
        compaction measures it, and what streamed at characters ÷ 4), and its agent's
        terminal event says `usageEstimated`; one that failed before any part arrived
        (a refused request) is charged nothing."""
        if turn.usage is not None:
            used = Usage(
                input_tokens=turn.usage.input_tokens, output_tokens=turn.usage.output_tokens
            )
        elif turn.streamed:
            used = Usage(
                input_tokens=self._meter.size(self.messages),
                output_tokens=math.ceil(turn.assembler.output_chars() / CHARS_PER_TOKEN),
            )
            self.usage_estimated = True
        else:
            return
        self.usage_node.charge(used)

    async def _read_turn(self, turn: _Turn) -> None:
        """Ask the model and assemble its message, in a task of its own beside the
        turn's tool calls.

        Why a task: a task resumes through every frame under it. In the agent's own
        task each delta read from a provider would resume the whole call chain
        (tool task → spawn → run → loop → turn → here); in this one it resumes this
        frame and the provider's stream. A failure is kept for `_turn` to raise bare
        (not as a group), and cancels the tool calls already started.
        """
        try:
            try:
                await self._ask_model(turn)
            finally:
                self._charge(turn)  # whole or cut off (a cancel): its tokens were spent
            turn.message = await self._assemble(turn)
        except Exception as exc:
            turn.failure = exc
            turn.tools.cancel_scope.cancel()

    async def _ask_model(self, turn: _Turn) -> None:
        """Stream one model turn into `turn`, emitting its events as they arrive.

        Text deltas take the fast paths (one `offer` per delta, or one `offer_deltas`
        per network read, an await only when the outlet is full); every other part
        goes through `_on_part`.

        Raises:
            AgentFailed: the turn streamed past `turn_limits` (time, parts, size).
        """
        limits = self.turn_limits
        request = ModelRequest(
            system=self.spec.instructions, messages=tuple(self.messages), tools=self._tool_specs
        )
        assembler = turn.assembler
        parts_seen, check_at = 0, _CHECK_EVERY
        # Looked up once: this loop runs for every network read of every agent.
        bus = self.bus
        offer, offer_deltas, wait_writable = bus.offer, bus.offer_deltas, bus.wait_writable
        add_text, add_texts = assembler.text_parts.append, assembler.text_parts.extend
        with trio.CancelScope(relative_deadline=limits.timeout) as deadline:
            async with aclosing(self.provider.stream(request)) as batches:
                async for batch in batches:
                    turn.streamed = True
                    parts_seen += len(batch)
                    if parts_seen >= check_at:  # every 256 parts: cheap per delta
                        check_at = parts_seen + _CHECK_EVERY
                        self._check_turn_size(assembler, parts_seen)
                    if len(batch) == 1 and type(batch[0]) is TextDelta:
                        text = batch[0].text  # one delta per read: a slow stream
                        add_text(text)
                        if offer(_REASONING, {"delta": text}):
                            await wait_writable()
                        continue
                    texts: list[str] = []
                    for part in batch:
                        if type(part) is TextDelta:  # the common case, first and exact
                            texts.append(part.text)
                            continue
                        if texts:  # what streamed before this part goes out first
                            add_texts(texts)
                            if offer_deltas(texts):
                                await wait_writable()
                            texts = []
                        await self._on_part(part, turn)
                    if texts:
                        add_texts(texts)
                        if offer_deltas(texts):
                            await wait_writable()
        if deadline.cancelled_caught:
            raise AgentFailed(
                f"agent {self.spec.id!r}: a model turn streamed for over "
                f"{limits.timeout:g} s (limits.turn_timeout_seconds)",
                error_type="turn_timeout",
            )

    async def _on_part(self, part: StreamPart, turn: _Turn) -> None:
        """A stream part other than text: thinking, tool calls, usage, server tools, ends."""
        assembler, bus = turn.assembler, self.bus
        if isinstance(part, ThinkingDelta):
            assembler.add_thinking(part.text)
            await bus.emit(_REASONING, {"thinkingDelta": part.text})
        elif isinstance(part, ToolCallStart):
            assembler.start_call(part.key, part.id, part.name)
            tool = self._tools.get(part.name)
            if tool is not None and tool.stream_paths:
                turn.readers[part.key] = PartialJson(tool.stream_paths)
        elif isinstance(part, ToolCallArgs):
            ready = assembler.add_args(part.key, part.delta)
            call_id, name = assembler.call_name(part.key)
            data: dict[str, Any] = {"toolCallId": call_id, "name": name, "argsDelta": part.delta}
            reader = turn.readers.get(part.key)
            if reader is not None:
                fields = reader.feed(part.delta)
                if fields:
                    data["fields"] = fields
            await bus.emit(EventType.TOOL_CALL_DELTA, data)
            if ready is not None:
                await self._start_tool(turn, ready)
        elif isinstance(part, UsageReport):
            turn.usage = part
        elif isinstance(part, (ServerToolCall, ServerToolResult)):
            assembler.add_server(part)  # the provider ran it: show, never run
            await bus.emit(*_server_event(part))
        else:  # ThinkingEnd, ToolCallEnd, Finish: the assembler decides
            for ready in assembler.apply(part):
                await self._start_tool(turn, ready)

    async def _assemble(self, turn: _Turn) -> AssistantMessage:
        """The stream ended: start the calls it left complete, emit the turn's `last`
        REASONING (its text and tool calls), and return its message."""
        assembler = turn.assembler
        for ready in assembler.finish("unknown"):
            await self._start_tool(turn, ready)
        message = assembler.message()
        data: dict[str, Any] = {
            "text": message.text,
            "toolCalls": [_call_json(call) for call in message.tool_calls],
            "finishReason": assembler.finish_reason or "unknown",
        }
        if turn.usage is not None:  # this turn's own tokens (traces put them on its span)
            data["usage"] = {
                "inputTokens": turn.usage.input_tokens,
                "outputTokens": turn.usage.output_tokens,
            }
        await self.bus.emit(_REASONING, data, last=True)
        return message

    def _check_turn_size(self, assembler: TurnAssembler, parts: int) -> None:
        limits = self.turn_limits
        if parts > limits.max_parts or assembler.output_chars() > limits.max_bytes:
            raise AgentFailed(
                f"agent {self.spec.id!r}: one model turn produced more than "
                f"{limits.max_parts} parts or {limits.max_bytes} characters "
                "(limits.max_turn_events/max_turn_bytes)",
                error_type="output_limit",
            )

    async def _start_tool(self, turn: _Turn, call: ToolCall) -> None:
        """Emit TOOL_CALL and start the tool in the turn's nursery."""
        try:
            args: dict[str, Any] | None = parse_arguments(call.arguments)
            problem = None
        except ValueError as exc:
            args, problem = None, str(exc)
        await self.bus.emit(
            EventType.TOOL_CALL,
            {"toolCallId": call.id, "name": call.name, "args": _shown_args(call, args)},
        )
        wait_for = None
        tool = self._tools.get(call.name)
        if tool is not None and not tool.concurrency_safe:
            # Unsafe tools run one at a time, in call order: each waits for the previous.
            wait_for, self._unsafe_tail = self._unsafe_tail, trio.Event()
            done = self._unsafe_tail
        else:
            done = None
        turn.tools.start_soon(self._run_tool, call, args, problem, turn.results, wait_for, done)

    async def _run_tool(
        self,
        call: ToolCall,
        args: dict[str, Any] | None,
        problem: str | None,
        results: dict[str, ToolResultMessage],
        wait_for: trio.Event | None = None,
        done: trio.Event | None = None,
        prior: Prior | None = None,
    ) -> None:
        # One coroutine from the task down to the tool (no helper level): a child
        # agent streams through every frame of this chain at each of its yields.
        try:
            if wait_for is not None:
                await wait_for.wait()
            tool = self._tools.get(call.name)
            decision = None
            if problem is not None or args is None:
                content, is_error = f"tool {call.name!r}: {problem}", True
            elif tool is None:
                available = ", ".join(self._tools) or "none"
                content = f"unknown tool {call.name!r} (available: {available})"
                is_error = True
            elif isinstance(prior, Decision):  # decided before a takeover
                decision = prior
            elif self._approval is not None and (
                prior is not None or self._approval.requires(call.name)
            ):
                decision = await self._ask_approval(call, args, tool, prior)
            if decision is not None and decision.args is not None:
                args = decision.args
            if decision is not None and decision.decision != "approve":
                content, is_error = decision.refusal(call.name), True
            elif tool is not None and args is not None and problem is None:
                ctx = self._tool_context(call.id, _Progress(self.bus, call.id))
                try:
                    # Write-ahead: a call that acts on the world runs once its call (and
                    # its approval) are stored, so a takeover never makes it twice.
                    if not tool.idempotent and not await self.bus.durable():
                        raise ToolError(f"tool {call.name!r}: not run: the run was lost here")
                    content, is_error = await tool.run(args, ctx), False
                except ToolError as exc:
                    content, is_error = str(exc), True
                except Exception as exc:  # a tool bug: an error result for the model, logged here
                    logger.exception(
                        "run %s: tool %r of agent %s crashed",
                        self.bus.run_id or "-",
                        call.name,
                        self._who(),
                    )
                    content, is_error = (
                        f"tool {call.name!r} failed: {type(exc).__name__}: {exc}",
                        True,
                    )
            results[call.id] = ToolResultMessage(
                tool_call_id=call.id, name=call.name, content=content, is_error=is_error
            )
            await self.bus.emit(
                EventType.TOOL_RESULT,
                {"toolCallId": call.id, "name": call.name, "content": content, "isError": is_error},
            )
        finally:
            if done is not None:
                done.set()

    def _tool_context(self, call_id: str, progress: _Progress | None = None) -> ToolContext:
        def start(label: str, work: Callable[[], Awaitable[str]]) -> None:
            self.start_background(label, work, call_id=call_id)

        return ToolContext(
            call_id=call_id,
            agent_id=self.spec.id,
            agent_key=self.agent_key,
            depth=self.depth,
            usage=self.usage_node,
            instance=self.state,
            start_background=start,
            progress=progress,
        )

    async def _ask_approval(
        self, call: ToolCall, args: dict[str, Any], tool: Tool, waited: tuple[float, float] | None
    ) -> Decision:
        """Wait for the decision on a call that needs one (`waited`: it was already
        requested, before a takeover). Emits APPROVAL_REQUESTED (unless `waited`) and
        APPROVAL_RESOLVED — `cancelled` when the agent is stopped while it waits."""
        assert self._approval is not None and self._gate is not None
        policy, bus, now = self._approval, self.bus, time.time()
        if waited is None:
            requested_at, timeout_at = now, now + policy.timeout
            data: dict[str, Any] = {
                "toolCallId": call.id,
                "name": call.name,
                "args": args,
                "timeoutAt": timeout_at,
                "edit": policy.edit,
            }
            await bus.emit(EventType.APPROVAL_REQUESTED, data)
        else:
            requested_at, timeout_at = waited
        request = ApprovalRequest(
            tool_call_id=call.id,
            name=call.name,
            args=args,
            requested_at=requested_at,
            timeout_at=timeout_at,
            wait=max(0.0, timeout_at - now),
            edit=policy.edit,
            parameters=tool.parameters(),
        )
        try:
            decision = await self._gate.wait(request)
        except BaseException as exc:
            if is_cancellation(exc) and not bus.closed:
                stopped = self.cancelled
                data = {
                    "toolCallId": call.id,
                    "decision": "cancelled",
                    "by": stopped.by if stopped is not None else "server",
                    "edited": False,
                }
                if stopped is not None and stopped.reason is not None:
                    data["reason"] = stopped.reason
                bus.emit_nowait(EventType.APPROVAL_RESOLVED, data)
            raise
        data = {
            "toolCallId": call.id,
            "decision": decision.decision,
            "by": decision.by,
            "edited": decision.args is not None,
        }
        if decision.reason is not None:
            data["reason"] = decision.reason
        if decision.args is not None:
            data["args"] = decision.args
        await bus.emit(EventType.APPROVAL_RESOLVED, data)
        return decision


BackgroundAgain = tuple[str, str, Callable[[ToolContext], Awaitable[str]]]
"""Background work picked up again after a takeover: its label (`<taskId> …`), the
tool call that started it, and the work, given that call's `ToolContext`."""


class _Progress:
    """A tool call's TOOL_PROGRESS events, at most one per `_PROGRESS_EVERY` seconds
    (a tool that reports thousands a second cannot flood the run); the last report,
    `progress == total`, always goes out."""

    __slots__ = ("_bus", "_call_id", "_next")

    def __init__(self, bus: Emitter, call_id: str) -> None:
        self._bus = bus
        self._call_id = call_id
        self._next = 0.0

    def __call__(self, progress: float, total: float | None, message: str | None) -> None:
        now = trio.current_time()
        if (now < self._next and progress != total) or self._bus.closed:
            return
        self._next = now + _PROGRESS_EVERY
        data: dict[str, Any] = {"toolCallId": self._call_id, "progress": progress}
        if total is not None:
            data["total"] = total
        if message:
            data["message"] = message[:1000]
        self._bus.emit_nowait(EventType.TOOL_PROGRESS, data)


class _Turn:
    """One model turn in progress: what the stream assembled, and its tool calls."""

    __slots__ = (
        "assembler",
        "failure",
        "message",
        "readers",
        "results",
        "streamed",
        "tools",
        "usage",
    )

    def __init__(self) -> None:
        self.assembler = TurnAssembler()
        self.results: dict[str, ToolResultMessage] = {}
        """Tool results by call id, as the calls end."""
        self.readers: dict[int, PartialJson] = {}
        """Streaming-argument readers of calls whose tool has `stream_paths`."""
        self.usage: UsageReport | None = None
        self.streamed = False
        """A part of the answer arrived (the model was at work: its tokens count)."""
        self.tools: trio.Nursery
        """Where the turn's stream is read and its tool calls run (the turn waits for them)."""
        self.message: AssistantMessage | None = None
        """The assembled message, once the stream has ended."""
        self.failure: Exception | None = None
        """Why reading the stream failed (raised by `_turn` once the tool calls have ended)."""


def is_cancellation(exc: BaseException) -> bool:
    """True for `trio.Cancelled` and for exception groups made only of it."""
    if isinstance(exc, trio.Cancelled):
        return True
    if isinstance(exc, BaseExceptionGroup):
        return exc.split(trio.Cancelled)[1] is None
    return False


def _server_event(part: ServerToolCall | ServerToolResult) -> tuple[EventType, dict[str, Any]]:
    """TOOL_CALL / TOOL_RESULT with `server: true` for a tool the provider ran."""
    if isinstance(part, ServerToolCall):
        return EventType.TOOL_CALL, {
            "toolCallId": part.id,
            "name": part.name,
            "args": part.input,
            "server": True,
        }
    content = part.content
    if not isinstance(content, str):
        content = msgspec.json.encode(content).decode()
    return EventType.TOOL_RESULT, {
        "toolCallId": part.tool_call_id,
        "name": part.name,
        "content": content,
        "isError": part.is_error,
        "server": True,
    }


def _shown_args(call: ToolCall, args: dict[str, Any] | None) -> Any:
    return args if args is not None else call.arguments


def _call_json(call: ToolCall) -> dict[str, Any]:
    try:
        args: Any = parse_arguments(call.arguments)
    except ValueError:
        args = call.arguments
    return {"toolCallId": call.id, "name": call.name, "args": args}
