"""Runs this instance does not execute: found, adopted and mirrored from storage.

In cluster mode a gateway serves runs that workers execute. `find` fetches the
record of a run this instance has not seen (`lookup`, set by the gateway) and
`adopt`s it: the run gets a `RunLog` marked `remote`, a mirror fed by
`append_remote` with the events the gateway's tailer reads from storage (already
durable, so committed at once and handed to the feeds like local ones). Only the
runs someone here watches are tailed (`watch`, `tailed`).

In one process `find` is `Journal.get`, and `watch` only counts.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Protocol

import trio

from orchestrator.core.events import decode_event
from orchestrator.storage.base import RunRecord, Storage
from orchestrator.storage.runlog import Entry, RunLog, UnknownRun, hand_over

__all__ = ["MirroredJournal", "RunMirrors"]


class MirroredJournal(Protocol):
    """What the mirrors use of their journal: its runs' logs and its store."""

    @property
    def logs(self) -> dict[str, RunLog]: ...
    @property
    def storage(self) -> Storage: ...
    @property
    def tail(self) -> int: ...
    def get(self, run_id: str) -> RunLog: ...


class RunMirrors:
    """The journal's mirrors of runs executed by other instances."""

    def __init__(self, journal: MirroredJournal) -> None:
        self.journal = journal
        self.lookup: Callable[[str], Awaitable[RunRecord | None]] | None = None
        """Cluster mode: fetches the record of a run this instance has not seen yet."""
        self._watched: dict[str, RunLog] = {}
        """Runs with at least one watcher here (what the tailer looks at, not every run)."""
        self.watch_changed = trio.lowlevel.ParkingLot()
        """Unparked when a remote run gains or loses its first watcher."""

    async def find(self, run_id: str) -> RunLog:
        """The log of a run, fetching it from the cluster if this instance has not seen it.

        Raises:
            UnknownRun: no such run (anywhere).
        """
        journal = self.journal
        log = journal.logs.get(run_id)
        if log is not None or self.lookup is None:
            return journal.get(run_id)
        record = await self.lookup(run_id)
        if record is None:
            raise UnknownRun(run_id)
        return journal.logs.get(run_id) or self.adopt(record)

    async def settled(self, run_id: str) -> tuple[RunRecord, RunLog]:
        """A run's record as stored now, and its log holding every event that record
        counts: a mirror nobody here tails catches up from storage first (a thread's
        earlier run, read by another instance than the one that executed it).

        Raises:
            UnknownRun: no such run (anywhere).
        """
        log = await self.find(run_id)
        if not log.remote or self.lookup is None:
            return log.record, log
        record = await self.lookup(run_id)
        if record is None:
            raise UnknownRun(run_id)
        while log.committed < record.last_seq:
            count = min(1024, record.last_seq - log.committed)
            before = log.committed
            self.append_remote(run_id, await self.journal.storage.read(run_id, before, count))
            if log.committed == before:
                break  # (trimmed, or not stored yet: the journal reads what there is)
        return record, log

    def adopt(self, record: RunRecord) -> RunLog:
        """Register a run executed by another instance: a mirror fed by `append_remote`."""
        log = RunLog(record, remote=True)
        self.journal.logs[record.run_id] = log
        return log

    def append_remote(self, run_id: str, raws: list[bytes]) -> None:
        """Events of a remote run read from storage (already durable: committed at once)."""
        journal = self.journal
        log = journal.logs.get(run_id)
        if log is None or not log.remote:
            return
        fresh: list[Entry] = []
        for raw in raws:
            event = decode_event(raw)
            if event.seq == log.committed + len(fresh) + 1:
                fresh.append(Entry(event, raw, event.seq))
        if not fresh:
            return
        log.append_mirrored(fresh)
        if journal.storage.durable:
            log.evict(journal.tail)
        hand_over(log, fresh)

    def watch(self, log: RunLog, delta: int) -> None:
        """A subscription starts (+1) or stops (-1) reading the run here."""
        log.watchers += delta
        run_id = log.record.run_id
        if log.watchers > 0:
            self._watched[run_id] = log
        else:
            self._watched.pop(run_id, None)
        if log.remote and log.watchers == (1 if delta > 0 else 0):
            self.watch_changed.unpark_all()

    def tailed(self) -> dict[str, int]:
        """Remote, unfinished runs someone here watches: runId → committed seq."""
        return {
            run_id: log.committed
            for run_id, log in self._watched.items()
            if log.remote and log.finished_status is None
        }
