"""The `openai-responses` provider: the OpenAI Responses API, streamed over SSE."""

from __future__ import annotations

from agents.core.wire.openai_responses import ResponsesNormalizer, encode_request
from agents.providers.sse_provider import Normalizer, SseProvider

__all__ = ["OpenAIResponsesProvider"]


class OpenAIResponsesProvider(SseProvider):
    """POSTs `/responses` with `stream: true` and `store: false` (stateless turns)."""

    kind = "openai-responses"
    path = "/responses"
    encode = staticmethod(encode_request)

    def normalizer(self) -> Normalizer:
        """Responses semantic events."""
        return ResponsesNormalizer()
