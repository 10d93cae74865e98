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
ids are its own (the scripted model numbers them per agent; the root and each child may
all say `call_0`; a remote subtree's are another server's), so a call whose id is
already taken is renamed `<id>~<n>` — the same in TOOL_CALL_*, TOOL_CALL_RESULT and a
child's SUBAGENT_STARTED `parentToolCallId` — and its `metadata.toolCallId` keeps the
id the run's events use.

A run is one or more AG-UI runs (segments): `interrupt()` ends a segment while tool
calls wait for a person (RUN_FINISHED `outcome: "interrupt"`, one `Interrupt` per
waiting call, the subagents above them SUBAGENT_FINISHED `suspended`), and a later
segment — a `resume[]` or a reconnect after seq N — is a stream `prime`d with events
1..N (nothing sent) whose `begin()` re-opens what is still open there (its subagents,
streaming messages and tool calls, under the same ids) before the events after N.
Interrupt ids name the run, the seq of the call's APPROVAL_REQUESTED and the seq the
segment ended at (`interrupt_id`, `parse_interrupt_id`): an answer needs no state
kept here.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, cast

from ag_ui.core import (
    AssistantMessage,
    BaseEvent,
    CustomEvent,
    FunctionCall,
    Interrupt,
    Message,
    MessagesSnapshotEvent,
    ReasoningEndEvent,
    ReasoningMessageContentEvent,
    ReasoningMessageEndEvent,
    ReasoningMessageStartEvent,
    ReasoningStartEvent,
    RunErrorEvent,
    RunFinishedCancelledOutcome,
    RunFinishedEvent,
    RunFinishedInterruptOutcome,
    RunFinishedSuccessOutcome,
    RunStartedEvent,
    StepFinishedEvent,
    StepStartedEvent,
    SubagentErrorEvent,
    SubagentFinishedEvent,
    SubagentFinishedSuccessOutcome,
    SubagentFinishedSuspendedOutcome,
    SubagentStartedEvent,
    TextMessageContentEvent,
    TextMessageEndEvent,
    TextMessageStartEvent,
    ToolCall,
    ToolCallArgsEvent,
    ToolCallEndEvent,
    ToolCallResultEvent,
    ToolCallStartEvent,
    ToolMessage,
    UserMessage,
)

from agents.core import messages as conversation
from agents.core.payloads import (
    AgentErrorData,
    AgentResultData,
    AgentStartedData,
    ApprovalRequestedData,
    ApprovalResolvedData,
    ReasoningDeltaData,
    RunFinishedData,
    RunStartedData,
    ThinkingDeltaData,
    ToolCallData,
    ToolCallDeltaData,
    ToolResultData,
)
from orchestrator.core.approvals import Answer
from orchestrator.core.events import Event, EventType

__all__ = [
    "HANDLES",
    "IGNORES",
    "AguiStream",
    "answer_of",
    "chat_of",
    "interrupt_id",
    "parse_interrupt_id",
]

HANDLES = frozenset(
    {
        EventType.RUN_STARTED,
        EventType.AGENT_STARTED,
        EventType.REASONING,
        EventType.TOOL_CALL_DELTA,
        EventType.TOOL_CALL,
        EventType.TOOL_RESULT,
        EventType.AGENT_RESULT,
        EventType.AGENT_ERROR,
        EventType.APPROVAL_REQUESTED,
        EventType.APPROVAL_RESOLVED,
        EventType.RUN_FINISHED,
    }
)
"""Event types with an AG-UI mapping of their own (approvals: interrupts, and CUSTOM
too)."""
IGNORES = frozenset(
    {
        EventType.AGENT_STALLED,
        EventType.USER_MESSAGE,
        EventType.TOOL_PROGRESS,
        EventType.RUN_RESUMED,
        EventType.TURN_ABANDONED,
        EventType.COMPACTION_STARTED,
        EventType.COMPACTION_FINISHED,
        EventType.MODEL_FALLBACK,
    }
)
"""Event types with no AG-UI event of their own: they pass as CUSTOM
`orchestrator.<type>`; tests/unit/test_payloads.py checks that every type is in one
of the two."""


def interrupt_id(run_id: str, asked_seq: int, end_seq: int) -> str:
    """The id of the interrupt for the call asked at `asked_seq`, in a segment that
    ended at `end_seq`: `<runId>@<endSeq>#<askedSeq>`."""
    return f"{run_id}@{end_seq}#{asked_seq}"


def parse_interrupt_id(text: str) -> tuple[str, int, int] | None:
    """`(run_id, asked_seq, end_seq)` of an `interrupt_id`, or None if it is not one."""
    head, _, asked = text.rpartition("#")
    run_id, _, end = head.rpartition("@")
    if not run_id or not _seq_text(asked) or not _seq_text(end) or len(text) > 512:
        return None
    return run_id, int(asked), int(end)


def _seq_text(text: str) -> bool:
    """ASCII digits only: `str.isdigit` also accepts `²` and `٣`, which `int` refuses."""
    return text.isascii() and text.isdigit() and len(text) <= 18


def chat_of(
    thread_id: str, history: Sequence[conversation.Message], newest: str | None = None
) -> list[Message]:
    """A thread's chat as AG-UI messages: its conversation (`history`, as the server
    keeps it) — the user inputs, the assistant turns with their tool calls, and the
    tool results — then the run's input `newest` (None: none, the chat as it stands).
    Every id is the server's, `<threadId>:<n>` by the message's place in the
    conversation (the same in each run's snapshot, but after a compaction, whose
    summary is not shown): a client replaces the messages it had by the snapshot's, in
    the snapshot's order (@ag-ui/client keeps the messages the snapshot names in place,
    and appends the others)."""
    chat: list[Message] = []
    for n, message in enumerate(history):
        mid = f"{thread_id}:{n}"
        if isinstance(message, conversation.UserMessage):
            if message.text and not message.summarized_turns:
                chat.append(UserMessage(id=mid, role="user", content=message.text))
        elif isinstance(message, conversation.AssistantMessage):
            calls = [
                ToolCall(
                    id=call.id,
                    type="function",
                    function=FunctionCall(name=call.name, arguments=call.arguments or "{}"),
                )
                for call in message.tool_calls
            ]
            if message.text or calls:
                chat.append(
                    AssistantMessage(
                        id=mid,
                        role="assistant",
                        content=message.text or None,
                        tool_calls=calls or None,
                    )
                )
        else:
            chat.append(
                ToolMessage(
                    id=mid,
                    role="tool",
                    content=message.content,
                    tool_call_id=message.tool_call_id,
                    error=message.content if message.is_error else None,
                )
            )
    if newest is not None:
        chat.append(UserMessage(id=f"{thread_id}:{len(history)}", role="user", content=newest))
    return chat


def answer_of(
    status: str,
    payload: Any,
    *,
    tool_call_id: str,
    agent_key: str | None = None,
    by: str = "client",
) -> Answer | str:
    """The answer a `ResumeEntry` (`status`, `payload`) gives the call `tool_call_id` of
    `agent_key` (None: the root), from `by`, or why it gives none: the same `Answer` the
    `approve` op makes (`core/approvals.py`).

    `payload` is `{"approved": bool, "reason"?: str, "args"?: object}` (the interrupt's
    `responseSchema`), or a bare boolean; `status: "cancelled"` denies the call.
    """

    def given(
        decision: Literal["approve", "deny"],
        reason: str | None = None,
        args: dict[str, Any] | None = None,
    ) -> Answer:
        return Answer(
            tool_call_id=tool_call_id,
            decision=decision,
            agent_key=agent_key,
            by=by,
            reason=reason,
            args=args,
        )

    if status == "cancelled":
        reason = payload.get("reason") if isinstance(payload, dict) else None
        return given("deny", reason if isinstance(reason, str) else "cancelled by the client")
    if isinstance(payload, bool):
        return given("approve" if payload else "deny")
    if not isinstance(payload, dict) or not isinstance(payload.get("approved"), bool):
        return 'payload must be {"approved": true|false, "reason"?: string, "args"?: object}'
    reason, args = payload.get("reason"), payload.get("args")
    if reason is not None and not isinstance(reason, str):
        return "payload.reason must be a string"
    if args is not None and not isinstance(args, dict):
        return "payload.args must be an object"
    return given("approve" if payload["approved"] else "deny", reason, args)


_TOOL_EVENTS = frozenset({EventType.TOOL_CALL_DELTA, EventType.TOOL_CALL, EventType.TOOL_RESULT})
_AGENT_ENDS = frozenset({EventType.AGENT_RESULT, EventType.AGENT_ERROR})


@dataclass
class _Waiting:
    """A tool call that waits for a person (its APPROVAL_REQUESTED)."""

    seq: int
    key: str | None
    wire_id: str
    asked: ApprovalRequestedData
    metadata: dict[str, Any]


@dataclass
class _Agent:
    key: str | None
    name: str
    text: str | None = None
    """The id of the text message streaming now."""
    reasoning: str | None = None
    """The id of the reasoning message streaming now."""
    calls: set[str] = field(default_factory=set)
    """Tool calls started (TOOL_CALL_START sent) with no result yet."""


class AguiStream:
    """One run as AG-UI events. `thread_id`/`run_id`: the client's (a RunAgentInput's);
    default the run's own id for both."""

    def __init__(
        self,
        run_id: str,
        *,
        thread_id: str | None = None,
        agui_run_id: str | None = None,
        snapshot: list[Message] | None = None,
    ) -> None:
        self.run_id = run_id
        self.thread_id = thread_id or run_id
        self.agui_run_id = agui_run_id or run_id
        self.snapshot = snapshot
        """The thread's chat so far (`chat_of`): a MESSAGES_SNAPSHOT right after
        RUN_STARTED, so a reloaded client sees it (None: none is sent)."""
        self._agents: dict[str | None, _Agent] = {}
        self._sessions: dict[str, str] = {}
        self._used: set[str] = set()
        """Tool-call ids this stream has given out."""
        self._wire: dict[tuple[str | None, str], str] = {}
        """(agentKey, the run's toolCallId) → the id on this stream, for its latest call."""
        self._streaming: dict[str, tuple[str | None, str]] = {}
        """Tool calls whose arguments stream in this segment (started, not ended):
        wire id → (agentKey, tool name)."""
        self._active: dict[str, dict[str, Any]] = {}
        """Subagents started and not ended, in start order: key → SUBAGENT_STARTED's
        fields."""
        self.waiting: dict[tuple[str | None, str], _Waiting] = {}
        """Calls that wait for a person now: (agentKey, toolCallId) → the request."""
        self.last_seq = 0
        """The seq of the last event fed."""
        self.final: Event | None = None
        """The run's RUN_FINISHED, once fed."""
        self._begun = False
        self._silent = False

    def prime(self, events: list[Event]) -> None:
        """Take in events a client already has (state only, nothing sent)."""
        self._silent = True
        try:
            for event in events:
                self.feed(event)
        finally:
            self._silent = False

    def begin(self) -> list[BaseEvent]:
        """Open a segment after the events fed so far: RUN_STARTED, then what is open
        there again (subagents, streaming messages and tool calls, with their ids)."""
        self._begun = True
        common: dict[str, Any] = {"metadata": {"runId": self.run_id, "seq": self.last_seq}}
        out: list[BaseEvent] = [
            RunStartedEvent(thread_id=self.thread_id, run_id=self.agui_run_id, **common)
        ]
        for key, started in self._active.items():
            out += [
                SubagentStartedEvent(**started, **common),
                StepStartedEvent(step_name=started["name"], subagent_run_id=key, **common),
            ]
        for agent in self._agents.values():
            sub: dict[str, Any] = {"subagent_run_id": agent.key} if agent.key is not None else {}
            if agent.reasoning is not None:
                out += [
                    ReasoningStartEvent(message_id=agent.reasoning, **common, **sub),
                    ReasoningMessageStartEvent(message_id=agent.reasoning, **common, **sub),
                ]
            if agent.text is not None:
                out.append(
                    TextMessageStartEvent(
                        message_id=agent.text, role="assistant", name=agent.name, **common, **sub
                    )
                )
        for wire_id, (owner, name) in self._streaming.items():
            sub = {"subagent_run_id": owner} if owner is not None else {}
            out.append(
                ToolCallStartEvent(tool_call_id=wire_id, tool_call_name=name, **common, **sub)
            )
        return out

    def interrupt(self) -> list[BaseEvent]:
        """End this segment because calls wait for a person (`waiting` is not empty):
        what is open is closed, the subagents above the calls end `suspended`, and
        RUN_FINISHED carries one interrupt per waiting call."""
        common: dict[str, Any] = {"metadata": {"runId": self.run_id, "seq": self.last_seq}}
        out: list[BaseEvent] = []
        for agent in self._agents.values():
            sub: dict[str, Any] = {"subagent_run_id": agent.key} if agent.key is not None else {}
            out += self._close(agent, common, sub)
        for wire_id, (key, _) in self._streaming.items():
            sub = {"subagent_run_id": key} if key is not None else {}
            out.append(ToolCallEndEvent(tool_call_id=wire_id, **common, **sub))
        self._streaming.clear()
        interrupts = [_interrupt(w, self.run_id, self.last_seq) for w in self.waiting.values()]
        owned: dict[str, list[str]] = {}
        for item in interrupts:
            if item.subagent_run_id is not None:
                owned.setdefault(item.subagent_run_id, []).append(item.id)
        for key, started in reversed(self._active.items()):
            out += [
                StepFinishedEvent(step_name=started["name"], subagent_run_id=key, **common),
                SubagentFinishedEvent(
                    subagent_run_id=key,
                    outcome=SubagentFinishedSuspendedOutcome(interrupt_ids=owned.get(key)),
                    **common,
                ),
            ]
        out.append(
            RunFinishedEvent(
                thread_id=self.thread_id,
                run_id=self.agui_run_id,
                outcome=RunFinishedInterruptOutcome(interrupts=interrupts),
                **common,
            )
        )
        self._begun = False
        return out

    def feed(self, event: Event) -> list[BaseEvent]:
        """The AG-UI events for one of the run's events."""
        self.last_seq = event.seq
        out = self._feed(event)
        return [] if self._silent else out

    def _feed(self, event: Event) -> list[BaseEvent]:
        kind, data = event.type, event.data
        key = event.source.agent_key if event.source is not None else None
        common = _common(self.run_id, event)
        if kind is EventType.RUN_STARTED:
            self._agents[None] = _Agent(
                None, str(cast(RunStartedData, data).get("agentId", "root"))
            )
            if self._begun:
                return []
            self._begun = True
            started: list[BaseEvent] = [
                RunStartedEvent(thread_id=self.thread_id, run_id=self.agui_run_id, **common)
            ]
            if self.snapshot is not None:
                started.append(MessagesSnapshotEvent(messages=self.snapshot, **common))
            return started
        if kind is EventType.RUN_FINISHED:
            self.final = event
            return self._finish_run(event, common)
        agent = self._agent(event)
        sub: dict[str, Any] = {"subagent_run_id": key} if key is not None else {}
        if kind is EventType.REASONING:
            return self._reasoning(agent, event, common, sub)
        if kind in _TOOL_EVENTS:
            return self._tool_event(event, agent, common, sub)
        if kind is EventType.APPROVAL_REQUESTED:
            asked = cast(ApprovalRequestedData, data)
            theirs = str(asked.get("toolCallId", ""))
            wire = self._wire.get((key, theirs), theirs)
            metadata = {**common["metadata"], "toolCallId": theirs}
            self.waiting[(key, theirs)] = _Waiting(event.seq, key, wire, asked, metadata)
        elif kind is EventType.APPROVAL_RESOLVED:
            resolved = cast(ApprovalResolvedData, data)
            self.waiting.pop((key, str(resolved.get("toolCallId", ""))), None)
        elif kind in _AGENT_ENDS or (kind is EventType.AGENT_STARTED and key is not None):
            return self._agent_event(event, agent, key, common, sub)
        return [CustomEvent(name=f"orchestrator.{kind.value}", value=data, **common, **sub)]

    def _tool_event(
        self, event: Event, agent: _Agent, common: dict[str, Any], sub: dict[str, Any]
    ) -> list[BaseEvent]:
        """A tool call's events: its arguments streaming, the call, its result."""
        kind = event.type
        about = cast(ToolCallDeltaData | ToolCallData | ToolResultData, event.data)
        call_id = self._call_id(agent, str(about.get("toolCallId", "")), common)
        if kind is EventType.TOOL_CALL_DELTA:
            streaming = cast(ToolCallDeltaData, event.data)
            out = self._start_call(agent, call_id, str(streaming.get("name", "")), common, sub)
            delta = str(streaming.get("argsDelta", ""))
            if delta:
                out.append(ToolCallArgsEvent(tool_call_id=call_id, delta=delta, **common, **sub))
            return out
        if kind is EventType.TOOL_CALL:
            call = cast(ToolCallData, event.data)
            out = []
            if call_id not in agent.calls:
                out = self._start_call(agent, call_id, str(call.get("name", "")), common, sub)
                args = call.get("args")
                text = args if isinstance(args, str) else json.dumps(args, ensure_ascii=False)
                if text:
                    out.append(ToolCallArgsEvent(tool_call_id=call_id, delta=text, **common, **sub))
            elif call_id not in self._streaming:  # its start was in an earlier segment
                out = self._start_call(agent, call_id, str(call.get("name", "")), common, sub)
            self._streaming.pop(call_id, None)
            out.append(ToolCallEndEvent(tool_call_id=call_id, **common, **sub))
            return out
        agent.calls.discard(call_id)  # TOOL_RESULT
        return [
            ToolCallResultEvent(
                message_id=f"{self._prefix(agent)}:result:{call_id}",
                tool_call_id=call_id,
                content=str(cast(ToolResultData, event.data).get("content", "")),
                role="tool",
                **common,
                **sub,
            )
        ]

    def _agent_event(
        self,
        event: Event,
        agent: _Agent,
        key: str | None,
        common: dict[str, Any],
        sub: dict[str, Any],
    ) -> list[BaseEvent]:
        """A subagent starts (SUBAGENT_STARTED, a step) or ends (its result or error)."""
        kind = event.type
        if kind is EventType.AGENT_STARTED and key is not None and event.source is not None:
            source = event.source
            parent = self._sessions.get(source.parent_session_id) if source.depth > 1 else None
            self._sessions[source.session_id] = key
            spawned_by = source.parent_tool_call_id
            if spawned_by is not None:
                spawned_by = self._wire.get((parent, spawned_by), spawned_by)
            started: dict[str, Any] = {
                "subagent_run_id": key,
                "name": source.agent_name,
                "description": str(cast(AgentStartedData, event.data).get("task", "")) or None,
                "parent_subagent_run_id": parent,
                "parent_tool_call_id": spawned_by,
            }
            self._active[key] = started
            return [
                SubagentStartedEvent(**started, **common),
                StepStartedEvent(step_name=source.agent_name, subagent_run_id=key, **common),
            ]
        out = self._close(agent, common, sub)  # AGENT_RESULT, AGENT_ERROR
        if key is None:
            return out  # the root's end is the run's (RUN_FINISHED)
        self._active.pop(key, None)
        out.append(StepFinishedEvent(step_name=agent.name, subagent_run_id=key, **common))
        if kind is EventType.AGENT_RESULT:
            answer = cast(AgentResultData, event.data)
            out.append(
                SubagentFinishedEvent(
                    subagent_run_id=key,
                    # a structured answer as its JSON value; any other as its text
                    result=answer["structured"] if "structured" in answer else answer["text"],
                    outcome=SubagentFinishedSuccessOutcome(),
                    **common,
                )
            )
        else:
            error = cast(AgentErrorData, event.data)
            out.append(
                SubagentErrorEvent(
                    subagent_run_id=key,
                    message=str(error.get("message", "")) or "failed",
                    code=str(error.get("errorType", "error")),
                    **common,
                )
            )
        return out

    # -- parts -----------------------------------------------------------------------

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
            return self._close(agent, common, sub)
        thinking = cast(ThinkingDeltaData, data).get("thinkingDelta")
        if isinstance(thinking, str):
            if not thinking:
                return []
            if agent.reasoning is None:
                message = agent.reasoning = f"{self._prefix(agent)}:{event.seq}:reasoning"
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
        delta = cast(ReasoningDeltaData, data).get("delta")
        if not isinstance(delta, str) or not delta:
            return []
        out += self._end_reasoning(agent, common, sub)
        if agent.text is None:
            agent.text = f"{self._prefix(agent)}:{event.seq}:text"
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
        if call_id in self._streaming:
            return []
        agent.calls.add(call_id)
        self._streaming[call_id] = (agent.key, name or "tool")
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

    def finish(self) -> list[BaseEvent]:
        """The end of a segment begun after the run's RUN_FINISHED (a reconnect to a
        run that has ended)."""
        if self.final is None or not self._begun:
            return []
        return self._finish_run(self.final, _common(self.run_id, self.final))

    def _finish_run(self, event: Event, common: dict[str, Any]) -> list[BaseEvent]:
        data, out = cast(RunFinishedData, event.data), []
        self._begun = False
        for agent in self._agents.values():
            sub: dict[str, Any] = {"subagent_run_id": agent.key} if agent.key is not None else {}
            out += self._close(agent, common, sub)
        for wire_id, (key, _) in self._streaming.items():  # cut off by a cancel
            sub = {"subagent_run_id": key} if key is not None else {}
            out.append(ToolCallEndEvent(tool_call_id=wire_id, **common, **sub))
        self._streaming.clear()
        for key, started in reversed(self._active.items()):  # ended with the run
            out.append(StepFinishedEvent(step_name=started["name"], subagent_run_id=key, **common))
            out.append(
                SubagentErrorEvent(
                    subagent_run_id=key, message="the run ended first", code="cancelled", **common
                )
            )
        self._active.clear()
        out.append(_run_end(data, self.thread_id, self.agui_run_id, common))
        return out


def _run_end(
    data: RunFinishedData, thread_id: str, run_id: str, common: dict[str, Any]
) -> BaseEvent:
    """The AG-UI end of a run that ended as RUN_FINISHED `data` says."""
    status = str(data.get("status", "completed"))
    if status == "completed":
        return RunFinishedEvent(
            thread_id=thread_id,
            run_id=run_id,
            result=data["structured"] if "structured" in data else data.get("result"),
            outcome=RunFinishedSuccessOutcome(),
            **common,
        )
    if status == "cancelled":
        outcome = RunFinishedCancelledOutcome()
        return RunFinishedEvent(thread_id=thread_id, run_id=run_id, outcome=outcome, **common)
    message = str(data.get("error") or f"the run ended {status}")
    return RunErrorEvent(message=message, code=status, **common)


def _interrupt(waiting: _Waiting, run_id: str, end_seq: int) -> Interrupt:
    """The AG-UI interrupt of a call that waits for a person, in a segment ending at
    `end_seq`."""
    data = waiting.asked
    name = str(data.get("name", "tool"))
    agent = waiting.metadata.get("agentId") or "the agent"
    schema: dict[str, Any] = {
        "type": "object",
        "properties": {
            "approved": {"type": "boolean"},
            "reason": {"type": "string"},
        },
        "required": ["approved"],
    }
    if data.get("edit"):
        schema["properties"]["args"] = {"type": "object"}
    timeout_at = data.get("timeoutAt")
    return Interrupt(
        id=interrupt_id(run_id, waiting.seq, end_seq),
        reason="tool_approval",
        message=f"{agent} asks to run {name} with {json.dumps(data.get('args'))}",
        tool_call_id=waiting.wire_id,
        response_schema=schema,
        expires_at=(_iso(float(timeout_at)) if isinstance(timeout_at, (int, float)) else None),
        metadata={
            **waiting.metadata,
            "name": name,
            "args": data.get("args"),
            "edit": bool(data.get("edit")),
        },
        **({"subagent_run_id": waiting.key} if waiting.key is not None else {}),
    )


def _common(run_id: str, event: Event) -> dict[str, Any]:
    """The fields every AG-UI event of `event` has: its time and where it came from."""
    source = event.source
    metadata: dict[str, Any] = {"runId": run_id, "seq": event.seq}
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


def _iso(ts: float) -> str:
    from datetime import UTC, datetime

    return datetime.fromtimestamp(ts, UTC).isoformat().replace("+00:00", "Z")
