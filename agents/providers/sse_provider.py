"""The shape every HTTP provider shares: encode, POST, decode SSE, normalize.

A concrete provider names its endpoint path, its request encoder, its stream
normalizer and how it sends the API key; everything else — headers, timeouts,
the key from `api_key_env`, closing the stream — is here once.
"""

from __future__ import annotations

import logging
import os
from collections.abc import AsyncGenerator, Callable
from contextlib import aclosing
from typing import Any, ClassVar, Protocol

import httpx

from agents.core.messages import ModelRequest, StreamPart
from agents.core.sse import SseEvent
from agents.errors import ProviderError
from agents.model_config import ModelConfig
from agents.providers.http import post_sse

__all__ = ["Normalizer", "SseProvider", "api_key", "timeout_of"]

logger = logging.getLogger(__name__)


class Normalizer(Protocol):
    """A wire format's stream normalizer (pure)."""

    ignored: dict[str, int]
    """What the stream carried that has no meaning here, by kind (logged per response)."""

    def feed_event(self, event: SseEvent) -> list[StreamPart]:
        """Parts for one SSE event."""
        ...

    def end(self) -> list[StreamPart]:
        """Parts at EOF; raises StreamTruncated without the terminal event."""
        ...


def api_key(config: ModelConfig, provider: str) -> str | None:
    """The key from `api_key_env` (None when no variable is configured)."""
    env = config.api_key_env
    if not env:
        return None
    key = os.environ.get(env)
    if not key:
        raise ProviderError(
            f"{provider}: environment variable {env} (api_key_env) is not set", provider=provider
        )
    return key


def timeout_of(config: ModelConfig) -> httpx.Timeout:
    """Connect and read timeouts of a model."""
    return httpx.Timeout(
        config.read_timeout, connect=config.connect_timeout, pool=config.connect_timeout
    )


class SseProvider:
    """Base of the HTTP providers; the HTTP client is shared and owned by the caller."""

    kind: str
    path: ClassVar[str]
    encode: ClassVar[Callable[..., dict[str, Any]]]
    extra_headers: ClassVar[dict[str, str]] = {}

    def __init__(self, config: ModelConfig, client: httpx.AsyncClient) -> None:
        self._config = config
        self._client = client
        self._url = config.endpoint_root().rstrip("/") + self.path
        self._timeout = timeout_of(config)

    def normalizer(self) -> Normalizer:
        """A fresh normalizer for one response."""
        raise NotImplementedError

    def auth_headers(self, key: str) -> dict[str, str]:
        """How this provider sends its API key."""
        return {"Authorization": f"Bearer {key}"}

    async def stream(self, request: ModelRequest) -> AsyncGenerator[list[StreamPart], None]:
        """POST the request and yield the normalized stream."""
        config = self._config
        body = type(self).encode(
            request, model=config.model, params=config.params, accepts=config.attachment_types()
        )
        headers = {"Accept": "text/event-stream", **self.extra_headers}
        key = api_key(self._config, self.kind)
        if key:
            headers.update(self.auth_headers(key))
        normalizer = self.normalizer()
        events = post_sse(self._client, self._url, body, headers, self._timeout, provider=self.kind)
        try:
            async with aclosing(events):
                async for batch in events:
                    parts: list[StreamPart] = []
                    try:
                        for event in batch:
                            parts.extend(normalizer.feed_event(event))
                    except Exception:
                        if parts:  # what came before the error still counts
                            yield parts
                        raise
                    if parts:
                        yield parts
            parts = list(normalizer.end())
            if parts:
                yield parts
        finally:
            if normalizer.ignored:  # never dropped without a trace
                shown = ", ".join(f"{k} ×{n}" for k, n in sorted(normalizer.ignored.items()))
                logger.warning("%s (%s): ignored %s", self.kind, self._config.model, shown)
