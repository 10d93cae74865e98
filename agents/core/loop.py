"""The agent loop's decisions, as a pure step machine.

`AgentLoop` is told what just happened (the agent is ready for a turn, a turn
ended, the agent went quiet) and answers with the next step: ask the model,
compact first, continue a cut answer, wait for background work, finish, or fail.
It holds the loop's counters (turns taken, the parts of an answer cut by the
output limit) and nothing else: no trio, no bus, no provider. The runner
(`agents/runner/agent.py`) carries each step out; tests read it without running
anything (`tests/unit/test_loop.py`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from agents.core.compaction import CONTINUE_PROMPT, OUTPUT_LIMIT_REASONS

__all__ = [
    "AgentLoop",
    "AskModel",
    "Compact",
    "ContinueCut",
    "Fail",
    "Finish",
    "NextTurn",
    "Step",
    "WaitQuiet",
]


@dataclass(frozen=True, slots=True)
class NextTurn:
    """Take the inbox's messages into the conversation, then say `ready`."""


@dataclass(frozen=True, slots=True)
class AskModel:
    """Ask the model for a turn, then say `turn_ended`."""


@dataclass(frozen=True, slots=True)
class Compact:
    """Compact the conversation (`reason`: `threshold`), then ask the model (`AskModel`)."""

    reason: Literal["threshold"]


@dataclass(frozen=True, slots=True)
class ContinueCut:
    """The answer was cut by the output limit: tell the model `prompt` (a USER_MESSAGE
    from the orchestrator, `continuation: true`), then go on (`NextTurn`)."""

    prompt: str


@dataclass(frozen=True, slots=True)
class WaitQuiet:
    """The turn was a final answer: wait until no background work of the agent runs or
    a message arrived, then say `quiet(inbox)`."""


@dataclass(frozen=True, slots=True)
class Finish:
    """The final answer: `text` (the parts of a cut answer joined)."""

    text: str


@dataclass(frozen=True, slots=True)
class Fail:
    """The agent fails with AGENT_ERROR `error_type`."""

    error_type: str
    message: str


Step = NextTurn | AskModel | Compact | ContinueCut | WaitQuiet | Finish | Fail

_ASK = AskModel()
_NEXT = NextTurn()
_WAIT = WaitQuiet()


@dataclass(slots=True)
class AgentLoop:
    """One run of an agent: what to do next, from what just happened.

    Args:
        agent_id: named in failures.
        max_turns: model turns in one run (`max_turns` of the spec).
        continue_limit: continuations of an answer cut by the output limit
            (`continue_on_output_limit`; 0: a cut answer is final as it is).
        max_context_tokens: compact before a turn whose conversation is larger.
    """

    agent_id: str
    max_turns: int
    continue_limit: int = 0
    max_context_tokens: int | None = None
    turns: int = 0
    """Model turns asked for in this run."""
    cut_parts: list[str] = field(default_factory=list)
    """The texts of a final answer cut by the output limit, continued since."""
    answer: str | None = None
    """The final answer waiting for the agent to be quiet (`WaitQuiet`)."""

    def ready(self, context_tokens: int | None = None) -> Step:
        """Before a turn: `context_tokens` is the conversation's size (needed only when
        `max_context_tokens` is set). Fails past `max_turns`; else compacts first when
        the conversation is over `max_context_tokens`, or asks the model."""
        if self.turns >= self.max_turns:
            return Fail(
                "max_turns",
                f"agent {self.agent_id!r} reached max_turns ({self.max_turns}) "
                "without a final answer",
            )
        self.turns += 1
        limit = self.max_context_tokens
        if limit is not None and context_tokens is not None and context_tokens > limit:
            return Compact("threshold")
        return _ASK

    def turn_ended(self, text: str, called_tools: bool, finish_reason: str) -> Step:
        """A model turn ended with `text`, maybe tool calls (their results are in the
        conversation), and the provider's `finish_reason`."""
        if called_tools:
            self.cut_parts.clear()
            return _NEXT
        if finish_reason == "pause_turn":  # the provider paused a long server-tool turn
            return _NEXT  # sending the conversation back lets it go on
        if finish_reason in OUTPUT_LIMIT_REASONS and self.continue_limit:
            if len(self.cut_parts) >= self.continue_limit:
                return Fail(
                    "output_limit",
                    f"agent {self.agent_id!r}: its answer was cut by the model's output "
                    f"limit ({finish_reason}) again after {len(self.cut_parts)} "
                    "continuation(s) (continue_on_output_limit; or raise the model's "
                    "max_tokens)",
                )
            self.cut_parts.append(text)
            return ContinueCut(CONTINUE_PROMPT)
        self.answer = "".join(self.cut_parts) + text
        return _WAIT

    def compacted(self) -> Step:
        """The conversation was compacted (`Compact`): the turn it was made room for is
        asked now (it counted already)."""
        return _ASK

    def continued(self) -> Step:
        """The continuation prompt of a cut answer is in the conversation (`ContinueCut`)."""
        return _NEXT

    def start(self) -> Step:
        """A run begins (its task, or tool results after a takeover, are in)."""
        return _NEXT

    def answered(self, text: str) -> Step:
        """The run goes on after an answer already given (continued after a takeover
        while it waited for background work): it is final once the agent is quiet."""
        self.answer = text
        return _WAIT

    def refused(self) -> Step:
        """The final answer was refused (it does not match the agent's output schema) and
        the model was told why: it answers again (the try counts against `max_turns`)."""
        self.answer = None
        return _NEXT

    def quiet(self, inbox: bool) -> Step:
        """No background work runs (or a message came): a message means another turn;
        else the answer is final."""
        if inbox or self.answer is None:
            self.answer = None
            return _NEXT
        return Finish(self.answer)
