"""`POST /ag-ui/AGENT` on `orchestrator serve` (`server.ag_ui: true`): an AG-UI
`RunAgentInput` in, the run as the AG-UI event stream (SSE) out, behind the tokens.

Imported only when `server.ag_ui` is on (the `agui` extra). The agent is the path's
last segment (`/ag-ui/planner`), else `forwardedProps.agent`; the task is the last
user message of `messages`. The run starts here like the `run` op (owned by the
token, in the journal, live in the console); the stream follows it from the journal
(`orchestrator/agui/mapping.py` maps each event) until RUN_FINISHED / RUN_ERROR. A
client that drops does not stop the run: RUN_STARTED's `metadata.runId` (and the
`x-orchestrator-run-id` header) name it, to follow it on `/ws`.
"""

from __future__ import annotations

from collections.abc import MutableMapping
from typing import TYPE_CHECKING, Any

import trio
from ag_ui.core import RunAgentInput
from ag_ui.encoder import EventEncoder
from pydantic import ValidationError

from orchestrator.agui.mapping import AguiStream
from orchestrator.server.endpoints import Refused, authorize, refuse, serve_connection, start_run
from orchestrator.server.follow import follow_run

if TYPE_CHECKING:
    from orchestrator.server.app import ServerApp

__all__ = ["AguiEndpoint"]

PREFIX = "/ag-ui"


class AguiEndpoint:
    """The subagents of `app`, each runnable as an AG-UI agent."""

    def __init__(self, app: ServerApp) -> None:
        self.app = app
        self.encoder = EventEncoder()
        self.max_body = max(4 * app.config.limits.max_input_bytes, 1024 * 1024)
        """A RunAgentInput may carry the conversation so far: its JSON is bounded by this."""

    async def serve(self, stream: trio.SocketStream) -> None:
        """Serve one connection routed to `/ag-ui`."""
        await serve_connection(stream, self._asgi, self.app.auth)

    async def _asgi(self, scope: MutableMapping[str, Any], receive: Any, send: Any) -> None:
        if scope["method"] != "POST":
            return await refuse(
                send, 405, "use POST with an AG-UI RunAgentInput", [(b"allow", b"POST")]
            )
        principal = await authorize(self.app, scope, send, writes=True)
        if principal is None:
            return None
        body = await self._body(receive)
        if body is None:
            return await refuse(send, 413, f"the request body is over {self.max_body} bytes")
        try:
            run_input = RunAgentInput.model_validate_json(body)
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first.get("loc", ())) or "body"
            return await refuse(
                send, 400, f"not an AG-UI RunAgentInput: {where}: {first.get('msg')}"
            )
        agent_id = _agent_of(scope["path"], run_input)
        if agent_id is None:
            return await refuse(
                send, 400, "name the agent: POST /ag-ui/AGENT, or forwardedProps.agent"
            )
        task = _task_of(run_input)
        if task is None:
            return await refuse(
                send, 400, "messages holds no user message with text: nothing to do"
            )
        app = self.app
        try:
            started = await start_run(app, principal, agent_id, task)
        except Refused as exc:
            return await refuse(send, exc.status, exc.message)
        run_id = started.run_id
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [
                    (b"content-type", self.encoder.get_content_type().encode()),
                    (b"cache-control", b"no-cache"),
                    (b"x-orchestrator-run-id", run_id.encode()),
                ],
            }
        )
        stream = AguiStream(run_id, thread_id=run_input.thread_id, agui_run_id=run_input.run_id)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_until_gone, receive, nursery.cancel_scope)
            async for entries in follow_run(app.journal, run_id):
                chunk = "".join(
                    self.encoder.encode(out)
                    for entry in entries
                    for out in stream.feed(entry.event)
                )
                if chunk:
                    await send(
                        {"type": "http.response.body", "body": chunk.encode(), "more_body": True}
                    )
            await send({"type": "http.response.body", "body": b""})
            nursery.cancel_scope.cancel()
        return None

    async def _body(self, receive: Any) -> bytes | None:
        body = bytearray()
        while True:
            message = await receive()
            if message["type"] != "http.request":
                return bytes(body)
            body += message.get("body", b"")
            if len(body) > self.max_body:
                return None
            if not message.get("more_body"):
                return bytes(body)


async def _until_gone(receive: Any, scope: trio.CancelScope) -> None:
    """The client left: stop streaming (the run goes on; `/ws` can follow it)."""
    while (await receive())["type"] != "http.disconnect":
        pass
    scope.cancel()


def _agent_of(path: str, run_input: RunAgentInput) -> str | None:
    rest = path.removeprefix(PREFIX).strip("/")
    if rest:
        return rest
    props = run_input.forwarded_props
    agent = props.get("agent") if isinstance(props, dict) else None
    return agent if isinstance(agent, str) and agent else None


def _task_of(run_input: RunAgentInput) -> str | None:
    """The text of the last user message (its text parts joined)."""
    for message in reversed(run_input.messages):
        if getattr(message, "role", None) != "user":
            continue
        content = getattr(message, "content", None)
        if isinstance(content, str):
            return content or None
        if isinstance(content, list):
            texts = [getattr(part, "text", None) for part in content]
            text = "\n".join(t for t in texts if isinstance(t, str))
            return text or None
    return None
