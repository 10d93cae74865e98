"""A cluster gateway: queues runs, forwards control, and tails the runs its clients watch.

A gateway executes nothing itself. `run` writes the run's record and a queue entry
(one MULTI/EXEC) and answers with the runId at once; `cancel` and `send` go to the
run's control stream, where its owner — now, or after a takeover — reads them.
Events reach the gateway's subscriptions through the same journal, feeds and
filters as in one process: the gateway keeps a mirror of each watched run and one
task tails all of them with a single `XREAD BLOCK` over their event streams
(replay below the mirror's tail is read with `XRANGE`, as for any durable store).
Pub/sub is not on the data path.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING

import trio

from orchestrator.cluster.store import ClusterStore, Control
from orchestrator.core.bus import new_run_id, new_session_id
from orchestrator.runtime.run import RunResult
from orchestrator.storage.base import RunRecord
from orchestrator.storage.journal import Journal

if TYPE_CHECKING:
    from orchestrator.server.auth import Principal

__all__ = ["ClusterGateway", "QueuedRun"]

logger = logging.getLogger(__name__)
_TAIL_BLOCK = 0.1
"""Seconds one XREAD waits: events return at once; a newly watched run joins after this."""


class QueuedRun:
    """What a gateway knows of a run it queued: its id."""

    def __init__(self, run_id: str) -> None:
        self.run_id = run_id


class ClusterGateway:
    """The cluster side of one instance's WebSocket server."""

    def __init__(self, store: ClusterStore, journal: Journal) -> None:
        self.store = store
        self.journal = journal
        journal.lookup = store.record
        self.tail_reads = 0

    async def start(
        self, agent_id: str, input: str, *, principal: Principal | None = None
    ) -> QueuedRun:
        """Queue a run; it is the cluster's from here on."""
        record = RunRecord(
            run_id=new_run_id(),
            agent_id=agent_id,
            input=input,
            status="queued",
            created_at=time.time(),
            root_session_id=new_session_id(root=True),
            owner=principal.name if principal is not None else None,
        )
        await self.store.submit(record)
        self.journal.adopt(record)
        return QueuedRun(record.run_id)

    async def cancel(self, run_id: str) -> None:
        """Ask the run's owner to cancel it (a finished run is left as it is)."""
        log = await self.journal.find(run_id)
        if log.finished_status is None:
            await self.store.send_control(run_id, Control("cancel"))

    async def send(self, run_id: str, agent_key: str | None, message: str) -> None:
        """Hand a person's message to the run's owner, for that agent (default: root)."""
        await self.journal.find(run_id)
        await self.store.send_control(run_id, Control("send", agent_key, message))

    async def wait(self, run: QueuedRun) -> RunResult:
        """Wait for a queued run's end (a blocking `run`), from its journaled events."""
        journal = self.journal
        log = await journal.find(run.run_id)
        journal.watch(log, +1)
        try:
            await journal.wait_finished(run.run_id)
        finally:
            journal.watch(log, -1)
        entries = await journal.read(run.run_id, log.committed - 1, 1)
        data = entries[-1].event.data if entries else {}
        status = str(data.get("status", log.finished_status or "failed"))
        result = data.get("result")
        error = data.get("error")
        return RunResult(
            run_id=run.run_id,
            status=status,  # type: ignore[arg-type]
            text=result if isinstance(result, str) else None,
            error=error if isinstance(error, str) else None,
        )

    async def tail_loop(self) -> None:
        """Feed the mirrors of watched runs from Redis, until cancelled."""
        journal = self.journal
        while True:
            cursors = journal.tailed()
            if not cursors:
                await journal.watch_changed.park()
                continue
            try:
                got = await self.store.tail(cursors, _TAIL_BLOCK)
            except Exception as exc:
                logger.warning("tailing %d runs failed: %s", len(cursors), exc)
                await trio.sleep(1.0)
                continue
            self.tail_reads += 1
            for run_id, raws in got.items():
                journal.append_remote(run_id, raws)
