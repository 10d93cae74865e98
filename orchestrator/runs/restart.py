"""After a restart: the runs a previous server left running, continued from their
journals (`RunHost.resume_left`), each as a cluster worker takes a run over.

A run of a thread goes on from its conversation: its plan is rebuilt from the
conversation its root started from (`Threads.conversation`), then its own events.
"""

from __future__ import annotations

import logging
from typing import Protocol

import msgspec

from orchestrator.core.fork import ForkError
from orchestrator.core.threads import ThreadError
from orchestrator.runs.fork import started
from orchestrator.runs.resume import Resumption, end_unresumable
from orchestrator.runs.threads import Threads
from orchestrator.runtime.engine import Orchestrator
from orchestrator.runtime.run import Run
from orchestrator.storage.base import RunRecord
from orchestrator.storage.journal import Journal
from orchestrator.storage.runlog import UnknownRun

__all__ = ["MAX_RESTARTS", "RestartHost", "resume_left", "startable"]

logger = logging.getLogger(__name__)
MAX_RESTARTS = 5
"""A run is resumed after at most this many restarts of the server (a run that
crashes the server each time must not crash it for ever)."""


class RestartHost(Protocol):
    """What resuming the runs left needs of the `RunHost`."""

    @property
    def journal(self) -> Journal: ...
    @property
    def orchestrator(self) -> Orchestrator: ...
    @property
    def threads(self) -> Threads: ...
    def launch(self, run: Run) -> object: ...
    async def begin_fork(self, record: RunRecord, resumed: dict[str, object]) -> Run: ...
    async def resumption(
        self, record: RunRecord, resumed: dict[str, object]
    ) -> Resumption | None: ...
    def resume(self, going: Resumption) -> object: ...


async def resume_left(host: RestartHost, run_ids: list[str]) -> int:
    """Continue the runs a previous server left running (`journal.resumable`), each
    from its journal; the number resumed.

    A run that cannot go on — its agent is gone from the subagents, the server stopped
    `MAX_RESTARTS` times while it ran, or its thread's conversation is gone — is ended
    `failed` instead.
    """
    resumed = 0
    for run_id in run_ids:
        record = host.journal.get(run_id).record
        attempt = max(record.attempt, 1) + 1
        record = msgspec.structs.replace(record, status="running", attempt=attempt)
        problem = None
        if record.agent_id not in host.orchestrator.specs:
            problem = f"its agent {record.agent_id!r} is no longer defined"
        elif attempt > MAX_RESTARTS + 1:
            problem = f"the server stopped {attempt - 1} times while it ran"
        if problem is not None:
            await _end(host, record, f"not resumed after a restart: {problem}")
            continue
        if not started(record):  # a fork that had not gone on: start it
            try:
                host.launch(await host.begin_fork(record, {"attempt": attempt}))
            except (UnknownRun, ForkError) as exc:
                await _end(host, record, f"the fork cannot start after a restart: {exc}")
                continue
            resumed += 1
            continue
        resumed_data: dict[str, object] = {
            "attempt": attempt,
            "afterSeq": record.last_seq,
            "reason": "restart",
        }
        try:
            going = await host.resumption(record, resumed_data)
        except ThreadError as exc:
            await _end(host, record, f"not resumed after a restart: {exc.message}")
            continue
        if going is None:  # only its record was behind: it ended
            continue
        host.resume(going)
        resumed += 1
    return resumed


async def startable(host: RestartHost, queued: list[RunRecord]) -> list[RunRecord]:
    """Of the runs a previous server had queued in their threads, those that can start
    in their turn; one whose agent is gone from the subagents ends `interrupted`."""
    known = []
    for record in queued:
        if record.agent_id in host.orchestrator.specs:
            known.append(record)
        else:
            why = f"its agent {record.agent_id!r} is no longer defined"
            await _end(host, record, why, "not started after a restart")
    return known


async def _end(host: RestartHost, record: RunRecord, why: str, what: str = "not resumed") -> None:
    logger.warning("run %s is %s: %s", record.run_id, what, why)
    await end_unresumable(
        host.journal, record, error_type="interrupted", message=f"interrupted: {why}"
    )
