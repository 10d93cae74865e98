"""Provider-neutral conversation and stream vocabulary.

A provider shell turns its wire format into `StreamPart`s (what a model turn
streams) and turns `Message`s back into its request format. Everything between
(the turn assembler, the agent loop) only sees these types.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import msgspec

from agents.core.attachments import Attachment

__all__ = [
    "AssistantMessage",
    "Finish",
    "Inbound",
    "Message",
    "ModelRequest",
    "OutputFormat",
    "ServerToolCall",
    "ServerToolResult",
    "StreamPart",
    "TextDelta",
    "ThinkingBlock",
    "ThinkingDelta",
    "ThinkingEnd",
    "ToolCall",
    "ToolCallArgs",
    "ToolCallEnd",
    "ToolCallStart",
    "ToolResultMessage",
    "ToolSpec",
    "UsageReport",
    "UserMessage",
]


# --- conversation -----------------------------------------------------------


class ToolCall(msgspec.Struct, frozen=True, kw_only=True):
    """A fully assembled tool call; `arguments` is the raw JSON text the model sent."""

    id: str
    name: str
    arguments: str


class ThinkingBlock(msgspec.Struct, frozen=True, kw_only=True):
    """A signed (or redacted) thinking block; sent back verbatim on the next turn."""

    thinking: str = ""
    signature: str = ""
    redacted: str | None = None
    """The opaque `data` of a `redacted_thinking` block."""


class Inbound(NamedTuple):
    """A person's message for an agent that goes on from its journal (a fork's, or a
    cluster `send` that came before the agent was rebuilt)."""

    text: str
    control: str | None = None
    """The control request that brought it (USER_MESSAGE's `control`): a run's new
    owner finds it in the journal and does not deliver it twice."""
    attachments: tuple[Attachment, ...] = ()
    """Images and files sent with it."""


class UserMessage(msgspec.Struct, frozen=True, kw_only=True, tag="user"):
    """Input to the agent: its task, or a message sent into it."""

    text: str
    summarized_turns: int = 0
    """Not 0: this message is a compaction's summary, standing for that many model turns."""
    attachments: tuple[Attachment, ...] = ()
    """Images and files given with it (docs/structured.md#attachments)."""


class AssistantMessage(msgspec.Struct, frozen=True, kw_only=True, tag="assistant"):
    """One finished model turn."""

    text: str
    tool_calls: tuple[ToolCall, ...] = ()
    thinking: str = ""
    thinking_blocks: tuple[ThinkingBlock, ...] = ()
    """Provider thinking blocks with their signatures (Anthropic), in order."""
    server_blocks: tuple[dict[str, Any], ...] = ()
    """Server-side tool calls and results (run by the provider) exactly as the provider
    sent them, in order: sent back verbatim, as the provider requires."""


class ToolResultMessage(msgspec.Struct, frozen=True, kw_only=True, tag="tool"):
    """The result of one tool call, fed back to the model."""

    tool_call_id: str
    name: str
    content: str
    is_error: bool = False
    attachments: tuple[Attachment, ...] = ()
    """Images and files the tool returned (an MCP tool's image): a provider whose tool
    results hold none gets them in a user message right after the results."""


Message = UserMessage | AssistantMessage | ToolResultMessage


class ToolSpec(msgspec.Struct, frozen=True, kw_only=True):
    """A tool as offered to the model: name, description, JSON schema of its args."""

    name: str
    description: str
    parameters: dict[str, Any]


class OutputFormat(msgspec.Struct, frozen=True, kw_only=True):
    """The JSON Schema an agent's final answer must match, asked for the provider's way
    (agents/core/structured.py)."""

    schema: dict[str, Any]
    name: str = "final_answer"
    strict: bool = False
    """OpenAI's strict mode (the schema is `strict_compatible`)."""
    tool: str | None = None
    """Set: the model answers by calling this tool (one of the request's tools), which
    the request forces (`tool_choice`); None: the provider's native structured output."""


class ModelRequest(msgspec.Struct, frozen=True, kw_only=True):
    """Everything one model turn needs."""

    system: str
    messages: tuple[Message, ...]
    tools: tuple[ToolSpec, ...] = ()
    output: OutputFormat | None = None
    """The schema the final answer must match (None: any text)."""
    purpose: str = "turn"
    """`turn`: a model turn of the agent; `summary`: a compaction asks for a summary
    (real providers ignore it; the scripted one answers its `summary`)."""


# --- stream parts -----------------------------------------------------------
# Stream parts hold only strings and numbers, so they are never in a cycle: `gc=False`
# keeps the hundreds of thousands a second a fast provider makes out of the collector.


class TextDelta(msgspec.Struct, frozen=True, gc=False):
    """A piece of the turn's visible text."""

    text: str


class ThinkingDelta(msgspec.Struct, frozen=True, gc=False):
    """A piece of the model's reasoning/thinking (never mixed into the text)."""

    text: str


class ThinkingEnd(msgspec.Struct, frozen=True, gc=False):
    """A thinking block closed; `signature` must go back with it verbatim."""

    signature: str = ""
    redacted: str | None = None


class ToolCallStart(msgspec.Struct, frozen=True, gc=False):
    """A new tool call; `key` identifies it among this turn's calls."""

    key: int
    id: str
    name: str


class ToolCallArgs(msgspec.Struct, frozen=True, gc=False):
    """A fragment of a tool call's JSON arguments."""

    key: int
    delta: str


class ToolCallEnd(msgspec.Struct, frozen=True, gc=False):
    """The provider says the call's arguments are complete."""

    key: int


class UsageReport(msgspec.Struct, frozen=True, gc=False):
    """Token usage of the whole turn (cumulative; the last report wins)."""

    input_tokens: int
    output_tokens: int


class ServerToolCall(msgspec.Struct, frozen=True, kw_only=True):
    """A tool the provider runs itself (web search, code execution): shown, never run here."""

    id: str
    name: str
    input: Any
    raw: dict[str, Any] | None = None
    """The provider's block or item, kept for the conversation (None: sent with the result)."""


class ServerToolResult(msgspec.Struct, frozen=True, kw_only=True):
    """What a provider-run tool returned."""

    tool_call_id: str
    name: str
    content: Any
    is_error: bool = False
    raw: dict[str, Any] | None = None


class Finish(msgspec.Struct, frozen=True, gc=False):
    """The turn ended; `reason` as the provider named it (`unknown` if it did not)."""

    reason: str


StreamPart = (
    TextDelta
    | ThinkingDelta
    | ThinkingEnd
    | ToolCallStart
    | ToolCallArgs
    | ToolCallEnd
    | UsageReport
    | ServerToolCall
    | ServerToolResult
    | Finish
)
