"""`POST /ag-ui/AGENT` on `orchestrator serve` (`server.ag_ui: true`): an AG-UI
`RunAgentInput` in, the run as the AG-UI event stream (SSE) out, behind the tokens.

Imported only when `server.ag_ui` is on (the `agui` extra). The agent is the path's
last segment (`/ag-ui/planner`), else `forwardedProps.agent`; the task is the last
user message of `messages`. The run starts here like the `run` op (owned by the
token, in the journal, live in the console); the stream follows it from the journal
(`orchestrator/agui/mapping.py` maps each event) until RUN_FINISHED / RUN_ERROR. A
client that drops does not stop the run: RUN_STARTED's `metadata.runId` (and the
`x-orchestrator-run-id` header) name it, to follow it on `/ws`, or here again.

A run may take several requests (AG-UI segments, docs/integrations.md): calls that
wait for a person end one with an interrupt; a `resume[]` answers them (the `approve`
op's decision) and streams on; `forwardedProps: {runId, afterSeq}` reconnects after
a seq. Each continues from the journal after its cursor, nothing kept in between.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Awaitable, Callable, MutableMapping
from contextlib import aclosing
from typing import TYPE_CHECKING, Any, cast, get_args
from urllib.parse import parse_qs

import trio
from ag_ui.core import (
    BaseEvent,
    CustomEvent,
    MessagesSnapshotEvent,
    ResumeEntry,
    RunAgentInput,
    RunFinishedEvent,
    RunStartedEvent,
    UserMessage,
)
from ag_ui.core import Message as AguiMessage
from ag_ui.encoder import EventEncoder
from pydantic import ValidationError
from websockets.datastructures import Headers

from agents.core.attachments import AttachmentIn
from agents.core.messages import Message
from agents.core.payloads import ApprovalRequestedData
from orchestrator.agui.mapping import AguiStream, answer_of, chat_of, parse_interrupt_id
from orchestrator.core.events import EventType
from orchestrator.core.threads import MAX_THREAD_ID, Multitask, ThreadAsk, ThreadError
from orchestrator.errors import OrchestratorError, http_status, shown
from orchestrator.server.endpoints import (
    DoorContext,
    Refused,
    authorize,
    read_body,
    refuse,
    serve_connection,
    start_run,
)
from orchestrator.server.follow import follow_run
from orchestrator.storage.base import RunRecord
from orchestrator.storage.runlog import UNFINISHED, UnknownRun

if TYPE_CHECKING:
    from orchestrator.server.auth import Principal

__all__ = ["HANDLES", "IGNORES", "AguiEndpoint"]

PREFIX = "/ag-ui"
SETTLE_SECONDS = 0.5
"""Calls wait for a person and no event came for this long: the segment ends with an
interrupt (the rest of the tree may still be busy: the next segment carries it)."""
MAX_SETTLE_SECONDS = 2.0
"""…or this long after a call began to wait, however busy the rest of the tree is."""
MAX_RESUME_ENTRIES = 1000
PRIME_BATCH = 1024
CORS_HEADERS = b"authorization, content-type, accept, last-event-id"
"""The request headers a page of an allowed origin may send (a preflight's answer)."""


HANDLES = frozenset({EventType.APPROVAL_REQUESTED})
"""Event types the AG-UI door reads itself: the call a `resume[]` entry answers (the run's
events become AG-UI events in `agui/mapping.py`)."""
IGNORES = frozenset(
    {
        EventType.RUN_STARTED,
        EventType.AGENT_STARTED,
        EventType.REASONING,
        EventType.TOOL_CALL_DELTA,
        EventType.TOOL_CALL,
        EventType.TOOL_RESULT,
        EventType.AGENT_RESULT,
        EventType.AGENT_ERROR,
        EventType.USER_MESSAGE,
        EventType.TOOL_PROGRESS,
        EventType.RUN_RESUMED,
        EventType.TURN_ABANDONED,
        EventType.APPROVAL_RESOLVED,
        EventType.COMPACTION_STARTED,
        EventType.COMPACTION_FINISHED,
        EventType.AGENT_STALLED,
        EventType.MODEL_FALLBACK,
        EventType.RUN_FINISHED,
    }
)
"""Event types it leaves to `agui/mapping.py`; tests/unit/test_payloads.py checks that
every type is in one of the two."""


class AguiEndpoint:
    """The subagents of `app`, each runnable as an AG-UI agent."""

    def __init__(self, app: DoorContext) -> None:
        self.app = app
        self.encoder = EventEncoder()
        self.max_body = max(4 * app.config.limits.max_input_bytes, 1024 * 1024)
        """A RunAgentInput may carry the conversation so far: its JSON is bounded by this."""

    async def serve(self, stream: trio.abc.Stream) -> None:
        """Serve one connection routed to `/ag-ui`."""
        await serve_connection(stream, self._asgi, self.app.auth)

    async def _asgi(self, scope: MutableMapping[str, Any], receive: Any, send: Any) -> None:
        allowed = self._cors(scope)
        if allowed is not None:  # a page of an allowed origin: it may read the answer
            send = _with_headers(send, allowed)
        method = scope["method"]
        if method == "OPTIONS":
            return await self._preflight(scope, send, allowed)
        if method not in ("POST", "GET"):
            return await refuse(
                send, 405, "use POST with an AG-UI RunAgentInput", [(b"allow", b"POST, GET")]
            )
        principal = await authorize(self.app, scope, send, writes=False)
        if principal is None:
            return None
        if method == "GET":
            return await self._messages(scope, send, principal)
        body = await read_body(receive, self.max_body)
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
        props = run_input.forwarded_props if isinstance(run_input.forwarded_props, dict) else {}
        if run_input.resume or props.get("runId") is not None:
            return await self._continue(receive, send, principal, agent_id, run_input)
        if not run_input.messages and not run_input.resume:  # the thread's chat, no run
            return await self._history_stream(receive, send, principal, run_input)
        if principal.read_only:
            return await refuse(send, 403, "forbidden: a viewer token may not start runs")
        task = _task_of(run_input)
        if task is None:
            return await refuse(
                send, 400, "messages holds no user message with text: nothing to do"
            )
        multitask = props.get("multitask", "reject")
        if multitask not in get_args(Multitask):
            return await refuse(
                send, 400, f"forwardedProps.multitask: one of {get_args(Multitask)}"
            )
        if not 0 < len(run_input.thread_id) <= MAX_THREAD_ID:
            return await refuse(send, 400, f"threadId is 1 to {MAX_THREAD_ID} characters")
        thread = ThreadAsk(thread_id=run_input.thread_id, multitask=multitask)
        asked_at = time.time()
        try:
            given = _attachments_of(run_input)
            started = await start_run(
                self.app, principal, agent_id, task, thread=thread, attachments=given
            )
        except OrchestratorError as exc:  # shown by its code (errors.py)
            return await refuse(send, http_status(exc), exc.message)
        run_id, thread_id = started.run_id, run_input.thread_id

        async def opening() -> tuple[AguiStream, list[BaseEvent]]:
            # An enqueued run starts once the run before it has ended: its stream (and
            # the conversation it goes on from) begins then.
            await self._launched(run_id)
            record = self.app.journal.get(run_id).record
            if record.created_at < asked_at:  # `steer`: the input went into a running run
                chat = await self._chat_of(record)
                chat.append(UserMessage(id=f"{thread_id}:{run_input.run_id}", content=task))
            else:
                chat = chat_of(thread_id, await self._history(record), task)
            stream = AguiStream(
                run_id, thread_id=thread_id, agui_run_id=run_input.run_id, snapshot=chat
            )
            return stream, []

        return await self._stream(receive, send, run_id, opening)

    async def _launched(self, run_id: str) -> None:
        """Wait until the run has begun (its RUN_STARTED is journaled): at once, unless
        it is queued behind the run before it in its thread."""
        async with aclosing(follow_run(self.app.journal, run_id, 0)) as batches:
            async for _ in batches:
                return

    async def _history(self, record: RunRecord) -> tuple[Message, ...]:
        """The conversation the run started from (its thread's so far; none for a
        thread's first run)."""
        if record.previous_run_id is None:
            return ()
        return await self.app.runs.threads.conversation(
            record.previous_run_id, record.continues_agent
        )

    async def _chat_of(self, record: RunRecord) -> list[AguiMessage]:
        """The chat of `record`'s thread up to it: its input after the conversation it
        went on from, and, once it has ended, its own turns and answer too."""
        thread_id = record.thread_id or record.run_id
        if record.status in UNFINISHED:
            return chat_of(thread_id, await self._history(record), record.input)
        return chat_of(thread_id, await self.app.runs.threads.conversation(record.run_id, None))

    async def _thread_chat(self, principal: Principal, thread_id: str) -> list[AguiMessage]:
        """A thread's chat as it stands (empty: no such thread of the caller's), as the
        next run's MESSAGES_SNAPSHOT would begin: its running run's input after the
        conversation before it, else its newest run's whole conversation.

        Raises:
            Refused: 400 a thread id past its limit; 404 a run of it is gone.
        """
        if not 0 < len(thread_id) <= MAX_THREAD_ID:
            raise Refused(400, f"threadId is 1 to {MAX_THREAD_ID} characters")
        threads = self.app.runs.threads
        known = await threads.find(thread_id, principal.name, everyone=principal.sees_all)
        if known is None:
            return []
        running = known.running
        try:
            return await self._chat_of(running if running is not None else known.runs[-1])
        except ThreadError as exc:
            raise Refused(404, exc.message) from None

    async def _messages(
        self, scope: MutableMapping[str, Any], send: Any, principal: Principal
    ) -> None:
        """`GET /ag-ui/AGENT?threadId=T`: `{threadId, messages}`, the thread's chat as
        AG-UI messages (a reloaded page shows it before its next send)."""
        query = parse_qs(scope["query_string"].decode("latin-1"))
        thread_id = (query.get("threadId") or [""])[0]
        try:
            chat = await self._thread_chat(principal, thread_id)
        except OrchestratorError as exc:  # shown by its code (errors.py)
            return await refuse(send, http_status(exc), exc.message)
        body = json.dumps(
            {
                "threadId": thread_id,
                "messages": [
                    m.model_dump(mode="json", by_alias=True, exclude_none=True) for m in chat
                ],
            }
        ).encode()
        headers = [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(body)).encode()),
            (b"cache-control", b"no-store"),
        ]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": body})
        return None

    async def _history_stream(
        self, receive: Any, send: Any, principal: Principal, run_input: RunAgentInput
    ) -> None:
        """A RunAgentInput with no messages: the thread's chat as one MESSAGES_SNAPSHOT
        between RUN_STARTED and RUN_FINISHED, and no run started (@ag-ui/client's
        `runAgent()` on a reloaded page with no messages yet)."""
        try:
            chat = await self._thread_chat(principal, run_input.thread_id)
        except OrchestratorError as exc:  # shown by its code (errors.py)
            return await refuse(send, http_status(exc), exc.message)
        thread_id, agui_run = run_input.thread_id, run_input.run_id
        events: list[BaseEvent] = [
            RunStartedEvent(thread_id=thread_id, run_id=agui_run),
            MessagesSnapshotEvent(messages=chat),
            RunFinishedEvent(thread_id=thread_id, run_id=agui_run),
        ]
        body = "".join(self.encoder.encode(e) for e in events).encode()
        headers = [
            (b"content-type", self.encoder.get_content_type().encode()),
            (b"cache-control", b"no-cache"),
            (b"content-length", str(len(body)).encode()),
        ]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": body})
        return None

    def _cors(self, scope: MutableMapping[str, Any]) -> list[tuple[bytes, bytes]] | None:
        """The CORS headers of an answer to a page of another origin the server allows
        (`server.allowed_origins`, or its own names): that origin echoed, never `*`,
        since the request carries a token. None: no Origin, or one that is refused
        (`authorize` refuses its request, with no header that lets the page read it)."""
        headers = Headers((k.decode("latin-1"), v.decode("latin-1")) for k, v in scope["headers"])
        origin = headers.get("Origin")
        if origin is None or not self.app.auth.origin_allowed(headers):
            return None
        return [
            (b"access-control-allow-origin", origin.encode("latin-1")),
            (b"access-control-allow-credentials", b"true"),
            (b"access-control-expose-headers", b"x-orchestrator-run-id"),
            (b"vary", b"Origin"),
        ]

    async def _preflight(
        self,
        scope: MutableMapping[str, Any],
        send: Any,
        allowed: list[tuple[bytes, bytes]] | None,
    ) -> None:
        """`OPTIONS`: a browser asks whether a page of its origin may POST here with a
        token (`Authorization`): 204 saying so for an allowed origin, 403 otherwise."""
        if allowed is None:
            return await refuse(
                send,
                403,
                "forbidden: cross-site request (add the page's origin to server.allowed_origins)",
            )
        headers = [
            (b"access-control-allow-methods", b"POST, GET, OPTIONS"),
            (b"access-control-allow-headers", CORS_HEADERS),
            (b"access-control-max-age", b"600"),
            (b"content-length", b"0"),
        ]
        await send({"type": "http.response.start", "status": 204, "headers": headers})
        await send({"type": "http.response.body", "body": b""})
        return None

    async def _continue(
        self,
        receive: Any,
        send: Any,
        principal: Principal,
        agent_id: str,
        run_input: RunAgentInput,
    ) -> None:
        """A `resume[]` (answers to the interrupts of an earlier segment) or a reconnect
        (`forwardedProps.runId`, `afterSeq`): the run's events after the cursor."""
        try:
            run_id, cursor, entries = _continuation(run_input)
        except OrchestratorError as exc:  # shown by its code (errors.py)
            return await refuse(send, http_status(exc), exc.message)
        app = self.app
        try:
            log = await app.journal.mirrors.find(run_id)
        except UnknownRun:
            log = None
        if log is None or not principal.may_see(log.record.owner):
            return await refuse(send, 404, f"no run {run_id!r}")
        if log.record.agent_id != agent_id:
            return await refuse(
                send,
                404,
                f"run {run_id!r} is not of agent {agent_id!r}: POST /ag-ui/{log.record.agent_id}",
            )
        if cursor > log.committed:
            return await refuse(
                send, 400, f"afterSeq {cursor} is past the run's last event ({log.committed})"
            )
        answers = [await self._answer(principal, run_id, entry) for entry in entries]
        stream = AguiStream(run_id, thread_id=run_input.thread_id, agui_run_id=run_input.run_id)
        after = 0
        while after < cursor:  # a batch at a time: memory stays bounded by the stream's state
            had = await app.journal.read(run_id, after, min(PRIME_BATCH, cursor - after))
            if not had:
                break
            stream.prime([e.event for e in had if e.seq <= cursor])
            after = had[-1].seq
        stream.last_seq = cursor
        first = stream.begin()
        if answers:
            first.append(
                CustomEvent(
                    name="orchestrator.RESUME",
                    value={"answers": answers},
                    metadata={"runId": run_id, "seq": cursor},
                )
            )

        async def opening() -> tuple[AguiStream, list[BaseEvent]]:
            return stream, first

        return await self._stream(receive, send, run_id, opening)

    async def _answer(
        self, principal: Principal, run_id: str, entry: ResumeEntry
    ) -> dict[str, Any]:
        """Give one `resume[]` entry's decision as the `approve` op would: what became
        of it (`accepted`, else `code` and `message`)."""
        out: dict[str, Any] = {"interruptId": entry.interrupt_id, "accepted": False}
        if principal.read_only:
            return {**out, "code": "unauthorized", "message": "a viewer token may not answer"}
        parsed = parse_interrupt_id(entry.interrupt_id)
        assert parsed is not None  # checked by _continuation
        asked = await self.app.journal.read(run_id, parsed[1] - 1, 1)
        if (
            not asked
            or asked[0].seq != parsed[1]
            or asked[0].event.type is not (EventType.APPROVAL_REQUESTED)
        ):
            return {**out, "code": "not_found", "message": "no such interrupt in this run"}
        tool_call_id = str(cast(ApprovalRequestedData, asked[0].event.data).get("toolCallId", ""))
        source = asked[0].event.source
        out["toolCallId"] = tool_call_id
        answer = answer_of(
            entry.status,
            entry.payload,
            tool_call_id=tool_call_id,
            agent_key=source.agent_key if source is not None else None,
            by=principal.name or "client",
        )
        if isinstance(answer, str):
            return {**out, "code": "bad_request", "message": answer}
        limit = self.app.config.limits.max_input_bytes
        for name, value in (("reason", answer.reason), ("args", answer.args)):
            if value is not None and len(json.dumps(value).encode()) > limit:
                return {**out, "code": "bad_request", "message": f"{name} is over {limit} bytes"}
        try:
            await self.app.runs.approve(run_id, answer)
        except OrchestratorError as exc:  # shown by its code (errors.py)
            return {**out, "code": shown(exc).ws, "message": exc.message}
        return {**out, "accepted": True, "decision": answer.decision}

    async def _stream(
        self,
        receive: Any,
        send: Any,
        run_id: str,
        opening: Callable[[], Awaitable[tuple[AguiStream, list[BaseEvent]]]],
    ) -> None:
        """Stream the run from the `opening`'s `stream.last_seq` on (after its first
        events): to its end, or — when calls wait for a person and the run has gone
        quiet — to an interrupt. The answer's head goes first: the opening may wait (a
        queued run, for the run before it)."""
        app = self.app
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

        async def emit(events: list[BaseEvent]) -> None:
            chunk = "".join(self.encoder.encode(e) for e in events)
            if chunk:
                await send(
                    {"type": "http.response.body", "body": chunk.encode(), "more_body": True}
                )

        async with trio.open_nursery() as nursery:
            nursery.start_soon(_until_gone, receive, nursery.cancel_scope)
            stream, first = await opening()
            await emit(first)
            waiting_since = trio.current_time() if stream.waiting else None
            async with aclosing(follow_run(app.journal, run_id, stream.last_seq)) as batches:
                while True:
                    wait = math.inf
                    if waiting_since is not None:
                        now = trio.current_time()
                        wait = min(SETTLE_SECONDS, waiting_since + MAX_SETTLE_SECONDS - now)
                    entries = None
                    with trio.move_on_after(max(wait, 0)):
                        entries = await anext(batches, None)
                        if entries is None:
                            break
                    if entries is None:  # calls wait and the run is quiet: hand them over
                        await emit(stream.interrupt())
                        break
                    await emit([out for entry in entries for out in stream.feed(entry.event)])
                    if not stream.waiting:
                        waiting_since = None
                    elif waiting_since is None:
                        waiting_since = trio.current_time()
            await emit(stream.finish())
            await send({"type": "http.response.body", "body": b""})
            nursery.cancel_scope.cancel()


async def _until_gone(receive: Any, scope: trio.CancelScope) -> None:
    """The client left: stop streaming (the run goes on; `/ws` can follow it)."""
    while (await receive())["type"] != "http.disconnect":
        pass
    scope.cancel()


def _with_headers(send: Any, extra: list[tuple[bytes, bytes]]) -> Any:
    """`send`, with `extra` headers in every answer's head."""

    async def sending(message: Any) -> None:
        if message["type"] == "http.response.start":
            message = {**message, "headers": [*message.get("headers", ()), *extra]}
        await send(message)

    return sending


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


def _attachments_of(run_input: RunAgentInput) -> list[AttachmentIn]:
    """The images and files of the last user message: its `image`, `document` (and
    legacy `binary`) parts, by data or URL.

    Raises:
        Refused: a part whose source is neither (an AG-UI file id, which the server
            cannot read).
    """
    for message in reversed(run_input.messages):
        if getattr(message, "role", None) != "user":
            continue
        content = getattr(message, "content", None)
        if not isinstance(content, list):
            return []
        out = []
        for i, part in enumerate(content):
            kind = getattr(part, "type", "text")
            if kind == "text":
                continue
            name = str(getattr(part, "filename", None) or getattr(part, "id", None) or "")
            name = name or f"{kind}-{i + 1}"
            source = getattr(part, "source", None)
            if source is None:  # a `binary` part: its fields are its own
                data, url = getattr(part, "data", None), getattr(part, "url", None)
                mime = str(getattr(part, "mime_type", "") or "")
            else:
                found = getattr(source, "type", "")
                if found not in ("data", "url"):
                    raise Refused(400, f"messages: a {kind} part's {found} source is not taken")
                value = str(source.value)
                data, url = (value, None) if found == "data" else (None, value)
                mime = str(getattr(source, "mime_type", "") or "")
            out.append(AttachmentIn(name=name, media_type=mime, data=data, url=url))
        return out
    return []


def _continuation(run_input: RunAgentInput) -> tuple[str, int, list[ResumeEntry]]:
    """The run, the cursor and the answers of a resume or reconnect request.

    Raises:
        Refused: 400, saying what is wrong.
    """
    props = run_input.forwarded_props if isinstance(run_input.forwarded_props, dict) else {}
    entries = list(run_input.resume or ())
    if len(entries) > MAX_RESUME_ENTRIES:
        raise Refused(400, f"resume holds over {MAX_RESUME_ENTRIES} entries")
    runs: set[str] = set()
    ends: list[int] = []
    for n, entry in enumerate(entries):
        parsed = parse_interrupt_id(entry.interrupt_id)
        if parsed is None:
            raise Refused(400, f"resume.{n}.interruptId: not an interrupt of this server")
        runs.add(parsed[0])
        ends.append(parsed[2])
    named = props.get("runId")
    if named is not None:
        if not isinstance(named, str) or not named:
            raise Refused(400, "forwardedProps.runId must be a run id")
        runs.add(named)
    if len(runs) != 1:
        raise Refused(400, "resume and forwardedProps.runId name more than one run")
    after = props.get("afterSeq")
    if after is None:
        cursor = min(ends) if ends else 0
    elif isinstance(after, int) and not isinstance(after, bool) and after >= 0:
        cursor = after
    else:
        raise Refused(400, "forwardedProps.afterSeq must be a seq (an integer >= 0)")
    return runs.pop(), cursor, entries
