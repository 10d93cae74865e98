"""How a run of an agent instance ends: one terminal event, never two.

A run ends in its AGENT_RESULT (the final answer) or its AGENT_ERROR (a failure, a
cancel, a timeout), with the usage of the instance and of its subtree. A cancel
that arrives while the answer is being published finds it out and adds nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import msgspec
import trio

from agents.core.events import EventType, Usage
from agents.core.payloads import AgentResultData, agent_error
from agents.core.usage import UsageNode
from agents.emitter import Emitter

__all__ = ["AgentOutcome", "Cancellation", "Ending"]


class Cancellation(msgspec.Struct, frozen=True):
    """Who stopped an agent instance, and why (a person's `cancel`)."""

    by: str
    """`user`: a person asked (the `cancel` op, `orchestrator cancel`, the API)."""
    reason: str | None = None

    def describe(self) -> str:
        """`cancelled by the user[: reason]`: the error result its parent's model sees."""
        who = "the user" if self.by == "user" else self.by
        return f"cancelled by {who}" + (f": {self.reason}" if self.reason else "")


class AgentOutcome(msgspec.Struct, frozen=True):
    """A finished agent instance: its final text and token usage."""

    text: str
    usage: Usage
    subtree_usage: Usage
    structured: Any = msgspec.UNSET
    """An agent with an `output_schema`: its validated answer (`text` is its compact
    JSON); UNSET for any other."""


class Ending:
    """The terminal event of each run of one agent instance.

    Args:
        bus: where it goes.
        usage: the instance's usage node (its own and its subtree's usage).
        estimated: whether a turn's usage was estimated (`usageEstimated`).
    """

    __slots__ = ("_bus", "_estimated", "_usage", "ended", "outcome")

    def __init__(self, bus: Emitter, usage: UsageNode, estimated: Callable[[], bool]) -> None:
        self._bus = bus
        self._usage = usage
        self._estimated = estimated
        self.ended = False
        """This run has emitted its terminal event."""
        self.outcome: AgentOutcome | None = None
        """The final answer, once published."""

    def reset(self) -> None:
        """A new run of the instance begins (it may end once more)."""
        self.ended, self.outcome = False, None

    def error(self, error_type: str, message: str, cancelled: Cancellation | None) -> None:
        """AGENT_ERROR, unless this run already emitted its terminal event."""
        if self.ended or self._bus.closed:
            return
        self.ended = True
        stopped = cancelled if error_type == "cancelled" else None
        data = agent_error(
            error_type,
            message,
            by=stopped.by if stopped is not None else None,
            reason=stopped.reason if stopped is not None else None,
            usage=self._usage.own.to_dict(),
            subtree_usage=self._usage.subtree.to_dict(),
            estimated=self._estimated(),
        )
        self._bus.emit_nowait(EventType.AGENT_ERROR, data, last=True)

    async def finish(self, text: str, structured: Any = msgspec.UNSET) -> AgentOutcome:
        """AGENT_RESULT with the final answer `text` (and `structured`, the value of an
        answer an output schema accepted)."""
        # A budget tripped by the last turn's usage cancels us here, before the result.
        await trio.lowlevel.checkpoint_if_cancelled()
        outcome = AgentOutcome(text, self._usage.own.copy(), self._usage.subtree.copy(), structured)
        # Published before the first checkpoint of `emit`: a cancel arriving while it
        # waits for room finds the answer out, and adds no second terminal event.
        self.ended, self.outcome = True, outcome
        data: AgentResultData = {
            "text": text,
            "usage": outcome.usage.to_dict(),
            "subtreeUsage": outcome.subtree_usage.to_dict(),
        }
        if structured is not msgspec.UNSET:
            data["structured"] = structured
        await self._bus.emit(EventType.AGENT_RESULT, data, last=True)
        return outcome
