"""A run's events as AG-UI events (pure; the `ag-ui-protocol` package's own models).

One `AguiStream` per watcher, fed the run's events in seq order (a filtered feed may
skip some: a message or a call whose start was not seen is started when its first
part arrives). The tree stays visible: every event of a child carries
`subagentRunId` (its agentKey) — AG-UI 1.0's field for events of a subagent — and
`metadata` with `agentKey`, `agentId`, `path`, `depth` and `seq`; a child's start and
end are SUBAGENT_STARTED (with `parentSubagentRunId` and `parentToolCallId`) /
SUBAGENT_FINISHED / SUBAGENT_ERROR, bracketed by STEP_STARTED / STEP_FINISHED named
after the agent. Events AG-UI has no type for (messages sent in, approvals,
compactions, progress, resumes) are CUSTOM events named `orchestrator.<TYPE>`.

Tool-call ids are unique per run on this stream, as AG-UI clients require: an agent's
ids are its own (the scripted model numbers them per turn; the root and each child may
all say `call_0`; a remote subtree's are another server's), so a call whose id is
already taken is renamed `<id>~<n>` — the same in TOOL_CALL_*, TOOL_CALL_RESULT and a
child's SUBAGENT_STARTED `parentToolCallId` — and its `metadata.toolCallId` keeps the
id the run's events use.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from ag_ui.core import (
    BaseEvent,
    CustomEvent,
    ReasoningEndEvent,
    ReasoningMessageContentEvent,
    ReasoningMessageEndEvent,
    ReasoningMessageStartEvent,
    ReasoningStartEvent,
    RunErrorEvent,
    RunFinishedCancelledOutcome,
    RunFinishedEvent,
    RunFinishedSuccessOutcome,
    RunStartedEvent,
    StepFinishedEvent,
    StepStartedEvent,
    SubagentErrorEvent,
    SubagentFinishedEvent,
    SubagentFinishedSuccessOutcome,
    SubagentStartedEvent,
    TextMessageContentEvent,
    TextMessageEndEvent,
    TextMessageStartEvent,
    ToolCallArgsEvent,
    ToolCallEndEvent,
    ToolCallResultEvent,
    ToolCallStartEvent,
)

from orchestrator.core.events import Event, EventType

__all__ = ["AguiStream"]


@dataclass
class _Agent:
    key: str | None
    name: str
    turn: int = 0
    text: str | None = None
    """The id of the text message streaming now."""
    reasoning: str | None = None
    """The id of the reasoning message streaming now."""
    calls: set[str] = field(default_factory=set)
    """Tool calls started (TOOL_CALL_START sent)."""


class AguiStream:
    """One run as AG-UI events. `thread_id`/`run_id`: the client's (a RunAgentInput's);
    default the run's own id for both."""

    def __init__(
        self, run_id: str, *, thread_id: str | None = None, agui_run_id: str | None = None
    ) -> None:
        self.run_id = run_id
        self.thread_id = thread_id or run_id
        self.agui_run_id = agui_run_id or run_id
        self._agents: dict[str | None, _Agent] = {}
        self._sessions: dict[str, str] = {}
        self._used: set[str] = set()
        """Tool-call ids this stream has given out."""
        self._wire: dict[tuple[str | None, str], str] = {}
        """(agentKey, the run's toolCallId) → the id on this stream, for its latest call."""

    def feed(self, event: Event) -> list[BaseEvent]:
        """The AG-UI events for one of the run's events."""
        kind, data = event.type, event.data
        key = event.source.agent_key if event.source is not None else None
        common = self._common(event)
        if kind is EventType.RUN_STARTED:
            self._agents[None] = _Agent(None, str(data.get("agentId", "root")))
            return [RunStartedEvent(thread_id=self.thread_id, run_id=self.agui_run_id, **common)]
        if kind is EventType.RUN_FINISHED:
            return self._finish_run(event, common)
        agent = self._agent(event)
        sub: dict[str, Any] = {"subagent_run_id": key} if key is not None else {}
        if kind is EventType.REASONING:
            return self._reasoning(agent, event, common, sub)
        if kind is EventType.TOOL_CALL_DELTA:
            call_id = self._call_id(agent, str(data.get("toolCallId", "")), common)
            out = self._start_call(agent, call_id, str(data.get("name", "")), common, sub)
            delta = str(data.get("argsDelta", ""))
            if delta:
                out.append(ToolCallArgsEvent(tool_call_id=call_id, delta=delta, **common, **sub))
            return out
        if kind is EventType.TOOL_CALL:
            call_id = self._call_id(agent, str(data.get("toolCallId", "")), common)
            out = []
            if call_id not in agent.calls:
                out = self._start_call(agent, call_id, str(data.get("name", "")), common, sub)
                args = data.get("args")
                text = args if isinstance(args, str) else json.dumps(args, ensure_ascii=False)
                if text:
                    out.append(ToolCallArgsEvent(tool_call_id=call_id, delta=text, **common, **sub))
            out.append(ToolCallEndEvent(tool_call_id=call_id, **common, **sub))
            return out
        if kind is EventType.TOOL_RESULT:
            call_id = self._call_id(agent, str(data.get("toolCallId", "")), common)
            agent.calls.discard(call_id)
            return [
                ToolCallResultEvent(
                    message_id=f"{self._prefix(agent)}:result:{call_id}",
                    tool_call_id=call_id,
                    content=str(data.get("content", "")),
                    role="tool",
                    **common,
                    **sub,
                )
            ]
        if kind is EventType.AGENT_STARTED and key is not None and event.source is not None:
            source = event.source
            parent = self._sessions.get(source.parent_session_id) if source.depth > 1 else None
            self._sessions[source.session_id] = key
            spawned_by = source.parent_tool_call_id
            if spawned_by is not None:
                spawned_by = self._wire.get((parent, spawned_by), spawned_by)
            return [
                SubagentStartedEvent(
                    subagent_run_id=key,
                    name=source.agent_name,
                    description=str(data.get("task", "")) or None,
                    parent_subagent_run_id=parent,
                    parent_tool_call_id=spawned_by,
                    **common,
                ),
                StepStartedEvent(step_name=source.agent_name, subagent_run_id=key, **common),
            ]
        if kind in (EventType.AGENT_RESULT, EventType.AGENT_ERROR):
            out = self._close(agent, common, sub)
            if key is None:
                return out  # the root's end is the run's (RUN_FINISHED)
            out.append(StepFinishedEvent(step_name=agent.name, subagent_run_id=key, **common))
            if kind is EventType.AGENT_RESULT:
                out.append(
                    SubagentFinishedEvent(
                        subagent_run_id=key,
                        result=str(data.get("text", "")),
                        outcome=SubagentFinishedSuccessOutcome(),
                        **common,
                    )
                )
            else:
                out.append(
                    SubagentErrorEvent(
                        subagent_run_id=key,
                        message=str(data.get("message", "")) or "failed",
                        code=str(data.get("errorType", "error")),
                        **common,
                    )
                )
            return out
        return [CustomEvent(name=f"orchestrator.{kind.value}", value=data, **common, **sub)]

    # -- parts -----------------------------------------------------------------------

    def _common(self, event: Event) -> dict[str, Any]:
        source = event.source
        metadata: dict[str, Any] = {"runId": self.run_id, "seq": event.seq}
        if source is not None:
            metadata.update(
                agentKey=source.agent_key,
                agentId=source.agent_id,
                path=source.path,
                depth=source.depth,
            )
        else:
            metadata.update(agentKey=None, depth=0)
        return {"timestamp": int(event.ts * 1000), "metadata": metadata}

    def _agent(self, event: Event) -> _Agent:
        source = event.source
        key = source.agent_key if source is not None else None
        agent = self._agents.get(key)
        if agent is None:  # a filtered or resumed feed: it started before we looked
            agent = self._agents[key] = _Agent(key, source.agent_name if source else "root")
        return agent

    def _prefix(self, agent: _Agent) -> str:
        return f"{self.run_id}:{agent.key or 'root'}"

    def _reasoning(
        self, agent: _Agent, event: Event, common: dict[str, Any], sub: dict[str, Any]
    ) -> list[BaseEvent]:
        data, out = event.data, []
        if event.last:
            out = self._close(agent, common, sub)
            agent.turn += 1
            return out
        thinking = data.get("thinkingDelta")
        if isinstance(thinking, str):
            if not thinking:
                return []
            if agent.reasoning is None:
                message = agent.reasoning = f"{self._prefix(agent)}:{agent.turn}:reasoning"
                out += [
                    ReasoningStartEvent(message_id=message, **common, **sub),
                    ReasoningMessageStartEvent(message_id=message, **common, **sub),
                ]
            out.append(
                ReasoningMessageContentEvent(
                    message_id=agent.reasoning, delta=thinking, **common, **sub
                )
            )
            return out
        delta = data.get("delta")
        if not isinstance(delta, str) or not delta:
            return []
        out += self._end_reasoning(agent, common, sub)
        if agent.text is None:
            agent.text = f"{self._prefix(agent)}:{agent.turn}:text"
            out.append(
                TextMessageStartEvent(
                    message_id=agent.text, role="assistant", name=agent.name, **common, **sub
                )
            )
        out.append(TextMessageContentEvent(message_id=agent.text, delta=delta, **common, **sub))
        return out

    def _call_id(self, agent: _Agent, theirs: str, common: dict[str, Any]) -> str:
        """The id on this stream of the agent's call `theirs`: the one its start got
        while the call is open (started, no result yet), else a fresh one — `theirs`,
        or `theirs~n` when the stream gave that out already."""
        common["metadata"]["toolCallId"] = theirs
        ours = self._wire.get((agent.key, theirs))
        if ours is not None and ours in agent.calls:
            return ours
        ours, n = theirs, 1
        while ours in self._used:
            n += 1
            ours = f"{theirs}~{n}"
        self._used.add(ours)
        self._wire[(agent.key, theirs)] = ours
        return ours

    def _start_call(
        self, agent: _Agent, call_id: str, name: str, common: dict[str, Any], sub: dict[str, Any]
    ) -> list[BaseEvent]:
        if call_id in agent.calls:
            return []
        agent.calls.add(call_id)
        return [
            ToolCallStartEvent(
                tool_call_id=call_id,
                tool_call_name=name or "tool",
                parent_message_id=agent.text,
                **common,
                **sub,
            )
        ]

    def _end_reasoning(
        self, agent: _Agent, common: dict[str, Any], sub: dict[str, Any]
    ) -> list[BaseEvent]:
        message, agent.reasoning = agent.reasoning, None
        if message is None:
            return []
        return [
            ReasoningMessageEndEvent(message_id=message, **common, **sub),
            ReasoningEndEvent(message_id=message, **common, **sub),
        ]

    def _close(self, agent: _Agent, common: dict[str, Any], sub: dict[str, Any]) -> list[BaseEvent]:
        out = self._end_reasoning(agent, common, sub)
        message, agent.text = agent.text, None
        if message is not None:
            out.append(TextMessageEndEvent(message_id=message, **common, **sub))
        return out

    def _finish_run(self, event: Event, common: dict[str, Any]) -> list[BaseEvent]:
        data, out = event.data, []
        for agent in self._agents.values():
            sub: dict[str, Any] = {"subagent_run_id": agent.key} if agent.key is not None else {}
            out += self._close(agent, common, sub)
        status = str(data.get("status", "completed"))
        if status == "completed":
            out.append(
                RunFinishedEvent(
                    thread_id=self.thread_id,
                    run_id=self.agui_run_id,
                    result=data.get("result"),
                    outcome=RunFinishedSuccessOutcome(),
                    **common,
                )
            )
        elif status == "cancelled":
            out.append(
                RunFinishedEvent(
                    thread_id=self.thread_id,
                    run_id=self.agui_run_id,
                    outcome=RunFinishedCancelledOutcome(),
                    **common,
                )
            )
        else:
            message = str(data.get("error") or f"the run ended {status}")
            out.append(RunErrorEvent(message=message, code=status, **common))
        return out
