"""The client ops (`docs/server.md`), as a table: one small handler per op.

How an op is authorized: every entry of `OPS` says whether the op changes
anything (`writes`: start, cancel, send, approve) and which run it names, if any
(`run_of`). `dispatch` checks both against the connection's principal before the
handler runs: a read-only `viewer` token may not write (`unauthorized`), and a
`user` token sees and controls only the runs it started — anything else is
`not_found`, as if the run did not exist. Handlers then only do their op; the
errors of the runs they call (`runs/service.py`) become protocol codes in
`dispatch` too. Ops that name no run (`run`, `agents`, `ping`, `unsubscribe`) act
on the principal's own things or on nothing.
"""

from __future__ import annotations

import base64
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import msgspec

from agents.core.attachments import Attachment, AttachmentIn, infos
from agents.core.structured import check_schema
from orchestrator import protocol
from orchestrator.config import ServerConfig
from orchestrator.core.approvals import Answer
from orchestrator.core.filters import FilterSpec
from orchestrator.core.threads import MAX_THREAD_ID, ThreadAsk
from orchestrator.core.webhooks import WebhookSpec, shown_url, url_allowed
from orchestrator.errors import OrchestratorError, shown
from orchestrator.protocol import ProtocolError
from orchestrator.runs.service import (
    RunService,
    StartedRun,
)
from orchestrator.runs.threads import ThreadState
from orchestrator.runtime.engine import Orchestrator
from orchestrator.server.auth import Principal
from orchestrator.server.feed import Feed
from orchestrator.storage.base import ForkPoint, RunOptions, RunRecord
from orchestrator.storage.journal import Journal
from orchestrator.storage.runlog import RunLog, UnknownRun

if TYPE_CHECKING:  # (the cluster, and with it the Redis client, loads only in cluster mode)
    from orchestrator.cluster.node import Node
    from orchestrator.runs.triggers import Triggers
    from orchestrator.webhooks.outbox import Outbox

__all__ = ["OPS", "Caller", "OpContext", "dispatch"]


class OpContext(Protocol):
    """What the ops read of the server: its settings, runs, journal and agents."""

    @property
    def config(self) -> ServerConfig: ...
    @property
    def journal(self) -> Journal: ...
    @property
    def runs(self) -> RunService: ...
    @property
    def orchestrator(self) -> Orchestrator: ...
    @property
    def node(self) -> Node | None: ...
    @property
    def closing(self) -> bool: ...
    @property
    def triggers(self) -> Triggers | None: ...
    @property
    def outbox(self) -> Outbox | None: ...


class Caller(Protocol):
    """What an op's handler uses of the connection it serves (`connection.Connection`)."""

    @property
    def app(self) -> OpContext: ...
    @property
    def principal(self) -> Principal: ...
    async def reply(self, frame: bytes) -> None: ...
    def new_feed(
        self,
        run_id: str,
        after_seq: int,
        filter: FilterSpec | None,
        detail: str,
        msg_id: protocol.MessageId,
        format: str = "events",
    ) -> Feed: ...
    def start_feed(self, feed: Feed) -> None: ...
    def end_feed(self, sub: str) -> bool: ...
    def check_sub_limit(self, msg_id: protocol.MessageId) -> None: ...
    def await_result(self, run: StartedRun, msg_id: protocol.MessageId) -> None: ...


Handler = Callable[[Caller, Any], Awaitable[None]]


@dataclass(frozen=True, slots=True)
class Op:
    """How one op is served: its handler, whether it changes anything, and the run it
    names (both checked first)."""

    handler: Handler
    run_of: Callable[[Any], str | None] | None = None
    writes: bool = False


async def dispatch(conn: Caller, op: protocol.ClientOp) -> None:
    """Authorize the op, then run its handler.

    Raises:
        ProtocolError: the op names a run the principal may not see, or fails.
    """
    entry = OPS[type(op)]
    if entry.writes and conn.principal.read_only:
        raise ProtocolError(
            "unauthorized",
            f"token {conn.principal.name!r} is a viewer (read-only): "
            f"{protocol.OP_NAMES[type(op)]!r} is refused",
            op.id,
        )
    if entry.run_of is not None:
        run_id = entry.run_of(op)
        if run_id is not None:
            await visible(conn, run_id, op.id)
    try:
        await entry.handler(conn, op)
    except OrchestratorError as exc:  # every family, shown by its code (errors.py)
        if isinstance(exc, ProtocolError):
            raise
        raise ProtocolError(shown(exc).ws, exc.message, op.id) from None


async def visible(conn: Caller, run_id: str, msg_id: protocol.MessageId) -> RunLog:
    """The run, if this principal may see it (else `not_found`, as if it did not exist)."""
    try:
        log = await conn.app.journal.mirrors.find(run_id)
    except UnknownRun as exc:
        raise ProtocolError("not_found", str(exc), msg_id) from None
    if not conn.principal.may_see(log.record.owner):
        raise ProtocolError("not_found", f"unknown run {run_id!r}", msg_id)
    return log


def check_size(conn: Caller, field: str, text: str, msg_id: protocol.MessageId) -> None:
    """Refuse a client text over `limits.max_input_bytes`."""
    limit = conn.app.config.limits.max_input_bytes
    if len(text) > limit or len(text.encode()) > limit:
        raise ProtocolError(
            "bad_request", f"{field} is over limits.max_input_bytes ({limit} bytes)", msg_id
        )


# -- the handlers ----------------------------------------------------------------


async def ping(conn: Caller, op: protocol.Ping) -> None:
    await conn.reply(protocol.encode(protocol.Pong(id=op.id)))


async def subscribe(conn: Caller, op: protocol.Subscribe) -> None:
    feed = conn.new_feed(op.run_id, op.after_seq, op.filter, op.detail, op.id, op.format)
    await conn.reply(protocol.ack(op.id, sub=feed.sub))
    conn.start_feed(feed)


async def unsubscribe(conn: Caller, op: protocol.Unsubscribe) -> None:
    if not conn.end_feed(op.sub):
        raise ProtocolError("not_found", f"no subscription {op.sub!r}", op.id)
    await conn.reply(protocol.ack(op.id))


async def run(conn: Caller, op: protocol.StartRun) -> None:
    app = conn.app
    if app.closing:
        raise ProtocolError("limit_exceeded", "the server is shutting down", op.id)
    check_size(conn, "input", op.input, op.id)
    if op.thread_id is not None and not 0 < len(op.thread_id) <= MAX_THREAD_ID:
        raise ProtocolError("bad_request", f"threadId is 1 to {MAX_THREAD_ID} characters", op.id)
    if op.stream:
        conn.check_sub_limit(op.id)
    principal = conn.principal
    asked = (op.thread_id, op.agent_key, op.from_run, op.multitask)
    thread = (
        ThreadAsk(
            thread_id=op.thread_id,
            agent_key=op.agent_key,
            from_run=op.from_run,
            multitask=op.multitask,
        )
        if asked != (None, None, None, "reject")
        else None
    )
    schema = None
    if op.output_schema is not None:
        schema = check_schema(op.output_schema, where="outputSchema", untrusted=True)
    hooks = tuple(_own_webhooks(app.config, op))
    given = await attachments_of(conn, op.attachments or [], op.id)
    options = None
    if schema is not None or given or hooks:
        options = RunOptions(output_schema=schema, attachments=tuple(infos(given)), webhooks=hooks)
    started = await app.runs.start(
        op.agent,
        op.input,
        stream=op.stream,
        owner=principal.name,
        max_runs=principal.max_runs if principal.name is not None else None,
        thread=thread,
        options=options,
        blobs={a.id: a.data for a in given} or None,
    )
    await _answer_started(conn, started, op, [a.id for a in given] or None)


def _own_webhooks(config: ServerConfig, op: protocol.StartRun) -> list[WebhookSpec]:
    """The run's own webhooks, checked: each URL allowed by `server.webhook_urls`."""
    given = op.webhooks or []
    if not given:
        return []
    most = config.limits.webhooks.max_per_run
    if len(given) > most:
        raise ProtocolError(
            "bad_request",
            f"webhooks: {len(given)} given; limits.webhooks.max_per_run is {most}",
            op.id,
        )
    for i, spec in enumerate(given):
        problems = spec.problems(f"webhooks[{i}]")
        if not spec.secret:
            problems.append(f"webhooks[{i}].secret: give a whsec_ secret to sign with")
        elif not url_allowed(spec.url, config.server.webhook_urls):
            problems.append(
                f"webhooks[{i}].url is not under one of the server's webhook_urls"
                if config.server.webhook_urls
                else "webhooks: this server takes none from a client (server.webhook_urls is empty)"
            )
        if problems:
            raise ProtocolError("bad_request", "; ".join(problems[:5]), op.id)
    return given


async def fork(conn: Caller, op: protocol.ForkOp) -> None:
    app = conn.app
    if app.closing:
        raise ProtocolError("limit_exceeded", "the server is shutting down", op.id)
    if op.message is not None:
        check_size(conn, "message", op.message, op.id)
    elif op.agent_key is not None:
        raise ProtocolError("bad_request", "agentKey names who gets a message: give one", op.id)
    if op.stream:
        conn.check_sub_limit(op.id)
    principal = conn.principal
    point = ForkPoint(
        run_id=op.run_id,
        seq=op.at_seq,
        agent_key=op.agent_key,
        message=op.message,
        replay=op.replay,
    )
    started = await app.runs.fork(
        point,
        owner=principal.name,
        max_runs=principal.max_runs if principal.name is not None else None,
    )
    await _answer_started(conn, started, op)


async def _answer_started(
    conn: Caller,
    started: StartedRun,
    op: protocol.StartRun | protocol.ForkOp,
    attachments: list[str] | None = None,
) -> None:
    """Ack a started run with its id (and its attachments' ids): then its result
    (`stream: false`), or its events from seq 1 in a new subscription."""
    if not op.stream:
        await conn.reply(protocol.ack(op.id, run_id=started.run_id, attachments=attachments))
        conn.await_result(started, op.id)
        return
    feed = conn.new_feed(started.run_id, 0, op.filter, op.detail, op.id, op.format)
    thread_id = started.thread_id
    await conn.reply(
        protocol.ack(
            op.id,
            run_id=started.run_id,
            sub=feed.sub,
            thread_id=thread_id,
            attachments=attachments,
        )
    )
    conn.start_feed(feed)


async def attachments_of(
    conn: Caller, given: list[AttachmentIn], msg_id: protocol.MessageId
) -> list[Attachment]:
    """A request's attachments, checked (and fetched), or an `AttachmentError` saying why
    (`bad_request`, as `dispatch` shows it)."""
    if not given:
        return []
    return await conn.app.orchestrator.catalog.receive(given)


async def cancel(conn: Caller, op: protocol.Cancel) -> None:
    if op.reason is not None:
        check_size(conn, "reason", op.reason, op.id)
    await conn.app.runs.cancel(op.run_id, op.agent_key, op.reason)
    await conn.reply(protocol.ack(op.id))


async def send(conn: Caller, op: protocol.Send) -> None:
    check_size(conn, "message", op.message, op.id)
    given = await attachments_of(conn, op.attachments or [], op.id)
    await conn.app.runs.send(op.run_id, op.agent_key, op.message, tuple(given))
    await conn.reply(protocol.ack(op.id, attachments=[a.id for a in given] or None))


async def approve(conn: Caller, op: protocol.Approve) -> None:
    if op.reason is not None:
        check_size(conn, "reason", op.reason, op.id)
    if op.args is not None:
        check_size(conn, "args", msgspec.json.encode(op.args).decode(), op.id)
    answer = Answer(
        tool_call_id=op.tool_call_id,
        decision=op.decision,
        agent_key=op.agent_key,
        by=conn.principal.name or "client",
        reason=op.reason,
        args=op.args,
    )
    await conn.app.runs.approve(op.run_id, answer)
    await conn.reply(protocol.ack(op.id))


async def pending(conn: Caller, op: protocol.Pending) -> None:
    owner = None if conn.principal.sees_all else conn.principal.name
    found, more = await conn.app.runs.pending(op.run_id, owner=owner, limit=op.limit)
    shown = [msgspec.structs.replace(info, parameters=None) for info in found]
    await conn.reply(protocol.encode(protocol.PendingReply(approvals=shown, more=more, id=op.id)))


async def runs(conn: Caller, op: protocol.Runs) -> None:
    app = conn.app
    owner = None if conn.principal.sees_all else conn.principal.name
    records, more = await app.runs.page(limit=op.limit, before=op.before, owner=owner)
    infos = [_run_info(r, cluster=app.node is not None) for r in records]
    await conn.reply(protocol.encode(protocol.RunsReply(runs=infos, more=more, id=op.id)))


def _run_info(r: RunRecord, *, cluster: bool) -> protocol.RunInfo:
    """A run as the `runs` and `threads` replies list it."""
    return protocol.RunInfo(
        run_id=r.run_id,
        agent_id=r.agent_id,
        status=r.status,
        created_at=r.created_at,
        finished_at=r.finished_at,
        owner=r.owner,
        input=r.input[:200],
        worker=r.worker if cluster else None,
        attempt=r.attempt if cluster else None,
        forked_from=(
            protocol.ForkedFrom(r.forked_from.run_id, r.forked_from.seq)
            if r.forked_from is not None
            else None
        ),
        thread_id=r.thread_id,
        previous_run_id=r.previous_run_id,
    )


async def threads(conn: Caller, op: protocol.ThreadsOp) -> None:
    """The caller's threads, one thread's runs, or a thread deleted (docs/threads.md)."""
    principal, found = conn.principal, conn.app.runs.threads
    owner = principal.name
    if op.thread_id is None:
        if op.action == "delete":
            raise ProtocolError("bad_request", "threadId names the thread to delete", op.id)
        listed, more = await found.page(owner, everyone=principal.sees_all, limit=op.limit)
        shown = [_thread_info(t) for t in listed]
        reply = protocol.ThreadsReply(threads=shown, more=more, id=op.id)
        await conn.reply(protocol.encode(reply))
        return
    everyone = principal.sees_all and op.action == "list"
    thread = await found.find(op.thread_id, owner, everyone=everyone)
    if thread is None:
        raise ProtocolError("not_found", f"no thread {op.thread_id!r}", op.id)
    if op.action == "list":
        answers = [await found.answer(r) for r in thread.runs]
        reply = protocol.ThreadsReply(threads=[_thread_info(thread, answers)], id=op.id)
        await conn.reply(protocol.encode(reply))
        return
    if principal.read_only:
        raise ProtocolError("unauthorized", "a viewer (read-only) deletes nothing", op.id)
    if thread.running is not None:
        raise ProtocolError(
            "bad_request",
            f"thread {op.thread_id!r} has run {thread.running.run_id!r} running: cancel it first",
            op.id,
        )
    deleted = [r.run_id for r in thread.runs]
    await conn.app.journal.retention.delete(deleted)
    await found.deleted(thread)
    await conn.reply(protocol.encode(protocol.ThreadsReply(threads=[], deleted=deleted, id=op.id)))


def _thread_info(
    thread: ThreadState, answers: list[str | None] | None = None
) -> protocol.ThreadInfo:
    """A thread as the `threads` op lists it: with `answers` (one thread asked), each
    run in `detail` with its answer."""
    running = thread.running
    detail = None
    if answers is not None:
        detail = [
            msgspec.structs.replace(_run_info(r, cluster=False), answer=answer)
            for r, answer in zip(thread.runs, answers, strict=True)
        ]
    return protocol.ThreadInfo(
        thread_id=thread.thread_id,
        runs=[r.run_id for r in thread.runs],
        detail=detail,
        first_input=thread.runs[0].input[:200],
        last_activity=thread.last_activity,
        running=running.run_id if running is not None else None,
    )


async def agents(conn: Caller, op: protocol.Agents) -> None:
    infos = [
        protocol.AgentInfo(
            id=s.id,
            name=s.display_name,
            description=s.description,
            model=s.model,
            example=s.example,
            output_schema=s.output_schema,
        )
        for s in conn.app.orchestrator.specs.values()
    ]
    await conn.reply(protocol.encode(protocol.AgentsReply(agents=infos, id=op.id)))


async def attachment(conn: Caller, op: protocol.GetAttachment) -> None:
    """An attachment's bytes, if the run (visible to the caller: `dispatch`) has it."""
    store = conn.app.journal.storage
    found = await store.get_blobs([op.attachment_id], run_id=op.run_id)
    data = found.get(op.attachment_id)
    if data is None:
        raise ProtocolError(
            "not_found", f"run {op.run_id!r} has no attachment {op.attachment_id[:80]!r}", op.id
        )
    reply = protocol.AttachmentReply(
        run_id=op.run_id,
        attachment_id=op.attachment_id,
        data=base64.b64encode(data).decode("ascii"),
        id=op.id,
    )
    await conn.reply(protocol.encode(reply))


async def triggers(conn: Caller, op: protocol.TriggersOp) -> None:
    """List the triggers; pause, resume or fire one (an admin's token)."""
    found = conn.app.triggers
    if op.action != "list":
        if not conn.principal.admin:
            raise ProtocolError(
                "unauthorized", f"{op.action!r} a trigger needs an admin's token", op.id
            )
        if found is None or op.name is None:
            raise ProtocolError(
                "not_found",
                f"no trigger {op.name!r}: none is configured"
                if found is None
                else "name the trigger",
                op.id,
            )
        try:
            await found.act(op.action, op.name)
        except LookupError as exc:
            raise ProtocolError("not_found", str(exc), op.id) from None
    if found is not None and found.shared and op.action == "list":
        await found.refresh()  # (the gateway firing them may be another)
    listed = found.listed() if found is not None else []
    await conn.reply(protocol.encode(protocol.TriggersReply(triggers=listed, id=op.id)))


async def webhooks(conn: Caller, op: protocol.WebhooksOp) -> None:
    """The outbox as the caller may see it; redeliver dead deliveries (an admin's token)."""
    outbox = conn.app.outbox
    redelivered = None
    if op.action == "redeliver":
        if not conn.principal.admin:
            raise ProtocolError("unauthorized", "redeliver needs an admin's token", op.id)
        if outbox is None:
            raise ProtocolError("not_found", "no webhooks: the outbox is off", op.id)
        try:
            redelivered = await outbox.redeliver(op.delivery_id)
        except LookupError as exc:
            raise ProtocolError("not_found", str(exc), op.id) from None
    shown, waiting, dead = {}, 0, []
    if outbox is not None:
        mine = _owned_by(conn)
        shown = {
            name: msgspec.structs.replace(spec, secret="", url=shown_url(spec.url))
            for name, spec in outbox.webhooks.items()
        }
        waiting = sum(1 for d in outbox.waiting.values() if mine(d.run_id))
        dead = [d for d in outbox.listed(dead=True) if mine(d.run_id)]
    reply = protocol.WebhooksReply(
        webhooks=shown, waiting=waiting, dead=dead, redelivered=redelivered, id=op.id
    )
    await conn.reply(protocol.encode(reply))


def _owned_by(conn: Caller) -> Callable[[str], bool]:
    """Whether the caller may see a run's deliveries: as it may see the run."""
    principal, logs = conn.principal, conn.app.journal.logs

    def mine(run_id: str) -> bool:
        log = logs.get(run_id)
        return log is not None and principal.may_see(log.record.owner)

    return mine


OPS: dict[type[protocol.ClientOp], Op] = {
    protocol.Ping: Op(ping),
    protocol.Subscribe: Op(subscribe, run_of=lambda op: op.run_id),
    protocol.Unsubscribe: Op(unsubscribe),
    protocol.StartRun: Op(run, writes=True),
    protocol.ThreadsOp: Op(threads),
    protocol.ForkOp: Op(fork, run_of=lambda op: op.run_id, writes=True),
    protocol.Cancel: Op(cancel, run_of=lambda op: op.run_id, writes=True),
    protocol.Send: Op(send, run_of=lambda op: op.run_id, writes=True),
    protocol.Approve: Op(approve, run_of=lambda op: op.run_id, writes=True),
    protocol.Pending: Op(pending, run_of=lambda op: op.run_id),
    protocol.Runs: Op(runs, run_of=lambda op: op.before),
    protocol.Agents: Op(agents),
    protocol.GetAttachment: Op(attachment, run_of=lambda op: op.run_id),
    protocol.TriggersOp: Op(triggers),
    protocol.WebhooksOp: Op(webhooks),
}
"""Every client op: its handler and the run it names (authorized by `dispatch`)."""
