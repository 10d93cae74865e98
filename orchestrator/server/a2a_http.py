"""`/a2a/AGENT` on `orchestrator serve` (`server.a2a: true`): each subagent served as
an A2A agent, behind the same tokens.

Imported only when `server.a2a` is on (the `a2a` extra). The protocol side is the
`a2a-sdk`'s own (its Starlette routes: the agent card at
`/a2a/AGENT/.well-known/agent-card.json`, JSON-RPC at `/a2a/AGENT/`, JSON and SSE
encoding, error codes), run under trio through the ASGI bridge; the SDK's default
request handler is asyncio-only, so `RunTasks` answers its requests from our runs:
a message starts a run of AGENT (owned by the token, journaled, live in the
console and on `/ws`), its task id *is* the runId, and the task's updates come from
the run's journal (`orchestrator/a2a/mapping.py`, `TaskView`).
"""

from __future__ import annotations

import json
import re
from collections.abc import AsyncGenerator, MutableMapping
from contextlib import aclosing
from typing import TYPE_CHECKING, Any

import trio
from a2a.server.context import ServerCallContext
from a2a.server.request_handlers import RequestHandler
from a2a.server.request_handlers.response_helpers import agent_card_to_dict
from a2a.server.routes import DefaultServerCallContextBuilder, create_jsonrpc_routes
from a2a.types import a2a_pb2 as pb
from a2a.utils.errors import (
    A2AError,
    ExtendedAgentCardNotConfiguredError,
    InternalError,
    InvalidParamsError,
    InvalidRequestError,
    PushNotificationNotSupportedError,
    TaskNotCancelableError,
    TaskNotFoundError,
    UnsupportedOperationError,
)
from starlette.applications import Starlette
from starlette.requests import Request

from orchestrator.a2a.mapping import TaskUpdate, TaskView, answer_of, files_of, text_of
from orchestrator.core.threads import MAX_THREAD_ID, ThreadAsk
from orchestrator.core.webhooks import url_allowed
from orchestrator.errors import OrchestratorError, shown
from orchestrator.server.a2a_push import KIND, config_of, spec_of
from orchestrator.server.auth import Principal
from orchestrator.server.endpoints import (
    DoorContext,
    authorize,
    read_body,
    refuse,
    replayed,
    serve_connection,
    start_run,
)
from orchestrator.server.follow import follow_run
from orchestrator.storage.runlog import UnknownRun

if TYPE_CHECKING:
    from orchestrator.storage.journal import RunLog
    from orchestrator.webhooks.outbox import Outbox

__all__ = ["A2aEndpoint"]

PREFIX = "/a2a"
CARD_PATH = "/.well-known/agent-card.json"
_PRINCIPAL, _AGENT = "orchestrator.principal", "orchestrator.agent"
MAX_CONTEXT_ID = MAX_THREAD_ID
MAX_PUSH_ID = 256
"""Longest push config id kept."""
_INPUT_REQUIRED = pb.TaskState.TASK_STATE_INPUT_REQUIRED
"""Longest `contextId` a message may give (it is kept with the run)."""
AFTER_SEQ_HEADER = "a2a-orchestrator-after-seq"
"""SubscribeToTask's cursor (the request has no field for one, so it travels as the
request's metadata: an HTTP header, as A2A's service parameters do)."""
CURSOR_EXTENSION = "urn:agent-orchestrator:a2a:after-seq:v1"
"""The card's name for that cursor (an optional extension: `capabilities.extensions`)."""
BEARER = "bearer"
"""The card's name for the bearer-token scheme (`Authorization: Bearer <token>`)."""


_ERRORS: dict[int, type[A2AError]] = {
    -32602: InvalidParamsError,
    -32600: InvalidRequestError,
    -32001: TaskNotFoundError,
    -32603: InternalError,
}
"""The A2A SDK's error of each JSON-RPC code of errors.py's table."""


def a2a_error(error: OrchestratorError) -> A2AError:
    """`error` as the A2A SDK's error of its JSON-RPC code (errors.py)."""
    return _ERRORS.get(shown(error).jsonrpc, InternalError)(message=error.message)


class A2aEndpoint:
    """The subagents of `app`, each an A2A agent at `/a2a/AGENT/`."""

    def __init__(self, app: DoorContext) -> None:
        self.app = app
        self.handler = RunTasks(app)
        self._apps: dict[str, Starlette] = {}
        self.max_body = max(4 * app.config.limits.max_input_bytes, 1024 * 1024)

    async def serve(self, stream: trio.abc.Stream) -> None:
        """Serve one connection routed to `/a2a`."""
        await serve_connection(stream, self._asgi, self.app.auth)

    async def _asgi(self, scope: MutableMapping[str, Any], receive: Any, send: Any) -> None:
        path: str = scope["path"]
        agent_id = path.removeprefix(PREFIX).strip("/").split("/", 1)[0]
        specs = self.app.orchestrator.catalog.specs
        if agent_id not in specs:
            known = ", ".join(sorted(specs)) or "none"
            return await refuse(send, 404, f"no agent {agent_id!r} here (agents: {known})")
        if path.endswith(CARD_PATH):  # public: it names the agent and how to authenticate
            return await self._card(scope, send, agent_id)
        principal = await authorize(self.app, scope, send, writes=False)
        if principal is None:
            return None
        body = await read_body(receive, self.max_body)
        if body is None:
            return await refuse(send, 413, f"the request body is over {self.max_body} bytes")
        scope.setdefault("state", {}).update({_PRINCIPAL: principal, _AGENT: agent_id})
        await self._app_of(agent_id)(scope, replayed(body, receive), _whole_seqs(send))
        return None

    async def _card(self, scope: MutableMapping[str, Any], send: Any, agent_id: str) -> None:
        """The agent's card, naming this server as the client reached it (`Host`), and,
        when the server has tokens, the bearer scheme every other request needs."""
        spec = self.app.orchestrator.catalog.specs[agent_id]
        host = dict(scope["headers"]).get(b"host", b"").decode("latin-1") or "localhost"
        url = f"{scope.get('scheme', 'http')}://{host}{PREFIX}/{agent_id}/"
        card = pb.AgentCard(
            name=spec.display_name,
            description=spec.description,
            version="1",
            default_input_modes=["text/plain"],
            default_output_modes=["text/plain"],
            capabilities=pb.AgentCapabilities(
                streaming=True,
                push_notifications=self.app.outbox is not None
                and bool(self.app.config.server.webhook_urls),
                extensions=[
                    pb.AgentExtension(
                        uri=CURSOR_EXTENSION,
                        description=(
                            f"SubscribeToTask resumes after a seq: send the highest "
                            f"metadata.seq you have in the {AFTER_SEQ_HEADER} header"
                        ),
                        required=False,
                    )
                ],
            ),
            supported_interfaces=[
                pb.AgentInterface(protocol_binding="JSONRPC", url=url, protocol_version="1.0")
            ],
            skills=[
                pb.AgentSkill(
                    id=agent_id,
                    name=spec.display_name,
                    description=spec.description,
                    tags=["orchestrator"],
                )
            ],
        )
        if self.app.auth.enabled:
            card.security_schemes[BEARER].http_auth_security_scheme.CopyFrom(
                pb.HTTPAuthSecurityScheme(
                    scheme="Bearer",
                    description="a token of the server's server.tokens (docs/server.md)",
                )
            )
            card.security_requirements.add().schemes[BEARER].SetInParent()
        body = json.dumps(agent_card_to_dict(card)).encode()
        headers = [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(body)).encode()),
        ]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": body})

    def _app_of(self, agent_id: str) -> Starlette:
        """The SDK's JSON-RPC route for `agent_id`, answered by `RunTasks`."""
        app = self._apps.get(agent_id)
        if app is None:
            routes = create_jsonrpc_routes(
                self.handler, rpc_url=f"{PREFIX}/{agent_id}/", context_builder=_Context()
            )
            app = self._apps[agent_id] = Starlette(routes=routes)
        return app


_FLOAT_SEQ = re.compile(rb'(?<!\\)"seq": ?(\d{1,18})\.0(?=[,}\s])')
"""`"seq": 17.0` outside a JSON string (where its quote would be escaped)."""


def _whole_seqs(send: Any) -> Any:
    """`send`, with each `metadata.seq` written as the integer it is: A2A metadata is a
    protobuf Struct, whose numbers are doubles, and the SDK writes them so (`17.0`)."""

    async def sending(message: Any) -> None:
        if message["type"] == "http.response.body" and b'"seq":' in message.get("body", b""):
            message = {**message, "body": _FLOAT_SEQ.sub(rb'"seq": \1', message["body"])}
        elif message["type"] == "http.response.start":
            # a body's length may change: let h11 frame it instead
            headers = [
                (k, v) for k, v in message.get("headers", ()) if k.lower() != b"content-length"
            ]
            message = {**message, "headers": headers}
        await send(message)

    return sending


class _Context(DefaultServerCallContextBuilder):
    """The SDK's call context, with who asked (checked by `authorize`) and the agent."""

    def build(self, request: Request) -> ServerCallContext:
        context = super().build(request)
        context.state[_PRINCIPAL] = request.scope["state"][_PRINCIPAL]
        context.state[_AGENT] = request.scope["state"][_AGENT]
        return context


def _cursor(context: ServerCallContext) -> int | None:
    """The SubscribeToTask cursor the request carries, if any.

    Raises:
        InvalidParamsError: a header that is not a seq.
    """
    headers = context.state.get("headers") or {}
    raw = headers.get(AFTER_SEQ_HEADER)
    if raw is None:
        return None
    whole, dot, zeros = raw.partition(".")  # (3.0: a JSON number's way of writing 3)
    if not (whole.isascii() and whole.isdigit() and len(whole) <= 18) or (dot and zeros.strip("0")):
        raise InvalidParamsError(message=f"{AFTER_SEQ_HEADER} must be a seq (an integer >= 0)")
    return int(whole)


def _shown(config: pb.TaskPushNotificationConfig) -> pb.TaskPushNotificationConfig:
    """A push config as it is sent back: without its token and credentials, to anyone
    (the owner and an admin too): like a webhook's secret, they only go to its URL."""
    shown = pb.TaskPushNotificationConfig()
    shown.CopyFrom(config)
    shown.ClearField("token")
    if shown.HasField("authentication"):
        shown.authentication.ClearField("credentials")
    return shown


def _view(log: RunLog) -> TaskView:
    """A run's task, in the context its first message named (else the runId)."""
    record = log.record
    return TaskView(record.run_id, record.context_id or record.thread_id or record.run_id)


class RunTasks(RequestHandler):
    """A2A requests answered from this server's runs (one task = one run)."""

    def __init__(self, app: DoorContext) -> None:
        self.app = app

    # -- messages: a new run each ---------------------------------------------------

    async def on_message_send(
        self, params: pb.SendMessageRequest, context: ServerCallContext
    ) -> pb.Task | pb.Message:
        view = await self._start(params, context)
        if params.configuration.return_immediately:
            return view.task()
        async with aclosing(self._follow(view, after=view.seq)) as updates:
            async for _ in updates:
                if view.state == _INPUT_REQUIRED:
                    break  # interrupted: the client's next message (with the taskId) answers
        return view.task()

    async def on_message_send_stream(
        self, params: pb.SendMessageRequest, context: ServerCallContext
    ) -> AsyncGenerator[pb.Task | TaskUpdate, None]:
        view = await self._start(params, context)
        yield view.task()
        async with aclosing(self._follow(view, after=view.seq)) as updates:
            async for update in updates:
                yield update
                if view.state == _INPUT_REQUIRED:
                    return  # interrupted: the client's next message (with the taskId) answers

    async def _start(self, params: pb.SendMessageRequest, context: ServerCallContext) -> TaskView:
        principal: Principal = context.state[_PRINCIPAL]
        if principal.read_only:
            raise InvalidRequestError(message="a viewer token may not start runs")
        message = params.message
        if message.task_id:
            return await self._answer(message, principal, context)
        task = text_of(message.parts)
        if not task:
            raise InvalidParamsError(message="the message has no text part: nothing to do")
        context_id = message.context_id or None
        if context_id is not None and len(context_id) > MAX_CONTEXT_ID:
            raise InvalidParamsError(message=f"contextId is over {MAX_CONTEXT_ID} characters")
        thread = ThreadAsk(thread_id=context_id) if context_id is not None else None
        try:
            started = await start_run(
                self.app,
                principal,
                context.state[_AGENT],
                task,
                context_id=context_id,
                thread=thread,
                attachments=files_of(message.parts),
            )
        except OrchestratorError as exc:
            raise a2a_error(exc) from None
        run_id = started.run_id
        if params.configuration.HasField("task_push_notification_config"):
            push = pb.TaskPushNotificationConfig()
            push.CopyFrom(params.configuration.task_push_notification_config)
            push.task_id = run_id
            await self._push(push, from_start=True)  # (checked after the start: a refused
            # URL is this request's error; the run goes on without it)
        return TaskView(run_id, context_id or started.thread_id or run_id)

    async def _answer(
        self, message: pb.Message, principal: Principal, context: ServerCallContext
    ) -> TaskView:
        """A message to a task in `input-required`: the answer to its waiting call (the
        oldest, or the one its data part names), given as the `approve` op gives one."""
        task_id = message.task_id
        log = await self._visible(task_id, context)
        view = _view(log)
        for entry in await self.app.journal.read_all(task_id, log.committed):
            view.updates(entry.event)
        if view.state != _INPUT_REQUIRED:
            raise InvalidParamsError(
                message=f"task {task_id} is not waiting for input: a message with a taskId "
                "answers a task in input-required (a new message, without one, starts a task)"
            )
        answer = answer_of(message, view.waiting, principal.name or "client")
        if isinstance(answer, str):
            raise InvalidParamsError(message=answer)
        try:
            await self.app.runs.approve(task_id, answer)
        except OrchestratorError as exc:
            raise a2a_error(exc) from None
        return view

    async def _follow(self, view: TaskView, after: int = 0) -> AsyncGenerator[TaskUpdate, None]:
        async with aclosing(follow_run(self.app.journal, view.task_id, after)) as batches:
            async for entries in batches:
                for entry in entries:
                    for update in view.updates(entry.event):
                        yield update

    # -- tasks: runs ------------------------------------------------------------------

    async def on_get_task(
        self, params: pb.GetTaskRequest, context: ServerCallContext
    ) -> pb.Task | None:
        log = await self._visible(params.id, context)
        view = _view(log)
        entries = await self.app.journal.read(params.id, 0, log.committed)
        for entry in entries:
            view.updates(entry.event)
        return view.task()

    async def on_cancel_task(
        self, params: pb.CancelTaskRequest, context: ServerCallContext
    ) -> pb.Task | None:
        log = await self._visible(params.id, context)
        principal: Principal = context.state[_PRINCIPAL]
        if principal.read_only:
            raise InvalidRequestError(message="a viewer token may not cancel runs")
        if log.finished:
            raise TaskNotCancelableError(message=f"task {params.id} has ended")
        await self.app.runs.cancel(params.id, None, "cancelled through A2A")
        view = _view(log)
        with trio.move_on_after(5):  # its end, as the run journals it
            async for _ in self._follow(view):
                pass
        return view.task()

    async def on_subscribe_to_task(
        self, params: pb.SubscribeToTaskRequest, context: ServerCallContext
    ) -> AsyncGenerator[pb.Task | TaskUpdate, None]:
        """The task as it stands (A2A: the first event MUST be the Task), then its
        updates as the run goes on; a task that has ended cannot be subscribed to.

        With the cursor header (`AFTER_SEQ_HEADER`: the highest `metadata.seq` the
        client has), the Task is as it stood at that seq and the updates are exactly
        those after it: a client that dropped misses nothing and sees nothing twice.
        """
        log = await self._visible(params.id, context)
        if log.finished:
            raise UnsupportedOperationError(
                message=f"task {params.id} has ended: GetTask returns it as it ended"
            )
        seen = _cursor(context)
        if seen is None:
            seen = log.committed
        elif seen > log.committed:
            raise InvalidParamsError(
                message=f"{AFTER_SEQ_HEADER} {seen} is past the task's last event ({log.committed})"
            )
        view = _view(log)
        for entry in await self.app.journal.read_all(params.id, seen):
            if entry.seq <= seen:
                view.updates(entry.event)
        view.seq = seen
        yield view.task()
        async for update in self._follow(view, after=seen):
            yield update

    async def _owned(self, run_id: str, context: ServerCallContext) -> RunLog:
        """`_visible`, and the asker may change the task: its owner or an admin (a
        viewer sees every task and changes none; another user sees none of it).

        Raises:
            InvalidRequestError: a viewer token.
        """
        log = await self._visible(run_id, context)
        principal: Principal = context.state[_PRINCIPAL]
        if principal.read_only:
            raise InvalidRequestError(message="a viewer token may not change a task's push configs")
        return log

    async def _visible(self, run_id: str, context: ServerCallContext) -> RunLog:
        principal: Principal = context.state[_PRINCIPAL]
        try:
            log = await self.app.journal.mirrors.find(run_id)
        except UnknownRun:
            raise TaskNotFoundError(message=f"no task {run_id}") from None
        record = log.record
        if not principal.may_see(record.owner) or record.agent_id != context.state[_AGENT]:
            raise TaskNotFoundError(message=f"no task {run_id}")
        return log

    # -- what this server does not offer ----------------------------------------------

    async def on_list_tasks(
        self, params: pb.ListTasksRequest, context: ServerCallContext
    ) -> pb.ListTasksResponse:
        raise UnsupportedOperationError(message="list the runs with the runs op on /ws")

    # -- push notifications: channels of the webhooks outbox ---------------------------

    async def on_create_task_push_notification_config(
        self, params: pb.TaskPushNotificationConfig, context: ServerCallContext
    ) -> pb.TaskPushNotificationConfig:
        await self._owned(params.task_id, context)
        return _shown(await self._push(params, from_start=False))

    async def _push(
        self, params: pb.TaskPushNotificationConfig, *, from_start: bool
    ) -> pb.TaskPushNotificationConfig:
        """Keep `params` as a channel of its task: every update from now (`from_start`:
        from the task's first) is pushed to its URL."""
        outbox = self._outbox()
        allowed = self.app.config.server.webhook_urls
        if not params.url or not url_allowed(params.url, allowed):
            raise InvalidParamsError(
                message=f"url {params.url[:200]!r} is not under one of this server's "
                f"webhook_urls ({', '.join(allowed)})"
            )
        config = pb.TaskPushNotificationConfig()
        config.CopyFrom(params)
        config.id = config.id or config.task_id
        if len(config.id) > MAX_PUSH_ID:
            raise InvalidParamsError(message=f"a push config's id is 1 to {MAX_PUSH_ID} characters")
        try:
            await outbox.add_channel(
                config.task_id, f"{KIND}:{config.id}", spec_of(config), from_start=from_start
            )
        except LookupError as exc:
            raise InvalidParamsError(message=str(exc)) from None
        return config

    async def on_get_task_push_notification_config(
        self, params: pb.GetTaskPushNotificationConfigRequest, context: ServerCallContext
    ) -> pb.TaskPushNotificationConfig:
        await self._visible(params.task_id, context)
        kept = self._outbox().channels(params.task_id, KIND).get(params.id or params.task_id)
        if kept is None:
            raise TaskNotFoundError(
                message=f"task {params.task_id} has no push config {params.id!r}"
            )
        return _shown(config_of(kept))

    async def on_list_task_push_notification_configs(
        self, params: pb.ListTaskPushNotificationConfigsRequest, context: ServerCallContext
    ) -> pb.ListTaskPushNotificationConfigsResponse:
        await self._visible(params.task_id, context)
        kept = self._outbox().channels(params.task_id, KIND)
        return pb.ListTaskPushNotificationConfigsResponse(
            configs=[_shown(config_of(spec)) for spec in kept.values()]
        )

    async def on_delete_task_push_notification_config(
        self, params: pb.DeleteTaskPushNotificationConfigRequest, context: ServerCallContext
    ) -> None:
        await self._owned(params.task_id, context)
        if not await self._outbox().remove_channel(params.task_id, f"{KIND}:{params.id}"):
            raise TaskNotFoundError(
                message=f"task {params.task_id} has no push config {params.id!r}"
            )

    def _outbox(self) -> Outbox:
        outbox = self.app.outbox
        if outbox is None or not self.app.config.server.webhook_urls:
            raise PushNotificationNotSupportedError(
                message="push notifications need server.webhook_urls (the URLs they may go to)"
            )
        return outbox

    async def on_get_extended_agent_card(
        self, params: pb.GetExtendedAgentCardRequest, context: ServerCallContext
    ) -> pb.AgentCard:
        raise ExtendedAgentCardNotConfiguredError()
