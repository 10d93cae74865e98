"""What the journal needs from a storage backend."""

from __future__ import annotations

from typing import Protocol

import msgspec

__all__ = ["RunRecord", "Storage"]


class RunRecord(msgspec.Struct, kw_only=True):
    """One run as listed by the `runs` op and kept across restarts."""

    run_id: str
    agent_id: str
    input: str
    status: str
    """`running`, `completed`, `failed`, `cancelled` or `interrupted`."""
    created_at: float
    root_session_id: str
    last_seq: int = 0
    finished_at: float | None = None


class Storage(Protocol):
    """A durable (or not) home for run records and encoded events."""

    durable: bool
    """False: the journal must keep every event in memory (nothing to read back)."""

    async def open(self) -> list[RunRecord]:
        """Open the store; return every run it holds."""
        ...

    async def write(self, records: list[RunRecord], events: list[tuple[str, int, bytes]]) -> None:
        """Upsert `records` and insert `(run_id, seq, json)` events, atomically."""
        ...

    async def read(self, run_id: str, after_seq: int, limit: int) -> list[bytes]:
        """Encoded events of `run_id` with seq > after_seq, in seq order, at most `limit`."""
        ...

    async def aclose(self) -> None:
        """Close the store (after a final write)."""
        ...
