"""A tool call waiting for approval, as lists show it (the `pending` op, the cluster).

Pure data: the runtime's `ApprovalDesk` makes one from each waiting call, a cluster
worker stores it in Redis for the gateways, and the protocol sends it as is.
"""

from __future__ import annotations

from typing import Any

import msgspec

__all__ = ["ApprovalInfo"]


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
