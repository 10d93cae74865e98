"""Cap an event's encoded size for clients, keeping its shape. Pure.

A 10 MB tool argument must not become three 10 MB events that close every
client with a 1 MiB frame limit (and hit them again on every resume). Long strings
anywhere in `data` are cut, longest first, with a marker that says how much was
cut; the event keeps its type, ids and keys, and gets `data.truncated: true`. The
agent and its tools still see the whole value: only what is journaled and sent is
cut.
"""

from __future__ import annotations

from typing import Any

import msgspec

from orchestrator.core.events import Event

__all__ = ["cap_event", "truncation_marker"]

_encode = msgspec.json.Encoder().encode
_MIN_KEEP = 64
_IDS = frozenset({"toolCallId", "name", "agentId", "status", "errorType", "from"})
"""Keys an event keeps when it is too wide to cut string by string."""


def truncation_marker(cut: int) -> str:
    """The text that replaces the end of a cut string."""
    return f"…[truncated {cut} characters]"


def _cut_strings(value: Any, limit: int) -> Any:
    if isinstance(value, str):
        if len(value) <= limit:
            return value
        return value[:limit] + truncation_marker(len(value) - limit)
    if isinstance(value, dict):
        return {k: _cut_strings(v, limit) for k, v in value.items()}
    if isinstance(value, list):
        return [_cut_strings(v, limit) for v in value]
    return value


def cap_event(event: Event, raw: bytes, max_bytes: int) -> tuple[Event, bytes]:
    """The event and its encoding, cut to at most `max_bytes` (unchanged when it fits)."""
    if len(raw) <= max_bytes:
        return event, raw
    limit = max(max_bytes // 2, _MIN_KEEP)
    while True:
        data = _cut_strings(event.data, limit)
        data["truncated"] = True
        capped = msgspec.structs.replace(event, data=data)
        encoded = _encode(capped)
        if len(encoded) <= max_bytes:
            return capped, encoded
        if limit <= _MIN_KEEP:
            break
        limit = max(limit // 2, _MIN_KEEP)
    # Too many small values to fit (a huge list or object): keep only the ids.
    kept = {k: v for k, v in event.data.items() if isinstance(v, (bool, int, float)) or k in _IDS}
    kept = _cut_strings(kept, _MIN_KEEP)
    kept.update(truncated=True, originalBytes=len(raw))
    capped = msgspec.structs.replace(event, data=kept)
    return capped, _encode(capped)
