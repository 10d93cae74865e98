"""A subagent on another orchestrator server (`remote:` in its YAML): its run there,
streamed live into this tree.

`agent_spawn` of a remote subagent starts the run on that server with the typed
client and follows it (resumed by seq if the connection drops). Each of its events
is published into this run's sink, tagged as if it ran here (`RemoteTagger`): the
remote root becomes the spawned child (its Source), its descendants keep their
agentKeys and sessions with depth and path continuing below the child, and every
forwarded event's Source carries `remote: {runId, seq}` (the
event's place on the remote server). The local seq stays gap-free: this run's sink
numbers them.

Control passes through the child's `RemoteLink`: cancelling the child cancels the
remote run; a `send` to, or a cancel of, any agent of the remote subtree is made
there; a call that waits for approval there is listed here (in the run's approval
desk) and an answer given here is handed to that server.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import time
from collections.abc import Iterator
from typing import Any, cast, final

import msgspec
import trio

from agents.approval import ApprovalRequest, Decision
from agents.core.events import Usage
from agents.core.payloads import (
    ApprovalRequestedData,
    ApprovalResolvedData,
    RunFinishedData,
    agent_error,
)
from agents.core.usage import UsageNode
from agents.errors import OrchestratorError, ToolError
from agents.runner import Cancellation
from agents.spec import AgentSpec
from orchestrator.client import Client, ClientError
from orchestrator.core.approvals import CallKey
from orchestrator.core.bus import AnyBus
from orchestrator.core.events import Event, EventType, RemoteRef, Source
from orchestrator.runtime.approvals import ApprovalDesk, ApprovalError, PendingApproval

__all__ = [
    "HANDLES",
    "IGNORES",
    "RemoteLink",
    "RemoteRefused",
    "RemoteTagger",
    "Resumed",
    "run_remote",
]

logger = logging.getLogger(__name__)

_CANCEL_SECONDS = 5.0
CONTROL_SECONDS = 10.0
"""How long a cancel, message or answer for a remote subtree may take to reach its
server (the op that asked gets the error after that)."""


class RemoteRefused(OrchestratorError):
    """A message or cancel for an agent of a remote subtree that its server refused
    (or that could not reach it): the message says which server and why."""

    code = "unavailable"


HANDLES = frozenset(
    {
        EventType.RUN_STARTED,
        EventType.AGENT_STARTED,
        EventType.AGENT_RESULT,
        EventType.AGENT_ERROR,
        EventType.APPROVAL_REQUESTED,
        EventType.APPROVAL_RESOLVED,
        EventType.RUN_FINISHED,
    }
)
"""Event types of the remote run read here: its start (AGENT_STARTED stands for it) and
end, its agents' starts (their control comes through the link) and ends (the child's
own), and the calls that wait there (listed here too)."""
IGNORES = frozenset(
    {
        EventType.REASONING,
        EventType.TOOL_CALL_DELTA,
        EventType.TOOL_CALL,
        EventType.TOOL_RESULT,
        EventType.USER_MESSAGE,
        EventType.TOOL_PROGRESS,
        EventType.RUN_RESUMED,
        EventType.TURN_ABANDONED,
        EventType.COMPACTION_STARTED,
        EventType.COMPACTION_FINISHED,
        EventType.AGENT_STALLED,
        EventType.MODEL_FALLBACK,
    }
)
"""Event types forwarded as they are, retagged; tests/unit/test_payloads.py checks that
every type is in one of the two."""


@final
class RemoteLink:
    """A remote child running now: the scope that stops it, and the way control for
    any agent of its subtree reaches its run on the other server.

    Registered in the run's `remotes` under the child's agentKey and, as their
    AGENT_STARTED come through, under each forwarded descendant's (the registry is
    what `cancel`/`send` look agentKeys up in); unregistered when the child ends.
    """

    __slots__ = (
        "a2a",
        "cancellation",
        "child_key",
        "client",
        "desk",
        "held",
        "keys",
        "registry",
        "run_id",
        "scope",
        "where",
    )

    def __init__(
        self,
        child_key: str,
        timeout: float | None,
        registry: dict[str, RemoteLink],
        desk: ApprovalDesk | None = None,
        *,
        a2a: bool = False,
    ) -> None:
        self.child_key = child_key
        self.a2a = a2a
        """An A2A agent: it has no subtree and takes no messages from here."""
        self.scope = trio.CancelScope()
        if timeout:
            self.scope.relative_deadline = timeout
        self.cancellation: Cancellation | None = None
        """Set when a person cancelled it (else a deadline stopped it)."""
        self.registry = registry
        self.desk = desk
        self.client: Client | None = None
        self.run_id: str | None = None
        """The run on the other server, once it started there."""
        self.where = ""
        self.keys: set[str] = {child_key}
        """The agentKeys of the subtree (registered in `registry`)."""
        self.held: list[tuple[str, CallKey]] = []
        """(local runId, call) of calls waiting there, listed in `desk`."""
        registry[child_key] = self

    def cancel(self, cancellation: Cancellation) -> None:
        """Stop it: the forwarding ends and its run on the other server is cancelled."""
        self.cancellation = cancellation
        self.scope.cancel()

    async def cancel_below(self, agent_key: str, reason: str | None) -> None:
        """Cancel a forwarded descendant (and its subtree) on the other server.

        Raises:
            RemoteRefused: that server refused, or could not be reached.
        """
        client, run_id = self._there()
        with self._refusals():
            await client.cancel(run_id, agent_key, reason)

    async def send(self, agent_key: str, message: str) -> None:
        """Deliver a person's message to an agent of the subtree, there (the child is
        the remote run's root).

        Raises:
            RemoteRefused: that server refused (the agent is not running there), or
                could not be reached.
        """
        client, run_id = self._there()
        with self._refusals():
            await client.send(run_id, message, None if agent_key == self.child_key else agent_key)

    def adopt(self, agent_key: str) -> None:
        """A forwarded descendant started: control for it comes here."""
        self.keys.add(agent_key)
        self.registry[agent_key] = self

    def hold(self, run_id: str, source: Source, event: Event) -> None:
        """A forwarded APPROVAL_REQUESTED: list the call in this run's desk, answered
        through `answer` (what is listed is bounded by the remote's own limits)."""
        data = cast(ApprovalRequestedData, event.data)
        try:
            call_id, name = str(data["toolCallId"]), str(data["name"])
            timeout_at = float(data["timeoutAt"])  # (another server's: checked here)
        except (KeyError, TypeError, ValueError):
            return
        args = data.get("args")
        self.hold_call(
            run_id,
            source,
            ApprovalRequest(
                tool_call_id=call_id,
                name=name,
                args=args if isinstance(args, dict) else {},
                requested_at=event.ts,
                timeout_at=timeout_at,
                wait=max(0.0, timeout_at - time.time()),
                edit=bool(data.get("edit")),
                parameters={},  # the server there checks edited arguments
            ),
        )

    def hold_call(self, run_id: str, source: Source, request: ApprovalRequest) -> None:
        """List a call that waits there in this run's desk (once)."""
        if self.desk is None:
            return
        there = functools.partial(self.answer, source.agent_key, request.tool_call_id)
        waiting = PendingApproval(run_id, source, request, there)
        if self.desk.hold(waiting):
            self.held.append((run_id, waiting.key))

    def resolved(self, run_id: str, source: Source, event: Event) -> None:
        """A forwarded APPROVAL_RESOLVED (`source`: its agent, tagged here): the call
        no longer waits."""
        resolved = cast(ApprovalResolvedData, event.data)
        held = (run_id, (source.agent_key, str(resolved.get("toolCallId"))))
        if self.desk is not None and held in self.held:
            self.held.remove(held)
            self.desk.release(run_id, held[1], str(resolved.get("decision")))

    async def answer(self, agent_key: str, call_id: str, decision: Decision) -> None:
        """Hand an answer given here to the server the call of `agent_key` (its key
        here; the child is the root there) waits on.

        Raises:
            ApprovalError: that server refused it (its code and message), or could not
                be reached.
        """
        if self.client is None or self.run_id is None:
            raise ApprovalError("not_found", f"{self.where}: its run has not started there yet")
        client, run_id = self.client, self.run_id
        try:
            with _bounded(self.where):
                await client.approve(
                    run_id,
                    call_id,
                    agent_key=None if agent_key == self.child_key else agent_key,
                    deny=decision.decision == "deny",
                    reason=decision.reason,
                    args=decision.args,
                )
        except ClientError as exc:
            if exc.code == "bad_request":
                raise ApprovalError("bad_request", f"{self.where}: {exc}") from None
            raise ApprovalError("not_found", f"{self.where}: {exc}") from None

    def close(self) -> None:
        """The child ended: nothing of its subtree is controlled or listed here now."""
        for agent_key in self.keys:
            if self.registry.get(agent_key) is self:
                del self.registry[agent_key]
        if self.desk is not None:
            for run_id, call in self.held:
                self.desk.release(run_id, call)
        self.held.clear()

    def _there(self) -> tuple[Client, str]:
        if self.client is None or self.run_id is None:
            if self.a2a:
                raise RemoteRefused(f"{self.where}: an A2A agent takes no messages from here")
            raise RemoteRefused(f"{self.where}: its run has not started there yet")
        return self.client, self.run_id

    @contextlib.contextmanager
    def _refusals(self) -> Iterator[None]:
        try:
            with _bounded(self.where):
                yield
        except ClientError as exc:
            raise RemoteRefused(f"{self.where}: {exc}") from None


class RemoteTagger:
    """Sources for a remote run's events, as parts of this tree below `child`.

    An agent's fields are worked out once (its first event) and reused: per event,
    only its `remote` reference is new.
    """

    def __init__(self, child: Source, remote_run_id: str) -> None:
        self.child = child
        self.remote_run_id = remote_run_id
        self._fields: dict[str | None, dict[str, Any]] = {}
        """Their agentKey (None: their root) → the Source fields it gets here."""

    def source_of(self, event: Event) -> Source:
        """The Source `event` (of the remote run) gets here."""
        theirs = event.source
        key = theirs.agent_key if theirs is not None else None
        fields = self._fields.get(key)
        if fields is None:
            fields = self._fields[key] = self._place(theirs)
        return Source(**fields, remote=RemoteRef(run_id=self.remote_run_id, seq=event.seq))

    def _place(self, theirs: Source | None) -> dict[str, Any]:
        child = self.child
        if theirs is None:  # the remote root: the child itself (its own `remote` is unset)
            return {k: v for k, v in msgspec.structs.asdict(child).items() if k != "remote"}
        below = theirs.path.split("/", 1)[1] if "/" in theirs.path else theirs.agent_id
        return {
            "agent_key": theirs.agent_key,
            "agent_id": theirs.agent_id,
            "agent_name": theirs.agent_name,
            "session_id": theirs.session_id,
            "parent_session_id": (
                child.session_id if theirs.depth == 1 else theirs.parent_session_id
            ),
            "depth": child.depth + theirs.depth,
            "path": f"{child.path}/{below}",
            "task_id": theirs.task_id,
            "parent_tool_call_id": theirs.parent_tool_call_id,
        }


async def run_remote(
    spec: AgentSpec,
    task: str,
    bus: AnyBus,
    usage: UsageNode,
    link: RemoteLink,
    again: Resumed | None = None,
) -> str:
    """Run `spec` (a remote subagent) on `task`; with a streaming `bus`, its events are
    published on that run under `bus.source`, and the child ends exactly once (the
    remote root's AGENT_RESULT/ERROR, else an AGENT_ERROR made here). Its tree's usage
    is charged to `usage`; control reaches it through `link`. Its final answer.

    `again`: this run was resumed (a restart, a takeover) while the child ran: its run
    there is followed again after the last event this journal kept, not started.

    Raises:
        ToolError: the remote server refused (token, unknown agent, limits), could not
            be reached for `remote.timeout_seconds`, or the run there did not complete.
    """
    remote = spec.remote
    assert remote is not None and remote.url and remote.agent and bus.source is not None
    token = os.environ.get(remote.token_env) if remote.token_env else None
    client = Client(remote.url, token=token, give_up_after=remote.timeout_seconds)
    where = link.where = f"remote agent {spec.id!r} ({remote.where})"
    forward = _Forward(bus)
    try:
        run_id = (
            again.cursor.run_id if again is not None else await client.start(remote.agent, task)
        )
    except ClientError as exc:
        forward.fail("remote", f"{where}: {exc}")
        raise ToolError(f"{where}: {exc}") from None
    link.client, link.run_id = client, run_id
    try:
        final = await _follow(link, client, run_id, bus, forward, again)
    except ClientError as exc:
        forward.fail("remote", f"{where}: {exc}")
        raise ToolError(f"{where}: {exc}") from None
    except BaseException:
        if forward.suspended:  # this server stops to resume the run: it follows again then
            raise
        await _stop_there(spec.id, where, link, forward, client, run_id)
        raise
    if final is None:
        forward.fail("remote", f"{where}: run {run_id}: no end was received")
        raise ToolError(f"{where}: run {run_id} ended: no end was received")
    used = final.get("usage")
    if isinstance(used, dict):  # (another server's data: checked, not trusted)
        usage.charge(
            Usage(
                input_tokens=int(used.get("inputTokens", 0)),
                output_tokens=int(used.get("outputTokens", 0)),
            )
        )
    status = final.get("status")
    if status != "completed":
        error = final.get("error") or "no end was received"
        forward.fail(str(status or "remote"), f"{where}: run {run_id} {status}: {error}")
        raise ToolError(f"{where}: run {run_id} {status or 'ended'}: {error}")
    return str(final.get("result") or "")


async def _follow(
    link: RemoteLink,
    client: Client,
    run_id: str,
    bus: AnyBus,
    forward: _Forward,
    again: Resumed | None,
) -> RunFinishedData | None:
    """Forward the remote run's events (retagged under `bus.source`) to its end; its
    RUN_FINISHED data (None: none came)."""
    assert bus.source is not None
    tagger = RemoteTagger(bus.source, run_id)
    here = bus.run_id
    final: RunFinishedData | None = None
    if again is not None:
        await _rejoin(link, client, here, again, bus.source)
    after = again.cursor.seq if again is not None else 0
    async with client.follow_batches(run_id, after_seq=after) as batches:
        async for batch in batches:  # (a frame's events: one wake-up for all of them)
            for event in batch:
                kind = event.type
                if kind is EventType.RUN_FINISHED:
                    final = cast(RunFinishedData, event.data)
                    continue
                if kind is EventType.RUN_STARTED:  # AGENT_STARTED stands for it
                    continue
                source = tagger.source_of(event)
                if kind is EventType.AGENT_STARTED and event.source is not None:
                    link.adopt(event.source.agent_key)
                elif kind is EventType.APPROVAL_REQUESTED:
                    link.hold(here, source, event)
                elif kind is EventType.APPROVAL_RESOLVED:
                    link.resolved(here, source, event)
                forward.publish(source, event)
            await forward.wait_writable()
    return final


async def _stop_there(
    agent_id: str, where: str, link: RemoteLink, forward: _Forward, client: Client, run_id: str
) -> None:
    """This child was cancelled (or timed out): it ends here, and so does its run there."""
    stopped = link.cancellation
    if stopped is not None:
        forward.fail("cancelled", f"agent {agent_id!r} was {stopped.describe()}", stopped)
    elif link.scope.deadline <= trio.current_time():
        forward.fail("timeout", f"agent {agent_id!r} timed out")
    else:
        forward.fail("cancelled", f"{where}: cancelled")
    with (
        trio.CancelScope(shield=True),
        trio.move_on_after(_CANCEL_SECONDS),
        contextlib.suppress(ClientError),
    ):
        await client.cancel(run_id, reason="cancelled by the spawning tree")


class Resumed(msgspec.Struct, frozen=True):
    """A remote child found running in a resumed run's journal (`run_remote(again=)`)."""

    cursor: RemoteRef
    """Its run there, and the last of that run's events this journal kept."""
    below: dict[str, Source]
    """The forwarded agents of its subtree that had not ended, by agentKey (as the
    journal tagged them): control for them comes through the child's link again."""


async def _rejoin(
    link: RemoteLink, client: Client, here: str, again: Resumed, child: Source
) -> None:
    """Before following again: the subtree's agents are controlled through `link`, and
    the calls that wait there (asked before the cursor) are listed here again."""
    for below in again.below:
        link.adopt(below)
    try:
        with _bounded(link.where):
            waiting = await client.pending(link.run_id)
    except ClientError as exc:
        logger.warning("%s: its waiting calls are not listed again: %s", link.where, exc)
        return
    for info in waiting:
        source = child if info.agent_key is None else again.below.get(info.agent_key)
        if source is None:
            continue
        request = ApprovalRequest(
            tool_call_id=info.tool_call_id,
            name=info.name,
            args=info.args,
            requested_at=info.requested_at,
            timeout_at=info.timeout_at,
            wait=max(0.0, info.timeout_at - time.time()),
            edit=info.edit,
            parameters={},  # the server there checks edited arguments
        )
        link.hold_call(here, source, request)


class _Forward:
    """Publishes forwarded events on the local run (a non-streaming call's NullBus
    drops them), and notes whether the child's own end came through."""

    def __init__(self, bus: AnyBus) -> None:
        self.bus = bus
        self.ended = False

    @property
    def suspended(self) -> bool:
        """The run is being suspended (this server stops, to resume it at its next
        start): its events go nowhere now, and its run there must go on."""
        return self.bus.dropped

    def publish(self, source: Source, event: Event) -> None:
        if self.bus.closed:
            return
        if event.source is None and event.type in _ENDS:
            self.ended = True
        self.bus.forward_nowait(source, event.type, event.data, event.last)

    async def wait_writable(self) -> None:
        """Back-pressure: a frame's worth at a time, as a model turn's batch."""
        await self.bus.wait_writable()

    def fail(self, error_type: str, message: str, stopped: Cancellation | None = None) -> None:
        """The child's AGENT_ERROR, unless its end already came from the remote root."""
        if self.ended or self.bus.closed:
            return
        self.ended = True
        data = agent_error(  # as an agent here says who cancelled it (`AgentRunner`)
            error_type,
            message,
            by=stopped.by if stopped is not None else None,
            reason=stopped.reason if stopped is not None else None,
        )
        self.bus.emit_nowait(EventType.AGENT_ERROR, data, last=True)


_ENDS = (EventType.AGENT_RESULT, EventType.AGENT_ERROR)


@contextlib.contextmanager
def _bounded(where: str) -> Iterator[None]:
    """A control request to the remote server, bounded by `CONTROL_SECONDS`.

    Raises:
        ClientError: `unreachable` when it took longer.
    """
    try:
        with trio.fail_after(CONTROL_SECONDS):
            yield
    except trio.TooSlowError:
        raise ClientError(
            "unreachable", f"{where}: no answer within {CONTROL_SECONDS:g} s"
        ) from None
