"""The `openai-responses` provider: the OpenAI Responses API, streamed over SSE."""

from __future__ import annotations

from collections.abc import AsyncGenerator
from contextlib import aclosing

import httpx

from agents.config import ModelConfig
from agents.core.messages import ModelRequest, StreamPart
from agents.core.wire.openai_responses import ResponsesNormalizer, encode_request
from agents.providers.http import post_sse
from agents.providers.openai import api_key, timeout_of

__all__ = ["OpenAIResponsesProvider"]


class OpenAIResponsesProvider:
    """POSTs `/responses` with `stream: true` and `store: false` (stateless turns)."""

    kind = "openai-responses"

    def __init__(self, config: ModelConfig, client: httpx.AsyncClient) -> None:
        self._config = config
        self._client = client
        self._url = config.endpoint_root().rstrip("/") + "/responses"
        self._timeout = timeout_of(config)

    async def stream(self, request: ModelRequest) -> AsyncGenerator[StreamPart, None]:
        """POST the request and yield the normalized stream."""
        body = encode_request(request, model=self._config.model, params=self._config.params)
        headers = {"Accept": "text/event-stream"}
        key = api_key(self._config, self.kind)
        if key:
            headers["Authorization"] = f"Bearer {key}"
        normalizer = ResponsesNormalizer()
        events = post_sse(self._client, self._url, body, headers, self._timeout, provider=self.kind)
        async with aclosing(events):
            async for event in events:
                for part in normalizer.feed(event.data):
                    yield part
        for part in normalizer.end():
            yield part
