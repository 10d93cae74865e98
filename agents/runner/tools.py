"""An agent's tool calls: started as they are assembled, approved, run, answered.

A call starts the moment its arguments are complete (the turn's stream may still
be running); unsafe tools run one at a time in call order; a call a policy names
waits for a person's decision first; a tool that acts on the world runs only once
its call is stored (write-ahead). Every call ends in one TOOL_RESULT.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

import trio

from agents.approval import ApprovalGate, ApprovalPolicy, ApprovalRequest, Decision, Prior
from agents.core.attachments import Attachment, infos, note
from agents.core.events import EventType
from agents.core.messages import AssistantMessage, Message, ToolCall, ToolResultMessage
from agents.core.payloads import ApprovalResolvedData, ToolProgressData, ToolResultData
from agents.core.turn import parse_arguments
from agents.core.usage import UsageNode
from agents.emitter import Emitter
from agents.errors import ToolError
from agents.tools.base import InstanceState, Tool, ToolContext, ToolOutput

__all__ = ["Progress", "StoppedBy", "ToolRoom", "is_cancellation"]

logger = logging.getLogger("agents.runner")

_PROGRESS_EVERY = 0.1
"""Seconds between two TOOL_PROGRESS events of one call."""

StoppedBy = Callable[[], "tuple[str, str | None] | None"]
Keeper = Callable[[tuple[Attachment, ...]], Awaitable[tuple[tuple[Attachment, ...], list[str]]]]
"""`keep(attachments)`: store a tool result's attachments for the run; those kept, and
a note for each that was not (over the run's limits)."""
"""Who stopped the agent and why (`by`, `reason`), or None while it is not stopped."""


class ToolRoom:
    """The tool calls of one agent instance.

    Args:
        agent_id, depth, usage, state: what each call's `ToolContext` says.
        tools: the agent's tools by name (those its spec lists).
        bus: where TOOL_CALL, TOOL_PROGRESS, TOOL_RESULT and the approvals go.
        approval: which calls wait for a person, and `gate`, where (without both,
            every call runs at once).
        start_background: runs a tool's background work beside the agent.
        stopped_by: who stopped the agent (an approval it cancels names them).
    """

    __slots__ = (
        "_agent_id",
        "_approval",
        "_bus",
        "_depth",
        "_gate",
        "_keep",
        "_start_background",
        "_state",
        "_stopped_by",
        "_unsafe_tail",
        "_usage",
        "tools",
    )

    def __init__(
        self,
        *,
        agent_id: str,
        depth: int,
        usage: UsageNode,
        state: InstanceState,
        tools: dict[str, Tool],
        bus: Emitter,
        approval: ApprovalPolicy | None,
        gate: ApprovalGate | None,
        start_background: Callable[[str, Callable[[], Awaitable[str]], str | None], None],
        stopped_by: StoppedBy,
        keep: Keeper | None = None,
    ) -> None:
        self._agent_id = agent_id
        self._depth = depth
        self._usage = usage
        self._state = state
        self.tools = tools
        self._bus = bus
        self._approval = approval if gate is not None and approval is not None else None
        self._gate = gate
        self._start_background = start_background
        self._stopped_by = stopped_by
        self._keep = keep
        """Stores a tool result's attachments (None: they are noted, not kept)."""
        self._unsafe_tail: trio.Event | None = None

    def _who(self) -> str:
        return self._bus.agent_key or f"{self._agent_id} (root)"

    async def start(
        self, nursery: trio.Nursery, results: dict[str, ToolResultMessage], call: ToolCall
    ) -> None:
        """Emit TOOL_CALL and start the tool in `nursery` (the turn's); its result
        goes into `results`."""
        try:
            args: dict[str, Any] | None = parse_arguments(call.arguments)
            problem = None
        except ValueError as exc:
            args, problem = None, str(exc)
        await self._bus.emit(
            EventType.TOOL_CALL,
            {"toolCallId": call.id, "name": call.name, "args": _shown_args(call, args)},
        )
        wait_for = None
        tool = self.tools.get(call.name)
        if tool is not None and not tool.concurrency_safe:
            # Unsafe tools run one at a time, in call order: each waits for the previous.
            wait_for, self._unsafe_tail = self._unsafe_tail, trio.Event()
            done = self._unsafe_tail
        else:
            done = None
        nursery.start_soon(self.run, call, args, problem, results, wait_for, done)

    async def results_again(
        self,
        messages: list[Message],
        pending: tuple[ToolCall, ...],
        done: tuple[ToolResultMessage, ...],
        prior: dict[str, Prior],
    ) -> None:
        """After a takeover: the last turn's results (the journal's `done`, and those of
        the `pending` calls, run again) follow it in `messages`, in call order."""
        last = messages[-1] if messages else None
        order = last.tool_calls if isinstance(last, AssistantMessage) else ()
        known = {r.tool_call_id: r for r in done}
        rerun = await self.rerun(pending, prior)
        known.update((r.tool_call_id, r) for r in rerun)
        messages.extend(known[c.id] for c in order if c.id in known)

    async def rerun(
        self, calls: tuple[ToolCall, ...], prior: dict[str, Prior]
    ) -> list[ToolResultMessage]:
        """Results for tool calls a worker failure left without one (see
        `AgentRunner.continue_run`): an idempotent tool, or a call that never ran
        (it waited, or was refused), runs again; any other gets an error result."""
        results: dict[str, ToolResultMessage] = {}
        async with trio.open_nursery() as nursery:
            for call in calls:
                tool = self.tools.get(call.name)
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
                    nursery.start_soon(self.run, call, args, problem, results, None, None, known)
                    continue
                content = (
                    f"tool {call.name!r}: interrupted by a worker failure (it is not "
                    "idempotent, so it was not run again; its effect is unknown)"
                )
                results[call.id] = ToolResultMessage(
                    tool_call_id=call.id, name=call.name, content=content, is_error=True
                )
                await self._bus.emit(
                    EventType.TOOL_RESULT,
                    {"toolCallId": call.id, "name": call.name, "content": content, "isError": True},
                )
        return [results[call.id] for call in calls]

    async def run(
        self,
        call: ToolCall,
        args: dict[str, Any] | None,
        problem: str | None,
        results: dict[str, ToolResultMessage],
        wait_for: trio.Event | None = None,
        done: trio.Event | None = None,
        prior: Prior | None = None,
    ) -> None:
        """One call, from its approval (if any) to its TOOL_RESULT."""
        # One coroutine from the task down to the tool (no helper level): a child
        # agent streams through every frame of this chain at each of its yields.
        try:
            if wait_for is not None:
                await wait_for.wait()
            tool = self.tools.get(call.name)
            decision = None
            given: tuple[Attachment, ...] = ()
            if problem is not None or args is None:
                content, is_error = f"tool {call.name!r}: {problem}", True
            elif tool is None:
                available = ", ".join(self.tools) or "none"
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
                ctx = self.context(call.id, Progress(self._bus, call.id))
                try:
                    # Write-ahead: a call that acts on the world runs once its call (and
                    # its approval) are stored, so a takeover never makes it twice.
                    if not tool.idempotent and not await self._bus.durable():
                        raise ToolError(f"tool {call.name!r}: not run: the run was lost here")
                    output = await tool.run(args, ctx)
                    if isinstance(output, ToolOutput):
                        content, given = await self._kept(output)
                    else:
                        content = output
                    is_error = False
                except ToolError as exc:
                    content, is_error = str(exc), True
                except Exception as exc:  # a tool bug: an error result for the model, logged here
                    logger.exception(
                        "run %s: tool %r of agent %s crashed",
                        self._bus.run_id or "-",
                        call.name,
                        self._who(),
                    )
                    content, is_error = (
                        f"tool {call.name!r} failed: {type(exc).__name__}: {exc}",
                        True,
                    )
            results[call.id] = ToolResultMessage(
                tool_call_id=call.id,
                name=call.name,
                content=content,
                is_error=is_error,
                attachments=given,
            )
            data: ToolResultData = {
                "toolCallId": call.id,
                "name": call.name,
                "content": content,
                "isError": is_error,
            }
            if given:
                data["attachments"] = infos(given)
            await self._bus.emit(EventType.TOOL_RESULT, data)
        finally:
            if done is not None:
                done.set()

    async def _kept(self, output: ToolOutput) -> tuple[str, tuple[Attachment, ...]]:
        """A result's text, and the attachments stored for the run (those not kept: a
        note in the text)."""
        if not output.attachments:
            return output.text, ()
        if self._keep is None:
            notes = [note(a, "not kept here") for a in output.attachments]
            return "\n".join([output.text, *notes]), ()
        kept, notes = await self._keep(output.attachments)
        return "\n".join([output.text, *notes]) if notes else output.text, kept

    def context(self, call_id: str, progress: Progress | None = None) -> ToolContext:
        """What a tool (or a summarizer run as a child) is told of the call `call_id`."""
        start_background = self._start_background

        def start(label: str, work: Callable[[], Awaitable[str]]) -> None:
            start_background(label, work, call_id)

        return ToolContext(
            call_id=call_id,
            agent_id=self._agent_id,
            agent_key=self._bus.agent_key,
            depth=self._depth,
            usage=self._usage,
            instance=self._state,
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
        policy, bus, now = self._approval, self._bus, time.time()
        if waited is None:
            requested_at, timeout_at = now, now + policy.timeout
            await bus.emit(
                EventType.APPROVAL_REQUESTED,
                {
                    "toolCallId": call.id,
                    "name": call.name,
                    "args": args,
                    "timeoutAt": timeout_at,
                    "edit": policy.edit,
                },
            )
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
                stopped = self._stopped_by()
                data: ApprovalResolvedData = {
                    "toolCallId": call.id,
                    "decision": "cancelled",
                    "by": stopped[0] if stopped is not None else "server",
                    "edited": False,
                }
                if stopped is not None and stopped[1] is not None:
                    data["reason"] = stopped[1]
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


class Progress:
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
        data: ToolProgressData = {"toolCallId": self._call_id, "progress": progress}
        if total is not None:
            data["total"] = total
        if message:
            data["message"] = message[:1000]
        self._bus.emit_nowait(EventType.TOOL_PROGRESS, data)


def is_cancellation(exc: BaseException) -> bool:
    """True for `trio.Cancelled` and for exception groups made only of it."""
    if isinstance(exc, trio.Cancelled):
        return True
    if isinstance(exc, BaseExceptionGroup):
        return exc.split(trio.Cancelled)[1] is None
    return False


def _shown_args(call: ToolCall, args: dict[str, Any] | None) -> Any:
    return args if args is not None else call.arguments
