"""How a run is resumed: rebuilt from its journal, or ended if it cannot go on.

A run whose executor stopped (a cluster worker that died; later, a server that
restarted) is continued by another executor from its journal: `plan_resume` reads
every kept event of the run and rebuilds its agents (`core/rebuild.py`: their
conversations, the calls in flight, cut-off turns, orphans); `RunHost.resume`
executes the run with that plan, which announces RUN_RESUMED and goes on
mid-tree. A run that must not go on (its executors kept dying) is ended by
`end_unresumable`: every agent still open gets its AGENT_ERROR, then the run its
RUN_FINISHED `failed`, so every agent still ends exactly once.
"""

from __future__ import annotations

import functools
import time
from dataclasses import dataclass

from agents.core.payloads import agent_error
from agents.core.replay import Recording
from orchestrator.core.bus import RunSink
from orchestrator.core.continuation import ThreadStart
from orchestrator.core.events import Event, EventType
from orchestrator.core.fork import recorded
from orchestrator.core.rebuild import ResumePlan, rebuild
from orchestrator.runs.threads import Threads
from orchestrator.runtime.engine import Orchestrator
from orchestrator.runtime.run import Run
from orchestrator.storage.base import RunRecord
from orchestrator.storage.journal import Journal
from orchestrator.storage.runlog import Entry

__all__ = [
    "Resumption",
    "end_unresumable",
    "entries_of",
    "events_of",
    "journaled_run",
    "plan_resume",
    "recording_of",
    "resumption",
]


@dataclass(frozen=True, slots=True)
class Resumption:
    """Everything a run whose record exists needs to be executed here: how it goes on
    (`plan`: empty for a run that starts from its input), RUN_RESUMED's data, a
    replaying fork's recording, and where it stands in its thread."""

    record: RunRecord
    plan: ResumePlan
    resumed: dict[str, object] | None = None
    recording: Recording | None = None
    thread: ThreadStart | None = None


async def resumption(
    journal: Journal,
    record: RunRecord,
    threads: Threads,
    resumed: dict[str, object],
    *,
    thread: ThreadStart | None = None,
) -> Resumption | None:
    """How the run of `record` goes on here — the one recipe of a restart and a
    takeover: from its journal when it wrote events (`plan_resume`, a replaying
    fork's recording, RUN_RESUMED with `resumed`), else from its input (`thread`:
    where it stands in its thread, if the caller knows better than its record).
    None: its journal shows it ended (only its record was behind); it is ended.

    Raises:
        ThreadError: a run of a conversation it started from is gone.
    """
    if record.last_seq == 0:
        return Resumption(record, ResumePlan(), thread=thread)
    plan, thread = await plan_resume(journal, record, threads)
    if plan.finished:
        journal.end_call_run(record.run_id, plan.status or "failed")
        return None
    recording = await recording_of(journal, record, threads)
    return Resumption(record, plan, resumed, recording, thread)


async def plan_resume(
    journal: Journal, record: RunRecord, threads: Threads | None = None
) -> tuple[ResumePlan, ThreadStart | None]:
    """The run's agents as its journal left them (events up to `record.last_seq`), and
    where it stands in its thread (`threads`: the conversations its root and its
    continuing children started from; None: not read, the run is outside threads).

    Raises:
        ThreadError: a run of a conversation it started from is gone.
    """
    events = [entry.event for entry in await journal.read_all(record.run_id, record.last_seq)]
    blobs = await journal.blobs_of(events)
    if threads is None:
        return rebuild(events, blobs=blobs), None
    thread = await threads.start_of_record(record)
    history = thread.history if thread is not None else ()
    continued = await threads.continued(events)
    return rebuild(events, history=history, continued=continued, blobs=blobs), thread


def journaled_run(
    journal: Journal,
    orchestrator: Orchestrator,
    record: RunRecord,
    *,
    after_seq: int,
    plan: ResumePlan,
    resumed: dict[str, object] | None,
    recording: Recording | None = None,
    thread: ThreadStart | None = None,
) -> Run:
    """The run of `record`, writing to its journal after `after_seq`: resumed with
    `plan` (announced with `resumed`), or from its input with an empty one. One way for a
    resume, a takeover and a fork (`runs/fork.py`) to build it. `thread`: where it
    stands in its thread (`Threads.start_of_record`; None: its record says)."""
    sink = RunSink(
        record.run_id,
        record.root_session_id,
        journal.outlet(record.run_id),
        after_seq=after_seq,
        durable=functools.partial(journal.wait_durable, record.run_id),
    )
    return Run(
        orchestrator.catalog,
        record.agent_id,
        record.input,
        limits=orchestrator.default_limits(),
        sink=sink,
        run_id=record.run_id,
        plan=plan,
        resumed=resumed,
        recording=recording,
        output_schema=record.options.output_schema if record.options else None,
        attachments=record.options.attachments if record.options else (),
        trigger=record.options.trigger if record.options else None,
        thread=thread
        or (
            ThreadStart(record.thread_id, record.previous_run_id, record.continues_agent)
            if record.thread_id is not None
            else None
        ),
    )


async def end_unresumable(
    journal: Journal, record: RunRecord, *, error_type: str, message: str
) -> None:
    """Take the run over and end it `failed`: AGENT_ERROR for each open agent, then
    RUN_FINISHED, both with `error_type` and `message`. The events are queued for the
    journal's writer (`journal.flush_run` waits for them)."""
    run_id = record.run_id
    log = journal.own(record)
    plan = rebuild([entry.event for entry in await journal.read_all(run_id, log.committed)])
    outlet = journal.outlet(run_id)
    now = time.time()
    ending = [
        (EventType.AGENT_ERROR, agent.source, False, dict(agent_error(error_type, message)))
        for agent in plan.agents.values()
        if not agent.ended and agent.agent_id
    ]
    ending.append(
        (
            EventType.RUN_FINISHED,
            None,
            True,
            {"status": "failed", "error": message, "errorType": error_type},
        )
    )
    for seq, (kind, source, last, data) in enumerate(ending, log.committed + 1):
        outlet.put_nowait(Event(run_id, seq, now, kind, source, last, data))


async def recording_of(journal: Journal, record: RunRecord, threads: Threads) -> Recording | None:
    """A replaying fork resumed after it started (a takeover, a restart): its
    original's recorded turns again (None: not a fork with `replay`)."""
    point = record.forked_from
    if point is None or not point.replay:
        return None
    events = await events_of(journal, point.run_id)
    thread = await threads.start_of_record(record)
    history = thread.history if thread is not None else ()
    return recorded(events, history, await threads.continued(events))


async def entries_of(journal: Journal, run_id: str) -> list[Entry]:
    """Every kept event of the run, with its encoding (its log found where it is)."""
    log = await journal.mirrors.find(run_id)
    return await journal.read_all(run_id, max(log.committed, log.record.last_seq))


async def events_of(journal: Journal, run_id: str) -> list[Event]:
    """Every kept event of the run."""
    return [entry.event for entry in await entries_of(journal, run_id)]
