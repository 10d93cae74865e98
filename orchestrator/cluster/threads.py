"""A thread's runs in cluster mode: one at a time, whichever gateway takes the input.

Each thread has a list in Redis, `<prefix>thread:<owner>:<threadId>` (the owner as a
digest of its token's name), of its runs' ids, oldest first. A gateway that takes an
input of a thread reads the list's last run (the thread's head) and decides as one
server does (`runs/thread_inputs.py`): `reject`, `steer`, `enqueue`, `interrupt`,
`rollback`. It then queues the new run with one Lua script that appends it to the
list only if the head is still the one it read, with its record and its queue entry:
of two gateways that read one head at once, one wins and the other reads the new
head and decides again. So no two runs of a thread run at once: a run is queued
after the previous one has ended, or (`enqueue`) names it as its previous run, and
the worker that takes it waits for that run's end before it starts
(`thread_start`). The conversation it starts from is read by that worker, from
wherever the runs before it ran (`Threads`, through the journal's mirrors).
"""

from __future__ import annotations

import hashlib
from collections.abc import Collection
from typing import TYPE_CHECKING, Protocol

import msgspec
import trio

from orchestrator.core.continuation import ThreadStart
from orchestrator.core.threads import MULTITASK, ThreadAsk, ThreadError, new_thread_id
from orchestrator.runs.service import LimitExceeded
from orchestrator.runs.thread_inputs import MAX_QUEUED, agent_of, new_record
from orchestrator.runs.threads import Threads, ThreadState
from orchestrator.runtime.context import UnknownAgent
from orchestrator.runtime.run import RunResult
from orchestrator.storage.base import RunOptions, RunRecord
from orchestrator.storage.journal import Journal
from orchestrator.storage.runlog import UNFINISHED

if TYPE_CHECKING:
    from orchestrator.cluster.store import ClusterStore

__all__ = ["ClusterThreads", "thread_start"]

ATTEMPTS = 16
"""Times a gateway decides again when other gateways keep adding runs to the thread."""
POLL = 0.2
"""Seconds between looks at a run that must end before a thread's next one starts."""

# KEYS: thread list, runs hash, runs index, queue, the owner's threads, every thread.
# ARGV: the head read ('' none), the runId, its encoded record, its created_at, the
# threadId, the owner's digest. Queues the run as the thread's next one if the
# thread's head is still the one read (0: another run came first), and notes the
# thread as its owner's most recently active one.
_SUBMIT = """
local head = redis.call('LINDEX', KEYS[1], -1)
if (head or '') ~= ARGV[1] then return 0 end
redis.call('RPUSH', KEYS[1], ARGV[2])
redis.call('HSET', KEYS[2], ARGV[2], ARGV[3])
redis.call('ZADD', KEYS[3], ARGV[4], ARGV[2])
redis.call('XADD', KEYS[4], '*', 'run', ARGV[2])
redis.call('ZADD', KEYS[5], ARGV[4], ARGV[5])
redis.call('ZADD', KEYS[6], ARGV[4], ARGV[6] .. ':' .. ARGV[5])
return 1
"""

_encode = msgspec.json.Encoder().encode
_decode_record = msgspec.json.Decoder(RunRecord).decode


def _digest(owner: str | None) -> str:
    """An owner in a key: a digest of its token's name (any characters, any length)."""
    return hashlib.sha256((owner or "").encode()).hexdigest()[:16]


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


class Gateway(Protocol):
    """What queuing a thread's run needs of the `ClusterGateway`."""

    @property
    def store(self) -> ClusterStore: ...
    @property
    def threads(self) -> Threads: ...
    @property
    def agents(self) -> Collection[str]: ...
    @property
    def journal(self) -> Journal: ...
    async def send(self, run_id: str, agent_key: str | None, message: str) -> None: ...
    async def cancel(
        self, run_id: str, agent_key: str | None = None, reason: str | None = None
    ) -> None: ...
    async def result(self, run_id: str) -> RunResult: ...


class ClusterThreads:
    """Queues the runs of threads for one gateway (module docstring)."""

    def __init__(self, gateway: Gateway) -> None:
        self.gateway = gateway
        store = gateway.store
        self._submit = store.client.register_script(_SUBMIT)
        self._prefix = store.prefix

    def key(self, owner: str | None, thread_id: str) -> str:
        """The Redis list of a thread's runs."""
        return f"{self._prefix}thread:{_digest(owner)}:{thread_id}"

    def _owned(self, owner: str | None) -> str:
        """The sorted set of an owner's threads (by their last run's start)."""
        return f"{self._prefix}threads:{_digest(owner)}"

    async def of(self, thread_id: str, owner: str | None, everyone: bool) -> ThreadState | None:
        """The thread `thread_id` of `owner` (`everyone`: of whichever owner started a
        run in it last), its runs oldest first (None: no such thread)."""
        if everyone:
            found = await self._everyone(thread_id)
            if found is not None:
                return found
        return await self._thread(self.key(owner, thread_id), thread_id)

    async def listing(
        self, owner: str | None, everyone: bool, limit: int
    ) -> tuple[list[ThreadState], bool]:
        """The threads of `owner` (`everyone`: all), most recently active first: the
        first `limit`, and whether there are more."""
        client = self.gateway.store.client
        where = f"{self._prefix}threads" if everyone else self._owned(owner)
        members = [_text(m) for m in await client.zrange(where, 0, limit, rev=True)]
        threads = []
        for member in members[:limit]:
            who, thread_id = member.split(":", 1) if everyone else (_digest(owner), member)
            found = await self._thread(f"{self._prefix}thread:{who}:{thread_id}", thread_id)
            if found is not None:
                threads.append(found)
        return threads, len(members) > limit

    async def deleted(self, thread: ThreadState) -> None:
        """The thread's runs were deleted: its list and its entries go (its id may be
        used again, for a new thread)."""
        owner = thread.runs[0].owner if thread.runs else None
        client = self.gateway.store.client
        await client.delete([self.key(owner, thread.thread_id)])
        await client.zrem(self._owned(owner), [thread.thread_id])
        await client.zrem(f"{self._prefix}threads", [f"{_digest(owner)}:{thread.thread_id}"])

    async def _everyone(self, thread_id: str) -> ThreadState | None:
        """The thread of that id whose owner started a run in it last."""
        client = self.gateway.store.client
        found = None
        async for member, _ in client.zscan_iter(f"{self._prefix}threads"):
            who, _, name = _text(member).partition(":")
            if name == thread_id:
                candidate = await self._thread(f"{self._prefix}thread:{who}:{name}", name)
                if candidate is not None and (
                    found is None or candidate.last_activity > found.last_activity
                ):
                    found = candidate
        return found

    async def _thread(self, key: str, thread_id: str) -> ThreadState | None:
        """A thread's runs that are still stored, oldest first (None: none)."""
        store = self.gateway.store
        ids = await self._runs(key)
        raws = await store.client.hmget(store.runs, ids) if ids else []
        runs = [_decode_record(raw) for raw in raws if raw is not None]
        return ThreadState(thread_id, runs) if runs else None

    async def start(
        self,
        agent_id: str | None,
        input: str,
        *,
        owner: str | None,
        context_id: str | None,
        ask: ThreadAsk,
        options: RunOptions | None = None,
        blobs: dict[str, bytes] | None = None,
    ) -> tuple[str, str]:
        """Queue the input's run in its thread: (the thread's id, the run's id; `steer`:
        the thread's running run's, which the input was delivered into).

        Raises:
            LimitExceeded: `reject` while a run of the thread runs, or a full queue.
            ThreadError, UnknownAgent: as `RunService.start` says.
        """
        thread_id = ask.thread_id or new_thread_id()
        key = self.key(owner, thread_id)
        rolled_back: str | None = None
        for _ in range(ATTEMPTS):
            runs = await self._runs(key) if ask.thread_id is not None else []
            head = await self.gateway.store.record(runs[-1]) if runs else None
            running = head if head is not None and head.status in UNFINISHED else None
            policy = MULTITASK[ask.multitask]
            if running is not None and policy.delivers:
                await self.gateway.send(running.run_id, None, input)
                return thread_id, running.run_id
            _check(ask, thread_id, runs, running)
            agent = agent_id or agent_of(ask, ThreadState(thread_id, [head]) if head else None)
            if agent not in self.gateway.agents:
                raise UnknownAgent(agent, sorted(self.gateway.agents))
            if running is not None and policy.stops:
                await self._stop(running, ask.multitask)
                rolled_back = running.run_id if policy.rolls_back else None
                continue  # its end is the thread's head now: decide again
            if running is not None and policy.queues:  # it starts once `running` has ended
                await self._check_queue(runs, thread_id)
            start = await self._start_of(thread_id, ask, head, rolled_back)
            record = new_record(
                agent, input, owner, context_id, start, status="queued", options=options
            )
            if blobs:  # (stored before the run is queued: its worker reads them)
                await self.gateway.store.storage.put_blobs(record.run_id, blobs)
            if await self._queued(key, record, runs[-1] if runs else ""):
                self.gateway.journal.mirrors.adopt(record)
                return thread_id, record.run_id
        raise LimitExceeded(f"thread {thread_id!r} takes too many inputs at once: try again")

    async def _start_of(
        self, thread_id: str, ask: ThreadAsk, head: RunRecord | None, rolled_back: str | None
    ) -> ThreadStart:
        """Where the new run stands: after the head (after the run before it, when the
        head was `rolled_back`), continuing the agent the ask names. Checked against
        that conversation now, unless the run waits for a head that has not ended."""
        previous = head
        if head is not None and head.run_id == rolled_back:
            before = head.previous_run_id
            previous = await self.gateway.store.record(before) if before is not None else None
        if previous is not None and previous.status in UNFINISHED:  # enqueued after it
            return ThreadStart(thread_id, ask.from_run or previous.run_id, ask.agent_key)
        return await self.gateway.threads.start_of(
            thread_id, previous, agent_key=ask.agent_key, from_run=ask.from_run
        )

    async def _runs(self, key: str) -> list[str]:
        return [_text(r) for r in await self.gateway.store.client.lrange(key, 0, -1)]

    async def _check_queue(self, runs: list[str], thread_id: str) -> None:
        """Refuse an enqueued run past `MAX_QUEUED` waiting ones."""
        store = self.gateway.store
        waiting = 0
        for run_id in runs[-(MAX_QUEUED + 1) :]:
            record = await store.record(run_id)
            waiting += record is not None and record.status == "queued"
        if waiting >= MAX_QUEUED:
            raise LimitExceeded(f"thread {thread_id!r} has {MAX_QUEUED} runs queued already")

    async def _queued(self, key: str, record: RunRecord, head: str) -> bool:
        """Queue `record` as the thread's next run if `head` (the last runId of its list
        as read, '' for none; its run may have been deleted since) still is."""
        store = self.gateway.store
        done: object = await self._submit(
            keys=[
                key,
                store.runs,
                store.index,
                store.queue,
                self._owned(record.owner),
                f"{self._prefix}threads",
            ],
            args=[
                head,
                record.run_id,
                _encode(record),
                record.created_at,
                record.thread_id or "",
                _digest(record.owner),
            ],
        )
        return bool(done)

    async def _stop(self, running: RunRecord, multitask: str) -> None:
        """Cancel the thread's running run for a new input, and wait for its end."""
        await self.gateway.cancel(running.run_id, None, f"a new input in its thread ({multitask})")
        await self.gateway.result(running.run_id)


def _check(ask: ThreadAsk, thread_id: str, runs: list[str], running: RunRecord | None) -> None:
    """Refuse what no run can answer: `reject` while one runs, an unknown `fromRun`."""
    if running is not None and MULTITASK[ask.multitask].refuses:
        raise LimitExceeded(
            f"thread {thread_id!r} has run {running.run_id!r} running (multitask "
            "'reject'; 'enqueue', 'interrupt', 'rollback' or 'steer' say otherwise)"
        )
    if ask.from_run is not None and ask.from_run not in runs:
        raise ThreadError("not_found", f"run {ask.from_run!r} is not a run of thread {thread_id!r}")


async def thread_start(
    store: ClusterStore, threads: Threads, record: RunRecord
) -> ThreadStart | None:
    """Where a queued run of a thread starts, once the run before it has ended (an
    enqueued run waits here, on the worker that took it): None outside threads.

    Raises:
        ThreadError: a run of the conversation it goes on from is gone.
    """
    previous = record.previous_run_id
    while previous is not None:
        before = await store.record(previous)
        if before is None or before.status not in UNFINISHED:
            break
        await trio.sleep(POLL)
    return await threads.start_of_record(record)
