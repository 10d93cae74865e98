"""The `openai` provider: any OpenAI-compatible Chat Completions endpoint, over SSE."""

from __future__ import annotations

import os
from collections.abc import AsyncGenerator

import httpx

from agents.config import ModelConfig
from agents.core.messages import ModelRequest, StreamPart
from agents.core.sse import SseDecoder, SseError
from agents.core.wire.openai_chat import OpenAIChatNormalizer, encode_request
from agents.errors import ProviderError

__all__ = ["OpenAIProvider"]


class OpenAIProvider:
    """Streams Chat Completions with `stream_options.include_usage`.

    The HTTP client is shared (connection pooling) and owned by the caller.
    """

    kind = "openai"

    def __init__(self, config: ModelConfig, client: httpx.AsyncClient) -> None:
        self._config = config
        self._client = client
        self._url = config.base_url.rstrip("/") + "/chat/completions"
        self._timeout = httpx.Timeout(
            config.read_timeout, connect=config.connect_timeout, pool=config.connect_timeout
        )

    def _headers(self) -> dict[str, str]:
        headers = {"Accept": "text/event-stream"}
        env = self._config.api_key_env
        if env:
            key = os.environ.get(env)
            if not key:
                raise ProviderError(
                    f"openai: environment variable {env} (api_key_env) is not set",
                    provider=self.kind,
                )
            headers["Authorization"] = f"Bearer {key}"
        return headers

    async def stream(self, request: ModelRequest) -> AsyncGenerator[StreamPart, None]:
        """POST the request and yield the normalized stream."""
        body = encode_request(request, model=self._config.model, params=self._config.params)
        headers = self._headers()
        normalizer = OpenAIChatNormalizer()
        decoder = SseDecoder()
        try:
            async with self._client.stream(
                "POST", self._url, json=body, headers=headers, timeout=self._timeout
            ) as response:
                if response.status_code != 200:
                    detail = (await response.aread())[:500].decode("utf-8", "replace")
                    raise ProviderError(
                        f"openai: HTTP {response.status_code} from {self._url}: {detail}",
                        provider=self.kind,
                        status=response.status_code,
                    )
                async for chunk in response.aiter_bytes():
                    for event in decoder.feed(chunk):
                        if event.event == "error":
                            raise ProviderError(
                                f"openai stream error event: {event.data[:500]}",
                                provider=self.kind,
                            )
                        for part in normalizer.feed(event.data):
                            yield part
            decoder.close()
            for part in normalizer.end():
                yield part
        except httpx.TimeoutException as exc:
            raise ProviderError(
                f"openai: timed out talking to {self._url} ({type(exc).__name__})",
                provider=self.kind,
            ) from exc
        except httpx.TransportError as exc:
            raise ProviderError(
                f"openai: connection to {self._url} failed: {exc}", provider=self.kind
            ) from exc
        except SseError as exc:
            raise ProviderError(f"openai: {exc}", provider=self.kind) from exc
