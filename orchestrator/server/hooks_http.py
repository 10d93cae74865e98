"""`POST /hooks/AGENT` (`server.hooks: true`): another system's event starts a run.

The request carries a token of `server.tokens` (a header, or `?token=` for a sender
that sets no header, as GitHub's webhooks do) and a JSON body; a hook with a secret
(`hooks.<agent>.secret_env`) must be signed too. The run's input is the body's `input`,
or the hook's template filled from the body; it starts as the `run` op starts one,
in a new thread or the hook's, and the answer is `202` with its runId once its
RUN_STARTED is journaled (docs/webhooks.md).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import MutableMapping
from typing import Any

import trio

from orchestrator.config import HookConfig
from orchestrator.core.hooks import fill, signature_ok, slack_signature_ok
from orchestrator.core.threads import MAX_THREAD_ID, ThreadAsk
from orchestrator.errors import OrchestratorError, http_status
from orchestrator.server.endpoints import (
    DoorContext,
    Refused,
    authorize,
    read_body,
    refuse,
    serve_connection,
    start_run,
)

__all__ = ["HooksEndpoint"]


class HooksEndpoint:
    """Starts runs from HTTP requests, one subagent per path."""

    def __init__(self, app: DoorContext) -> None:
        self.app = app
        self.max_body = max(4 * app.config.limits.max_input_bytes, 1024 * 1024)
        """A request body past this is refused (413) before it is read whole."""

    async def serve(self, stream: trio.abc.Stream) -> None:
        """Serve one connection routed to `/hooks`."""
        await serve_connection(stream, self._asgi, self.app.auth)

    async def _asgi(self, scope: MutableMapping[str, Any], receive: Any, send: Any) -> None:
        if scope["method"] != "POST":
            return await refuse(send, 405, "use POST with a JSON body", [(b"allow", b"POST")])
        agent_id = scope["path"].removeprefix("/hooks").strip("/")
        if not agent_id or "/" in agent_id:
            return await refuse(send, 404, "name the agent: POST /hooks/AGENT")
        principal = await authorize(self.app, scope, send, writes=True)
        if principal is None:
            return None
        body = await read_body(receive, self.max_body)
        if body is None:
            return await refuse(send, 413, f"the request body is over {self.max_body} bytes")
        hook = self.app.config.hooks.get(agent_id, HookConfig())
        if hook.secret_env is not None:
            refused = _unsigned(hook, scope, body)
            if refused is not None:
                return await refuse(send, 401, refused)
        try:  # (standard JSON only, as every other door: no NaN or Infinity)
            data = json.loads(body, parse_constant=_not_json)
        except (ValueError, RecursionError) as exc:  # (nested past the parser's depth)
            return await refuse(send, 400, f"the body is not JSON: {exc}")
        if hook.signature == "slack" and _challenge(data) is not None:
            # Slack's check of a new Request URL: the challenge back, no run.
            return await _answer(send, 200, {"challenge": _challenge(data)})
        try:
            task, thread = _start_of(hook, data, self.app.config.limits.max_input_bytes)
            started = await start_run(self.app, principal, agent_id, task, thread=thread)
        except OrchestratorError as exc:  # shown by its code (errors.py)
            return await refuse(send, http_status(exc), exc.message)
        return await _answer(send, 202, {"runId": started.run_id, "threadId": started.thread_id})


async def _answer(send: Any, status: int, answer: dict[str, Any]) -> None:
    payload = json.dumps(answer).encode()
    headers = [(b"content-type", b"application/json")]
    headers.append((b"content-length", str(len(payload)).encode()))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": payload})


def _unsigned(hook: HookConfig, scope: MutableMapping[str, Any], body: bytes) -> str | None:
    """Why the request is not signed as `hook` says (None: it is)."""
    assert hook.secret_env is not None
    secret = os.environ.get(hook.secret_env, "").encode()
    if hook.signature == "slack":
        stamp = _header(scope, "X-Slack-Request-Timestamp")
        given = _header(scope, "X-Slack-Signature")
        if secret and slack_signature_ok(secret, body, stamp, given, time.time()):
            return None
        return (
            "unauthorized: X-Slack-Signature does not sign the body (or "
            "X-Slack-Request-Timestamp is missing or over 5 minutes from now)"
        )
    if secret and signature_ok(secret, body, _header(scope, hook.signature_header)):
        return None
    return f"unauthorized: {hook.signature_header} does not sign the body"


def _challenge(data: Any) -> str | None:
    """Slack's `url_verification` request's challenge (None: not one)."""
    if isinstance(data, dict) and data.get("type") == "url_verification":
        challenge = data.get("challenge")
        return challenge if isinstance(challenge, str) and len(challenge) <= 512 else None
    return None


def _start_of(hook: HookConfig, data: Any, limit: int) -> tuple[str, ThreadAsk | None]:
    """The run's input and thread, from the hook's templates (or the body's `input`).

    Raises:
        Refused: 400 no input, or a thread id past its limit; 413 an input past `limit`
            (`limits.max_input_bytes`), refused while it is filled.
    """
    if hook.input is not None:
        try:
            task = fill(hook.input, data, limit)
        except ValueError:
            raise Refused(
                413, f"the input is over limits.max_input_bytes ({limit} bytes)"
            ) from None
    else:
        given = data.get("input") if isinstance(data, dict) else None
        if not isinstance(given, str):
            raise Refused(
                400, 'the body has no "input" string (or give the hook an input template)'
            )
        task = given
    if not task.strip():
        raise Refused(400, "the run's input is empty")
    if hook.thread is None:
        return task, None
    try:
        thread_id = fill(hook.thread, data, MAX_THREAD_ID)
    except ValueError:
        raise Refused(400, f"the hook's thread is over {MAX_THREAD_ID} characters") from None
    if not 0 < len(thread_id) <= MAX_THREAD_ID:
        raise Refused(
            400, f"the hook's thread is 1 to {MAX_THREAD_ID} characters, not {len(thread_id)}"
        )
    return task, ThreadAsk(thread_id=thread_id, multitask=hook.multitask)


def _not_json(name: str) -> Any:
    """`NaN`, `Infinity` and `-Infinity`: Python's JSON reads them, JSON has none."""
    raise ValueError(f"{name} is not a JSON value (RFC 8259)")


def _header(scope: MutableMapping[str, Any], name: str) -> str | None:
    wanted = name.lower().encode("latin-1")
    for key, value in scope["headers"]:
        if key.lower() == wanted:
            return str(value.decode("latin-1"))
    return None
