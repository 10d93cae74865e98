"""A typed async (trio) client for the WebSocket protocol of `orchestrator serve`.

    token = os.environ.get("ORCHESTRATOR_TOKEN")
    async with Client.connect("ws://127.0.0.1:8765/ws", token=token) as client:
        run_id = await client.start("planner", "compare trio and asyncio")
        async with client.follow(run_id, filter={"maxDepth": 1}) as events:
            async for event in events:
                print(event.seq, event.type, event.data)

The frames are `orchestrator.protocol`'s — the same structs the server encodes — and
events are the `Event` the in-process API yields. `follow` survives the connection:
on a drop it reconnects with backoff and subscribes again with `afterSeq` = the last
seq it yielded, so no event is missed or repeated (also across a server restart);
it gives up after `give_up_after` seconds without a working connection. `follow` is a
`trio.as_safe_channel` (a context manager giving a channel): the connection it holds
lives in a nursery, which an async generator must not yield out of. Requests
(`start`, `cancel`, `send`, `approve`, `runs`, `agents`, `pending`) each use a
connection of their own (they are rare; websockets' trio connections are nursery-owned,
so one cannot outlive the call that opened it).

trio only (websockets' trio client). From asyncio, run a whole piece of work in a
thread: `await asyncio.to_thread(trio.run, main)` (docs/integrations.md).
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any, Literal

import msgspec
import trio
from websockets.exceptions import ConnectionClosed, InvalidHandshake, InvalidStatus, InvalidURI
from websockets.trio.client import connect

from agents.core.attachments import AttachmentIn
from agents.errors import OrchestratorError
from orchestrator.core.approvals import ApprovalInfo
from orchestrator.core.events import Event
from orchestrator.core.filters import FilterSpec
from orchestrator.protocol import (
    Ack,
    AgentInfo,
    Agents,
    AgentsReply,
    Approve,
    Cancel,
    End,
    ErrorFrame,
    Events,
    ForkOp,
    Gap,
    Multitask,
    Pending,
    PendingReply,
    Ping,
    RunInfo,
    Runs,
    RunsReply,
    Send,
    ServerFrame,
    StartRun,
    Subscribe,
    ThreadInfo,
    ThreadsOp,
    ThreadsReply,
    TriggerInfo,
    TriggersOp,
    TriggersReply,
    WebhooksOp,
    WebhooksReply,
    decode_server_frame,
)

__all__ = ["Client", "ClientError", "FollowEnded", "RunsPage", "auth_headers"]

Reconnect = Callable[[int, BaseException, bool], None]
"""`on_reconnect(attempt, error, ever_connected)`: told of each retry (`ever_connected`:
a connection had worked before, so this one was lost rather than never made)."""


class ClientError(OrchestratorError):
    """The server refused a request (`code`: the protocol's error code), or could not
    be reached (`code: "unreachable"`)."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message, code=code)
        self.args = (f"{code}: {message}",)


def auth_headers(token: str | None, origin: str | None = None) -> dict[str, str] | None:
    """The headers that carry `token` (as `Authorization: Bearer …`) and `origin`.

    Raises:
        ClientError: `bad_token`, for a token an HTTP header cannot carry (a character
            outside visible ASCII: often a copied placeholder such as `…`). The message
            never repeats the token.
    """
    headers: dict[str, str] = {}
    if token:
        if not all("!" <= c <= "~" for c in token):
            raise ClientError(
                "bad_token",
                f"the token ({len(token)} characters) has a character an Authorization "
                "header cannot carry (only visible ASCII, no spaces): is it a placeholder?",
            )
        headers["Authorization"] = f"Bearer {token}"
    if origin:
        headers["Origin"] = origin
    return headers or None


class FollowEnded(msgspec.Struct):
    """How a `follow` ended: the run's status, and how often it had to reconnect."""

    status: str
    reconnects: int = 0


class RunsPage(msgspec.Struct):
    """One page of `runs`: newest first; `more`: older ones remain (`before=` the last)."""

    runs: list[RunInfo]
    more: bool


class Client:
    """One server, as a token sees it.

    Raises:
        ClientError: `bad_token` (see `auth_headers`), at once.
    """

    def __init__(
        self,
        url: str,
        *,
        token: str | None = None,
        origin: str | None = None,
        give_up_after: float = 60.0,
    ) -> None:
        self.url = url
        self._headers = auth_headers(token, origin)
        self.give_up_after = give_up_after
        self._ids = 0
        self.ended: FollowEnded | None = None
        """How the last `follow` ended (None until one has)."""

    @classmethod
    @asynccontextmanager
    async def connect(
        cls, url: str, *, token: str | None = None, origin: str | None = None, **options: Any
    ) -> AsyncIterator[Client]:
        """A client for the block, once the server has answered a `ping` with this token.

        Raises:
            ClientError: `unauthorized`/`forbidden` (HTTP 401/403), `unreachable`.
        """
        client = cls(url, token=token, origin=origin, **options)
        await client._ask(Ping(op="ping"))
        yield client

    # -- requests ----------------------------------------------------------------------

    async def start(
        self,
        agent: str | None,
        input: str,
        *,
        detail: Literal["full", "blocks", "status"] = "full",
        thread_id: str | None = None,
        agent_key: str | None = None,
        multitask: Multitask = "reject",
        output_schema: dict[str, Any] | None = None,
        attachments: list[AttachmentIn] | None = None,
    ) -> str:
        """Start a run of `agent` on `input`; its runId (follow it with `follow`).

        In the thread `thread_id` (docs/threads.md; one not seen before starts with that
        id, so a client may name its own), the run goes on from the thread's
        conversation, or with `agent_key` from that agent's; `agent` may then be None.
        `multitask`: what the input does while a run of the thread runs (`steer`: the
        runId is the running run's). `output_schema`: the JSON Schema the root's answer
        must match (RUN_FINISHED's `structured` holds it); `attachments`: images and
        files for the root, `AttachmentIn(name=, media_type=, data=base64 | url=)`
        (docs/structured.md)."""
        request = StartRun(
            op="run",
            agent=agent,
            input=input,
            detail=detail,
            thread_id=thread_id,
            agent_key=agent_key,
            multitask=multitask,
            output_schema=output_schema,
            attachments=attachments,
        )
        reply = await self._ask(request)
        assert isinstance(reply, Ack) and reply.run_id is not None
        return reply.run_id  # (its connection, subscribed by `run`, closed with the answer)

    async def threads(self, thread_id: str | None = None) -> list[ThreadInfo]:
        """The token's threads, most recently active first; or the one `thread_id`,
        with each run (`detail`)."""
        reply = await self._ask(ThreadsOp(op="threads", thread_id=thread_id))
        assert isinstance(reply, ThreadsReply)
        return reply.threads

    async def triggers(
        self, action: Literal["list", "pause", "resume", "fire"] = "list", name: str | None = None
    ) -> list[TriggerInfo]:
        """The server's triggers (docs/triggers.md), after `action` on `name` if asked
        (pause, resume or fire one: an admin's token)."""
        reply = await self._ask(TriggersOp(op="triggers", action=action, name=name))
        assert isinstance(reply, TriggersReply)
        return reply.triggers

    async def webhooks(self, redeliver: str | Literal["all"] | None = None) -> WebhooksReply:
        """The outbox (docs/webhooks.md#webhooks-out): the server's webhooks, how many
        deliveries wait, the dead ones; with `redeliver` (a delivery's id, or `"all"`),
        dead ones sent again first (an admin's token)."""
        op = (
            WebhooksOp(op="webhooks")
            if redeliver is None
            else WebhooksOp(
                op="webhooks",
                action="redeliver",
                delivery_id=None if redeliver == "all" else redeliver,
            )
        )
        reply = await self._ask(op)
        assert isinstance(reply, WebhooksReply)
        return reply

    async def delete_thread(self, thread_id: str) -> list[str]:
        """Delete a thread's runs (none may be running); their runIds."""
        reply = await self._ask(ThreadsOp(op="threads", thread_id=thread_id, action="delete"))
        assert isinstance(reply, ThreadsReply)
        return reply.deleted or []

    async def fork(
        self,
        run_id: str,
        at_seq: int,
        *,
        agent_key: str | None = None,
        message: str | None = None,
        replay: bool = False,
        detail: Literal["full", "blocks", "status"] = "full",
    ) -> str:
        """Start a new run from `run_id` as it stood at event `at_seq`, with `message`
        for `agent_key` (None: the root agent), replaying the original's turns where
        nothing changed with `replay` (docs/fork.md); its runId (follow it with
        `follow`: its events begin with the original's up to `at_seq`)."""
        request = ForkOp(
            op="fork",
            run_id=run_id,
            at_seq=at_seq,
            agent_key=agent_key,
            message=message,
            replay=replay,
            detail=detail,
        )
        reply = await self._ask(request)
        assert isinstance(reply, Ack) and reply.run_id is not None
        return reply.run_id

    async def cancel(
        self, run_id: str, agent_key: str | None = None, reason: str | None = None
    ) -> None:
        """Cancel the run, or one agent and its subtree."""
        await self._ask(Cancel(op="cancel", run_id=run_id, agent_key=agent_key, reason=reason))

    async def send(
        self,
        run_id: str,
        message: str,
        agent_key: str | None = None,
        attachments: list[AttachmentIn] | None = None,
    ) -> list[str]:
        """Deliver a message (with `attachments`) into a running agent (default: the
        root); the attachments' ids."""
        reply = await self._ask(
            Send(
                op="send",
                run_id=run_id,
                message=message,
                agent_key=agent_key,
                attachments=attachments,
            )
        )
        return (reply.attachments or []) if isinstance(reply, Ack) else []

    async def approve(
        self,
        run_id: str,
        tool_call_id: str,
        *,
        agent_key: str | msgspec.UnsetType | None = msgspec.UNSET,
        deny: bool = False,
        reason: str | None = None,
        args: dict[str, Any] | None = None,
    ) -> None:
        """Answer a tool call that waits for approval (`agent_key`: the calling
        agent's, None for the root — needed only when calls of several agents of the
        run have that id)."""
        decision: Literal["approve", "deny"] = "deny" if deny else "approve"
        request = Approve(
            op="approve",
            run_id=run_id,
            tool_call_id=tool_call_id,
            agent_key=agent_key,
            decision=decision,
            reason=reason,
            args=args,
        )
        await self._ask(request)

    async def pending(self, run_id: str | None = None) -> list[ApprovalInfo]:
        """Tool calls waiting for approval (of one run, or every run the token sees)."""
        reply = await self._ask(Pending(op="pending", run_id=run_id))
        assert isinstance(reply, PendingReply)
        return reply.approvals

    async def runs(self, *, limit: int = 100, before: str | None = None) -> RunsPage:
        """A page of runs, newest first."""
        reply = await self._ask(Runs(op="runs", limit=limit, before=before))
        assert isinstance(reply, RunsReply)
        return RunsPage(reply.runs, reply.more)

    async def agents(self) -> list[AgentInfo]:
        """The subagents."""
        reply = await self._ask(Agents(op="agents"))
        assert isinstance(reply, AgentsReply)
        return reply.agents

    async def _ask(self, request: Any) -> ServerFrame:
        """Send one request on a connection of its own; its answer (within
        `give_up_after` seconds).

        Raises:
            ClientError: the server refused it, or cannot be reached.
        """
        self._ids += 1
        request.id = self._ids
        raw = msgspec.json.encode(request).decode()
        try:
            with trio.fail_after(self.give_up_after):
                async with self._connect() as ws:
                    await ws.send(raw)
                    while True:  # a `run` subscribes the connection: skip its events
                        frame = decode_server_frame(await ws.recv())
                        if getattr(frame, "id", None) == request.id:
                            break
        except trio.TooSlowError:
            raise ClientError(
                "unreachable", f"{self.url}: no answer within {self.give_up_after:g} s"
            ) from None
        except InvalidStatus as exc:
            raise refused_upgrade(self.url, exc) from exc
        except (ConnectionClosed, OSError, InvalidURI, InvalidHandshake) as exc:
            raise ClientError("unreachable", f"{self.url}: {exc}") from exc
        if isinstance(frame, ErrorFrame):
            raise ClientError(frame.code, frame.message)
        return frame

    def _connect(self) -> Any:
        return connect(self.url, additional_headers=self._headers, max_size=None)

    # -- following a run ---------------------------------------------------------------

    @trio.as_safe_channel
    async def follow(
        self,
        run_id: str,
        *,
        filter: dict[str, Any] | FilterSpec | None = None,
        after_seq: int = 0,
        detail: Literal["full", "blocks", "status"] = "full",
        on_reconnect: Reconnect | None = None,
    ) -> AsyncGenerator[Event, None]:
        """The run's events after `after_seq` (those `filter` keeps), live, until it
        ends (`self.ended` then says how). A dropped connection is resumed by seq.

        Raises:
            ClientError: the server refused the subscription (`not_found`, …), or no
                connection worked for `give_up_after` seconds (`unreachable`).
        """
        async with self.follow_batches(
            run_id, filter=filter, after_seq=after_seq, detail=detail, on_reconnect=on_reconnect
        ) as batches:
            async for batch in batches:
                for event in batch:
                    yield event

    @trio.as_safe_channel
    async def follow_batches(
        self,
        run_id: str,
        *,
        filter: dict[str, Any] | FilterSpec | None = None,
        after_seq: int = 0,
        detail: Literal["full", "blocks", "status"] = "full",
        on_reconnect: Reconnect | None = None,
    ) -> AsyncGenerator[list[Event], None]:
        """`follow`, a frame's events at a time (what a watcher that redraws wants)."""
        spec = msgspec.convert(filter, FilterSpec) if isinstance(filter, dict) else filter
        cursor, reconnects, connected = after_seq, 0, False
        last_ok = trio.current_time()
        self.ended = None
        while True:
            failure: BaseException
            try:
                async with self._connect() as ws:
                    connected = True
                    last_ok = trio.current_time()
                    request = Subscribe(
                        op="subscribe",
                        id=1,
                        run_id=run_id,
                        after_seq=cursor,
                        filter=spec,
                        detail=detail,
                    )
                    await ws.send(msgspec.json.encode(request).decode())
                    while True:  # recv(), not `async for`: leaving early needs no cleanup
                        frame = decode_server_frame(await ws.recv())
                        last_ok = trio.current_time()
                        if isinstance(frame, Events):
                            fresh = [e for e in frame.events if e.seq > cursor]
                            if fresh:  # never twice, whatever arrives
                                cursor = fresh[-1].seq
                                yield fresh
                        elif isinstance(frame, End):
                            self.ended = FollowEnded(frame.status, reconnects)
                            return
                        elif isinstance(frame, ErrorFrame):
                            raise ClientError(frame.code, frame.message)
                        elif isinstance(frame, Gap):  # retention trimmed these
                            cursor = max(cursor, frame.to_seq)
            except InvalidStatus as exc:
                refused = refused_upgrade(self.url, exc)
                if refused.code != "unreachable":
                    raise refused from exc
                failure = exc
            except (ConnectionClosed, OSError, InvalidURI, InvalidHandshake) as exc:
                failure = exc
            waited = trio.current_time() - last_ok
            if not connected:  # retrying is for a connection that was up: fail fast
                raise ClientError("unreachable", f"could not connect: {self.url}: {failure}")
            if waited >= self.give_up_after:
                what = "connection lost" if connected else "could not connect"
                raise ClientError(
                    "unreachable",
                    f"{what}: {self.url}: {failure} (gave up after {self.give_up_after:g} s)",
                )
            reconnects += 1
            if on_reconnect is not None:
                on_reconnect(reconnects, failure, connected)
            delay = min(10.0, 0.25 * 2 ** min(reconnects, 6), self.give_up_after - waited)
            await trio.sleep(max(delay, 0.0))


def refused_upgrade(url: str, exc: InvalidStatus) -> ClientError:
    """An HTTP refusal of the upgrade as a ClientError (503 and the like: `unreachable`,
    worth retrying)."""
    status = exc.response.status_code
    code = {401: "unauthorized", 403: "forbidden", 404: "not_found"}.get(status, "unreachable")
    why = {
        401: "a valid token is needed",
        403: "this origin is refused",
        404: "no WebSocket endpoint here",
    }
    said = why.get(status, "refused")
    if status == 401 and b"token was refused" in (exc.response.body or b""):
        said = "the token was refused (a valid token is needed)"
    return ClientError(code, f"HTTP {status} from {url}: {said}")
