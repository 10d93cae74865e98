"""The `blocks` detail level: REASONING deltas merged into paragraph/sentence blocks (pure).

A block ends only where a delta ends, so a merged event can carry the seq of its
last delta and resume cursors stay exact. A block is cut once it holds at least
`min_chars` and ends at a paragraph break (or the next delta opens one); from the
middle of the range at a line break or a sentence end; anywhere at `max_chars`. Never inside a code
fence (until a hard cap of 4 × `max_chars`). A block only spans consecutive deltas
of one agent: when another agent's event arrives, the partial block goes out first,
so nothing with a lower seq is ever left behind a higher one a client has seen
(interleaved parallel agents therefore merge into smaller blocks).
"""

from __future__ import annotations

from typing import cast

import msgspec

from agents.core.payloads import ReasoningData
from orchestrator.core.events import Event, EventType

__all__ = ["HANDLES", "IGNORES", "BlockMerger"]

_SENTENCE_ENDS = (".", "!", "?", '."', '!"', '?"', ".)", ":")


HANDLES = frozenset({EventType.REASONING})
"""Event types the merger reads: a REASONING delta joins its agent's block."""
IGNORES = frozenset(
    {
        EventType.RUN_STARTED,
        EventType.AGENT_STARTED,
        EventType.TOOL_CALL_DELTA,
        EventType.TOOL_CALL,
        EventType.TOOL_RESULT,
        EventType.AGENT_RESULT,
        EventType.AGENT_ERROR,
        EventType.USER_MESSAGE,
        EventType.TOOL_PROGRESS,
        EventType.RUN_RESUMED,
        EventType.TURN_ABANDONED,
        EventType.APPROVAL_REQUESTED,
        EventType.APPROVAL_RESOLVED,
        EventType.COMPACTION_STARTED,
        EventType.COMPACTION_FINISHED,
        EventType.AGENT_STALLED,
        EventType.MODEL_FALLBACK,
        EventType.RUN_FINISHED,
    }
)
"""Event types it passes on as they are (after flushing the open blocks);
tests/unit/test_payloads.py checks that every type is in one of the two."""


class _Buffer:
    __slots__ = ("last", "parts", "size")

    def __init__(self) -> None:
        self.parts: list[str] = []
        self.size = 0
        self.last: Event | None = None


class BlockMerger:
    """Feed events in seq order; get back what to send (merged blocks and the rest)."""

    def __init__(self, *, min_chars: int = 80, max_chars: int = 600) -> None:
        self.min_chars = min_chars
        self.max_chars = max_chars
        self._buffers: dict[str | None, _Buffer] = {}

    def feed(self, event: Event) -> list[Event]:
        """One event in; the events to send now out (possibly none)."""
        key = event.source.agent_key if event.source is not None else None
        if (
            event.type is EventType.REASONING
            and not event.last
            and "delta" in (streamed := cast(ReasoningData, event.data))
        ):
            text = streamed["delta"]
            # Another agent's partial block goes out first: a block must never hold a
            # delta older than one of a block sent before it (resume cursors).
            out: list[Event] = self._flush_others(key)
            buffer = self._buffers.get(key)
            if buffer is not None and self._breaks_before(buffer, text):
                out.append(self._take(key))
            buffer = self._buffers.setdefault(key, _Buffer())
            buffer.parts.append(text)
            buffer.size += len(text)
            buffer.last = event
            if self._should_cut(buffer):
                out.append(self._take(key))
            return out
        out = self.flush()
        out.append(event)
        return out

    def flush(self) -> list[Event]:
        """Every partial block, oldest first (call before an `end`)."""
        keys = sorted(
            (k for k, b in self._buffers.items() if b.last is not None),
            key=lambda k: self._buffers[k].last.seq,  # type: ignore[union-attr]
        )
        return [self._take(k) for k in keys]

    def _flush_others(self, key: str | None) -> list[Event]:
        keys = sorted(
            (k for k, b in self._buffers.items() if k != key and b.last is not None),
            key=lambda k: self._buffers[k].last.seq,  # type: ignore[union-attr]
        )
        return [self._take(k) for k in keys]

    def _take(self, key: str | None) -> Event:
        buffer = self._buffers.pop(key)
        assert buffer.last is not None
        return msgspec.structs.replace(buffer.last, data={"delta": "".join(buffer.parts)})

    def _breaks_before(self, buffer: _Buffer, delta: str) -> bool:
        """A delta that opens with a paragraph (or line) break ends the block before it."""
        if buffer.size < self.min_chars:
            return False
        text = "".join(buffer.parts)
        buffer.parts = [text]
        if text.count("```") % 2 == 1:
            return False
        if delta.startswith("\n\n"):
            return True
        return delta.startswith("\n") and buffer.size >= (self.min_chars + self.max_chars) // 2

    def _should_cut(self, buffer: _Buffer) -> bool:
        size = buffer.size
        if size < self.min_chars:
            return False
        text = "".join(buffer.parts)
        buffer.parts = [text]
        if text.count("```") % 2 == 1:  # inside a code fence
            return size >= 4 * self.max_chars
        if text.endswith("\n\n"):
            return True
        middle = (self.min_chars + self.max_chars) // 2
        if size >= middle and (text.endswith("\n") or text.rstrip(" ").endswith(_SENTENCE_ENDS)):
            return True
        return size >= self.max_chars
