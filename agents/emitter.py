"""Where an agent's events go: the one seam between `agents` and the runtime above it.

The runner emits through an `Emitter` and knows nothing of runs, sinks or clients;
`orchestrator.core.bus.Bus` is the real one. `NULL_EMITTER` drops everything (in
the spirit of `trio.TASK_STATUS_IGNORED`), so the runner never asks "is there a
bus?".
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal, Protocol, overload

from agents.core.events import EventType
from agents.core.payloads import (
    AgentErrorData,
    AgentResultData,
    AgentStartedData,
    ApprovalRequestedData,
    ApprovalResolvedData,
    CompactionFinishedData,
    CompactionStartedData,
    ModelFallbackData,
    ReasoningData,
    RunFinishedData,
    RunResumedData,
    RunStartedData,
    ToolCallData,
    ToolCallDeltaData,
    ToolProgressData,
    ToolResultData,
    TurnAbandonedData,
    UserMessageData,
)

__all__ = ["NULL_EMITTER", "Emitter", "NullEmitter"]


class Emitter(Protocol):
    """One agent instance's event outlet."""

    @property
    def agent_key(self) -> str | None:
        """The instance's agentKey (None for the root agent)."""
        ...

    @property
    def run_id(self) -> str:
        """The run the events belong to (for logs)."""
        ...

    @property
    def closed(self) -> bool:
        """True once the run finished: nothing more may be emitted."""
        ...

    # Each type takes its own payload (agents/core/payloads.py): mypy checks producers.
    @overload
    async def emit(
        self, type: Literal[EventType.RUN_STARTED], data: RunStartedData, last: bool = False
    ) -> None: ...
    @overload
    async def emit(
        self, type: Literal[EventType.AGENT_STARTED], data: AgentStartedData, last: bool = False
    ) -> None: ...
    @overload
    async def emit(
        self, type: Literal[EventType.REASONING], data: ReasoningData, last: bool = False
    ) -> None: ...
    @overload
    async def emit(
        self, type: Literal[EventType.TOOL_CALL_DELTA], data: ToolCallDeltaData, last: bool = False
    ) -> None: ...
    @overload
    async def emit(
        self, type: Literal[EventType.TOOL_CALL], data: ToolCallData, last: bool = False
    ) -> None: ...
    @overload
    async def emit(
        self, type: Literal[EventType.TOOL_RESULT], data: ToolResultData, last: bool = False
    ) -> None: ...
    @overload
    async def emit(
        self, type: Literal[EventType.AGENT_RESULT], data: AgentResultData, last: bool = False
    ) -> None: ...
    @overload
    async def emit(
        self, type: Literal[EventType.AGENT_ERROR], data: AgentErrorData, last: bool = False
    ) -> None: ...
    @overload
    async def emit(
        self, type: Literal[EventType.USER_MESSAGE], data: UserMessageData, last: bool = False
    ) -> None: ...
    @overload
    async def emit(
        self, type: Literal[EventType.TOOL_PROGRESS], data: ToolProgressData, last: bool = False
    ) -> None: ...
    @overload
    async def emit(
        self, type: Literal[EventType.RUN_RESUMED], data: RunResumedData, last: bool = False
    ) -> None: ...
    @overload
    async def emit(
        self, type: Literal[EventType.TURN_ABANDONED], data: TurnAbandonedData, last: bool = False
    ) -> None: ...
    @overload
    async def emit(
        self,
        type: Literal[EventType.APPROVAL_REQUESTED],
        data: ApprovalRequestedData,
        last: bool = False,
    ) -> None: ...
    @overload
    async def emit(
        self,
        type: Literal[EventType.APPROVAL_RESOLVED],
        data: ApprovalResolvedData,
        last: bool = False,
    ) -> None: ...
    @overload
    async def emit(
        self,
        type: Literal[EventType.COMPACTION_STARTED],
        data: CompactionStartedData,
        last: bool = False,
    ) -> None: ...
    @overload
    async def emit(
        self,
        type: Literal[EventType.COMPACTION_FINISHED],
        data: CompactionFinishedData,
        last: bool = False,
    ) -> None: ...
    @overload
    async def emit(
        self, type: Literal[EventType.MODEL_FALLBACK], data: ModelFallbackData, last: bool = False
    ) -> None: ...
    @overload
    async def emit(
        self, type: Literal[EventType.RUN_FINISHED], data: RunFinishedData, last: bool = False
    ) -> None: ...
    async def emit(self, type: EventType, data: Mapping[str, Any], last: bool = False) -> None:
        """Emit one event, waiting while the run's outlet is full (backpressure)."""
        ...

    @overload
    def emit_nowait(
        self, type: Literal[EventType.RUN_STARTED], data: RunStartedData, last: bool = False
    ) -> None: ...
    @overload
    def emit_nowait(
        self, type: Literal[EventType.AGENT_STARTED], data: AgentStartedData, last: bool = False
    ) -> None: ...
    @overload
    def emit_nowait(
        self, type: Literal[EventType.REASONING], data: ReasoningData, last: bool = False
    ) -> None: ...
    @overload
    def emit_nowait(
        self, type: Literal[EventType.TOOL_CALL_DELTA], data: ToolCallDeltaData, last: bool = False
    ) -> None: ...
    @overload
    def emit_nowait(
        self, type: Literal[EventType.TOOL_CALL], data: ToolCallData, last: bool = False
    ) -> None: ...
    @overload
    def emit_nowait(
        self, type: Literal[EventType.TOOL_RESULT], data: ToolResultData, last: bool = False
    ) -> None: ...
    @overload
    def emit_nowait(
        self, type: Literal[EventType.AGENT_RESULT], data: AgentResultData, last: bool = False
    ) -> None: ...
    @overload
    def emit_nowait(
        self, type: Literal[EventType.AGENT_ERROR], data: AgentErrorData, last: bool = False
    ) -> None: ...
    @overload
    def emit_nowait(
        self, type: Literal[EventType.USER_MESSAGE], data: UserMessageData, last: bool = False
    ) -> None: ...
    @overload
    def emit_nowait(
        self, type: Literal[EventType.TOOL_PROGRESS], data: ToolProgressData, last: bool = False
    ) -> None: ...
    @overload
    def emit_nowait(
        self, type: Literal[EventType.RUN_RESUMED], data: RunResumedData, last: bool = False
    ) -> None: ...
    @overload
    def emit_nowait(
        self, type: Literal[EventType.TURN_ABANDONED], data: TurnAbandonedData, last: bool = False
    ) -> None: ...
    @overload
    def emit_nowait(
        self,
        type: Literal[EventType.APPROVAL_REQUESTED],
        data: ApprovalRequestedData,
        last: bool = False,
    ) -> None: ...
    @overload
    def emit_nowait(
        self,
        type: Literal[EventType.APPROVAL_RESOLVED],
        data: ApprovalResolvedData,
        last: bool = False,
    ) -> None: ...
    @overload
    def emit_nowait(
        self,
        type: Literal[EventType.COMPACTION_STARTED],
        data: CompactionStartedData,
        last: bool = False,
    ) -> None: ...
    @overload
    def emit_nowait(
        self,
        type: Literal[EventType.COMPACTION_FINISHED],
        data: CompactionFinishedData,
        last: bool = False,
    ) -> None: ...
    @overload
    def emit_nowait(
        self, type: Literal[EventType.MODEL_FALLBACK], data: ModelFallbackData, last: bool = False
    ) -> None: ...
    @overload
    def emit_nowait(
        self, type: Literal[EventType.RUN_FINISHED], data: RunFinishedData, last: bool = False
    ) -> None: ...
    def emit_nowait(self, type: EventType, data: Mapping[str, Any], last: bool = False) -> None:
        """Emit without waiting: lifecycle events, also while being cancelled."""
        ...

    @overload
    def offer(self, type: Literal[EventType.RUN_STARTED], data: RunStartedData) -> bool: ...
    @overload
    def offer(self, type: Literal[EventType.AGENT_STARTED], data: AgentStartedData) -> bool: ...
    @overload
    def offer(self, type: Literal[EventType.REASONING], data: ReasoningData) -> bool: ...
    @overload
    def offer(self, type: Literal[EventType.TOOL_CALL_DELTA], data: ToolCallDeltaData) -> bool: ...
    @overload
    def offer(self, type: Literal[EventType.TOOL_CALL], data: ToolCallData) -> bool: ...
    @overload
    def offer(self, type: Literal[EventType.TOOL_RESULT], data: ToolResultData) -> bool: ...
    @overload
    def offer(self, type: Literal[EventType.AGENT_RESULT], data: AgentResultData) -> bool: ...
    @overload
    def offer(self, type: Literal[EventType.AGENT_ERROR], data: AgentErrorData) -> bool: ...
    @overload
    def offer(self, type: Literal[EventType.USER_MESSAGE], data: UserMessageData) -> bool: ...
    @overload
    def offer(self, type: Literal[EventType.TOOL_PROGRESS], data: ToolProgressData) -> bool: ...
    @overload
    def offer(self, type: Literal[EventType.RUN_RESUMED], data: RunResumedData) -> bool: ...
    @overload
    def offer(self, type: Literal[EventType.TURN_ABANDONED], data: TurnAbandonedData) -> bool: ...
    @overload
    def offer(
        self, type: Literal[EventType.APPROVAL_REQUESTED], data: ApprovalRequestedData
    ) -> bool: ...
    @overload
    def offer(
        self, type: Literal[EventType.APPROVAL_RESOLVED], data: ApprovalResolvedData
    ) -> bool: ...
    @overload
    def offer(
        self, type: Literal[EventType.COMPACTION_STARTED], data: CompactionStartedData
    ) -> bool: ...
    @overload
    def offer(
        self, type: Literal[EventType.COMPACTION_FINISHED], data: CompactionFinishedData
    ) -> bool: ...
    @overload
    def offer(self, type: Literal[EventType.MODEL_FALLBACK], data: ModelFallbackData) -> bool: ...
    @overload
    def offer(self, type: Literal[EventType.RUN_FINISHED], data: RunFinishedData) -> bool: ...
    def offer(self, type: EventType, data: Mapping[str, Any]) -> bool:
        """Emit one event now; True: the outlet is full, `await wait_writable()` next.

        `emit` split in two for the per-delta hot path: a plain call per delta, and
        an await only when backpressure asks for one (no coroutine per delta).
        """
        ...

    def offer_deltas(self, texts: list[str]) -> bool:
        """REASONING `{delta}` events for texts read together; True: the outlet is full."""
        ...

    async def wait_writable(self) -> None:
        """Return once the run's outlet has room again."""
        ...

    async def durable(self) -> bool:
        """Return once every event emitted so far is stored (write-ahead: a tool that
        acts on the world runs only after its call is journaled, so a restart or a
        takeover knows it was made and never makes it twice).

        False: this copy of the run lost it (another worker continues it, or the
        server is stopping): nothing may act for it any more.
        """
        ...


class NullEmitter:
    """Drops every event (`orchestrator.core.bus.NullBus` adds a Source and children)."""

    __slots__ = ()

    run_id = ""
    closed = False

    @property
    def agent_key(self) -> str | None:
        """No agent instance: None."""
        return None

    async def emit(self, type: EventType, data: Mapping[str, Any], last: bool = False) -> None:
        """Nothing to do."""

    def emit_nowait(self, type: EventType, data: Mapping[str, Any], last: bool = False) -> None:
        """Nothing to do."""

    def offer(self, type: EventType, data: Mapping[str, Any]) -> bool:
        """Nothing to do; never full."""
        return False

    def offer_deltas(self, texts: list[str]) -> bool:
        """Nothing to do; never full."""
        return False

    async def wait_writable(self) -> None:
        """Never full."""

    async def durable(self) -> bool:
        """Nothing is stored: nothing to wait for."""
        return True


NULL_EMITTER = NullEmitter()
