"""A subagent on another orchestrator server (`remote:` in its YAML): its run there,
streamed live into this tree.

`agent_spawn` of a remote subagent starts the run on that server with the typed
client and follows it (resumed by seq if the connection drops). Each of its events
is published into this run's sink, tagged as if it ran here (`RemoteTagger`): the
remote root becomes the spawned child (its Source), its descendants keep their
agentKeys and sessions with depth and path continuing below the child, and every
forwarded event's Source is a `RemoteSource` carrying `remote: {runId, seq}` (the
event's place on the remote server). The local seq stays gap-free: this run's sink
numbers them. Cancelling the child cancels the remote run.
"""

from __future__ import annotations

import contextlib
import os
from typing import Any

import msgspec
import trio

from agents.core.events import Usage
from agents.core.usage import UsageNode
from agents.errors import ToolError
from agents.spec import AgentSpec
from orchestrator.client import Client, ClientError
from orchestrator.core.bus import AnyBus, Bus
from orchestrator.core.events import Event, EventType, RemoteRef, RemoteSource, Source

__all__ = ["RemoteTagger", "run_remote"]

_CANCEL_SECONDS = 5.0


class RemoteTagger:
    """Sources for a remote run's events, as parts of this tree below `child`."""

    def __init__(self, child: Source, remote_run_id: str) -> None:
        self.child = child
        self.remote_run_id = remote_run_id

    def source_of(self, event: Event) -> RemoteSource:
        """The Source `event` (of the remote run) gets here."""
        child, remote = self.child, RemoteRef(run_id=self.remote_run_id, seq=event.seq)
        theirs = event.source
        if theirs is None:  # the remote root: the child itself
            return RemoteSource(**msgspec.structs.asdict(child), remote=remote)
        below = theirs.path.split("/", 1)[1] if "/" in theirs.path else theirs.agent_id
        return RemoteSource(
            agent_key=theirs.agent_key,
            agent_id=theirs.agent_id,
            agent_name=theirs.agent_name,
            session_id=theirs.session_id,
            parent_session_id=child.session_id if theirs.depth == 1 else theirs.parent_session_id,
            depth=child.depth + theirs.depth,
            path=f"{child.path}/{below}",
            task_id=theirs.task_id,
            parent_tool_call_id=theirs.parent_tool_call_id,
            remote=remote,
        )


async def run_remote(spec: AgentSpec, task: str, bus: AnyBus, usage: UsageNode) -> str:
    """Run `spec` (a remote subagent) on `task`; with a streaming `bus`, its events are
    published on that run under `bus.source`, and the child ends exactly once (the
    remote root's AGENT_RESULT/ERROR, else an AGENT_ERROR made here). Its tree's usage
    is charged to `usage`. Its final answer.

    Raises:
        ToolError: the remote server refused (token, unknown agent, limits), could not
            be reached for `remote.timeout_seconds`, or the run there did not complete.
    """
    remote = spec.remote
    assert remote is not None and bus.source is not None
    token = os.environ.get(remote.token_env) if remote.token_env else None
    client = Client(remote.url, token=token, give_up_after=remote.timeout_seconds)
    where = f"remote agent {spec.id!r} ({remote.agent} at {remote.url})"
    forward = _Forward(bus)
    try:
        run_id = await client.start(remote.agent, task)
    except ClientError as exc:
        forward.fail("remote", f"{where}: {exc}")
        raise ToolError(f"{where}: {exc}") from None
    tagger = RemoteTagger(bus.source, run_id)
    final: dict[str, Any] = {}
    try:
        async with client.follow(run_id) as events:
            async for event in events:
                if event.type is EventType.RUN_FINISHED:
                    final = event.data
                elif event.type is not EventType.RUN_STARTED:  # AGENT_STARTED stands for it
                    await forward.publish(tagger.source_of(event), event)
    except ClientError as exc:
        forward.fail("remote", f"{where}: {exc}")
        raise ToolError(f"{where}: {exc}") from None
    except BaseException:
        forward.fail("cancelled", f"{where}: cancelled")
        with (
            trio.CancelScope(shield=True),
            trio.move_on_after(_CANCEL_SECONDS),
            contextlib.suppress(ClientError),
        ):  # this child was cancelled (or timed out): so is its run there
            await client.cancel(run_id, reason="cancelled by the spawning tree")
        raise
    used = final.get("usage")
    if isinstance(used, dict):
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


class _Forward:
    """Publishes forwarded events on the local run (none on a non-streaming call's
    NullBus), and notes whether the child's own end came through."""

    def __init__(self, bus: AnyBus) -> None:
        self.bus = bus if isinstance(bus, Bus) else None
        self.ended = False

    async def publish(self, source: RemoteSource, event: Event) -> None:
        bus = self.bus
        if bus is None or bus.sink.closed:
            return
        if event.source is None and event.type in _ENDS:
            self.ended = True
        bus.sink.publish_nowait(source, event.type, event.data, event.last)
        await bus.wait_writable()

    def fail(self, error_type: str, message: str) -> None:
        """The child's AGENT_ERROR, unless its end already came from the remote root."""
        bus = self.bus
        if bus is None or self.ended or bus.sink.closed:
            return
        self.ended = True
        bus.emit_nowait(
            EventType.AGENT_ERROR, {"errorType": error_type, "message": message}, last=True
        )


_ENDS = (EventType.AGENT_RESULT, EventType.AGENT_ERROR)
