"""The cluster's list of waiting calls, as this worker's runs change it.

A call of a run here that starts or stops waiting is queued (the desk tells us at
once, with no await) and written to Redis in batches by one task, so a gateway can
answer `pending` for every worker. A failed write is retried; nothing is lost.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import msgspec
import trio

from orchestrator.cluster.store import ClusterStore
from orchestrator.core.approvals import CallKey
from orchestrator.runtime.approvals import PendingApproval
from orchestrator.storage.journal import Journal

__all__ = ["WaitingList"]

logger = logging.getLogger(__name__)

_RETRY = 1.0
"""Seconds before a failed write is tried again."""


class WaitingList:
    """Publishes the waiting calls of this worker's runs.

    Args:
        store: where the list is kept.
        journal: the runs' records (agent, owner) that the list shows.
        publishes: whether a change of this run is this worker's to publish now.
        name: the worker's, in log lines.
    """

    def __init__(
        self,
        store: ClusterStore,
        journal: Journal,
        publishes: Callable[[str, bool], bool],
        name: str,
    ) -> None:
        self._store = store
        self._journal = journal
        self._publishes = publishes
        self._name = name
        self._queued: list[tuple[str, CallKey, bytes | None]] = []
        """Changes not yet written."""
        self._lot = trio.lowlevel.ParkingLot()

    def changed(self, run_id: str, call: CallKey, waiting: PendingApproval | None) -> None:
        """A call starts (`waiting`) or stops (None) waiting: queue the change."""
        if not self._publishes(run_id, waiting is not None):
            return
        info = None
        if waiting is not None:
            record = self._journal.get(run_id).record
            info = msgspec.json.encode(
                waiting.info(
                    agent_id=record.agent_id, root_path=record.root_session_id, owner=record.owner
                )
            )
        self._queued.append((run_id, call, info))
        self._lot.unpark_all()

    async def run(self) -> None:
        """Write the queued changes, in batches, until cancelled."""
        while True:
            if not self._queued:
                await self._lot.park()
                continue
            batch, self._queued = self._queued, []
            try:
                await self._store.publish_approvals(batch)
            except Exception as exc:
                logger.warning("worker %s: publishing waiting calls failed: %s", self._name, exc)
                self._queued[:0] = batch
                await trio.sleep(_RETRY)
