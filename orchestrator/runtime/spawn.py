"""`agent_spawn`: the tool through which a parent agent runs a child agent.

The tool finds the caller's bus in `current_bus` (the contract's one context
variable). In a streaming run the child gets a child bus that stamps its Source
on every event and publishes straight into the run's sink, so its events reach
the consumer live, at any depth. In a `call()` the bus is a `NullBus`: the child
runs blocking and emits nothing. Either way a child that fails, times out or is
refused becomes an error tool result (a `ToolError`), and the parent goes on.

The tool parses its arguments, asks the run's `Continuation` how its call's child
starts (a run that goes on from its journal may have started it already), admits
a new one against the run's limits, and hands the start to `Children.start`
(`runtime/children.py`). The runtime's tools are bound to their run: each holds
the run's `RunContext` (the catalog, the limits, the live agents), made with it.
"""

from __future__ import annotations

from collections.abc import Coroutine
from typing import Any, cast

import msgspec
import trio

from agents.core.attachments import Attachment, AttachmentError, AttachmentIn
from agents.errors import AgentFailed, ToolError
from agents.runner import AgentRunner
from agents.spec import AgentSpec
from agents.tools.base import ToolContext
from orchestrator.core.bus import AnyBus, current_bus
from orchestrator.core.continuation import EarlierAgent, Fresh
from orchestrator.runtime.children import Children, New, failure_text
from orchestrator.runtime.context import RunContext, RuntimeTools

__all__ = ["AgentSendTool", "AgentSpawnTool", "run_tools", "send_to"]


def run_tools(run: RunContext) -> RuntimeTools:
    """The runtime's own tools bound to `run` (`RunContext(runtime=run_tools)`)."""
    children = Children(run)
    spawn = AgentSpawnTool(run, children)
    return RuntimeTools((spawn, AgentSendTool(run)), spawn.summarize, children.again)


_ATTACHMENTS: dict[str, Any] = {
    "type": "array",
    "description": (
        "Images and files for the subagent: the id (att-…) of an attachment you were "
        "given, or a new one by https URL (or base64 data)."
    ),
    "items": {
        "anyOf": [
            {"type": "string", "pattern": "^att-[0-9a-f]{32}$"},
            {
                "type": "object",
                "properties": {
                    "name": {"type": "string"},
                    "mediaType": {"type": "string"},
                    "url": {"type": "string"},
                    "data": {"type": "string"},
                },
                "required": ["name", "mediaType"],
                "additionalProperties": False,
            },
        ]
    },
}


class SpawnArgs(msgspec.Struct, forbid_unknown_fields=True):
    """The arguments of an `agent_spawn` call."""

    agent_id: str
    task: str
    timeout_seconds: float | None = None
    agent_key: str | None = None
    """Continue this agent of an earlier run of the thread (docs/threads.md)."""
    attachments: list[str | AttachmentIn] | None = None
    """Images and files for the child: ids of the run's attachments, or new ones."""


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

    def __init__(self, run: RunContext, children: Children) -> None:
        self._run = run
        self._children = children

    def description_for(self, agent_id: str) -> str:
        """Lists the subagents the calling agent may spawn, with their descriptions."""
        lines = [
            "Run a subagent on a task and get its final answer back. Several calls in "
            "one turn run in parallel. Available subagents:"
        ]
        for spec in self._run.catalog.specs.values():
            lines.append(f"- {spec.id}: {spec.description.strip()}")
        earlier = self._earlier()
        if earlier:
            lines.append(
                "Agents of earlier runs of this conversation that you can ask again (give "
                "agent_key and their agent_id; they answer with their whole conversation):"
            )
            lines += [f"- {a.agent_key} ({a.agent_id}), asked: {a.task}" for a in earlier]
        return "\n".join(lines)

    def _earlier(self) -> list[EarlierAgent]:
        """The earlier agents of the thread a call may continue (local subagents only:
        a remote one's conversation is on its server)."""
        thread = self._run.continuation.thread
        if thread is None or thread.transcripts is None:
            return []
        specs = self._run.catalog.specs
        return [
            a for a in thread.earlier if (spec := specs.get(a.agent_id)) and spec.remote is None
        ]

    def parameters(self) -> dict[str, Any]:
        """JSON schema of `{agent_id, task, timeout_seconds?}` (and `agent_key?` in a
        thread whose earlier runs have agents to continue)."""
        schema = self._schema()
        earlier = self._earlier()
        if earlier:
            schema["properties"]["agent_key"] = {
                "type": "string",
                "enum": [a.agent_key for a in earlier],
                "description": (
                    "Continue this agent of an earlier run (same agent_id) instead of "
                    "starting a new one: it answers the task with its conversation so far."
                ),
            }
        return schema

    def _schema(self) -> dict[str, Any]:
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
                "attachments": _ATTACHMENTS,
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
        start = self._run.continuation.start(ctx.agent_key, ctx.call_id)
        if not isinstance(start, Fresh):
            return self._children.start(start, ctx)
        continues = self._continues(spawn)
        spec = self._admit(spawn, ctx)
        new = New(spec, spawn.task, spawn.timeout_seconds)
        if spawn.attachments:
            return self._with_attachments(new, spawn.attachments, continues, ctx)
        if continues is not None:
            return self._continued(new, continues, ctx)
        return self._children.start(new, ctx)

    async def _with_attachments(
        self,
        new: New,
        items: list[str | AttachmentIn],
        continues: EarlierAgent | None,
        ctx: ToolContext,
    ) -> str:
        """A child given attachments: the run's own by id; new ones checked, fetched
        and kept for the run (within `limits.attachments`)."""
        run, catalog = self._run, self._run.catalog
        given = [AttachmentIn(id=item) if isinstance(item, str) else item for item in items]
        try:
            found = await catalog.receive(given, run.attachments)
        except AttachmentError as exc:
            raise ToolError(f"agent_spawn: {exc}") from None
        fresh = tuple(a for a in found if a.id not in run.attachments)
        bus = current_bus.get()
        run_id = bus.run_id if bus is not None and bus.streaming else None
        _, notes = await catalog.keep(run, run_id, fresh)
        if notes:
            raise ToolError("agent_spawn: " + "; ".join(notes))
        new = New(new.spec, new.task, new.timeout_seconds, attachments=tuple(found))
        if continues is not None:
            return await self._continued(new, continues, ctx)
        return await self._children.start(new, ctx)

    def _continues(self, spawn: SpawnArgs) -> EarlierAgent | None:
        """The earlier agent the call continues (None: it starts a new one).

        Raises:
            ToolError: `agent_key` is not an earlier agent of the thread, or not of
                `agent_id`.
        """
        if spawn.agent_key is None:
            return None
        earlier = next((a for a in self._earlier() if a.agent_key == spawn.agent_key), None)
        if earlier is None:
            known = ", ".join(a.agent_key for a in self._earlier()) or "none"
            raise ToolError(
                f"agent_spawn: agent_key {spawn.agent_key!r} is not an agent of an earlier "
                f"run of this thread that can be continued (those: {known})"
            )
        if earlier.agent_id != spawn.agent_id:
            raise ToolError(
                f"agent_spawn: agent_key {spawn.agent_key!r} is a {earlier.agent_id!r}, "
                f"not a {spawn.agent_id!r}"
            )
        return earlier

    async def _continued(self, new: New, earlier: EarlierAgent, ctx: ToolContext) -> str:
        """A new child of `earlier`'s agentId that starts from its conversation."""
        thread = self._run.continuation.thread
        assert thread is not None and thread.transcripts is not None
        try:
            history = await thread.transcripts.conversation(earlier.run_id, earlier.agent_key)
        except LookupError as exc:
            raise ToolError(
                f"agent_spawn: {earlier.agent_key!r} cannot be continued: {exc}"
            ) from None
        again = New(
            new.spec,
            new.task,
            new.timeout_seconds,
            continues=earlier,
            history=history,
            attachments=new.attachments,
        )
        return await self._children.start(again, ctx)

    def summarize(self, agent_id: str, task: str, ctx: ToolContext) -> Coroutine[Any, Any, str]:
        """Run the summarizer subagent `agent_id` on `task` as a child of the compacting
        agent (`ctx`: a call of its own), within the run's limits; its answer.

        Raises:
            ToolError: the child cannot start, or failed.
        """
        spec = self._admit(SpawnArgs(agent_id=agent_id, task=task), ctx)
        return self._children.start(New(spec, task), ctx)

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
        if len(run.live.agents) + 1 >= limits.max_agents:
            raise ToolError(
                f"agent_spawn: max_agents reached: this run already created "
                f"{len(run.live.agents) + 1} agents (limits.max_agents is {limits.max_agents})"
            )
        if ctx.instance.running_children >= limits.max_children:
            raise ToolError(
                f"agent_spawn: max_children reached: {ctx.agent_id!r} already has "
                f"{ctx.instance.running_children} children running (limit {limits.max_children})"
            )
        return spec


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
        runner = self._run.live.agents.get(send.agent_key)
        if runner is None:
            raise ToolError(f"agent_send: no agent {send.agent_key!r} in this run")
        sender = ctx.agent_key or "root"
        return await send_to(runner, send.message, sender, seconds=send.timeout_seconds)


async def send_to(
    runner: AgentRunner,
    message: str,
    sender: str,
    *,
    seconds: float | None = None,
    control: str | None = None,
    attachments: tuple[Attachment, ...] = (),
) -> str:
    """Queue `message` (with its `attachments`) for a running agent, or run an idle one
    again and return its reply.

    Raises:
        ToolError: the idle agent failed or timed out on the message.
    """
    key = runner.agent_key or runner.spec.id
    if runner.cancelled is not None:
        raise ToolError(f"agent {key!r} was {runner.cancelled.describe()}: it takes no messages")
    if runner.deliver(message, sender, control, attachments):
        return f"message queued for {key}: it reads it before its next model turn"
    await runner.wait_idle()  # it was just finishing: run it again once it is idle
    if runner.deliver(message, sender, control, attachments):  # pragma: no cover - (raced)
        return "message queued"
    scope = trio.CancelScope()
    if seconds:
        scope.relative_deadline = seconds
    token = current_bus.set(cast(AnyBus, runner.bus))  # (every runner of a run has one)
    try:
        with scope:
            outcome = await runner.resume(
                message, sender, timeout_scope=scope, control=control, attachments=attachments
            )
    except AgentFailed as exc:
        raise ToolError(failure_text(runner.spec.id, exc)) from None
    finally:
        current_bus.reset(token)
    if scope.cancelled_caught:
        raise ToolError(f"agent {runner.spec.id!r} timed out after {seconds:g} s")
    return outcome.text
