"""Which agents of a run are stalled: running, waiting for nobody, and silent.

An agent is *stalled* when it is running, has no call waiting for a person, has no
running children of its own (a parent whose children work is waiting for them, and
they are watched themselves), and has produced no event for `stall_seconds`. It is
marked once per silence (AGENT_STALLED `stalled: true`, written by `runs/stalls.py`);
its next event of any other type ends the silence, and the server says so too
(`stalled: false`) for watchers that do not see every event (`detail: status`).

`StallWatch` is pure: it is told a run's committed events with the time they were
seen, and asked which agents are due. The shell feeds it as a journal follower, so
it costs the forwarding path nothing: it reads each committed batch once, in the
journal writer's hand-over, only while stall detection is on.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import cast

import msgspec

from agents.core.payloads import AgentStalledData, ToolCallData, ToolResultData
from orchestrator.core.events import Event, EventType, Source

__all__ = ["HANDLES", "IGNORES", "Stall", "StallWatch"]

HANDLES = frozenset(
    {
        EventType.REASONING,
        EventType.TOOL_CALL_DELTA,
        EventType.AGENT_STARTED,
        EventType.AGENT_RESULT,
        EventType.AGENT_ERROR,
        EventType.APPROVAL_REQUESTED,
        EventType.APPROVAL_RESOLVED,
        EventType.TOOL_CALL,
        EventType.TOOL_RESULT,
        EventType.AGENT_STALLED,
        EventType.RUN_FINISHED,
    }
)
"""Event types read here: deltas (looked at in bulk) and the ones that change an agent's
state; every other type only says its agent is active."""
IGNORES = frozenset(
    {
        EventType.RUN_STARTED,
        EventType.USER_MESSAGE,
        EventType.TOOL_PROGRESS,
        EventType.RUN_RESUMED,
        EventType.TURN_ABANDONED,
        EventType.COMPACTION_STARTED,
        EventType.COMPACTION_FINISHED,
        EventType.MODEL_FALLBACK,
    }
)
"""Event types that only say the agent is active."""


_REASONING, _ARGS_DELTA = EventType.REASONING, EventType.TOOL_CALL_DELTA
_RESULT, _ERROR = EventType.AGENT_RESULT, EventType.AGENT_ERROR


class Stall(msgspec.Struct, frozen=True):
    """An agent that is due to be marked stalled."""

    agent_key: str | None
    """None: the root agent."""
    source: Source | None
    data: AgentStalledData


class _Agent:
    __slots__ = (
        "children",
        "ended",
        "last_seen",
        "last_seq",
        "parent",
        "source",
        "stalled",
        "tools",
        "waiting",
    )

    def __init__(self, source: Source | None, parent: str | None, seen: float) -> None:
        self.source = source
        """The Source its events carry (None: the root), for its AGENT_STALLED."""
        self.parent = parent
        self.children = 0
        """Its children still running."""
        self.waiting = 0
        """Its calls waiting for a person."""
        self.tools: dict[str, str] = {}
        """Its calls started and not answered: toolCallId → tool name."""
        self.last_seen = seen
        self.last_seq = 0
        self.stalled = False
        self.ended = False


class StallWatch:
    """One run's agents as stall detection sees them."""

    def __init__(self, started: float) -> None:
        self._agents: dict[str | None, _Agent] = {None: _Agent(None, None, started)}
        """By agentKey (None: the root, silent since `started` until it emits)."""
        self._by_session: dict[str, str] = {}
        self.ended = False
        """The run finished: nothing more is due."""
        self.stalled = 0
        """Agents marked stalled now."""
        self.moved: list[Stall] = []
        """Marked agents that emitted again since: their clearing AGENT_STALLED is due."""

    def _agent(self, source: Source | None, seen: float) -> _Agent:
        key = None if source is None else source.agent_key
        agent = self._agents.get(key)
        if agent is None:
            parent = None
            if source is not None:
                parent = self._by_session.get(source.parent_session_id)
                self._by_session[source.session_id] = source.agent_key
            agent = self._agents[key] = _Agent(source, parent, seen)
        return agent

    def apply(self, events: Iterable[Event], seen: float) -> None:
        """Committed events of the run, in seq order, seen at `seen` (trio's clock).

        Deltas are most of a run's events and only say their agent is active: of a
        batch's run of them only each agent's last is looked at (a dict store per
        event; the enum's members are compared by identity, read once).
        """
        active: dict[int, Event] = {}
        first: dict[int, Event] = {}  # (only while an agent is marked: where it moved)
        for event in events:
            kind = event.type
            if kind is _REASONING or kind is _ARGS_DELTA:
                active[id(event.source)] = event
                if self.stalled:
                    first.setdefault(id(event.source), event)
                continue
            if active:  # (in order: the deltas before this event come first)
                for key, latest in active.items():
                    self._active(latest, seen, first.get(key))
                active, first = {}, {}
            self._apply(event, kind, seen)
        for key, latest in active.items():
            self._active(latest, seen, first.get(key))

    def _active(self, event: Event, seen: float, moved: Event | None = None) -> _Agent:
        """The event's agent did something (`moved`: the first of it, when the batch had
        several): its silence, if any, ended there."""
        agent = self._agent(event.source, seen)
        if agent.stalled:
            agent.stalled = False
            self.stalled -= 1
            if event.type is not _RESULT and event.type is not _ERROR:  # (an end says it)
                data: AgentStalledData = {
                    "stalled": False,
                    "silentSeconds": round(seen - agent.last_seen, 1),
                    "lastSeq": (moved or event).seq,
                }
                key = None if event.source is None else event.source.agent_key
                self.moved.append(Stall(key, event.source, data))
        agent.last_seen, agent.last_seq = seen, event.seq
        return agent

    def _apply(self, event: Event, kind: EventType, seen: float) -> None:
        if kind is EventType.RUN_FINISHED:
            self.ended = True
            self.stalled = 0
            return
        if kind is EventType.AGENT_STALLED:
            self._agent(event.source, seen)
            if cast(AgentStalledData, event.data)["stalled"]:
                self.mark(None if event.source is None else event.source.agent_key)
            return
        agent = self._active(event, seen)
        if kind is EventType.AGENT_STARTED:
            parent = self._agents.get(agent.parent)
            if parent is not None:
                parent.children += 1
        elif kind is _RESULT or kind is _ERROR:
            self._ended(agent, event)
        elif kind is EventType.APPROVAL_REQUESTED:
            agent.waiting += 1
        elif kind is EventType.APPROVAL_RESOLVED:
            agent.waiting = max(0, agent.waiting - 1)
        elif kind is EventType.TOOL_CALL:
            call = cast(ToolCallData, event.data)
            agent.tools[call["toolCallId"]] = call["name"]
        elif kind is EventType.TOOL_RESULT:
            agent.tools.pop(cast(ToolResultData, event.data)["toolCallId"], None)

    def _ended(self, agent: _Agent, event: Event) -> None:
        if not agent.ended:
            agent.ended = True
            parent = self._agents.get(agent.parent)
            if parent is not None and event.source is not None:
                parent.children -= 1

    def mark(self, agent_key: str | None) -> None:
        """The agent is marked stalled (once: its AGENT_STALLED was written)."""
        agent = self._agents.get(agent_key)
        if agent is not None and not agent.stalled and not agent.ended:
            agent.stalled = True
            self.stalled += 1

    def due(self, now: float, stall_seconds: float) -> list[Stall]:
        """Agents silent for `stall_seconds` by `now` that are not marked yet (the
        caller writes their AGENT_STALLED, which marks them when it comes back)."""
        if self.ended:
            return []
        found = []
        for key, agent in self._agents.items():
            if agent.ended or agent.stalled or agent.waiting or agent.children > 0:
                continue
            silent = now - agent.last_seen
            if silent < stall_seconds:
                continue
            data: AgentStalledData = {
                "stalled": True,
                "silentSeconds": round(silent, 1),
                "lastSeq": agent.last_seq,
            }
            if agent.tools:
                data["tool"] = next(reversed(agent.tools.values()))
            found.append(Stall(key, agent.source, data))
        return found
