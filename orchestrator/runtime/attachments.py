"""Attachments given with a `run`, a `send` or an `agent_spawn`: checked, decoded or
fetched.

Each is bounded before anything is kept: the count of one request, the media types
allowed, the bytes of one and of the run (`limits.attachments`). One given by URL is
fetched (`https` only) with `http_get`'s rules: its timeout, and no loopback, private
or link-local address unless `tools.http_allow_private`/`http_allowed_hosts` say so.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol

from agents.core.attachments import (
    ATTACHMENT_ID,
    Attachment,
    AttachmentError,
    AttachmentIn,
    AttachmentLimits,
    decode_base64,
)
from agents.errors import ToolError

__all__ = ["Fetcher", "received"]

MAX_NAME = 255


class Fetcher(Protocol):
    """What fetches an attachment's URL (`HttpGetTool.fetch`)."""

    async def fetch(self, url: str, max_bytes: int) -> tuple[int, str | None, bytes, bool]: ...


async def received(
    given: Sequence[AttachmentIn],
    limits: AttachmentLimits,
    fetcher: Fetcher | None,
    known: Mapping[str, Attachment] | None = None,
    *,
    where: str = "attachments",
) -> list[Attachment]:
    """The attachments of one request, with their bytes.

    Args:
        given: the attachments as the request gave them.
        limits: the config's `limits.attachments`.
        fetcher: how an attachment given by URL is fetched (None: none may be).
        known: the attachments the run has already (a `send` may name one by `id`).
        where: how messages name the request's field.

    Raises:
        AttachmentError: one is malformed, too big, of a type not allowed, cannot be
            fetched, or names an id the run does not have; the message says which.
    """
    if len(given) > limits.max_count:
        raise AttachmentError(
            f"{where}: {len(given)} attachments; limits.attachments.max_count is {limits.max_count}"
        )
    out: list[Attachment] = []
    for i, item in enumerate(given):
        spot = f"{where}[{i}]"
        if item.id is not None:
            found = (known or {}).get(item.id)
            if found is None or not ATTACHMENT_ID.match(item.id):
                raise AttachmentError(
                    f"{spot}.id: {item.id[:80]!r} is not an attachment of the run"
                )
            out.append(found)
            continue
        if not 0 < len(item.name) <= MAX_NAME or any(c in item.name for c in "/\\\0"):
            raise AttachmentError(f"{spot}.name: 1 to {MAX_NAME} characters, no / \\ or NUL")
        if (item.data is None) == (item.url is None):
            raise AttachmentError(f"{spot}: give either data (base64) or url")
        limits.check_type(item.media_type, spot)
        if item.data is not None:  # (decoded whole: the request's frame bounds it)
            data = decode_base64(item.data, spot)
        else:
            data = await _fetch(str(item.url), limits, fetcher, spot)
        limits.check_size(len(data), spot)
        out.append(Attachment.of(item.name, item.media_type, data))
    total = sum(a.size for a in out)
    if total > limits.max_run_bytes:
        raise AttachmentError(
            f"{where}: {total} bytes in all; limits.attachments.max_run_bytes is "
            f"{limits.max_run_bytes}"
        )
    return out


async def _fetch(url: str, limits: AttachmentLimits, fetcher: Fetcher | None, spot: str) -> bytes:
    if not url.startswith("https://"):
        raise AttachmentError(f"{spot}.url: an https URL")
    if fetcher is None:
        raise AttachmentError(f"{spot}.url: this server fetches no URL")
    try:
        status, _, body, cut = await fetcher.fetch(url, limits.max_bytes)
    except ToolError as exc:
        raise AttachmentError(f"{spot}.url: {exc}") from None
    if status != 200:
        raise AttachmentError(f"{spot}.url: HTTP {status}")
    if cut:
        raise AttachmentError(
            f"{spot}.url: over limits.attachments.max_bytes ({limits.max_bytes} bytes)"
        )
    return body
