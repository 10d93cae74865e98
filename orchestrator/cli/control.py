"""`orchestrator cancel | approve | pending`: steer a run on a server from a shell, one op
and its answer."""

from __future__ import annotations

import sys
from typing import Any

import msgspec
import trio
from websockets.exceptions import ConnectionClosed, InvalidHandshake, InvalidStatus, InvalidURI
from websockets.trio.client import connect

from orchestrator.cli.watch import refusal
from orchestrator.client import ClientError, auth_headers, refused_upgrade
from orchestrator.protocol import (
    Ack,
    Approve,
    Cancel,
    ErrorFrame,
    Pending,
    PendingReply,
    ServerFrame,
    decode_server_frame,
)

__all__ = ["approve_main", "cancel_main", "pending_main"]

_ID = "cli"


async def cancel_main(
    url: str,
    run_id: str,
    *,
    agent_key: str | None,
    reason: str | None,
    token: str | None,
    origin: str | None = None,
    answer_within: float = 30.0,
) -> int:
    """Send `cancel` and wait for its answer: 0 acknowledged, 1 refused, 2 no server."""
    what = f"agent {agent_key} of run {run_id}" if agent_key else f"run {run_id}"
    request = Cancel(op="cancel", id=_ID, run_id=run_id, agent_key=agent_key, reason=reason)
    reply = await _ask(url, request, token=token, origin=origin, answer_within=answer_within)
    if isinstance(reply, Ack):
        print(f"cancelling {what}")
    return _code(reply)


async def approve_main(
    url: str,
    run_id: str,
    tool_call_id: str,
    *,
    deny: bool,
    reason: str | None,
    args: dict[str, Any] | None,
    token: str | None,
    agent_key: str | msgspec.UnsetType | None = msgspec.UNSET,
    origin: str | None = None,
    answer_within: float = 30.0,
) -> int:
    """Send `approve` and wait for its answer: 0 acknowledged, 1 refused, 2 no server."""
    request = Approve(
        op="approve",
        id=_ID,
        run_id=run_id,
        tool_call_id=tool_call_id,
        agent_key=agent_key,
        decision="deny" if deny else "approve",
        reason=reason,
        args=args,
    )
    reply = await _ask(url, request, token=token, origin=origin, answer_within=answer_within)
    if isinstance(reply, Ack):
        print(f"{'denied' if deny else 'approved'} tool call {tool_call_id} of run {run_id}")
    return _code(reply)


async def pending_main(
    url: str,
    run_id: str | None,
    *,
    as_json: bool,
    token: str | None,
    origin: str | None = None,
    answer_within: float = 30.0,
) -> int:
    """List the waiting tool calls (one line each, or JSON): 0 listed, 1 refused, 2 no server."""
    request = Pending(op="pending", id=_ID, run_id=run_id)
    reply = await _ask(url, request, token=token, origin=origin, answer_within=answer_within)
    if isinstance(reply, PendingReply):
        if as_json:
            print(msgspec.json.encode(reply.approvals).decode())
            return 0
        for item in reply.approvals:
            args = msgspec.json.encode(item.args).decode()
            who = item.agent_key or f"{item.agent_id} (root)"
            print(f"{item.run_id}  {item.tool_call_id}  {item.name}({args})  by {who}")
        if not reply.approvals:
            print("no tool call waits for approval")
        return 0
    return _code(reply)


async def _ask(
    url: str,
    request: msgspec.Struct,
    *,
    token: str | None,
    origin: str | None,
    answer_within: float,
) -> ServerFrame | None:
    """Send one op and return the reply to it (None: no server, reported on stderr)."""
    try:
        headers = auth_headers(token, origin)
        with trio.fail_after(answer_within):
            async with connect(url, additional_headers=headers, max_size=None) as ws:
                await ws.send(msgspec.json.encode(request).decode())
                while True:
                    frame = decode_server_frame(await ws.recv())
                    if isinstance(frame, ErrorFrame) and frame.id in (_ID, None):
                        print(f"error: {frame.code}: {frame.message}", file=sys.stderr)
                        return frame
                    if getattr(frame, "id", None) == _ID:
                        return frame
    except ClientError as exc:
        print(f"error: {exc.message}", file=sys.stderr)
    except InvalidStatus as exc:  # (the same words as every client command)
        said, _ = refusal(refused_upgrade(url, exc))
        print(f"error: {said}", file=sys.stderr)
    except (OSError, InvalidHandshake, InvalidURI, ConnectionClosed) as exc:
        print(f"error: cannot reach {url}: {exc}", file=sys.stderr)
    except trio.TooSlowError:
        print(f"error: no answer from {url} within {answer_within:g} s", file=sys.stderr)
    return None


def _code(reply: ServerFrame | None) -> int:
    if reply is None:
        return 2
    return 1 if isinstance(reply, ErrorFrame) else 0
