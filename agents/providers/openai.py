"""The `openai` provider: any OpenAI-compatible Chat Completions endpoint, over SSE."""

from __future__ import annotations

import os
from collections.abc import AsyncGenerator
from contextlib import aclosing

import httpx

from agents.config import ModelConfig
from agents.core.messages import ModelRequest, StreamPart
from agents.core.wire.openai_chat import OpenAIChatNormalizer, encode_request
from agents.errors import ProviderError
from agents.providers.http import post_sse

__all__ = ["OpenAIProvider", "api_key", "timeout_of"]


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


class OpenAIProvider:
    """Streams Chat Completions with `stream_options.include_usage`.

    The HTTP client is shared (connection pooling) and owned by the caller.
    """

    kind = "openai"

    def __init__(self, config: ModelConfig, client: httpx.AsyncClient) -> None:
        self._config = config
        self._client = client
        self._url = config.endpoint_root().rstrip("/") + "/chat/completions"
        self._timeout = timeout_of(config)

    async def stream(self, request: ModelRequest) -> AsyncGenerator[StreamPart, None]:
        """POST the request and yield the normalized stream."""
        body = encode_request(request, model=self._config.model, params=self._config.params)
        headers = {"Accept": "text/event-stream"}
        key = api_key(self._config, self.kind)
        if key:
            headers["Authorization"] = f"Bearer {key}"
        normalizer = OpenAIChatNormalizer()
        events = post_sse(self._client, self._url, body, headers, self._timeout, provider=self.kind)
        async with aclosing(events):
            async for event in events:
                if event.event == "error":
                    raise ProviderError(
                        f"openai stream error event: {event.data[:500]}",
                        provider=self.kind,
                        retryable=True,
                    )
                for part in normalizer.feed(event.data):
                    yield part
        for part in normalizer.end():
            yield part
