"""Runs one agent instance: streamed model turn → tool calls → tool results → next turn.

`AgentRunner` is the instance's lifecycle (run, continue after a takeover, resume
on a message, cancel, its one terminal event) and the trio shell that carries out
the loop's steps. What to do after a turn is decided by the pure `AgentLoop`
(`agents/core/loop.py`); each step is carried out by a room of its own: the turn's
stream (`turn.py`), tool calls and approvals (`tools.py`), compaction
(`compactor.py`), the inbox and background work (`background.py`). Every event
goes through the instance's `Bus`; with no bus (a non-streaming call) nothing is
emitted and the agent just returns its final text.
"""

from __future__ import annotations

import enum
import functools
import logging
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from typing import Any

import trio
from msgspec import UNSET

from agents.approval import ApprovalGate, ApprovalPolicy, Prior
from agents.core.attachments import Attachment
from agents.core.compaction import ContextMeter, estimate_request
from agents.core.events import EventType, Usage
from agents.core.loop import (
    AgentLoop,
    AskModel,
    Compact,
    ContinueCut,
    Fail,
    Finish,
    NextTurn,
    Step,
    WaitQuiet,
)
from agents.core.messages import (
    AssistantMessage,
    Inbound,
    Message,
    ModelRequest,
    ToolCall,
    ToolResultMessage,
    ToolSpec,
    UserMessage,
)
from agents.core.replay import Recording
from agents.core.structured import OutputMode
from agents.core.usage import UsageNode
from agents.emitter import NULL_EMITTER, Emitter
from agents.errors import AgentFailed, ProviderError
from agents.providers.base import Provider
from agents.runner.answer import Accepted, Refused, answer_check, ask_again
from agents.runner.background import Background, user_message
from agents.runner.compactor import Compactor, Summarizer
from agents.runner.ending import AgentOutcome, Cancellation, Ending
from agents.runner.tools import Keeper, ToolRoom, is_cancellation
from agents.runner.turn import TurnLimits, TurnReader
from agents.spec import AgentSpec, CompactionSpec
from agents.tools.base import InstanceState, Tool, ToolContext

__all__ = [
    "AgentOutcome",
    "AgentRunner",
    "BackgroundAgain",
    "Cancellation",
    "Phase",
]

logger = logging.getLogger("agents.runner")

Given = tuple[Attachment, ...]
"""A message's images and files."""

BackgroundAgain = tuple[str, str, Callable[[ToolContext], Awaitable[str]]]
"""Background work picked up again after a takeover: its label (`<taskId> …`), the
tool call that started it, and the work, given that call's `ToolContext`."""


class Phase(enum.Enum):
    """An agent instance's lifecycle: idle ⇄ running → finishing → idle.

    `RUNNING` takes messages (they reach the next model turn); `FINISHING` is
    publishing its final answer or failure and takes none (a sender waits for
    `IDLE` and runs it again); `IDLE` has no run in progress.
    """

    IDLE = "idle"
    RUNNING = "running"
    FINISHING = "finishing"


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
        recording: a forked run's recorded turns (`replay`): a model turn asked the
            same as one of them is answered from it (agents/core/replay.py).
        output_mode, keep: how its model is asked for an `output_schema`; where its
            tools' attachments are stored (docs/structured.md).
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
        recording: Recording | None = None,
        output_mode: OutputMode = "instruction",
        keep: Keeper | None = None,
    ) -> None:
        self.spec = spec
        self.turn_limits = turn_limits or TurnLimits()
        self.depth = depth
        self.provider = provider
        self.bus = bus
        self._timeout_scope = timeout_scope
        self.messages: list[Message] = []
        self.usage_node = usage or UsageNode(budget=spec.budget_tokens)
        self.usage_node.on_trip = self._budget_tripped
        self.state = InstanceState()
        self.phase = Phase.IDLE
        """Where the instance is in its lifecycle (one state, not a set of flags)."""
        self.cancelled: Cancellation | None = None
        """Set once a person cancelled this instance (or an ancestor): it never runs again."""
        self._scope: trio.CancelScope | None = None
        self._idle = trio.lowlevel.ParkingLot()
        own = {name: tools[name] for name in spec.tools if name in tools}
        self.answers, instructions = answer_check(spec, output_mode, own)  # (None: any text)
        tool_specs, self._meter = _offered(spec.id, instructions, own)
        self.background = Background(bus, self._accepts)
        self._ending = Ending(bus, self.usage_node, lambda: self.turns.usage_estimated)
        self.tools = ToolRoom(
            agent_id=spec.id,
            depth=depth,
            usage=self.usage_node,
            state=self.state,
            tools=own,
            bus=bus,
            approval=approval,
            gate=gate,
            start_background=self._start_for_call,
            stopped_by=self._stopped_by,
            keep=keep,
        )
        self.turns = TurnReader(
            agent_id=spec.id,
            instructions=instructions,
            provider=provider,
            bus=bus,
            tools=self.tools,
            tool_specs=tool_specs,
            limits=self.turn_limits,
            meter=self._meter,
            usage=self.usage_node,
            model=spec.model,
            recording=recording,
            output=self.answers.format if self.answers is not None else None,
        )
        self.compactor = Compactor(
            agent_id=spec.id,
            policy=compaction or spec.compaction or CompactionSpec(),
            provider=provider,
            limits=self.turn_limits,
            usage=self.usage_node,
            bus=bus,
            meter=self._meter,
            summarize_with=summarize_with,
            context=self.tools.context,
            protected=self.background.calls,
        )

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

    def _accepts(self) -> bool:
        return self.phase is Phase.RUNNING and self.cancelled is None

    def _stopped_by(self) -> tuple[str, str | None] | None:
        stopped = self.cancelled
        return None if stopped is None else (stopped.by, stopped.reason)

    def _start_for_call(
        self, label: str, work: Callable[[], Awaitable[str]], call_id: str | None
    ) -> None:
        self.background.start(label, work, call_id=call_id)

    def cancel(self, cancellation: Cancellation, *, stop: bool = True) -> bool:
        """A person stops this instance; False if it was already cancelled. A running one
        is stopped (with `stop`; else only told why: an ancestor's cancel stops it) and
        reports AGENT_ERROR `cancelled` with `by` and `reason`; an idle one reports it
        now. It never runs again (messages to it are refused). One publishing its final
        answer as the cancel arrives keeps it (its answer was its terminal event)."""
        if self.cancelled is not None:
            return False
        self.cancelled = cancellation
        if self.phase is Phase.IDLE:
            self._ending.reset()
            self._error("cancelled", self._cancel_message(False))
        elif stop and self._scope is not None:
            self._scope.cancel()
        return True

    def fail(self, error_type: str, message: str) -> None:
        """The instance cannot even start (its tools are not available): AGENT_ERROR.

        Raises:
            AgentFailed: always, with `error_type` and `message`.
        """
        self._ending.reset()
        self._error(error_type, message)
        raise AgentFailed(message, error_type=error_type)

    def run(
        self, task: str, attachments: tuple[Attachment, ...] = ()
    ) -> Coroutine[Any, Any, AgentOutcome]:
        """Run on `task` (with its `attachments`) until a final answer (await the result).

        Raises:
            AgentFailed: after emitting AGENT_ERROR, if the agent failed.
            trio.Cancelled: after emitting AGENT_ERROR `cancelled`/`timeout`.
        """
        self.messages.append(UserMessage(text=task, attachments=attachments))
        return self._run()  # not awaited here: one coroutine level less under every delta

    def continue_run(
        self,
        pending: tuple[ToolCall, ...] = (),
        done: tuple[ToolResultMessage, ...] = (),
        prior: dict[str, Prior] | None = None,
        background: Sequence[BackgroundAgain] = (),
        inbox: Sequence[Inbound] = (),
    ) -> Coroutine[Any, Any, AgentOutcome]:
        """Go on after a takeover, from a conversation rebuilt into `messages`.

        When `messages` ends with a turn's tool calls, `done` holds the results the
        journal has, `pending` the calls without one: run again when the tool is
        `idempotent` (an `agent_spawn` continues its child), else an error result.
        `prior`: what the journal says of their approvals (call id →): `(requestedAt,
        timeoutAt)` for a call that waited for a decision — it waits again, for the
        rest of its timeout, with no second APPROVAL_REQUESTED — or its `Decision` (a
        refused call gets its refusal; an approved idempotent one runs again without
        asking twice). All results follow the turn in call order; turns go on. `background`:
        its background work to pick up again (children still running, or whose report
        had not reached it), each reporting to it as before. An agent whose last turn
        was its final answer (it waited for background work) does not answer again.
        `inbox`: a person's messages for it (a fork's), delivered as `send` would.
        """
        return self._run(pending, done, prior or {}, background, inbox)

    async def wait_idle(self) -> None:
        """Return once no run of this agent is in progress."""
        while self.running:
            await self._idle.park()

    async def resume(
        self,
        message: str,
        sender: str,
        *,
        timeout_scope: trio.CancelScope | None = None,
        control: str | None = None,
        attachments: tuple[Attachment, ...] = (),
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
        said = user_message(message, sender, control, attachments)
        self.bus.emit_nowait(EventType.USER_MESSAGE, said)
        self.messages.append(UserMessage(text=message, attachments=attachments))
        return await self._run()

    def deliver(
        self, text: str, sender: str, control: str | None = None, attachments: Given = ()
    ) -> bool:
        """Queue a message (with its `attachments`) for the agent's next model turn and
        emit USER_MESSAGE (`control`: the cluster control request that brought it);
        False (and nothing done) once the agent no longer takes messages."""
        return self.background.deliver(text, sender, control, attachments)

    async def _run(
        self,
        pending: tuple[ToolCall, ...] = (),
        done: tuple[ToolResultMessage, ...] = (),
        prior: dict[str, Prior] | None = None,
        again: Sequence[BackgroundAgain] = (),
        inbox: Sequence[Inbound] = (),
    ) -> AgentOutcome:
        if self.cancelled is not None:  # cancelled while it was made: its end is out already
            raise AgentFailed(self._cancel_message(False), error_type="cancelled")
        self.phase = Phase.RUNNING
        self._ending.reset()
        scope = self._scope = trio.CancelScope()
        failure: Exception | None = None
        try:
            with scope:
                async with trio.open_nursery() as background:
                    self.background.open(background)
                    for label, call_id, work in again:
                        context = self.tools.context(call_id)
                        self.background.start(
                            label, functools.partial(work, context), call_id=call_id
                        )
                    for text, control, given in inbox:
                        self.deliver(text, "client", control, given)
                    try:
                        outcome = await self._loop(pending, done, prior)
                    except Exception as exc:  # raised bare below, not as a group
                        failure = exc
                        background.cancel_scope.cancel()
            if failure is not None:
                raise failure
            if scope.cancelled_caught:  # a person's cancel, or our own budget trip
                if self._ending.outcome is not None:  # the answer went out before the cancel
                    return self._ending.outcome
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
            self.background.open(None)
            self._idle.unpark_all()

    async def _loop(
        self,
        pending: tuple[ToolCall, ...] = (),
        done: tuple[ToolResultMessage, ...] = (),
        prior: dict[str, Prior] | None = None,
    ) -> AgentOutcome:
        """Carry out the loop's steps (`AgentLoop` decides them) to the final answer."""
        spec, policy = self.spec, self.compactor.policy
        loop = AgentLoop(
            spec.id,
            spec.max_turns,
            spec.continue_on_output_limit or 0,
            policy.max_context_tokens,
        )
        step: Step = loop.start()
        if pending or done:
            await self.tools.results_again(self.messages, pending, done, prior or {})
        elif self.messages and isinstance(answer := self.messages[-1], AssistantMessage):
            # Continued after its final answer (no call in it), waiting for background
            # work: it does not answer again unless that work reports.
            step = loop.answered(answer.text)
        while True:
            if type(step) is NextTurn:
                self.background.take_into(self.messages)
                size = None
                if policy.max_context_tokens is not None:
                    size = self._meter.size(self.messages)
                step = loop.ready(size)
            elif type(step) is AskModel:
                message, results, reason = await self.compactor.turn(self.turns, self.messages)
                self.messages.append(message)
                if message.tool_calls:
                    self.messages.extend(results)
                step = loop.turn_ended(message.text, bool(message.tool_calls), reason)
                if self.answers is not None:
                    step = self.answers.after_turn(loop, step)
            elif isinstance(step, Compact):
                await self.compactor.compact(self.messages, step.reason)
                step = loop.compacted()
            elif isinstance(step, ContinueCut):
                self.bus.emit_nowait(
                    EventType.USER_MESSAGE,
                    {"text": step.prompt, "from": "orchestrator", "continuation": True},
                )
                self.messages.append(UserMessage(text=step.prompt))
                step = loop.continued()
            elif type(step) is WaitQuiet:
                # A final answer is final only once nothing more can reach the agent:
                # background children still running wake it for another turn.
                step = loop.quiet(await self.background.wait_quiet())
            elif isinstance(step, Finish):
                final = (
                    self.answers.judge(step.text) if self.answers else Accepted(UNSET, step.text)
                )
                if isinstance(final, Refused):  # told why, the model answers again (or fails)
                    step = ask_again(loop, final, self.bus, self.messages)
                    continue
                self.phase = Phase.FINISHING
                return await self._ending.finish(final.text, final.value)
            else:
                assert isinstance(step, Fail)
                self.phase = Phase.FINISHING
                raise AgentFailed(step.message, error_type=step.error_type)

    def _who(self) -> str:
        return self.agent_key or f"{self.spec.id} (root)"

    def _cancel_message(self, timed_out: bool) -> str:
        if timed_out and self.cancelled is None:
            return f"agent {self.spec.id!r} timed out"
        if self.cancelled is not None:
            return f"agent {self.spec.id!r} was {self.cancelled.describe()}"
        return f"agent {self.spec.id!r} was cancelled"

    def _error(self, error_type: str, message: str) -> None:
        self._ending.error(error_type, message, self.cancelled)


def _offered(
    agent_id: str, instructions: str, tools: dict[str, Tool]
) -> tuple[tuple[ToolSpec, ...], ContextMeter]:
    """The tools as the model of `agent_id` is offered them, and a meter of the
    conversation's size that starts with them and the system prompt."""
    specs = tuple(
        ToolSpec(name=t.name, description=t.description_for(agent_id), parameters=t.parameters())
        for t in tools.values()
    )
    request = ModelRequest(system=instructions, messages=(), tools=specs)
    return specs, ContextMeter(estimate_request(request))
