"""A tool call waiting for approval, as lists show it (the `pending` op, the cluster),
and a person's answer to one, as every door hands it on.

Pure data: the runtime's `ApprovalDesk` makes an `ApprovalInfo` from each waiting
call, a cluster worker stores it in Redis for the gateways, and the protocol sends it
as is. An `Answer` is built once where it comes in (the `approve` op, an AG-UI
`resume[]`, `RunStream.approve`) and travels as it is — through `RunService.approve`,
a gateway's control stream, a worker — to the desk, which alone decides.
"""

from __future__ import annotations

from typing import Any, Literal

import msgspec

from agents.approval import Decision

__all__ = ["AgentKey", "Answer", "ApprovalInfo", "CallKey"]

CallKey = tuple[str | None, str]
"""A waiting call within its run: (the calling agent's agentKey — None for the root
agent —, its toolCallId). Ids alone may repeat: each agent numbers its own calls."""

AgentKey = str | None | msgspec.UnsetType
"""Whose call an answer is for: an agentKey, None for the root agent, or unset — the
one agent whose call has that id."""


class Answer(msgspec.Struct, frozen=True, kw_only=True, rename="camel", omit_defaults=True):
    """One answer to one waiting call of a run (the run is where it is sent)."""

    tool_call_id: str
    decision: Literal["approve", "deny"]
    agent_key: AgentKey = msgspec.UNSET
    """The calling agent (None: the root); unset: whichever agent's call has the id."""
    by: str = "client"
    """Who answered: the token's name (`client` without tokens)."""
    reason: str | None = None
    args: dict[str, Any] | None = None
    """Edited arguments (only with `approve`, where the agent allows edits)."""

    def as_decision(self) -> Decision:
        """What the waiting call gets."""
        return Decision(decision=self.decision, by=self.by, reason=self.reason, args=self.args)


class ApprovalInfo(msgspec.Struct, frozen=True, kw_only=True, rename="camel", omit_defaults=True):
    """One waiting tool call: where it is in the tree, what it would do, until when."""

    run_id: str
    agent_key: str | None
    """The calling instance (None: the root agent)."""
    agent_id: str
    path: str
    depth: int
    tool_call_id: str
    name: str
    args: dict[str, Any]
    edit: bool
    """The approver may send changed `args`."""
    requested_at: float
    timeout_at: float
    owner: str | None = None
    """The run's owner (who, besides admins, may see and answer it)."""
    parameters: dict[str, Any] | None = None
    """The tool's JSON schema (kept for checking edits; not sent to clients)."""
