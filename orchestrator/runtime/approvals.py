"""Where tool calls wait for a person's decision, and where the decision is given.

One `ApprovalDesk` per `Orchestrator` holds every waiting call of every run (so the
server can list them across runs and bound how many wait at once). A run's agents
wait through `desk.gate(run_id, source)`; a person answers through
`desk.answer(run_id, tool_call_id, …)` (the `approve` op, `Run.approve`, the CLI).
The runner emits the events (APPROVAL_REQUESTED / APPROVAL_RESOLVED); the desk only
parks the waiting call and wakes it with the decision.

Cost: nothing on the forwarding path. A run with no `approval` configured never
touches the desk; a waiting call is one `PendingApproval` and one parked task.
"""

from __future__ import annotations

from typing import Any, Literal

import jsonschema
import trio

from agents.approval import ApprovalRequest, Decision
from orchestrator.core.events import Source

__all__ = ["NOBODY", "ApprovalDesk", "ApprovalError", "PendingApproval", "RunGate"]

_ANSWERED_KEPT = 100_000
"""Answered call ids remembered (so a second answer says `already answered`)."""


class ApprovalError(LookupError):
    """An answer that changes nothing: `code` is `not_found` or `invalid`."""

    def __init__(self, code: Literal["not_found", "invalid"], message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


class PendingApproval:
    """One tool call waiting for its decision."""

    __slots__ = ("decision", "request", "run_id", "source", "woken")

    def __init__(self, run_id: str, source: Source | None, request: ApprovalRequest) -> None:
        self.run_id = run_id
        self.source = source
        """The calling agent's source (None: the root agent)."""
        self.request = request
        self.decision: Decision | None = None
        self.woken = trio.Event()

    def to_json(self, root_path: str | None = None) -> dict[str, Any]:
        """The `pending` op's shape of it."""
        request, source = self.request, self.source
        return {
            "runId": self.run_id,
            "agentKey": source.agent_key if source is not None else None,
            "agentId": source.agent_id if source is not None else None,
            "path": source.path if source is not None else root_path,
            "depth": source.depth if source is not None else 0,
            "toolCallId": request.tool_call_id,
            "name": request.name,
            "args": request.args,
            "edit": request.edit,
            "requestedAt": request.requested_at,
            "timeoutAt": request.timeout_at,
        }


class ApprovalDesk:
    """Every waiting call of every run, by run and tool call id."""

    def __init__(self, max_pending: int = 10_000) -> None:
        self.max_pending = max_pending
        self._pending: dict[str, dict[str, PendingApproval]] = {}
        self._answered: dict[tuple[str, str], str] = {}
        self.count = 0
        """Calls waiting now, over every run."""

    def gate(self, run_id: str, source: Source | None) -> RunGate:
        """Where one agent instance of `run_id` waits (`agents.approval.ApprovalGate`)."""
        return RunGate(self, run_id, source)

    def pending(self, run_id: str | None = None) -> list[PendingApproval]:
        """The waiting calls of one run, or of every run; oldest first."""
        if run_id is not None:
            return list(self._pending.get(run_id, {}).values())
        found = [p for calls in self._pending.values() for p in calls.values()]
        found.sort(key=lambda p: p.request.requested_at)
        return found

    def waiting(self, run_id: str) -> int:
        """How many calls of `run_id` wait now."""
        return len(self._pending.get(run_id, ()))

    def answer(
        self,
        run_id: str,
        tool_call_id: str,
        decision: Literal["approve", "deny"],
        *,
        by: str,
        reason: str | None = None,
        args: dict[str, Any] | None = None,
    ) -> PendingApproval:
        """Give the decision on a waiting call (it runs, or gets an error result, now).

        Raises:
            ApprovalError: no such waiting call (`not_found`, also for one already
                answered — the message says so), or `args` that the call's agent may
                not edit or that are not valid arguments of the tool (`invalid`).
        """
        waiting = self._pending.get(run_id, {}).get(tool_call_id)
        if waiting is None or waiting.decision is not None:
            earlier = (
                waiting.decision.decision
                if waiting is not None and waiting.decision is not None
                else self._answered.get((run_id, tool_call_id))
            )
            if earlier is not None:
                raise ApprovalError(
                    "not_found",
                    f"tool call {tool_call_id!r} of run {run_id!r} was already answered "
                    f"({earlier})",
                )
            raise ApprovalError(
                "not_found",
                f"no tool call {tool_call_id!r} waits for approval in run {run_id!r}",
            )
        if args is not None:
            if decision != "approve":
                raise ApprovalError("invalid", "args may only come with decision 'approve'")
            if not waiting.request.edit:
                raise ApprovalError(
                    "invalid",
                    f"the arguments of {waiting.request.name!r} may not be edited "
                    "(the agent's approval_edit is false)",
                )
            problem = _invalid_args(args, waiting.request.parameters)
            if problem is not None:
                raise ApprovalError(
                    "invalid", f"args are not valid for {waiting.request.name!r}: {problem}"
                )
        waiting.decision = Decision(decision=decision, by=by, reason=reason, args=args)
        waiting.woken.set()
        return waiting

    def forget_run(self, run_id: str) -> None:
        """Forget a run's answered ids (its run ended)."""
        for key in [k for k in self._answered if k[0] == run_id]:
            del self._answered[key]

    async def wait(self, run_id: str, source: Source | None, request: ApprovalRequest) -> Decision:
        """Park until the decision, the timeout, or a cancel (see `RunGate.wait`)."""
        if self.count >= self.max_pending:
            return Decision(
                decision="deny",
                by="server",
                reason=f"{self.max_pending} tool calls already wait for approval on this "
                "server (limits.max_pending_approvals)",
            )
        calls = self._pending.setdefault(run_id, {})
        waiting = calls[request.tool_call_id] = PendingApproval(run_id, source, request)
        self.count += 1
        try:
            with trio.move_on_after(request.wait):
                await waiting.woken.wait()
        finally:
            self.count -= 1
            del calls[request.tool_call_id]
            if not calls:
                del self._pending[run_id]
        if waiting.decision is None:
            waiting.decision = Decision(
                decision="timeout",
                by="server",
                reason=f"no decision within {_seconds(request.timeout_at - request.requested_at)}",
            )
        if len(self._answered) >= _ANSWERED_KEPT:
            del self._answered[next(iter(self._answered))]
        self._answered[(run_id, request.tool_call_id)] = waiting.decision.decision
        return waiting.decision


class RunGate:
    """One agent instance's way into the desk."""

    __slots__ = ("_desk", "_run_id", "_source")

    def __init__(self, desk: ApprovalDesk, run_id: str, source: Source | None) -> None:
        self._desk, self._run_id, self._source = desk, run_id, source

    async def wait(self, request: ApprovalRequest) -> Decision:
        """Wait for the decision on `request`; `timeout` after `request.wait` seconds."""
        return await self._desk.wait(self._run_id, self._source, request)


class _Nobody:
    """The gate of a non-streaming run: nobody watches it, so nobody can approve."""

    async def wait(self, request: ApprovalRequest) -> Decision:
        await trio.lowlevel.checkpoint()
        return Decision(
            decision="deny",
            by="server",
            reason="the run is not streamed, so nobody can approve the call",
        )


NOBODY = _Nobody()


def _invalid_args(args: dict[str, Any], schema: dict[str, Any]) -> str | None:
    """The first problem of `args` against the tool's JSON schema (None: valid)."""
    validator = jsonschema.Draft202012Validator(schema)
    error = jsonschema.exceptions.best_match(validator.iter_errors(args))
    if error is None:
        return None
    where = "/".join(str(p) for p in error.absolute_path)
    return f"{where}: {error.message}" if where else error.message


def _seconds(value: float) -> str:
    return f"{value:g} s"
