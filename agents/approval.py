"""Tool calls that wait for a person's decision: the policy, the request, the answer.

An agent whose spec lists a tool under `approval` does not run a call of it at
once: the runner emits APPROVAL_REQUESTED and waits (only that call waits; the
rest of the turn and the tree go on) on an `ApprovalGate` until a decision
arrives, the timeout passes, or the agent is cancelled. The gate is the run's
(`orchestrator.runtime.approvals`); this module is only the vocabulary, so the
runner needs nothing from the orchestrator.
"""

from __future__ import annotations

from typing import Any, Literal, Protocol

import msgspec

from agents.core.wildcard import wildcard_match

__all__ = [
    "ApprovalGate",
    "ApprovalPolicy",
    "ApprovalRequest",
    "Decision",
    "DecisionKind",
    "Prior",
]

DecisionKind = Literal["approve", "deny", "timeout", "cancelled"]


class ApprovalPolicy(msgspec.Struct, frozen=True, kw_only=True):
    """Which of an agent's tool calls wait for a decision (its YAML `approval…` keys)."""

    tools: frozenset[str]
    """Tool names; `*` is every tool (`agent_spawn` included)."""
    edit: bool = False
    """The approver may change the call's arguments."""
    timeout: float = 3600.0
    """Seconds a call waits before it is answered `timeout`."""

    def requires(self, name: str) -> bool:
        """A call of tool `name` waits for a decision (entries may use `*`: `fs__*`)."""
        if name in self.tools or "*" in self.tools:
            return True
        return any("*" in entry and wildcard_match(entry, name) for entry in self.tools)


class ApprovalRequest(msgspec.Struct, frozen=True, kw_only=True):
    """One waiting call, as the gate keeps it."""

    tool_call_id: str
    name: str
    args: dict[str, Any]
    requested_at: float
    """Wall-clock seconds (like an event's `ts`)."""
    timeout_at: float
    """Wall-clock seconds at which it is answered `timeout`."""
    wait: float
    """Seconds left to wait from now (the gate's timer, on trio's clock)."""
    edit: bool
    parameters: dict[str, Any]
    """The tool's JSON schema: edited arguments are checked against it."""


class Decision(msgspec.Struct, frozen=True, kw_only=True):
    """The answer to a waiting call."""

    decision: DecisionKind
    by: str
    """The token's name (`client` without tokens), or `server` for a timeout."""
    reason: str | None = None
    args: dict[str, Any] | None = None
    """Edited arguments (only with `approve`, and only where `edit` is allowed)."""

    def refusal(self, name: str) -> str:
        """The error result the model sees when the call does not run."""
        why = f": {self.reason}" if self.reason else ""
        if self.decision == "deny":
            return f"tool {name!r} was not run: denied by {self.by}{why}"
        if self.decision == "timeout":
            return f"tool {name!r} was not run: nobody approved it in time{why}"
        return f"tool {name!r} was not run: the approval was cancelled{why}"


Prior = tuple[float, float] | Decision
"""What the journal says of a call's approval after a takeover: `(requestedAt,
timeoutAt)` while it waits, or the `Decision` it got."""


class ApprovalGate(Protocol):
    """Where an agent's waiting calls are registered and answered (one per run)."""

    async def wait(self, request: ApprovalRequest) -> Decision:
        """Wait for the decision on `request` (a `timeout` one after `request.wait`)."""
        ...
