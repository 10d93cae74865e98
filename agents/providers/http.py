"""The one place that talks HTTP to providers: POST, then SSE events out.

Transport failures, timeouts and non-200 answers become `ProviderError`s that say
whether a retry may help (429, 408, 409, 5xx, 529) and how long the provider asked
us to wait (`Retry-After`).
"""

from __future__ import annotations

import email.utils
import json
import time
import zlib
from collections.abc import AsyncGenerator
from typing import Any

import httpx

from agents import redact
from agents.core.sse import SseDecoder, SseError, SseEvent
from agents.errors import ProviderError
from agents.providers.tls import tls_failure

__all__ = [
    "ERROR_BODY_BYTES",
    "classify_status",
    "error_type_of",
    "parse_retry_after",
    "post_sse",
    "read_body",
]

ERROR_BODY_BYTES = 64 * 1024
"""How much of a provider's error body is read (it may be huge, or compressed)."""


async def read_body(response: httpx.Response, limit: int) -> tuple[bytes, bool]:
    """At most `limit` bytes of a streamed response body, decoded; and whether it was cut.

    Decompression is bounded too: httpx would inflate a whole compressed chunk at
    once (a 64 KiB gzip bomb chunk is 64 MB), so the raw bytes are inflated here
    with `max_length`. Encodings other than gzip and deflate come back raw.
    """
    encoding = response.headers.get("content-encoding", "identity").strip().lower()
    inflater = None
    if encoding in ("gzip", "x-gzip", "deflate"):
        inflater = zlib.decompressobj(wbits=47)  # 32 + 15: gzip or zlib, detected
    out = bytearray()
    async for raw in response.aiter_raw():
        if inflater is None:
            out += raw
        else:
            try:
                out += inflater.decompress(raw, limit + 1 - len(out))
            except zlib.error:
                break
        if len(out) > limit:
            return bytes(out[:limit]), True
    return bytes(out), False


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


def error_type_of(body: bytes) -> str | None:
    """The provider's own error code in an error body: OpenAI's `error.code` (else
    `error.type`), Anthropic's `error.type`; None if the body says none."""
    try:
        data = json.loads(body)
    except ValueError:
        return None
    error = data.get("error") if isinstance(data, dict) else None
    if not isinstance(error, dict):
        return None
    for key in ("code", "type"):
        value = error.get(key)
        if isinstance(value, str) and value:
            return value
    return None


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
) -> AsyncGenerator[list[SseEvent], None]:
    """POST `body` and yield the SSE events of each read of the response, then check the tail.

    Raises:
        ProviderError: HTTP status, transport failure, timeout, oversized event.
    """
    decoder = SseDecoder()
    try:
        async with client.stream(
            "POST", url, json=body, headers=headers, timeout=limits
        ) as response:
            if response.status_code != 200:
                error_body, _ = await read_body(response, ERROR_BODY_BYTES)
                detail = redact.without(  # (what was sent: httpx adds Basic auth of a URL)
                    error_body[:500].decode("utf-8", "replace"), response.request.headers
                )
                raise ProviderError(
                    f"{provider}: HTTP {response.status_code} from {redact.url(url)}: {detail}",
                    provider=provider,
                    status=response.status_code,
                    error_type=error_type_of(error_body),
                    retryable=classify_status(response.status_code),
                    retry_after=parse_retry_after(response.headers.get("retry-after")),
                )
            async for chunk in response.aiter_bytes():
                events = decoder.feed(chunk)
                if events:
                    yield events
        decoder.close()
    except httpx.TimeoutException as exc:
        raise ProviderError(
            f"{provider}: timed out talking to {redact.url(url)} ({type(exc).__name__})",
            provider=provider,
            error_type="timeout",
            retryable=True,
        ) from exc
    except httpx.TransportError as exc:
        why = tls_failure(exc) or redact.without(redact.url(str(exc)), headers)
        raise ProviderError(
            f"{provider}: connection to {redact.url(url)} failed: {why or type(exc).__name__}",
            provider=provider,
            error_type="connection",
            retryable=True,
        ) from exc
    except SseError as exc:
        raise ProviderError(f"{provider}: {exc}", provider=provider) from exc
