"""A subagent that is an A2A agent (`remote: {a2a: URL}`): its task, streamed in as
this tree's child.

The `a2a-sdk` client runs under trio (its HTTP is httpx, which anyio runs on
trio): the agent card is read, the spawn's task is sent as a streaming message,
and each response becomes the child's events (`mapping.TaskFollower`). Cancelling
the child (or its timeout) cancels the task there.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import AsyncGenerator
from typing import cast

import httpx
import trio
from a2a.client import ClientConfig, ClientFactory
from a2a.client.client import Client
from a2a.types import a2a_pb2 as pb

from agents.core.payloads import AgentErrorData, agent_error
from agents.errors import ToolError
from agents.spec import AgentSpec
from orchestrator.a2a.mapping import ChildEvent, TaskFollower
from orchestrator.client import ClientError, auth_headers
from orchestrator.core.bus import AnyBus
from orchestrator.core.events import EventType
from orchestrator.runtime.remote import RemoteLink

__all__ = ["run_a2a"]

_CANCEL_SECONDS = 5.0


async def run_a2a(spec: AgentSpec, task: str, bus: AnyBus, link: RemoteLink) -> str:
    """Send `task` to the A2A agent of `spec` and stream its task in as this child
    (with a streaming `bus`); the child ends exactly once. Its answer.

    Raises:
        ToolError: the agent could not be reached (or went silent) for
            `remote.timeout_seconds`, refused, or its task did not complete.
    """
    remote = spec.remote
    assert remote is not None and remote.a2a is not None
    where = link.where = f"remote agent {spec.id!r} ({remote.where})"
    token = os.environ.get(remote.token_env) if remote.token_env else None
    try:
        headers = auth_headers(token) or {}
    except ClientError as exc:
        raise ToolError(f"{where}: ${remote.token_env}: {exc.message}") from None
    follower = TaskFollower()
    timeout = httpx.Timeout(remote.timeout_seconds)
    async with httpx.AsyncClient(headers=headers, timeout=timeout) as http:
        client: Client | None = None
        try:
            factory = ClientFactory(ClientConfig(httpx_client=http, streaming=True))
            with trio.fail_after(remote.timeout_seconds):
                client = await factory.create_from_url(remote.a2a)
            request = pb.Message(message_id=os.urandom(8).hex(), role=pb.Role.ROLE_USER)
            request.parts.append(pb.Part(text=task))
            responses = cast(
                "AsyncGenerator[pb.StreamResponse, None]",
                client.send_message(pb.SendMessageRequest(message=request)),
            )
            async with contextlib.aclosing(responses):
                async for response in responses:  # (to its end: the SDK's inner generators
                    # are only closed by running out)
                    _emit(bus, follower.feed(response))
                    await bus.wait_writable()
            _emit(bus, follower.stopped())
        except Exception as exc:  # (httpx's, the SDK's, a timeout: all an error result)
            problem = _describe(exc)
            _fail(bus, follower, agent_error("remote", problem))
            raise ToolError(f"{where}: {problem}") from None
        except BaseException:  # cancelled here (a person, a timeout, the run): there too
            _fail(bus, follower, _cancelled(spec, link))
            if client is not None and follower.task_id:
                with (
                    trio.CancelScope(shield=True),
                    trio.move_on_after(_CANCEL_SECONDS),
                    contextlib.suppress(Exception),
                ):
                    await client.cancel_task(pb.CancelTaskRequest(id=follower.task_id))
            raise
    if follower.error is not None:
        kind, problem = follower.error
        raise ToolError(f"{where}: task {follower.task_id} {kind}: {problem}")
    return follower.result or ""


def _emit(bus: AnyBus, events: list[ChildEvent]) -> None:
    """The child's events, on the run (a non-streaming call's NullBus drops them)."""
    if bus.closed:
        return
    for kind, data, last in events:
        bus.emit_any(kind, data, last)


def _cancelled(spec: AgentSpec, link: RemoteLink) -> AgentErrorData:
    """The child's AGENT_ERROR when it was stopped here (as a local agent says it)."""
    stopped = link.cancellation
    if stopped is None:  # a deadline, or the whole run
        return agent_error("cancelled", f"agent {spec.id!r} was stopped")
    return agent_error(
        "cancelled",
        f"agent {spec.id!r} was {stopped.describe()}",
        by=stopped.by,
        reason=stopped.reason,
    )


def _fail(bus: AnyBus, follower: TaskFollower, data: AgentErrorData) -> None:
    """The child's end, when the task's own end did not come through."""
    if follower.ended:
        return
    follower.ended = True
    if not bus.closed:
        bus.emit_nowait(EventType.AGENT_ERROR, data, True)


def _describe(exc: BaseException) -> str:
    if isinstance(exc, trio.TooSlowError):
        return "no agent card within the timeout"
    if isinstance(exc, httpx.TimeoutException):
        return f"no answer in time ({type(exc).__name__})"
    if isinstance(exc, httpx.HTTPStatusError):
        return f"HTTP {exc.response.status_code} from {exc.request.url}"
    text = str(exc) or type(exc).__name__
    return f"{type(exc).__name__}: {text}"[:500]
