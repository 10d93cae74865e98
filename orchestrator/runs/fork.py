"""A fork's start: the original's history copied into the fork's journal, and the
run that goes on from it (`core/fork.py` decides what it holds).

The fork's record says what it was asked (`ForkPoint`), so whoever executes it —
this server, a cluster worker that took the request from the queue, a server that
restarted meanwhile — starts it the same way. The original is only read: its
events 1..S are copied under the fork's runId, in batches the journal's writer
takes (bounded by `storage.max_pending_events`), so forking a large run costs what
resuming it costs: one read of its events, one rebuild, one write of the copies. A
copy cut short (the process died) is completed where it stopped.
"""

from __future__ import annotations

import time

import msgspec

from orchestrator.core.bus import new_run_id
from orchestrator.core.events import Event, EventType
from orchestrator.core.fork import fork_run
from orchestrator.core.threads import new_thread_id
from orchestrator.runs.resume import entries_of, journaled_run
from orchestrator.runs.threads import Threads
from orchestrator.runtime.engine import Orchestrator
from orchestrator.runtime.run import Run
from orchestrator.storage.base import ForkPoint, RunRecord
from orchestrator.storage.journal import Journal

__all__ = [
    "check_fork",
    "fork_record",
    "start_fork",
    "started",
]


def fork_record(
    original: RunRecord, point: ForkPoint, owner: str | None, *, status: str = "running"
) -> RunRecord:
    """The record of a new fork of `original` at `point`, for `owner`."""
    return RunRecord(
        run_id=new_run_id(),
        agent_id=original.agent_id,
        input=original.input,
        status=status,
        created_at=time.time(),
        root_session_id=original.root_session_id,
        owner=owner,
        context_id=original.context_id,
        options=original.options,
        forked_from=point,
        # A fork of a thread's run starts a thread of its own that shares the runs before
        # the original's by reference (its chain goes on from the same run).
        thread_id=new_thread_id() if original.thread_id is not None else None,
        previous_run_id=original.previous_run_id,
        continues_agent=original.continues_agent,
    )


def started(record: RunRecord) -> bool:
    """Has this fork gone on past its copied history? Then it is resumed like any
    run, not started (its copy holds at most `seq` events)."""
    point = record.forked_from
    return point is None or record.last_seq > point.seq


async def start_fork(
    journal: Journal,
    orchestrator: Orchestrator,
    record: RunRecord,
    *,
    new: bool,
    threads: Threads,
    resumed: dict[str, object] | None = None,
) -> tuple[Run, int]:
    """The fork whose record is `record`, ready to launch, and the last seq of its
    copied history. `new`: the record is created here (once the fork is known to be
    possible); else its log is open here already (`journal.own`).

    Raises:
        UnknownRun: the original is gone.
        ForkError: no such seq, a history trimmed by retention, or a message its
            agent cannot take at that seq.
    """
    point = record.forked_from
    assert point is not None
    entries = await entries_of(journal, point.run_id)
    events = [entry.event for entry in entries]
    thread = await threads.start_of_record(record)
    blobs = await journal.blobs_of(events[: point.seq])
    fork = fork_run(
        events,
        point.seq,
        record.run_id,
        agent_key=point.agent_key,
        message=point.message,
        replay=point.replay,
        now=time.time(),
        history=thread.history if thread is not None else (),
        continued=await threads.continued(events),
        thread_id=record.thread_id,
        blobs=blobs,
    )
    if new:
        journal.create_run(record)
    if blobs:  # the fork refers to the original's attachments: never a second copy
        await journal.storage.ref_blobs(record.run_id, list(blobs))
    outlet = journal.outlet(record.run_id)
    rename = _Renamer(point.run_id, record.run_id)
    for event, entry in zip(fork.events, entries, strict=False):
        if event.seq <= record.last_seq:
            continue  # copied before the copy was cut short
        raw = rename(entry.raw) if event.type is not EventType.RUN_STARTED else None
        if outlet.put_copied(event, raw) if raw is not None else outlet.put_nowait(event):
            await outlet.wait_writable()
    copied = max(fork.events[-1].seq, record.last_seq)
    run = journaled_run(
        journal,
        orchestrator,
        record,
        after_seq=copied,
        plan=fork.plan,
        resumed={"attempt": 1, **(resumed or {}), "afterSeq": copied, "reason": "fork"},
        recording=fork.recording,
        thread=thread,
    )
    return run, copied


class _Renamer:
    """An original's encoded event as the fork's: only its leading runId differs (the
    envelope's first field), so the copy is not encoded again."""

    __slots__ = ("_new", "_old")

    def __init__(self, original: str, fork: str) -> None:
        self._old = b'{"runId":' + msgspec.json.encode(original)
        self._new = b'{"runId":' + msgspec.json.encode(fork)

    def __call__(self, raw: bytes) -> bytes | None:
        if not raw.startswith(self._old):
            return None  # (not as expected: encoded again instead)
        return self._new + raw[len(self._old) :]


def check_fork(events: list[Event], point: ForkPoint) -> None:
    """Refuse a fork that cannot start (before it is queued or recorded).

    Raises:
        ForkError: as `start_fork` says.
    """
    fork_run(
        events,
        point.seq,
        "run-check",
        agent_key=point.agent_key,
        message=point.message,
        replay=False,
        now=0.0,
    )
