"""Where tool calls wait for a person's decision, and where the decision is given.

One `ApprovalDesk` per `Orchestrator` holds every waiting call of every run (so the
server can list them across runs and bound how many wait at once). A run's agents
wait through `desk.gate(run_id, source)`; a person answers through
`desk.answer(run_id, answer)` — one `Answer`, whichever door it came in by.
The runner emits the events (APPROVAL_REQUESTED / APPROVAL_RESOLVED); the desk only
parks the waiting call and wakes it with the decision.

Cost: nothing on the forwarding path. A run with no `approval` configured never
touches the desk; a waiting call is one `PendingApproval` and one parked task.
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable, Iterable
from typing import Any, Literal, TypeVar

import msgspec
import trio

from agents.approval import ApprovalRequest, Decision
from agents.errors import OrchestratorError
from orchestrator.core.approvals import AgentKey, Answer, ApprovalInfo, CallKey
from orchestrator.core.events import Source
from orchestrator.core.listeners import Listeners

__all__ = [
    "NOBODY",
    "ApprovalDesk",
    "ApprovalError",
    "ApprovalListener",
    "PendingApproval",
    "RunGate",
    "already_answered",
    "ambiguous",
    "check_answer",
    "not_waiting",
]


class ApprovalError(OrchestratorError, LookupError):
    """An answer that changes nothing: `code` is `not_found` or `bad_request`."""

    def __init__(self, code: Literal["not_found", "bad_request"], message: str) -> None:
        super().__init__(message, code=code)


class PendingApproval:
    """One tool call waiting for its decision."""

    __slots__ = ("decision", "request", "run_id", "source", "there", "woken")

    def __init__(
        self,
        run_id: str,
        source: Source | None,
        request: ApprovalRequest,
        there: Callable[[Decision], Awaitable[None]] | None = None,
    ) -> None:
        self.run_id = run_id
        self.source = source
        """The calling agent's source (None: the root agent)."""
        self.request = request
        self.decision: Decision | None = None
        self.woken = trio.Event()
        self.there = there
        """For a call that waits on another server (an agent of a remote subagent's
        run, docs/remote.md): hands the decision to that server, or raises
        `ApprovalError` with its refusal. The host answers these (`approve`)."""

    async def hand_over(self) -> None:
        """Give its decision to the server it waits on, if it waits on another
        (`there`); refused there, it is not answered after all.

        Raises:
            ApprovalError: the other server's refusal.
        """
        if self.there is None or self.decision is None:
            return
        try:
            await self.there(self.decision)
        except BaseException:
            self.decision = None
            raise

    @property
    def key(self) -> CallKey:
        """The call within its run: (the calling agent's agentKey, its toolCallId)."""
        source = self.source
        return (source.agent_key if source is not None else None, self.request.tool_call_id)

    def info(self, *, agent_id: str, root_path: str, owner: str | None = None) -> ApprovalInfo:
        """How lists show it (`agent_id`, `root_path`: the root agent's, for its calls)."""
        request, source = self.request, self.source
        return ApprovalInfo(
            run_id=self.run_id,
            agent_key=source.agent_key if source is not None else None,
            agent_id=source.agent_id if source is not None else agent_id,
            path=source.path if source is not None else root_path,
            depth=source.depth if source is not None else 0,
            tool_call_id=request.tool_call_id,
            name=request.name,
            args=request.args,
            edit=request.edit,
            requested_at=request.requested_at,
            timeout_at=request.timeout_at,
            owner=owner,
            parameters=request.parameters,
        )


ApprovalListener = Callable[[str, CallKey, "PendingApproval | None"], None]
"""Hears of each change to the calls waiting: `(run_id, call, waiting or None)`."""


class ApprovalDesk:
    """Every waiting call of every run, by run and tool call id."""

    def __init__(self, max_pending: int = 10_000) -> None:
        self.max_pending = max_pending
        self._pending: dict[str, dict[CallKey, PendingApproval]] = {}
        """Run → call → the waiting call. A call is its agent's and its id's: two
        agents of a run may both say `call_0`."""
        self._answered: dict[str, dict[CallKey, str]] = {}
        """Run → call → its decision, while the run lasts (`already answered`)."""
        self.count = 0
        """Calls waiting now, over every run."""
        self._clocks = StoppedClocks()
        self.changed: Listeners[[str, CallKey, PendingApproval | None]] = Listeners()
        """Told `(run_id, call, waiting)` when a call starts waiting, and with None
        when it no longer does (`subscribe`)."""

    def subscribe(self, listener: ApprovalListener) -> Callable[[], None]:
        """Tell `listener(run_id, call, waiting)` when a call starts waiting, and with
        None when it no longer does (a cluster worker publishes the list); returns
        what unsubscribes it. Called at once, in the desk's own change: no await."""
        return self.changed.subscribe(listener)

    def gate(
        self,
        run_id: str,
        source: Source | None,
        deadlines: Callable[[], Iterable[trio.CancelScope]] = tuple,
    ) -> RunGate:
        """Where one agent instance of `run_id` waits (`agents.approval.ApprovalGate`);
        `deadlines` gives the scopes whose clocks stop while it waits (its own spawn's,
        its ancestors', the run's)."""
        return RunGate(self, run_id, source, deadlines)

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
        self, run_id: str, answer: Answer, *, checked: bool = False, here: bool = False
    ) -> PendingApproval:
        """Give `answer` to its waiting call of `run_id` — the one way in, whichever
        door the answer came by: the first answer wins. A call of this process runs (or
        gets its error result) now; a call of a remote subtree counts as answered here
        until `hand_over` has given the decision to the server it waits on, which
        checks it. `checked`: checked against the call already (by a cluster gateway):
        not again. `here`: only a call that waits in this process may be answered.

        Raises:
            ApprovalError: no such waiting call (`not_found`, also for one already
                answered — the message says so), `args` that the call's agent may not
                edit or that are not valid arguments of the tool (`bad_request`), or,
                with `here`, a call that waits on another server (`bad_request`).
        """
        waiting = self.claim(run_id, answer.tool_call_id, answer.agent_key)
        if here and waiting.there is not None:
            raise ApprovalError(
                "bad_request",
                f"tool call {answer.tool_call_id!r} waits on another server: answer it "
                "with the server's approve op",
            )
        self._decide(waiting, answer, checked=checked)
        return waiting

    def _decide(
        self, waiting: PendingApproval, answer: Answer, *, checked: bool = False
    ) -> Decision:
        """Check `answer` against the call (unless `checked`) and take it: from here on,
        it is answered."""
        request = waiting.request
        if not checked:
            parameters = request.parameters if waiting.there is None else None  # (there)
            check_answer(request.name, request.edit, parameters, answer.decision, answer.args)
        waiting.decision = decision = answer.as_decision()
        if waiting.there is None:
            waiting.woken.set()
        return decision

    def claim(
        self, run_id: str, tool_call_id: str, agent_key: AgentKey = msgspec.UNSET
    ) -> PendingApproval:
        """The waiting call `tool_call_id` of `run_id` — of the agent `agent_key` (None:
        the root), or of whichever agent's call has that id, when only one waits —
        not yet answered.

        Raises:
            ApprovalError: `not_found` (the message says when it was already answered);
                `invalid` when calls of several agents have that id and `agent_key`
                does not say which.
        """
        found = _matching(self._pending.get(run_id, {}), tool_call_id, agent_key)
        open_ = [waiting for _, waiting in found if waiting.decision is None]
        if len(open_) == 1:
            return open_[0]
        if len(open_) > 1:
            raise ambiguous(run_id, tool_call_id, [w.key[0] for w in open_])
        answered = _matching(self._answered.get(run_id, {}), tool_call_id, agent_key)
        earlier: list[str] = [w.decision.decision for _, w in found if w.decision is not None]
        earlier += [decision for _, decision in answered]
        if earlier:
            raise already_answered(run_id, tool_call_id, earlier[0])
        raise not_waiting(run_id, tool_call_id)

    def forget_run(self, run_id: str) -> None:
        """The run ended: drop what it left (answered ids, calls adopted but never
        waited for again)."""
        self._answered.pop(run_id, None)
        for key in list(self._pending.get(run_id, ())):
            self._drop(run_id, key)

    def adopt(self, run_id: str, source: Source | None, request: ApprovalRequest) -> None:
        """A call that waited before a restart or takeover waits again: listed and
        answerable from now, before its agent reaches it (`wait` then finds it)."""
        self._add(PendingApproval(run_id, source, request))

    def hold(self, waiting: PendingApproval) -> bool:
        """List a call that waits on another server (`waiting.there` answers it) until
        `release`; False (not listed) if that call already waits in its run."""
        if waiting.key in self._pending.get(waiting.run_id, ()):
            return False
        self._add(waiting)
        return True

    def release(self, run_id: str, key: CallKey, decision: str | None = None) -> None:
        """A held call no longer waits (`decision`: how it was answered there)."""
        self._drop(run_id, key)
        if decision is not None:
            self._answered.setdefault(run_id, {})[key] = decision

    async def wait(
        self,
        run_id: str,
        source: Source | None,
        request: ApprovalRequest,
        deadlines: Iterable[trio.CancelScope] = (),
    ) -> Decision:
        """Park until the decision, the timeout, or a cancel (see `RunGate.wait`).

        While it waits, the `deadlines` (timeouts of the agent, its ancestors and the
        run) stand still: a person's hour of thinking does not time the run out."""
        key = (source.agent_key if source is not None else None, request.tool_call_id)
        waiting = self._pending.get(run_id, {}).get(key)
        if waiting is not None and waiting.there is not None:  # held as remote: ours wins
            self._drop(run_id, key)
            waiting = None
        if waiting is None:
            if self.count >= self.max_pending:
                return Decision(
                    decision="deny",
                    by="server",
                    reason=f"{self.max_pending} tool calls already wait for approval on this "
                    "server (limits.max_pending_approvals)",
                )
            waiting = self._add(PendingApproval(run_id, source, request))
        scopes = list(deadlines)
        self._clocks.stop(scopes)
        try:
            with trio.move_on_after(request.wait):
                await waiting.woken.wait()
        finally:
            self._clocks.start(scopes)
            self._drop(run_id, key)
        if waiting.decision is None:
            waiting.decision = Decision(
                decision="timeout",
                by="server",
                reason=f"no decision within {_seconds(request.timeout_at - request.requested_at)}",
            )
        self._answered.setdefault(run_id, {})[key] = waiting.decision.decision
        return waiting.decision

    def _add(self, waiting: PendingApproval) -> PendingApproval:
        run_id, key = waiting.run_id, waiting.key
        self._pending.setdefault(run_id, {})[key] = waiting
        self.count += 1
        self.changed(run_id, key, waiting)
        return waiting

    def _drop(self, run_id: str, key: CallKey) -> None:
        calls = self._pending.get(run_id)
        if calls is None or calls.pop(key, None) is None:
            return
        self.count -= 1
        if not calls:
            del self._pending[run_id]
        self.changed(run_id, key, None)


_T = TypeVar("_T")


def _matching(
    calls: dict[CallKey, _T], tool_call_id: str, agent_key: AgentKey
) -> list[tuple[CallKey, _T]]:
    """The entries of `calls` for call `tool_call_id` of `agent_key` (unset: of any
    agent); a scan of one run's calls."""
    if agent_key is not msgspec.UNSET:
        key = (agent_key, tool_call_id)
        return [(key, calls[key])] if key in calls else []
    return [(key, value) for key, value in calls.items() if key[1] == tool_call_id]


class RunGate:
    """One agent instance's way into the desk."""

    __slots__ = ("_deadlines", "_desk", "_run_id", "_source")

    def __init__(
        self,
        desk: ApprovalDesk,
        run_id: str,
        source: Source | None,
        deadlines: Callable[[], Iterable[trio.CancelScope]],
    ) -> None:
        self._desk, self._run_id, self._source = desk, run_id, source
        self._deadlines = deadlines

    async def wait(self, request: ApprovalRequest) -> Decision:
        """Wait for the decision on `request`; `timeout` after `request.wait` seconds."""
        return await self._desk.wait(self._run_id, self._source, request, self._deadlines())


class StoppedClocks:
    """Deadlines that stand still while calls below them wait for a person.

    A scope's clock stops when the first waiting call under it starts waiting (its
    deadline goes to infinity) and starts again when the last one ends, its deadline
    moved later by the time it stood still. Overlapping waits count once.
    """

    __slots__ = ("_stopped",)

    def __init__(self) -> None:
        self._stopped: dict[int, tuple[trio.CancelScope, list[float]]] = {}
        """id(scope) → (scope, [waiting calls, stopped at, its deadline then])."""

    def stop(self, scopes: Iterable[trio.CancelScope]) -> None:
        now = trio.current_time()
        for scope in scopes:
            entry = self._stopped.get(id(scope))
            if entry is not None:
                entry[1][0] += 1
            elif math.isfinite(scope.deadline):
                self._stopped[id(scope)] = (scope, [1, now, scope.deadline])
                scope.deadline = math.inf

    def start(self, scopes: Iterable[trio.CancelScope]) -> None:
        now = trio.current_time()
        for scope in scopes:
            entry = self._stopped.get(id(scope))
            if entry is None:
                continue
            state = entry[1]
            state[0] -= 1
            if state[0] == 0:
                del self._stopped[id(scope)]
                scope.deadline = state[2] + (now - state[1])


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


def already_answered(run_id: str, tool_call_id: str, earlier: str) -> ApprovalError:
    """The refusal of an answer to a call answered before (`earlier`: its decision)."""
    return ApprovalError(
        "not_found",
        f"tool call {tool_call_id!r} of run {run_id!r} was already answered ({earlier})",
    )


def ambiguous(run_id: str, tool_call_id: str, keys: list[str | None]) -> ApprovalError:
    """The refusal of an answer that does not say which of several calls it is for."""
    agents = ", ".join("the root agent" if k is None else k for k in keys)
    return ApprovalError(
        "bad_request",
        f"{len(keys)} tool calls {tool_call_id!r} wait in run {run_id!r} ({agents}): "
        "say which with agentKey",
    )


def not_waiting(run_id: str, tool_call_id: str) -> ApprovalError:
    """The refusal of an answer to a call that does not wait (and never did)."""
    return ApprovalError(
        "not_found", f"no tool call {tool_call_id!r} waits for approval in run {run_id!r}"
    )


def check_answer(
    name: str,
    edit: bool,
    parameters: dict[str, Any] | None,
    decision: str,
    args: dict[str, Any] | None,
) -> None:
    """Check an answer's `args` for a call of tool `name` (None: no edit).

    Raises:
        ApprovalError: `invalid` — args with a deny, args the agent may not edit, or
            args that are not valid against the tool's JSON schema `parameters`.
    """
    if args is None:
        return
    if decision != "approve":
        raise ApprovalError("bad_request", "args may only come with decision 'approve'")
    if not edit:
        raise ApprovalError(
            "bad_request",
            f"the arguments of {name!r} may not be edited (the agent's approval_edit is false)",
        )
    problem = _invalid_args(args, parameters or {})
    if problem is not None:
        raise ApprovalError("bad_request", f"args are not valid for {name!r}: {problem}")


def _invalid_args(args: dict[str, Any], schema: dict[str, Any]) -> str | None:
    """The first problem of `args` against the tool's JSON schema (None: valid)."""
    import jsonschema  # here, not at the top: only an edited answer needs it (its import
    # costs ~50 ms of start-up and a bigger heap for every collection of the event path)

    validator = jsonschema.Draft202012Validator(schema)
    error = jsonschema.exceptions.best_match(validator.iter_errors(args))
    if error is None:
        return None
    where = "/".join(str(p) for p in error.absolute_path)
    return f"{where}: {error.message}" if where else error.message


def _seconds(value: float) -> str:
    return f"{value:g} s"
