"""One typed payload per event type: what `data` holds (docs/events.md, contract §2).

TypedDicts cost nothing at run time (an event's data stays a plain dict, built by
a literal on the hot path) and let mypy check every producer: the `Emitter`
protocol (`agents/emitter.py`) takes, for each `EventType`, only its payload.
`PAYLOADS` maps each type to its payload (REASONING has three shapes); a test
checks it against the table in docs/events.md and validates the events of real
runs with it (`msgspec.convert`).

Consumers say which types they handle and which they ignore (`HANDLES`/`IGNORES`
next to each), and a test fails when a type is added that one of them does not
name: see `tests/unit/test_payloads.py`.
"""

from typing import Any, Literal, NotRequired, TypedDict, final

from agents.core.attachments import AttachmentInfo
from agents.core.events import EventType, UsageData

__all__ = [
    "PAYLOADS",
    "AgentErrorData",
    "AgentResultData",
    "AgentStalledData",
    "AgentStartedData",
    "ApprovalRequestedData",
    "ApprovalResolvedData",
    "CompactionFinishedData",
    "CompactionStartedData",
    "ContinuesData",
    "ForkedFromData",
    "ModelFallbackData",
    "ReasoningData",
    "ReasoningDeltaData",
    "RunFinishedData",
    "RunResumedData",
    "RunStartedData",
    "ThinkingDeltaData",
    "ToolCallData",
    "ToolCallDeltaData",
    "ToolProgressData",
    "ToolResultData",
    "TriggerData",
    "TurnAbandonedData",
    "TurnEndData",
    "UsageData",
    "UserMessageData",
    "agent_error",
]


class ForkedFromData(TypedDict):
    """The run and seq a fork started from (docs/fork.md)."""

    runId: str
    seq: int


class ContinuesData(TypedDict):
    """The agent of an earlier run of the thread whose conversation a run's root (or a
    child, `agent_spawn` with `agent_key`) continues (docs/threads.md)."""

    runId: str
    agentKey: str | None


class TriggerData(TypedDict):
    """A run a trigger started: the trigger and the tick (ISO 8601, its time zone)."""

    name: str
    scheduledFor: str


class RunStartedData(TypedDict):
    agentId: str
    input: str
    attachments: NotRequired[list[AttachmentInfo]]
    """Images and files given with the input (docs/structured.md#attachments)."""
    trigger: NotRequired[TriggerData]
    """The trigger that started the run (docs/triggers.md)."""
    outputSchema: NotRequired[dict[str, Any]]
    """The schema the run's root answers with (the `run` op's `outputSchema`)."""
    forkedFrom: NotRequired[ForkedFromData]
    threadId: NotRequired[str]
    previousRunId: NotRequired[str]
    continues: NotRequired[ContinuesData]


class AgentStartedData(TypedDict):
    agentId: str
    task: str
    attachments: NotRequired[list[AttachmentInfo]]
    """Images and files its parent's `agent_spawn` gave with the task."""
    remote: NotRequired[dict[str, str]]
    """A remote subagent's: `{url, agent}` (our server) or `{a2a}` (an A2A agent)."""
    continues: NotRequired[ContinuesData]
    """An agent of an earlier run of the thread that this one continues, with its
    conversation (`agent_spawn` with `agent_key`: docs/threads.md)."""


@final  # (a REASONING's shapes: `"delta" in data` tells them apart, for mypy too)
class ReasoningDeltaData(TypedDict):
    """A piece of the turn's text, as it streams."""

    delta: str


@final
class ThinkingDeltaData(TypedDict):
    """A piece of the model's reasoning (thinking), as it streams."""

    thinkingDelta: str


class TurnCallData(TypedDict):
    toolCallId: str
    name: str
    args: Any


@final
class TurnEndData(TypedDict):
    """The end of a model turn (`last: true`): its text, calls and finish reason."""

    text: str
    toolCalls: list[TurnCallData]
    finishReason: str
    usage: NotRequired[UsageData]
    spec: NotRequired[str]
    """The fingerprint of the agent's model, prompt and tools (agents/core/replay.py)."""
    replayed: NotRequired[bool]
    """Answered from the forked run's recording, with no provider call."""
    model: NotRequired[str]
    """The model key of the server config that answered the turn."""


ReasoningData = ReasoningDeltaData | ThinkingDeltaData | TurnEndData


class ToolCallDeltaData(TypedDict):
    toolCallId: str
    name: str
    argsDelta: str
    fields: NotRequired[dict[str, Any]]


class ToolCallData(TypedDict):
    toolCallId: str
    name: str
    args: Any
    server: NotRequired[bool]


class ToolResultData(TypedDict):
    toolCallId: str
    name: str
    content: str
    isError: bool
    server: NotRequired[bool]
    attachments: NotRequired[list[AttachmentInfo]]
    """Images and files the tool returned (an MCP tool's image)."""


class AgentResultData(TypedDict):
    text: str
    usage: UsageData
    subtreeUsage: UsageData
    structured: NotRequired[Any]
    """An agent with an output schema: its validated answer (`text` is its JSON)."""


class AgentErrorData(TypedDict):
    errorType: str
    message: str
    by: NotRequired[str]
    reason: NotRequired[str]
    usage: NotRequired[UsageData]
    """Absent from an error the orchestrator writes for an agent it no longer runs
    (lost with a worker, a run ended before it was continued, a remote child)."""
    subtreeUsage: NotRequired[UsageData]
    usageEstimated: NotRequired[bool]


UserMessageData = TypedDict(
    "UserMessageData",
    {
        "text": str,
        "from": str,
        "continuation": NotRequired[bool],
        "control": NotRequired[str],
        "outputInvalid": NotRequired[bool],
        "attachments": NotRequired[list[AttachmentInfo]],
    },
)


class ToolProgressData(TypedDict):
    toolCallId: str
    progress: float
    total: NotRequired[float]
    message: NotRequired[str]


class RunResumedData(TypedDict):
    attempt: int
    afterSeq: int
    worker: NotRequired[str]
    reason: NotRequired[Literal["restart", "fork"]]


class TurnAbandonedData(TypedDict):
    reason: Literal["worker_lost", "restart", "fork"]
    attempt: int


class ApprovalRequestedData(TypedDict):
    toolCallId: str
    name: str
    args: dict[str, Any]
    timeoutAt: float
    edit: bool


class ApprovalResolvedData(TypedDict):
    toolCallId: str
    decision: Literal["approve", "deny", "timeout", "cancelled"]
    by: str
    reason: NotRequired[str]
    edited: bool
    args: NotRequired[dict[str, Any]]


class CompactionStartedData(TypedDict):
    reason: Literal["threshold", "prompt_too_long"]
    beforeTokens: int


class CompactionFinishedData(TypedDict):
    afterTokens: int
    summarizedTurns: int
    summarizedMessages: int
    keptMessages: int
    summary: str


class AgentStalledData(TypedDict):
    stalled: bool
    silentSeconds: float
    lastSeq: int
    tool: NotRequired[str]


ModelFallbackData = TypedDict(
    "ModelFallbackData",
    {"from": str, "to": str, "reason": str, "error": str},
)
"""`from`, `to`: model keys of the server config; `reason`: overloaded, rate_limit,
context_length or unavailable; `error`: what the model that failed said."""


class RunFinishedData(TypedDict):
    status: Literal["completed", "failed", "cancelled", "interrupted"]
    result: NotRequired[str]
    structured: NotRequired[Any]
    """A root with an output schema: its validated answer (`result` is its JSON)."""
    error: NotRequired[str]
    errorType: NotRequired[str]
    by: NotRequired[str]
    reason: NotRequired[str]
    usage: NotRequired[UsageData]


def agent_error(
    error_type: str,
    message: str,
    *,
    by: str | None = None,
    reason: str | None = None,
    usage: UsageData | None = None,
    subtree_usage: UsageData | None = None,
    estimated: bool = False,
) -> AgentErrorData:
    """AGENT_ERROR's data, the one way every producer writes it: `by` and `reason` for
    an agent a person cancelled, the usages when the agent ran here."""
    data: AgentErrorData = {"errorType": error_type, "message": message}
    if by is not None:
        data["by"] = by
        if reason is not None:
            data["reason"] = reason
    if usage is not None:
        data["usage"] = usage
    if subtree_usage is not None:
        data["subtreeUsage"] = subtree_usage
    if estimated:
        data["usageEstimated"] = True
    return data


PAYLOADS: dict[EventType, tuple[type, ...]] = {
    EventType.RUN_STARTED: (RunStartedData,),
    EventType.AGENT_STARTED: (AgentStartedData,),
    EventType.REASONING: (ReasoningDeltaData, ThinkingDeltaData, TurnEndData),
    EventType.TOOL_CALL_DELTA: (ToolCallDeltaData,),
    EventType.TOOL_CALL: (ToolCallData,),
    EventType.TOOL_RESULT: (ToolResultData,),
    EventType.AGENT_RESULT: (AgentResultData,),
    EventType.AGENT_ERROR: (AgentErrorData,),
    EventType.USER_MESSAGE: (UserMessageData,),
    EventType.TOOL_PROGRESS: (ToolProgressData,),
    EventType.RUN_RESUMED: (RunResumedData,),
    EventType.TURN_ABANDONED: (TurnAbandonedData,),
    EventType.APPROVAL_REQUESTED: (ApprovalRequestedData,),
    EventType.APPROVAL_RESOLVED: (ApprovalResolvedData,),
    EventType.COMPACTION_STARTED: (CompactionStartedData,),
    EventType.COMPACTION_FINISHED: (CompactionFinishedData,),
    EventType.AGENT_STALLED: (AgentStalledData,),
    EventType.MODEL_FALLBACK: (ModelFallbackData,),
    EventType.RUN_FINISHED: (RunFinishedData,),
}
"""Each event type's payload (its shapes, for REASONING: a delta, a thinking delta, or
the turn's end, told apart by `last` and by its one key)."""
