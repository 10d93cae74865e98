"""Retries a model turn that failed before it streamed anything.

A retryable provider error (429, 5xx, 529, overloaded, a truncated stream, a
timeout) raised before the first `StreamPart` went out is retried after a
backoff — `Retry-After` when the provider sent one, else base × 2^attempt — up to
`max_retries` times. The wait is a plain `trio.sleep`, so cancelling the agent
cancels it. Once output has gone out, an error is final: retrying would resend
deltas the consumer already has.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator
from contextlib import aclosing

import trio

from agents.core.messages import ModelRequest, StreamPart
from agents.errors import ProviderError
from agents.providers.base import Provider

__all__ = ["RetryingProvider", "backoff_delay"]

MAX_DELAY = 60.0


def backoff_delay(attempt: int, base: float, retry_after: float | None) -> float:
    """Seconds to wait before retry number `attempt` (1-based)."""
    if retry_after is not None:
        return min(retry_after, MAX_DELAY)
    return min(base * 2.0 ** (attempt - 1), MAX_DELAY)


class RetryingProvider:
    """Wraps a provider with bounded, cancellable retries of failed turns."""

    def __init__(self, inner: Provider, *, max_retries: int, base_delay: float) -> None:
        self.inner = inner
        self.kind = inner.kind
        self.max_retries = max_retries
        self.base_delay = base_delay
        self.retries = 0
        """Retries made so far (for tests and metrics)."""

    async def stream(self, request: ModelRequest) -> AsyncGenerator[list[StreamPart], None]:
        """The inner stream, retried while it fails before any output."""
        attempt = 0
        while True:
            emitted = False
            try:
                async with aclosing(self.inner.stream(request)) as parts:
                    async for batch in parts:
                        emitted = True
                        yield batch
                return
            except ProviderError as exc:
                if emitted or not exc.retryable or attempt >= self.max_retries:
                    if attempt:
                        exc.args = (f"{exc.args[0]} (after {attempt} retries)",)
                    raise
                attempt += 1
                self.retries += 1
                await trio.sleep(backoff_delay(attempt, self.base_delay, exc.retry_after))
