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
import logging
from dataclasses import dataclass
from typing import Any, Literal

import msgspec
import trio

from orchestrator.cluster.store import ClusterStore, QueueEntry
from orchestrator.config import ClusterConfig
from orchestrator.runs.host import HostedRun, RunHost
from orchestrator.runs.resume import end_unresumable, plan_resume
from orchestrator.runs.service import AgentNotRunning
from orchestrator.runtime.approvals import ApprovalError, PendingApproval
from orchestrator.storage.base import RunRecord
from orchestrator.storage.journal import Journal

__all__ = ["Worker"]

logger = logging.getLogger(__name__)
_RETRY = 1.0
"""Seconds to wait after a Redis error before a loop tries again."""


@dataclass(slots=True)
class _Owned:
    token: str
    entry_id: str
    control_cursor: str = "0-0"
    started: bool = False
    """The run executes here now: its control requests can be applied (not before,
    or a cancel read during the takeover would find nothing to cancel and be lost)."""


class _Answer(msgspec.Struct, frozen=True):
    """An `approve` as a gateway forwards it."""

    toolCallId: str
    decision: Literal["approve", "deny"]
    by: str
    reason: str | None = None
    args: dict[str, Any] | None = None


class Worker:
    """Executes the cluster's runs on this instance (`run()` until cancelled)."""

    def __init__(
        self, config: ClusterConfig, store: ClusterStore, host: RunHost, name: str
    ) -> None:
        self.config = config
        self.store = store
        self.host = host
        self.journal: Journal = host.journal
        self.name = name
        self.owned: dict[str, _Owned] = {}
        self.lease_renewals = 0
        self.leases_lost = 0
        self.takeovers = 0
        self._changed = trio.lowlevel.ParkingLot()
        """Unparked when a run is taken or let go (slots, control streams)."""
        self._nursery: trio.Nursery | None = None
        self._approvals: list[tuple[str, str, bytes | None]] = []
        """Changes to the cluster's list of waiting calls, not yet written."""
        self._approvals_lot = trio.lowlevel.ParkingLot()
        host.orchestrator.catalog.desk.on_change = self._approval_changed

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Work until cancelled."""
        journal = self.journal
        journal.writer.fenced_write = self._write
        journal.writer.on_fenced = self._lost
        await self.store.ensure_group()
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            nursery.start_soon(self._take_loop)
            nursery.start_soon(self._renew_loop)
            nursery.start_soon(self._control_loop)
            nursery.start_soon(self._claim_loop)
            nursery.start_soon(self._heartbeat_loop)
            nursery.start_soon(self._approvals_loop)
            task_status.started()

    # -- taking runs -------------------------------------------------------------

    @property
    def free(self) -> int:
        """Runs this worker may still take."""
        return self.config.max_runs - len(self.owned)

    async def _take_loop(self) -> None:
        while True:
            if self.free <= 0:
                await self._changed.park()
                continue
            try:
                entries = await self.store.take(self.name, self.free, block=1.0)
                for entry in entries:
                    await self._begin(entry)
            except Exception as exc:  # Redis trouble: the runs we hold are the renewer's care
                logger.warning("worker %s: taking runs failed: %s", self.name, exc)
                await trio.sleep(_RETRY)

    async def _claim_loop(self) -> None:
        """Take over the requests of workers that stopped renewing their leases."""
        lease = self.config.lease_seconds
        while True:
            await trio.sleep(lease / 2)
            if self.free <= 0:
                continue
            try:
                for entry in await self.store.claim_stale(self.name, lease, self.free):
                    await self._begin(entry)
            except Exception as exc:
                logger.warning("worker %s: claiming stale runs failed: %s", self.name, exc)

    async def _begin(self, entry: QueueEntry) -> None:
        store, run_id = self.store, entry.run_id
        record = await store.record(run_id)
        if record is None or record.status not in ("queued", "running"):
            await store.ack(entry.entry_id)  # deleted, or already over
            return
        token = await store.acquire(run_id, self.name, self.config.lease_seconds)
        if token is None:  # its lease is alive: the owner is fine, the entry stays its
            return
        # The queue's delivery count also counts workers that died before writing.
        attempt = max(record.attempt + 1, entry.deliveries)
        owned = self.owned[run_id] = _Owned(token, entry.entry_id)
        self._changed.unpark_all()
        if attempt > self.config.max_attempts:
            await self._fail_lost(record, token, attempt)
            return
        plan = None
        if attempt > 1:  # a takeover: continue from the journal
            self.takeovers += 1
            owned.control_cursor = await store.control_done(run_id)
            plan = await plan_resume(self.journal, record)
        record = msgspec.structs.replace(
            record, status="running", worker=self.name, attempt=attempt
        )
        if plan is not None and plan.finished:
            # It ended just before its worker died (its record was written with the
            # RUN_FINISHED): only the queue entry and the lease are left to drop.
            with contextlib.suppress(Exception):
                await store.release(run_id, token, entry.entry_id)
            self.owned.pop(run_id, None)
            self._changed.unpark_all()
            return
        resumed = {"attempt": attempt, "worker": self.name, "afterSeq": record.last_seq}
        if plan is not None:
            logger.warning(
                "worker %s takes over run %s (attempt %d, after seq %d)",
                self.name,
                run_id,
                attempt,
                record.last_seq,
            )
        run = self.host.resume(record, plan=plan, resumed=resumed)
        owned.started = True
        self._changed.unpark_all()
        assert self._nursery is not None
        self._nursery.start_soon(self._finish, run_id, run)

    async def _finish(self, run_id: str, run: HostedRun) -> None:
        try:
            await run.wait()
            await self._release(run_id)
        finally:
            self.owned.pop(run_id, None)
            self._changed.unpark_all()

    async def _release(self, run_id: str) -> None:
        """The run's terminal event is journaled (flush): drop its lease and request."""
        await self.journal.flush_run(run_id)
        owned = self.owned.get(run_id)
        log = self.journal.get(run_id)
        if owned is None or log.fenced:
            return
        with trio.move_on_after(self.config.lease_seconds):
            while True:
                try:
                    await self.store.release(run_id, owned.token, owned.entry_id)
                    return
                except Exception as exc:
                    logger.warning("worker %s: releasing run %s: %s", self.name, run_id, exc)
                    await trio.sleep(_RETRY)

    async def _fail_lost(self, record: RunRecord, token: str, attempt: int) -> None:
        """End a run whose workers kept dying: AGENT_ERRORs, then RUN_FINISHED `failed`."""
        run_id = record.run_id
        message = (
            f"worker_lost: the run's worker stopped {attempt - 1} time(s) "
            f"(cluster.max_attempts is {self.config.max_attempts})"
        )
        await end_unresumable(
            self.journal,
            msgspec.structs.replace(record, status="running", worker=self.name, attempt=attempt),
            error_type="worker_lost",
            message=message,
        )
        await self._release(run_id)
        self.owned.pop(run_id, None)
        self._changed.unpark_all()
        logger.warning("run %s failed: %s (token %s)", run_id, message, token)

    # -- leases ------------------------------------------------------------------

    async def _write(
        self, records: list[RunRecord], rows: list[tuple[str, int, bytes]]
    ) -> set[str]:
        """The journal's writes, each run's behind its lease."""
        tokens = {run_id: owned.token for run_id, owned in self.owned.items()}
        return await self.store.append(records, rows, tokens)

    def _lost(self, run_ids: list[str]) -> None:
        """These runs are someone else's now: stop our copies, never write for them again."""
        for run_id in run_ids:
            owned = self.owned.pop(run_id, None)
            if owned is None:
                continue
            self.leases_lost += 1
            logger.warning(
                "worker %s lost the lease of run %s: stopping its copy", self.name, run_id
            )
            try:
                log = self.journal.get(run_id)
            except LookupError:
                continue
            log.fenced = log.remote = True
            log.pending.clear()
            run = self.host.active.get(run_id)
            if run is not None:
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
                with contextlib.suppress(Exception):  # best effort: a takeover re-reads it
                    await self.store.set_control_done(run_id, entry_id)
                if control.op == "cancel":
                    try:
                        await self.host.cancel(run_id, control.agent_key, control.message or None)
                    except (AgentNotRunning, LookupError) as exc:
                        logger.warning("run %s: cancel not applied: %s", run_id, exc)
                elif control.op == "approve":
                    assert self._nursery is not None  # (one of a remote subtree may take a
                    # round trip to its server: it does not hold up the other controls)
                    self._nursery.start_soon(self._apply_approval, run_id, control.message)
                elif control.op == "send":
                    try:
                        await self.host.send(run_id, control.agent_key, control.message)
                    except (AgentNotRunning, LookupError) as exc:
                        logger.warning("run %s: message not delivered: %s", run_id, exc)

    # -- approvals ---------------------------------------------------------------

    def _approval_changed(self, run_id: str, call_id: str, waiting: PendingApproval | None) -> None:
        """A call of a run here starts or stops waiting: queue the change for Redis (not
        for a run this worker lost: its new owner publishes it)."""
        if run_id not in self.owned:
            return
        info = None
        if waiting is not None:
            record = self.journal.get(run_id).record
            info = msgspec.json.encode(
                waiting.info(
                    agent_id=record.agent_id, root_path=record.root_session_id, owner=record.owner
                )
            )
        self._approvals.append((run_id, call_id, info))
        self._approvals_lot.unpark_all()

    async def _approvals_loop(self) -> None:
        while True:
            if not self._approvals:
                await self._approvals_lot.park()
                continue
            batch, self._approvals = self._approvals, []
            try:
                await self.store.publish_approvals(batch)
            except Exception as exc:
                logger.warning("worker %s: publishing waiting calls failed: %s", self.name, exc)
                self._approvals[:0] = batch
                await trio.sleep(_RETRY)

    async def _apply_approval(self, run_id: str, body: str) -> None:
        """An `approve` a gateway checked and claimed: give it to the waiting call (or
        to the server it waits on, for a call of a remote subtree)."""
        try:
            answer = msgspec.json.decode(body, type=_Answer)
            if run_id not in self.host.active:
                raise ApprovalError("not_found", "the run is not running here")
            await self.host.approve(
                run_id,
                answer.toolCallId,
                answer.decision,
                by=answer.by,
                reason=answer.reason,
                args=answer.args,
            )
        except (msgspec.DecodeError, LookupError) as exc:  # (ApprovalError, UnknownRun)
            logger.warning("run %s: approval not applied: %s", run_id, exc)

    async def _heartbeat_loop(self) -> None:
        while True:
            try:
                await self.store.heartbeat(
                    self.name, {"runs": len(self.owned), "maxRuns": self.config.max_runs}
                )
            except Exception as exc:
                logger.warning("worker %s: heartbeat failed: %s", self.name, exc)
            await trio.sleep(2.0)
