"""What an agent emits: the event types and token usage (the bottom layer's vocabulary).

`orchestrator.core.events` wraps these in the wire envelope (`Event`, `Source`);
agents never see the envelope, only this vocabulary and an `Emitter`.
"""

from __future__ import annotations

import enum
from typing import TypedDict

import msgspec

__all__ = ["EventType", "Usage", "UsageData"]


class EventType(enum.StrEnum):
    """Every event type a run can carry (contract §2)."""

    RUN_STARTED = "RUN_STARTED"
    AGENT_STARTED = "AGENT_STARTED"
    REASONING = "REASONING"
    TOOL_CALL_DELTA = "TOOL_CALL_DELTA"
    TOOL_CALL = "TOOL_CALL"
    TOOL_RESULT = "TOOL_RESULT"
    AGENT_RESULT = "AGENT_RESULT"
    AGENT_ERROR = "AGENT_ERROR"
    USER_MESSAGE = "USER_MESSAGE"
    TOOL_PROGRESS = "TOOL_PROGRESS"
    """A long tool call moves: `{toolCallId, progress, total?, message?}` (MCP progress)."""
    RUN_RESUMED = "RUN_RESUMED"
    """Cluster mode: another worker took the run over and continues it."""
    TURN_ABANDONED = "TURN_ABANDONED"
    """Cluster mode: the agent's deltas since its last finished turn belong to a turn
    that was cut off by a worker failure; the turn is asked of the model again."""
    APPROVAL_REQUESTED = "APPROVAL_REQUESTED"
    """A tool call that needs a person's decision waits for it (`approve` answers)."""
    APPROVAL_RESOLVED = "APPROVAL_RESOLVED"
    """The decision on a waiting call: approve, deny, timeout or cancelled."""
    COMPACTION_STARTED = "COMPACTION_STARTED"
    """The agent's conversation grew too long: its older part is being summarized."""
    COMPACTION_FINISHED = "COMPACTION_FINISHED"
    """The older part was replaced by a summary (the text is in the event)."""
    AGENT_STALLED = "AGENT_STALLED"
    """A running agent (not waiting for a person or for its children) produced no event
    for `limits.stall_seconds`; written by the server, not the agent. The mark holds
    until the agent's next event of any other type."""
    MODEL_FALLBACK = "MODEL_FALLBACK"
    """The agent's model failed a turn for one of its `fallback_on` reasons; the turn
    (and the agent's later ones) go to its next `fallback_models` entry."""
    RUN_FINISHED = "RUN_FINISHED"


class UsageData(TypedDict):
    """Token counts in event data, as `Usage.to_dict` writes them."""

    inputTokens: int
    outputTokens: int


class Usage(msgspec.Struct, kw_only=True, rename="camel"):
    """Token counts of model calls; mutable so an agent can add up its turns."""

    input_tokens: int = 0
    output_tokens: int = 0

    def add(self, other: Usage) -> None:
        """Add `other` into this counter."""
        self.input_tokens += other.input_tokens
        self.output_tokens += other.output_tokens

    def copy(self) -> Usage:
        """A snapshot that later `add` calls do not change."""
        return Usage(input_tokens=self.input_tokens, output_tokens=self.output_tokens)

    def to_dict(self) -> UsageData:
        """The JSON shape used inside event `data`."""
        return {"inputTokens": self.input_tokens, "outputTokens": self.output_tokens}
