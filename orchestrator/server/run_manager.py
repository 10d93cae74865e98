"""Runs executed by the server: each publishes into the journal, never to a client."""

from __future__ import annotations

import functools
import logging
import time
from typing import TYPE_CHECKING

import trio

from orchestrator.core.bus import RunSink, new_run_id, new_session_id
from orchestrator.core.rebuild import ResumePlan
from orchestrator.runtime.engine import Orchestrator, UnknownAgent
from orchestrator.runtime.run import Run, RunResult
from orchestrator.runtime.spawn import send_to
from orchestrator.storage.base import RunRecord
from orchestrator.storage.journal import Journal

if TYPE_CHECKING:
    from orchestrator.server.auth import Principal

__all__ = ["AgentNotRunning", "LimitExceeded", "RunManager", "StorageUnavailable"]

logger = logging.getLogger(__name__)


class LimitExceeded(Exception):
    """Too many concurrent runs (on the server, or for one token)."""


class StorageUnavailable(Exception):
    """The journal cannot write: new runs are refused until it recovers."""


class AgentNotRunning(LookupError):
    """A message was sent to an agent that is not running."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class RunManager:
    """Starts, tracks, cancels and interrupts the server's runs."""

    def __init__(self, orchestrator: Orchestrator, journal: Journal, nursery: trio.Nursery) -> None:
        self.orchestrator = orchestrator
        self.journal = journal
        self._nursery = nursery
        self.active: dict[str, Run] = {}
        self._done: dict[str, trio.Event] = {}
        self.max_concurrent = orchestrator.config.limits.max_concurrent_runs
        journal.on_stalled = self.fail_unstorable

    def start(
        self,
        agent_id: str,
        input: str,
        *,
        stream: bool = True,
        principal: Principal | None = None,
    ) -> Run:
        """Start a run (streaming: journaled events; else a blocking call with none).

        Raises:
            UnknownAgent: no such subagent.
            LimitExceeded: `limits.max_concurrent_runs` runs are running, or the
                principal's own limit of runs.
            StorageUnavailable: journal writes are failing (read-only).
        """
        orch = self.orchestrator
        if agent_id not in orch.specs:
            raise UnknownAgent(agent_id, sorted(orch.specs))
        if not self.journal.healthy:
            raise StorageUnavailable(
                "storage is failing: the server is read-only until it recovers (see /healthz)"
            )
        if len(self.active) >= self.max_concurrent:
            raise LimitExceeded(
                f"{len(self.active)} runs are running (limits.max_concurrent_runs "
                f"is {self.max_concurrent})"
            )
        owner = principal.name if principal is not None else None
        if principal is not None and principal.name is not None:
            mine = sum(1 for r in self.active if self.journal.get(r).record.owner == owner)
            if mine >= principal.max_runs:
                raise LimitExceeded(
                    f"token {owner!r} already has {mine} runs running (its limit is "
                    f"{principal.max_runs})"
                )
        run_id, root_session = new_run_id(), new_session_id(root=True)
        self.journal.create_run(
            RunRecord(
                run_id=run_id,
                agent_id=agent_id,
                input=input,
                status="running",
                created_at=time.time(),
                root_session_id=root_session,
                owner=owner,
            )
        )
        sink = RunSink(run_id, root_session, self.journal.outlet(run_id)) if stream else None
        run = Run(
            orch.catalog, agent_id, input, limits=orch.default_limits(), sink=sink, run_id=run_id
        )
        self.active[run_id] = run
        self._done[run_id] = trio.Event()
        self._nursery.start_soon(self._execute, run)
        return run

    def execute_record(
        self,
        record: RunRecord,
        *,
        resume: ResumePlan | None = None,
        resumed: dict[str, object] | None = None,
    ) -> Run:
        """Cluster workers: execute a run submitted elsewhere (its record says all).

        The record is the run's new state (`running`, this worker, its attempt); its
        events continue after `record.last_seq`.
        """
        orch = self.orchestrator
        log = self.journal.own(record)
        sink = RunSink(
            record.run_id,
            record.root_session_id,
            self.journal.outlet(record.run_id),
            after_seq=log.committed,
        )
        run = Run(
            orch.catalog,
            record.agent_id,
            record.input,
            limits=orch.default_limits(),
            sink=sink,
            run_id=record.run_id,
            resume=resume,
            resumed=resumed,
        )
        self.active[record.run_id] = run
        self._done[record.run_id] = trio.Event()
        self._nursery.start_soon(self._execute, run)
        return run

    async def _execute(self, run: Run) -> None:
        try:
            result = await run.execute()
            if run.sink is None:
                self.journal.end_call_run(run.run_id, result.status)
        finally:
            self.active.pop(run.run_id, None)
            self._done.pop(run.run_id).set()

    async def wait(self, run: Run) -> RunResult:
        """Wait for a run started here to end."""
        done = self._done.get(run.run_id)
        if done is not None:
            await done.wait()
        assert run.result is not None
        return run.result

    def fail_unstorable(self, run_ids: list[str], reason: str) -> None:
        """The journal could not store these runs' events for too long: fail them."""
        for run_id in run_ids:
            run = self.active.get(run_id)
            if run is not None:
                logger.error("failing run %s: its events cannot be stored (%s)", run_id, reason)
                run.fail(f"storage_unavailable: events could not be stored ({reason})")

    def cancel(self, run_id: str) -> None:
        """Cancel a running run (a finished one is left as it is).

        Raises:
            UnknownRun: no such run.
        """
        self.journal.get(run_id)
        run = self.active.get(run_id)
        if run is not None:
            run.cancel()

    def send(self, run_id: str, agent_key: str | None, message: str) -> None:
        """Deliver a person's message to a running agent of a run (default: its root).

        Raises:
            UnknownRun: no such run.
            AgentNotRunning: the run or that agent is not running.
        """
        self.journal.get(run_id)
        run = self.active.get(run_id)
        if run is None:
            raise AgentNotRunning(f"run {run_id!r} is not running")
        agent = run.agent(agent_key)
        who = "the root agent" if agent_key is None else f"agent {agent_key!r}"
        if agent is None:
            raise AgentNotRunning(f"{who} is not part of run {run_id!r}")
        if agent.deliver(message, "client"):
            return
        root = run.root
        if agent is root or root is None or not root.running:
            raise AgentNotRunning(f"{who} of run {run_id!r} is not running")
        # An idle child runs again on the message; the run waits for it.
        root.start_background(
            f"send {agent_key}", functools.partial(send_to, agent, message, "client"), report=False
        )

    async def interrupt_all(self) -> None:
        """Server shutdown: end every run `interrupted` and wait for them."""
        for run in list(self.active.values()):
            run.interrupt()
        for done in list(self._done.values()):
            await done.wait()
