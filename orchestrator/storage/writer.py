"""The journal's writer: one task commits every run's pending events in batches.

Outlets `mark` a run dirty; the writer takes every dirty run's pending events,
writes them (and the runs' records) to storage in one call, then commits them:
they join the run's in-memory tail and are handed over to its feeds
(`runlog.hand_over`). One write covers every run that streamed meanwhile, so a
busy server makes fewer, bigger writes. A store whose commit runs beside the loop
(`CommitsEarly`: SQLite's worker thread) says so from trio's thread: the batch is
handed over there, and the next batch's commit starts there too, so a commit cycle
does not wait for the writer task's turn on a busy loop.

A failed write never loses a batch and never stops the server: the batch goes
back in front of the pending events and is retried with backoff (0.05 s doubling
to 5 s). Meanwhile runs wait as they do when the writer is behind, the writer
reports itself unhealthy (`/healthz`, `/metrics`), and runs that could not be
stored for `fail_runs_after` seconds are told to the `stalled` listeners (the
server fails them). A storage that fails from the start (a full disk) leaves the server
read-only until it recovers.

In a cluster worker every write goes through `fenced_write` (behind the runs'
leases); a run whose write was refused is someone else's now: it is fenced, and
the `fenced` listeners stop its copy here.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Awaitable, Callable
from typing import Protocol, runtime_checkable

import msgspec
import trio

from orchestrator.core.listeners import Listeners
from orchestrator.storage.base import RunRecord, Storage
from orchestrator.storage.runlog import Entry, RunLog, hand_over

__all__ = ["FencedWrite", "JournalWriter"]

logger = logging.getLogger(__name__)
_BACKOFF_FIRST, _BACKOFF_MAX = 0.05, 5.0


class Commit(Protocol):
    """A batch's transaction under way (`CommitsEarly.begin_write`)."""

    async def wait(self) -> None:
        """Return once it is committed; raise what made it fail."""
        ...


@runtime_checkable
class CommitsEarly(Protocol):
    """A storage whose commit runs beside the event loop (`SqliteStorage`: a worker
    thread) and says it is committed from trio's thread, before the writing task's
    next turn. A busy loop's turn is 5–20 ms at 1,000 agents: the journal hands the
    batch to the live feeds there and starts the next batch's commit at once."""

    async def write_then(
        self,
        records: list[RunRecord],
        events: list[tuple[str, int, bytes]],
        committed: Callable[[], None] | None,
    ) -> None:
        """`begin_write` now, or once the store is free (a trim or a load may hold
        it), and wait for the commit."""
        ...

    def begin_write(
        self,
        records: list[RunRecord],
        events: list[tuple[str, int, bytes]],
        committed: Callable[[], None],
    ) -> Commit | None:
        """Start `Storage.write` of the batch now, without awaiting (None: the store is
        busy with something else; nothing was started). `committed()` is called in
        trio's thread the moment the transaction is committed, never when it fails."""
        ...


class _Batch:
    """What one write takes: the runs' pending events and their records."""

    __slots__ = ("committed", "dirty", "logs", "records", "rows")

    def __init__(self, dirty: dict[str, RunLog], durable: bool) -> None:
        self.dirty = dirty
        self.logs: list[tuple[RunLog, list[Entry]]] = []
        self.rows: list[tuple[str, int, bytes]] = []
        for log in dirty.values():
            batch = log.take()
            if batch and durable:
                run_id = log.record.run_id
                self.rows.extend((run_id, e.seq, e.raw) for e in batch)
            self.logs.append((log, batch))
            if log.writers:  # producers may fill `pending` again while this batch is written
                log.writers.unpark_all()
        self.records = [
            msgspec.structs.replace(log.record, last_seq=batch[-1].seq if batch else log.committed)
            for log, batch in self.logs
        ]
        self.committed = False


FencedWrite = Callable[[list[RunRecord], list[tuple[str, int, bytes]]], Awaitable[set[str]]]
"""Writes records and events behind the runs' leases; returns the refused runs."""


class JournalWriter:
    """Commits the runs' pending events to storage, retrying failures."""

    def __init__(
        self,
        storage: Storage,
        *,
        tail: int,
        fail_runs_after: float,
        fenced_write: FencedWrite | None = None,
    ) -> None:
        self.storage = storage
        self.tail = tail
        self.fail_runs_after = fail_runs_after
        self.dirty: dict[str, RunLog] = {}
        """Runs with something to write (pending events or a changed record)."""
        self._work = trio.lowlevel.ParkingLot()
        self._idle = trio.lowlevel.ParkingLot()
        self._writing = False
        self._next: tuple[_Batch, Commit] | None = None
        """A batch whose commit the last commit started (`CommitsEarly`), to await."""
        self._closing = False
        self.events_written = 0
        self.write_failures = 0
        self.last_error: str | None = None
        """The newest write error while storage is failing; None when healthy."""
        self._failing_since: float | None = None
        self.stalled: Listeners[[list[str], str]] = Listeners()
        """Told of runs whose events could not be stored for `fail_runs_after` s (why)."""
        self.recovered: Listeners[[]] = Listeners()
        """Told once writes succeed again after failing."""
        self.fenced: Listeners[[list[str]]] = Listeners()
        """Told of runs whose writes were refused (this instance lost their lease)."""
        self.fenced_write = fenced_write
        """Writes behind leases (a single server's owner lease, or a cluster worker's
        run leases: `storage/open.py`), given at open; None: plain writes."""

    @property
    def healthy(self) -> bool:
        """False while writes are failing (the server is read-only then)."""
        return self.last_error is None

    @property
    def pending_events(self) -> int:
        """Events waiting to be written, over every run."""
        return sum(len(log.pending) for log in self.dirty.values())

    def mark(self, log: RunLog) -> None:
        """The run has something to write: queue it for the next batch."""
        self.dirty[log.record.run_id] = log
        if self._work:
            self._work.unpark_all()

    async def flush(self) -> None:
        """Wait until everything published so far is committed."""
        while self.dirty or self._writing:
            await self._idle.park()

    async def run(
        self,
        *,
        final_flush_timeout: float = 10.0,
        task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        """Write batches until cancelled, retrying failures; then try a last flush."""
        task_status.started()
        backoff = _BACKOFF_FIRST
        try:
            while True:
                if not self.dirty and self._next is None:
                    await self._work.park()
                if await self._try_write():
                    backoff = _BACKOFF_FIRST
                else:
                    await trio.sleep(backoff)
                    backoff = min(backoff * 2, _BACKOFF_MAX)
        finally:
            # Bounded: a dead storage must not hold shutdown forever.
            self._closing = True  # (no commit starts another now: each is awaited here)
            with trio.CancelScope(shield=True) as scope:
                scope.relative_deadline = final_flush_timeout
                while (self.dirty or self._next is not None) and await self._try_write():
                    pass
            if self.dirty:
                logger.error(
                    "journal closed with %d events not stored: %s",
                    self.pending_events,
                    self.last_error,
                )

    async def _try_write(self) -> bool:
        """Write one batch; on failure keep it, note the error, report stalled runs."""
        try:
            await self._write_batch()
        except Exception as exc:
            self.write_failures += 1
            first = self.last_error is None
            # Some clients put whole commands (user data) in their messages: keep it short.
            self.last_error = f"{type(exc).__name__}: {str(exc)[:300]}"
            now = trio.current_time()
            if self._failing_since is None:
                self._failing_since = now
            if first:
                logger.error("journal write failed, retrying: %s", self.last_error)
            if now - self._failing_since >= self.fail_runs_after:
                self._report_stalled()
            return False
        self._succeeded()
        return True

    def _succeeded(self) -> None:
        """A write went through: healthy again if it was failing."""
        if self.last_error is not None:
            logger.warning("journal writes recovered after %d failures", self.write_failures)
            self.last_error = None
            self._failing_since = None
            self.recovered()

    def _report_stalled(self) -> None:
        stalled = []
        for log in self.dirty.values():
            if log.record.status == "running" and not log.stalled_reported:
                log.stalled_reported = True
                stalled.append(log.record.run_id)
        if stalled:
            self.stalled(stalled, self.last_error or "storage unavailable")

    async def _write_batch(self) -> None:
        if self._next is not None:  # started by the last commit: await it
            batch, started = self._next
            self._next = None
        elif self.dirty:
            batch, started = self._take(), None
        else:
            return
        self._writing = not batch.committed  # (one the last commit started may be over)
        refused: set[str] = set()
        try:
            if started is not None:
                await started.wait()
            elif self.fenced_write is not None:
                refused = await self.fenced_write(batch.records, batch.rows)
            elif isinstance(self.storage, CommitsEarly):
                then = functools.partial(self._early, batch)
                await self.storage.write_then(batch.records, batch.rows, then)
            else:
                await self.storage.write(batch.records, batch.rows)
        except BaseException:
            if not batch.committed:
                self._put_back(batch)
            raise
        finally:
            self._writing = self._next is not None
            if not self._writing and not self.dirty and self._idle:
                self._idle.unpark_all()  # (`flush` may have come while it was awaited)
        if not batch.committed:
            self._committed(batch, refused)

    def _early(self, batch: _Batch) -> None:
        """In trio's thread, the moment the batch is committed: hand it over, and start
        committing what came meanwhile (awaited by the writer task's next turn)."""
        self._committed(batch, frozenset())
        if self.dirty and not self._closing and self._next is None:
            following = self._take()
            assert isinstance(self.storage, CommitsEarly)
            then = functools.partial(self._early, following)
            try:
                started = self.storage.begin_write(following.records, following.rows, then)
            except Exception:  # (the writer task's own try says what failed)
                started = None
            if started is None:  # the writer task writes it in its turn
                self._put_back(following)
                return
            self._next = (following, started)
            self._writing = True

    def _take(self) -> _Batch:
        """Every dirty run's pending events, for one write."""
        dirty, self.dirty = self.dirty, {}
        return _Batch(dirty, self.storage.durable)

    def _put_back(self, batch: _Batch) -> None:
        """Not written: everything goes back for the next try, ahead of newer events."""
        for log, entries in batch.logs:
            log.put_back(entries)
        self.dirty = {**batch.dirty, **self.dirty}

    def _committed(self, batch: _Batch, refused: set[str] | frozenset[str]) -> None:
        batch.committed = True
        self._writing = False
        self._succeeded()  # (before the hand-over wakes `flush`: it reads `healthy`)
        self._commit(batch.logs, refused)

    def _commit(
        self, batches: list[tuple[RunLog, list[Entry]]], refused: set[str] | frozenset[str]
    ) -> None:
        """The batch is stored: it joins the runs' tails and goes to their feeds."""
        fenced: list[str] = []
        for log, batch in batches:
            if log.record.run_id in refused:  # lost the lease: none of it was written
                log.refuse()
                fenced.append(log.record.run_id)
                hand_over(log, [])
                continue
            log.commit(batch)
            self.events_written += len(batch)
            if self.storage.durable:
                log.evict(self.tail)
            hand_over(log, batch)
        if not self.dirty and self._idle:
            self._idle.unpark_all()
        if fenced:
            logger.warning("lost the lease of runs %s: their copies here stop", ", ".join(fenced))
            self.fenced(fenced)
