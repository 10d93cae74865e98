"""A subagent that is an A2A agent (`remote: {a2a: URL}`): its task, streamed in as
this tree's child.

The `a2a-sdk` client runs under trio (its HTTP is httpx, which anyio runs on
trio): the agent card is read, the spawn's task is sent as a streaming message,
and each response becomes the child's events (`mapping.TaskFollower`). Cancelling
the child (or its timeout) cancels the task there.

A task that turns `input-required` asks a person here: the child's question waits in
this server's approvals (a call `a2a_input` of the child, APPROVAL_REQUESTED, listed by
the `pending` op, answered by `approve` from any door), and the answer goes back to
the task as a message with its id; the task's stream goes on from there.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import time
from collections.abc import AsyncGenerator
from typing import Any, cast

import httpx
import trio
from a2a.client import ClientConfig, ClientFactory
from a2a.client.client import Client
from a2a.types import a2a_pb2 as pb
from google.protobuf import json_format

from agents.approval import ApprovalRequest, Decision
from agents.core.attachments import Attachment
from agents.core.payloads import (
    AgentErrorData,
    ApprovalRequestedData,
    ApprovalResolvedData,
    agent_error,
)
from agents.errors import ToolError
from agents.spec import AgentSpec
from orchestrator.a2a.mapping import ChildEvent, TaskFollower
from orchestrator.client import ClientError, auth_headers
from orchestrator.core.bus import AnyBus
from orchestrator.core.events import EventType
from orchestrator.runtime.remote import RemoteLink

__all__ = ["run_a2a"]

_CANCEL_SECONDS = 5.0


async def run_a2a(
    spec: AgentSpec,
    task: str,
    bus: AnyBus,
    link: RemoteLink,
    *,
    input_timeout: float = 3600.0,
    attachments: tuple[Attachment, ...] = (),
) -> str:
    """Send `task` (and its `attachments`, as FileParts) to the A2A agent of `spec` and
    stream its task in as this child (with a streaming `bus`); the child ends exactly
    once. Its answer. `input_timeout`: seconds a question of the task
    (`input-required`) waits for a person here.

    Raises:
        ToolError: the agent could not be reached (or went silent) for
            `remote.timeout_seconds`, refused, its task did not complete, or its
            question got no answer.
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
            for given in attachments:  # a FilePart each, with its bytes
                part = pb.Part(raw=given.data, filename=given.name, media_type=given.media_type)
                request.parts.append(part)
            for asked in itertools.count(1):
                await _stream(client, request, bus, follower)
                if follower.asking is None or follower.ended:
                    break
                request = await _ask_person(bus, link, follower, asked, input_timeout)
            _emit(bus, follower.stopped())
        except _Unanswered as exc:
            _fail(bus, follower, agent_error("input_required", exc.why))
            await _cancel_task(client, follower)
            raise ToolError(f"{where}: task {follower.task_id} input_required: {exc.why}") from None
        except Exception as exc:  # (httpx's, the SDK's, a timeout: all an error result)
            problem = _describe(exc)
            _fail(bus, follower, agent_error("remote", problem))
            raise ToolError(f"{where}: {problem}") from None
        except BaseException:  # cancelled here (a person, a timeout, the run): there too
            _fail(bus, follower, _cancelled(spec, link))
            await _cancel_task(client, follower)
            raise
    if follower.error is not None:
        kind, problem = follower.error
        raise ToolError(f"{where}: task {follower.task_id} {kind}: {problem}")
    return follower.result or ""


async def _stream(client: Client, request: pb.Message, bus: AnyBus, follower: TaskFollower) -> None:
    """Send `request` and take the task's responses in, until its stream ends."""
    responses = cast(
        "AsyncGenerator[pb.StreamResponse, None]",
        client.send_message(pb.SendMessageRequest(message=request)),
    )
    async with contextlib.aclosing(responses):
        async for response in responses:  # (to its end: the SDK's inner generators
            # are only closed by running out)
            _emit(bus, follower.feed(response))
            await bus.wait_writable()


async def _cancel_task(client: Client | None, follower: TaskFollower) -> None:
    """Cancel the task there (bounded, whatever happens here meanwhile)."""
    if client is None or not follower.task_id:
        return
    with (
        trio.CancelScope(shield=True),
        trio.move_on_after(_CANCEL_SECONDS),
        contextlib.suppress(Exception),
    ):
        await client.cancel_task(pb.CancelTaskRequest(id=follower.task_id))


class _Unanswered(Exception):
    """The task's question cannot be answered here, or was not in time."""

    def __init__(self, why: str) -> None:
        super().__init__(why)
        self.why = why


INPUT_TOOL = "a2a_input"
"""The name of the call a remote A2A task's question waits as, here."""
_INPUT_PARAMETERS = {
    "type": "object",
    "properties": {
        "question": {"type": "string"},
        "asked": {"type": "object"},
        "reply": {"type": "string", "description": "what to answer, in your own words"},
    },
}


async def _ask_person(
    bus: AnyBus, link: RemoteLink, follower: TaskFollower, asked: int, seconds: float
) -> pb.Message:
    """The task's question, asked here as the child's waiting call; the answer, as
    the message that goes back to the task.

    Raises:
        _Unanswered: nobody can answer (a blocking call), or nobody did in time.
    """
    assert follower.asking is not None
    question, data = follower.asking
    if link.desk is None or not bus.streaming:
        raise _Unanswered(
            "the A2A agent asks for more input, which a call without a stream cannot give"
        )
    call_id = f"a2a-{follower.task_id}-{asked}"
    args: dict[str, Any] = {"question": question}
    if data is not None:
        args["asked"] = data
    now = time.time()
    requested: ApprovalRequestedData = {
        "toolCallId": call_id,
        "name": INPUT_TOOL,
        "args": args,
        "timeoutAt": now + seconds,
        "edit": True,
    }
    bus.emit_nowait(EventType.APPROVAL_REQUESTED, requested)
    request = ApprovalRequest(
        tool_call_id=call_id,
        name=INPUT_TOOL,
        args=args,
        requested_at=now,
        timeout_at=now + seconds,
        wait=seconds,
        edit=True,
        parameters=_INPUT_PARAMETERS,
    )
    try:
        decision = await link.desk.wait(bus.run_id, bus.source, request, [link.scope])
    except BaseException:
        resolved: ApprovalResolvedData = {
            "toolCallId": call_id,
            "decision": "cancelled",
            "by": "server",
            "edited": False,
        }
        bus.emit_nowait(EventType.APPROVAL_RESOLVED, resolved)
        raise
    resolved = {
        "toolCallId": call_id,
        "decision": decision.decision,
        "by": decision.by,
        "edited": decision.args is not None,
    }
    if decision.reason is not None:
        resolved["reason"] = decision.reason
    bus.emit_nowait(EventType.APPROVAL_RESOLVED, resolved)
    if decision.decision not in ("approve", "deny"):
        raise _Unanswered(decision.reason or f"the question got no answer ({decision.decision})")
    return _answer(follower, decision, data)


def _answer(follower: TaskFollower, decision: Decision, data: dict[str, Any] | None) -> pb.Message:
    """The message that answers the task: the person's own `reply`, else the decision
    (with its reason) — and, when the task named a call, a data part naming it."""
    reply = (decision.args or {}).get("reply") if decision.decision == "approve" else None
    message = pb.Message(
        message_id=os.urandom(8).hex(),
        role=pb.Role.ROLE_USER,
        task_id=follower.task_id,
        context_id=follower.context_id,
    )
    if isinstance(reply, str) and reply:
        message.parts.append(pb.Part(text=reply))
        return message
    said = decision.decision + (f": {decision.reason}" if decision.reason else "")
    message.parts.append(pb.Part(text=said))
    if data is not None and isinstance(data.get("toolCallId"), str):
        named: dict[str, Any] = {"decision": decision.decision, "toolCallId": data["toolCallId"]}
        if decision.reason:
            named["reason"] = decision.reason
        message.parts.append(json_format.ParseDict({"data": named}, pb.Part()))
    return message


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
