"""Webhooks out, without I/O: which events a webhook wants, the delivery made of one,
its Standard Webhooks signature, and when a failed one is tried again
(docs/webhooks.md#webhooks-out).

A delivery's id is derived from (webhook, run, seq): the same event matched again —
after a restart re-reads the journal past what was stored — makes the same id, so a
receiver that dedupes by `webhook-id` sees it once however often it is sent. The
signature is Standard Webhooks' `v1`: base64 HMAC-SHA256, keyed by the decoded
`whsec_` secret, of `id.timestamp.body`, signed again at each attempt (a receiver
refuses a timestamp older than five minutes) while the id stays.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
from datetime import UTC, datetime
from typing import Any
from urllib.parse import unquote, urlsplit

import msgspec

from orchestrator.core.events import Event, EventType
from orchestrator.core.filters import FeedFilter, FilterSpec

__all__ = [
    "Delivery",
    "DeliveryInfo",
    "WebhookSpec",
    "message_id",
    "retry_delay",
    "secret_key",
    "shown_url",
    "sign",
    "standard_body",
    "url_allowed",
]

_TYPES = frozenset(t.value for t in EventType)
SECRET_PREFIX = "whsec_"
MAX_URL = 2048
MAX_TEMPLATE = 16 * 1024
"""The longest body template (JSON-encoded); a body made from one is at most
`MAX_BODY` characters of filled text."""
MAX_BODY = 256 * 1024
MAX_ERROR = 300
"""Characters of a failed attempt's reason kept with the delivery."""


class WebhookSpec(
    msgspec.Struct, kw_only=True, rename="camel", forbid_unknown_fields=True, omit_defaults=True
):
    """One webhook: where it goes, which events, and how they are signed. A config's
    `webhooks.<name>` and a `run` op's `webhooks[i]` both become one."""

    url: str
    events: list[str] | None = None
    """Event types sent (None: every type)."""
    min_depth: int | None = None
    """Only events of agents this deep or deeper (the root is 0)."""
    max_depth: int | None = None
    path_glob: str | None = None
    """Only events of agents whose path matches (`*` one segment, `**` any)."""
    agent_ids: list[str] | None = None
    secret: str = ""
    """The `whsec_` secret its deliveries are signed with (a `run` op's: required)."""
    body_template: dict[str, Any] | list[Any] | None = None
    """A body of the receiver's own shape, filled from the standard one
    (`core/hooks.fill_json`); None: the standard body."""

    def problems(self, where: str) -> list[str]:
        """What is invalid (empty when it is fine), each naming `where`."""
        found = []
        parts = urlsplit(self.url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            found.append(f"{where}.url must be an http(s) URL with a host")
        if len(self.url) > MAX_URL:
            found.append(f"{where}.url is longer than {MAX_URL} characters")
        for kind in self.events or ():
            if kind not in _TYPES:
                found.append(f"{where}.events: unknown event type {kind!r}")
        if self.min_depth is not None and self.min_depth < 0:
            found.append(f"{where}.minDepth must be 0 or more")
        spec = self.filter_spec()  # (its `types` are `events`: said once, above)
        found += [
            f"{where}.{p.removeprefix('filter.')}"
            for p in spec.problems()
            if not p.startswith("filter.types")
        ]
        try:
            secret_key(self.secret)
        except ValueError as exc:
            found.append(f"{where}.secret: {exc}")
        if self.body_template is not None:
            size = len(msgspec.json.encode(self.body_template))
            if size > MAX_TEMPLATE:
                found.append(f"{where}.bodyTemplate is over {MAX_TEMPLATE} bytes ({size})")
        return found

    def filter_spec(self) -> FilterSpec:
        """Its filters as a feed's (all but `minDepth`)."""
        return FilterSpec(
            max_depth=self.max_depth,
            path_glob=self.path_glob,
            agent_ids=self.agent_ids,
            types=self.events,
        )

    def matcher(self, *, root_agent_id: str, root_session_id: str) -> Matcher:
        """Its filters compiled for one run."""
        feed = FeedFilter(
            self.filter_spec(), root_agent_id=root_agent_id, root_session_id=root_session_id
        )
        return Matcher(feed, self.min_depth or 0)


class Matcher:
    """A webhook's filters for one run: `matches(event)`."""

    __slots__ = ("_feed", "_min_depth")

    def __init__(self, feed: FeedFilter, min_depth: int) -> None:
        self._feed = feed
        self._min_depth = min_depth

    def matches(self, event: Event) -> bool:
        """True if the webhook wants the event."""
        depth = event.source.depth if event.source is not None else 0
        return depth >= self._min_depth and self._feed.matches(event)


class Delivery(msgspec.Struct, kw_only=True, omit_defaults=True):
    """One event on its way to one receiver: kept in the outbox until the receiver
    answers 2xx, or dead after its last attempt."""

    id: str
    webhook: str
    """The config's webhook name; `run:<i>` for a run's own; `a2a:<configId>` for an
    A2A push config."""
    url: str
    run_id: str
    seq: int
    type: str
    body: bytes
    created_at: float
    attempts: int = 0
    next_at: float = 0.0
    dead: bool = False
    last_error: str | None = None
    headers: dict[str, str] | None = None
    """Headers of its kind (an A2A push config's token and authorization)."""
    secret: str | None = None
    """A run's own webhook's secret (a config webhook's is read from the config)."""

    def info(self) -> DeliveryInfo:
        """What a person is shown of it (never its secret or headers)."""
        return DeliveryInfo(
            id=self.id,
            webhook=self.webhook,
            url=shown_url(self.url),
            run_id=self.run_id,
            seq=self.seq,
            type=self.type,
            attempts=self.attempts,
            created_at=self.created_at,
            next_at=None if self.dead else self.next_at,
            last_error=self.last_error,
        )


class DeliveryInfo(msgspec.Struct, kw_only=True, rename="camel", omit_defaults=True):
    """A delivery as the `webhooks` op lists it."""

    id: str
    webhook: str
    url: str
    run_id: str
    seq: int
    type: str
    attempts: int
    created_at: float
    next_at: float | None = None
    last_error: str | None = None


def message_id(webhook: str, run_id: str, seq: int, part: int = 0) -> str:
    """The delivery id of `seq` of `run_id` to `webhook` (`part`: the n-th body one
    event makes there): the same every time."""
    digest = hashlib.sha256(f"{webhook}\x00{run_id}\x00{seq}\x00{part}".encode()).hexdigest()
    return f"msg_{digest[:32]}"


def standard_body(event: Event, raw: bytes) -> bytes:
    """The JSON body of an event's delivery: Standard Webhooks' `type`, `timestamp` and
    `data`, with `runId` and `seq` at the top for deduping and ordering. `raw` is the
    journaled event (`data` is it, byte for byte)."""
    stamp = datetime.fromtimestamp(event.ts, UTC).isoformat().replace("+00:00", "Z")
    head = msgspec.json.encode(
        {"type": str(event.type), "timestamp": stamp, "runId": event.run_id, "seq": event.seq}
    )
    return head[:-1] + b',"data":' + raw + b"}"


def secret_key(secret: str) -> bytes:
    """The HMAC key of a `whsec_<base64>` secret.

    Raises:
        ValueError: not that shape, or fewer than 24 bytes (Standard Webhooks asks for
            24 to 64).
    """
    if not secret.startswith(SECRET_PREFIX):
        raise ValueError(f"a webhook secret starts with {SECRET_PREFIX!r} (then base64)")
    try:
        text = secret[len(SECRET_PREFIX) :]
        key = base64.b64decode(text + "=" * (-len(text) % 4), validate=True)
    except (binascii.Error, ValueError):
        raise ValueError("a webhook secret's part after 'whsec_' must be base64") from None
    if not 24 <= len(key) <= 64:
        raise ValueError(f"a webhook secret must decode to 24-64 bytes, not {len(key)}")
    return key


def sign(key: bytes, msg_id: str, timestamp: int, body: bytes) -> str:
    """The `webhook-signature` header of one attempt."""
    signed = b"%s.%d.%s" % (msg_id.encode(), timestamp, body)
    digest = hmac.new(key, signed, hashlib.sha256).digest()
    return "v1," + base64.b64encode(digest).decode()


def retry_delay(attempts: int, first: float, most: float) -> float:
    """Seconds before the next attempt after `attempts` failed ones: `first`, doubling,
    at most `most`."""
    return min(first * 2.0 ** min(attempts - 1, 60), most)


def shown_url(url: str) -> str:
    """A receiver's URL as lists and errors show it: its origin, then `/…` for a path or
    query (a URL may carry a secret there: a Slack webhook's path is one)."""
    parts = urlsplit(url)
    origin = f"{parts.scheme}://{parts.hostname or ''}" + (f":{parts.port}" if parts.port else "")
    return origin + ("/…" if parts.path.strip("/") or parts.query else "")


def _dot_segments(path: str) -> bool:
    """Does `path` have a `.` or `..` segment, however its dots (or slashes, or a
    backslash a server may take for one) are escaped?"""
    decoded = unquote(path).replace("\\", "/")
    return any(segment in (".", "..") for segment in decoded.split("/"))


def url_allowed(url: str, prefixes: list[str]) -> bool:
    """True if `url` is under one of `prefixes`: the same scheme, host and port, and a
    path at or below the prefix's (whole segments). A run's own webhook must be.

    A path with a `.` or `..` segment (`%2e` spelt or not) is never under a prefix:
    an HTTP client resolves them before sending, so `/client/../cfg` would reach `/cfg`.
    """
    parts = urlsplit(url)
    if _dot_segments(parts.path):
        return False
    for prefix in prefixes:
        allowed = urlsplit(prefix)
        if (parts.scheme, parts.netloc.lower()) != (allowed.scheme, allowed.netloc.lower()):
            continue
        base = allowed.path.rstrip("/")
        if not base or parts.path == base or parts.path.startswith(base + "/"):
            return True
    return False
