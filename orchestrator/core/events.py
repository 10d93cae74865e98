"""The wire event model of contract §2: one envelope for every event of a run.

Events are msgspec Structs that encode straight to camelCase JSON. `data` stays a
plain dict: its shape depends on `type` (see the table in docs/events.md), and a
dict is both the cheapest thing to build on the hot path and what every client
reads anyway.
"""

from __future__ import annotations

from typing import Any, Literal

import msgspec

from agents.core.events import EventType, Usage

__all__ = [
    "RUN_STATUSES",
    "Event",
    "EventType",
    "RemoteRef",
    "RunStatus",
    "Source",
    "Usage",
    "decode_event",
    "encode_event",
]

RunStatus = Literal["running", "completed", "failed", "cancelled", "interrupted"]
"""A run's status (contract §1); `RUN_FINISHED.data.status` is one of the last four."""
RUN_STATUSES: tuple[RunStatus, ...] = ("running", "completed", "failed", "cancelled", "interrupted")


class RemoteRef(msgspec.Struct, frozen=True, kw_only=True, rename="camel", gc=False):
    """Where a forwarded event came from: its run and seq on the remote server."""

    run_id: str
    seq: int


class Source(msgspec.Struct, frozen=True, kw_only=True, rename="camel", gc=False):
    """Where a child agent's event comes from; `None` on the root agent's own events.

    One Source is built per agent instance when it is spawned and shared by all of
    its events, so tagging costs nothing per event.
    """

    agent_key: str
    """`agent:<agentId>:<uuid>`: the instance, valid for `agent_send` until the run ends."""
    agent_id: str
    """The subagent type (its YAML file's stem)."""
    agent_name: str
    """Display name from the YAML `name`, else the agentId."""
    session_id: str
    """`sub-<hex>` for a child."""
    parent_session_id: str
    """The sessionId of the agent that spawned this one."""
    depth: int
    """Parent depth + 1 (the root is depth 0)."""
    path: str
    """`<root sessionId>/<agentId>/…`, one segment per level."""
    task_id: str | None = None
    """`task-<hex>` for background spawns, else None."""
    parent_tool_call_id: str | None = None
    """The id of the parent's `agent_spawn` call that created this instance."""
    remote: RemoteRef | msgspec.UnsetType = msgspec.UNSET
    """Only on an event forwarded from a remote subagent's run (docs/remote.md): its
    run and seq there. Unset, it is not encoded at all, so local events keep their
    encoding; every decoder of `Event` (journal, client, `watch --json`) keeps it."""


class Event(msgspec.Struct, frozen=True, rename="camel", gc=False):
    """One event of a run; `seq` is the run's 1-based, gap-free resume cursor.

    Not tracked by the garbage collector (`gc=False`): an event refers only to
    strings, numbers, its Source and its `data` (which never refers back to it), so
    it can never be part of a cycle. Hundreds of thousands of events a second would
    otherwise fill generation 0 and promote thousands of queued events into full
    collections of ~20–35 ms each (docs/benchmarks.md). Positional construction
    is allowed (and used on the per-delta path, where it is measurably cheaper).
    """

    run_id: str
    seq: int
    ts: float
    type: EventType
    source: Source | None
    last: bool = False
    data: dict[str, Any] = msgspec.field(default_factory=dict)


_encoder = msgspec.json.Encoder()
_decoder = msgspec.json.Decoder(Event)


def encode_event(event: Event) -> bytes:
    """Encode one event as compact JSON bytes."""
    return _encoder.encode(event)


def decode_event(raw: bytes | str) -> Event:
    """Decode one event; raises `msgspec.ValidationError` naming the bad field."""
    return _decoder.decode(raw)
