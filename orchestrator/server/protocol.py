"""The WebSocket protocol (contract §4): client messages in, server frames out. Pure.

Every client message is a JSON object with `op` and an optional `id` that the
reply echoes. Anything wrong with a message becomes a `ProtocolError` carrying the
error code and a message that names the problem (`Expected \\`int\\`, got
\\`str\\` - at \\`$.afterSeq\\``); the connection stays usable.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Literal

import msgspec

from orchestrator.core.filters import FilterSpec

__all__ = [
    "Agents",
    "Cancel",
    "ClientOp",
    "ErrorCode",
    "Ping",
    "ProtocolError",
    "Run",
    "Runs",
    "Send",
    "Subscribe",
    "Unsubscribe",
    "ack",
    "encode",
    "end_frame",
    "error_frame",
    "events_frame",
    "gap_frame",
    "parse",
    "with_id",
]

ErrorCode = Literal[
    "bad_request",
    "unknown_op",
    "not_found",
    "unauthorized",
    "limit_exceeded",
    "unavailable",
    "internal",
]
Detail = Literal["full", "blocks", "status"]
MessageId = str | int | None


class ProtocolError(Exception):
    """A client message that cannot be served; becomes an `error` frame."""

    def __init__(self, code: ErrorCode, message: str, id: MessageId = None) -> None:
        super().__init__(message)
        self.code: ErrorCode = code
        self.message = message
        self.id = id


class _Op(msgspec.Struct, kw_only=True, rename="camel", forbid_unknown_fields=True):
    op: str
    id: MessageId = None


class Run(_Op):
    """Start a run; with `stream` the connection is subscribed to it from seq 1."""

    agent: str
    input: str
    stream: bool = True
    filter: FilterSpec | None = None
    detail: Detail = "full"


class Subscribe(_Op):
    """Replay a run from the journal after `afterSeq`, then follow it live."""

    run_id: str
    after_seq: int = 0
    filter: FilterSpec | None = None
    detail: Detail = "full"


class Unsubscribe(_Op):
    """Stop a subscription."""

    sub: str


class Cancel(_Op):
    """Cancel a run and every agent in it."""

    run_id: str


class Send(_Op):
    """A message from a person into a running agent (default: the root)."""

    run_id: str
    message: str
    agent_key: str | None = None


class Runs(_Op):
    """List runs, newest first, a page at a time."""

    limit: int = 100
    before: str | None = None
    """A runId from the previous page: list the runs older than it."""


class Agents(_Op):
    """List subagents."""


class Ping(_Op):
    """Liveness check."""


ClientOp = Run | Subscribe | Unsubscribe | Cancel | Send | Runs | Agents | Ping
OPS: dict[str, type[_Op]] = {
    "run": Run,
    "subscribe": Subscribe,
    "unsubscribe": Unsubscribe,
    "cancel": Cancel,
    "send": Send,
    "runs": Runs,
    "agents": Agents,
    "ping": Ping,
}
_decode_any = msgspec.json.Decoder().decode
_encode = msgspec.json.Encoder().encode


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
    op = obj.get("op")
    if op is None:
        raise ProtocolError("bad_request", "missing field `op`", msg_id)
    cls = OPS.get(op) if isinstance(op, str) else None
    if cls is None:
        raise ProtocolError("unknown_op", f"unknown op {op!r} (known: {', '.join(OPS)})", msg_id)
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
    if isinstance(message, Runs) and not 1 <= message.limit <= 1000:
        problems.append("limit must be 1 to 1000")
    if problems:
        raise ProtocolError("bad_request", f"{op}: " + "; ".join(problems), msg_id)
    return message  # type: ignore[return-value]


def encode(frame: dict[str, Any]) -> bytes:
    """Encode a control frame."""
    return _encode(frame)


def with_id(frame: dict[str, Any], msg_id: MessageId) -> dict[str, Any]:
    """Add the `id` of the client message a reply answers (when it had one)."""
    if msg_id is not None:
        frame["id"] = msg_id
    return frame


def ack(msg_id: MessageId, **fields: Any) -> bytes:
    """`{op: "ack", id, …}`."""
    return encode(with_id({"op": "ack", **fields}, msg_id))


def error_frame(code: ErrorCode, message: str, msg_id: MessageId = None) -> bytes:
    """`{op: "error", id?, code, message}`."""
    return encode(with_id({"op": "error", "code": code, "message": message}, msg_id))


def end_frame(sub: str, run_id: str, status: str) -> bytes:
    """`{op: "end", sub, runId, status}`."""
    return encode({"op": "end", "sub": sub, "runId": run_id, "status": status})


def gap_frame(sub: str, from_seq: int, to_seq: int) -> bytes:
    """`{op: "gap", sub, fromSeq, toSeq}`: events that can no longer be replayed."""
    return encode({"op": "gap", "sub": sub, "fromSeq": from_seq, "toSeq": to_seq})


def events_frame(sub: str, raws: Iterable[bytes]) -> bytes:
    """`{op: "events", sub, events: [...]}` from already-encoded events (no re-encoding)."""
    return b'{"op":"events","sub":' + _encode(sub) + b',"events":[' + b",".join(raws) + b"]}"
