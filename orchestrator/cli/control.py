"""`orchestrator cancel`: steer a run on a server from a shell, one op and its answer."""

from __future__ import annotations

import sys

import msgspec
import trio
from websockets.exceptions import ConnectionClosed, InvalidHandshake, InvalidStatus, InvalidURI
from websockets.trio.client import connect

from orchestrator.protocol import Ack, Cancel, ErrorFrame, decode_server_frame

__all__ = ["cancel_main"]

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
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    if origin:
        headers["Origin"] = origin
    request = Cancel(op="cancel", id=_ID, run_id=run_id, agent_key=agent_key, reason=reason)
    what = f"agent {agent_key} of run {run_id}" if agent_key else f"run {run_id}"
    try:
        with trio.fail_after(answer_within):
            async with connect(url, additional_headers=headers or None, max_size=None) as ws:
                await ws.send(msgspec.json.encode(request).decode())
                while True:
                    frame = decode_server_frame(await ws.recv())
                    if isinstance(frame, Ack) and frame.id == _ID:
                        print(f"cancelling {what}")
                        return 0
                    if isinstance(frame, ErrorFrame) and frame.id in (_ID, None):
                        print(f"error: {frame.code}: {frame.message}", file=sys.stderr)
                        return 1
    except InvalidStatus as exc:
        print(f"error: HTTP {exc.response.status_code} from {url}", file=sys.stderr)
    except (OSError, InvalidHandshake, InvalidURI, ConnectionClosed) as exc:
        print(f"error: cannot reach {url}: {exc}", file=sys.stderr)
    except trio.TooSlowError:
        print(f"error: no answer from {url} within {answer_within:g} s", file=sys.stderr)
    return 2
