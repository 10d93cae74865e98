"""An inbound hook's request, read without I/O: its signature checked, its input and
thread filled from its JSON body (docs/webhooks.md).

A template names fields of the body as `{body.a.b}` (a number indexes a list) or the
whole body as `{body}`; a string field goes in as it is, anything else as compact JSON,
and a missing one as nothing. Placeholders are found with one bounded regular
expression (linear in the template), never evaluated.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import re
from typing import Any

__all__ = ["SLACK_MAX_AGE", "fill", "fill_json", "signature_ok", "slack_signature_ok"]

SLACK_MAX_AGE = 300
"""Slack's rule: a request whose timestamp is further than this (s) from now is refused
(a replayed one)."""

_PLACE = re.compile(r"\{body((?:\.[A-Za-z0-9_-]{1,64}){0,16})\}")


def fill(template: str, body: Any, limit: int = 1 << 20) -> str:
    """`template` with each `{body…}` replaced by that field of `body`.

    Raises:
        ValueError: the filled text would pass `limit` characters (a template that
            names a large body many times is refused before it is built).
    """
    made = len(template)

    def value(match: re.Match[str]) -> str:
        nonlocal made
        text = _field(match, body)
        made += len(text)
        if made > limit:
            raise ValueError(f"the filled text passes {limit} characters")
        return text

    return _PLACE.sub(value, template)


def fill_json(template: Any, body: Any, limit: int = 1 << 20) -> Any:
    """`template` (a JSON value: a chat's message shape, `{"text": "…{body.runId}…"}`)
    with every string in it filled as `fill` fills one, at most `limit` characters
    in all.

    Raises:
        ValueError: the filled strings would pass `limit` characters.
    """
    left = [limit]

    def filled(value: Any) -> Any:
        if isinstance(value, str):
            text = fill(value, body, left[0])
            left[0] -= len(text)
            return text
        if isinstance(value, list):
            return [filled(v) for v in value]
        if isinstance(value, dict):
            return {k: filled(v) for k, v in value.items()}
        return value

    return filled(template)


def _field(match: re.Match[str], body: Any) -> str:
    """The body's field a placeholder names, as text."""
    found: Any = body
    for key in match.group(1).split(".")[1:]:
        if isinstance(found, dict):
            found = found.get(key)
        elif isinstance(found, list) and key.isdigit() and int(key) < len(found):
            found = found[int(key)]
        else:
            found = None
        if found is None:
            return ""
    if isinstance(found, str):
        return found
    return json.dumps(found, ensure_ascii=False, separators=(",", ":"))


def signature_ok(secret: bytes, body: bytes, given: str | None) -> bool:
    """Whether `given` is `sha256=<hex HMAC-SHA256 of body with secret>` (GitHub's
    `X-Hub-Signature-256`), compared in constant time."""
    if given is None or not given.startswith("sha256="):
        return False
    expected = hmac.new(secret, body, hashlib.sha256).hexdigest()
    return hmac.compare_digest(expected, given.removeprefix("sha256=").strip().lower())


def slack_signature_ok(
    secret: bytes, body: bytes, timestamp: str | None, given: str | None, now: float
) -> bool:
    """Whether `given` (`X-Slack-Signature`) is Slack's `v0=<hex HMAC-SHA256 of
    "v0:<timestamp>:<body>">` with the signing secret, and `timestamp`
    (`X-Slack-Request-Timestamp`) within `SLACK_MAX_AGE` of `now`; compared in
    constant time."""
    if given is None or timestamp is None or not given.startswith("v0="):
        return False
    if not (timestamp.isascii() and timestamp.isdigit() and len(timestamp) <= 12):
        return False
    if abs(now - int(timestamp)) > SLACK_MAX_AGE:
        return False
    signed = b"v0:" + timestamp.encode() + b":" + body
    expected = hmac.new(secret, signed, hashlib.sha256).hexdigest()
    return hmac.compare_digest(expected, given.removeprefix("v0=").strip().lower())
