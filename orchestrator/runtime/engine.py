"""The in-process entry point: load agents, then `stream()` or `call()` runs.

async with Orchestrator.open(config) as orch:
    async with orch.stream("planner", "compare trio and asyncio") as run:
        async for event in run:
            ...
    result = await orch.call("planner", "…")   # blocking: final text only
"""

from __future__ import annotations

import difflib
import time
from collections.abc import AsyncIterator, Iterable, Sequence
from contextlib import (
    AbstractAsyncContextManager,
    AsyncExitStack,
    asynccontextmanager,
    nullcontext,
)
from typing import Any, Literal, cast

import httpx
import msgspec
import trio

from agents.core.attachments import Attachment, MemoryBlobs, infos
from agents.core.payloads import RunStartedData
from agents.core.structured import check_schema
from agents.errors import SpecError
from agents.providers.factory import ProviderFactory
from agents.providers.tls import tls_context
from agents.providers.transport import StreamTransport
from agents.runner import TurnLimits
from agents.spec import AgentSpec, load_specs
from agents.tools.base import Tool
from agents.tools.builtin import BUILTIN_TOOLS, builtin_tools
from orchestrator.config import ServerConfig
from orchestrator.core.approvals import AgentKey, Answer
from orchestrator.core.bus import RunSink, new_run_id, new_session_id
from orchestrator.core.events import Event
from orchestrator.core.fork import fork_run
from orchestrator.mcp.hub import McpHub
from orchestrator.runtime.approvals import ApprovalDesk, PendingApproval
from orchestrator.runtime.context import AgentCatalog, RunLimits, UnknownAgent
from orchestrator.runtime.conversations import Conversations
from orchestrator.runtime.queue import EventQueue
from orchestrator.runtime.run import Run, RunResult
from orchestrator.runtime.spawn import AgentSendTool, AgentSpawnTool

__all__ = ["Orchestrator", "RunStream", "UnknownAgent", "builtin_tool_names"]


def builtin_tool_names() -> list[str]:
    """The tools a subagent YAML may list (from the tool registries, not a copy)."""
    return [AgentSpawnTool.name, AgentSendTool.name, *(tool.name for tool in BUILTIN_TOOLS)]


@asynccontextmanager
async def _mcp_hub(config: ServerConfig) -> AsyncIterator[McpHub | None]:
    """The MCP hub when `mcp_servers` names any (its sessions end with the block)."""
    if not config.mcp_servers:
        yield None
        return
    async with McpHub.open(dict(config.mcp_servers), config.base_dir) as hub:
        yield hub


class RunStream:
    """The live events of one run, in seq order; iterate it or take `batches()`."""

    def __init__(self, run: Run, queue: EventQueue) -> None:
        self._run = run
        self._queue = queue
        self._batch: list[Event] = []
        self._pos = 0

    @property
    def run_id(self) -> str:
        """The run's id."""
        return self._run.run_id

    @property
    def result(self) -> RunResult | None:
        """How the run ended, once RUN_FINISHED was emitted."""
        return self._run.result

    @property
    def thread_id(self) -> str | None:
        """The thread the run goes on in (None: a run outside threads)."""
        thread = self._run.context.continuation.thread
        return thread.thread_id if thread is not None else None

    def cancel(self, agent_key: str | None = None, *, reason: str | None = None) -> None:
        """Cancel the run, or with `agent_key` one agent instance and its subtree (the
        run goes on); the remaining events (AGENT_ERROR…, RUN_FINISHED) still arrive.

        Raises:
            AgentGone: (with `agent_key`) no such running or idle instance.
        """
        if agent_key is None:
            self._run.cancel(reason=reason)
        else:
            self._run.cancel_agent(agent_key, reason=reason)

    @property
    def pending_approvals(self) -> list[PendingApproval]:
        """The run's tool calls that wait for a decision now."""
        return self._run.pending_approvals

    def approve(
        self,
        tool_call_id: str,
        decision: Literal["approve", "deny"] = "approve",
        *,
        agent_key: AgentKey = msgspec.UNSET,
        reason: str | None = None,
        args: dict[str, Any] | None = None,
    ) -> PendingApproval:
        """Answer a waiting tool call (`Run.approve`); its APPROVAL_RESOLVED follows.
        `agent_key`: the calling agent's (None: the root), needed only when calls of
        several agents of the run have that id.

        Raises:
            ApprovalError: no such waiting call, already answered, or bad `args`.
        """
        return self._run.approve(
            Answer(
                tool_call_id=tool_call_id,
                decision=decision,
                agent_key=agent_key,
                reason=reason,
                args=args,
            )
        )

    async def next_batch(self) -> list[Event]:
        """The events not yet read, at least one; waits for them.

        Raises:
            StopAsyncIteration: the run finished and every event was read.
        """
        if self._pos < len(self._batch):
            rest = self._batch[self._pos :]
            self._batch, self._pos = [], 0
            return rest
        try:
            return await self._queue.get_batch()
        except trio.EndOfChannel:
            raise StopAsyncIteration from None

    def batches(self) -> _Batches:
        """Iterate batches: everything available at each wake-up (the cheapest way)."""
        return _Batches(self)

    def __aiter__(self) -> RunStream:
        return self

    async def __anext__(self) -> Event:
        if self._pos >= len(self._batch):
            self._batch = await self.next_batch()
            self._pos = 0
        event = self._batch[self._pos]
        self._pos += 1
        return event


class _Batches:
    """Async iterator over a RunStream's batches (a class, not a generator, so
    leaving a loop early needs no cleanup)."""

    def __init__(self, stream: RunStream) -> None:
        self._stream = stream

    def __aiter__(self) -> _Batches:
        return self

    async def __anext__(self) -> list[Event]:
        return await self._stream.next_batch()


def config_problems(config: ServerConfig, specs: dict[str, AgentSpec]) -> list[str]:
    """What in the server config does not fit its subagents, each naming its key (with
    the closest known name): an approval of an unknown tool, a subagent's model that
    is not configured, a trigger of an unknown agent. Empty: none."""
    problems = []
    known = builtin_tool_names()
    for i, name in enumerate(config.approval):
        if name != "*" and name not in known:
            problems.append(
                f"approval[{i}]: unknown tool {name!r}{_closest(name, known)} "
                f"(known: {', '.join(sorted(known))})"
            )
    for spec in specs.values():
        if spec.model not in config.models:
            problems.append(
                f"subagent {spec.id!r}: model {spec.model!r} is not configured"
                f"{_closest(spec.model, config.models)}"
            )
    for name, trigger in config.triggers.items():
        if trigger.agent not in specs:
            problems.append(
                f"triggers.{name}.agent: unknown agent {trigger.agent!r}"
                f"{_closest(trigger.agent, specs)} (known: {', '.join(sorted(specs))})"
            )
    return problems


def _closest(name: str, known: Iterable[str]) -> str:
    close = difflib.get_close_matches(name, list(known), n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


class Orchestrator:
    """Subagents, providers and tools, ready to run trees of agents."""

    def __init__(
        self,
        config: ServerConfig,
        specs: dict[str, AgentSpec],
        providers: ProviderFactory,
        client: httpx.AsyncClient,
        mcp: McpHub | None = None,
    ) -> None:
        self.config = config
        self.specs = specs
        self.providers = providers
        self.tools: dict[str, Tool] = {
            **builtin_tools(
                config.tools_root,
                client,
                http_timeout=config.tools.http_timeout,
                http_allow_private=config.tools.http_allow_private,
                http_allowed_hosts=config.tools.http_allowed_hosts,
            ),
        }
        self.catalog = AgentCatalog(
            specs,
            providers,
            self.tools,
            approval=config.approval,
            approval_timeout=config.limits.approval_timeout_seconds,
            desk=ApprovalDesk(config.limits.max_pending_approvals),
            mcp=mcp,
            compaction=config.compaction,
        )
        self.catalog.attachment_limits = config.limits.attachments.limits()
        self.mcp = mcp
        """The MCP servers' sessions (None: none configured); they end with `open`."""
        self.conversations = Conversations()
        """The threads of `stream` and `call` with `thread=`, in memory."""
        """The built-in tools above are shared; each run adds `agent_spawn` and
        `agent_send`, bound to it (`spawn.run_tools`)."""

    @classmethod
    @asynccontextmanager
    async def open(
        cls,
        config: ServerConfig,
        specs: dict[str, AgentSpec] | None = None,
        *,
        http_client: httpx.AsyncClient | None = None,
    ) -> AsyncIterator[Orchestrator]:
        """Load the subagents (unless given) and open the shared HTTP client.

        Args:
            config: the server config.
            specs: the subagents (default: loaded from `config.subagents_dir`).
            http_client: the client providers and `http_get` use (default: a new
                `httpx.AsyncClient`, closed on exit). Pass one with an
                `httpx.MockTransport` to test without sockets; the caller closes it.

        Raises:
            SpecError: a subagent file is invalid.
        """
        if specs is None:
            specs = load_specs(
                config.subagents_path,
                models=config.models,
                tools=builtin_tool_names(),
                mcp_servers=config.mcp_servers,
            )
        problems = config_problems(config, specs)
        if problems:
            raise SpecError(config.described(problems))
        # The caller's client stays open; ours is closed on exit.
        connections = config.limits.max_http_connections
        owned: AbstractAsyncContextManager[httpx.AsyncClient] = (
            nullcontext(http_client)
            if http_client is not None
            else httpx.AsyncClient(transport=StreamTransport(max_connections=connections))
        )
        async with owned as client, _mcp_hub(config) as mcp, AsyncExitStack() as stack:
            clients = {  # a model with TLS settings has its pool (of the same size) of its own
                name: await stack.enter_async_context(
                    httpx.AsyncClient(
                        transport=StreamTransport(
                            ssl_context=tls_context(name, model.tls, config.base_dir),
                            max_connections=connections,
                        )
                    )
                )
                for name, model in config.models.items()
                if model.tls is not None
            }
            factory = ProviderFactory(dict(config.models), client, clients)
            yield cls(config, specs, factory, client, mcp)

    def default_limits(self, max_depth: int | None = None) -> RunLimits:
        """The configured limits, with an optional max_depth override."""
        limits = self.config.limits
        return RunLimits(
            max_depth=limits.max_depth if max_depth is None else max_depth,
            max_children=limits.max_children,
            max_agents=limits.max_agents,
            turn=TurnLimits(
                max_parts=limits.max_turn_events,
                max_bytes=limits.max_turn_bytes,
                timeout=limits.turn_timeout_seconds,
            ),
            run_timeout=limits.run_timeout_seconds,
            max_tokens=limits.max_tokens,
        )

    def _check_agent(self, agent_id: str) -> None:
        self.catalog.spec(agent_id)

    @asynccontextmanager
    async def stream(
        self,
        agent_id: str,
        input: str,
        *,
        max_depth: int | None = None,
        capacity: int = 4096,
        thread: str | None = None,
        output_schema: dict[str, Any] | None = None,
        attachments: Sequence[Attachment] = (),
    ) -> AsyncIterator[RunStream]:
        """Start a streaming run; the events of the whole tree arrive live.

        Leaving the block early cancels the run. A consumer that stops reading
        slows the run down once `capacity` events wait (memory stays bounded).
        `thread`: go on in that thread (its conversation so far, in this process:
        `runtime/conversations.py`; a new id starts one). `output_schema`: the JSON
        Schema the root's answer must match; `attachments`: images and files for the
        root (`Attachment.of(name, media_type, data)`; docs/structured.md).

        Raises:
            UnknownAgent: no subagent called `agent_id`.
            ThreadBusy: a run of that thread runs now.
            SchemaError: `output_schema` is not a usable schema.
        """
        self._check_agent(agent_id)
        schema = _usable(output_schema)
        queue = EventQueue(capacity)
        sink = RunSink(new_run_id(), new_session_id(root=True), queue)
        if attachments:  # (this process's memory keeps them for the run)
            await self.catalog.blobs.put_blobs(sink.run_id, {a.id: a.data for a in attachments})
        start = self.conversations.start(thread) if thread is not None else None
        limits = self.default_limits(max_depth)
        run = Run(
            self.catalog,
            agent_id,
            input,
            limits=limits,
            sink=sink,
            thread=start,
            output_schema=schema,
            attachments=infos(attachments),
        )
        try:
            async with _streamed(run, queue) as stream:
                yield stream
        finally:
            if start is not None:
                self.conversations.ended(start, run)
            if isinstance(self.catalog.blobs, MemoryBlobs):
                self.catalog.blobs.forget([run.run_id])

    @asynccontextmanager
    async def fork(
        self,
        events: Sequence[Event],
        at_seq: int,
        *,
        agent_key: str | None = None,
        message: str | None = None,
        replay: bool = False,
        max_depth: int | None = None,
        capacity: int = 4096,
    ) -> AsyncIterator[RunStream]:
        """Start a new run from a run's `events` (all of them, from seq 1, as `stream`
        gave them or the journal keeps them) as it stood at `at_seq` (docs/fork.md).

        The stream begins with the original's events 1..`at_seq` under the fork's
        runId, then goes on live: agents that had ended stand, a cut-off turn is asked
        again, waiting calls wait again. `message` is delivered to `agent_key` (None:
        the root) as a `send` would; with `replay`, a turn asked the same as one of
        the original's is answered from it, with no provider call.

        Raises:
            ForkError: no such seq, or a message its agent cannot take there.
            UnknownAgent: the run's agent is no longer defined.
        """
        fork = fork_run(
            events,
            at_seq,
            new_run_id(),
            agent_key=agent_key,
            message=message,
            replay=replay,
            now=time.time(),
        )
        started = cast(RunStartedData, fork.events[0].data)
        agent_id = str(started.get("agentId", ""))
        self._check_agent(agent_id)
        root_session = next(
            (e.source.parent_session_id for e in fork.events if e.source and e.source.depth == 1),
            new_session_id(root=True),
        )
        queue = EventQueue(capacity)
        copied = fork.events[-1].seq
        sink = RunSink(fork.events[0].run_id, root_session, queue, after_seq=copied)
        run = Run(
            self.catalog,
            agent_id,
            str(started.get("input", "")),
            limits=self.default_limits(max_depth),
            sink=sink,
            plan=fork.plan,
            resumed={"attempt": 1, "afterSeq": copied, "reason": "fork"},
            recording=fork.recording,
            output_schema=started.get("outputSchema"),
        )
        async with _streamed(run, queue, fork.events) as stream:
            yield stream

    async def call(
        self,
        agent_id: str,
        input: str,
        *,
        max_depth: int | None = None,
        thread: str | None = None,
        output_schema: dict[str, Any] | None = None,
    ) -> RunResult:
        """Run blocking, with no bus: children run blocking, no events are produced.
        `thread`, `output_schema`: as `stream` takes them.

        Raises:
            UnknownAgent: no subagent called `agent_id`.
            ThreadBusy: a run of that thread runs now.
            SchemaError: `output_schema` is not a usable schema.
        """
        self._check_agent(agent_id)
        schema = _usable(output_schema)
        start = self.conversations.start(thread) if thread is not None else None
        limits = self.default_limits(max_depth)
        run = Run(self.catalog, agent_id, input, limits=limits, thread=start, output_schema=schema)
        try:
            return await run.execute()
        finally:
            if start is not None:
                self.conversations.ended(start, run)


@asynccontextmanager
async def _streamed(
    run: Run, queue: EventQueue, first: Sequence[Event] = ()
) -> AsyncIterator[RunStream]:
    """Execute `run` for the block, its events (after `first`) into `queue`; leaving
    the block early cancels it."""

    async def execute() -> None:
        try:
            for event in first:
                if queue.put_nowait(event):
                    await queue.wait_writable()
            await run.execute()
        finally:
            queue.close()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(execute)
        try:
            yield RunStream(run, queue)
        finally:
            if run.result is None:
                run.cancel()


def _usable(schema: dict[str, Any] | None) -> dict[str, Any] | None:
    """A run's output schema, checked (None: none). The in-process API is the
    operator's: its schema may use `pattern` (a server's clients may not)."""
    if schema is None:
        return None
    return check_schema(schema, where="output_schema")
