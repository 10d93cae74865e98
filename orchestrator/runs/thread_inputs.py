"""How a new input of a thread starts its run, whatever runs in the thread meanwhile.

`RunHost.start` hands a streaming run here. The thread is found (or made); while a run
of it runs, the input meets its `multitask` policy: refused (`reject`), started when
that run ends (`enqueue`), started after cancelling it from the conversation so far
(`interrupt`) or from before it (`rollback`), or delivered into its root as a message
(`steer`: no new run). Otherwise the run starts from the conversation its thread left
(`Threads.start_of`) — docs/threads.md.
"""

from __future__ import annotations

import contextlib
import time
from typing import Protocol

import msgspec
import trio

from orchestrator.core.bus import new_run_id, new_session_id
from orchestrator.core.continuation import ThreadStart
from orchestrator.core.threads import (
    MULTITASK,
    ThreadAsk,
    ThreadError,
    agent_id_of,
    new_thread_id,
)
from orchestrator.runs.service import AgentNotRunning, LimitExceeded, StartedRun
from orchestrator.runs.threads import Threads, ThreadState
from orchestrator.runtime.run import RunResult
from orchestrator.storage.base import RunOptions, RunRecord
from orchestrator.storage.journal import Journal
from orchestrator.storage.runlog import UnknownRun

__all__ = ["MAX_QUEUED", "ThreadHost", "ThreadInputs", "agent_of", "new_record"]

MAX_QUEUED = 16
"""Runs of one thread that may wait for the run before them (`enqueue`); past it the
input is refused (`limit_exceeded`): each waits as a record and a task."""


class Launched(Protocol):
    """A run executing here, as its client holds it (`HostedRun`)."""

    @property
    def run_id(self) -> str: ...
    async def wait(self) -> RunResult: ...
    def fail(self, reason: str) -> None: ...
    def cancel(self, reason: str) -> None: ...


class ThreadHost(Protocol):
    """What starting a thread's run needs of the `RunHost`."""

    @property
    def journal(self) -> Journal: ...
    @property
    def threads(self) -> Threads: ...
    @property
    def nursery(self) -> trio.Nursery: ...
    def admit(self, agent_id: str, owner: str | None, max_runs: int | None) -> None: ...
    def launch_new(self, record: RunRecord, start: ThreadStart | None = None) -> Launched: ...
    async def durable(self, run_id: str, seq: int) -> None: ...
    async def cancel(
        self, run_id: str, agent_key: str | None = None, reason: str | None = None
    ) -> None: ...
    async def send(self, run_id: str, agent_key: str | None, message: str) -> None: ...
    def started_run(self, run_id: str) -> StartedRun: ...


def new_record(
    agent_id: str,
    input: str,
    owner: str | None,
    context_id: str | None,
    start: ThreadStart | None = None,
    status: str = "running",
    options: RunOptions | None = None,
) -> RunRecord:
    """A new run's record (`start`: where it stands in its thread; `options`: what the
    client asked of it beyond its input)."""
    return RunRecord(
        run_id=new_run_id(),
        agent_id=agent_id,
        input=input,
        status=status,
        created_at=time.time(),
        root_session_id=new_session_id(root=True),
        owner=owner,
        context_id=context_id,
        thread_id=start.thread_id if start is not None else None,
        previous_run_id=start.previous_run_id if start is not None else None,
        continues_agent=start.continues_agent if start is not None else None,
        options=options,
    )


class ThreadRun:
    """A run of a thread, as the client that asked for it holds it: its id at once, its
    result once it has started — now, or when the run before it ended (`enqueue`) —
    and ended."""

    __slots__ = ("hosted", "launched", "run_id", "thread_id")

    def __init__(self, run_id: str, thread_id: str, hosted: Launched | None = None) -> None:
        self.run_id = run_id
        self.thread_id = thread_id
        self.launched = trio.Event()
        self.hosted = hosted
        """The run executing (None: queued, not started yet)."""
        if hosted is not None:
            self.launched.set()

    async def wait(self) -> RunResult:
        """Wait for the run to start and end; how it ended."""
        await self.launched.wait()
        assert self.hosted is not None
        return await self.hosted.wait()


class ThreadInputs:
    """Starts the streaming runs of one `RunHost`, each in its thread."""

    def __init__(self, host: ThreadHost) -> None:
        self.host = host
        self._deciding: dict[tuple[str | None, str], _Turn] = {}
        """By thread (its owner, its id): the inputs deciding now, one at a time."""
        self._dropped: dict[str, str] = {}
        """Queued runs an `interrupt` or `rollback` ended before they started: why."""

    async def start(
        self,
        agent_id: str | None,
        input: str,
        *,
        owner: str | None,
        max_runs: int | None,
        context_id: str | None,
        ask: ThreadAsk,
        options: RunOptions | None = None,
        blobs: dict[str, bytes] | None = None,
    ) -> StartedRun:
        """Start the run (`RunHost.start` says what it raises); `blobs`: its
        attachments' bytes, stored for it before it starts.

        The inputs of one thread decide one at a time, each once the one before it has
        started its run (or been refused): two `interrupt`s at once cancel the running
        run, then the first one's new run; never two runs side by side.
        """
        if ask.thread_id is None:  # a new thread: no other input can name it yet
            return await self._start(
                new_thread_id(), None, agent_id, input, owner, max_runs, context_id, ask,
                options, blobs,
            )  # fmt: skip
        key = (owner, ask.thread_id)
        turn = self._deciding.get(key) or self._deciding.setdefault(key, _Turn())
        turn.waiting += 1
        try:
            async with turn.lock:
                known = self.host.threads.of(ask.thread_id, owner)
                return await self._start(
                    ask.thread_id, known, agent_id, input, owner, max_runs, context_id, ask,
                    options, blobs,
                )  # fmt: skip
        finally:
            turn.waiting -= 1
            if not turn.waiting:
                del self._deciding[key]

    async def _start(
        self,
        thread_id: str,
        known: ThreadState | None,
        agent_id: str | None,
        input: str,
        owner: str | None,
        max_runs: int | None,
        context_id: str | None,
        ask: ThreadAsk,
        options: RunOptions | None,
        blobs: dict[str, bytes] | None,
    ) -> StartedRun:
        host = self.host
        running = known.running if known is not None else None
        policy = MULTITASK[ask.multitask]
        if running is not None and policy.delivers:
            await host.send(running.run_id, None, input)
            return host.started_run(running.run_id)
        if running is not None and policy.refuses:
            raise LimitExceeded(
                f"thread {thread_id!r} has run {running.run_id!r} running (multitask "
                "'reject'; 'enqueue', 'interrupt', 'rollback' or 'steer' say otherwise)"
            )
        if ask.from_run is not None and (
            known is None or ask.from_run not in {r.run_id for r in known.runs}
        ):
            raise ThreadError(
                "not_found", f"run {ask.from_run!r} is not a run of thread {thread_id!r}"
            )
        agent_id = agent_id or agent_of(ask, known)
        host.admit(agent_id, owner, max_runs)
        if running is not None and policy.queues:
            assert known is not None
            if sum(1 for r in known.runs if r.status == "queued") >= MAX_QUEUED:
                raise LimitExceeded(
                    f"thread {thread_id!r} has {MAX_QUEUED} runs queued already (the most)"
                )
            last = known.last_unfinished or running  # (the queue's tail: it goes after it)
            queued = self._enqueue(agent_id, input, owner, context_id, ask, last, options)
            if blobs:
                await host.journal.storage.put_blobs(queued.run_id, blobs)
            # Acknowledged once its record is stored: a restart then starts it in turn.
            await host.durable(queued.run_id, 0)
            return queued
        previous = known.runs[-1] if known is not None else None
        if running is not None and policy.stops:  # it ends first, and the runs queued
            assert known is not None  # behind it end `cancelled` without running
            await self._stop(running, ask.multitask, known)
            previous = host.journal.get(running.run_id).record
            if policy.rolls_back:
                before = running.previous_run_id
                previous = host.journal.get(before).record if before is not None else None
        start = await host.threads.start_of(
            thread_id, previous, agent_key=ask.agent_key, from_run=ask.from_run
        )
        record = new_record(agent_id, input, owner, context_id, start, options=options)
        if blobs:
            await host.journal.storage.put_blobs(record.run_id, blobs)
        hosted = host.launch_new(record, start)
        # A run is acknowledged once its start is journaled: a crash right after the
        # ack finds it at the next start (and resumes it), never loses it.
        await host.durable(record.run_id, 1)
        return ThreadRun(hosted.run_id, thread_id, hosted)

    async def follow_up(self, ended: RunRecord, input: str, owner: str | None) -> StartedRun:
        """A fork at the last seq of the ended run `ended` with a message for its root:
        the message goes on from that run's conversation as the next run of a new
        thread (which shares `ended` and the runs before it by reference)."""
        host = self.host
        start = await host.threads.start_of(new_thread_id(), ended)
        record = new_record(ended.agent_id, input, owner, ended.context_id, start)
        hosted = host.launch_new(record, start)
        await host.durable(record.run_id, 1)
        return ThreadRun(hosted.run_id, start.thread_id, hosted)

    async def _stop(self, running: RunRecord, multitask: str, known: ThreadState) -> None:
        """Cancel the thread's running run for a new input, and the runs queued behind
        it (they end `cancelled` when their turn comes, without running); wait for all
        their ends."""
        reason = f"a new input in its thread ({multitask})"
        behind = [r.run_id for r in known.runs if r.status == "queued"]
        for run_id in behind:
            self._dropped[run_id] = reason
        with contextlib.suppress(AgentNotRunning):
            await self.host.cancel(running.run_id, None, reason)
        for run_id in (running.run_id, *behind):
            await self.host.journal.wait_finished(run_id)

    def _enqueue(
        self,
        agent_id: str,
        input: str,
        owner: str | None,
        context_id: str | None,
        ask: ThreadAsk,
        running: RunRecord,
        options: RunOptions | None,
    ) -> StartedRun:
        """A run of the thread that starts when `running` ends: `queued` until then."""
        assert running.thread_id is not None
        # (its record names the run it waits for, and the agent it continues: a restart
        # starts it as this server would have, `requeue`)
        placeholder = ThreadStart(running.thread_id, running.run_id, ask.agent_key)
        record = new_record(agent_id, input, owner, context_id, placeholder, "queued", options)
        self.host.journal.create_run(record)
        queued = ThreadRun(record.run_id, running.thread_id)
        self.host.nursery.start_soon(self._start_queued, record, queued, ask.from_run)
        return queued

    def requeue(self, records: list[RunRecord]) -> None:
        """After a restart: the runs a previous server had queued in their threads start
        as that server would have started them (each once the run before it has ended,
        from the conversation it left): an acknowledged input runs."""
        for record in sorted(records, key=RunRecord.sort_key):
            assert record.thread_id is not None
            queued = ThreadRun(record.run_id, record.thread_id)
            self.host.nursery.start_soon(self._start_queued, record, queued, None)

    async def _start_queued(
        self, record: RunRecord, queued: ThreadRun, from_run: str | None
    ) -> None:
        """Start an enqueued run once the run before it in its thread has ended (if its
        thread cannot go on from there, it starts and ends `failed`, saying why)."""
        host = self.host
        assert record.thread_id is not None and record.previous_run_id is not None
        problem = None
        try:
            await host.journal.wait_finished(record.previous_run_id)
            previous: RunRecord | None = host.journal.get(record.previous_run_id).record
            start = await host.threads.start_of(
                record.thread_id, previous, agent_key=record.continues_agent, from_run=from_run
            )
        except (ThreadError, UnknownRun) as exc:
            start, problem = ThreadStart(record.thread_id, record.previous_run_id), str(exc)
        record = msgspec.structs.replace(
            record, previous_run_id=start.previous_run_id, continues_agent=start.continues_agent
        )
        queued.hosted = host.launch_new(record, start)
        dropped = self._dropped.pop(record.run_id, None)
        if dropped is not None:
            queued.hosted.cancel(dropped)
        elif problem is not None:
            queued.hosted.fail(f"the thread cannot go on: {problem}")
        queued.launched.set()


class _Turn:
    """The inputs of one thread deciding: one at a time."""

    __slots__ = ("lock", "waiting")

    def __init__(self) -> None:
        self.lock = trio.Lock()
        self.waiting = 0


def agent_of(ask: ThreadAsk, known: ThreadState | None) -> str:
    """The agent a run that names none runs: the one `agentKey` continues, else the
    thread's newest run's.

    Raises:
        ThreadError: neither says one.
    """
    if ask.agent_key is not None:
        agent_id = agent_id_of(ask.agent_key)
        if agent_id is None:
            raise ThreadError("bad_request", f"{ask.agent_key!r} is not an agentKey")
        return agent_id
    if known is None:
        raise ThreadError("bad_request", "agent is required to start a new thread")
    return known.runs[-1].agent_id
