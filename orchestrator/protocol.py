r"""The WebSocket protocol (contract §4), both directions, in one place. Pure.

Client messages (`StartRun`, `Subscribe`, …) and server frames (`Ack`, `Events`, `End`,
`Gap`, `ErrorFrame`, `RunsReply`, …) are msgspec Structs shared by the server,
`orchestrator watch` and the tests: `parse` reads a client message,
`encode` writes any frame, `decode_server_frame` reads one back. Every client
message is a JSON object with `op` and an optional `id` that the reply echoes.
Anything wrong with a message becomes a `ProtocolError` carrying the error code
and a message that names the problem (`Expected \`int\`, got \`str\` - at
\`$.afterSeq\``); the connection stays usable.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Literal

import msgspec

from agents.core.attachments import AttachmentIn
from agents.errors import ErrorCode, OrchestratorError
from orchestrator.core.approvals import ApprovalInfo
from orchestrator.core.events import Event
from orchestrator.core.filters import FilterSpec
from orchestrator.core.schedule import TriggerInfo
from orchestrator.core.threads import Multitask
from orchestrator.core.webhooks import DeliveryInfo, WebhookSpec

__all__ = [
    "Ack",
    "AgentInfo",
    "Agents",
    "AgentsReply",
    "Approve",
    "AttachmentReply",
    "Cancel",
    "ClientOp",
    "End",
    "ErrorCode",
    "ErrorFrame",
    "Events",
    "ForkOp",
    "ForkedFrom",
    "Gap",
    "GetAttachment",
    "Multitask",
    "Pending",
    "PendingReply",
    "Ping",
    "Pong",
    "ProtocolError",
    "Result",
    "RunInfo",
    "Runs",
    "RunsReply",
    "Send",
    "ServerFrame",
    "StartRun",
    "Subscribe",
    "ThreadInfo",
    "ThreadsOp",
    "ThreadsReply",
    "TriggerInfo",
    "TriggersOp",
    "TriggersReply",
    "Unsubscribe",
    "WebhooksOp",
    "WebhooksReply",
    "ack",
    "decode_server_frame",
    "encode",
    "end_frame",
    "error_frame",
    "events_frame",
    "gap_frame",
    "parse",
]

Detail = Literal["full", "blocks", "status"]

Format = Literal["events", "ag-ui"]
"""How a subscription's events are written: ours, or AG-UI events (docs/integrations.md)."""
MessageId = str | int | None


class ProtocolError(OrchestratorError):
    """A client message that cannot be served; becomes an `error` frame."""

    code: ErrorCode

    def __init__(self, code: ErrorCode, message: str, id: MessageId = None) -> None:
        super().__init__(message, code=code)
        self.id = id


class _Op(msgspec.Struct, kw_only=True, rename="camel", forbid_unknown_fields=True):
    op: str
    id: MessageId = None


class StartRun(_Op):
    """Start a run; with `stream` the connection is subscribed to it from seq 1.

    In a thread (docs/threads.md): `threadId` (absent: a new thread; one not seen
    before in the caller's tenant: a thread with that id) goes on from the thread's
    conversation, or with `agentKey` from that agent's (of the thread's run `fromRun`,
    default its newest); `agent` may then be left out. `multitask` says what the input
    does while a run of the thread runs."""

    input: str
    agent: str | None = None
    stream: bool = True
    filter: FilterSpec | None = None
    detail: Detail = "full"
    format: Format = "events"
    thread_id: str | None = None
    agent_key: str | None = None
    from_run: str | None = None
    multitask: Multitask = "reject"
    output_schema: dict[str, Any] | None = None
    """The JSON Schema the root's answer must match (docs/structured.md)."""
    attachments: list[AttachmentIn] | None = None
    """Images and files for the root, with its input (docs/structured.md#attachments)."""
    webhooks: list[WebhookSpec] | None = None
    """The run's own webhooks: each URL under one of the server's `webhook_urls`, with
    its events, filters and `whsec_` secret (docs/webhooks.md#webhooks-out)."""


class ForkOp(_Op):
    """Start a new run from `runId` as it stood at event `atSeq` (docs/fork.md),
    answered and streamed like `run`."""

    run_id: str
    at_seq: int
    agent_key: str | None = None
    """Who gets `message` (null or absent: the root agent)."""
    message: str | None = None
    replay: bool = False
    stream: bool = True
    filter: FilterSpec | None = None
    detail: Detail = "full"
    format: Format = "events"


class ForkedFrom(msgspec.Struct, rename="camel"):
    """The run and seq a fork started from."""

    run_id: str
    seq: int


class Subscribe(_Op):
    """Replay a run from the journal after `afterSeq`, then follow it live."""

    run_id: str
    after_seq: int = 0
    filter: FilterSpec | None = None
    detail: Detail = "full"
    format: Format = "events"


class Unsubscribe(_Op):
    """Stop a subscription."""

    sub: str


class Cancel(_Op):
    """Cancel a run and every agent in it, or (`agentKey`) one agent and its subtree."""

    run_id: str
    agent_key: str | None = None
    reason: str | None = None


class Send(_Op):
    """A message from a person into a running agent (default: the root)."""

    run_id: str
    message: str
    agent_key: str | None = None
    attachments: list[AttachmentIn] | None = None


class Approve(_Op):
    """Answer a tool call that waits for approval (`args`: changed arguments, where
    the agent's `approval_edit` allows it)."""

    run_id: str
    tool_call_id: str
    decision: Literal["approve", "deny"]
    agent_key: str | msgspec.UnsetType | None = msgspec.UNSET
    """The calling agent (null: the root agent); absent: whichever agent's call has
    that id — refused (`bad_request`) when calls of several agents do."""
    reason: str | None = None
    args: dict[str, Any] | None = None


class Pending(_Op):
    """List the tool calls waiting for approval, of one run or of every visible run."""

    run_id: str | None = None
    limit: int = 1000


class ThreadsOp(_Op):
    """List the caller's threads (newest activity first), or one thread's runs
    (`threadId`), or delete a thread's runs (`action: "delete"`, with `threadId`)."""

    thread_id: str | None = None
    action: Literal["list", "delete"] = "list"
    limit: int = 100


class Runs(_Op):
    """List runs, newest first, a page at a time."""

    limit: int = 100
    before: str | None = None
    """A runId from the previous page: list the runs older than it."""


class Agents(_Op):
    """List subagents."""


class Ping(_Op):
    """Liveness check."""


class TriggersOp(_Op):
    """List the server's triggers, or `pause`, `resume` or `fire` one (`name`; an admin's
    token): docs/triggers.md."""

    action: Literal["list", "pause", "resume", "fire"] = "list"
    name: str | None = None


class WebhooksOp(_Op):
    """The outbox: the server's webhooks, how many deliveries wait, the dead ones; or
    `redeliver` a dead one (`deliveryId`; absent: every one; an admin's token):
    docs/webhooks.md#webhooks-out."""

    action: Literal["list", "redeliver"] = "list"
    delivery_id: str | None = None


class GetAttachment(_Op):
    """The bytes of an attachment of a run (the console's thumbnails and downloads)."""

    run_id: str
    attachment_id: str


ClientOp = (
    StartRun
    | ForkOp
    | Subscribe
    | Unsubscribe
    | Cancel
    | Send
    | Approve
    | Pending
    | Runs
    | ThreadsOp
    | Agents
    | Ping
    | GetAttachment
    | TriggersOp
    | WebhooksOp
)
OP_TYPES: dict[str, type[_Op]] = {
    "run": StartRun,
    "fork": ForkOp,
    "subscribe": Subscribe,
    "unsubscribe": Unsubscribe,
    "cancel": Cancel,
    "send": Send,
    "approve": Approve,
    "pending": Pending,
    "runs": Runs,
    "threads": ThreadsOp,
    "agents": Agents,
    "ping": Ping,
    "attachment": GetAttachment,
    "triggers": TriggersOp,
    "webhooks": WebhooksOp,
}
OP_NAMES: dict[type[_Op], str] = {kind: name for name, kind in OP_TYPES.items()}
"""Each op's name on the wire (`run` for `StartRun`)."""
MAX_PENDING_LISTED = 10_000
"""Most waiting calls one `pending` reply lists."""
_decode_any = msgspec.json.Decoder().decode
_encode = msgspec.json.Encoder().encode


# -- server frames ---------------------------------------------------------------


class _Frame(msgspec.Struct, kw_only=True, rename="camel", omit_defaults=True, tag_field="op"):
    pass


class Ack(_Frame, tag="ack"):
    """A client message was accepted; `runId`/`sub` when it started a run or a feed."""

    id: MessageId = None
    run_id: str | None = None
    sub: str | None = None
    thread_id: str | None = None
    attachments: list[str] | None = None
    """The ids of the attachments given (`run`, `send`), in order."""


class Pong(_Frame, tag="pong"):
    """The answer to `ping`."""

    id: MessageId = None


class Events(_Frame, tag="events"):
    """One or more events of a subscription, in seq order (sent by `events_frame`)."""

    sub: str
    events: list[Event]


class End(_Frame, tag="end"):
    """The run finished and every matching event was sent."""

    sub: str
    run_id: str
    status: str


class Gap(_Frame, tag="gap"):
    """Events `fromSeq`..`toSeq` can no longer be replayed (retention trimmed them)."""

    sub: str
    from_seq: int
    to_seq: int


class ErrorFrame(_Frame, tag="error"):
    """A client message could not be served, or a subscription broke."""

    code: ErrorCode
    message: str
    id: MessageId = None


class RunInfo(msgspec.Struct, kw_only=True, rename="camel", omit_defaults=True):
    """One entry of the `runs` reply."""

    run_id: str
    agent_id: str
    status: str
    created_at: float
    finished_at: float | None
    owner: str | None
    input: str = ""
    """The run's task, cut to its first 200 characters (for lists)."""
    worker: str | None = None
    """Cluster mode: the instance executing (or that last executed) the run."""
    attempt: int | None = None
    """Cluster mode: 1 for the first worker, +1 per takeover."""
    forked_from: ForkedFrom | None = None
    """A fork: the run and seq it started from."""
    thread_id: str | None = None
    """The thread the run belongs to."""
    previous_run_id: str | None = None
    """The run whose conversation it goes on from (a thread's second run on)."""
    answer: str | None = None
    """The `threads` op with a `threadId`: a completed run's answer (its RUN_FINISHED
    `result`, cut to 20,000 characters), so a thread reads as a chat."""


class ThreadInfo(msgspec.Struct, kw_only=True, rename="camel", omit_defaults=True):
    """One thread of the `threads` reply: its runs' ids, oldest first, and with one
    thread asked, each run as the `runs` reply lists it (`detail`)."""

    thread_id: str
    runs: list[str]
    first_input: str
    """Its first run's input, cut to 200 characters."""
    last_activity: float
    running: str | None = None
    """Its run that has not ended (a new input meets `multitask`)."""
    detail: list[RunInfo] | None = None


class ThreadsReply(_Frame, tag="threads"):
    """The caller's threads, newest activity first (`more`: more remain), one thread,
    or (after a delete) the runs deleted in `deleted`."""

    threads: list[ThreadInfo]
    more: bool = False
    deleted: list[str] | None = None
    id: MessageId = None


class RunsReply(_Frame, tag="runs"):
    """A page of runs, newest first; `more`: older runs remain."""

    runs: list[RunInfo]
    more: bool
    id: MessageId = None


class AgentInfo(msgspec.Struct, kw_only=True):
    """One entry of the `agents` reply."""

    id: str
    name: str
    description: str
    model: str = ""
    """The `models:` entry the agent uses."""
    example: str | None = None
    """A sample task (the subagent's `example`), or None."""
    output_schema: dict[str, Any] | None = msgspec.field(default=None, name="outputSchema")
    """The JSON Schema its answers match (the subagent's `output_schema`), or None."""


class AgentsReply(_Frame, tag="agents"):
    """The subagents."""

    agents: list[AgentInfo]
    id: MessageId = None


class PendingReply(_Frame, tag="pending"):
    """Waiting tool calls, oldest first; `more`: more than `limit` wait."""

    approvals: list[ApprovalInfo]
    more: bool
    id: MessageId = None


class Result(_Frame, tag="result"):
    """A blocking (`stream: false`) run ended."""

    run_id: str
    status: str
    text: str | None
    id: MessageId = None
    error: str | None = None
    structured: Any = msgspec.UNSET
    """The root's validated answer, when the run has an output schema."""


class TriggersReply(_Frame, tag="triggers"):
    """The server's triggers (after the action, if one was asked)."""

    triggers: list[TriggerInfo]
    id: MessageId = None


class WebhooksReply(_Frame, tag="webhooks"):
    """The outbox, as the caller may see it (a user's token: its own runs' deliveries)."""

    webhooks: dict[str, WebhookSpec]
    """The server's webhooks by name (never their secrets)."""
    waiting: int
    """Deliveries not yet taken by their receiver."""
    dead: list[DeliveryInfo]
    """Deliveries whose last attempt failed, oldest first."""
    redelivered: int | None = None
    """With `redeliver`: how many were sent again."""
    id: MessageId = None


class AttachmentReply(_Frame, tag="attachment"):
    """An attachment's bytes (`data`, base64)."""

    run_id: str
    attachment_id: str
    data: str
    id: MessageId = None


ServerFrame = (
    Ack
    | Pong
    | Events
    | End
    | Gap
    | ErrorFrame
    | RunsReply
    | ThreadsReply
    | AgentsReply
    | PendingReply
    | Result
    | AttachmentReply
    | TriggersReply
    | WebhooksReply
)
_frame_decoder: msgspec.json.Decoder[ServerFrame] = msgspec.json.Decoder(ServerFrame)


def decode_server_frame(raw: str | bytes) -> ServerFrame:
    """Read one server frame (clients: `orchestrator watch`, the tests).

    Raises:
        msgspec.DecodeError: not a frame of this protocol.
    """
    return _frame_decoder.decode(raw)


def parse(text: str | bytes) -> ClientOp:
    """Decode and validate one client message.

    Raises:
        ProtocolError: `bad_request` or `unknown_op`, naming what is wrong.
    """
    if isinstance(text, bytes):
        raise ProtocolError("bad_request", "binary frames are not supported: send JSON text frames")
    try:
        obj = _decode_any(text)
    except msgspec.DecodeError as exc:
        raise ProtocolError("bad_request", f"malformed JSON: {exc}") from None
    except RecursionError:
        raise ProtocolError("bad_request", "malformed JSON: nested too deeply") from None
    if not isinstance(obj, dict):
        raise ProtocolError(
            "bad_request", f"a message must be a JSON object, got {type(obj).__name__}"
        )
    msg_id = obj.get("id")
    if not isinstance(msg_id, (str, int)) or isinstance(msg_id, bool):
        msg_id = None
    if "op" not in obj:
        raise ProtocolError("bad_request", "missing field `op`", msg_id)
    op = obj["op"]
    if not isinstance(op, str):
        got = "null" if op is None else type(op).__name__
        raise ProtocolError("bad_request", f"`op` must be a string naming an op, got {got}", msg_id)
    cls = OP_TYPES.get(op)
    if cls is None:
        raise ProtocolError(
            "unknown_op", f"unknown op {op!r} (known: {', '.join(OP_TYPES)})", msg_id
        )
    try:
        message = msgspec.convert(obj, cls)
    except msgspec.ValidationError as exc:
        raise ProtocolError("bad_request", f"{op}: {exc}", msg_id) from None
    except RecursionError:
        raise ProtocolError("bad_request", f"{op}: a value is nested too deeply", msg_id) from None
    problems = []
    filter_spec = getattr(message, "filter", None)
    if filter_spec is not None:
        problems += filter_spec.problems()
    if isinstance(message, Subscribe) and message.after_seq < 0:
        problems.append("afterSeq must be 0 or more")
    if isinstance(message, Runs | ThreadsOp) and not 1 <= message.limit <= 1000:
        problems.append("limit must be 1 to 1000")
    if isinstance(message, Pending) and not 1 <= message.limit <= MAX_PENDING_LISTED:
        problems.append(f"limit must be 1 to {MAX_PENDING_LISTED}")
    if problems:
        raise ProtocolError("bad_request", f"{op}: " + "; ".join(problems), msg_id)
    return message  # type: ignore[return-value]


def encode(frame: _Frame) -> bytes:
    """Encode a server frame."""
    return _encode(frame)


def ack(
    msg_id: MessageId,
    *,
    run_id: str | None = None,
    sub: str | None = None,
    thread_id: str | None = None,
    attachments: list[str] | None = None,
) -> bytes:
    """`{op: "ack", id?, runId?, sub?, threadId?, attachments?}`."""
    return _encode(
        Ack(id=msg_id, run_id=run_id, sub=sub, thread_id=thread_id, attachments=attachments)
    )


def error_frame(code: ErrorCode, message: str, msg_id: MessageId = None) -> bytes:
    """`{op: "error", id?, code, message}`."""
    return _encode(ErrorFrame(code=code, message=message, id=msg_id))


def end_frame(sub: str, run_id: str, status: str) -> bytes:
    """`{op: "end", sub, runId, status}`."""
    return _encode(End(sub=sub, run_id=run_id, status=status))


def gap_frame(sub: str, from_seq: int, to_seq: int) -> bytes:
    """`{op: "gap", sub, fromSeq, toSeq}`: events that can no longer be replayed."""
    return _encode(Gap(sub=sub, from_seq=from_seq, to_seq=to_seq))


def events_frame(sub: str, raws: Iterable[bytes]) -> bytes:
    """`{op: "events", sub, events: [...]}` from already-encoded events (no re-encoding)."""
    return b'{"op":"events","sub":' + _encode(sub) + b',"events":[' + b",".join(raws) + b"]}"
