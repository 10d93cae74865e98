"""An agent's model and its fallbacks: a turn its model cannot serve goes to the next.

A subagent may list `fallback_models`. When a model turn fails before anything
streamed, for a reason the subagent lists in `fallback_on` — overloaded (529),
rate-limited (429, once the model's own retries are spent), the prompt too long for
it, or the provider unavailable (5xx, no connection, a timeout, a cut stream) — the
same request goes to the next model, and the instance stays on it for its later
turns (the failed one is likely to fail again soon). Each switch is told to the
runner (`on_switch`), which emits MODEL_FALLBACK. A failure after output has
streamed is final: its deltas are out already.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Awaitable, Callable, Collection, Sequence
from contextlib import aclosing

from agents.core.compaction import overflow_of
from agents.core.messages import ModelRequest, StreamPart
from agents.errors import ProviderError
from agents.providers.base import Provider

__all__ = ["ModelChain", "fallback_reason"]

Switch = Callable[[str, str, str, str], Awaitable[None]]
"""`on_switch(from_key, to_key, reason, error)`."""


def fallback_reason(exc: ProviderError) -> str | None:
    """Which `fallback_on` class a provider error is (None: none; it is final)."""
    kind = (exc.error_type or "").lower()
    if exc.status == 529 or "overloaded" in kind:
        return "overloaded"
    if exc.status == 429 or "rate_limit" in kind:
        return "rate_limit"
    if overflow_of(exc) is not None:
        return "context_length"
    if (exc.status is not None and exc.status >= 500) or exc.retryable:
        return "unavailable"
    return None


class ModelChain:
    """The models one agent instance may use, in order, as one `Provider`.

    Args:
        models: `(model key, provider)`, the agent's own model first.
        on: the `fallback_on` reasons that move to the next model.
    """

    __slots__ = ("_models", "_on", "index", "kind", "on_switch")

    def __init__(self, models: Sequence[tuple[str, Provider]], on: Collection[str]) -> None:
        self._models = list(models)
        self._on = frozenset(on)
        self.index = 0
        """The model in use (its turns go to it until it fails over)."""
        self.on_switch: Switch | None = None
        self.kind = self._models[0][1].kind
        """The provider kind of the model in use."""

    @property
    def model(self) -> str:
        """The key of the model in use."""
        return self._models[self.index][0]

    async def stream(self, request: ModelRequest) -> AsyncGenerator[list[StreamPart], None]:
        """The turn from the model in use, falling over to the next while it fails
        before any output for a listed reason."""
        while True:
            key, provider = self._models[self.index]
            emitted = False
            try:
                async with aclosing(provider.stream(request)) as parts:
                    async for batch in parts:
                        emitted = True
                        yield batch
                return
            except ProviderError as exc:
                reason = fallback_reason(exc)
                if emitted or reason not in self._on or self.index + 1 >= len(self._models):
                    raise
                self.index += 1
                self.kind = self._models[self.index][1].kind
                if self.on_switch is not None:
                    await self.on_switch(key, self._models[self.index][0], reason, str(exc))
