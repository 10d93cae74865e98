"""One attempt of one delivery: an HTTP POST of its body, signed, under `http_get`'s
rules (no loopback, private or link-local address unless `tools.http_allow_private`
or `http_allowed_hosts` say so; no redirect followed) and one deadline.

Only the status is read: a 2xx is delivered; anything else, a refused address, a
connection that fails or no answer in time is a failed attempt with its reason
(never the secret or a header's value).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection

import httpx
import trio

from agents.errors import ToolError
from agents.tools.builtin import check_host
from orchestrator.core.webhooks import MAX_ERROR, Delivery, shown_url, sign

__all__ = ["Attempt", "Sender"]

Attempt = str | None
"""What one attempt came to: None delivered, else why it failed."""


class Sender:
    """Posts deliveries.

    Args:
        client: the HTTP client (one pool for every receiver).
        timeout: one attempt's deadline.
        allow_private, allowed_hosts: `tools.http_allow_private`, `http_allowed_hosts`.
        now: the wall clock the `webhook-timestamp` is read from.
    """

    def __init__(
        self,
        client: httpx.AsyncClient,
        *,
        timeout: float,
        allow_private: bool = False,
        allowed_hosts: Collection[str] = (),
        now: Callable[[], float] = time.time,
    ) -> None:
        self._client = client
        self._timeout = timeout
        self._allow_private = allow_private
        self._allowed_hosts = {h.lower() for h in allowed_hosts}
        self._now = now

    async def attempt(self, delivery: Delivery, key: bytes | None) -> Attempt:
        """POST `delivery` once (signed with `key` when there is one). A failure's reason
        shows the URL as `shown_url` does (its path may be a secret)."""
        headers = {"content-type": "application/json", "user-agent": "agent-orchestrator"}
        headers.update(delivery.headers or {})
        headers["webhook-id"] = delivery.id  # (unsigned too: a receiver dedupes by it)
        if key is not None:
            stamp = int(self._now())
            headers["webhook-timestamp"] = str(stamp)
            headers["webhook-signature"] = sign(key, delivery.id, stamp, delivery.body)
        with trio.move_on_after(self._timeout) as deadline:
            try:
                status = await self._post(delivery, headers)
            except ToolError as exc:
                return _hidden(str(exc), delivery.url)
            except httpx.HTTPError as exc:
                return _hidden(f"{type(exc).__name__}: {exc}".rstrip(": "), delivery.url)
        if deadline.cancelled_caught:
            return f"no answer in {self._timeout:g} s"
        return None if 200 <= status < 300 else f"HTTP {status}"

    async def _post(self, delivery: Delivery, headers: dict[str, str]) -> int:
        """The POST's status (its body read and dropped)."""
        await check_host(
            delivery.url,
            allow_private=self._allow_private,
            allowed_hosts=self._allowed_hosts,
            what="webhook",
        )
        async with self._client.stream(
            "POST", delivery.url, content=delivery.body, headers=headers
        ) as response:
            await _drain(response)  # (read: the connection is then reused)
            return response.status_code


def _hidden(error: str, url: str) -> str:
    """An attempt's error as kept and shown: the URL as `shown_url` has it, cut."""
    return error.replace(url, shown_url(url))[:MAX_ERROR]


async def _drain(response: httpx.Response, most: int = 64 * 1024) -> None:
    """Read (and drop) the answer's body, up to `most` bytes."""
    read = 0
    async for chunk in response.aiter_raw():
        read += len(chunk)
        if read > most:
            break
