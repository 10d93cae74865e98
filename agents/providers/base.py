"""The one interface every model provider implements."""

from __future__ import annotations

from collections.abc import AsyncGenerator
from typing import Protocol

from agents.core.messages import ModelRequest, StreamPart

__all__ = ["Provider"]


class Provider(Protocol):
    """Streams one model turn.

    `stream()` is an async generator: callers must close it (use
    `contextlib.aclosing`). It yields non-empty lists of `StreamPart`s — the parts
    that arrived together (one network read) — and ends after a `Finish` (a
    `UsageReport` may follow it); a failure raises `ProviderError`.

    Why lists: a step of an async generator costs about as much as everything
    else the runner does with a delta, and a network read usually holds several
    deltas; one step per read instead of per delta (through every layer: SSE
    decoding, normalizing, retrying) is what makes forwarding cheap per event.
    """

    kind: str
    """The provider kind (`openai`, `scripted`, …), for error messages."""

    def stream(self, request: ModelRequest) -> AsyncGenerator[list[StreamPart], None]:
        """Stream the model's answer to `request`."""
        ...
