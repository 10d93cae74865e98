"""Compaction, the trio part: the older part of a conversation replaced by a summary.

When to compact is the loop's decision (`agents/core/loop.py`: a conversation over
`max_context_tokens`) or the provider's (a prompt too long); where to cut and what
the summarizer reads is `agents/core/compaction.py`. This room writes the summary
(the summarizer subagent, or the agent's own model), swaps it in and says so
(COMPACTION_STARTED, COMPACTION_FINISHED).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from contextlib import aclosing
from typing import Literal

import trio

from agents.core.compaction import (
    CHARS_PER_TOKEN,
    MAX_SUMMARY_CHARS,
    SUMMARY_SYSTEM,
    ContextMeter,
    Overflow,
    estimate_messages,
    estimate_text,
    overflow_of,
    plan_cut,
    summary_message,
    transcript,
)
from agents.core.events import EventType, Usage
from agents.core.messages import Message, ModelRequest, TextDelta, UsageReport, UserMessage
from agents.core.usage import UsageNode
from agents.emitter import Emitter
from agents.errors import AgentFailed, ProviderError, ToolError
from agents.providers.base import Provider
from agents.runner.turn import TurnLimits, TurnOutcome, TurnReader
from agents.spec import CompactionSpec
from agents.tools.base import ToolContext

__all__ = ["Compactor", "Summarizer"]

Summarizer = Callable[[str, str, ToolContext], Awaitable[str]]
"""`summarize(agent_id, task, ctx)`: run the summarizer subagent `agent_id` as a child
of the compacting agent on `task`; its answer (the runtime's `agent_spawn`)."""


class Compactor:
    """Compacts the conversation of one agent instance.

    Args:
        agent_id: named in failures.
        policy: the agent's compaction settings.
        provider, limits, usage: the agent's own model (a summary it writes is
            bounded like a turn, and its tokens are the agent's).
        bus: where the compaction's events go.
        meter: the conversation's size, before and after.
        summarize_with: runs a summarizer subagent as a child, given a tool context
            from `context` (the call id `compaction-<n>`).
        protected: tool call ids whose background work still runs (never cut away).
    """

    __slots__ = (
        "_agent_id",
        "_bus",
        "_context",
        "_limits",
        "_meter",
        "_protected",
        "_provider",
        "_summarize_with",
        "_usage",
        "count",
        "policy",
    )

    def __init__(
        self,
        *,
        agent_id: str,
        policy: CompactionSpec,
        provider: Provider,
        limits: TurnLimits,
        usage: UsageNode,
        bus: Emitter,
        meter: ContextMeter,
        summarize_with: Summarizer | None,
        context: Callable[[str], ToolContext],
        protected: dict[str, int],
    ) -> None:
        self._agent_id = agent_id
        self.policy = policy
        self._provider = provider
        self._limits = limits
        self._usage = usage
        self._bus = bus
        self._meter = meter
        self._summarize_with = summarize_with
        self._context = context
        self._protected = protected
        self.count = 0
        """Compactions of this instance so far."""

    async def turn(self, turns: TurnReader, messages: list[Message]) -> TurnOutcome:
        """A model turn; a prompt the provider says is too long is compacted once and
        the turn asked again (the provider streamed nothing for it)."""
        try:
            return await turns.turn(messages)
        except ProviderError as exc:
            overflow = _too_long(exc)
        await self.compact(messages, "prompt_too_long", overflow)
        try:
            return await turns.turn(messages)
        except ProviderError as exc:
            raise AgentFailed(
                f"agent {self._agent_id!r}: the conversation is still too long for the model "
                f"after compaction: {_too_long(exc).describe()}",
                error_type="context_overflow",
            ) from exc

    async def compact(
        self,
        messages: list[Message],
        reason: Literal["threshold", "prompt_too_long"],
        overflow: Overflow | None = None,
    ) -> None:
        """Replace the older part of `messages` by a summary (COMPACTION_STARTED, then
        COMPACTION_FINISHED). Nothing changes until the summary is in: a cancel or a
        failure while it is written leaves the conversation as it was.

        Raises:
            AgentFailed: `context_overflow` (nothing can be summarized, or the result is
                still over `max_context_tokens`), `compaction_failed` (the summarizer).
        """
        policy, who = self.policy, self._agent_id
        before = self._meter.size(messages)
        protected = frozenset(self._protected)
        cut = plan_cut(messages, policy.keep_last_turns, protected)
        if cut is None and reason == "prompt_too_long" and policy.keep_last_turns:
            cut = plan_cut(messages, 0, protected)  # the last turns must go too
        if cut is None and reason == "threshold":
            return  # nothing to summarize yet: the threshold is a target, not the limit
        if cut is None:
            why = overflow.describe() if overflow is not None else f"about {before} tokens"
            raise AgentFailed(
                f"agent {who!r}: its conversation is too long for its model "
                f"({why}) and holds nothing more to summarize: the task and the turns kept "
                f"(compaction.keep_last_turns: {policy.keep_last_turns}) are about "
                f"{before} tokens",
                error_type="context_overflow",
            )
        self.count += 1
        self._bus.emit_nowait(
            EventType.COMPACTION_STARTED, {"reason": reason, "beforeTokens": before}
        )
        window = overflow.limit if overflow is not None and overflow.limit else None
        window = window or policy.max_context_tokens
        max_chars = window * CHARS_PER_TOKEN * 3 // 4 if window else None
        summary = await self._summary(transcript(messages[1 : cut.at], max_chars))
        kept = messages[cut.at :]
        old = list(messages)
        messages[:] = [messages[0], summary_message(summary, cut.turns), *kept]
        after = self._meter.rewritten(old, messages)
        full = self._bus.offer(  # put now: the conversation and its journal change together
            EventType.COMPACTION_FINISHED,
            {
                "afterTokens": after,
                "summarizedTurns": cut.turns,
                "summarizedMessages": cut.at - 1,
                "keptMessages": len(kept),
                "summary": summary,
            },
        )
        limit = policy.max_context_tokens
        if limit is not None and after > limit:
            raise AgentFailed(
                f"agent {who!r}: after compaction the conversation is still about "
                f"{after} tokens, {after - limit} over compaction.max_context_tokens ({limit}): "
                f"the summary is about {estimate_text(summary)} tokens and the "
                f"{len(kept)} messages kept about {estimate_messages(kept)}",
                error_type="context_overflow",
            )
        if full:
            await self._bus.wait_writable()

    async def _summary(self, text: str) -> str:
        """The summary of `text`, checked: not empty, not over `MAX_SUMMARY_CHARS`."""
        try:
            summary = (await self._summarize(text)).strip()
        except (ProviderError, ToolError) as exc:
            raise AgentFailed(
                f"agent {self._agent_id!r}: compaction failed: {exc}",
                error_type="compaction_failed",
            ) from exc
        if not summary or len(summary) > MAX_SUMMARY_CHARS:
            said = f"{len(summary)} characters, over {MAX_SUMMARY_CHARS}" if summary else "nothing"
            raise AgentFailed(
                f"agent {self._agent_id!r}: compaction failed: the summarizer wrote {said}",
                error_type="compaction_failed",
            )
        return summary

    async def _summarize(self, text: str) -> str:
        """The summary of `text` (a transcript): by the summarizer subagent, run as a child
        of this agent, or by this agent's own model (its usage is this agent's)."""
        policy = self.policy
        ask = (
            f"{text}\n\n---\nSummarize the conversation above (the earlier part of yours) "
            "as your notes to yourself for the rest of the task."
        )
        if policy.instructions:
            ask += f"\n\n{policy.instructions}"
        if policy.summarizer is not None and self._summarize_with is not None:
            ctx = self._context(f"compaction-{self.count}")
            return await self._summarize_with(policy.summarizer, ask, ctx)
        system = SUMMARY_SYSTEM
        if policy.instructions:
            system += f"\n\n{policy.instructions}"
        request = ModelRequest(system=system, messages=(UserMessage(text=ask),), purpose="summary")
        limits = self._limits
        parts: list[str] = []
        size = 0
        usage: UsageReport | None = None
        try:
            with trio.CancelScope(relative_deadline=limits.timeout) as deadline:
                async with aclosing(self._provider.stream(request)) as batches:
                    async for batch in batches:
                        for part in batch:
                            if type(part) is TextDelta:
                                parts.append(part.text)
                                size += len(part.text)
                            elif type(part) is UsageReport:
                                usage = part
                        if size > limits.max_bytes:
                            raise ToolError(
                                f"the summary passed {limits.max_bytes} characters "
                                "(limits.max_turn_bytes)"
                            )
        finally:
            if usage is not None:
                self._usage.charge(
                    Usage(input_tokens=usage.input_tokens, output_tokens=usage.output_tokens)
                )
        if deadline.cancelled_caught:
            raise ToolError(f"the summary took over {limits.timeout:g} s")
        return "".join(parts)


def _too_long(exc: ProviderError) -> Overflow:
    """What the provider said of a prompt too long; any other failure is raised on."""
    overflow = overflow_of(exc)
    if overflow is None:
        raise exc
    return overflow
