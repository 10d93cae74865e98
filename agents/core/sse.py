"""Incremental Server-Sent Events decoder (WHATWG HTML §9.2), bytes in, events out.

Why our own and not httpx-sse: we need a sans-I/O decoder that is fed arbitrary
byte chunks (so it can be property-tested over every chunk boundary and reused
under any transport), that splits lines on CR, LF and CRLF only — never on
U+2028 and friends, which are legal inside JSON strings — and that enforces a
size limit on a single event. It is ~100 lines.
"""

from __future__ import annotations

import codecs

import msgspec

__all__ = ["SseDecoder", "SseError", "SseEvent"]


class SseEvent(msgspec.Struct, frozen=True):
    """One dispatched event."""

    data: str
    event: str = "message"
    id: str = ""
    retry: int | None = None


class SseError(ValueError):
    """The stream broke a limit (an event larger than `max_event_bytes`, or endless
    lines that make no event)."""


class SseDecoder:
    """Feed bytes with `feed()`; get the events completed so far.

    A CR at the end of one chunk followed by LF at the start of the next counts
    as one line end. A leading BOM is stripped once. An unterminated event at
    the end of the stream is discarded (`close()` says whether one was pending).
    """

    def __init__(
        self, *, max_event_bytes: int = 16 * 1024 * 1024, max_ignored_bytes: int = 1024 * 1024
    ) -> None:
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._buf = ""
        self._skip_lf = False
        self._started = False
        self._data: list[str] = []
        self._event = ""
        self._last_id = ""
        self._retry: int | None = None
        self._pending_size = 0
        self._max = max_event_bytes
        self._ignored = 0
        self._max_ignored = max_ignored_bytes
        """Lines with no effect (comments, unknown fields) allowed between two events:
        past it the stream is not an event stream (garbage that never ends)."""

    @property
    def last_event_id(self) -> str:
        """The id to send back as `Last-Event-ID` on reconnect."""
        return self._last_id

    def feed(self, chunk: bytes) -> list[SseEvent]:
        """Decode `chunk` and return every event it completed."""
        text = self._decoder.decode(chunk)
        if not self._started and text:
            self._started = True
            if text[0] == "\ufeff":
                text = text[1:]
        return self._consume(text)

    def close(self) -> bool:
        """End of stream; True if a partial event was pending (and is discarded)."""
        tail = self._decoder.decode(b"", final=True)
        events = self._consume(tail) if tail else []
        pending = bool(self._buf) or bool(self._data) or bool(events)
        self._buf = ""
        self._data = []
        return pending

    def _consume(self, text: str) -> list[SseEvent]:
        if self._skip_lf and text:
            if text[0] == "\n":
                text = text[1:]
            self._skip_lf = False
        buf = self._buf + text if self._buf else text
        events: list[SseEvent] = []
        pos = 0
        n = len(buf)
        # The next CR and LF, looked for again only once passed: a search per line to
        # the end of a read holding hundreds of events (and no CR) was quadratic.
        cr = buf.find("\r")
        lf = buf.find("\n")
        while pos < n:
            if 0 <= cr < pos:
                cr = buf.find("\r", pos)
            if 0 <= lf < pos:
                lf = buf.find("\n", pos)
            if cr == -1 and lf == -1:
                break
            if cr == -1 or (lf != -1 and lf < cr):
                end, nxt = lf, lf + 1
            else:
                end = cr
                if cr + 1 < n:
                    nxt = cr + 2 if buf[cr + 1] == "\n" else cr + 1
                else:  # CR at the very end: a following LF belongs to it
                    nxt = cr + 1
                    self._skip_lf = True
            event = self._line(buf[pos:end])
            if event is not None:
                events.append(event)
            pos = nxt
        self._buf = buf[pos:]
        if len(self._buf) + self._pending_size > self._max:
            raise SseError(f"SSE event larger than {self._max} bytes")
        return events

    def _line(self, line: str) -> SseEvent | None:
        if not line:
            return self._dispatch()
        if line[0] == ":":
            self._ignore(line)
            return None
        name, colon, value = line.partition(":")
        if colon and value[:1] == " ":
            value = value[1:]
        if name == "data":
            self._data.append(value)
            self._pending_size += len(value) + 1
            if self._pending_size > self._max:
                raise SseError(f"SSE event larger than {self._max} bytes")
        elif name == "event":
            self._event = value
        elif name == "id" and "\x00" not in value:
            self._last_id = value
        elif name == "retry" and value.isascii() and value.isdigit():
            self._retry = int(value)
        else:
            self._ignore(line)
        return None

    def _ignore(self, line: str) -> None:
        self._ignored += len(line) + 1
        if self._ignored > self._max_ignored:
            raise SseError(
                f"{self._max_ignored} bytes without an SSE event (comments or unknown "
                "fields only): not an event stream"
            )

    def _dispatch(self) -> SseEvent | None:
        if not self._data:
            self._event = ""
            return None
        event = SseEvent(
            data="\n".join(self._data),
            event=self._event or "message",
            id=self._last_id,
            retry=self._retry,
        )
        self._data = []
        self._event = ""
        self._pending_size = 0
        self._ignored = 0
        return event
