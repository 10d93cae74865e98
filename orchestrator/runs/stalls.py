"""Stall detection for the runs of this process (`limits.stall_seconds`).

Each run executed here is followed by a `core/stalls.py` `StallWatch`, fed by the
journal's hand-over of committed batches. A sweeper task, alive only while some run
is watched, looks every `period` seconds for agents due and writes their
AGENT_STALLED `stalled: true` into the run with the agent's source; when a marked
agent emits again it writes `stalled: false` at once (docs/events.md). Only agents
running here are marked: an agent of a remote subtree is its own server's to mark.

Cost: nothing per event when off (`stall_seconds: 0`); when on, each committed event
is looked at once more, in the writer's hand-over (its type and source), and each
sweep walks the watched runs' agents.
"""

from __future__ import annotations

from collections.abc import Callable

import trio

from orchestrator.core.events import EventType
from orchestrator.core.stalls import Stall, StallWatch
from orchestrator.runtime.run import Run
from orchestrator.storage.journal import Journal
from orchestrator.storage.runlog import Entry

__all__ = ["StallSweeper"]


class _Follower:
    """A run's StallWatch, offered each committed batch of the run."""

    def __init__(self, watch: StallWatch, moved: Callable[[], None]) -> None:
        self.watch = watch
        self.moved = moved

    def offer(self, entries: list[Entry], shared: dict[object, bytes]) -> bool:
        self.watch.apply((entry.event for entry in entries), trio.current_time())
        if self.watch.moved:
            self.moved()  # a marked agent moves again: say so now, not at the next sweep
        return not self.watch.ended

    def wake(self) -> None:
        self.watch.ended = True  # (no longer offered: the run ended or went elsewhere)


class StallSweeper:
    """Marks the stalled agents of the runs it watches, and unmarks them."""

    def __init__(self, journal: Journal, nursery: trio.Nursery, stall_seconds: float) -> None:
        self.journal = journal
        self.stall_seconds = stall_seconds
        self.period = min(max(stall_seconds / 4, 0.25), 5.0)
        """How often the agents are looked at: a mark comes at most this late."""
        self._nursery = nursery
        self._runs: dict[str, tuple[Run, StallWatch]] = {}
        self._sweeping = False
        self._moved = trio.Event()

    @property
    def stalled(self) -> int:
        """Agents marked stalled now, over the watched runs (`/metrics`)."""
        return sum(watch.stalled for _, watch in self._runs.values())

    def watch(self, run: Run) -> None:
        """Follow `run` (a streaming run this process executes) until it ends."""
        if not run.sink.streaming:
            return  # a call run: no journal, no watchers
        watch = StallWatch(trio.current_time())
        self.journal.follow(self.journal.get(run.run_id), _Follower(watch, self._wake))
        self._runs[run.run_id] = (run, watch)
        if not self._sweeping:
            self._sweeping = True
            self._nursery.start_soon(self._sweep)

    def _wake(self) -> None:
        self._moved.set()

    async def _sweep(self) -> None:
        try:
            while self._runs:
                with trio.move_on_after(self.period):
                    await self._moved.wait()
                self._moved = trio.Event()
                self.sweep(trio.current_time())
        finally:
            self._sweeping = False

    def sweep(self, now: float) -> None:
        """Write AGENT_STALLED for every agent that moved again and every agent due by
        `now`; forget ended runs."""
        for run_id, (run, watch) in list(self._runs.items()):
            if watch.ended or run.result is not None or run.sink.closed:
                del self._runs[run_id]
                continue
            moved, watch.moved = watch.moved, []
            for stall in moved:
                self._write(run, stall)
            log = self.journal.get(run_id)
            if log.pending or log.writing:
                continue  # events not seen yet: the next sweep knows them
            for stall in watch.due(now, self.stall_seconds):
                if self._write(run, stall):
                    watch.mark(stall.agent_key)  # (its event comes back once committed)

    @staticmethod
    def _write(run: Run, stall: Stall) -> bool:
        """The agent's AGENT_STALLED, if it runs here (a remote subtree's agent is its
        own server's to mark)."""
        if run.agent(stall.agent_key) is None:
            return False
        run.sink.publish_nowait(stall.source, EventType.AGENT_STALLED, stall.data)
        return True
