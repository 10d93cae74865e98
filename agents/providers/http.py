"""The one place that talks HTTP to providers: POST, then SSE events out.

Transport failures, timeouts and non-200 answers become `ProviderError`s that say
whether a retry may help (429, 408, 409, 5xx, 529) and how long the provider asked
us to wait (`Retry-After`).
"""

from __future__ import annotations

import email.utils
import time
from collections.abc import AsyncGenerator
from typing import Any

import httpx

from agents.core.sse import SseDecoder, SseError, SseEvent
from agents.errors import ProviderError

__all__ = ["classify_status", "parse_retry_after", "post_sse"]


def parse_retry_after(value: str | None, *, now: float | None = None) -> float | None:
    """Seconds from a `Retry-After` header (delta-seconds or an HTTP date)."""
    if not value:
        return None
    value = value.strip()
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value).timestamp()
    except (TypeError, ValueError):
        return None
    return max(0.0, when - (time.time() if now is None else now))


def classify_status(status: int) -> bool:
    """Is an HTTP status worth retrying?"""
    return status in (408, 409, 429) or status >= 500


async def post_sse(
    client: httpx.AsyncClient,
    url: str,
    body: dict[str, Any],
    headers: dict[str, str],
    limits: httpx.Timeout,
    *,
    provider: str,
) -> AsyncGenerator[SseEvent, None]:
    """POST `body` and yield the SSE events of the response, then check the tail.

    Raises:
        ProviderError: HTTP status, transport failure, timeout, oversized event.
    """
    decoder = SseDecoder()
    try:
        async with client.stream(
            "POST", url, json=body, headers=headers, timeout=limits
        ) as response:
            if response.status_code != 200:
                detail = (await response.aread())[:500].decode("utf-8", "replace")
                raise ProviderError(
                    f"{provider}: HTTP {response.status_code} from {url}: {detail}",
                    provider=provider,
                    status=response.status_code,
                    retryable=classify_status(response.status_code),
                    retry_after=parse_retry_after(response.headers.get("retry-after")),
                )
            async for chunk in response.aiter_bytes():
                for event in decoder.feed(chunk):
                    yield event
        decoder.close()
    except httpx.TimeoutException as exc:
        raise ProviderError(
            f"{provider}: timed out talking to {url} ({type(exc).__name__})",
            provider=provider,
            error_type="timeout",
            retryable=True,
        ) from exc
    except httpx.TransportError as exc:
        raise ProviderError(
            f"{provider}: connection to {url} failed: {exc}",
            provider=provider,
            error_type="connection",
            retryable=True,
        ) from exc
    except SseError as exc:
        raise ProviderError(f"{provider}: {exc}", provider=provider) from exc
