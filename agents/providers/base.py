"""The one interface every model provider implements."""

from __future__ import annotations

from collections.abc import AsyncGenerator
from typing import Protocol

from agents.core.messages import ModelRequest, StreamPart

__all__ = ["Provider"]


class Provider(Protocol):
    """Streams one model turn.

    `stream()` is an async generator: callers must close it (use
    `contextlib.aclosing`). It yields `StreamPart`s and ends after a `Finish`
    (a `UsageReport` may follow it); a failure raises `ProviderError`.
    """

    kind: str
    """The provider kind (`openai`, `scripted`, …), for error messages."""

    def stream(self, request: ModelRequest) -> AsyncGenerator[StreamPart, None]:
        """Stream the model's answer to `request`."""
        ...
