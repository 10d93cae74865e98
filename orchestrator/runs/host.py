"""The runs this process executes: how a run is started, resumed, cancelled, messaged.

Every run here publishes into the journal, never to a client: clients read the
journal (the server's feeds). The WebSocket server uses a `RunHost` as its
`RunService` when it runs alone; a cluster worker uses one to execute the runs it
takes from the queue (`resume` continues a run from its journal after a
takeover, with the plan `runs/resume.py` makes).
"""

from __future__ import annotations

import functools
import logging

import msgspec
import trio

from agents.core.attachments import Attachment
from orchestrator.core.approvals import Answer, ApprovalInfo
from orchestrator.core.bus import RunSink
from orchestrator.core.continuation import ThreadStart
from orchestrator.core.threads import ThreadAsk, ThreadError
from orchestrator.runs.fork import fork_record, start_fork
from orchestrator.runs.restart import MAX_RESTARTS, resume_left, startable
from orchestrator.runs.resume import Resumption, journaled_run, resumption
from orchestrator.runs.service import (
    AgentNotRunning,
    LimitExceeded,
    StartedRun,
    StorageUnavailable,
)
from orchestrator.runs.stalls import StallSweeper
from orchestrator.runs.thread_inputs import ThreadInputs, new_record
from orchestrator.runs.threads import Threads
from orchestrator.runtime.approvals import ApprovalDesk, ApprovalError
from orchestrator.runtime.engine import Orchestrator, UnknownAgent
from orchestrator.runtime.remote import RemoteRefused
from orchestrator.runtime.run import AgentGone, Run, RunResult
from orchestrator.runtime.spawn import send_to
from orchestrator.storage.base import ForkPoint, RunOptions, RunRecord
from orchestrator.storage.journal import Journal

__all__ = ["MAX_RESTARTS", "HostedRun", "RunHost"]

logger = logging.getLogger(__name__)


class HostedRun:
    """A run started here, as the client that started it holds it."""

    __slots__ = ("_done", "run")

    def __init__(self, run: Run, done: trio.Event) -> None:
        self.run = run
        self._done = done

    @property
    def run_id(self) -> str:
        """The run's id."""
        return self.run.run_id

    @property
    def thread_id(self) -> str | None:
        """Its thread's id (None: a blocking call, outside threads)."""
        thread = self.run.context.continuation.thread
        return thread.thread_id if thread is not None else None

    async def wait(self) -> RunResult:
        """Wait for the run to end; how it ended."""
        await self._done.wait()
        assert self.run.result is not None
        return self.run.result

    def fail(self, reason: str) -> None:
        """End the run `failed` with `reason` (`Run.fail`)."""
        self.run.fail(reason)

    def cancel(self, reason: str) -> None:
        """Cancel the run for `reason` (`Run.cancel`): it ends `cancelled`."""
        self.run.cancel(reason=reason)


class RunHost:
    """Starts, resumes, tracks, cancels and interrupts the runs of this process."""

    def __init__(self, orchestrator: Orchestrator, journal: Journal, nursery: trio.Nursery) -> None:
        self.orchestrator = orchestrator
        self.journal = journal
        orchestrator.catalog.blobs = journal.storage  # attachments' bytes: the journal's
        self.threads = Threads(journal)
        """The journal's threads: their runs and conversations (docs/threads.md)."""
        self.nursery = nursery
        """Where the runs here execute."""
        self._nursery = nursery
        self._thread_inputs = ThreadInputs(self)
        self.active: dict[str, Run] = {}
        self._done: dict[str, trio.Event] = {}
        self.max_concurrent = orchestrator.config.limits.max_concurrent_runs
        stall_seconds = orchestrator.config.limits.stall_seconds
        self.stalls = StallSweeper(journal, nursery, stall_seconds) if stall_seconds else None
        """Marks stalled agents (`limits.stall_seconds`); None when that is 0."""
        journal.writer.stalled.subscribe(self.fail_unstorable)
        if not journal.cluster:  # (in a cluster, a run's worker stops what it lost)
            journal.writer.fenced.subscribe(self._taken_over)

    # -- starting ------------------------------------------------------------------

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
    ) -> StartedRun:
        """Start a run (streaming: journaled events; else a blocking call with none).

        A streaming run is in a thread (`thread`: which, and what a new input does while
        one of its runs runs; absent: a new thread), and its root starts from the
        thread's conversation (`runs/thread_inputs.py`, docs/threads.md). It is
        returned once its RUN_STARTED is journaled (a commit of the journal's writer: a
        crash after the caller acknowledged it cannot lose it); an enqueued one at once.
        `limits.max_concurrent_runs` bounds the runs here (`LimitExceeded`). Raises as
        `RunService.start` says.
        """
        if stream:
            return await self._thread_inputs.start(
                agent_id,
                input,
                owner=owner,
                max_runs=max_runs,
                context_id=context_id,
                ask=thread or ThreadAsk(),
                options=options,
                blobs=blobs,
            )
        if thread is not None:
            raise ThreadError("bad_request", "a thread's runs are streamed: give stream true")
        if agent_id is None:
            raise ThreadError("bad_request", "agent is required")
        self.admit(agent_id, owner, max_runs)
        record = new_record(agent_id, input, owner, context_id, options=options)
        if blobs:
            await self.journal.storage.put_blobs(record.run_id, blobs)
        return self.launch_new(record)

    def launch_new(self, record: RunRecord, start: ThreadStart | None = None) -> HostedRun:
        """Create `record`'s run in the journal (or own its queued one) and execute it:
        streaming in a thread with `start`, a blocking call without."""
        if record.status == "queued":
            record = msgspec.structs.replace(record, status="running")
            self.journal.own(record)
        else:
            self.journal.create_run(record)
        sink = None
        if start is not None:
            run_id = record.run_id
            durable = functools.partial(self.journal.wait_durable, run_id)
            outlet = self.journal.outlet(run_id)
            sink = RunSink(run_id, record.root_session_id, outlet, durable=durable)
        run = Run(
            self.orchestrator.catalog,
            record.agent_id,
            record.input,
            limits=self.orchestrator.default_limits(),
            sink=sink,
            run_id=record.run_id,
            thread=start,
            output_schema=record.options.output_schema if record.options else None,
            attachments=record.options.attachments if record.options else (),
            trigger=record.options.trigger if record.options else None,
        )
        return self.launch(run)

    def started_run(self, run_id: str) -> StartedRun:
        """A run executing here, as a client that did not start it holds it (`steer`).

        Raises:
            AgentNotRunning: it is not running here.
        """
        run, done = self.active.get(run_id), self._done.get(run_id)
        if run is None or done is None:
            raise AgentNotRunning(f"run {run_id!r} is not running")
        return HostedRun(run, done)

    def admit(self, agent_id: str, owner: str | None, max_runs: int | None) -> None:
        """May a run of `agent_id` start for `owner` now?

        Raises:
            UnknownAgent, StorageUnavailable, LimitExceeded: as `start` says.
        """
        specs = self.orchestrator.specs
        if agent_id not in specs:
            raise UnknownAgent(agent_id, sorted(specs))
        if not self.journal.writer.healthy:
            raise StorageUnavailable(
                "storage is failing: the server is read-only until it recovers (see /healthz)"
            )
        if len(self.active) >= self.max_concurrent:
            raise LimitExceeded(
                f"{len(self.active)} runs are running (limits.max_concurrent_runs "
                f"is {self.max_concurrent})"
            )
        if owner is not None and max_runs is not None:
            mine = sum(1 for r in self.active if self.journal.get(r).record.owner == owner)
            if mine >= max_runs:
                raise LimitExceeded(
                    f"token {owner!r} already has {mine} runs running (its limit is {max_runs})"
                )

    async def durable(self, run_id: str, seq: int) -> None:
        """Wait until the run's events up to `seq` are committed (0: its record only, as
        a queued run has no event yet), bounded: a store that fails for that long fails
        the run meanwhile."""
        with trio.move_on_after(self.journal.writer.fail_runs_after):
            journal = self.journal
            stored = journal.wait_durable(run_id, seq) if seq else journal.wait_stored(run_id)
            if not await stored:
                raise StorageUnavailable(
                    "this server's journal was taken over by another server: "
                    "nothing it starts is stored"
                )

    async def fork(
        self, point: ForkPoint, *, owner: str | None = None, max_runs: int | None = None
    ) -> StartedRun:
        """Start a fork (docs/fork.md): returned once its copied history is journaled.
        At the last seq of an ended run, a message for its root is a follow-up in a new
        thread instead (docs/threads.md).

        Raises:
            UnknownRun, ForkError: as `RunService.fork` says.
            UnknownAgent, StorageUnavailable, LimitExceeded: as `start` says.
        """
        log = self.journal.get(point.run_id)
        self.admit(log.record.agent_id, owner, max_runs)
        ended = log.finished and point.seq == log.committed
        if ended and point.message is not None and point.agent_key is None:
            return await self._thread_inputs.follow_up(log.record, point.message, owner)
        if log.committed < point.seq <= log.committed + log.writing + len(log.pending):
            await self.durable(point.run_id, point.seq)  # just emitted: wait for its commit
        record = fork_record(log.record, point, owner)
        run, copied = await start_fork(
            self.journal, self.orchestrator, record, new=True, threads=self.threads
        )
        await self.durable(run.run_id, copied)  # the copy is safe: a restart completes it
        return self.launch(run)

    async def resumption(
        self,
        record: RunRecord,
        resumed: dict[str, object],
        *,
        thread: ThreadStart | None = None,
    ) -> Resumption | None:
        """How the run of `record` goes on here (`runs/resume.py` `resumption`): what a
        restart and a cluster worker's takeover hand to `resume`. None: it had ended.

        Raises:
            ThreadError: a run of a conversation it started from is gone.
        """
        return await resumption(self.journal, record, self.threads, resumed, thread=thread)

    def resume(self, going: Resumption) -> HostedRun:
        """Execute a run whose record already exists — queued elsewhere, left by a
        restart, or taken over — as `going` says: its record is the run's new state
        (`running`, this worker, its attempt); its events continue after
        `record.last_seq`, from where its journal stopped (RUN_RESUMED) or, with an
        empty plan, from its input."""
        record = going.record
        log = self.journal.own(record)
        run = journaled_run(
            self.journal,
            self.orchestrator,
            record,
            after_seq=log.committed,
            plan=going.plan,
            resumed=going.resumed,
            recording=going.recording,
            thread=going.thread,
        )
        return self.launch(run)

    async def begin_fork(self, record: RunRecord, resumed: dict[str, object]) -> Run:
        """A fork whose record exists but that has not gone on yet (queued, or its
        executor stopped while it copied): its log is owned here from now, its history
        completed, and its run returned to `launch`.

        Raises:
            UnknownRun, ForkError: the original is gone, or changed so that the fork
                can no longer be made (trimmed).
        """
        self.journal.own(record)
        run, _ = await start_fork(
            self.journal,
            self.orchestrator,
            record,
            new=False,
            threads=self.threads,
            resumed=resumed,
        )
        return run

    def launch(self, run: Run) -> HostedRun:
        """Execute `run` here (in the host's nursery) until it ends."""
        done = self._done[run.run_id] = trio.Event()
        self.active[run.run_id] = run
        if self.stalls is not None:
            self.stalls.watch(run)
        self._nursery.start_soon(self._execute, run)
        return HostedRun(run, done)

    async def _execute(self, run: Run) -> None:
        try:
            result = await run.execute()
            if not run.sink.streaming:  # a blocking call: no events, its record ends here
                self.journal.end_call_run(run.run_id, result.status)
        finally:
            self.active.pop(run.run_id, None)
            self._done.pop(run.run_id).set()

    # -- steering ------------------------------------------------------------------

    async def cancel(
        self, run_id: str, agent_key: str | None = None, reason: str | None = None
    ) -> None:
        """Cancel a running run (a finished one is left as it is), or one agent instance
        and its subtree (`Run.cancel_agent`).

        Raises:
            UnknownRun: no such run.
            AgentNotRunning: `agent_key` names no instance to cancel (or the run ended).
        """
        self.journal.get(run_id)
        run = self.active.get(run_id)
        if agent_key is None:
            if run is not None:
                run.cancel(reason=reason)
            return
        if run is None:
            raise AgentNotRunning(f"run {run_id!r} is not running")
        remote = run.remote_link(agent_key)
        if remote is not None and remote.child_key != agent_key:  # below a remote child
            try:
                await remote.cancel_below(agent_key, reason)
            except RemoteRefused as exc:
                raise AgentNotRunning(str(exc)) from None
            return
        try:
            run.cancel_agent(agent_key, reason=reason)
        except AgentGone as exc:
            raise AgentNotRunning(exc.message) from None

    async def send(
        self,
        run_id: str,
        agent_key: str | None,
        message: str,
        attachments: tuple[Attachment, ...] = (),
        control: str | None = None,
    ) -> None:
        """Deliver a person's message to a running agent of a run (default: its root).
        `control`: the cluster control request that brought it — journaled with its
        USER_MESSAGE, it is delivered once even when a new owner reads it again; an
        agent of the journal that has not started again yet gets it as it goes on.

        Raises:
            UnknownRun: no such run.
            AgentNotRunning: the run or that agent is not running.
        """
        self.journal.get(run_id)
        run = self.active.get(run_id)
        if run is None:
            raise AgentNotRunning(f"run {run_id!r} is not running")
        if control is not None and run.context.continuation.delivered(control):
            return
        if attachments:  # (stored once, whoever stored them first)
            await self.journal.storage.put_blobs(run_id, {a.id: a.data for a in attachments})
            run.context.attachments.update((a.id, a) for a in attachments)
        await _deliver(run, agent_key, message, attachments, control)

    @property
    def approvals(self) -> ApprovalDesk:
        """Where the calls of the runs here wait (subscribe to hear of each change)."""
        return self.orchestrator.catalog.desk

    async def approve(self, run_id: str, answer: Answer, *, checked: bool = False) -> None:
        """Answer a waiting tool call of a run here (the desk decides; a call of a
        remote subtree is handed to the server it waits on). `checked`: a cluster
        gateway checked it against the call already (`cluster/gateway.py`).

        Raises:
            UnknownRun: no such run.
            ApprovalError: no such waiting call, already answered, or bad `args`.
        """
        self.journal.get(run_id)
        if run_id not in self.active:
            raise ApprovalError("not_found", f"run {run_id!r} is not running")
        waiting = self.approvals.answer(run_id, answer, checked=checked)
        await waiting.hand_over()

    async def pending(
        self, run_id: str | None, *, owner: str | None, limit: int
    ) -> tuple[list[ApprovalInfo], bool]:
        """The waiting calls of the runs here (see `RunService.pending`)."""
        found: list[ApprovalInfo] = []
        for waiting in self.approvals.pending(run_id):
            run = self.active.get(waiting.run_id)
            if run is None:
                continue
            record = self.journal.get(waiting.run_id).record
            if owner is not None and record.owner != owner:
                continue
            if len(found) == limit:
                return found, True
            found.append(
                waiting.info(
                    agent_id=run.agent_id, root_path=record.root_session_id, owner=record.owner
                )
            )
        return found, False

    async def page(
        self, *, limit: int, before: str | None, owner: str | None
    ) -> tuple[list[RunRecord], bool]:
        """A page of this journal's runs, newest first (see `Journal.page`)."""
        return self.journal.page(limit=limit, before=before, owner=owner)

    # -- ending from outside -------------------------------------------------------

    def fail_unstorable(self, run_ids: list[str], reason: str) -> None:
        """The journal could not store these runs' events for too long: fail them."""
        for run_id in run_ids:
            run = self.active.get(run_id)
            if run is not None:
                logger.error("failing run %s: its events cannot be stored (%s)", run_id, reason)
                run.fail(f"storage_unavailable: events could not be stored ({reason})")

    def _taken_over(self, run_ids: list[str]) -> None:
        """Another server took this server's journal over (storage/owner.py): what these
        runs publish is no longer written; stop them (they act on nothing meanwhile)."""
        for run_id in run_ids:
            run = self.active.get(run_id)
            if run is not None:
                logger.error("stopping run %s: its journal is another server's now", run_id)
                run.cancel()

    async def interrupt_all(self) -> None:
        """Shutdown: end every run `interrupted` and wait for them."""
        for run in list(self.active.values()):
            run.interrupt()
        for done in list(self._done.values()):
            await done.wait()

    async def suspend_all(self) -> None:
        """Shutdown, to resume at the next start: stop every run without journaling its
        end (`Run.suspend`)."""
        for run in list(self.active.values()):
            run.suspend()
        for done in list(self._done.values()):
            await done.wait()

    # -- after a restart -----------------------------------------------------------

    async def resume_left(self, run_ids: list[str]) -> int:
        """Continue the runs a previous server left running (`runs/restart.py`); the
        number resumed."""
        return await resume_left(self, run_ids)

    async def requeue(self, records: list[RunRecord]) -> None:
        """Start the runs a previous server had queued in their threads, each in its
        turn (`runs/restart.py`)."""
        self._thread_inputs.requeue(await startable(self, records))


async def _deliver(
    run: Run,
    agent_key: str | None,
    message: str,
    attachments: tuple[Attachment, ...],
    control: str | None,
) -> None:
    """`RunHost.send` for a run here: held for an agent of the journal not started
    again yet, sent on to a remote subtree's, queued for a running one, or run again by
    an idle child."""
    if run.hold(agent_key, message, control, attachments):
        return
    agent = run.agent(agent_key)
    who = "the root agent" if agent_key is None else f"agent {agent_key!r}"
    remote = run.remote_link(agent_key)
    if remote is not None and agent_key is not None:  # an agent of a remote subtree
        if attachments:
            raise AgentNotRunning(f"{who} runs on another server: it takes no attachments")
        try:
            await remote.send(agent_key, message)
        except RemoteRefused as exc:
            raise AgentNotRunning(str(exc)) from None
        return
    if agent is None:
        raise AgentNotRunning(f"{who} is not part of run {run.run_id!r}")
    if agent.cancelled is not None:
        raise AgentNotRunning(
            f"{who} of run {run.run_id!r} was {agent.cancelled.describe()}: it takes no messages"
        )
    if agent.deliver(message, "client", control, attachments):
        return
    root = run.root
    if agent is root or root is None or not root.running:
        raise AgentNotRunning(f"{who} of run {run.run_id!r} is not running")
    # An idle child runs again on the message; the run waits for it.
    root.background.start(
        f"send {agent_key}",
        functools.partial(
            send_to, agent, message, "client", control=control, attachments=attachments
        ),
        report=False,
    )
