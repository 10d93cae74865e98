"""The run journal: every event is stored, in seq order, before any client sees it.

Runs publish into a `RunOutlet` (the bus's outlet). Events wait in the run's
`pending` list until the writer task has written them to storage in one batch;
then they are *committed*: they join the run's in-memory tail, are offered to the
run's followers (live feeds, which write them to their clients there and then:
one pass over the watchers instead of a task woken per watcher) and the other
feeds are woken. Feeds only ever read committed events, so a client never sees an
event that a restart could lose.

Memory stays bounded: a run whose pending list is full makes its producers wait
(`put_nowait` says so); a durable backend keeps only the last `tail` events of a running
run in memory and none of a finished one (they are read back from storage); the
retention policy forgets old runs and the oldest events of huge runs.

A failed write never loses a batch and never stops the server: the batch goes back
in front of the pending events and is retried with backoff (0.05 s doubling to
5 s). Meanwhile runs wait as they do when the writer is behind, the journal reports
itself unhealthy (`/healthz`, `/metrics`), and runs that could not be stored for
`fail_runs_after` seconds are handed to `on_stalled` (the server fails them). A
storage that fails from the start (a full disk) leaves the server read-only: old
runs can be replayed, new ones are refused, and the pending `interrupted` markers
are written once it recovers.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Protocol

import msgspec
import trio

from orchestrator.core.capping import cap_event
from orchestrator.core.events import Event, EventType, decode_event
from orchestrator.storage.base import RunRecord, Storage
from orchestrator.storage.paging import RunPage

__all__ = ["Entry", "Follower", "Journal", "RunLog", "RunOutlet", "UnknownRun"]

logger = logging.getLogger(__name__)
_encode = msgspec.json.Encoder().encode
_UNFINISHED = frozenset({"running", "queued"})
_BACKOFF_FIRST, _BACKOFF_MAX = 0.05, 5.0


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


class Follower(Protocol):
    """A reader that takes a run's events as they are committed (a live feed)."""

    def offer(self, entries: list[Entry], shared: dict[object, bytes]) -> bool:
        """Take newly committed `entries` now, without awaiting; False: stop following.

        `shared` lives for one batch: followers that would make the same bytes of it
        (the same frame for watchers with the same filter) make them once.
        """
        ...

    def wake(self) -> None:
        """No longer following: the reader's task reads for itself again."""
        ...


class RunLog:
    """The journal's state for one run."""

    def __init__(self, record: RunRecord) -> None:
        self.record = record
        self.entries: list[Entry] = []
        """Committed events held in memory: all kept ones (memory), or a recent tail."""
        self.tail_first = record.last_seq + 1
        """The seq of entries[0] (or of the next event when entries is empty)."""
        self.committed = record.last_seq
        self.pending: list[Entry] = []
        self.writing = 0
        self.readers = trio.lowlevel.ParkingLot()
        self.followers: dict[Follower, None] = {}
        """Readers offered each committed batch (`Journal.follow`), in arrival order."""
        self.writers = trio.lowlevel.ParkingLot()
        self.finished_status: str | None = None if record.status in _UNFINISHED else record.status
        """Set once RUN_FINISHED (or a call run's end) is committed."""
        self.stalled_reported = False
        self.remote = False
        """Cluster mode: another instance executes the run; its events come from storage
        (`append_remote`), never from a local outlet."""
        self.fenced = False
        """Cluster mode: this instance lost the run's lease; what it still emits is dropped."""
        self.watchers = 0
        """Subscriptions on this instance reading the run (remote runs are tailed then)."""

    @property
    def finished(self) -> bool:
        """True once the run ended and all its events are committed."""
        return self.finished_status is not None and not self.pending and not self.writing


class RunOutlet:
    """The bus outlet of one run: events go to the journal."""

    __slots__ = ("_journal", "_log", "_max_bytes")

    def __init__(self, journal: Journal, log: RunLog) -> None:
        self._journal = journal
        self._log = log
        self._max_bytes = journal.max_event_bytes

    def put_nowait(self, event: Event) -> bool:
        """Queue the event for the next write batch (cut to `max_event_bytes`).

        Returns True when producers should wait (`max_pending` events are queued).
        """
        log = self._log
        if log.fenced:  # the run is someone else's now: this copy is being cancelled
            return False
        raw = _encode(event)
        if len(raw) > self._max_bytes:
            event, raw = cap_event(event, raw, self._max_bytes)
            self._journal.events_truncated += 1
        log.pending.append(Entry(event, raw))
        if event.type is EventType.RUN_FINISHED:
            log.record.status = str(event.data.get("status", "completed"))
            log.record.finished_at = event.ts
        self._journal.mark(log)
        return len(log.pending) >= self._journal.max_pending

    def put_many(self, events: list[Event]) -> bool:
        """`put_nowait` for each (every event is encoded and may be cut on its own)."""
        wait = False
        for event in events:
            wait = self.put_nowait(event)
        return wait

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
        max_event_bytes: int = 256 * 1024,
        fail_runs_after: float = 30.0,
        clock: Callable[[], float] = time.time,
        cluster: bool = False,
    ) -> None:
        self.storage = storage
        self.cluster = cluster
        """Cluster mode: runs left running belong to the cluster (never `interrupted` at
        open), runs may live on other instances (`find`, `adopt`, `append_remote`)."""
        self.tail = tail
        self.max_pending = max_pending
        self.max_event_bytes = max_event_bytes
        self.fail_runs_after = fail_runs_after
        self._clock = clock
        self._logs: dict[str, RunLog] = {}
        self._dirty: dict[str, RunLog] = {}
        self._work = trio.lowlevel.ParkingLot()
        self._idle = trio.lowlevel.ParkingLot()
        self.events_written = 0
        self.events_truncated = 0
        self.write_failures = 0
        self.runs_deleted = 0
        self.last_error: str | None = None
        """The newest write error while storage is failing; None when healthy."""
        self._failing_since: float | None = None
        self._writing = False
        self.on_stalled: Callable[[list[str], str], None] | None = None
        """Called with runs whose events could not be stored for `fail_runs_after` s."""
        self.interrupted: list[str] = []
        """Runs a previous server left running, ended `interrupted` at open."""
        self.lookup: Callable[[str], Awaitable[RunRecord | None]] | None = None
        """Cluster mode: fetches the record of a run this instance has not seen yet."""
        self.fenced_write: (
            Callable[[list[RunRecord], list[tuple[str, int, bytes]]], Awaitable[set[str]]] | None
        ) = None
        """Cluster workers: writes behind the runs' leases; returns the refused runs."""
        self.on_fenced: Callable[[list[str]], None] | None = None
        """Called with runs whose writes were refused (this instance lost their lease)."""
        self._watched: dict[str, RunLog] = {}
        """Runs with at least one watcher here (what the tailer looks at, not every run)."""
        self.watch_changed = trio.lowlevel.ParkingLot()
        """Unparked when a remote run gains or loses its first watcher."""

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
        retention: tuple[float | None, int | None, int | None] | None = None,
        final_flush_timeout: float = 10.0,
        cluster: bool = False,
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
            retention: `(max_age_seconds, max_runs, max_run_events)`, or None.
            final_flush_timeout: seconds the last flush may take.
            cluster: runs belong to a cluster (none is interrupted at open; see `find`).
        """
        journal = cls(
            storage,
            tail=tail,
            max_pending=max_pending,
            max_event_bytes=max_event_bytes,
            fail_runs_after=fail_runs_after,
            cluster=cluster,
        )
        for record in await storage.load():
            log = RunLog(record)
            journal._logs[record.run_id] = log
            if cluster:
                log.remote = True
            elif record.status == "running":
                journal.interrupted.append(record.run_id)
                journal._finish_interrupted(log)
        async with trio.open_nursery() as nursery:
            await nursery.start(
                functools.partial(journal.run_writer, final_flush_timeout=final_flush_timeout)
            )
            if retention is not None:
                max_age, max_runs, max_run_events = retention
                await nursery.start(
                    functools.partial(
                        journal.run_retention,
                        max_age=max_age,
                        max_runs=max_runs,
                        max_run_events=max_run_events,
                    )
                )
            try:
                yield journal
            finally:
                nursery.cancel_scope.cancel()

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

    @property
    def healthy(self) -> bool:
        """False while writes are failing (the server is read-only then)."""
        return self.last_error is None

    @property
    def pending_events(self) -> int:
        """Events waiting to be written, over every run."""
        return sum(len(log.pending) for log in self._dirty.values())

    async def run_writer(
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
                if not self._dirty:
                    await self._work.park()
                if await self._try_write():
                    backoff = _BACKOFF_FIRST
                else:
                    await trio.sleep(backoff)
                    backoff = min(backoff * 2, _BACKOFF_MAX)
        finally:
            # Bounded: a dead storage must not hold shutdown forever.
            with trio.CancelScope(shield=True) as scope:
                scope.relative_deadline = final_flush_timeout
                while self._dirty and await self._try_write():
                    pass
            if self._dirty:
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
        if self.last_error is not None:
            logger.warning("journal writes recovered after %d failures", self.write_failures)
            self.last_error = None
            self._failing_since = None
            for log in self._logs.values():
                log.stalled_reported = False
        return True

    def _report_stalled(self) -> None:
        stalled = []
        for log in self._dirty.values():
            if log.record.status == "running" and not log.stalled_reported:
                log.stalled_reported = True
                stalled.append(log.record.run_id)
        if stalled and self.on_stalled is not None:
            self.on_stalled(stalled, self.last_error or "storage unavailable")

    async def flush_run(self, run_id: str) -> None:
        """Wait until everything the run published so far is committed (or fenced off).

        Unlike `flush`, other runs that keep streaming do not hold it up.
        """
        log = self.get(run_id)
        while (log.pending or log.writing) and not log.fenced:
            await log.readers.park()

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

    # -- cluster mode: runs of other instances ------------------------------------

    async def find(self, run_id: str) -> RunLog:
        """The log of a run, fetching it from the cluster if this instance has not seen it.

        Raises:
            UnknownRun: no such run (anywhere).
        """
        log = self._logs.get(run_id)
        if log is not None or self.lookup is None:
            return self.get(run_id)
        record = await self.lookup(run_id)
        if record is None:
            raise UnknownRun(run_id)
        return self._logs.get(run_id) or self.adopt(record)

    def adopt(self, record: RunRecord) -> RunLog:
        """Register a run executed by another instance: a mirror fed by `append_remote`."""
        log = RunLog(record)
        log.remote = True
        self._logs[record.run_id] = log
        return log

    def own(self, record: RunRecord) -> RunLog:
        """This instance starts executing the run (`record` says worker and attempt).

        A mirror of it becomes the run's local log: events come from the local
        outlet from `record.last_seq + 1` on, and the record is written with them.
        """
        log = self._logs.get(record.run_id)
        if log is None:
            return self.create_run(record)
        log.record = record
        log.remote = log.fenced = False
        log.finished_status = None
        if log.committed < record.last_seq:  # the mirror was behind: read the rest from storage
            log.entries.clear()
            log.committed = record.last_seq
            log.tail_first = record.last_seq + 1
        self.mark(log)
        return log

    def append_remote(self, run_id: str, raws: list[bytes]) -> None:
        """Events of a remote run read from storage (already durable: committed at once)."""
        log = self._logs.get(run_id)
        if log is None or not log.remote:
            return
        fresh: list[Entry] = []
        for raw in raws:
            event = decode_event(raw)
            if event.seq == log.committed + len(fresh) + 1:
                fresh.append(Entry(event, raw))
        if not fresh:
            return
        if log.committed + 1 != log.tail_first + len(log.entries):  # not contiguous: restart
            log.entries.clear()
            log.tail_first = fresh[0].seq
        log.entries.extend(fresh)
        log.committed = log.record.last_seq = fresh[-1].seq
        last = fresh[-1].event
        if last.type is EventType.RUN_FINISHED:
            log.record.status = log.finished_status = str(last.data.get("status", "completed"))
            log.record.finished_at = last.ts
        if self.storage.durable:
            self._evict(log)
        _hand_over(log, fresh)

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
        newest_first = (log.record for log in reversed(self._logs.values()))
        if before is not None:
            for record in newest_first:
                if record.run_id == before:
                    break
        page = RunPage(limit=limit, owner=owner)
        page.add(newest_first)
        return page.result()

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
        durable = self.storage.durable
        for log in dirty.values():
            batch, log.pending = log.pending, []
            log.writing = len(batch)
            if batch and durable:
                run_id = log.record.run_id
                rows.extend((run_id, e.seq, e.raw) for e in batch)
            batches.append((log, batch))
            if log.writers:  # producers may fill `pending` again while this batch is written
                log.writers.unpark_all()
        records = [
            msgspec.structs.replace(log.record, last_seq=batch[-1].seq if batch else log.committed)
            for log, batch in batches
        ]
        self._writing = True
        refused: set[str] = set()
        try:
            if self.fenced_write is not None:
                refused = await self.fenced_write(records, rows)
            else:
                await self.storage.write(records, rows)
        except BaseException:
            # Keep everything for the next try, in order, ahead of newer events.
            for log, batch in batches:
                log.pending[:0] = batch
                log.writing = 0
            self._dirty = {**dirty, **self._dirty}
            raise
        finally:
            self._writing = False
        fenced: list[str] = []
        for log, batch in batches:
            log.writing = 0
            if log.record.run_id in refused:  # lost the lease: none of it was written
                log.fenced = log.remote = True
                log.pending.clear()
                fenced.append(log.record.run_id)
                _hand_over(log, [])
                continue
            if batch:
                log.record.last_seq = batch[-1].seq
                log.entries.extend(batch)
                log.committed = batch[-1].seq
                self.events_written += len(batch)
            if log.record.status != "running":
                log.finished_status = log.record.status
            if durable:
                self._evict(log)
            _hand_over(log, batch)
        if not self._dirty and self._idle:
            self._idle.unpark_all()
        if fenced:
            logger.warning("lost the lease of runs %s: their copies here stop", ", ".join(fenced))
            if self.on_fenced is not None:
                self.on_fenced(fenced)

    def _evict(self, log: RunLog) -> None:
        """Durable storage has every committed event: keep little of it in memory."""
        keep = 0 if log.finished_status is not None else self.tail
        if len(log.entries) > 2 * keep or (keep == 0 and log.entries):
            drop = len(log.entries) - keep
            del log.entries[:drop]
            log.tail_first += drop

    # -- retention -------------------------------------------------------------

    async def apply_retention(
        self,
        *,
        max_age: float | None,
        max_runs: int | None,
        max_run_events: int | None,
    ) -> None:
        """Forget finished runs past `max_age`/`max_runs`, and events past `max_run_events`.

        Call it from one task at a time; storage failures propagate (try again later).
        """
        if max_run_events is not None:
            for log in list(self._logs.values()):
                first = log.committed - max_run_events + 1
                if first > log.record.first_seq:
                    await self.storage.trim(log.record.run_id, first)
                    log.record.first_seq = first
                    if log.tail_first < first:
                        drop = min(first - log.tail_first, len(log.entries))
                        del log.entries[:drop]
                        log.tail_first += drop
        finished = [
            log
            for log in self._logs.values()
            if log.finished and log.record.run_id not in self._dirty
        ]
        doomed: list[RunLog] = []
        if max_age is not None:
            horizon = self._clock() - max_age
            doomed += [log for log in finished if (log.record.finished_at or 0.0) < horizon]
        if max_runs is not None and len(finished) > max_runs:
            doomed += finished[: len(finished) - max_runs]
        ids = list(dict.fromkeys(log.record.run_id for log in doomed))
        if ids:
            await self.storage.delete_runs(ids)
            for run_id in ids:
                log = self._logs.pop(run_id)
                log.readers.unpark_all()  # feeds still on it learn it is gone
            self.runs_deleted += len(ids)

    async def run_retention(
        self,
        *,
        max_age: float | None,
        max_runs: int | None,
        max_run_events: int | None,
        interval: float = 30.0,
        task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        """Apply the retention policy every `interval` seconds, until cancelled."""
        task_status.started()
        if max_age is None and max_runs is None and max_run_events is None:
            await trio.sleep_forever()
        while True:
            try:
                await self.apply_retention(
                    max_age=max_age, max_runs=max_runs, max_run_events=max_run_events
                )
            except Exception as exc:  # storage trouble: the writer reports it; retry later
                logger.warning("retention pass failed: %s: %s", type(exc).__name__, exc)
            await trio.sleep(interval)

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
        return [Entry(decode_event(raw), raw) for raw in raws]

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


def _hand_over(log: RunLog, batch: list[Entry]) -> None:
    """Newly committed events (maybe none): offer them to the followers, wake readers.

    A follower that declines, fails, or follows a run that has ended is woken
    instead; a failing follower never fails the write that committed the batch.
    """
    followers = log.followers
    ended = log.finished_status is not None or log.fenced
    if followers and (batch or ended):  # a record-only write changes nothing for them
        shared: dict[object, bytes] = {}
        for follower in list(followers):
            try:
                keep = bool(batch) and follower.offer(batch, shared) and not ended
            except Exception:
                logger.exception("a follower of run %s failed", log.record.run_id)
                keep = False
            if not keep:
                del followers[follower]
                follower.wake()
    if log.readers:
        log.readers.unpark_all()
