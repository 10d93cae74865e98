"""What runs are made of (`AgentCatalog`), their bounds, and one run as its tools see it.

`agent_spawn` and `agent_send` need the agent catalog, the run's limits, how the
run goes on from its journal and the run's live agent instances. They are bound
to their run's `RunContext`, which makes them with itself, not handed it through a
context variable: the only context variable is `current_bus`, which the contract
names.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple, cast, final

import msgspec
import trio

from agents.approval import ApprovalGate, ApprovalPolicy
from agents.core.attachments import (
    Attachment,
    AttachmentIn,
    AttachmentLimits,
    BlobStore,
    MemoryBlobs,
    note,
)
from agents.core.replay import Recording
from agents.core.usage import UsageNode
from agents.errors import OrchestratorError, SpecError
from agents.providers.factory import ProviderFactory
from agents.runner import AgentRunner, BackgroundAgain, Summarizer, TurnLimits
from agents.spec import AgentSpec, CompactionSpec
from agents.tools.base import Tool
from orchestrator.core.bus import AnyBus
from orchestrator.core.continuation import Continuation
from orchestrator.core.rebuild import AgentPlan
from orchestrator.mcp.hub import McpError, McpHub
from orchestrator.mcp.names import server_of, wildcard_match
from orchestrator.mcp.tool import McpTool
from orchestrator.runtime.approvals import NOBODY, ApprovalDesk
from orchestrator.runtime.attachments import Fetcher, received
from orchestrator.runtime.remote import RemoteLink

__all__ = [
    "AgentCatalog",
    "LiveAgents",
    "RunContext",
    "RunLimits",
    "RuntimeTools",
    "UnknownAgent",
]


class UnknownAgent(OrchestratorError, LookupError):
    """No subagent with that agentId."""

    code = "not_found"

    def __init__(self, agent_id: str, known: list[str]) -> None:
        super().__init__(f"unknown agent {agent_id!r} (known: {', '.join(known) or 'none'})")
        self.agent_id = agent_id


class RunLimits(msgspec.Struct, frozen=True, kw_only=True):
    """The bounds of one run (the config's `limits:`, or a per-run override)."""

    max_depth: int
    max_children: int
    max_agents: int = 256
    """Agent instances one run may create, the root included."""
    turn: TurnLimits = msgspec.field(default_factory=TurnLimits)
    run_timeout: float = 900.0
    """Seconds the whole run may take."""
    max_tokens: int | None = None
    """Tokens (input + output) the whole run may use."""


@final
class AgentCatalog:
    """What runs are made of: the subagents, their providers and the shared tools
    (the built-in ones; each run adds the runtime's own, bound to it), and where
    their tool calls wait for approval.

    Args:
        approval: the tools that wait for approval in a subagent with no `approval`
            key (the server config's `approval`).
        approval_timeout: seconds a call waits when its subagent does not say.
        desk: where calls wait (shared by every run of the catalog).
        mcp: the MCP servers' sessions (None: no `mcp_servers` configured).
        compaction: how a subagent with no `compaction` key compacts (the server's).
    """

    def __init__(
        self,
        specs: Mapping[str, AgentSpec],
        providers: ProviderFactory,
        tools: dict[str, Tool],
        *,
        approval: Sequence[str] = (),
        approval_timeout: float = 3600.0,
        desk: ApprovalDesk | None = None,
        mcp: McpHub | None = None,
        compaction: CompactionSpec | None = None,
    ) -> None:
        self.specs = specs
        self.compaction = compaction or CompactionSpec()
        summarizer = self.compaction.summarizer
        if summarizer is not None and summarizer not in specs:
            raise SpecError(
                f"compaction.summarizer: unknown agent {summarizer!r} "
                f"(known: {', '.join(sorted(specs)) or 'none'})"
            )
        self.providers = providers
        self.tools = tools
        self.approval = tuple(approval)
        self.approval_timeout = approval_timeout
        self.desk = desk or ApprovalDesk()
        self.mcp = mcp
        self.blobs: BlobStore = MemoryBlobs()
        """Where attachments' bytes are kept: the journal's store on a server (set by
        its `RunHost`), else this process's memory."""
        self.attachment_limits = AttachmentLimits()
        """`limits.attachments`: a tool result's attachments past them are noted only."""
        servers = set(mcp.configs) if mcp is not None else set()
        self._mcp_users = {
            spec.id for spec in specs.values() if any(server_of(t) in servers for t in spec.tools)
        }
        """Subagents that list MCP tools (only they pay for resolving them)."""
        self._resolved: dict[str, tuple[AgentSpec, dict[str, Tool]]] = {}
        """agentId → its spec with MCP patterns expanded, and those MCP tools."""

    def uses_mcp(self, spec: AgentSpec) -> bool:
        """The subagent lists tools of MCP servers (`prepare` it before running it)."""
        return spec.id in self._mcp_users

    async def prepare(self, spec: AgentSpec) -> None:
        """Start the MCP servers `spec` lists tools of (if not running) and expand its
        patterns (`fs__*`) against their tool lists; `runner` then uses the result.

        Raises:
            McpError: a server cannot be started, or an entry matches none of its tools.
        """
        if self.mcp is None or spec.id not in self._mcp_users:
            return
        names: list[str] = []
        tools: dict[str, Tool] = {}
        for i, entry in enumerate(spec.tools):
            server = server_of(entry)
            if server is None or server not in self.mcp.configs:
                names.append(entry)
                continue
            listed = await self.mcp.tools(server)
            matched = [name for name in listed if wildcard_match(entry, name)]
            if not matched:
                have = ", ".join(sorted(listed)) or "none"
                raise McpError(
                    f"{spec.id}.yaml: tools[{i}]: {entry!r} matches no tool of MCP server "
                    f"{server!r} (it has: {have})"
                )
            max_chars = self.mcp.configs[server].max_result_chars
            for name in matched:
                if name not in tools:
                    names.append(name)
                    tools[name] = McpTool(self.mcp, listed[name], max_chars)
        self._resolved[spec.id] = (spec.model_copy(update={"tools": names}), tools)

    def approval_policy(self, spec: AgentSpec) -> ApprovalPolicy | None:
        """Which calls of `spec`'s instances wait for approval (None: none)."""
        names = spec.approval if spec.approval is not None else self.approval
        if not names:
            return None
        return ApprovalPolicy(
            tools=frozenset(names),
            edit=spec.approval_edit,
            timeout=spec.approval_timeout_seconds or self.approval_timeout,
        )

    def spec(self, agent_id: str) -> AgentSpec:
        """The subagent `agent_id`.

        Raises:
            UnknownAgent: there is none.
        """
        spec = self.specs.get(agent_id)
        if spec is None:
            raise UnknownAgent(agent_id, sorted(self.specs))
        return spec

    def runner(
        self,
        spec: AgentSpec,
        bus: AnyBus,
        run: RunContext,
        *,
        depth: int,
        timeout_scope: trio.CancelScope,
        usage: UsageNode,
        output_schema: dict[str, Any] | None = None,
    ) -> AgentRunner:
        """An `AgentRunner` for one instance of `spec` in `run` (with the run's tools;
        MCP tools as the last `prepare` of `spec` resolved them). `output_schema`: the
        one its answer must match instead of the spec's (a run's root, asked for one)."""
        tools = run.tools
        if spec.id in self._mcp_users:
            resolved = self._resolved.get(spec.id)
            if resolved is not None:
                spec, mcp_tools = resolved
                tools = {**tools, **mcp_tools}
        if output_schema is not None:
            spec = spec.model_copy(update={"output_schema": output_schema})
        policy = self.approval_policy(spec)
        gate: ApprovalGate | None = None
        if policy is not None:
            if bus.streaming:
                key = bus.agent_key
                gate = self.desk.gate(bus.run_id, bus.source, lambda: run.live.deadlines(key))
            else:
                gate = NOBODY
        return AgentRunner(
            spec,
            self.providers.for_agent(spec),
            tools,
            bus,
            depth=depth,
            timeout_scope=timeout_scope,
            usage=usage,
            turn_limits=run.limits.turn,
            approval=policy,
            gate=gate,
            compaction=spec.compaction or self.compaction,
            summarize_with=run.summarizer,
            recording=run.recording,
            output_mode=self.providers.output_mode(spec),
            keep=functools.partial(self.keep, run, bus.run_id if bus.streaming else None),
        )

    async def receive(
        self, given: Sequence[AttachmentIn], known: Mapping[str, Attachment] | None = None
    ) -> list[Attachment]:
        """A request's attachments (a `run`'s, a `send`'s, an `agent_spawn`'s) checked
        against `limits.attachments`, decoded or fetched with `http_get`'s rules (`known`:
        the run's own, which may be named by id).

        Raises:
            AttachmentError: one cannot be taken; the message says which and why.
        """
        fetcher = cast(Fetcher | None, self.tools.get("http_get"))
        return await received(given, self.attachment_limits, fetcher, known)

    async def keep(
        self, run: RunContext, run_id: str | None, given: tuple[Attachment, ...]
    ) -> tuple[tuple[Attachment, ...], list[str]]:
        """Keep a tool result's attachments for the run (stored in the journal's blobs
        when it has one: `run_id`): those within `limits.attachments`; a note for each
        other."""
        limits = self.attachment_limits
        total = sum(a.size for a in run.attachments.values())
        kept: list[Attachment] = []
        notes: list[str] = []
        for a in given:
            if a.size > limits.max_bytes or total + a.size > limits.max_run_bytes:
                notes.append(note(a, "over the run's limits.attachments"))
                continue
            kept.append(a)
            total += a.size
        if kept and run_id is not None:
            await self.blobs.put_blobs(run_id, {a.id: a.data for a in kept})
        run.attachments.update((a.id, a) for a in kept)
        return tuple(kept), notes


@final
class LiveAgents:
    """A run's agent instances while it runs: the root, every child by agentKey and its
    parent, the remote links, and the rebuilt agents started again.

    The registry is what `agent_send`, `cancel` and the approval deadlines look agents
    up in; only `add` and `set_root` fill it.
    """

    __slots__ = ("agents", "buses", "continued", "parents", "remotes", "root")

    def __init__(self) -> None:
        self.root: AgentRunner | None = None
        """The root agent's runner (`set_root`, when the run makes it)."""
        self.agents: dict[str, AgentRunner] = {}
        """Every child instance of the run by agentKey (valid for `agent_send` until the
        run ends)."""
        self.buses: dict[str, AnyBus] = {}
        """agentKey → the child's bus (`send_to` runs an idle one on it again)."""
        self.parents: dict[str, str | None] = {}
        """agentKey → its parent's agentKey (None: the root spawned it)."""
        self.remotes: dict[str, RemoteLink] = {}
        """agentKey → the link of a remote child running now, under the child's key and
        each forwarded descendant's (`cancel`, `send` and answers go through it)."""
        self.continued: set[str] = set()
        """agentKeys of rebuilt children started again (continued, answered from the
        journal, followed again or lost: `Continuation.unresumed` skips them)."""

    def set_root(self, runner: AgentRunner) -> None:
        """The root agent's runner, once made."""
        self.root = runner

    def add(self, key: str, runner: AgentRunner, bus: AnyBus, parent: str | None) -> None:
        """A child instance `key` of `parent` (None: the root) starts."""
        self.agents[key] = runner
        self.buses[key] = bus
        self.parents[key] = parent

    def deadlines(self, agent_key: str | None) -> list[trio.CancelScope]:
        """The scopes that time out the instance `agent_key` (None: the root): its own
        spawn's, its ancestors', the run's."""
        found: list[trio.CancelScope] = []
        key = agent_key
        while key is not None:
            runner = self.agents.get(key)
            if runner is not None and runner.timeout_scope is not None:
                found.append(runner.timeout_scope)
            key = self.parents.get(key)
        if self.root is not None and self.root.timeout_scope is not None:
            found.append(self.root.timeout_scope)
        return found

    def descendants(self, agent_key: str) -> list[str]:
        """The agentKeys below `agent_key` in the tree, parents before their children."""
        children: dict[str | None, list[str]] = {}
        for key, parent in self.parents.items():
            children.setdefault(parent, []).append(key)
        found: list[str] = []
        todo = list(children.get(agent_key, ()))
        while todo:
            key = todo.pop()
            found.append(key)
            todo.extend(children.get(key, ()))
        return found


class RuntimeTools(NamedTuple):
    """The runtime's own tools bound to one run (`spawn.run_tools`): `agent_spawn` and
    `agent_send`, the compactions' summarizer, and how a continued agent's background
    children are picked up again."""

    tools: tuple[Tool, ...]
    summarizer: Summarizer
    background_again: Callable[[AgentPlan], list[BackgroundAgain]]


@final
class RunContext:
    """One run as its tools see it, made whole at once and never reassigned: the
    catalog, the limits, how the run goes on from its journal (`continuation`; empty
    for a fresh run), a fork's recording, the live agents, and the run's tools (the
    catalog's and the runtime's own bound to it: `agent_spawn`, `agent_send`)."""

    __slots__ = (
        "attachments",
        "background_again",
        "catalog",
        "continuation",
        "limits",
        "live",
        "recording",
        "summarizer",
        "tools",
    )

    catalog: AgentCatalog
    limits: RunLimits
    continuation: Continuation
    recording: Recording | None
    """A fork with `replay`: the original's recorded turns (agents/core/replay.py)."""
    live: LiveAgents
    tools: dict[str, Tool]
    summarizer: Summarizer
    """Runs a compaction's summarizer subagent as a child of the compacting agent."""
    background_again: Callable[[AgentPlan], list[BackgroundAgain]]
    """A continued agent's background children to pick up again beside it."""
    attachments: dict[str, Attachment]
    """The run's attachments by id (its input's, messages', spawns', tool results'): an
    `agent_spawn` may hand one on by its id."""

    def __init__(
        self,
        catalog: AgentCatalog,
        limits: RunLimits,
        *,
        runtime: Callable[[RunContext], RuntimeTools],
        continuation: Continuation | None = None,
        recording: Recording | None = None,
    ) -> None:
        """`runtime` makes the runtime's tools for this run (`spawn.run_tools`: they
        hold the context, so they are made with it)."""
        given = {
            "catalog": catalog,
            "limits": limits,
            "live": LiveAgents(),
            "continuation": continuation or Continuation(),
            "recording": recording,
            "attachments": {},
        }
        for name, value in given.items():
            object.__setattr__(self, name, value)
        own = runtime(self)  # (its tools read the fields above, never the ones below)
        made = {
            "tools": {**catalog.tools, **{tool.name: tool for tool in own.tools}},
            "summarizer": own.summarizer,
            "background_again": own.background_again,
        }
        for name, value in made.items():
            object.__setattr__(self, name, value)

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"a RunContext is made whole at once: {name!r} cannot be set")
