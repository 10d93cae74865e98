"""A run's events as OpenTelemetry spans named by the GenAI semantic conventions (pure).

`TraceBuilder.feed(event)` returns the spans that event finished. Spans are built
after the fact from the journal, never on the event path: `invoke_agent {name}` for
every agent instance (a child under the `execute_tool agent_spawn` span that started
it, so the trace is the agent tree), `execute_tool {tool}` for every tool call, and
`chat {model}` for every model turn — from the agent's previous step (its start, a
tool result, a message) to the turn's last REASONING, since the request goes out
right after that step.

Ids are derived, not random: the trace id from the run id, each span id from what
the span is (the run, the agent instance, the tool call, the turn). A run resumed
after a restart or taken over by another worker is rebuilt from its journal into the
same spans with the same ids, so it continues the same trace, and a child's parent id
is right even when the parent span is exported by another process.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, cast

from opentelemetry.semconv._incubating.attributes import gen_ai_attributes as gen_ai
from opentelemetry.semconv.attributes import error_attributes

from agents.core.events import UsageData
from agents.core.payloads import (
    AgentErrorData,
    AgentResultData,
    AgentStartedData,
    ModelFallbackData,
    RunFinishedData,
    RunStartedData,
    ToolCallData,
    ToolResultData,
    TurnEndData,
    agent_error,
)
from orchestrator.core.events import Event, EventType

__all__ = [
    "HANDLES",
    "IGNORES",
    "ModelInfo",
    "SpanRecord",
    "TraceBuilder",
    "span_id_of",
    "trace_id_of",
]

HANDLES = frozenset(
    {
        EventType.RUN_STARTED,
        EventType.AGENT_STARTED,
        EventType.REASONING,
        EventType.TOOL_CALL,
        EventType.TOOL_RESULT,
        EventType.AGENT_RESULT,
        EventType.AGENT_ERROR,
        EventType.USER_MESSAGE,
        EventType.TURN_ABANDONED,
        EventType.APPROVAL_RESOLVED,
        EventType.COMPACTION_FINISHED,
        EventType.MODEL_FALLBACK,
        EventType.RUN_FINISHED,
    }
)
"""Event types that open, close or annotate spans."""
IGNORES = frozenset(
    {
        EventType.TOOL_CALL_DELTA,
        EventType.TOOL_PROGRESS,
        EventType.RUN_RESUMED,
        EventType.APPROVAL_REQUESTED,
        EventType.COMPACTION_STARTED,
        EventType.AGENT_STALLED,
    }
)
"""Event types a trace leaves aside: argument deltas, progress, a resume's notice, a
request (its answer is the span event), a stall (the span's duration shows it);
tests/unit/test_payloads.py checks that every type is in one of the two."""

ModelInfo = Callable[[str], tuple[str, str]]
"""agentId → (gen_ai.provider.name, gen_ai.request.model)."""

OP = gen_ai.GEN_AI_OPERATION_NAME
INVOKE_AGENT = gen_ai.GenAiOperationNameValues.INVOKE_AGENT.value
EXECUTE_TOOL = gen_ai.GenAiOperationNameValues.EXECUTE_TOOL.value
CHAT = gen_ai.GenAiOperationNameValues.CHAT.value
_PROVIDERS = {"openai": "openai", "openai-responses": "openai", "anthropic": "anthropic"}
_CONTENT_CHARS = 16_000
"""Captured content (`capture_content`) is cut to this many characters per attribute."""
_MAX_OPEN = 100_000
_FALLBACKS = "orchestrator.model_fallbacks"
"""An agent span's model switches (`from -> to (reason)`), in order."""
"""Open spans one run may hold (tool calls that never end): past it, new ones are not traced."""


def trace_id_of(run_id: str) -> int:
    """The run's 128-bit trace id: the first 16 bytes of SHA-256 of its id."""
    return int.from_bytes(hashlib.sha256(run_id.encode()).digest()[:16], "big") or 1


def span_id_of(run_id: str, what: str) -> int:
    """A span's 64-bit id: the first 8 bytes of SHA-256 of the run id and what it is."""
    digest = hashlib.sha256(f"{run_id}\0{what}".encode()).digest()
    return int.from_bytes(digest[:8], "big") or 1


def provider_name(provider: str) -> str:
    """`gen_ai.provider.name` for one of our providers (`scripted` stays itself)."""
    return _PROVIDERS.get(provider, provider)


@dataclass
class SpanRecord:
    """One finished span, ready for an exporter."""

    name: str
    trace_id: int
    span_id: int
    parent_id: int | None
    start: float
    """Seconds since the epoch (event timestamps)."""
    end: float = 0.0
    attributes: dict[str, Any] = field(default_factory=dict)
    kind: str = "internal"
    """`internal` or `client` (a model call)."""
    error: str | None = None
    """Set: the span failed with this description (`error.type` says the kind)."""


@dataclass
class _Agent:
    key: str | None
    span: SpanRecord
    provider: str
    model: str
    step_ts: float
    """When the agent's next model request went out: its previous step."""
    turn: int = 0
    chat: SpanRecord | None = None


class TraceBuilder:
    """Spans of one run from its events, in seq order."""

    def __init__(
        self,
        run_id: str,
        models: ModelInfo,
        *,
        capture_content: bool = False,
        names: Callable[[str], str] | None = None,
        root_session: str | None = None,
        model_keys: ModelInfo | None = None,
    ) -> None:
        self.run_id = run_id
        self.trace_id = trace_id_of(run_id)
        self.models = models
        self.model_keys = model_keys
        """Model key → (provider, model): an agent's chat spans after a MODEL_FALLBACK
        name its new model (None: they keep naming the first)."""
        self.names = names or (lambda agent_id: agent_id)
        """agentId → display name (the root's span is named as its children's are)."""
        self.root_path = root_session or run_id
        """The root's `orchestrator.path`: its sessionId, the first segment of every path."""
        self.capture = capture_content
        self._agents: dict[str | None, _Agent] = {}
        self._tools: dict[tuple[str | None, str], SpanRecord] = {}
        self._sessions: dict[str, str] = {}
        """sessionId → agentKey (a child names its parent by session)."""
        self.streaming: set[str | None] = set()
        """Agents whose model turn has its span open: their further deltas change nothing
        (the shell skips them without a call: most of a run's events are deltas)."""
        self._open = 0

    @property
    def open_spans(self) -> int:
        """Spans started and not yet finished."""
        return self._open

    def feed(self, event: Event) -> list[SpanRecord]:
        """The spans `event` finished (most events finish none)."""
        kind, data = event.type, event.data
        if kind is EventType.REASONING and not event.last:
            self._chat(event)  # a delta: opens the turn's span once, nothing else
            return []
        key = event.source.agent_key if event.source is not None else None
        if kind is EventType.RUN_STARTED:
            started = cast(RunStartedData, data)
            self._start_agent(
                None, event, str(started.get("agentId", "")), str(started.get("input", ""))
            )
            return []
        if kind is EventType.AGENT_STARTED:
            source = event.source
            assert source is not None
            task = str(cast(AgentStartedData, data).get("task", ""))
            self._start_agent(key, event, source.agent_id, task)
            return []
        agent = self._agents.get(key)
        if agent is None:
            return []
        if kind is EventType.REASONING:
            return self._end_turn(agent, event)
        if kind is EventType.TOOL_CALL:
            self._start_tool(key, agent, event)
        elif kind is EventType.TOOL_RESULT:
            agent.step_ts = event.ts
            call_id = str(cast(ToolResultData, data).get("toolCallId", ""))
            span = self._tools.pop((key, call_id), None)
            if span is not None:
                return [self._end_tool(span, event)]
        elif kind in (
            EventType.USER_MESSAGE,
            EventType.COMPACTION_FINISHED,
            EventType.APPROVAL_RESOLVED,
            EventType.TURN_ABANDONED,
        ):
            agent.step_ts = event.ts
        elif kind is EventType.MODEL_FALLBACK:
            self._fell_back(agent, cast(ModelFallbackData, data))
        elif kind in (EventType.AGENT_RESULT, EventType.AGENT_ERROR):
            return self._end_agent(key, agent, event)
        elif kind is EventType.RUN_FINISHED:
            return self._end_run(event)
        return []

    # -- agents ----------------------------------------------------------------------

    def _start_agent(self, key: str | None, event: Event, agent_id: str, task: str) -> None:
        source = event.source
        if key in self._agents or self._open >= _MAX_OPEN:
            return
        provider, model = self.models(agent_id)
        if source is None:
            name, parent = self.names(agent_id), None
            conversation, what = self.run_id, "agent:root"
            path, depth = self.root_path, 0
        else:
            name = source.agent_name
            spawned_by = source.parent_tool_call_id or ""
            parent_key = self._parent_key(source.depth, source.parent_session_id)
            if (parent_key, spawned_by) in self._tools:
                parent = self._tools[(parent_key, spawned_by)].span_id
            else:  # a compaction's summarizer: under its agent; or a parent never seen
                owner = self._agents.get(parent_key)
                parent = owner.span.span_id if owner is not None else self._root_id()
            conversation, what = source.session_id, f"agent:{key}"
            path, depth = source.path, source.depth
        attributes: dict[str, Any] = {
            OP: INVOKE_AGENT,
            gen_ai.GEN_AI_AGENT_ID: key or f"root:{self.run_id}",
            gen_ai.GEN_AI_AGENT_NAME: name,
            gen_ai.GEN_AI_CONVERSATION_ID: conversation,
            gen_ai.GEN_AI_PROVIDER_NAME: provider_name(provider),
            gen_ai.GEN_AI_REQUEST_MODEL: model,
            "orchestrator.run_id": self.run_id,
            "orchestrator.agent_id": agent_id,
            "orchestrator.path": path,
            "orchestrator.depth": depth,
        }
        if self.capture:
            attributes[gen_ai.GEN_AI_INPUT_MESSAGES] = _messages("user", task)
        span = SpanRecord(
            name=f"{INVOKE_AGENT} {name}",
            trace_id=self.trace_id,
            span_id=span_id_of(self.run_id, what),
            parent_id=parent,
            start=event.ts,
            attributes=attributes,
        )
        self._agents[key] = _Agent(key, span, provider, model, event.ts)
        self._open += 1
        if source is not None and key is not None:
            self._sessions[source.session_id] = key

    def _parent_key(self, depth: int, parent_session: str) -> str | None:
        return None if depth <= 1 else self._sessions.get(parent_session)

    def _root_id(self) -> int | None:
        root = self._agents.get(None)
        return root.span.span_id if root is not None else None

    def _end_agent(self, key: str | None, agent: _Agent, event: Event) -> list[SpanRecord]:
        span = agent.span
        done = [self._close_chat(agent, event.ts, "the agent ended")]
        if event.type is EventType.AGENT_ERROR:
            error = cast(AgentErrorData, event.data)
            _usage(span, error.get("usage"))
            _fail(span, str(error.get("errorType", "error")), str(error.get("message", "")))
        else:
            result = cast(AgentResultData, event.data)
            _usage(span, result.get("usage"))
            if self.capture:
                span.attributes[gen_ai.GEN_AI_OUTPUT_MESSAGES] = _messages(
                    "assistant", str(result.get("text", ""))
                )
        span.end = event.ts
        del self._agents[key]
        self._open -= 1
        done.append(span)
        # Its calls still open (it was cancelled or failed meanwhile) end with it.
        for tool_key in [k for k in self._tools if k[0] == key]:
            tool = self._tools.pop(tool_key)
            _fail(tool, "cancelled", "the agent ended before the call did")
            tool.end = event.ts
            self._open -= 1
            done.append(tool)
        return [s for s in done if s is not None]

    def _end_run(self, event: Event) -> list[SpanRecord]:
        """RUN_FINISHED: whatever is still open (an interrupted run) ends here."""
        finished = cast(RunFinishedData, event.data)
        status = str(finished.get("status", "completed"))
        done: list[SpanRecord] = []
        for key in list(self._agents):
            agent = self._agents[key]
            ended = agent_error(
                status if status != "completed" else "unfinished",
                str(finished.get("error", f"the run ended {status}")),
            )
            as_error = Event(
                self.run_id, event.seq, event.ts, EventType.AGENT_ERROR, None, True, dict(ended)
            )
            done += self._end_agent(key, agent, as_error)
        return done

    # -- model turns -----------------------------------------------------------------

    def _fell_back(self, agent: _Agent, fell: ModelFallbackData) -> None:
        """The agent's model failed over: its span lists the switch, and its later chat
        spans name the new model."""
        attrs = agent.span.attributes
        attrs[_FALLBACKS] = (
            *attrs.get(_FALLBACKS, ()),
            f"{fell['from']} -> {fell['to']} ({fell['reason']})",
        )
        if self.model_keys is not None:
            agent.provider, agent.model = self.model_keys(fell["to"])

    def _chat(self, event: Event) -> None:
        key = event.source.agent_key if event.source is not None else None
        agent = self._agents.get(key)
        if agent is None or agent.chat is not None or self._open >= _MAX_OPEN:
            return
        provider, model = agent.provider, agent.model
        agent.turn += 1
        self.streaming.add(key)
        agent.chat = SpanRecord(
            name=f"{CHAT} {model}" if model else CHAT,
            trace_id=self.trace_id,
            span_id=span_id_of(self.run_id, f"chat:{key}:{agent.turn}"),
            parent_id=agent.span.span_id,
            start=agent.step_ts,
            kind="client",
            attributes={
                OP: CHAT,
                gen_ai.GEN_AI_PROVIDER_NAME: provider_name(provider),
                gen_ai.GEN_AI_REQUEST_MODEL: model,
                gen_ai.GEN_AI_CONVERSATION_ID: agent.span.attributes[gen_ai.GEN_AI_CONVERSATION_ID],
            },
        )
        self._open += 1

    def _end_turn(self, agent: _Agent, event: Event) -> list[SpanRecord]:
        key = event.source.agent_key if event.source is not None else None
        self._chat(event)  # a turn with no delta (only tool calls) opens here
        span = agent.chat
        if span is None:
            return []
        data = cast(TurnEndData, event.data)
        span.attributes[gen_ai.GEN_AI_RESPONSE_FINISH_REASONS] = (
            str(data.get("finishReason", "unknown")),
        )
        _usage(span, data.get("usage"))
        if self.capture:
            span.attributes[gen_ai.GEN_AI_OUTPUT_MESSAGES] = _messages(
                "assistant", str(data.get("text", ""))
            )
        span.end = agent.step_ts = event.ts
        agent.chat = None
        self.streaming.discard(key)
        self._open -= 1
        return [span]

    def _close_chat(self, agent: _Agent, ts: float, why: str) -> SpanRecord | None:
        span = agent.chat
        if span is None:
            return None
        _fail(span, "cancelled", why)
        span.end = ts
        agent.chat = None
        self.streaming.discard(agent.key)
        self._open -= 1
        return span

    # -- tool calls ------------------------------------------------------------------

    def _start_tool(self, key: str | None, agent: _Agent, event: Event) -> None:
        data = cast(ToolCallData, event.data)
        call_id, name = str(data.get("toolCallId", "")), str(data.get("name", ""))
        if (key, call_id) in self._tools or self._open >= _MAX_OPEN:
            return
        attributes: dict[str, Any] = {
            OP: EXECUTE_TOOL,
            gen_ai.GEN_AI_TOOL_NAME: name,
            gen_ai.GEN_AI_TOOL_CALL_ID: call_id,
            gen_ai.GEN_AI_TOOL_TYPE: "extension" if data.get("server") else "function",
        }
        if self.capture:
            attributes[gen_ai.GEN_AI_TOOL_CALL_ARGUMENTS] = _clip(_json(data.get("args")))
        self._tools[(key, call_id)] = SpanRecord(
            name=f"{EXECUTE_TOOL} {name}",
            trace_id=self.trace_id,
            span_id=span_id_of(self.run_id, f"tool:{key}:{call_id}"),
            parent_id=agent.span.span_id,
            start=event.ts,
            attributes=attributes,
        )
        self._open += 1

    def _end_tool(self, span: SpanRecord, event: Event) -> SpanRecord:
        data = cast(ToolResultData, event.data)
        if data.get("isError"):
            _fail(span, "tool_error", str(data.get("content", ""))[:500])
        if self.capture:
            span.attributes[gen_ai.GEN_AI_TOOL_CALL_RESULT] = _clip(str(data.get("content", "")))
        span.end = event.ts
        self._open -= 1
        return span


def _usage(span: SpanRecord, usage: UsageData | None) -> None:
    """A span's token counts, when the event has them."""
    if isinstance(usage, dict):
        span.attributes[gen_ai.GEN_AI_USAGE_INPUT_TOKENS] = int(usage.get("inputTokens", 0))
        span.attributes[gen_ai.GEN_AI_USAGE_OUTPUT_TOKENS] = int(usage.get("outputTokens", 0))


def _fail(span: SpanRecord, error_type: str, message: str) -> None:
    span.attributes[error_attributes.ERROR_TYPE] = error_type
    span.error = message or error_type


def _json(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def _clip(text: str) -> str:
    return text if len(text) <= _CONTENT_CHARS else text[:_CONTENT_CHARS] + "…"


def _messages(role: str, text: str) -> str:
    """Content as the conventions' message JSON: `[{role, parts: [{type, content}]}]`."""
    return json.dumps([{"role": role, "parts": [{"type": "text", "content": _clip(text)}]}])
