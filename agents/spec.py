"""Subagent definitions: one YAML file per subagent, validated with pydantic.

The file's stem is the agentId (`subagents/researcher.yaml` → `researcher`).
Every key is checked; an unknown or invalid key stops loading with one line
that names the file and the key.
"""

from __future__ import annotations

import importlib.util
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError

from agents.core.structured import check_schema
from agents.errors import SpecError
from agents.schema_files import inline_file_refs
from agents.yaml_loader import load_yaml_model

__all__ = [
    "FALLBACK_REASONS",
    "AgentSpec",
    "CompactionSpec",
    "RemoteSpec",
    "ScriptSpec",
    "ScriptStep",
    "ScriptedCall",
    "load_spec",
    "load_specs",
]

_AGENT_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")

FallbackReason = Literal["overloaded", "rate_limit", "context_length", "unavailable"]
FALLBACK_REASONS: tuple[FallbackReason, ...] = (
    "overloaded",
    "rate_limit",
    "context_length",
    "unavailable",
)
_DEFAULT_FALLBACK_ON: tuple[FallbackReason, ...] = ("overloaded", "rate_limit", "unavailable")


class ScriptedCall(BaseModel):
    """A tool call the scripted model makes."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    args: dict[str, Any] = Field(default_factory=dict)


class ScriptStep(BaseModel):
    """One model turn of a scripted agent.

    Strings may use `{input}` (the latest user message) and `{results}` (the
    previous turn's tool results, one per line).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    say: str = ""
    """Visible text, streamed word by word."""
    think: str = ""
    """Reasoning text, streamed before `say` as thinking deltas."""
    calls: list[ScriptedCall] = Field(default_factory=list)
    """Tool calls made after the text."""
    sleep: float = Field(default=0.0, ge=0)
    """Seconds to wait before the turn starts streaming (latency, timeouts)."""
    fail: str | None = None
    """Fail the model call with this message instead of answering."""
    finish: str | None = None
    """The finish reason to report instead of `stop`/`tool_calls` (`length`: the turn was
    cut by the output limit)."""


class ScriptSpec(BaseModel):
    """The script of an agent on the offline `scripted` provider."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    token_delay: float = Field(default=0.0, ge=0)
    """Seconds between streamed words, on the clock: word n is due n × token_delay
    after the turn starts, so a consumer that falls behind finds several waiting
    (0: as fast as possible)."""
    yield_every: int = Field(default=64, ge=1)
    """With no token_delay, yield to the scheduler every this-many words (1: like a
    provider whose every delta comes from a socket read)."""
    turns: list[ScriptStep] = Field(default_factory=list)
    """Turn N answers the N-th model turn of the agent instance (turns a compaction
    summarized count too)."""
    repeat: bool = False
    """Past its last turn the script starts over (turn N answers as turn N mod the
    number of turns), so a follow-up in a thread gets an answer of the same kind: the
    demo's planner answers each question of a conversation with a tree of its own.
    False: every later turn repeats the last final answer."""
    summary: str | None = None
    """What the model answers when a compaction asks it for a summary (`{input}`: the
    first 30 words of what it summarizes); default: `Summary: ` and those words."""
    context_window: int | None = Field(default=None, gt=0)
    """The model's context window in tokens (words, for this model): a longer request
    fails as Anthropic's does, `prompt is too long: N tokens > W maximum`."""


class CompactionSpec(BaseModel):
    """`compaction:` — how an agent keeps a long conversation within its model's context
    (docs/configuration.md#compaction)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    max_context_tokens: int | None = Field(default=None, gt=0)
    """Compact before a model turn whose request would pass this many tokens; None:
    only when the provider says the prompt is too long."""
    keep_last_turns: int = Field(default=2, ge=0, le=100)
    """Model turns (with their tool results) kept as they are after the summary."""
    summarizer: str | None = None
    """A subagent that writes the summary, run as a child of the agent; default: the
    agent's own model."""
    instructions: str | None = Field(default=None, min_length=1)
    """Added to the summarizer's instructions (what to keep, in what form)."""


class RemoteSpec(BaseModel):
    """`remote:` — the subagent runs on another orchestrator server (docs/remote.md)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    url: str | None = Field(default=None, min_length=1, pattern=r"^wss?://[^/?#\s]+")
    """That server's WebSocket URL (`ws://HOST:PORT/ws`, or `wss://`)."""
    agent: str | None = Field(default=None, min_length=1)
    """The agentId to run there."""
    a2a: str | None = Field(default=None, min_length=1, pattern=r"^https?://[^/?#\s]+")
    """Instead of `url` and `agent`: the base URL of an A2A agent (any A2A server; its
    agent card is read from `<a2a>/.well-known/agent-card.json`)."""
    token_env: str | None = None
    """An environment variable holding the token for that server."""
    timeout_seconds: float = Field(default=60.0, gt=0)
    """How long that server may stay unreachable (or silent) before the spawn fails."""

    @model_validator(mode="after")
    def _one_kind(self) -> RemoteSpec:
        if self.a2a is not None:
            if self.url is not None or self.agent is not None:
                raise ValueError("remote: give either `a2a`, or `url` and `agent`, not both")
            if importlib.util.find_spec("a2a") is None:
                raise ValueError(
                    "remote.a2a needs the `a2a` extra: pip install 'agent-orchestrator[a2a]'"
                )
        elif self.url is None or self.agent is None:
            raise ValueError("remote: needs `url` and `agent` (another orchestrator), or `a2a`")
        return self

    @property
    def where(self) -> str:
        """How errors name it: `planner at ws://…`, or `A2A agent at http://…`."""
        return f"A2A agent at {self.a2a}" if self.a2a else f"{self.agent} at {self.url}"


class AgentSpec(BaseModel):
    """A subagent (contract §6); `id` comes from the file name, not the file."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str = Field(default="", exclude=True)
    name: str | None = None
    """Display name; defaults to the agentId."""
    description: str = Field(min_length=1)
    """Shown to parent models in the `agent_spawn` tool."""
    example: str | None = Field(default=None, min_length=1, max_length=2000)
    """A sample task, for people: the console fills it in for this agent (and
    preselects the first agent that has one); never shown to a model."""
    instructions: str = ""
    """The system prompt (required, except for a `remote` subagent)."""
    model: str = "default"
    """Key in the server config's `models`."""
    tools: list[str] = Field(default_factory=list)
    """Tools this agent may call (none when omitted)."""
    timeout_seconds: float | None = Field(default=None, gt=0)
    """Default bound on one spawn of this agent, in seconds."""
    max_turns: int = Field(default=8, ge=1, le=1000)
    """Most model turns per run of this agent."""
    budget_tokens: int | None = Field(default=None, gt=0)
    """Most tokens (input + output) one instance and its descendants may use."""
    script: ScriptSpec | None = None
    """Turns for the `scripted` provider (ignored by real providers)."""
    approval: list[str] | None = None
    """Tools whose calls wait for a person's decision (`"*"`, alone or in the list:
    every tool, `agent_spawn` included); None: the server config's `approval` list;
    `[]`: none."""
    approval_edit: bool = False
    """The approver may change a waiting call's arguments."""
    approval_timeout_seconds: float | None = Field(default=None, gt=0)
    """Seconds a call waits for its decision (default: `limits.approval_timeout_seconds`)."""
    compaction: CompactionSpec | None = None
    """How this agent compacts a long conversation; None: the server config's `compaction`."""

    @field_validator("approval", mode="before")
    @classmethod
    def _every_tool(cls, value: object) -> object:
        """`approval: "*"` (as the docs write it) is `["*"]`."""
        return ["*"] if value == "*" else value

    remote: RemoteSpec | None = None
    """Run this subagent on another orchestrator server; its subtree streams into this
    tree live (docs/remote.md)."""
    continue_on_output_limit: int = Field(default=1, ge=0, le=10)
    """A final answer cut by the model's output limit is continued this many times (the
    parts join into one answer); cut once more, the agent fails `output_limit`. 0: a cut
    answer is taken as it is."""

    output_schema: dict[str, Any] | None = None
    """The JSON Schema (draft 2020-12) the final answer must match: the agent answers
    with a JSON value, validated, given to its parent as compact JSON and in
    AGENT_RESULT's `structured` (docs/structured.md). `$ref` may name a file beside
    this one."""
    output_retries: int = Field(default=2, ge=0, le=10)
    """Times an answer that does not match `output_schema` is refused and asked for
    again (at most 1 + this many answers), before the agent fails `output_invalid`."""
    fallback_models: list[str] = Field(default_factory=list, max_length=8)
    """Model keys of the server config tried in order when the model fails for one of
    `fallback_on` (docs/structured.md#fallback-models)."""
    fallback_on: list[FallbackReason] = Field(
        default_factory=lambda: list(_DEFAULT_FALLBACK_ON), min_length=1
    )
    """Which failures move to the next model: `overloaded` (529), `rate_limit` (429
    after the model's retries), `context_length` (the prompt is too long for it),
    `unavailable` (5xx, a refused connection, a timeout, a cut stream)."""

    @field_validator("output_schema", mode="before")
    @classmethod
    def _schema_usable(cls, value: object, info: ValidationInfo) -> object:
        """File `$ref`s inlined (relative to the YAML file), then checked as a schema."""
        if value is None:
            return None
        where = info.context.get("file") if isinstance(info.context, dict) else None
        try:
            if isinstance(where, Path):
                value = inline_file_refs(value, where.parent, where.parent)
            return check_schema(value, where="")
        except ValueError as exc:  # (SchemaError too; said after `output_schema: `)
            raise PydanticCustomError("output_schema", str(exc).lstrip(".: ")) from None

    @model_validator(mode="after")
    def _instructions_unless_remote(self) -> AgentSpec:
        if self.remote is None and not self.instructions:
            raise ValueError("instructions: required (the system prompt)")
        return self

    @property
    def display_name(self) -> str:
        """The name shown in the tree: `name`, else the agentId."""
        return self.name or self.id


def load_spec(path: Path) -> AgentSpec:
    """Load one subagent file.

    Raises:
        SpecError: one line naming the file and the bad key.
    """
    agent_id = path.stem
    if not _AGENT_ID.match(agent_id):
        raise SpecError(
            f"{path}: file name {agent_id!r} is not a valid agentId "
            "(letters, digits, '_', '-', '.'; at most 64)"
        )
    try:
        spec = load_yaml_model(
            path,
            AgentSpec,
            reserved={"id": " (the agentId is the file name)"},
            context={"file": path},
        )
    except ValueError as exc:
        raise SpecError(str(exc)) from None
    return spec.model_copy(update={"id": agent_id})


def load_specs(
    directory: Path,
    *,
    models: Iterable[str] | None = None,
    tools: Iterable[str] | None = None,
    mcp_servers: Iterable[str] = (),
) -> dict[str, AgentSpec]:
    """Load every `*.yaml`/`*.yml` in `directory`, sorted by agentId.

    With `models`/`tools`, also check that each spec names only known ones; a tool
    `<server>__<tool>` (or a pattern such as `fs__*`) must name a server of
    `mcp_servers` (its tools are known only once the server runs).

    Raises:
        SpecError: for the first invalid file.
    """
    if not directory.is_dir():
        raise SpecError(f"{directory}: subagents_dir is not a directory")
    known_models = set(models) if models is not None else None
    known_tools = set(tools) if tools is not None else None
    servers = set(mcp_servers)
    specs: dict[str, AgentSpec] = {}
    files = sorted(p for p in directory.iterdir() if p.suffix in (".yaml", ".yml"))
    for path in files:
        spec = load_spec(path)
        if spec.id in specs:
            raise SpecError(f"{path}: agentId {spec.id!r} is defined twice")
        if known_models is not None and spec.model not in known_models:
            raise SpecError(
                f"{path}: model: {spec.model!r} is not a key of the server config's models "
                f"(known: {', '.join(sorted(known_models)) or 'none'})"
            )
        if known_models is not None:
            for i, key in enumerate(spec.fallback_models):
                if key not in known_models:
                    raise SpecError(
                        f"{path}: fallback_models[{i}]: {key!r} is not a key of the server "
                        f"config's models (known: {', '.join(sorted(known_models))})"
                    )
        if known_tools is not None:
            for key, names in (("tools", spec.tools), ("approval", spec.approval or [])):
                for i, tool in enumerate(names):
                    if tool in known_tools or (key == "approval" and tool == "*"):
                        continue
                    server, sep, _ = tool.partition("__")
                    if sep and server in servers:
                        continue
                    if sep and server:
                        raise SpecError(
                            f"{path}: {key}[{i}]: {tool!r} names MCP server {server!r}, which "
                            f"mcp_servers does not configure (configured: "
                            f"{', '.join(sorted(servers)) or 'none'})"
                        )
                    raise SpecError(
                        f"{path}: {key}[{i}]: unknown tool {tool!r} "
                        f"(known: {', '.join(sorted(known_tools))})"
                    )
        specs[spec.id] = spec
    for path in files:
        spec = specs[path.stem]
        summarizer = spec.compaction.summarizer if spec.compaction is not None else None
        if summarizer == spec.id:
            raise SpecError(
                f"{path}: compaction.summarizer: {summarizer!r} is this agent itself: its "
                "summaries would compact themselves, child after child (name another agent, "
                "or leave it out for the agent's own model)"
            )
        if summarizer is not None and summarizer not in specs:
            raise SpecError(
                f"{path}: compaction.summarizer: unknown agent {summarizer!r} "
                f"(known: {', '.join(sorted(specs))})"
            )
    return specs
