"""One run's state in the journal: its committed tail, pending events, readers.

`RunLog` is what every part of the journal works on: the writer commits its
pending events, feeds read and follow it, retention trims it, and in cluster mode
a mirror of a run executed elsewhere is fed into it. `hand_over` is the moment an
event becomes visible: committed events are offered to the run's followers (live
feeds) in one pass and its readers are woken.
"""

from __future__ import annotations

import logging
from typing import Protocol, cast

import msgspec
import trio

from agents.core.payloads import RunFinishedData
from agents.errors import OrchestratorError
from orchestrator.core.events import Event, EventType
from orchestrator.storage.base import RunRecord

__all__ = ["UNFINISHED", "Entry", "Follower", "RunLog", "UnknownRun", "hand_over"]

logger = logging.getLogger(__name__)
UNFINISHED = frozenset({"running", "queued"})
"""Record statuses of a run that has not ended."""


class UnknownRun(OrchestratorError, LookupError):
    """No run with that id."""

    code = "not_found"

    def __init__(self, run_id: str) -> None:
        super().__init__(f"unknown run {run_id!r}")
        self.run_id = run_id


class Entry(msgspec.Struct, gc=False):
    """A journaled event with its JSON encoding (encoded once, sent to every client).

    Built as `Entry(event, raw, event.seq)`. Not tracked by the garbage collector
    (`gc=False`: it refers to an untracked Event, bytes and an int, so it is never
    part of a cycle). A run keeps the last 8,192 of them in memory for live feeds:
    tracked, 1,000 agents at a model's pace promoted ~50k of them into generation 1
    between two of its collections, and collecting it paused the server 261 ms
    (bench/capacity.py, docs/benchmarks.md).
    """

    event: Event
    raw: bytes
    seq: int


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
    """The journal's state for one run, and the one place that changes it.

    Its positions (`committed`, `tail_first`, `writing`) and its mode (`remote`,
    `fenced`) are read-only outside: the writer, the journal, a mirror and a cluster
    worker move it through its methods (`take`, `put_back`, `commit`, `refuse`,
    `fence`, `own`, `mirror`, `append_mirrored`, `evict`, `forget_before`), each of
    which keeps them consistent, as h11's `_state.py` owns its connection's state.
    `pending` is the run's queue: its outlet appends to it, and only `take`,
    `put_back` and the methods that drop it replace or clear it.
    """

    __slots__ = (
        "_committed",
        "_fenced",
        "_remote",
        "_tail_first",
        "_writing",
        "entries",
        "finished_status",
        "followers",
        "pending",
        "readers",
        "record",
        "stalled_reported",
        "stored",
        "watchers",
        "writers",
    )

    def __init__(self, record: RunRecord, *, remote: bool = False) -> None:
        self.record = record
        self.entries: list[Entry] = []
        """Committed events held in memory: all kept ones (memory), or a recent tail."""
        self._tail_first = record.last_seq + 1
        self._committed = record.last_seq
        self.pending: list[Entry] = []
        self._writing = 0
        self.readers = trio.lowlevel.ParkingLot()
        self.followers: dict[Follower, None] = {}
        """Readers offered each committed batch (`Journal.follow`), in arrival order."""
        self.writers = trio.lowlevel.ParkingLot()
        self.finished_status: str | None = None if record.status in UNFINISHED else record.status
        """Set once RUN_FINISHED (or a call run's end) is committed."""
        self.stalled_reported = False
        self.stored = False
        """A write of this instance has stored its record (`commit`)."""
        self._remote = remote
        self._fenced = False
        self.watchers = 0
        """Subscriptions on this instance reading the run (remote runs are tailed then)."""

    @property
    def run_id(self) -> str:
        """The run's id."""
        return self.record.run_id

    @property
    def committed(self) -> int:
        """The seq of the last committed event (0: none)."""
        return self._committed

    @property
    def tail_first(self) -> int:
        """The seq of entries[0] (or of the next event when entries is empty)."""
        return self._tail_first

    @property
    def writing(self) -> int:
        """Events of a write under way (taken from `pending`, not yet committed)."""
        return self._writing

    @property
    def remote(self) -> bool:
        """Cluster mode: another instance executes the run; its events come from storage
        (`append_mirrored`), never from a local outlet."""
        return self._remote

    @property
    def fenced(self) -> bool:
        """Cluster mode: this instance lost the run's lease; what it still emits is dropped."""
        return self._fenced

    @property
    def finished(self) -> bool:
        """True once the run ended and all its events are committed."""
        return self.finished_status is not None and not self.pending and not self._writing

    # -- the writer ------------------------------------------------------------

    def take(self) -> list[Entry]:
        """The pending events, for one write (`writing` until `commit` or `put_back`)."""
        batch, self.pending = self.pending, []
        self._writing = len(batch)
        return batch

    def put_back(self, batch: list[Entry]) -> None:
        """A write failed: its events go back ahead of those queued since."""
        self.pending[:0] = batch
        self._writing = 0

    def commit(self, batch: list[Entry]) -> None:
        """A write stored `batch` (maybe empty: the record only): it joins the tail,
        and a record that is no longer running marks the run finished."""
        self._writing = 0
        self.stored = True
        if batch:
            self.record.last_seq = self._committed = batch[-1].seq
            self.entries.extend(batch)
        if self.record.status not in UNFINISHED:  # (a queued run has not ended either)
            self.finished_status = self.record.status

    def refuse(self) -> None:
        """A write was refused: this instance lost the run's lease (`fence`)."""
        self._writing = 0
        self.fence()

    def fence(self) -> None:
        """This instance lost the run: what its copy still emits is dropped, and what it
        reads comes from storage."""
        self._fenced = self._remote = True
        self.pending.clear()

    # -- cluster: who executes the run -------------------------------------------

    def own(self, record: RunRecord) -> None:
        """This instance executes the run again (`record` says worker and attempt):
        events come from the local outlet from `record.last_seq + 1` on."""
        self.record = record
        self._remote = self._fenced = False
        self.finished_status = None
        if self._committed < record.last_seq:  # a mirror was behind: storage has the rest
            self.entries.clear()
            self._committed = record.last_seq
            self._tail_first = record.last_seq + 1

    def mirror(self) -> None:
        """Another instance executes the run: the log is fed from storage
        (`append_mirrored`) and nothing of it is written from here."""
        self._remote, self._fenced = True, False
        self.pending.clear()

    def append_mirrored(self, fresh: list[Entry]) -> None:
        """Events of a remote run read from storage, the next ones in order (already
        durable: committed at once); a RUN_FINISHED among them ends the run here."""
        if not fresh:
            return
        if self._committed + 1 != self._tail_first + len(self.entries):  # not contiguous
            self.entries.clear()
            self._tail_first = fresh[0].seq
        self.entries.extend(fresh)
        self._committed = self.record.last_seq = fresh[-1].seq
        last = fresh[-1].event
        if last.type is EventType.RUN_FINISHED:
            status = str(cast(RunFinishedData, last.data).get("status", "completed"))
            self.record.status = self.finished_status = status
            self.record.finished_at = last.ts

    # -- memory ------------------------------------------------------------------

    def evict(self, tail: int) -> None:
        """Durable storage has every committed event: keep at most about `tail` of them
        in memory while the run runs (between `tail` and `2 * tail`), none once it ended."""
        keep = 0 if self.finished_status is not None else tail
        if len(self.entries) > 2 * keep or (keep == 0 and self.entries):
            drop = len(self.entries) - keep
            del self.entries[:drop]
            self._tail_first += drop

    def forget_before(self, first: int) -> None:
        """Retention trimmed the events below `first`: drop them from memory too."""
        self.record.first_seq = first
        if self._tail_first < first:
            drop = min(first - self._tail_first, len(self.entries))
            del self.entries[:drop]
            self._tail_first += drop


def hand_over(log: RunLog, batch: list[Entry]) -> None:
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
