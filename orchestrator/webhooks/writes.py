"""The outbox's writes of what attempts came to, batched: one store write for every
outcome noted since the last one (a receiver that answers at once would otherwise cost
one transaction per delivery: ~350 deliveries/s on SQLite, bench/webhooks_bench.py).

An outcome not yet written when the process dies is lost, which only means the
delivery is sent again after the restart — with the same `webhook-id`.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

import trio

from orchestrator.storage.base import Storage

__all__ = ["KeptWrites"]

logger = logging.getLogger(__name__)
_BACKOFF_MAX = 5.0


class KeptWrites:
    """Puts and deletes of one space of the store, written together in the background."""

    def __init__(self, storage: Storage, space: str) -> None:
        self._storage = storage
        self._space = space
        self._put: dict[str, bytes] = {}
        self._delete: set[str] = set()
        self._noted = trio.Event()

    def note(self, put: dict[str, bytes], delete: Sequence[str] = ()) -> None:
        """Write these at the next batch (a later change of a key replaces an earlier)."""
        for key in delete:
            self._put.pop(key, None)
            self._delete.add(key)
        for key, value in put.items():
            self._delete.discard(key)
            self._put[key] = value
        self._noted.set()

    async def run(self) -> None:
        """Write batches until cancelled; then one last, bounded."""
        backoff = 0.05
        try:
            while True:
                if not self._put and not self._delete:
                    await self._noted.wait()
                    self._noted = trio.Event()
                    continue
                if await self._write():
                    backoff = 0.05
                else:
                    await trio.sleep(backoff)
                    backoff = min(backoff * 2, _BACKOFF_MAX)
        finally:
            with trio.CancelScope(shield=True), trio.move_on_after(2):
                if self._put or self._delete:
                    await self._write()

    async def _write(self) -> bool:
        put, delete = self._put, self._delete
        self._put, self._delete = {}, set()
        try:
            await self._storage.keep(self._space, put, sorted(delete))
        except Exception:
            logger.exception("webhooks: %d outcomes not stored yet", len(put) + len(delete))
            for key, value in put.items():  # (back, unless changed since)
                if key not in self._put and key not in self._delete:
                    self._put[key] = value
            self._delete |= {key for key in delete if key not in self._put}
            return False
        return True
