"""The run journal: every event is stored, in seq order, before any client sees it.

Runs publish into a `RunOutlet` (the bus's outlet). Events wait in the run's
`pending` list until the writer task has written them to storage in one batch;
then they are *committed*: they join the run's in-memory tail and feeds are woken.
Feeds only ever read committed events, so a client never sees an event that a
restart could lose. Memory stays bounded: a run whose pending list is full makes
its producers wait (`over_capacity`), and a durable backend keeps only the last
`tail` events of a run in memory (older ones are read back from storage).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

import msgspec
import trio

from orchestrator.core.events import Event, EventType, decode_event
from orchestrator.storage.base import RunRecord, Storage

__all__ = ["Entry", "Journal", "RunLog", "UnknownRun"]

logger = logging.getLogger(__name__)
_encode = msgspec.json.Encoder().encode


class UnknownRun(LookupError):
    """No run with that id."""

    def __init__(self, run_id: str) -> None:
        super().__init__(f"unknown run {run_id!r}")
        self.run_id = run_id


class Entry:
    """A journaled event with its JSON encoding (encoded once, sent to every client)."""

    __slots__ = ("event", "raw", "seq")

    def __init__(self, event: Event, raw: bytes) -> None:
        self.event = event
        self.raw = raw
        self.seq = event.seq


class RunLog:
    """The journal's state for one run."""

    def __init__(self, record: RunRecord) -> None:
        self.record = record
        self.entries: list[Entry] = []
        """Committed events: all of them (memory) or the newest (durable)."""
        self.first_seq = record.last_seq + 1
        """The seq of entries[0] (or of the next event when entries is empty)."""
        self.committed = record.last_seq
        self.pending: list[Entry] = []
        self.writing = 0
        self.readers = trio.lowlevel.ParkingLot()
        self.writers = trio.lowlevel.ParkingLot()
        self.finished_status: str | None = None if record.status == "running" else record.status
        """Set once RUN_FINISHED (or a call run's end) is committed."""

    @property
    def finished(self) -> bool:
        """True once the run ended and all its events are committed."""
        return self.finished_status is not None and not self.pending and not self.writing


class RunOutlet:
    """The bus outlet of one run: events go to the journal."""

    __slots__ = ("_journal", "_log")

    def __init__(self, journal: Journal, log: RunLog) -> None:
        self._journal = journal
        self._log = log

    def put_nowait(self, event: Event) -> None:
        """Queue the event for the next write batch."""
        log = self._log
        log.pending.append(Entry(event, _encode(event)))
        if event.type is EventType.RUN_FINISHED:
            log.record.status = str(event.data.get("status", "completed"))
            log.record.finished_at = event.ts
        self._journal.mark(log)

    def over_capacity(self) -> bool:
        """Producers wait while the writer is behind by `max_pending` events."""
        return len(self._log.pending) >= self._journal.max_pending

    async def wait_writable(self) -> None:
        """Wait for the writer to take the pending batch."""
        while len(self._log.pending) >= self._journal.max_pending:
            await self._log.writers.park()


class Journal:
    """Owns the storage, the per-run logs and the writer task."""

    def __init__(
        self,
        storage: Storage,
        *,
        tail: int = 8192,
        max_pending: int = 8192,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.storage = storage
        self.tail = tail
        self.max_pending = max_pending
        self._clock = clock
        self._logs: dict[str, RunLog] = {}
        self._dirty: dict[str, RunLog] = {}
        self._work = trio.lowlevel.ParkingLot()
        self._idle = trio.lowlevel.ParkingLot()
        self.events_written = 0
        self._writing = False

    # -- lifecycle -------------------------------------------------------------

    async def open(self) -> list[str]:
        """Load every stored run; end the ones a previous server left `running`.

        Returns the ids of the runs it marked `interrupted`.
        """
        interrupted = []
        for record in await self.storage.open():
            log = RunLog(record)
            self._logs[record.run_id] = log
            if record.status == "running":
                interrupted.append(record.run_id)
                self._finish_interrupted(log)
        if interrupted:
            await self._write_batch()
        return interrupted

    def _finish_interrupted(self, log: RunLog) -> None:
        event = Event(
            run_id=log.record.run_id,
            seq=log.record.last_seq + 1,
            ts=self._clock(),
            type=EventType.RUN_FINISHED,
            source=None,
            last=True,
            data={"status": "interrupted", "error": "the server stopped while the run was running"},
        )
        self.outlet(log.record.run_id).put_nowait(event)

    async def run_writer(
        self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
    ) -> None:
        """Write batches until cancelled; then write what is left and close storage."""
        task_status.started()
        try:
            while True:
                if not self._dirty:
                    await self._work.park()
                await self._write_batch()
        finally:
            with trio.CancelScope(shield=True):
                await self._write_batch()

    async def aclose(self) -> None:
        """Close the storage; call it from the task that called `open()`, after the writer."""
        await self.storage.aclose()

    async def flush(self) -> None:
        """Wait until everything published so far is committed."""
        while self._dirty or self._writing:
            await self._idle.park()

    # -- runs ------------------------------------------------------------------

    def create_run(self, record: RunRecord) -> RunLog:
        """Register a new run (written with the next batch)."""
        log = RunLog(record)
        self._logs[record.run_id] = log
        self.mark(log)
        return log

    def outlet(self, run_id: str) -> RunOutlet:
        """The outlet a run's sink publishes into."""
        return RunOutlet(self, self.get(run_id))

    def end_call_run(self, run_id: str, status: str) -> None:
        """A run with no events (a blocking call) ended."""
        log = self.get(run_id)
        log.record.status = status
        log.record.finished_at = self._clock()
        self.mark(log)

    def get(self, run_id: str) -> RunLog:
        """The log of a run.

        Raises:
            UnknownRun: no such run.
        """
        log = self._logs.get(run_id)
        if log is None:
            raise UnknownRun(run_id)
        return log

    def records(self) -> list[RunRecord]:
        """Every run, oldest first."""
        return [log.record for log in self._logs.values()]

    def mark(self, log: RunLog) -> None:
        """The run has something to write: queue it for the next batch."""
        self._dirty[log.record.run_id] = log
        if self._work:
            self._work.unpark_all()

    # -- writing ---------------------------------------------------------------

    async def _write_batch(self) -> None:
        if not self._dirty:
            return
        dirty, self._dirty = self._dirty, {}
        batches: list[tuple[RunLog, list[Entry]]] = []
        rows: list[tuple[str, int, bytes]] = []
        for log in dirty.values():
            batch, log.pending = log.pending, []
            log.writing = len(batch)
            if batch:
                log.record.last_seq = batch[-1].seq
                if self.storage.durable:
                    run_id = log.record.run_id
                    rows.extend((run_id, e.seq, e.raw) for e in batch)
            batches.append((log, batch))
            if log.writers:
                log.writers.unpark_all()
        records = [msgspec.structs.replace(log.record) for log in dirty.values()]
        self._writing = True
        try:
            await self.storage.write(records, rows)
        except Exception:
            logger.exception("journal write failed; %d events not stored", len(rows))
            raise
        finally:
            self._writing = False
        for log, batch in batches:
            log.writing = 0
            if batch:
                log.entries.extend(batch)
                log.committed = batch[-1].seq
                self.events_written += len(batch)
                if self.storage.durable and len(log.entries) > 2 * self.tail:
                    drop = len(log.entries) - self.tail
                    del log.entries[:drop]
                    log.first_seq += drop
            if log.record.status != "running":
                log.finished_status = log.record.status
            if log.readers:
                log.readers.unpark_all()
        if not self._dirty and self._idle:
            self._idle.unpark_all()

    # -- reading ---------------------------------------------------------------

    async def read(self, run_id: str, after_seq: int, limit: int) -> list[Entry]:
        """Committed events with seq > after_seq, oldest first, at most `limit`."""
        log = self.get(run_id)
        if after_seq >= log.committed:
            return []
        if after_seq + 1 >= log.first_seq:
            start = after_seq + 1 - log.first_seq
            return log.entries[start : start + limit]
        if not self.storage.durable:  # pragma: no cover - memory keeps everything
            return []
        count = min(limit, log.committed - after_seq)
        raws = await self.storage.read(run_id, after_seq, count)
        return [Entry(decode_event(raw), raw) for raw in raws]

    async def wait(self, run_id: str, after_seq: int) -> None:
        """Return once the run has committed events past `after_seq`, or has finished."""
        log = self.get(run_id)
        while log.committed <= after_seq and not log.finished:
            await log.readers.park()
