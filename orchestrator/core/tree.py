"""A live model of an agent tree, built from a run's events (pure).

The CLI renders it; so will any watcher. It tolerates partial streams: an
event from an agent it has not seen start (a filtered or resumed feed) creates
that agent's node on the spot, under its parent if known, else under the root.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, cast

from agents.core.payloads import (
    AgentErrorData,
    AgentResultData,
    AgentStalledData,
    AgentStartedData,
    ApprovalRequestedData,
    ApprovalResolvedData,
    ModelFallbackData,
    ReasoningData,
    RunFinishedData,
    RunStartedData,
    ToolCallData,
    ToolCallDeltaData,
    ToolResultData,
    TurnEndData,
    UserMessageData,
)
from orchestrator.core.events import Event, EventType, Source

__all__ = ["HANDLES", "IGNORES", "AgentNode", "TreeView"]

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
        EventType.USER_MESSAGE,
        EventType.APPROVAL_REQUESTED,
        EventType.APPROVAL_RESOLVED,
        EventType.COMPACTION_STARTED,
        EventType.COMPACTION_FINISHED,
        EventType.AGENT_STALLED,
        EventType.MODEL_FALLBACK,
        EventType.RUN_FINISHED,
    }
)
"""Event types the tree view reads."""
IGNORES = frozenset(
    {
        EventType.TOOL_PROGRESS,
        EventType.RUN_RESUMED,
        EventType.TURN_ABANDONED,
    }
)
"""Event types the tree view leaves aside: progress, and a resume's notices;
tests/unit/test_payloads.py checks that every type is in one of the two."""

ROOT = "root"
_TAIL = 4000


class AgentNode:
    """One agent instance as the tree shows it."""

    __slots__ = (
        "agent_id",
        "children",
        "compacting",
        "compactions",
        "depth",
        "error",
        "key",
        "model",
        "name",
        "pending",
        "result",
        "stalled",
        "status",
        "structured",
        "task",
        "text",
        "thinking",
        "tools_running",
        "turn_done",
        "turns",
        "usage",
        "waiting",
    )

    def __init__(self, key: str, agent_id: str, name: str, depth: int) -> None:
        self.key = key
        self.agent_id = agent_id
        self.name = name
        self.depth = depth
        self.status = "running"
        """`running`, `done`, or the AGENT_ERROR errorType."""
        self.task = ""
        self.text = ""
        """The current turn's streamed text (its tail)."""
        self.thinking = False
        self.result: str | None = None
        self.structured: Any = None
        """An output schema's validated answer (AGENT_RESULT `structured`)."""
        self.model: str | None = None
        """The model key that answers it now, once a MODEL_FALLBACK moved it."""
        self.error: str | None = None
        self.tools_running: list[str] = []
        self.pending: dict[str, dict[str, Any]] = {}
        """Tool calls still streaming their arguments: toolCallId → fields so far."""
        self.turns = 0
        self.compacting = False
        """Its conversation is being summarized (COMPACTION_STARTED, not yet FINISHED)."""
        self.compactions = 0
        """Compactions finished."""
        self.turn_done = False
        self.waiting: dict[str, str] = {}
        """Tool calls waiting for approval: toolCallId → tool name."""
        self.usage: dict[str, Any] | None = None
        self.children: list[str] = []
        self.stalled: float | None = None
        """Seconds it had been silent when marked stalled (AGENT_STALLED); None once it
        emits again (or the server says it moved)."""

    @property
    def finished(self) -> bool:
        """True once the agent returned or failed."""
        return self.status != "running"


class TreeView:
    """Apply events in seq order; walk the nodes depth-first to draw them."""

    def __init__(self) -> None:
        self.nodes: dict[str, AgentNode] = {}
        self._by_session: dict[str, str] = {}
        self.run_id: str | None = None
        self.run_status = "running"
        self.result: str | None = None
        self.error: str | None = None
        self.input = ""
        self.last_seq = 0

    @property
    def root(self) -> AgentNode:
        """The root agent's node (created on first use)."""
        node = self.nodes.get(ROOT)
        if node is None:
            node = self.nodes[ROOT] = AgentNode(ROOT, "root", "root", 0)
        return node

    def walk(self) -> Iterator[AgentNode]:
        """Every node, parents before children, siblings in spawn order."""
        stack = [self.root]
        while stack:
            node = stack.pop()
            yield node
            stack.extend(self.nodes[k] for k in reversed(node.children))

    def _node(self, source: Source | None) -> AgentNode:
        if source is None:
            return self.root
        node = self.nodes.get(source.agent_key)
        if node is None:
            node = AgentNode(source.agent_key, source.agent_id, source.agent_name, source.depth)
            self.nodes[source.agent_key] = node
            self._by_session[source.session_id] = source.agent_key
            parent_key = self._by_session.get(source.parent_session_id, ROOT)
            parent = self.nodes.get(parent_key) or self.root
            parent.children.append(node.key)
        return node

    def apply(self, event: Event) -> None:
        """Update the tree with one event."""
        self.last_seq = max(self.last_seq, event.seq)
        self.run_id = event.run_id
        data = event.data
        kind = event.type
        if kind is EventType.RUN_STARTED:
            root, started = self.root, cast(RunStartedData, data)
            root.agent_id = root.name = str(started.get("agentId", "root"))
            self.input = root.task = str(started.get("input", ""))
            return
        if kind is EventType.RUN_FINISHED:
            finished = cast(RunFinishedData, data)
            self.run_status = str(finished.get("status", "completed"))
            self.result = finished.get("result")
            self.error = finished.get("error")
            return
        node = self._node(event.source)
        if kind is EventType.AGENT_STALLED:
            stall = cast(AgentStalledData, data)
            node.stalled = stall["silentSeconds"] if stall["stalled"] else None
            return
        node.stalled = None  # any other event of the agent clears the mark
        if kind is EventType.REASONING:
            if event.last:
                node.text = str(cast(TurnEndData, data).get("text", ""))[-_TAIL:]
                node.turns += 1
                node.thinking = False
                node.turn_done = True
            elif "delta" in (streamed := cast(ReasoningData, data)):
                node.thinking = False
                delta = streamed["delta"]
                if node.turn_done:  # a new turn starts: show its text only
                    node.text, node.turn_done = delta, False
                else:
                    node.text = (node.text + delta)[-_TAIL:]
            elif "thinkingDelta" in streamed:
                node.thinking = True
        elif kind is EventType.AGENT_STARTED:
            node.task = str(cast(AgentStartedData, data).get("task", ""))
            node.text = ""
        elif kind in _TOOL_EVENTS:
            _apply_tool(node, kind, data)
        elif kind is EventType.COMPACTION_STARTED:
            node.compacting = True
        elif kind is EventType.COMPACTION_FINISHED:
            node.compacting = False
            node.compactions += 1
        elif kind is EventType.MODEL_FALLBACK:
            fell = cast(ModelFallbackData, data)
            node.model = fell["to"]
            node.text = f"⇄ model {fell['from']} → {fell['to']} ({fell['reason']})"
            node.turn_done = True
        elif kind is EventType.USER_MESSAGE:
            node.status = "running"  # an idle agent that gets a message runs again
            node.error = None
            node.text = f"✉ {cast(UserMessageData, data).get('text', '')}"
            node.turn_done = True
        elif kind is EventType.AGENT_RESULT:
            node.status = "done"
            result = cast(AgentResultData, data)
            node.result = str(result.get("text", ""))
            node.structured = result.get("structured")
            node.usage = dict(result.get("subtreeUsage") or result.get("usage") or {}) or None
            node.tools_running.clear()
            node.waiting.clear()
            node.compacting = False
        elif kind is EventType.AGENT_ERROR:
            error = cast(AgentErrorData, data)
            node.status = str(error.get("errorType", "failed"))
            node.error = str(error.get("message", ""))
            node.tools_running.clear()
            node.waiting.clear()
            node.compacting = False


_TOOL_EVENTS = frozenset(
    {
        EventType.TOOL_CALL_DELTA,
        EventType.TOOL_CALL,
        EventType.TOOL_RESULT,
        EventType.APPROVAL_REQUESTED,
        EventType.APPROVAL_RESOLVED,
    }
)


def _apply_tool(node: AgentNode, kind: EventType, data: dict[str, Any]) -> None:
    """A tool call's event: its arguments streaming, its start, its end, its approval."""
    if kind is EventType.TOOL_CALL_DELTA:
        streaming = cast(ToolCallDeltaData, data)
        fields = streaming.get("fields")
        if fields:  # string fields arrive as pieces: concatenate them
            shown = node.pending.setdefault(str(streaming.get("toolCallId")), {})
            for path, piece in fields.items():
                old = shown.get(path)
                if isinstance(piece, str) and isinstance(old, str):
                    shown[path] = (old + piece)[-_TAIL:]
                else:
                    shown[path] = piece
    elif kind is EventType.TOOL_CALL:
        call = cast(ToolCallData, data)
        node.pending.pop(str(call.get("toolCallId")), None)
        node.tools_running.append(str(call.get("name", "?")))
    elif kind is EventType.TOOL_RESULT:
        name = str(cast(ToolResultData, data).get("name", "?"))
        if name in node.tools_running:
            node.tools_running.remove(name)
    elif kind is EventType.APPROVAL_REQUESTED:
        asked = cast(ApprovalRequestedData, data)
        node.waiting[str(asked.get("toolCallId"))] = str(asked.get("name", "?"))
    elif kind is EventType.APPROVAL_RESOLVED:
        node.waiting.pop(str(cast(ApprovalResolvedData, data).get("toolCallId")), None)
