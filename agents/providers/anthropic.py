"""The `anthropic` provider: the Messages API, streamed over SSE."""

from __future__ import annotations

from collections.abc import AsyncGenerator
from contextlib import aclosing

import httpx

from agents.config import ModelConfig
from agents.core.messages import ModelRequest, StreamPart
from agents.core.wire.anthropic import AnthropicNormalizer, encode_request
from agents.providers.http import post_sse
from agents.providers.openai import api_key, timeout_of

__all__ = ["AnthropicProvider"]

API_VERSION = "2023-06-01"


class AnthropicProvider:
    """POSTs `/messages` with `stream: true`; the key goes in `x-api-key`."""

    kind = "anthropic"

    def __init__(self, config: ModelConfig, client: httpx.AsyncClient) -> None:
        self._config = config
        self._client = client
        self._url = config.endpoint_root().rstrip("/") + "/messages"
        self._timeout = timeout_of(config)

    async def stream(self, request: ModelRequest) -> AsyncGenerator[StreamPart, None]:
        """POST the request and yield the normalized stream."""
        body = encode_request(request, model=self._config.model, params=self._config.params)
        headers = {"Accept": "text/event-stream", "anthropic-version": API_VERSION}
        key = api_key(self._config, self.kind)
        if key:
            headers["x-api-key"] = key
        normalizer = AnthropicNormalizer()
        events = post_sse(self._client, self._url, body, headers, self._timeout, provider=self.kind)
        async with aclosing(events):
            async for event in events:
                for part in normalizer.feed(event.event, event.data):
                    yield part
        for part in normalizer.end():
            yield part
