"""`memory://`: nothing survives the process; the journal keeps every event in RAM."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager

from agents.core.attachments import MemoryBlobs
from orchestrator.storage.base import RunRecord

__all__ = ["MemoryStorage"]


class MemoryStorage:
    """The non-durable backend: writes are no-ops, reads are never needed; attachments'
    blobs are kept here, with the runs that refer to them."""

    durable = False

    def __init__(self) -> None:
        self.blobs = MemoryBlobs()
        self.kept: dict[str, dict[str, bytes]] = {}

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
        """The journal forgets the runs itself; their blobs go with the last of them."""
        self.blobs.forget(run_ids)

    async def put_blobs(self, run_id: str, blobs: dict[str, bytes]) -> None:
        """Kept in memory, once each."""
        await self.blobs.put_blobs(run_id, blobs)

    async def ref_blobs(self, run_id: str, keys: list[str]) -> None:
        """One more run refers to them."""
        await self.blobs.ref_blobs(run_id, keys)

    async def get_blobs(self, keys: list[str], run_id: str | None = None) -> dict[str, bytes]:
        """Those kept (and referred to by `run_id`, if given)."""
        return await self.blobs.get_blobs(keys, run_id)

    async def load_kept(self, space: str) -> dict[str, bytes]:
        """Those kept since this process started."""
        return dict(self.kept.get(space, {}))

    async def keep(self, space: str, put: dict[str, bytes], delete: Sequence[str] = ()) -> None:
        """Kept for this process."""
        values = self.kept.setdefault(space, {})
        values.update(put)
        for key in delete:
            values.pop(key, None)

    async def upkeep(self) -> None:
        """Nothing to keep up."""
