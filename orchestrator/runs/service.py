"""What a front end asks of runs, wherever they execute: the `RunService` protocol.

The WebSocket server holds one: a `RunHost` (runs execute in this process) or a
`ClusterGateway` (runs are queued for the cluster's workers). Both raise the
errors below, which the server turns into the protocol's error codes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from agents.core.attachments import Attachment
from agents.errors import OrchestratorError
from orchestrator.core.approvals import Answer, ApprovalInfo
from orchestrator.core.threads import ThreadAsk, ThreadError

if TYPE_CHECKING:
    from orchestrator.runs.threads import Threads
from orchestrator.runtime.run import RunResult
from orchestrator.storage.base import ForkPoint, RunOptions, RunRecord

__all__ = [
    "AgentNotRunning",
    "LimitExceeded",
    "RunService",
    "StartedRun",
    "StorageUnavailable",
    "ThreadError",
]


class LimitExceeded(OrchestratorError):
    """Too many concurrent runs (on the server, or for one token)."""

    code = "limit_exceeded"


class StorageUnavailable(OrchestratorError):
    """The journal cannot write: new runs are refused until it recovers."""

    code = "unavailable"


class AgentNotRunning(OrchestratorError, LookupError):
    """A message was sent to an agent that is not running."""

    code = "not_found"


class StartedRun(Protocol):
    """A run a client started: its id, and its result once it ends."""

    @property
    def run_id(self) -> str:
        """The run's id."""
        ...

    @property
    def thread_id(self) -> str | None:
        """Its thread's id (None: a blocking call, outside threads)."""
        ...

    async def wait(self) -> RunResult:
        """Wait for the run to end; how it ended."""
        ...


class RunService(Protocol):
    """Start, cancel, message and list runs."""

    @property
    def threads(self) -> Threads:
        """The threads of the runs this service knows (docs/threads.md)."""
        ...

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
        """Start a run of `agent_id` on `input` for `owner` (a token's name, or None).

        `stream=False` is a blocking call: no events, only a result. `max_runs`
        bounds the owner's concurrent runs where the service can count them.
        `context_id`: the client's conversation, kept in the run's record. `thread`:
        the thread it goes on (docs/threads.md; None: a new one); `agent_id` may be
        None there (the thread's, or the continued agent's). `options`: what the client
        asks of the run beyond its input (its root's `output_schema`, its attachments),
        kept in its record; `blobs`: its attachments' bytes by id, stored for it first.

        Raises:
            UnknownAgent: no such subagent.
            LimitExceeded: too many runs are running (or one of the thread, `reject`).
            StorageUnavailable: the run cannot be stored (or queued).
            ThreadError: the thread cannot go on as asked.
        """
        ...

    async def fork(
        self, point: ForkPoint, *, owner: str | None = None, max_runs: int | None = None
    ) -> StartedRun:
        """Start a new run from `point.run_id` as it stood at event `point.seq`, for
        `owner` (docs/fork.md); `point.message` goes to `point.agent_key` (None: the
        root agent).

        Raises:
            UnknownRun: no such run.
            ForkError: no such seq, a trimmed history, or a message its agent cannot
                take at that seq.
            UnknownAgent, LimitExceeded, StorageUnavailable: as `start` says.
        """
        ...

    async def cancel(
        self, run_id: str, agent_key: str | None = None, reason: str | None = None
    ) -> None:
        """Cancel a run (a finished one is left as it is), or with `agent_key` one agent
        instance and its subtree (the run goes on). `reason` is in the AGENT_ERRORs.

        Raises:
            UnknownRun: no such run.
            AgentNotRunning: (where known at once) no such agent instance to cancel.
        """
        ...

    async def send(
        self,
        run_id: str,
        agent_key: str | None,
        message: str,
        attachments: tuple[Attachment, ...] = (),
    ) -> None:
        """Deliver a person's message (with its `attachments`, stored for the run first)
        to an agent of a run (default: its root).

        Raises:
            UnknownRun: no such run.
            AgentNotRunning: the run or that agent is not running (where known at once).
        """
        ...

    async def approve(self, run_id: str, answer: Answer) -> None:
        """Answer a tool call of the run that waits for approval.

        Raises:
            UnknownRun: no such run.
            ApprovalError: no such waiting call, already answered, or bad `args`.
        """
        ...

    async def pending(
        self, run_id: str | None, *, owner: str | None, limit: int
    ) -> tuple[list[ApprovalInfo], bool]:
        """Up to `limit` waiting calls (oldest first) of `run_id`, or of every run;
        only runs of `owner` when given; and whether more wait."""
        ...

    async def page(
        self, *, limit: int, before: str | None, owner: str | None
    ) -> tuple[list[RunRecord], bool]:
        """Up to `limit` runs, newest first, older than `before`, of `owner` if given."""
        ...
