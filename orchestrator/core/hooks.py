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

__all__ = ["fill", "signature_ok"]

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
