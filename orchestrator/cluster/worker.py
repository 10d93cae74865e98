"""A cluster worker: takes runs from the queue and executes them behind leases.

One task per concern, all in the worker's nursery: taking requests (`XREADGROUP`,
never more than `max_runs` at once), renewing the leases of the runs it executes
(every `lease_seconds / 3`, in one round trip), reading their control streams
(cancel, send, approve), publishing their waiting tool calls (the cluster's
`pending` list), and claiming the requests of workers that stopped renewing.

A worker that learns it lost a lease — a refused append, a refused renewal, or no
successful renewal for `lease_seconds` (Redis unreachable, the process paused) —
stops its copy of the run at once; whatever that copy still emits is dropped, so
the journal holds nothing from it after another worker took over.
"""

from __future__ import annotations

import contextlib
import functools
import logging
from collections.abc import Callable

import msgspec
import trio

from orchestrator.cluster.control import apply_control
from orchestrator.cluster.leases import Leases, Owned
from orchestrator.cluster.store import ClusterStore, QueueEntry, attempt_of
from orchestrator.cluster.threads import thread_start
from orchestrator.cluster.waiting import WaitingList
from orchestrator.config import ClusterConfig
from orchestrator.core.fork import ForkError
from orchestrator.runs.fork import started
from orchestrator.runs.host import HostedRun, RunHost
from orchestrator.runs.resume import end_unresumable
from orchestrator.storage.base import RunRecord
from orchestrator.storage.journal import Journal
from orchestrator.storage.runlog import UNFINISHED, UnknownRun

__all__ = ["Worker"]

logger = logging.getLogger(__name__)
_RETRY = 1.0
"""Seconds to wait after a Redis error before a loop tries again."""


def _stream_id(entry_id: str) -> tuple[int, int]:
    """A Redis stream id `ms-seq`, comparable."""
    ms, _, seq = entry_id.partition("-")
    return int(ms), int(seq or 0)


class Worker:
    """Executes the cluster's runs on this instance (`run()` until cancelled)."""

    def __init__(
        self, config: ClusterConfig, store: ClusterStore, host: RunHost, name: str, leases: Leases
    ) -> None:
        self.config = config
        self.store = store
        self.host = host
        self.journal: Journal = host.journal
        self.name = name
        self.owned = leases.owned
        """The runs it holds the lease of: the journal writes each behind its token
        (the fence it was given when it opened, `cluster/leases.py`)."""
        self.lease_renewals = 0
        self.leases_lost = 0
        self.takeovers = 0
        self.takeover_failures = 0
        """Runs this worker took the lease of and could not execute (it let them go)."""
        self.stopping = False
        """Handing its runs over (`hand_over`): it takes no more."""
        self._changed = trio.lowlevel.ParkingLot()
        """Unparked when a run is taken or let go (slots, control streams)."""
        self._nursery: trio.Nursery | None = None
        self._waiting = WaitingList(store, self.journal, self._publishes, name)

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Work until cancelled."""
        journal = self.journal
        await self.store.ensure_group()
        unsubscribe = (
            journal.writer.fenced.subscribe(self._lost),
            self.host.approvals.subscribe(self._waiting.changed),
        )
        try:
            await self._work(task_status)
        finally:
            for stop in unsubscribe:
                stop()

    async def _work(self, task_status: trio.TaskStatus[None]) -> None:
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            nursery.start_soon(self._take_loop)
            nursery.start_soon(self._renew_loop)
            nursery.start_soon(self._control_loop)
            nursery.start_soon(self._claim_loop)
            nursery.start_soon(_heartbeats, self)
            nursery.start_soon(self._waiting.run)
            task_status.started()

    # -- taking runs -------------------------------------------------------------

    @property
    def free(self) -> int:
        """Runs this worker may still take."""
        return self.config.max_runs - len(self.owned)

    async def _take_loop(self) -> None:
        while True:
            if self.free <= 0 or self.stopping:
                await self._changed.park()
                continue
            try:
                entries = await self.store.take(self.name, self.free, block=1.0)
            except Exception as exc:  # Redis trouble: the runs we hold are the renewer's care
                logger.warning("worker %s: taking runs failed: %s", self.name, exc)
                await trio.sleep(_RETRY)
                continue
            await self._begin_each(entries)

    async def _claim_loop(self) -> None:
        """Take over the requests of workers that stopped renewing their leases."""
        lease = self.config.lease_seconds
        while True:
            await trio.sleep(lease / 2)
            if self.free <= 0 or self.stopping:
                continue
            try:
                entries = await self.store.claim_stale(self.name, lease, self.free)
            except Exception as exc:
                logger.warning("worker %s: claiming stale runs failed: %s", self.name, exc)
                continue
            await self._begin_each(entries)

    async def _begin_each(self, entries: list[QueueEntry]) -> None:
        """Begin each run; one that cannot be begun does not hold up the others (its
        request stays pending: it is claimed again once idle for `lease_seconds`)."""
        for entry in entries:
            try:
                await self._begin(entry)
            except Exception as exc:
                logger.warning("worker %s: taking run %s failed: %s", self.name, entry.run_id, exc)

    async def _begin(self, entry: QueueEntry) -> None:
        """Take the run's lease, and start the one task that executes the run behind it.

        The lease is renewed exactly as long as that task lives (`self.owned` holds the
        run from here until its end), so no lease outlives the run's execution here.
        """
        store, run_id = self.store, entry.run_id
        if run_id in self.owned or run_id in self.host.active:
            return  # ours already, or our fenced copy is still stopping: not twice here
        record = await store.record(run_id)
        if record is None or record.status not in UNFINISHED:
            await store.ack(entry.entry_id)  # deleted, or already over
            return
        token = await store.acquire(run_id, self.name, self.config.lease_seconds)
        if token is None:  # its lease is alive: the owner is fine, the entry stays its
            return
        owned = self.owned[run_id] = Owned(token, entry.entry_id)
        self._changed.unpark_all()
        assert self._nursery is not None
        self._nursery.start_soon(self._execute, run_id, owned)

    async def _execute(self, run_id: str, owned: Owned) -> None:
        """Execute the run under `owned`'s lease until it ends here, then let go of it.

        Whatever way this ends — the run finished, it was fenced off, taking it over
        failed — the run leaves `self.owned`, so its lease is no longer renewed.
        """
        try:
            run = await self._start(run_id, owned)
            if run is not None:
                await run.wait()
                await self._let_go(run_id, owned)
        except Exception as exc:
            await self._give_up(run_id, owned, exc)
        finally:
            if self.owned.get(run_id) is owned:
                del self.owned[run_id]
            elif run_id not in self.owned:  # fenced off: our copy has stopped, the log
                self.journal.mirror(run_id)  # follows the new owner (unless it is us again)
            self._changed.unpark_all()

    async def _start(self, run_id: str, owned: Owned) -> HostedRun | None:
        """Start executing the run whose lease `owned` holds, from its journal as it is
        now (None: nothing to execute; its request was let go or it was ended here)."""
        store = self.store
        # Read under the lease: nobody can append to the run any more, so its record and
        # events in Redis are final until we write (never a copy loaded earlier).
        record = await store.record(run_id)
        if record is None or record.status not in UNFINISHED:
            await store.release(run_id, owned.token, owned.entry_id)
            return None
        attempt = attempt_of(owned.token)
        owned.replay_until = _stream_id(await store.control_done(run_id))
        record = msgspec.structs.replace(
            record, status="running", worker=self.name, attempt=attempt
        )
        handed = await store.handovers(run_id)
        if attempt - handed > self.config.max_attempts:
            await self._fail_lost(record, owned, attempt - 1 - handed)
            return None
        if self.stopping:  # this worker stops: the next one takes it
            await self._hand_over(run_id, owned)
            return None
        if not started(record):  # a fork that has not gone on yet
            return await self._start_fork(record, owned)
        self.journal.own(record)
        resumed = {"attempt": attempt, "worker": self.name, "afterSeq": record.last_seq}
        # (a thread's run that has not started: after the run before it, from its
        # conversation; a thread's conversation gone meanwhile: ThreadError, given up as
        # any failure)
        thread = None
        if record.last_seq == 0:
            thread = await thread_start(store, self.host.threads, record)
        going = await self.host.resumption(record, resumed, thread=thread)
        if going is None:  # (its record is written with RUN_FINISHED: not expected)
            await self._release(run_id, owned)
            return None
        if not going.plan.fresh:  # it ran elsewhere: it goes on from its journal
            self.takeovers += 1
            logger.warning(
                "worker %s takes over run %s (attempt %d, after seq %d)",
                self.name,
                run_id,
                attempt,
                record.last_seq,
            )
        elif attempt > 1:  # its workers wrote nothing: it starts, with its input
            logger.warning(
                "worker %s starts run %s afresh (attempt %d): its earlier worker wrote nothing",
                self.name,
                run_id,
                attempt,
            )
        return await self._go(run_id, owned, functools.partial(self.host.resume, going))

    async def _start_fork(self, record: RunRecord, owned: Owned) -> HostedRun | None:
        """Start a queued fork (or complete the copy of one whose worker stopped while
        it copied), then execute it here. A fork that can no longer be made (its
        original was trimmed or deleted since it was queued) ends `failed`."""
        try:
            run = await self.host.begin_fork(
                record, {"attempt": record.attempt, "worker": self.name}
            )
        except (UnknownRun, ForkError) as exc:
            await self._end(record, owned, "fork_failed", f"fork_failed: {exc}")
            return None
        return await self._go(record.run_id, owned, functools.partial(self.host.launch, run))

    async def _go(
        self, run_id: str, owned: Owned, launch: Callable[[], HostedRun]
    ) -> HostedRun | None:
        """Launch the run now that it is ready, unless it was fenced off meanwhile or
        this worker stops (then the next one takes it)."""
        if self.owned.get(run_id) is not owned:  # fenced off meanwhile: not ours to run
            return None
        if self.stopping:
            await self._hand_over(run_id, owned)
            return None
        run = launch()
        owned.started = True
        self._changed.unpark_all()
        return run

    async def _give_up(self, run_id: str, owned: Owned, exc: Exception) -> None:
        """Executing the run here failed: let its lease go at once (its request stays
        pending), so another worker tries; after `max_attempts` tries it ends failed."""
        self.takeover_failures += 1
        reason = f"{type(exc).__name__}: {exc}"
        logger.warning(
            "worker %s: executing run %s failed (attempt %d), letting it go: %s",
            self.name,
            run_id,
            attempt_of(owned.token),
            reason,
            exc_info=exc,
        )
        if self.owned.get(run_id) in (owned, None):  # (not a newer copy's log)
            self.journal.mirror(run_id)
        with contextlib.suppress(Exception):
            await self.store.note_failure(run_id, reason)
        with contextlib.suppress(Exception):  # else it expires after lease_seconds
            await self.store.drop(run_id, owned.token)

    async def _let_go(self, run_id: str, owned: Owned) -> None:
        """The run stopped here: once what it published is journaled (flush), release
        it if it ended (its lease and request go), or hand it over if this worker is
        stopping and suspended it (its request stays, for another worker at once)."""
        await self.journal.flush_run(run_id)
        log = self.journal.get(run_id)
        if self.owned.get(run_id) is not owned or log.fenced:
            return
        if log.finished_status is None:  # suspended by `hand_over`: not ended
            with contextlib.suppress(Exception):  # else it expires after lease_seconds
                await self._hand_over(run_id, owned)
            return
        await self._release(run_id, owned)

    async def _hand_over(self, run_id: str, owned: Owned) -> None:
        lease = self.config.lease_seconds
        await self.store.hand_over(run_id, owned.token, owned.entry_id, self.name, lease)

    async def _release(self, run_id: str, owned: Owned) -> None:
        """The run's terminal event is journaled (flush): drop its lease and request."""
        await self.journal.flush_run(run_id)
        if self.owned.get(run_id) is not owned or self.journal.get(run_id).fenced:
            return
        with trio.move_on_after(self.config.lease_seconds):
            while True:
                try:
                    await self.store.release(run_id, owned.token, owned.entry_id)
                    return
                except Exception as exc:
                    logger.warning("worker %s: releasing run %s: %s", self.name, run_id, exc)
                    await trio.sleep(_RETRY)

    async def hand_over(self) -> None:
        """Stop gracefully (SIGTERM, a deploy): take no more runs, stop each run here
        without journaling its end (as a restart does), and hand it over — its lease
        let go, its request left pending — so another worker continues it mid-tree
        right away instead of after `lease_seconds`. A hand-over does not count
        against the run's `max_attempts`."""
        self.stopping = True
        await self.host.suspend_all()
        while self.owned:  # each run's task hands it over, then leaves `owned`
            await self._changed.park()

    async def _fail_lost(self, record: RunRecord, owned: Owned, lost: int) -> None:
        """End a run whose workers kept stopping: AGENT_ERRORs, then RUN_FINISHED `failed`."""
        run_id = record.run_id
        failure = await self.store.failure(run_id)
        message = (
            f"worker_lost: {lost} worker(s) took the run and stopped before "
            f"it ended (cluster.max_attempts is {self.config.max_attempts})"
        )
        if failure is not None:
            message += f"; the last takeover failed: {failure}"
        await self._end(record, owned, "worker_lost", message)

    async def _end(self, record: RunRecord, owned: Owned, error_type: str, message: str) -> None:
        """End a run that cannot go on: AGENT_ERRORs, then RUN_FINISHED `failed`."""
        await end_unresumable(self.journal, record, error_type=error_type, message=message)
        await self.store.forget_approvals(record.run_id)
        await self._release(record.run_id, owned)
        logger.warning("run %s failed: %s (token %s)", record.run_id, message, owned.token)

    # -- leases ------------------------------------------------------------------

    def _lost(self, run_ids: list[str]) -> None:
        """These runs are someone else's now: stop our copies, never write for them again."""
        for run_id in run_ids:
            if self.owned.pop(run_id, None) is not None:
                self.leases_lost += 1
                logger.warning(
                    "worker %s lost the lease of run %s: stopping its copy", self.name, run_id
                )
            log = self.journal.logs.get(run_id)
            run = self.host.active.get(run_id)
            if log is None or run is None:
                continue  # no copy runs here (what it wrote last was refused, or dropped)
            log.fence()  # what the copy still emits is dropped
            run.cancel()
        self._changed.unpark_all()

    async def _renew_loop(self) -> None:
        lease = self.config.lease_seconds
        last_ok = trio.current_time()
        while True:
            await trio.sleep(lease / 3)
            leases = {run_id: owned.token for run_id, owned in self.owned.items()}
            try:
                lost = await self.store.renew(leases, lease)
            except Exception as exc:
                silent = trio.current_time() - last_ok
                logger.warning(
                    "worker %s: lease renewal failed (%.1f s): %s", self.name, silent, exc
                )
                if silent < lease:
                    continue
                lost = set(leases)  # cannot renew for a whole lease: stop our runs ourselves
            else:
                last_ok = trio.current_time()
                self.lease_renewals += len(leases) - len(lost)
            # (a run that ended meanwhile, or was taken again with a new token, is not lost)
            lost = {r for r in lost if (o := self.owned.get(r)) and o.token == leases[r]}
            if lost:
                self._lost(sorted(lost))

    # -- control -----------------------------------------------------------------

    async def _control_loop(self) -> None:
        while True:
            cursors = {
                run_id: owned.control_cursor
                for run_id, owned in self.owned.items()
                if owned.started
            }
            if not cursors:
                await self._changed.park()
                continue
            try:
                requests = await self.store.read_control(cursors, block=0.1)
            except Exception as exc:
                logger.warning("worker %s: reading control streams failed: %s", self.name, exc)
                await trio.sleep(_RETRY)
                continue
            for run_id, entry_id, control in requests:
                owned = self.owned.get(run_id)
                if owned is None:
                    continue
                owned.control_cursor = entry_id
                again = _stream_id(entry_id) <= owned.replay_until
                if not again:
                    with contextlib.suppress(Exception):  # best effort: a takeover re-reads it
                        await self.store.set_control_done(run_id, entry_id)
                assert self._nursery is not None
                if control is not None:
                    await apply_control(
                        self.host, self._nursery, run_id, entry_id, control, again=again
                    )

    # -- approvals ---------------------------------------------------------------

    def _publishes(self, run_id: str, starts: bool) -> bool:
        """A waiting call of `run_id` changed: this worker publishes it (not for a run
        it lost: its new owner does; nor that the calls of the runs it hands over stop
        waiting: they stay listed, and wait again on the next worker)."""
        return run_id in self.owned and (starts or not self.stopping)


async def _heartbeats(worker: Worker) -> None:
    """Say every 2 s that `worker` is alive, how many runs it has and how many of their
    agents are stalled (a gateway's /metrics sums those: `Node.cluster_stalled`)."""
    while True:
        try:
            stalls = worker.host.stalls
            await worker.store.heartbeat(
                worker.name,
                {
                    "runs": len(worker.owned),
                    "maxRuns": worker.config.max_runs,
                    "stalled": stalls.stalled if stalls is not None else 0,
                },
            )
        except Exception as exc:
            logger.warning("worker %s: heartbeat failed: %s", worker.name, exc)
        await trio.sleep(2.0)
