"""How the journal is trimmed: the retention policy (`storage.retention` in server.yaml).

Three bounds, each optional: finished runs older than `max_age` seconds are
deleted, only the newest `max_runs` finished runs are kept, and a run keeps at
most its last `max_run_events` events (older ones are trimmed; a feed that asks
for them gets a `gap` frame). A pass runs every 30 s in the journal's nursery; a
storage failure skips the pass (the writer reports the storage's health).

Threads (docs/threads.md): a run's conversation is rebuilt from the runs before it in
its thread (`previousRunId`, back to the thread's first), so a run another kept run
goes on from is kept too — a thread is deleted from its oldest run once nothing kept
goes on from it. A run whose early events `max_run_events` trimmed cannot be rebuilt:
a thread's next run that needs it is refused, saying so (`runs/threads.py`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import trio

from orchestrator.storage.base import Storage
from orchestrator.storage.runlog import RunLog
from orchestrator.storage.writer import JournalWriter

__all__ = ["RetainedJournal", "Retention", "RetentionPolicy"]


class RetainedJournal(Protocol):
    """What retention uses of its journal: the runs' logs, the store, the writer's
    unwritten runs, the clock."""

    @property
    def logs(self) -> dict[str, RunLog]: ...
    @property
    def storage(self) -> Storage: ...
    @property
    def writer(self) -> JournalWriter: ...
    @property
    def clock(self) -> Callable[[], float]: ...


logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class RetentionPolicy:
    """What the journal keeps (None: no bound)."""

    max_age: float | None = None
    """Seconds a finished run is kept after it finished."""
    max_runs: int | None = None
    """Finished runs kept (the newest)."""
    max_run_events: int | None = None
    """Events one run keeps (its newest)."""

    @property
    def bounded(self) -> bool:
        """True when any bound is set."""
        return not (self.max_age is None and self.max_runs is None and self.max_run_events is None)


class Retention:
    """Applies a `RetentionPolicy` to a journal."""

    def __init__(self, journal: RetainedJournal, policy: RetentionPolicy) -> None:
        self.journal = journal
        self.policy = policy
        self.runs_deleted = 0

    async def apply(self) -> None:
        """One pass: trim huge runs, then forget finished runs past the bounds.

        Call it from one task at a time; storage failures propagate (try again later).
        """
        journal, policy = self.journal, self.policy
        logs = journal.logs
        if policy.max_run_events is not None:
            for log in list(logs.values()):
                first = log.committed - policy.max_run_events + 1
                if first > log.record.first_seq:
                    await journal.storage.trim(log.run_id, first)
                    log.forget_before(first)
        dirty = journal.writer.dirty
        finished = [log for log in logs.values() if log.finished and log.run_id not in dirty]
        doomed = []
        if policy.max_age is not None:
            horizon = journal.clock() - policy.max_age
            doomed += [log for log in finished if (log.record.finished_at or 0.0) < horizon]
        if policy.max_runs is not None and len(finished) > policy.max_runs:
            doomed += finished[: len(finished) - policy.max_runs]
        await self.delete(self._unneeded(list(dict.fromkeys(log.run_id for log in doomed))))

    def _unneeded(self, doomed: list[str]) -> list[str]:
        """The doomed runs no kept run goes on from (through `previous_run_id`, at any
        distance: a thread's conversation is rebuilt from its first run on)."""
        logs, gone = self.journal.logs, set(doomed)
        needed: set[str] = set()
        for run_id, log in logs.items():
            if run_id in gone:
                continue
            previous = log.record.previous_run_id
            while previous is not None and previous not in needed and previous in logs:
                needed.add(previous)
                previous = logs[previous].record.previous_run_id
        return [run_id for run_id in doomed if run_id not in needed]

    async def delete(self, run_ids: list[str]) -> None:
        """Delete these finished runs (the policy's, or a deleted thread's) from storage
        and memory; feeds still on them learn they are gone."""
        if not run_ids:
            return
        await self.journal.storage.delete_runs(run_ids)
        for run_id in run_ids:
            log = self.journal.logs.pop(run_id, None)
            if log is not None:
                log.readers.unpark_all()
        self.runs_deleted += len(run_ids)

    async def run(
        self,
        *,
        interval: float = 30.0,
        task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        """Apply the policy every `interval` seconds, until cancelled."""
        task_status.started()
        if not self.policy.bounded:
            await trio.sleep_forever()
        while True:
            try:
                await self.apply()
            except Exception as exc:  # storage trouble: the writer reports it; retry later
                logger.warning("retention pass failed: %s: %s", type(exc).__name__, exc)
            await trio.sleep(interval)
