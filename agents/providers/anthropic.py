"""The `anthropic` provider: the Messages API, streamed over SSE."""

from __future__ import annotations

from agents.core.wire.anthropic import AnthropicNormalizer, encode_request
from agents.providers.sse_provider import Normalizer, SseProvider

__all__ = ["AnthropicProvider"]


class AnthropicProvider(SseProvider):
    """POSTs `/messages` with `stream: true`; the key goes in `x-api-key`."""

    kind = "anthropic"
    path = "/messages"
    encode = staticmethod(encode_request)
    extra_headers = {"anthropic-version": "2023-06-01"}  # noqa: RUF012 - read-only

    def normalizer(self) -> Normalizer:
        """Messages stream events."""
        return AnthropicNormalizer()

    def auth_headers(self, key: str) -> dict[str, str]:
        """Anthropic takes the key in `x-api-key`."""
        return {"x-api-key": key}
