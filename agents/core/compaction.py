"""Compaction, the pure part: how big a conversation is, where it may be cut, what the
summarizer reads, and which provider errors say the prompt is too long.

The loop (`agents/core/loop.py`) decides when to compact, and the runner's compactor
(`agents/runner/compactor.py`) runs the summarizer; `orchestrator/core/rebuild.py`
replays a journaled compaction the same way, with the same `summary_message`, so a
resumed run continues from the compacted conversation.

Sizes are tokens as the provider counts them where it said (the input and output
tokens of the agent's last turn), plus an estimate for what was added since:
characters ÷ 4, plus 4 per message — the usual rule of thumb for English text and
JSON with BPE tokenizers; it errs high for code and low for some scripts, which is
why a provider's own "prompt too long" is handled as well (reactive compaction).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from agents.core.attachments import Attachment
from agents.core.messages import (
    AssistantMessage,
    Message,
    ModelRequest,
    ToolResultMessage,
    UserMessage,
)
from agents.errors import ProviderError

__all__ = [
    "CONTINUE_PROMPT",
    "MAX_SUMMARY_CHARS",
    "OUTPUT_LIMIT_REASONS",
    "SUMMARY_SYSTEM",
    "ContextMeter",
    "Cut",
    "Overflow",
    "estimate_messages",
    "estimate_request",
    "overflow_of",
    "plan_cut",
    "summary_message",
    "transcript",
]

CHARS_PER_TOKEN = 4
MESSAGE_OVERHEAD = 4
"""Tokens a provider adds around each message (role, separators)."""

OUTPUT_LIMIT_REASONS = frozenset({"length", "max_tokens", "max_output_tokens", "REASON_MAX_LEN"})
"""Finish reasons that say the turn was cut by the output limit (OpenAI chat, Anthropic,
OpenAI Responses' `incomplete_details.reason`, and xAI's spelling of it)."""

CONTINUE_PROMPT = (
    "[Your previous answer was cut off by the output limit. Continue exactly where it "
    "stopped, without repeating anything.]"
)
"""What the agent is told after a turn cut by the output limit (one USER_MESSAGE)."""

SUMMARY_SYSTEM = (
    "You summarize the earlier part of an AI agent's conversation so that the agent can "
    "go on with its work with less context. Write notes the agent can rely on: its task "
    "and constraints, what it decided and why, the facts and results it found (keep "
    "names, numbers, paths, ids and quotes exact), the tool calls that mattered and what "
    "they returned, what failed, and what remains to do. Be concise; leave out chatter. "
    "Never invent anything that is not in the conversation."
)
"""The summarizer's system prompt (a subagent's `compaction.instructions` are added)."""

MAX_SUMMARY_CHARS = 100_000
"""A longer summary fails the compaction (it would defeat it, and would not fit in one
journaled event: `limits.max_event_bytes`)."""

MAX_MESSAGE_CHARS = 20_000
"""One message of the transcript is cut (in its middle) past this many characters."""


def estimate_text(text: str) -> int:
    """Tokens of `text` by the rule of thumb (characters ÷ 4, rounded up)."""
    return math.ceil(len(text) / CHARS_PER_TOKEN)


def estimate_message(message: Message) -> int:
    """Tokens of one message, its overhead included."""
    if isinstance(message, AssistantMessage):
        chars = len(message.text) + len(message.thinking)
        chars += sum(len(c.name) + len(c.arguments) + 16 for c in message.tool_calls)
        return MESSAGE_OVERHEAD + math.ceil(chars / CHARS_PER_TOKEN)
    if isinstance(message, ToolResultMessage):
        return MESSAGE_OVERHEAD + estimate_text(message.content) + _attached(message.attachments)
    return MESSAGE_OVERHEAD + estimate_text(message.text) + _attached(message.attachments)


ATTACHMENT_TOKENS = 1600
"""What an image or a file counts for before the provider says (a large image is
about this many tokens at Anthropic's and OpenAI's scaling); a text file counts its
characters."""


def _attached(attachments: tuple[Attachment, ...]) -> int:
    return sum(
        math.ceil(a.size / CHARS_PER_TOKEN)
        if a.media_type.startswith("text/")
        else ATTACHMENT_TOKENS
        for a in attachments
    )


def estimate_messages(messages: list[Message] | tuple[Message, ...]) -> int:
    """Tokens of a list of messages."""
    return sum(estimate_message(m) for m in messages)


def estimate_request(request: ModelRequest) -> int:
    """Tokens of a whole request: system prompt, tool schemas, messages."""
    tools = sum(
        estimate_text(t.name) + estimate_text(t.description) + len(str(t.parameters)) // 4
        for t in request.tools
    )
    return estimate_text(request.system) + tools + estimate_messages(request.messages)


class ContextMeter:
    """How big an agent's next request is: the provider's count for its last turn
    (input + output tokens) plus an estimate of the messages added since."""

    __slots__ = ("_base", "_base_len", "_fixed")

    def __init__(self, fixed: int) -> None:
        self._fixed = fixed
        """Tokens of the system prompt and tool schemas (estimated; in every request)."""
        self._base: int | None = None
        self._base_len = 0

    def turn_ended(self, input_tokens: int, output_tokens: int, length: int) -> None:
        """A turn's usage as the provider reported it; `length`: the conversation's
        length once that turn's message was added."""
        self._base, self._base_len = input_tokens + output_tokens, length

    def rewritten(self, before: list[Message], after: list[Message]) -> int:
        """The conversation `before` became `after` (a compaction): the size of `after`
        in the scale `before` was measured in — the provider's count when there is one,
        scaled by how much the estimate shrank, so "after" is never more than "before"
        merely because two ways of counting met — which later sizes build on."""
        measured = self.size(before)
        estimated_before = self._fixed + estimate_messages(before)
        estimated_after = self._fixed + estimate_messages(after)
        tokens = math.ceil(measured * estimated_after / max(estimated_before, 1))
        self._base, self._base_len = tokens, len(after)
        return tokens

    def size(self, messages: list[Message]) -> int:
        """Tokens the next request will hold."""
        if self._base is None or self._base_len > len(messages):
            return self._fixed + estimate_messages(messages)
        return self._base + estimate_messages(messages[self._base_len :])


@dataclass(frozen=True)
class Cut:
    """Where a conversation is cut: `messages[1:at]` is summarized, `messages[at:]` kept
    (the task, `messages[0]`, always stays)."""

    at: int
    turns: int
    """Model turns the new summary stands for (those a summarized summary stood for included)."""


def plan_cut(
    messages: list[Message], keep_last_turns: int, protected: frozenset[str] = frozenset()
) -> Cut | None:
    """Where to cut so that the last `keep_last_turns` turns stay, never between a tool
    call and its result, never summarizing a turn whose call in `protected` is still
    running (a background child); None: nothing worth summarizing.

    A turn is an assistant message and the tool results after it. Messages from outside
    (sent in, background results) after the cut stay as they are.
    """
    starts = [i for i, m in enumerate(messages) if i >= 1 and isinstance(m, AssistantMessage)]
    if not starts:
        return None
    if keep_last_turns > 0:
        if len(starts) <= keep_last_turns:
            return None
        at = starts[-keep_last_turns]
    else:
        at = starts[-1] + 1  # after the last turn and its results
        while at < len(messages) and isinstance(messages[at], ToolResultMessage):
            at += 1
    for i in starts:
        message = messages[i]
        assert isinstance(message, AssistantMessage)
        if i < at and any(c.id in protected for c in message.tool_calls):
            at = i
            break
    summarized = messages[1:at]
    turns = sum(isinstance(m, AssistantMessage) for m in summarized)
    if turns == 0:
        return None
    turns += sum(m.summarized_turns for m in summarized if isinstance(m, UserMessage))
    return Cut(at, turns)


def transcript(messages: list[Message], max_chars: int | None = None) -> str:
    """The part to summarize as plain text for the summarizer; each message cut at
    `MAX_MESSAGE_CHARS`, the whole at `max_chars` (its middle goes first)."""
    lines: list[str] = []
    for message in messages:
        if isinstance(message, UserMessage):
            head = "[earlier summary]" if message.summarized_turns else "[user]"
            lines.append(f"{head} {_clip(message.text, MAX_MESSAGE_CHARS)}")
        elif isinstance(message, AssistantMessage):
            if message.text:
                lines.append(f"[assistant] {_clip(message.text, MAX_MESSAGE_CHARS)}")
            for call in message.tool_calls:
                lines.append(f"[assistant calls {call.name}] {_clip(call.arguments, 2000)}")
        else:
            kind = "tool error" if message.is_error else "tool result"
            lines.append(f"[{kind} of {message.name}] {_clip(message.content, MAX_MESSAGE_CHARS)}")
    text = "\n\n".join(lines)
    if max_chars is not None and len(text) > max_chars:
        text = _clip(text, max_chars)
    return text


def summary_message(summary: str, turns: int) -> UserMessage:
    """The message that stands for the summarized turns (the runner and the journal's
    rebuild make it the same way)."""
    return UserMessage(
        text=f"[Summary of the conversation so far: {turns} earlier model turns]\n{summary}",
        summarized_turns=turns,
    )


def _clip(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    half = max(limit // 2 - 40, 0)
    return f"{text[:half]}\n[… {len(text) - 2 * half} characters left out …]\n{text[-half:]}"


@dataclass(frozen=True)
class Overflow:
    """A provider said the prompt is too long; the numbers when it gave them."""

    limit: int | None = None
    """The model's context window, in tokens."""
    actual: int | None = None
    """How many tokens the prompt had."""

    def describe(self) -> str:
        """`by N tokens (A > L)`, or what is known of it."""
        if self.limit is not None and self.actual is not None:
            return f"{self.actual - self.limit} tokens over ({self.actual} > {self.limit})"
        if self.limit is not None:
            return f"over the model's {self.limit} tokens"
        return "by an amount the provider did not say"


_ANTHROPIC = re.compile(r"prompt is too long:\s*(\d+)\s*tokens\s*>\s*(\d+)")
_OPENAI = re.compile(
    r"maximum context length is (\d+) tokens.*?(?:resulted in|requested) (\d+)", re.S
)
_OPENAI_LIMIT = re.compile(r"maximum context length is (\d+) tokens")
_OVERFLOW_CODES = frozenset({"context_length_exceeded", "request_too_large"})
_OVERFLOW_TEXT = (
    "prompt is too long",
    "context_length_exceeded",
    "exceeds the context window",
    "maximum context length",
    "input length and `max_tokens` exceed context limit",
    "request_too_large",
)


def overflow_of(exc: ProviderError) -> Overflow | None:
    """An `Overflow` when `exc` says the prompt is too long for the model (OpenAI's
    `context_length_exceeded`, chat or Responses; Anthropic's `prompt is too long` and
    `request_too_large`; any HTTP 413), else None."""
    message = str(exc)
    lowered = message.lower()
    if not (
        exc.error_type in _OVERFLOW_CODES
        or exc.status == 413
        or any(hint in lowered for hint in _OVERFLOW_TEXT)
    ):
        return None
    if found := _ANTHROPIC.search(message):
        return Overflow(limit=int(found.group(2)), actual=int(found.group(1)))
    if found := _OPENAI.search(message):
        return Overflow(limit=int(found.group(1)), actual=int(found.group(2)))
    if found := _OPENAI_LIMIT.search(message):
        return Overflow(limit=int(found.group(1)))
    return Overflow()
