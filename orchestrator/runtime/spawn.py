"""`agent_spawn`: the tool through which a parent agent runs a child agent.

The tool finds the caller's bus in `current_bus` (the contract's one context
variable). In a streaming run the child gets a child bus that stamps its Source
on every event and publishes straight into the run's sink, so its events reach
the consumer live, at any depth. In a `call()` the bus is a `NullBus`: the child
runs blocking and emits nothing. Either way a child that fails, times out or is
refused becomes an error tool result (a `ToolError`), and the parent goes on.

The runtime's tools are bound to their run (`run_tools`): each instance holds the
run's `RunContext` (the catalog, the limits, the live agents), handed to it when
the run starts, so nothing reaches them through the tool call but the call itself.
"""

from __future__ import annotations

import functools
import math
import uuid
from collections.abc import Callable, Coroutine
from typing import Any

import msgspec
import trio

from agents.core.payloads import agent_error
from agents.core.usage import UsageNode
from agents.errors import AgentFailed, ToolError
from agents.runner import AgentOutcome, AgentRunner, BackgroundAgain
from agents.spec import AgentSpec
from agents.tools.base import Tool, ToolContext
from orchestrator.core.bus import AnyBus, Bus, NullBus, current_bus
from orchestrator.core.events import EventType
from orchestrator.core.rebuild import AgentPlan
from orchestrator.mcp.hub import McpError
from orchestrator.runtime.context import RunContext
from orchestrator.runtime.remote import RemoteLink, Resumed, run_remote

__all__ = ["AgentSendTool", "AgentSpawnTool", "failure_text", "run_tools", "send_to"]


def run_tools(run: RunContext) -> dict[str, Tool]:
    """The tools of a run's agents: the catalog's, and the runtime's own bound to `run`
    (which also runs the compactions' summarizer subagents: `run.summarizer`)."""
    spawn = AgentSpawnTool(run)
    run.summarizer = spawn.summarize
    run.background_again = spawn.background_again
    own: list[Tool] = [spawn, AgentSendTool(run)]
    return {**run.catalog.tools, **{tool.name: tool for tool in own}}


class SpawnArgs(msgspec.Struct, forbid_unknown_fields=True):
    """The arguments of an `agent_spawn` call."""

    agent_id: str
    task: str
    timeout_seconds: float | None = None


_decode_args = msgspec.convert


class AgentSpawnTool:
    """Runs a new child instance of a subagent and returns its final text."""

    name = "agent_spawn"
    concurrency_safe = True
    stream_paths = ("$.agent_id", "$.task")
    """Argument paths reported while they stream (TOOL_CALL_DELTA `fields`)."""
    idempotent = True
    """After a takeover, a call left without a result continues the child it had
    started (rebuilt from the journal) instead of spawning another."""

    def __init__(self, run: RunContext) -> None:
        self._run = run

    def description_for(self, agent_id: str) -> str:
        """Lists the subagents the calling agent may spawn, with their descriptions."""
        lines = [
            "Run a subagent on a task and get its final answer back. Several calls in "
            "one turn run in parallel. Available subagents:"
        ]
        for spec in self._run.catalog.specs.values():
            lines.append(f"- {spec.id}: {spec.description.strip()}")
        return "\n".join(lines)

    def parameters(self) -> dict[str, Any]:
        """JSON schema of `{agent_id, task, timeout_seconds?}`."""
        return {
            "type": "object",
            "properties": {
                "agent_id": {
                    "type": "string",
                    "enum": sorted(self._run.catalog.specs),
                    "description": "Which subagent to run.",
                },
                "task": {"type": "string", "description": "What the subagent should do."},
                "timeout_seconds": {
                    "type": "number",
                    "minimum": 0,
                    "description": (
                        "Bound on the subagent's whole run, in seconds. 0 runs it in the "
                        "background: you get {taskId, agentKey} at once and its result "
                        "later, as a message."
                    ),
                },
            },
            "required": ["agent_id", "task"],
            "additionalProperties": False,
        }

    def run(self, args: dict[str, Any], ctx: ToolContext) -> Coroutine[Any, Any, str]:
        """Spawn, run to completion, return the child's final text.

        Checks and spawns now, and returns the coroutine that drives the child (not
        awaited here: one coroutine level less under every delta of the child).

        Raises:
            ToolError: bad arguments, or the spawn is refused (as the awaited result
                would: the runner awaits the call inside the same `try`).
        """
        try:
            spawn = _decode_args(args, SpawnArgs)
        except msgspec.ValidationError as exc:
            raise ToolError(f"agent_spawn: invalid arguments: {exc}") from None
        run = self._run
        if run.resume is not None:
            parent = run.resume.agents.get(ctx.agent_key)
            rebuilt = run.resume.child_of(parent, ctx.call_id) if parent is not None else None
            if rebuilt is not None:
                return self._continue(rebuilt, ctx)
        spec = self._admit(spawn, ctx)
        if run.catalog.uses_mcp(spec):  # its MCP servers must be up first: await that
            return self._prepared(spec, spawn, ctx)
        return self._start(spec, spawn, ctx)

    def summarize(self, agent_id: str, task: str, ctx: ToolContext) -> Coroutine[Any, Any, str]:
        """Run the summarizer subagent `agent_id` on `task` as a child of the compacting
        agent (`ctx`: a call of its own), within the run's limits; its answer.

        Raises:
            ToolError: the child cannot start, or failed.
        """
        spawn = SpawnArgs(agent_id=agent_id, task=task)
        spec = self._admit(spawn, ctx)
        if self._run.catalog.uses_mcp(spec):
            return self._prepared(spec, spawn, ctx)
        return self._start(spec, spawn, ctx)

    async def _prepared(self, spec: AgentSpec, spawn: SpawnArgs, ctx: ToolContext) -> str:
        try:
            await self._run.catalog.prepare(spec)
        except McpError as exc:
            raise ToolError(f"agent_spawn: {spec.id!r} cannot start: {exc}") from None
        return await self._start(spec, spawn, ctx)

    def _start(
        self, spec: AgentSpec, spawn: SpawnArgs, ctx: ToolContext
    ) -> Coroutine[Any, Any, str]:
        """Start the admitted child; the coroutine that drives it (or returns its ids)."""
        timeout = (
            spawn.timeout_seconds if spawn.timeout_seconds is not None else spec.timeout_seconds
        )
        if timeout is not None and (timeout < 0 or not math.isfinite(timeout)):
            raise ToolError(
                "agent_spawn: timeout_seconds must be 0 (background) or a positive number of "
                f"seconds, got {timeout}"
            )
        background = timeout == 0 and spawn.timeout_seconds == 0
        task_id = f"task-{uuid.uuid4().hex[:16]}" if background else None
        parent_bus = current_bus.get() or NullBus("", "")
        if spec.remote is not None:
            return self._start_remote(spec, spawn, ctx, parent_bus, task_id, timeout)
        child = _Child(
            self._run,
            spec,
            parent_bus.child(
                agent_id=spec.id,
                agent_name=spec.display_name,
                task_id=task_id,
                parent_tool_call_id=ctx.call_id,
            ),
            ctx,
            timeout,
        )
        started = {"agentId": spec.id, "task": spawn.task}
        work = functools.partial(child.runner.run, spawn.task)
        if task_id is not None:
            ctx.start_background(
                f"{task_id} {spec.id} {child.key}", functools.partial(child.drive, work, started)
            )
            return _value(msgspec.json.encode({"taskId": task_id, "agentKey": child.key}).decode())
        return child.drive(work, started, tool_error=True)

    def _start_remote(
        self,
        spec: AgentSpec,
        spawn: SpawnArgs,
        ctx: ToolContext,
        parent_bus: AnyBus,
        task_id: str | None,
        timeout: float | None,
    ) -> Coroutine[Any, Any, str]:
        """A remote subagent: its run on the other server, streamed in as this child."""
        assert spec.remote is not None
        bus = parent_bus.child(
            agent_id=spec.id,
            agent_name=spec.display_name,
            task_id=task_id,
            parent_tool_call_id=ctx.call_id,
        )
        remote = (
            {"a2a": spec.remote.a2a}
            if spec.remote.a2a
            else {"url": spec.remote.url, "agent": spec.remote.agent}
        )
        bus.emit_nowait(
            EventType.AGENT_STARTED, {"agentId": spec.id, "task": spawn.task, "remote": remote}
        )

        work = functools.partial(self._drive_remote, spec, spawn.task, bus, ctx, timeout)
        if task_id is not None:
            ctx.start_background(f"{task_id} {spec.id} {bus.agent_key}", work)
            return _value(
                msgspec.json.encode({"taskId": task_id, "agentKey": bus.agent_key}).decode()
            )
        return work()

    async def _drive_remote(
        self,
        spec: AgentSpec,
        task: str,
        bus: AnyBus,
        ctx: ToolContext,
        seconds: float | None,
        again: Resumed | None = None,
    ) -> str:
        """A remote child, from its start (or `again`, after a resume) to its end."""
        key, run = bus.agent_key, self._run
        assert key is not None
        a2a = spec.remote is not None and spec.remote.a2a is not None
        link = RemoteLink(
            key, seconds, run.remotes, run.catalog.desk if isinstance(bus, Bus) else None, a2a=a2a
        )
        try:
            with link.scope:
                if a2a:
                    from orchestrator.runtime.a2a_child import run_a2a  # (the `a2a` extra)

                    return await run_a2a(spec, task, bus, link)
                return await run_remote(spec, task, bus, UsageNode(ctx.usage), link, again)
        finally:
            link.close()
        if link.cancellation is not None:
            raise ToolError(f"subagent {spec.id!r} was {link.cancellation.describe()}")
        raise ToolError(f"subagent {spec.id!r} timed out after {seconds:g} s")

    def _admit(self, spawn: SpawnArgs, ctx: ToolContext) -> AgentSpec:
        """The child's spec, if the run's limits let the caller spawn it.

        Raises:
            ToolError: unknown agent, or a limit (depth, agents, children) reached.
        """
        run = self._run
        spec = run.catalog.specs.get(spawn.agent_id)
        if spec is None:
            known = ", ".join(sorted(run.catalog.specs)) or "none"
            raise ToolError(f"agent_spawn: unknown agent {spawn.agent_id!r} (known: {known})")
        limits = run.limits
        depth = ctx.depth + 1
        if depth > limits.max_depth:
            raise ToolError(
                f"agent_spawn: depth limit reached: {spawn.agent_id!r} would run at depth "
                f"{depth}, max_depth is {limits.max_depth}"
            )
        if len(run.agents) + 1 >= limits.max_agents:
            raise ToolError(
                f"agent_spawn: max_agents reached: this run already created "
                f"{len(run.agents) + 1} agents (limits.max_agents is {limits.max_agents})"
            )
        if ctx.instance.running_children >= limits.max_children:
            raise ToolError(
                f"agent_spawn: max_children reached: {ctx.agent_id!r} already has "
                f"{ctx.instance.running_children} children running (limit {limits.max_children})"
            )
        return spec

    async def _continue(
        self, rebuilt: AgentPlan, ctx: ToolContext, *, background: bool = False
    ) -> str:
        """After a takeover: the result of a child the journal shows started by this call.

        A child that had ended gives its journaled result; one still running is rebuilt
        (same agentKey, same Source, its conversation, its own background children) and
        goes on from where it was. `background`: a background child (no deadline; its
        failure is reported to its parent as such, not as this call's error result).
        """
        run = self._run
        assert rebuilt.key is not None and rebuilt.source is not None
        run.continued.add(rebuilt.key)
        if rebuilt.ended:
            if rebuilt.result is not None:
                return rebuilt.result
            if background:
                raise AgentFailed(rebuilt.error or "failed", error_type=rebuilt.error_type or "")
            raise ToolError(f"subagent {rebuilt.agent_id!r} failed: {rebuilt.error}")
        spec = run.catalog.spec(rebuilt.agent_id)
        if spec.remote is not None:
            return await self._follow_again(spec, rebuilt, ctx)
        try:
            await run.catalog.prepare(spec)
        except McpError as exc:
            raise ToolError(f"subagent {spec.id!r} cannot go on: {exc}") from None
        parent_bus = current_bus.get()
        if not isinstance(parent_bus, Bus):  # takeovers only happen in journaled runs
            raise ToolError("agent_spawn: cannot continue a child without the run's bus")
        timeout = 0 if background else spec.timeout_seconds
        child = _Child(run, spec, Bus(parent_bus.sink, rebuilt.source), ctx, timeout)
        child.runner.messages = list(rebuilt.messages)
        work = functools.partial(
            child.runner.continue_run,
            tuple(rebuilt.pending),
            tuple(rebuilt.done),
            rebuilt.approvals,
            self.background_again(rebuilt),
            rebuilt.inbox,
        )
        return await child.drive(work, tool_error=not background)

    def background_again(self, parent: AgentPlan) -> list[BackgroundAgain]:
        """After a takeover: `parent`'s background children to pick up again beside it,
        under their taskIds (`ResumePlan.background_of`)."""
        plan = self._run.resume
        if plan is None:
            return []
        return [
            (
                f"{task_id} {child.agent_id} {child.key}",
                call_id,
                functools.partial(self._continue, child, background=True),
            )
            for child, task_id, call_id in plan.background_of(parent)
        ]

    async def _follow_again(self, spec: AgentSpec, rebuilt: AgentPlan, ctx: ToolContext) -> str:
        """A remote child that ran when the run stopped: its run there is followed
        again from the last of its events the journal kept (it went on there in the
        meantime); without one (it stopped before any came through), it is lost."""
        run, parent_bus = self._run, current_bus.get()
        assert rebuilt.key is not None and rebuilt.source is not None and run.resume is not None
        cursor = run.resume.remote_cursor(rebuilt.key)
        if cursor is None or not isinstance(parent_bus, Bus):  # (an A2A child: never one)
            self._lose_remote(rebuilt)
            where = spec.remote.where if spec.remote else "?"
            if spec.remote is not None and spec.remote.a2a:
                raise ToolError(
                    f"remote subagent {spec.id!r} ({where}): an A2A task is not followed "
                    "again after a restart or takeover (docs/remote.md)"
                )
            raise ToolError(
                f"remote subagent {spec.id!r}: the run stopped before its run ({where}) was "
                "known here; it is not followed again (docs/remote.md)"
            )
        top = rebuilt.source.path + "/"
        below = {
            plan.key: plan.source
            for plan in run.resume.agents.values()
            if plan.key is not None
            and plan.source is not None
            and not plan.ended
            and plan.source.path.startswith(top)
        }
        again = Resumed(cursor=cursor, below=below)
        bus = Bus(parent_bus.sink, rebuilt.source)
        return await self._drive_remote(spec, "", bus, ctx, spec.timeout_seconds, again)

    def _lose_remote(self, rebuilt: AgentPlan) -> None:
        """A remote child (and what of its remote subtree had not ended) ends here,
        `worker_lost`, deepest first: each agent of the tree still ends exactly once."""
        run, parent_bus = self._run, current_bus.get()
        assert rebuilt.source is not None and run.resume is not None
        if not isinstance(parent_bus, Bus):
            return
        top = rebuilt.source.path
        lost = [
            plan
            for plan in run.resume.agents.values()
            if plan.source is not None
            and not plan.ended
            and (plan.source.path == top or plan.source.path.startswith(top + "/"))
        ]
        for plan in sorted(lost, key=lambda p: -(p.source.depth if p.source else 0)):
            assert plan.source is not None
            Bus(parent_bus.sink, plan.source).emit_nowait(
                EventType.AGENT_ERROR,
                agent_error("worker_lost", "the remote run is not followed again after a restart"),
                last=True,
            )


class _Child:
    """One child instance being run by a spawn call: its bus, deadline and runner.

    Made the same way for a new child and for one continued after a takeover; made
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
        run.agents[key] = self.runner  # stays valid for agent_send until the run ends
        run.parents[key] = ctx.agent_key
        ctx.instance.running_children += 1

    async def drive(
        self,
        work: Callable[[], Coroutine[Any, Any, AgentOutcome]],
        started: dict[str, Any] | None = None,
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


class SendArgs(msgspec.Struct, forbid_unknown_fields=True):
    """The arguments of an `agent_send` call."""

    agent_key: str
    message: str
    timeout_seconds: float | None = None


class AgentSendTool:
    """Sends a message to a child instance of this run.

    To an idle child: runs it again on the message (it keeps its conversation)
    and returns its reply. To a running child: queues the message, which the
    child sees before its next model turn, and returns at once.
    """

    name = "agent_send"
    concurrency_safe = True
    stream_paths = ()
    idempotent = False

    def __init__(self, run: RunContext) -> None:
        self._run = run

    def description_for(self, agent_id: str) -> str:
        """How to use it."""
        return (
            "Send a message to an agent you spawned earlier in this run, by its agentKey "
            "(agent_spawn with timeout_seconds 0 returns it). If that agent is idle it answers "
            "and you get its reply; if it is still running, it reads the message before its "
            "next step and you get a confirmation."
        )

    def parameters(self) -> dict[str, Any]:
        """JSON schema of `{agent_key, message, timeout_seconds?}`."""
        return {
            "type": "object",
            "properties": {
                "agent_key": {"type": "string", "description": "agent:<agentId>:<uuid>"},
                "message": {"type": "string"},
                "timeout_seconds": {"type": "number", "exclusiveMinimum": 0},
            },
            "required": ["agent_key", "message"],
            "additionalProperties": False,
        }

    async def run(self, args: dict[str, Any], ctx: ToolContext) -> str:
        """Deliver, or run the idle agent again and return its reply."""
        try:
            send = _decode_args(args, SendArgs)
        except msgspec.ValidationError as exc:
            raise ToolError(f"agent_send: invalid arguments: {exc}") from None
        runner = self._run.agents.get(send.agent_key)
        if runner is None:
            raise ToolError(f"agent_send: no agent {send.agent_key!r} in this run")
        sender = ctx.agent_key or "root"
        return await send_to(runner, send.message, sender, seconds=send.timeout_seconds)


async def send_to(
    runner: AgentRunner, message: str, sender: str, *, seconds: float | None = None
) -> str:
    """Queue `message` for a running agent, or run an idle one again and return its reply.

    Raises:
        ToolError: the idle agent failed or timed out on the message.
    """
    key = runner.agent_key or runner.spec.id
    if runner.cancelled is not None:
        raise ToolError(f"agent {key!r} was {runner.cancelled.describe()}: it takes no messages")
    if runner.deliver(message, sender):
        return f"message queued for {key}: it reads it before its next model turn"
    await runner.wait_idle()  # it was just finishing: run it again once it is idle
    if runner.deliver(message, sender):  # pragma: no cover - it started again meanwhile
        return "message queued"
    scope = trio.CancelScope()
    if seconds:
        scope.relative_deadline = seconds
    bus = runner.bus
    token = current_bus.set(bus if isinstance(bus, (Bus, NullBus)) else None)
    try:
        with scope:
            outcome = await runner.resume(message, sender, timeout_scope=scope)
    except AgentFailed as exc:
        raise ToolError(failure_text(runner.spec.id, exc)) from None
    finally:
        current_bus.reset(token)
    if scope.cancelled_caught:
        raise ToolError(f"agent {runner.spec.id!r} timed out after {seconds:g} s")
    return outcome.text
