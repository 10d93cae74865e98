"""A cluster gateway: queues runs, forwards control, and tails the runs its clients watch.

A gateway executes nothing itself. `run` writes the run's record and a queue entry
(one MULTI/EXEC) and answers with the runId at once; `cancel` and `send` go to the
run's control stream, where its owner — now, or after a takeover — reads them.
Events reach the gateway's subscriptions through the same journal, feeds and
filters as in one process: the gateway keeps a mirror of each watched run and one
task tails all of them with a single `XREAD BLOCK` over their event streams
(replay below the mirror's tail is read with `XRANGE`, as for any durable store).
Pub/sub is not on the data path.
"""

from __future__ import annotations

import logging
from collections.abc import Collection
from typing import cast

import msgspec
import trio

from agents.core.attachments import Attachment, infos
from agents.core.payloads import RunFinishedData
from orchestrator.cluster.store import ApproveControl, CancelControl, ClusterStore, SendControl
from orchestrator.cluster.threads import ClusterThreads
from orchestrator.core.approvals import Answer, ApprovalInfo
from orchestrator.core.events import EventType
from orchestrator.core.threads import ThreadAsk
from orchestrator.runs.fork import check_fork, fork_record
from orchestrator.runs.resume import events_of
from orchestrator.runs.service import LimitExceeded, StorageUnavailable, ThreadError
from orchestrator.runs.threads import Threads
from orchestrator.runtime.approvals import (
    already_answered,
    ambiguous,
    check_answer,
    not_waiting,
)
from orchestrator.runtime.context import UnknownAgent
from orchestrator.runtime.run import RunResult
from orchestrator.storage.base import ForkPoint, RunOptions, RunRecord
from orchestrator.storage.journal import Journal

__all__ = ["HANDLES", "IGNORES", "ClusterGateway", "QueuedRun"]

logger = logging.getLogger(__name__)
_TAIL_BLOCK = 0.1
"""Seconds one XREAD waits: events return at once; a newly watched run joins after this."""


HANDLES = frozenset({EventType.RUN_FINISHED})
"""Event types a gateway reads itself: a run's end (`result`)."""
IGNORES = frozenset(
    {
        EventType.RUN_STARTED,
        EventType.AGENT_STARTED,
        EventType.REASONING,
        EventType.TOOL_CALL_DELTA,
        EventType.TOOL_CALL,
        EventType.TOOL_RESULT,
        EventType.AGENT_RESULT,
        EventType.AGENT_ERROR,
        EventType.USER_MESSAGE,
        EventType.TOOL_PROGRESS,
        EventType.RUN_RESUMED,
        EventType.TURN_ABANDONED,
        EventType.APPROVAL_REQUESTED,
        EventType.APPROVAL_RESOLVED,
        EventType.COMPACTION_STARTED,
        EventType.COMPACTION_FINISHED,
        EventType.AGENT_STALLED,
        EventType.MODEL_FALLBACK,
    }
)
"""Event types it leaves to the consumers of the feeds, doors and traces it serves;
tests/unit/test_payloads.py checks that every type is in one of the two."""


class QueuedRun:
    """A run this gateway queued: its id, and its result read from the journal."""

    __slots__ = ("_gateway", "run_id", "thread_id")

    def __init__(self, gateway: ClusterGateway, run_id: str, thread_id: str | None) -> None:
        self._gateway = gateway
        self.run_id = run_id
        self.thread_id = thread_id

    async def wait(self) -> RunResult:
        """Wait for the run's end (a blocking `run`), from its journaled events."""
        return await self._gateway.result(self.run_id)


class ClusterGateway:
    """The cluster side of one instance's WebSocket server (a `RunService`)."""

    def __init__(self, store: ClusterStore, journal: Journal, agents: Collection[str]) -> None:
        self.store = store
        self.journal = journal
        self.agents = agents
        """The subagents a run may start with (every instance has the same files)."""
        journal.mirrors.lookup = store.record
        self.tail_reads = 0
        self.threads = Threads(journal)
        """The threads' conversations, read from wherever their runs ran."""
        self._threads = ClusterThreads(self)
        self.threads.index = self._threads

    async def start(
        self,
        agent_id: str | None,
        input: str,
        *,
        stream: bool = True,
        owner: str | None = None,
        max_runs: int | None = None,
        context_id: str | None = None,
        thread: ThreadAsk | None = None,
        options: RunOptions | None = None,
        blobs: dict[str, bytes] | None = None,
    ) -> QueuedRun:
        """Queue a run; it is the cluster's from here on, in its thread (`thread`:
        which, and what a new input does while one of its runs runs: as on one server,
        `cluster/threads.py`).

        `stream` does not matter here (a worker journals every run) and `max_runs`
        is not counted across the cluster.

        Raises:
            UnknownAgent: no such subagent.
            StorageUnavailable: the run cannot be queued.
            LimitExceeded: `reject` while a run of the thread runs, or a full queue.
            ThreadError: the thread or the agent to continue cannot go on as asked.
        """
        ask = thread or ThreadAsk()
        try:
            thread_id, run_id = await self._threads.start(
                agent_id,
                input,
                owner=owner,
                context_id=context_id,
                ask=ask,
                options=options,
                blobs=blobs,
            )
        except (ThreadError, UnknownAgent, LimitExceeded):
            raise
        except Exception as exc:
            raise StorageUnavailable(f"cannot queue the run: {type(exc).__name__}: {exc}") from exc
        return QueuedRun(self, run_id, thread_id)

    async def fork(
        self, point: ForkPoint, *, owner: str | None = None, max_runs: int | None = None
    ) -> QueuedRun:
        """Queue a fork (docs/fork.md): checked here against the original's journal,
        then started by whichever worker takes it (`cluster/worker.py`). `max_runs` is
        not counted across the cluster.

        Raises:
            UnknownRun, ForkError: as `RunService.fork` says.
            UnknownAgent, StorageUnavailable: as `start` says.
        """
        original = (await self.journal.mirrors.find(point.run_id)).record
        if original.agent_id not in self.agents:
            raise UnknownAgent(original.agent_id, sorted(self.agents))
        check_fork(await events_of(self.journal, point.run_id), point)
        return await self._queue(fork_record(original, point, owner, status="queued"))

    async def _queue(self, record: RunRecord) -> QueuedRun:
        try:
            await self.store.submit(record)
        except Exception as exc:
            raise StorageUnavailable(f"cannot queue the run: {type(exc).__name__}: {exc}") from exc
        self.journal.mirrors.adopt(record)
        return QueuedRun(self, record.run_id, record.thread_id)

    async def cancel(
        self, run_id: str, agent_key: str | None = None, reason: str | None = None
    ) -> None:
        """Ask the run's owner to cancel it, or one agent and its subtree (a finished run
        is left as it is). An unknown agentKey is found out by the worker, which logs it:
        the ack here means "forwarded"."""
        log = await self.journal.mirrors.find(run_id)
        if log.finished_status is None:
            await self.store.send_control(run_id, CancelControl(agent_key, reason))

    async def send(
        self,
        run_id: str,
        agent_key: str | None,
        message: str,
        attachments: tuple[Attachment, ...] = (),
    ) -> None:
        """Hand a person's message to the run's owner, for that agent (default: root);
        its attachments are stored for the run first (the owner reads them by id)."""
        await self.journal.mirrors.find(run_id)
        if attachments:
            blobs = {a.id: a.data for a in attachments}
            await self.store.storage.put_blobs(run_id, blobs)
        control = SendControl(agent_key, message, tuple(infos(attachments)))
        await self.store.send_control(run_id, control)

    async def approve(self, run_id: str, answer: Answer) -> None:
        """Answer a waiting call wherever it runs: checked here against the cluster's
        list of waiting calls, claimed once for the whole cluster (`HSETNX`), then
        handed to the run's owner through its control stream — now, or after a
        takeover (the call waits again there and takes the answer)."""
        await self.journal.mirrors.find(run_id)
        call_id = answer.tool_call_id
        found = await self.store.approvals_of(run_id, call_id, answer.agent_key)
        if len(found) > 1:
            raise ambiguous(run_id, call_id, [info.agent_key for info in found])
        if not found:
            earlier = await self.store.answered(run_id, call_id, answer.agent_key)
            if earlier is not None:
                raise already_answered(run_id, call_id, earlier)
            raise not_waiting(run_id, call_id)
        (info,) = found
        check_answer(info.name, info.edit, info.parameters, answer.decision, answer.args)
        exact = msgspec.structs.replace(answer, agent_key=info.agent_key)
        call = (info.agent_key, call_id)
        earlier = await self.store.answer(run_id, call, ApproveControl(exact))
        if earlier is not None:
            raise already_answered(run_id, call_id, earlier)

    async def pending(
        self, run_id: str | None, *, owner: str | None, limit: int
    ) -> tuple[list[ApprovalInfo], bool]:
        """The cluster's waiting calls (oldest first), as its workers list them."""
        found = [
            info
            for info in await self.store.approvals()
            if (run_id is None or info.run_id == run_id) and (owner is None or info.owner == owner)
        ]
        found.sort(key=lambda info: info.requested_at)
        return found[:limit], len(found) > limit

    async def page(
        self, *, limit: int, before: str | None, owner: str | None
    ) -> tuple[list[RunRecord], bool]:
        """A page of every run of the cluster, newest first."""
        return await self.store.page(limit=limit, before=before, owner=owner)

    async def result(self, run_id: str) -> RunResult:
        """Wait for a run's end, from its journaled events."""
        journal = self.journal
        log = await journal.mirrors.find(run_id)
        journal.mirrors.watch(log, +1)
        try:
            await journal.wait_finished(run_id)
        finally:
            journal.mirrors.watch(log, -1)
        entries = await journal.read(run_id, log.committed - 1, 1)
        last = entries[-1].event if entries else None
        if last is None or last.type is not EventType.RUN_FINISHED:  # (trimmed by retention)
            kept = log.finished_status or "failed"
            return RunResult(run_id=run_id, status=kept)  # type: ignore[arg-type]
        ended = cast(RunFinishedData, last.data)
        result, error = ended.get("result"), ended.get("error")
        return RunResult(
            run_id=run_id,
            status=ended["status"],
            text=result if isinstance(result, str) else None,
            error=error if isinstance(error, str) else None,
            structured=ended.get("structured", msgspec.UNSET),
        )

    async def tail_loop(self) -> None:
        """Feed the mirrors of watched runs from Redis, until cancelled."""
        journal = self.journal
        while True:
            cursors = journal.mirrors.tailed()
            if not cursors:
                await journal.mirrors.watch_changed.park()
                continue
            try:
                got = await self.store.tail(cursors, _TAIL_BLOCK)
            except Exception as exc:
                logger.warning("tailing %d runs failed: %s", len(cursors), exc)
                await trio.sleep(1.0)
                continue
            self.tail_reads += 1
            for run_id, raws in got.items():
                journal.mirrors.append_remote(run_id, raws)
