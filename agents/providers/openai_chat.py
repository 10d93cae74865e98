"""The `openai` provider: any OpenAI-compatible Chat Completions endpoint, over SSE."""

from __future__ import annotations

from agents.core.wire.openai_chat import OpenAIChatNormalizer, encode_request
from agents.providers.sse_provider import Normalizer, SseProvider

__all__ = ["OpenAIProvider"]


class OpenAIProvider(SseProvider):
    """Streams `/chat/completions` with `stream_options.include_usage`."""

    kind = "openai"
    path = "/chat/completions"
    encode = staticmethod(encode_request)

    def normalizer(self) -> Normalizer:
        """Chat Completions chunks, hardened against compatible servers' quirks."""
        return OpenAIChatNormalizer()
