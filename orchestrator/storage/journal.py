"""The run journal: every event is stored, in seq order, before any client sees it.

Runs publish into a `RunOutlet` (the bus's outlet). Events wait in the run's
`pending` list until the writer (`storage/writer.py`) has written them to storage
in one batch; then they are *committed*: they join the run's in-memory tail, are
offered to the run's followers (live feeds, which write them to their clients
there and then: one pass over the watchers instead of a task woken per watcher)
and the other feeds are woken. Feeds only ever read committed events, so a client
never sees an event that a restart could lose.

Memory stays bounded: a run whose pending list is full makes its producers wait
(`put_nowait` says so); a durable backend keeps only the last `tail` events of a
running run in memory and none of a finished one (they are read back from
storage); the retention policy (`storage/retention.py`) forgets old runs and the
oldest events of huge runs. Runs executed by other instances of a cluster are
mirrored by `storage/mirror.py`.

This module holds the runs' logs and what reads them: registering runs, outlets,
reading after a cursor, waiting and following.
"""

from __future__ import annotations

import functools
import time
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from typing import cast

import msgspec
import trio

from agents.core.payloads import RunFinishedData
from orchestrator.core.capping import cap_event
from orchestrator.core.events import Event, EventType, decode_event
from orchestrator.core.listeners import Listeners
from orchestrator.core.rebuild import attachment_ids
from orchestrator.storage.base import RunRecord, Storage
from orchestrator.storage.mirror import RunMirrors
from orchestrator.storage.paging import RunPaging
from orchestrator.storage.retention import Retention, RetentionPolicy
from orchestrator.storage.runlog import UNFINISHED, Entry, Follower, RunLog, UnknownRun, hand_over
from orchestrator.storage.writer import FencedWrite, JournalWriter

__all__ = ["Entry", "Follower", "Journal", "RunLog", "RunOutlet", "UnknownRun"]

_encode = msgspec.json.Encoder().encode
_RUN_FINISHED = EventType.RUN_FINISHED


class RunOutlet:
    """The bus outlet of one run: events go to the journal."""

    __slots__ = ("_journal", "_log", "_mark", "_max_bytes", "_max_pending")

    def __init__(self, journal: Journal, log: RunLog) -> None:
        self._journal = journal
        self._log = log
        self._mark = journal.writer.mark
        self._max_bytes = journal.max_event_bytes
        self._max_pending = journal.max_pending

    def put_nowait(self, event: Event) -> bool:
        """Queue the event for the next write batch (cut to `max_event_bytes`).

        Returns True when producers should wait (`max_pending` events are queued).
        """
        return self.put_many([event])

    def put_copied(self, event: Event, raw: bytes) -> bool:
        """`put_nowait` for an event already encoded as `raw` (and cut, where it had to
        be): a fork's copy of its original's history (runs/fork.py)."""
        log = self._log
        if log.fenced:
            return False
        log.pending.append(Entry(event, raw, event.seq))
        self._mark(log)
        return len(log.pending) >= self._max_pending

    def put_many(self, events: list[Event]) -> bool:
        """`put_nowait` for each (every event is encoded and may be cut on its own),
        with one mark for them all: the deltas of one provider read come this way, and
        per event the calls and lookups cost as much as the encoding."""
        log = self._log
        if log.fenced:  # the run is someone else's now: this copy is being cancelled
            return False
        pending, max_bytes = log.pending, self._max_bytes
        for event in events:
            raw = _encode(event)
            if len(raw) > max_bytes:
                event, raw = cap_event(event, raw, max_bytes)
                self._journal.events_truncated += 1
            pending.append(Entry(event, raw, event.seq))
            if event.type is _RUN_FINISHED:
                status = cast(RunFinishedData, event.data).get("status", "completed")
                log.record.status = str(status)
                log.record.finished_at = event.ts
        self._mark(log)
        return len(pending) >= self._max_pending

    async def wait_writable(self) -> None:
        """Wait for the writer to take the pending batch."""
        while len(self._log.pending) >= self._max_pending:
            await self._log.writers.park()


class Journal:
    """Owns the storage, the per-run logs, the writer, retention and mirrors."""

    def __init__(
        self,
        storage: Storage,
        *,
        tail: int = 8192,
        max_pending: int = 8192,
        max_event_bytes: int = 256 * 1024,
        fail_runs_after: float = 30.0,
        retention: RetentionPolicy | None = None,
        clock: Callable[[], float] = time.time,
        cluster: bool = False,
        fenced_write: FencedWrite | None = None,
    ) -> None:
        self.storage = storage
        self.cluster = cluster
        """Cluster mode: runs left running belong to the cluster (never `interrupted` at
        open), runs may live on other instances (`mirrors`)."""
        self.tail = tail
        self.max_pending = max_pending
        self.max_event_bytes = max_event_bytes
        self.clock = clock
        self.logs: dict[str, RunLog] = {}
        """Every run the journal knows, oldest first."""
        self.writer = JournalWriter(
            storage, tail=tail, fail_runs_after=fail_runs_after, fenced_write=fenced_write
        )
        self.writer.recovered.subscribe(self._recovered)
        self.retention = Retention(self, retention or RetentionPolicy())
        self.mirrors = RunMirrors(self)
        self.events_truncated = 0
        self.interrupted: list[str] = []
        """Runs a previous server left running, ended `interrupted` at open."""
        self.resumable: list[str] = []
        """Runs a previous server left running, to be resumed (`Journal.open(resume=)`)."""
        self.requeued: list[RunRecord] = []
        """Runs a previous server had queued in their threads, to start in their turn
        (`Journal.open(resume=)`: `ThreadInputs.requeue`)."""
        self.started: Listeners[[RunLog]] = Listeners()
        """Told of every run this instance starts executing (`create_run`, `own`):
        telemetry follows them."""

    # -- lifecycle -------------------------------------------------------------

    @classmethod
    @asynccontextmanager
    async def open(
        cls,
        storage: Storage,
        *,
        tail: int = 8192,
        max_pending: int = 8192,
        max_event_bytes: int = 256 * 1024,
        fail_runs_after: float = 30.0,
        retention: RetentionPolicy | None = None,
        final_flush_timeout: float = 10.0,
        cluster: bool = False,
        resume: bool = False,
        fenced_write: FencedWrite | None = None,
    ) -> AsyncIterator[Journal]:
        """Load the store's runs and run the writer (and retention) for the block.

        Runs a previous server left `running` get their `interrupted` marker queued
        (`journal.interrupted` lists them); it is written by the writer, so a store
        that is full or failing still lets the server start (read-only until it
        recovers). Leaving the block stops the writer after a last flush bounded by
        `final_flush_timeout`.

        Args:
            storage: an open backend.
            tail: events of a running run kept in memory (durable stores).
            max_pending: events of one run that may wait for a write.
            max_event_bytes: events are cut to this size before they are journaled.
            fail_runs_after: seconds of failed writes before stalled runs are reported.
            retention: what to keep (None: everything).
            final_flush_timeout: seconds the last flush may take.
            cluster: runs belong to a cluster (none is interrupted at open; see `mirrors`).
            resume: runs left running that have events are listed in `resumable` (the
                server continues them) instead of ended `interrupted`.
            fenced_write: writes behind this server's owner lease (storage/owner.py).
        """
        journal = cls(
            storage,
            tail=tail,
            max_pending=max_pending,
            max_event_bytes=max_event_bytes,
            fail_runs_after=fail_runs_after,
            retention=retention,
            cluster=cluster,
            fenced_write=fenced_write,
        )
        for record in await storage.load():
            log = RunLog(record, remote=cluster)
            journal.logs[record.run_id] = log
            if cluster:
                continue  # (another instance may execute it: the cluster decides)
            if record.status == "running" and resume and (record.last_seq or record.forked_from):
                journal.resumable.append(record.run_id)  # (a fork: whose copy had not begun)
            elif record.status == "queued" and resume and record.thread_id is not None:
                journal.requeued.append(record)  # (waiting in its thread: it starts in turn)
            elif record.status in UNFINISHED:  # (a thread's run enqueued, not started: too)
                journal.interrupted.append(record.run_id)
                journal._finish_interrupted(log)
        async with trio.open_nursery() as nursery:
            await nursery.start(
                functools.partial(journal.writer.run, final_flush_timeout=final_flush_timeout)
            )
            await nursery.start(journal.retention.run)
            nursery.start_soon(storage.upkeep)
            try:
                yield journal
            finally:
                nursery.cancel_scope.cancel()

    def _finish_interrupted(self, log: RunLog) -> None:
        stopped = (
            "the server stopped before the run started (it waited in its thread's queue)"
            if log.record.status == "queued"
            else "the server stopped while the run was running"
        )
        event = Event(
            run_id=log.record.run_id,
            seq=log.record.last_seq + 1,
            ts=self.clock(),
            type=EventType.RUN_FINISHED,
            source=None,
            last=True,
            data={"status": "interrupted", "error": stopped},
        )
        self.outlet(log.record.run_id).put_nowait(event)

    def _recovered(self) -> None:
        for log in self.logs.values():
            log.stalled_reported = False

    async def flush_run(self, run_id: str) -> None:
        """Wait until everything the run published so far is committed (or fenced off).

        Unlike `writer.flush`, other runs that keep streaming do not hold it up.
        """
        log = self.get(run_id)
        while (log.pending or log.writing) and not log.fenced:
            await log.readers.park()

    async def wait_stored(self, run_id: str) -> bool:
        """Wait until a write has stored the run's record (a queued run has no event to
        wait for); False if this instance lost the run meanwhile."""
        log = self.get(run_id)
        while not log.stored and not log.fenced:
            await log.readers.park()
        return not log.fenced

    async def wait_durable(self, run_id: str, seq: int) -> bool:
        """Wait until the run's events up to `seq` are committed; False if this instance
        lost the run meanwhile (fenced: those events will never be written from here).

        Unlike `flush_run`, events the run publishes meanwhile do not hold it up.
        """
        log = self.get(run_id)
        while log.committed < seq and not log.fenced:
            await log.readers.park()
        return not log.fenced

    # -- runs ------------------------------------------------------------------

    def create_run(self, record: RunRecord) -> RunLog:
        """Register a new run (written with the next batch)."""
        log = RunLog(record)
        self.logs[record.run_id] = log
        self.writer.mark(log)
        self.started(log)
        return log

    def own(self, record: RunRecord) -> RunLog:
        """This instance starts executing the run again (`record` says worker and attempt).

        A mirror of it becomes the run's local log: events come from the local
        outlet from `record.last_seq + 1` on, and the record is written with them.
        """
        log = self.logs.get(record.run_id)
        if log is None:
            return self.create_run(record)
        log.own(record)
        self.writer.mark(log)
        self.started(log)
        return log

    def mirror(self, run_id: str) -> None:
        """This instance no longer executes the run, and its copy here has stopped (a
        cluster worker fenced off, or whose takeover failed): the log is a mirror fed
        from storage (`RunMirrors`) and nothing of it is written from here; the next
        owner goes on from what storage holds."""
        log = self.logs.get(run_id)
        if log is None:
            return
        log.mirror()
        self.writer.dirty.pop(run_id, None)
        hand_over(log, [])

    def outlet(self, run_id: str) -> RunOutlet:
        """The outlet a run's sink publishes into."""
        return RunOutlet(self, self.get(run_id))

    def end_call_run(self, run_id: str, status: str) -> None:
        """A run with no events (a blocking call) ended."""
        log = self.get(run_id)
        log.record.status = status
        log.record.finished_at = self.clock()
        self.writer.mark(log)

    def get(self, run_id: str) -> RunLog:
        """The log of a run.

        Raises:
            UnknownRun: no such run.
        """
        log = self.logs.get(run_id)
        if log is None:
            raise UnknownRun(run_id)
        return log

    def records(self) -> list[RunRecord]:
        """Every run, oldest first."""
        return [log.record for log in self.logs.values()]

    def page(
        self, *, limit: int, before: str | None = None, owner: str | None = None
    ) -> tuple[list[RunRecord], bool]:
        """Up to `limit` runs, newest first, older than run `before`, of `owner` if given.

        Returns the runs and whether older ones remain.

        Raises:
            UnknownRun: `before` names no run.
        """
        if before is not None:
            self.get(before)
        newest_first = (log.record for log in reversed(self.logs.values()))
        if before is not None:
            for record in newest_first:
                if record.run_id == before:
                    break
        page = RunPaging(limit=limit, owner=owner)
        page.add(newest_first)
        return page.result()

    # -- reading ---------------------------------------------------------------

    async def read(self, run_id: str, after_seq: int, limit: int) -> list[Entry]:
        """Committed events with seq > after_seq, oldest first, at most `limit`.

        Events trimmed by retention are skipped: the first entry's seq may be more
        than `after_seq + 1` (the caller reports the gap).
        """
        log = self.get(run_id)
        after_seq = max(after_seq, log.record.first_seq - 1)
        if after_seq >= log.committed:
            return []
        if after_seq + 1 >= log.tail_first or not self.storage.durable:
            start = max(after_seq + 1 - log.tail_first, 0)
            return log.entries[start : start + limit]
        count = min(limit, log.committed - after_seq)
        raws = await self.storage.read(run_id, after_seq, count)
        entries = []
        for raw in raws:
            event = decode_event(raw)
            entries.append(Entry(event, raw, event.seq))
        return entries

    async def blobs_of(self, events: Sequence[Event]) -> dict[str, bytes]:
        """The bytes of the attachments `events` name (for `rebuild`)."""
        ids = attachment_ids(events)
        return await self.storage.get_blobs(ids) if ids else {}

    async def read_all(self, run_id: str, last_seq: int) -> list[Entry]:
        """Every kept event of the run up to `last_seq`, oldest first (to resume it)."""
        out: list[Entry] = []
        while (after := out[-1].seq if out else 0) < last_seq:
            entries = await self.read(run_id, after, 1024)
            if not entries:
                break
            out.extend(entries)
        return out

    async def wait_finished(self, run_id: str) -> None:
        """Return once the run has finished and all its events are committed."""
        log = self.get(run_id)
        while not log.finished:
            await log.readers.park()
            self.get(run_id)

    def follow(self, log: RunLog, follower: Follower) -> None:
        """Offer `follower` the run's next committed batches (until it says stop)."""
        log.followers[follower] = None

    def unfollow(self, log: RunLog, follower: Follower) -> None:
        """Stop offering batches to `follower` (no effect if it is not following)."""
        log.followers.pop(follower, None)

    async def wait(self, run_id: str, after_seq: int) -> None:
        """Return once the run has committed events past `after_seq`, or has finished.

        Raises:
            UnknownRun: the run is (or became) unknown: retention deleted it.
        """
        log = self.get(run_id)
        while log.committed <= after_seq and not log.finished:
            await log.readers.park()
            self.get(run_id)
