"""Carrying a child's start out: a new child, or one the journal shows, local or remote.

The spawn tool parses its arguments, asks the run's `Continuation` how the child of
its call starts (`runtime/continuation.py`), admits a new one (`New`) against the
run's limits, and hands the start to `Children.start`. One place then runs each
kind of start, for local, remote and A2A subagents alike:

- `New`: a child made now, on a child bus of the caller's (its Source stamped on
  every event), blocking or in the background (`taskId`);
- `Continue`: a local child rebuilt from the journal goes on, with its conversation,
  its calls in flight and its own background children;
- `Answered`: the journaled result (or failure) of a child that had ended;
- `Follow`: a remote child's run there, followed again from the journal's cursor;
- `Lost`: a remote child that cannot be followed again ends here with its open
  subtree, and the call fails.
"""

from __future__ import annotations

import functools
import math
import uuid
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any

import msgspec
import trio

from agents.core.attachments import Attachment, infos
from agents.core.messages import Message
from agents.core.payloads import AgentStartedData, agent_error
from agents.core.usage import UsageNode
from agents.errors import AgentFailed, ToolError
from agents.runner import AgentOutcome, BackgroundAgain
from agents.spec import AgentSpec
from agents.tools.base import ToolContext
from orchestrator.core.bus import AnyBus, NullBus, current_bus
from orchestrator.core.continuation import (
    Again,
    Answered,
    Continue,
    EarlierAgent,
    Follow,
    Lost,
)
from orchestrator.core.events import EventType
from orchestrator.core.rebuild import AgentPlan
from orchestrator.mcp.hub import McpError
from orchestrator.runtime.context import RunContext
from orchestrator.runtime.remote import RemoteLink, Resumed, run_remote

__all__ = ["Children", "New", "failure_text"]

_NO_BUS = NullBus("", "")
"""The bus of a spawn outside any run (a tool called directly): nothing is emitted."""


@dataclass(frozen=True, slots=True)
class New:
    """A child to make now: admitted (`AgentSpawnTool._admit`), with its task and the
    call's `timeout_seconds` (None: the subagent's own; 0: in the background)."""

    spec: AgentSpec
    task: str
    timeout_seconds: float | None = None
    continues: EarlierAgent | None = None
    """The agent of an earlier run of the thread it continues (a local subagent)."""
    history: tuple[Message, ...] = ()
    """That agent's conversation: the child's starts from it."""
    attachments: tuple[Attachment, ...] = ()
    """Images and files given with its task (`agent_spawn`'s `attachments`)."""


class Children:
    """Runs the children of one run's spawn calls, however each one starts."""

    __slots__ = ("_run",)

    def __init__(self, run: RunContext) -> None:
        self._run = run

    def start(self, start: New | Again, ctx: ToolContext) -> Coroutine[Any, Any, str]:
        """The coroutine that runs the child of `ctx`'s call to its final text (for a
        background child: its ids at once).

        Raises:
            ToolError: the start is refused now (a bad timeout), or, awaited, the
                child failed, timed out or was lost.
        """
        match start:
            case New():
                if self._run.catalog.uses_mcp(start.spec):  # its MCP servers first
                    return self._prepared(start, ctx)
                return self._new(start, ctx)
            case _:
                return self._again(start, ctx)

    def again(self, parent: AgentPlan) -> list[BackgroundAgain]:
        """A continued `parent`'s background children to pick up again beside it,
        under their taskIds (`Continuation.background`)."""
        return [
            (
                f"{task_id} {start.plan.agent_id} {start.plan.key}",
                call_id,
                functools.partial(self._again, start),
            )
            for start, task_id, call_id in self._run.continuation.background(parent)
        ]

    # -- a new child -------------------------------------------------------------------

    async def _prepared(self, new: New, ctx: ToolContext) -> str:
        try:
            await self._run.catalog.prepare(new.spec)
        except McpError as exc:
            raise ToolError(f"agent_spawn: {new.spec.id!r} cannot start: {exc}") from None
        return await self._new(new, ctx)

    def _new(self, new: New, ctx: ToolContext) -> Coroutine[Any, Any, str]:
        """Start the admitted child; the coroutine that drives it (or returns its ids)."""
        spec, asked = new.spec, new.timeout_seconds
        timeout = asked if asked is not None else spec.timeout_seconds
        if timeout is not None and (timeout < 0 or not math.isfinite(timeout)):
            raise ToolError(
                "agent_spawn: timeout_seconds must be 0 (background) or a positive number of "
                f"seconds, got {timeout}"
            )
        task_id = f"task-{uuid.uuid4().hex[:16]}" if timeout == 0 and asked == 0 else None
        parent_bus = current_bus.get() or _NO_BUS
        bus = parent_bus.child(
            agent_id=spec.id,
            agent_name=spec.display_name,
            task_id=task_id,
            parent_tool_call_id=ctx.call_id,
        )
        key = bus.agent_key
        assert key is not None
        if spec.remote is not None and spec.remote.a2a is None and new.attachments:
            raise ToolError(
                f"agent_spawn: {spec.id!r} runs on another orchestrator server: "
                "attachments do not go to it (an A2A agent takes them as FileParts)"
            )
        if spec.remote is not None:
            remote = (
                {"a2a": spec.remote.a2a}
                if spec.remote.a2a
                else {"url": str(spec.remote.url), "agent": str(spec.remote.agent)}
            )
            bus.emit_nowait(
                EventType.AGENT_STARTED, {"agentId": spec.id, "task": new.task, "remote": remote}
            )
            work = functools.partial(
                self._remote, spec, new.task, bus, ctx, timeout, given=new.attachments
            )
            if task_id is None:
                return work()
            ctx.start_background(f"{task_id} {spec.id} {key}", work)
        else:
            child = _Child(self._run, spec, bus, ctx, timeout)
            started: AgentStartedData = {"agentId": spec.id, "task": new.task}
            if new.attachments:
                started["attachments"] = infos(new.attachments)
            if new.continues is not None:
                started["continues"] = {
                    "runId": new.continues.run_id,
                    "agentKey": new.continues.agent_key,
                }
                child.runner.messages = list(new.history)
            run = functools.partial(child.runner.run, new.task, new.attachments)
            if task_id is None:
                return child.drive(run, started, tool_error=True)
            ctx.start_background(
                f"{task_id} {spec.id} {key}", functools.partial(child.drive, run, started)
            )
        return _value(msgspec.json.encode({"taskId": task_id, "agentKey": key}).decode())

    # -- a child the journal shows ------------------------------------------------------

    async def _again(self, start: Again, ctx: ToolContext) -> str:
        """The result of a child the journal shows started by this call (`start` says
        how it goes on). A background one has no deadline, and its failure is reported
        to its parent as such, not as this call's error result."""
        run = self._run
        plan = start.plan
        assert plan.key is not None and plan.source is not None
        if isinstance(start, Continue):  # (until it is made, a control for it waits in `plan`)
            spec = run.catalog.spec(plan.agent_id)
            try:
                await run.catalog.prepare(spec)
            except McpError as exc:
                run.live.continued.add(plan.key)
                raise ToolError(f"subagent {spec.id!r} cannot go on: {exc}") from None
        run.live.continued.add(plan.key)
        if plan.ended and not isinstance(start, Answered):  # a person's cancel ended it meanwhile
            start = Answered(plan, start.background)
        match start:
            case Answered():
                if start.result is not None:
                    return start.result
                if start.background:
                    raise AgentFailed(start.error, error_type=start.error_type)
                if start.error_type == "cancelled":  # (as a cancel of a running child says)
                    raise ToolError(start.error)
                raise ToolError(f"subagent {plan.agent_id!r} failed: {start.error}")
            case Lost():
                parent_bus = current_bus.get() or _NO_BUS
                for source in start.ends:
                    parent_bus.at(source).emit_nowait(
                        EventType.AGENT_ERROR,
                        agent_error(
                            "worker_lost", "the remote run is not followed again after a restart"
                        ),
                        last=True,
                    )
                raise ToolError(_lost_text(run.catalog.spec(plan.agent_id), start))
            case Follow():
                spec = run.catalog.spec(plan.agent_id)
                bus = (current_bus.get() or _NO_BUS).at(plan.source)
                again = Resumed(cursor=start.cursor, below=start.below)
                return await self._remote(spec, "", bus, ctx, spec.timeout_seconds, again)
            case Continue():
                return await self._continue(start, ctx)

    async def _continue(self, start: Continue, ctx: ToolContext) -> str:
        """A local child rebuilt (same agentKey, same Source, its conversation, its own
        background children) goes on from where it was."""
        run, plan = self._run, start.plan
        spec = run.catalog.spec(plan.agent_id)
        bus = (current_bus.get() or _NO_BUS).at(plan.source)
        timeout = 0 if start.background else spec.timeout_seconds
        child = _Child(run, spec, bus, ctx, timeout)
        child.runner.messages = list(plan.messages)
        work = functools.partial(
            child.runner.continue_run,
            tuple(plan.pending),
            tuple(plan.done),
            plan.approvals,
            self.again(plan),
            plan.inbox,
        )
        return await child.drive(work, tool_error=not start.background)

    # -- a remote child ------------------------------------------------------------------

    async def _remote(
        self,
        spec: AgentSpec,
        task: str,
        bus: AnyBus,
        ctx: ToolContext,
        seconds: float | None,
        again: Resumed | None = None,
        given: tuple[Attachment, ...] = (),
    ) -> str:
        """A remote child, from its start (or `again`, followed again) to its end; an
        A2A agent gets `given` as FileParts (another orchestrator server takes none)."""
        key, run = bus.agent_key, self._run
        assert key is not None and spec.remote is not None
        a2a = spec.remote.a2a is not None
        desk = run.catalog.desk if bus.streaming else None
        link = RemoteLink(key, seconds, run.live.remotes, desk, a2a=a2a)
        try:
            with link.scope:
                if a2a:
                    from orchestrator.runtime.a2a_child import run_a2a  # (the `a2a` extra)

                    wait = spec.approval_timeout_seconds or run.catalog.approval_timeout
                    return await run_a2a(
                        spec, task, bus, link, input_timeout=wait, attachments=given
                    )
                return await run_remote(spec, task, bus, UsageNode(ctx.usage), link, again)
        finally:
            link.close()
        if link.cancellation is not None:
            raise ToolError(f"subagent {spec.id!r} was {link.cancellation.describe()}")
        raise ToolError(f"subagent {spec.id!r} timed out after {seconds:g} s")


class _Child:
    """One child instance being run by a spawn call: its bus, deadline and runner.

    Made the same way for a new child and for one continued from the journal; made
    at once (so the run knows it for `agent_send`), driven by `drive`.
    """

    __slots__ = ("bus", "ctx", "key", "runner", "scope", "spec", "timeout")

    def __init__(
        self,
        run: RunContext,
        spec: AgentSpec,
        bus: AnyBus,
        ctx: ToolContext,
        timeout: float | None,
    ) -> None:
        key = bus.agent_key
        assert key is not None  # a child always has a Source
        self.key = key
        self.spec = spec
        self.bus = bus
        self.ctx = ctx
        self.timeout = timeout
        self.scope = trio.CancelScope()
        if timeout:
            self.scope.relative_deadline = timeout
        self.runner = run.catalog.runner(
            spec,
            bus,
            run,
            depth=bus.depth,
            timeout_scope=self.scope,
            usage=UsageNode(ctx.usage, budget=spec.budget_tokens),
        )
        run.live.add(key, self.runner, bus, ctx.agent_key)
        ctx.instance.running_children += 1

    async def drive(
        self,
        work: Callable[[], Coroutine[Any, Any, AgentOutcome]],
        started: AgentStartedData | None = None,
        *,
        tool_error: bool = False,
    ) -> str:
        """Run the child's `work` on its bus, inside its deadline; its final text.

        `started`: the AGENT_STARTED data of a new child (a continued one had it).

        Raises:
            AgentFailed: the child failed (after its AGENT_ERROR), or timed out;
                with `tool_error`, as the `ToolError` its parent's model sees instead.
        """
        failed: AgentFailed | None = None
        token = current_bus.set(self.bus)
        try:
            if started is not None:
                self.bus.emit_nowait(EventType.AGENT_STARTED, started)
            with self.scope:
                outcome = await work()
        except AgentFailed as exc:
            failed = exc
        finally:
            self.ctx.instance.running_children -= 1
            current_bus.reset(token)
        if failed is None and self.scope.cancelled_caught:
            failed = AgentFailed(
                f"subagent {self.spec.id!r} timed out after {self.timeout:g} s",
                error_type="timeout",
            )
        if failed is None:
            return outcome.text
        if tool_error:
            raise ToolError(failure_text(self.spec.id, failed)) from None
        raise failed


async def _value(text: str) -> str:
    """A tool result known at once, as the coroutine `Tool.run` returns."""
    return text


def failure_text(agent_id: str, exc: AgentFailed) -> str:
    """The error tool result for a child that failed (a cancel: `cancelled by the user: …`)."""
    if exc.error_type in ("timeout", "cancelled"):
        return str(exc)
    return f"subagent {agent_id!r} failed ({exc.error_type}): {exc}"


def _lost_text(spec: AgentSpec, lost: Lost) -> str:
    where = spec.remote.where if spec.remote is not None else "?"
    if lost.kind == "a2a":
        return (
            f"remote subagent {spec.id!r} ({where}): an A2A task is not followed again "
            "after a restart or takeover (docs/remote.md)"
        )
    return (
        f"remote subagent {spec.id!r}: the run stopped before its run ({where}) was known "
        "here; it is not followed again (docs/remote.md)"
    )
