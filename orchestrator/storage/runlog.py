"""One run's state in the journal: its committed tail, pending events, readers.

`RunLog` is what every part of the journal works on: the writer commits its
pending events, feeds read and follow it, retention trims it, and in cluster mode
a mirror of a run executed elsewhere is fed into it. `hand_over` is the moment an
event becomes visible: committed events are offered to the run's followers (live
feeds) in one pass and its readers are woken.
"""

from __future__ import annotations

import logging
from typing import Protocol

import msgspec
import trio

from orchestrator.core.events import Event
from orchestrator.storage.base import RunRecord

__all__ = ["UNFINISHED", "Entry", "Follower", "RunLog", "UnknownRun", "hand_over"]

logger = logging.getLogger(__name__)
UNFINISHED = frozenset({"running", "queued"})
"""Record statuses of a run that has not ended."""


class UnknownRun(LookupError):
    """No run with that id."""

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
        self.finished_status: str | None = None if record.status in UNFINISHED else record.status
        """Set once RUN_FINISHED (or a call run's end) is committed."""
        self.stalled_reported = False
        self.remote = False
        """Cluster mode: another instance executes the run; its events come from storage
        (`RunMirrors.append_remote`), never from a local outlet."""
        self.fenced = False
        """Cluster mode: this instance lost the run's lease; what it still emits is dropped."""
        self.watchers = 0
        """Subscriptions on this instance reading the run (remote runs are tailed then)."""

    @property
    def run_id(self) -> str:
        """The run's id."""
        return self.record.run_id

    @property
    def finished(self) -> bool:
        """True once the run ended and all its events are committed."""
        return self.finished_status is not None and not self.pending and not self.writing

    def evict(self, tail: int) -> None:
        """Durable storage has every committed event: keep at most about `tail` of them
        in memory while the run runs (between `tail` and `2 * tail`), none once it ended."""
        keep = 0 if self.finished_status is not None else tail
        if len(self.entries) > 2 * keep or (keep == 0 and self.entries):
            drop = len(self.entries) - keep
            del self.entries[:drop]
            self.tail_first += drop

    def forget_before(self, first: int) -> None:
        """Retention trimmed the events below `first`: drop them from memory too."""
        self.record.first_seq = first
        if self.tail_first < first:
            drop = min(first - self.tail_first, len(self.entries))
            del self.entries[:drop]
            self.tail_first += drop


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
