"""Monotonic append: what a stream already emitted is never emitted again.

Some providers resend text they already streamed (a full-text final chunk,
`output_text.done`, a proxy's `text_end`). `MonotonicText` keeps what went out
and turns a resend into just its new suffix, so a turn's deltas always
concatenate to its final text.
"""

from __future__ import annotations

__all__ = ["MonotonicText"]


class MonotonicText:
    """The text emitted so far for one stream of text."""

    __slots__ = ("_parts", "_size")

    def __init__(self) -> None:
        self._parts: list[str] = []
        self._size = 0

    @property
    def text(self) -> str:
        """Everything emitted so far."""
        if len(self._parts) > 1:
            self._parts = ["".join(self._parts)]
        return self._parts[0] if self._parts else ""

    def append(self, delta: str) -> str:
        """A plain delta: emitted as it is."""
        if delta:
            self._parts.append(delta)
            self._size += len(delta)
        return delta

    def full(self, text: str) -> str:
        """The provider's full text so far: returns only the part not yet emitted.

        A resend that does not extend what went out (shorter, or different) adds
        nothing: emitted text cannot be taken back.
        """
        if len(text) <= self._size:
            return ""
        sent = self.text
        if not text.startswith(sent):
            return ""
        return self.append(text[self._size :])
