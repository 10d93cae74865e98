"""Rebuild a run's agents from its journal, to continue it after its worker died.

Pure: events in, a plan out. For every agent instance (the root is keyed None) the
plan holds its Source, its conversation as its model saw it — the task, each
finished turn (the `last` REASONING: text and tool calls), the tool results in
call order, the messages sent into it — and what was in flight when the journal
stopped:

- `pending`: tool calls of its last finished turn that have no result yet. The
  new worker runs them again only when the tool says so (`idempotent`; an
  `agent_spawn` continues its child the same way), else their result is an error.
- `cut_off`: deltas of a turn that never finished. They stay in the journal, a
  TURN_ABANDONED event marks them, and the turn is asked of the model again.
- `ended`: the agent already has its terminal event.
- compactions: a COMPACTION_FINISHED replaces the older part of the conversation by
  its summary, as the runner did; one without its FINISHED (cut off, cancelled,
  failed) changes nothing.
- `approvals`: what the journal says of the pending calls' approvals: still
  waiting (`(requestedAt, timeoutAt)`: the call waits again, for the rest of its
  timeout, and can be answered as before) or decided (the `Decision`: a refused call
  is never run; an approved one runs again only if it is idempotent).

Children are attached to the spawn call that made them (`parentToolCallId`). A
child whose parent will not wait for it again — its call's result is already
journaled, or its call belongs to a turn that was cut off — is an orphan: it gets
an AGENT_ERROR `worker_lost` (with its own orphaned descendants), so every agent
still ends exactly once. Background children (`taskId`) are kept in their parent's
`background`: one still running goes on beside its continued parent, with its
taskId, and reports to it as before; one that ended before its report reached the
parent (no USER_MESSAGE from its taskId) reports its journaled result.

Forwarded events (a remote subagent's run, docs/remote.md) rebuild their agents like
local ones; `remote` keeps, per agentKey, the last remote event seen (the remote run
and seq to follow again from), when the events carry it (`Source.remote`).

Not rebuilt (docs/cluster.md): thinking blocks (the journal keeps no signatures),
token budgets spent before the takeover, idle children for `agent_send`.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NotRequired, TypedDict, cast

import msgspec

from agents.approval import Decision, Prior
from agents.core.attachments import AttachmentInfo, from_infos
from agents.core.compaction import summary_message
from agents.core.messages import (
    AssistantMessage,
    Inbound,
    Message,
    ToolCall,
    ToolResultMessage,
    UserMessage,
)
from agents.core.payloads import (
    AgentErrorData,
    AgentResultData,
    AgentStartedData,
    ApprovalRequestedData,
    ApprovalResolvedData,
    CompactionFinishedData,
    RunFinishedData,
    RunStartedData,
    ToolResultData,
    TurnCallData,
    TurnEndData,
    UserMessageData,
)
from orchestrator.core.events import Event, EventType, RemoteRef, Source

__all__ = ["HANDLES", "IGNORES", "AgentPlan", "ResumePlan", "attachment_ids", "rebuild"]

HANDLES = frozenset(
    {
        EventType.RUN_STARTED,
        EventType.AGENT_STARTED,
        EventType.REASONING,
        EventType.TOOL_RESULT,
        EventType.AGENT_RESULT,
        EventType.AGENT_ERROR,
        EventType.USER_MESSAGE,
        EventType.APPROVAL_REQUESTED,
        EventType.APPROVAL_RESOLVED,
        EventType.COMPACTION_STARTED,
        EventType.COMPACTION_FINISHED,
        EventType.RUN_FINISHED,
    }
)
"""Event types a rebuild reads (the conversation, approvals, ends)."""
IGNORES = frozenset(
    {
        EventType.TOOL_CALL_DELTA,
        EventType.TOOL_CALL,
        EventType.TOOL_PROGRESS,
        EventType.AGENT_STALLED,
        EventType.RUN_RESUMED,
        EventType.TURN_ABANDONED,
        EventType.MODEL_FALLBACK,
    }
)
"""Event types a rebuild leaves aside: a turn's calls are in its `last` REASONING, a
cut-off turn is known by its missing `last`, a continued agent starts again from its
own model (not the one it fell back to); tests/unit/test_payloads.py checks that
every type is in one of the two."""


@dataclass
class AgentPlan:
    """One agent instance as the journal left it."""

    key: str | None
    source: Source | None
    agent_id: str
    messages: list[Message] = field(default_factory=list)
    pending: list[ToolCall] = field(default_factory=list)
    done: list[ToolResultMessage] = field(default_factory=list)
    """Results already journaled for the other calls of that last turn."""
    cut_off: bool = False
    ended: bool = False
    result: str | None = None
    structured: Any = msgspec.UNSET
    """Its validated answer, when it had an output schema (AGENT_RESULT `structured`)."""
    """The text of its AGENT_RESULT (None: it failed, or has not ended)."""
    error: str | None = None
    error_type: str | None = None
    """The `errorType` of its AGENT_ERROR."""
    children: dict[str, str] = field(default_factory=dict)
    """Spawn call id → the child's agentKey."""
    background: dict[str, tuple[str, str]] = field(default_factory=dict)
    """The agentKey of each background child → (its taskId, the spawn call's id)."""
    heard_from: set[str] = field(default_factory=set)
    """Senders of the messages it got (`from`: a background child's taskId, …)."""
    approvals: dict[str, Prior] = field(default_factory=dict)
    """Call id → its approval as journaled, for the calls in `pending` that had one."""
    inbox: list[Inbound] = field(default_factory=list)
    """A person's messages to deliver as it goes on (a fork's, `core/fork.py`; a
    cluster `send` that came before it was rebuilt, `Continuation.hold`)."""
    controls: set[str] = field(default_factory=set)
    """The control requests whose messages it got (USER_MESSAGE `control`)."""
    # Assembly state: the open turn's calls and the results seen for them.
    _turn_calls: list[ToolCall] = field(default_factory=list)
    _results: dict[str, ToolResultMessage] = field(default_factory=dict)
    _inbox: list[UserMessage] = field(default_factory=list)
    _in_turn: bool = False
    _compacting: int | None = None
    """The conversation's length when a compaction started (None: none running)."""


@dataclass
class ResumePlan:
    """The run's agents, and what the new worker must emit before going on. A fresh
    run's plan is empty (`ResumePlan()`): no agent, nothing journaled."""

    agents: dict[str | None, AgentPlan] = field(default_factory=dict)
    last_seq: int = 0
    finished: bool = False
    """RUN_FINISHED is already journaled: nothing to continue."""
    remote: dict[str, RemoteRef] = field(default_factory=dict)
    """agentKey → the last forwarded event of that agent (its remote run and seq)."""
    status: str | None = None
    """The status its RUN_FINISHED says (when `finished`)."""
    end_now: list[AgentPlan] = field(default_factory=list)
    """Agents the continuation ends first, with their `error_type` and `error` (a
    fork's remote subtrees, `core/fork.py`)."""

    def remote_cursor(self, agent_key: str) -> RemoteRef | None:
        """Where to follow a remote child's run again: its runId and the last seq of
        that run in this journal (None: none of its events came through)."""
        mine = self.remote.get(agent_key)
        if mine is None:
            return None
        seq = max(r.seq for r in self.remote.values() if r.run_id == mine.run_id)
        return RemoteRef(run_id=mine.run_id, seq=seq)

    @property
    def fresh(self) -> bool:
        """Nothing journaled: the run starts from its input."""
        return not self.agents

    @property
    def root(self) -> AgentPlan:
        """The root agent."""
        return self.agents[None]

    def cut_off(self) -> list[AgentPlan]:
        """Agents still running whose model turn was cut off (they get TURN_ABANDONED;
        not a remote subtree's, whose turns go on there and are followed again)."""
        followed = self.followed()
        return [
            a for a in self.agents.values() if a.cut_off and not a.ended and a.key not in followed
        ]

    def remote_children(self) -> dict[str, AgentPlan]:
        """Remote runId → the child it runs as here (the shallowest of its agents)."""
        roots: dict[str, AgentPlan] = {}
        for key, ref in self.remote.items():
            agent = self.agents.get(key)
            if agent is None or agent.source is None:
                continue
            known = roots.get(ref.run_id)
            if known is None or (
                known.source is not None and agent.source.depth < known.source.depth
            ):
                roots[ref.run_id] = agent
        return roots

    def followed(self) -> set[str]:
        """The forwarded agents of remote children that have not ended: their runs
        there are followed again, so they are neither cut off nor orphaned here."""
        roots = self.remote_children()
        return {
            key
            for key, ref in self.remote.items()
            if ref.run_id in roots and not roots[ref.run_id].ended
        }

    def orphans(self) -> list[AgentPlan]:
        """Agents without a terminal event that nobody will wait for (children first)."""
        waiting: set[str] = set()

        def collect(agent: AgentPlan) -> None:
            for call in agent.pending:
                child = agent.children.get(call.id)
                if child is not None and child in self.agents:
                    waiting.add(child)
                    collect(self.agents[child])

            for key in agent.background:
                running = self.agents.get(key)
                if running is not None and not running.ended and key not in self.remote:
                    waiting.add(key)
                    collect(running)

        root = self.agents.get(None)
        if root is not None and not root.ended:
            collect(root)
        waiting |= self.followed()
        lost = [
            a
            for key, a in self.agents.items()
            if key is not None and not a.ended and key not in waiting
        ]
        return sorted(lost, key=lambda a: -(a.source.depth if a.source else 0))

    def background_of(self, parent: AgentPlan) -> list[tuple[AgentPlan, str, str]]:
        """The background children to pick up again beside their continued parent, as
        (child, taskId, spawn call id): those still running, and those that ended
        before their report reached the parent (a remote subtree's are its own)."""
        if parent.key is not None and parent.key in self.remote:
            return []
        out = []
        for key, (task_id, call_id) in parent.background.items():
            child = self.agents.get(key)
            if child is None or key in self.remote:
                continue
            if not child.ended or task_id not in parent.heard_from:
                out.append((child, task_id, call_id))
        return out

    def child_of(self, parent: AgentPlan, call_id: str) -> AgentPlan | None:
        """The child a pending spawn call made (None: it had not started one)."""
        key = parent.children.get(call_id)
        return None if key is None else self.agents.get(key)


def rebuild(
    events: Sequence[Event],
    *,
    history: Sequence[Message] = (),
    continued: Mapping[str, Sequence[Message]] | None = None,
    on_turn: Callable[[AgentPlan], None] | None = None,
    after: Callable[[Event], None] | None = None,
    blobs: Mapping[str, bytes] | None = None,
) -> ResumePlan:
    """The plan for continuing the run whose journal is `events` (all of them, in order).

    `history`: the conversation the run's root started from, before its input (a
    thread's earlier runs: `runs/threads.py`); `continued`: by agentKey, the
    conversation each child that continues an earlier run's agent started from (its
    AGENT_STARTED's `continues`). `on_turn` is told of each agent whose
    model turn begins, its conversation then as the model was asked it; `after`, of
    each event of an agent once it is applied (a fork's recording reads the turns that
    way: `core/fork.py`). `blobs`: the bytes of the attachments its events name
    (`attachment_ids`), read from the store beforehand.
    """
    blobs = blobs or {}
    agents: dict[str | None, AgentPlan] = {}
    by_session: dict[str, AgentPlan] = {}
    remote: dict[str, RemoteRef] = {}
    finished, status = False, None
    for event in events:
        key = event.source.agent_key if event.source is not None else None
        kind, data = event.type, event.data
        if event.source is not None and isinstance(event.source.remote, RemoteRef):
            remote[event.source.agent_key] = event.source.remote
        if kind is EventType.RUN_STARTED:
            started = cast(RunStartedData, data)
            agents[None] = AgentPlan(None, None, str(started.get("agentId", "")))
            agents[None].messages.extend(history)
            given = from_infos(started.get("attachments", ()), blobs)
            agents[None].messages.append(
                UserMessage(text=str(started.get("input", "")), attachments=given)
            )
            continue
        if kind is EventType.RUN_FINISHED:
            finished, status = True, str(cast(RunFinishedData, data).get("status", "failed"))
            continue
        if kind is EventType.AGENT_STARTED and event.source is not None:
            source = event.source
            child = AgentPlan(key, source, source.agent_id)
            if continued:
                child.messages.extend(continued.get(source.agent_key, ()))
            spawned = cast(AgentStartedData, data)
            given = from_infos(spawned.get("attachments", ()), blobs)
            child.messages.append(UserMessage(text=str(spawned.get("task", "")), attachments=given))
            agents[key] = child
            by_session[source.session_id] = child
            parent = (
                agents.get(None) if source.depth == 1 else by_session.get(source.parent_session_id)
            )
            if parent is not None and source.parent_tool_call_id and source.task_id is None:
                parent.children[source.parent_tool_call_id] = source.agent_key
            elif parent is not None and source.parent_tool_call_id and source.task_id:
                parent.background[source.agent_key] = (source.task_id, source.parent_tool_call_id)
            continue
        agent = agents.get(key)
        if agent is None:
            continue
        _apply(agent, event, on_turn, blobs)
        if after is not None:
            after(event)
    for agent in agents.values():
        if not agent._in_turn and agent._turn_calls:
            agent.pending = [c for c in agent._turn_calls if c.id not in agent._results]
            agent.done = [agent._results[c.id] for c in agent._turn_calls if c.id in agent._results]
        open_calls = {c.id for c in agent.pending}
        agent.approvals = {k: v for k, v in agent.approvals.items() if k in open_calls}
        agent.messages.extend(agent._inbox)
        agent._inbox.clear()
    if None not in agents:
        agents[None] = AgentPlan(None, None, "")
    return ResumePlan(agents, events[-1].seq if events else 0, finished, remote, status)


def _apply(
    agent: AgentPlan,
    event: Event,
    on_turn: Callable[[AgentPlan], None] | None,
    blobs: Mapping[str, bytes],
) -> None:
    """One of an agent's own events, into its plan (as its runner saw it)."""
    kind, data = event.type, event.data
    if kind is EventType.REASONING:
        if not agent._in_turn:
            _start_turn(agent)
            if on_turn is not None:
                on_turn(agent)
        if event.last:
            _finish_turn(agent, cast(TurnEndData, data))
        else:
            agent.cut_off = True
    elif kind is EventType.TOOL_RESULT and not (result := cast(ToolResultData, data)).get("server"):
        call_id = str(result.get("toolCallId", ""))
        agent._results[call_id] = ToolResultMessage(
            tool_call_id=call_id,
            name=str(result.get("name", "")),
            content=str(result.get("content", "")),
            is_error=bool(result.get("isError", False)),
            attachments=from_infos(result.get("attachments", ()), blobs),
        )
        _settle(agent)
    elif kind is EventType.USER_MESSAGE:
        message = cast(UserMessageData, data)
        given = from_infos(message.get("attachments", ()), blobs)
        agent._inbox.append(UserMessage(text=str(message.get("text", "")), attachments=given))
        agent.heard_from.add(str(message.get("from", "")))
        if "control" in message:
            agent.controls.add(message["control"])
    elif kind is EventType.COMPACTION_STARTED:
        _flush_turn(agent)  # as the runner: the turn's results and the inbox are in
        agent.messages.extend(agent._inbox)
        agent._inbox.clear()
        agent._compacting = len(agent.messages)
    elif kind is EventType.COMPACTION_FINISHED and agent._compacting is not None:
        _compacted(agent, cast(CompactionFinishedData, data))
    elif kind is EventType.APPROVAL_REQUESTED:
        asked = cast(ApprovalRequestedData, data)
        timeout_at = asked.get("timeoutAt")
        if isinstance(timeout_at, (int, float)):
            agent.approvals[str(asked.get("toolCallId", ""))] = (event.ts, float(timeout_at))
    elif kind is EventType.APPROVAL_RESOLVED:
        resolved = cast(ApprovalResolvedData, data)
        agent.approvals[str(resolved.get("toolCallId", ""))] = _decision(resolved)
    elif kind is EventType.AGENT_RESULT:
        answer = cast(AgentResultData, data)
        agent.ended, agent.result = True, str(answer.get("text", ""))
        agent.structured = answer.get("structured", msgspec.UNSET)
    elif kind is EventType.AGENT_ERROR:
        error = cast(AgentErrorData, data)
        agent.ended, agent.error = True, str(error.get("message", ""))
        agent.error_type = str(error.get("errorType", "failed"))


def _start_turn(agent: AgentPlan) -> None:
    """The first event of a new model turn: what waited in the inbox goes before it."""
    _flush_turn(agent)
    agent.messages.extend(agent._inbox)
    agent._inbox.clear()
    agent._in_turn = True


def _finish_turn(agent: AgentPlan, data: TurnEndData) -> None:
    calls = tuple(_tool_call(c) for c in data.get("toolCalls") or ())
    agent.messages.append(AssistantMessage(text=str(data.get("text", "")), tool_calls=calls))
    agent._turn_calls = list(calls)
    agent._in_turn = False
    agent.cut_off = False
    _settle(agent)


def _compacted(agent: AgentPlan, data: CompactionFinishedData) -> None:
    """Replay a compaction: the task, the summary, the messages it kept — as the runner
    made them (`summary_message`), so the run goes on from the compacted conversation."""
    at = agent._compacting
    assert at is not None
    kept = int(data.get("keptMessages", 0))
    turns = int(data.get("summarizedTurns", 0))
    messages = agent.messages
    head = messages[:1]
    tail = messages[max(at - kept, 1) : at] + messages[at:]
    summary = summary_message(str(data.get("summary", "")), turns)
    agent.messages = [*head, summary, *tail]
    agent._compacting = None


def _settle(agent: AgentPlan) -> None:
    """Once every call of the last finished turn has its result, they join the conversation."""
    if agent._in_turn or not agent._turn_calls:
        return
    if all(c.id in agent._results for c in agent._turn_calls):
        _flush_turn(agent)


def _flush_turn(agent: AgentPlan) -> None:
    calls = agent._turn_calls
    if calls:
        agent.messages.extend(agent._results[c.id] for c in calls if c.id in agent._results)
    agent._turn_calls = []
    agent._results = {}


def _decision(data: ApprovalResolvedData) -> Decision:
    kind = data.get("decision")
    args = data.get("args")
    reason = data.get("reason")
    return Decision(
        decision=kind if kind in ("approve", "deny", "timeout") else "cancelled",
        by=str(data.get("by", "")),
        reason=reason if isinstance(reason, str) else None,
        args=args if isinstance(args, dict) else None,
    )


def _tool_call(data: TurnCallData) -> ToolCall:
    args = data.get("args")
    arguments = args if isinstance(args, str) else json.dumps(args, separators=(",", ":"))
    return ToolCall(
        id=str(data.get("toolCallId", "")), name=str(data.get("name", "")), arguments=arguments
    )


class _Attached(TypedDict):
    """The field the four events that name attachments share."""

    attachments: NotRequired[list[AttachmentInfo]]


_NAMING = (
    EventType.RUN_STARTED,
    EventType.AGENT_STARTED,
    EventType.USER_MESSAGE,
    EventType.TOOL_RESULT,
)


def attachment_ids(events: Sequence[Event]) -> list[str]:
    """The attachments the events name (their bytes are to be read before `rebuild`)."""
    found: dict[str, None] = {}
    for event in events:
        if event.type in _NAMING:
            for info in cast(_Attached, event.data).get("attachments", ()):
                found[info["id"]] = None
    return list(found)
