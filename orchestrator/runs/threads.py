"""Threads: conversations that go on across runs (docs/threads.md).

A thread is a chain of runs of one owner. Each run after the first names the run
whose conversation it goes on from (`RunRecord.previous_run_id`) and, when it
continues one of that run's agents rather than its root, that agent
(`continues_agent`). Its root starts from that conversation, then its input: earlier
inputs reach the model as user messages and earlier answers as assistant messages,
each once, in order.

`Threads` finds a thread's runs in the journal, says where a new run stands in it
(`ThreadStart`) and computes conversations. An agent's conversation at the end of a
run is that run's own events rebuilt (`core/rebuild.py`) from the conversation the
run started from. Each one computed is kept (a bounded cache), so a thread's next run
reads its previous run's events only; after a restart the first one reads the chain
back once. Nothing is copied into the journal: it holds each run's own events.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, cast

from agents.core.messages import AssistantMessage, Message, ToolResultMessage
from agents.core.payloads import AgentStartedData, RunFinishedData
from orchestrator.core.continuation import EarlierAgent, ThreadStart
from orchestrator.core.events import Event, EventType, decode_event
from orchestrator.core.rebuild import AgentPlan, ResumePlan, rebuild
from orchestrator.core.threads import ThreadError
from orchestrator.storage.base import RunRecord
from orchestrator.storage.journal import Journal
from orchestrator.storage.runlog import UNFINISHED, UnknownRun

__all__ = ["ThreadIndex", "ThreadState", "Threads"]

CACHED = 256
"""Conversations kept once computed (each a list of the messages' references)."""
EARLIER = 32
"""Earlier agents a thread's run may continue with `agent_spawn`: the newest ones."""
TASK_CHARS = 200
"""How much of an earlier agent's task its listing keeps."""
ANSWER_CHARS = 20_000
"""How much of a run's answer a thread's chat shows (`answer`)."""


@dataclass(frozen=True, slots=True)
class ThreadState:
    """One thread as the `threads` op lists it: its runs, oldest first."""

    thread_id: str
    runs: list[RunRecord]

    @property
    def running(self) -> RunRecord | None:
        """Its run that runs (the oldest that has not ended: the runs queued behind it
        wait for it), if one has not ended."""
        waiting = [r for r in self.runs if r.status in UNFINISHED]
        return next((r for r in waiting if r.status == "running"), None) or next(
            iter(waiting), None
        )

    @property
    def last_unfinished(self) -> RunRecord | None:
        """Its newest run that has not ended: the one a run enqueued now waits for."""
        return next((r for r in reversed(self.runs) if r.status in UNFINISHED), None)

    @property
    def last_activity(self) -> float:
        """When its newest run ended (or started, while it runs)."""
        last = self.runs[-1]
        return last.finished_at or last.created_at


class ThreadIndex(Protocol):
    """Where the threads are listed when this instance does not see every run (a
    cluster's gateways: `cluster/threads.py`)."""

    async def of(self, thread_id: str, owner: str | None, everyone: bool) -> ThreadState | None:
        """As `Threads.of`."""
        ...

    async def listing(
        self, owner: str | None, everyone: bool, limit: int
    ) -> tuple[list[ThreadState], bool]:
        """The first `limit` of `Threads.listing`, and whether there are more."""
        ...

    async def deleted(self, thread: ThreadState) -> None:
        """The thread's runs were deleted: it goes from the index too."""
        ...


class Threads:
    """The threads of one journal: their runs, and their conversations."""

    def __init__(self, journal: Journal, *, cached: int = CACHED) -> None:
        self.journal = journal
        self.index: ThreadIndex | None = None
        """Where threads are listed instead of this journal's records (cluster mode)."""
        self._cached = cached
        self._conversations: OrderedDict[tuple[str, str | None], tuple[Message, ...]] = (
            OrderedDict()
        )
        self._earlier: OrderedDict[str, tuple[EarlierAgent, ...]] = OrderedDict()
        """By run: the agents a run that goes on from it may continue (`EarlierAgent`)."""

    def of(
        self, thread_id: str, owner: str | None, *, everyone: bool = False
    ) -> ThreadState | None:
        """The thread `thread_id` of `owner` (None: no such thread); `everyone` (an
        admin's or a viewer's view): of whichever token used that id last."""
        runs = [record for record in self.journal.records() if record.thread_id == thread_id]
        if everyone and runs:
            owner = max(runs, key=lambda r: r.created_at).owner
        runs = [record for record in runs if record.owner == owner]
        if not runs:
            return None
        runs.sort(key=lambda r: r.created_at)
        return ThreadState(thread_id, runs)

    def listing(self, owner: str | None, *, everyone: bool = False) -> list[ThreadState]:
        """The threads of `owner` (all threads, `everyone`: an admin's view), the
        most recently active first."""
        found: dict[tuple[str | None, str], list[RunRecord]] = {}
        for record in self.journal.records():
            if record.thread_id is None or not (everyone or record.owner == owner):
                continue
            found.setdefault((record.owner, record.thread_id), []).append(record)
        threads = [
            ThreadState(thread_id, sorted(runs, key=lambda r: r.created_at))
            for (_, thread_id), runs in found.items()
        ]
        threads.sort(key=lambda t: t.last_activity, reverse=True)
        return threads

    async def find(
        self, thread_id: str, owner: str | None, *, everyone: bool = False
    ) -> ThreadState | None:
        """`of`, from the index when there is one (every run of a cluster)."""
        if self.index is not None:
            return await self.index.of(thread_id, owner, everyone)
        return self.of(thread_id, owner, everyone=everyone)

    async def page(
        self, owner: str | None, *, everyone: bool = False, limit: int
    ) -> tuple[list[ThreadState], bool]:
        """The first `limit` threads of `listing` (from the index when there is one),
        and whether there are more."""
        if self.index is not None:
            return await self.index.listing(owner, everyone, limit)
        listed = self.listing(owner, everyone=everyone)
        return listed[:limit], len(listed) > limit

    async def answer(self, record: RunRecord) -> str | None:
        """A completed run's answer (its RUN_FINISHED `result`, cut to `ANSWER_CHARS`),
        wherever it ran: one event read. None: it did not complete, or it is gone."""
        if record.status != "completed":
            return None
        journal = self.journal
        try:
            log = await journal.mirrors.find(record.run_id)
        except UnknownRun:
            return None
        if log.committed >= record.last_seq:
            events = [e.event for e in await journal.read(record.run_id, log.committed - 1, 1)]
        else:  # a mirror behind the store: the run ran on another instance
            raws = await journal.storage.read(record.run_id, record.last_seq - 1, 1)
            events = [decode_event(raw) for raw in raws]
        if not events or events[-1].type is not EventType.RUN_FINISHED:
            return None
        result = cast(RunFinishedData, events[-1].data).get("result")
        return result[:ANSWER_CHARS] if isinstance(result, str) else None

    async def start_of(
        self,
        thread_id: str,
        previous: RunRecord | None,
        *,
        agent_key: str | None = None,
        from_run: str | None = None,
    ) -> ThreadStart:
        """Where a new run of the thread stands: after `previous` (None: the thread's
        first run), continuing its root, or the agent `agent_key` of the thread's run
        `from_run` (default: `previous`).

        Raises:
            ThreadError: that agent is not one of that run, or has not ended.
        """
        if previous is None and agent_key is None:
            return ThreadStart(thread_id)
        run_id = from_run or (previous.run_id if previous is not None else None)
        if run_id is None:
            raise ThreadError("bad_request", "agentKey names an agent of an earlier run: none")
        history = await self.conversation(run_id, agent_key)
        return ThreadStart(
            thread_id, run_id, agent_key, history, self._earlier.get(run_id, ()), self
        )

    async def start_of_record(self, record: RunRecord) -> ThreadStart | None:
        """Where the journaled run `record` stands in its thread (None: outside threads),
        as it stood when it started: to resume it, or fork it.

        Raises:
            ThreadError: a run of its conversation is gone.
        """
        if record.thread_id is None:
            return None
        previous, agent_key = record.previous_run_id, record.continues_agent
        if previous is None:
            return ThreadStart(record.thread_id, transcripts=self)
        history = await self.conversation(previous, agent_key)
        earlier = self._earlier.get(previous, ())
        return ThreadStart(record.thread_id, previous, agent_key, history, earlier, self)

    async def continued(self, events: Sequence[Event]) -> dict[str, tuple[Message, ...]]:
        """By agentKey, the conversation each child of `events` that continues an
        earlier agent started from (`rebuild(continued=…)`).

        Raises:
            ThreadError: a run of one of them is gone.
        """
        histories = {}
        for event in events:
            if event.type is EventType.AGENT_STARTED and event.source is not None:
                continues = cast(AgentStartedData, event.data).get("continues")
                if continues is not None:
                    histories[event.source.agent_key] = await self.conversation(
                        continues["runId"], continues["agentKey"]
                    )
        return histories

    async def conversation(self, run_id: str, agent_key: str | None = None) -> tuple[Message, ...]:
        """The conversation of the agent `agent_key` (None: the root) at the end of the
        run `run_id`, as its model saw it, with its answer last.

        Raises:
            ThreadError: no such agent in that run, or it has not ended.
            UnknownRun: no such run.
        """
        key = (run_id, agent_key)
        if key in self._conversations and run_id in self._earlier:
            self._conversations.move_to_end(key)
            self._earlier.move_to_end(run_id)
            return self._conversations[key]
        chain = await self._unknown_chain(run_id)
        history: tuple[Message, ...] = ()
        earlier: tuple[EarlierAgent, ...] = ()
        first = chain[0]
        if first.previous_run_id is not None:  # the oldest of them starts from a known one
            history = self._conversations[(first.previous_run_id, first.continues_agent)]
            earlier = self._earlier[first.previous_run_id]
        for n, record in enumerate(chain):
            last = n == len(chain) - 1
            wanted = agent_key if last else None
            plan, earlier = await self._rebuilt(record, history, earlier)
            self._keep_earlier(record.run_id, earlier)
            messages = self._ended(plan.agents.get(wanted), record, wanted)
            history = messages
            self._keep((record.run_id, wanted), messages)
            if not last:
                following = chain[n + 1]
                if following.continues_agent is not None:  # it continues another agent
                    history = self._ended(
                        plan.agents.get(following.continues_agent),
                        record,
                        following.continues_agent,
                    )
                    self._keep((record.run_id, following.continues_agent), history)
        return history

    async def _unknown_chain(self, run_id: str) -> list[RunRecord]:
        """The runs back from `run_id` whose conversations are not kept, oldest first
        (the oldest either starts the thread or follows a kept conversation)."""
        chain: list[RunRecord] = []
        record: RunRecord | None = await self._record(run_id)
        while record is not None:
            chain.append(record)
            previous = record.previous_run_id
            if (previous, record.continues_agent) in self._conversations and (
                previous in self._earlier
            ):
                break
            if previous is None:
                break
            record = await self._record(previous)
        chain.reverse()
        return chain

    async def _record(self, run_id: str) -> RunRecord:
        """A run of the chain, as stored now (in cluster mode, wherever it ran).

        Raises:
            ThreadError: it is gone (deleted by retention, or with its thread).
        """
        try:
            record, _ = await self.journal.mirrors.settled(run_id)
        except UnknownRun:
            raise ThreadError(
                "not_found",
                f"run {run_id!r} of the thread is gone (retention deleted it, or it was "
                "deleted): the thread cannot go on from it",
            ) from None
        return record

    async def _rebuilt(
        self,
        record: RunRecord,
        history: tuple[Message, ...],
        earlier: tuple[EarlierAgent, ...],
    ) -> tuple[ResumePlan, tuple[EarlierAgent, ...]]:
        """The run's plan (its root from `history`), and the agents a run that goes on
        from it may continue: its own ended ones, then `earlier` (minus the ones it
        continued: their continuations stand for them)."""
        events = [
            entry.event for entry in await self.journal.read_all(record.run_id, record.last_seq)
        ]
        if events and events[0].seq != 1:
            raise ThreadError(
                "not_found",
                f"run {record.run_id!r} of the thread keeps its events from seq "
                f"{events[0].seq} only (storage.retention.max_run_events trimmed the rest): "
                "the thread cannot go on from it",
            )
        continued = await self.continued(events)
        blobs = await self.journal.blobs_of(events)
        plan = rebuild(events, history=history, continued=continued, blobs=blobs)
        ended, spawned = record.status not in UNFINISHED, _spawned(events)
        mine = [
            EarlierAgent(key, agent.agent_id, record.run_id, task[:TASK_CHARS])
            for key, task, _ in spawned
            if (agent := plan.agents.get(key)) is not None
            and key not in plan.remote
            and (agent.ended or ended)
        ]
        superseded = {continues for _, _, continues in spawned if continues}
        mine.reverse()
        listed = mine + [a for a in earlier if a.agent_key not in superseded]
        return plan, tuple(listed[:EARLIER])

    @staticmethod
    def _ended(agent: AgentPlan | None, record: RunRecord, key: str | None) -> tuple[Message, ...]:
        who = "its root" if key is None else f"agent {key!r}"
        if agent is None:
            raise ThreadError("not_found", f"run {record.run_id!r} has no {who.split(' ', 1)[-1]}")
        if not agent.ended and record.status not in UNFINISHED:
            return _closed(agent)  # the run ended (cancelled, interrupted) mid-turn
        if not agent.ended:
            raise ThreadError(
                "bad_request", f"{who} of run {record.run_id!r} has not ended: it cannot go on yet"
            )
        return _closed(agent)

    def _keep_earlier(self, run_id: str, earlier: tuple[EarlierAgent, ...]) -> None:
        self._earlier[run_id] = earlier
        self._earlier.move_to_end(run_id)
        while len(self._earlier) > self._cached:
            self._earlier.popitem(last=False)

    def _keep(self, key: tuple[str, str | None], messages: tuple[Message, ...]) -> None:
        self._conversations[key] = messages
        self._conversations.move_to_end(key)
        while len(self._conversations) > self._cached:
            self._conversations.popitem(last=False)

    async def deleted(self, thread: ThreadState) -> None:
        """The thread's runs were deleted (the `threads` op): their conversations go,
        and the thread from the index."""
        self.forget({r.run_id for r in thread.runs})
        if self.index is not None:
            await self.index.deleted(thread)

    def forget(self, run_ids: set[str]) -> None:
        """Those runs were deleted: their conversations go too."""
        for key in [k for k in self._conversations if k[0] in run_ids]:
            del self._conversations[key]
        for run_id in run_ids & self._earlier.keys():
            del self._earlier[run_id]


def _closed(agent: AgentPlan) -> tuple[Message, ...]:
    """An agent's conversation as the next run gets it: a turn whose calls did not all
    get their results (its run ended first) gets an error result for each missing one,
    so every call the model made is answered, in call order."""
    messages = list(agent.messages)
    if not agent.pending:
        return tuple(messages)
    last = messages[-1] if messages else None
    calls = last.tool_calls if isinstance(last, AssistantMessage) else ()
    done = {result.tool_call_id: result for result in agent.done}
    messages += [
        done.get(call.id)
        or ToolResultMessage(
            tool_call_id=call.id,
            name=call.name,
            content="not run: the run ended before this call finished",
            is_error=True,
        )
        for call in calls
    ]
    return tuple(messages)


def _spawned(events: Sequence[Event]) -> list[tuple[str, str, str | None]]:
    """The children the events start, in order: (agentKey, task, the agentKey of the
    earlier agent it continues)."""
    found = []
    for event in events:
        if event.type is EventType.AGENT_STARTED and event.source is not None:
            data = cast(AgentStartedData, event.data)
            continues = data.get("continues")
            found.append(
                (
                    event.source.agent_key,
                    str(data.get("task", "")),
                    continues["agentKey"] if continues is not None else None,
                )
            )
    return found
