"""`memory://`: nothing survives the process; the journal keeps every event in RAM."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from orchestrator.storage.base import RunRecord

__all__ = ["MemoryStorage"]


class MemoryStorage:
    """The non-durable backend: writes are no-ops, reads are never needed."""

    durable = False

    @classmethod
    @asynccontextmanager
    async def open(cls) -> AsyncIterator[MemoryStorage]:
        """A fresh, empty store."""
        yield cls()

    async def load(self) -> list[RunRecord]:
        """Nothing to load."""
        return []

    async def write(self, records: list[RunRecord], events: list[tuple[str, int, bytes]]) -> None:
        """Nothing to write: the journal's memory is the store."""

    async def read(self, run_id: str, after_seq: int, limit: int) -> list[bytes]:
        """Never called for a non-durable store."""
        raise RuntimeError("memory storage keeps no history outside the journal")

    async def trim(self, run_id: str, first_seq: int) -> None:
        """The journal trims its own memory."""

    async def delete_runs(self, run_ids: list[str]) -> None:
        """The journal forgets the runs itself."""

    async def upkeep(self) -> None:
        """Nothing to keep up."""
