"""Secrets never in a message: what an error may quote of configuration or a URL.

Every message that quotes a refused configuration value or a storage URL goes
through here (`agents/yaml_loader.py` for every config and subagent file, the
storage backends and the CLI for URLs), so a token, an API key, an `Authorization`
value or a password in a URL is never echoed to a terminal or a log:

- `quoted(loc, value)`: nothing of a mapping or a list (a whole section may hold
  tokens), nothing but `…(redacted)` of a value at a secret-bearing key (`token`,
  `*_token`, `password`, `secret`, `authorization`, `api_key`, `headers.*`, `env.*`),
  else its `repr`, cut to 80 characters;
- `without(text, headers)`: `text` with every credential the request carried in
  its headers (an `Authorization` value, an API key) replaced: a provider's error
  body that echoes the key back (some do) reaches no event and no log;
- `url(text)`: the URL with the password of its user part, and the values of
  `token`/`key`/`password` query parameters, replaced (a refused value that is a URL
  is quoted this way too).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from urllib.parse import urlsplit

__all__ = ["REDACTED", "quoted", "secret_key", "url", "without"]

REDACTED = "…(redacted)"
_SECRET_KEY = re.compile(
    r"(^|_)(token|tokens|password|passwd|secret|secrets|authorization|api_?key|key|headers|env)$",
    re.IGNORECASE,
)
_SECRET_QUERY = re.compile(r"((?:^|[?&])(?:token|key|password|secret)=)[^&#]*", re.IGNORECASE)
_SHOWN_CHARS = 80


def secret_key(loc: Sequence[int | str]) -> bool:
    """A value at this location (`server.tokens.0.token`) may be a secret."""
    return any(isinstance(part, str) and _SECRET_KEY.search(part) for part in loc)


def quoted(loc: Sequence[int | str], value: object) -> str:
    """What a validation error may say of `value`, refused at `loc` (`""`: nothing)."""
    if isinstance(value, dict | list | tuple | set):
        return ""
    if secret_key(loc):
        return f" (got {REDACTED})"
    if isinstance(value, str) and "://" in value:
        value = url(value)  # (credentials in a URL)
    text = repr(value)
    if len(text) > _SHOWN_CHARS:
        text = text[: _SHOWN_CHARS - 1] + "…"
    return f" (got {text})"


def url(text: str) -> str:
    """`text` with the password of its user part and secret query values replaced."""
    try:
        parts = urlsplit(text)
    except ValueError:
        return REDACTED
    shown = text
    if parts.password is not None:
        user = parts.username or ""
        host = parts.hostname or ""
        if ":" in host:
            host = f"[{host}]"
        port = f":{parts.port}" if parts.port is not None else ""
        shown = parts._replace(netloc=f"{user}:{REDACTED}@{host}{port}").geturl()
    return _SECRET_QUERY.sub(lambda m: m.group(1) + REDACTED, shown)


_MIN_SECRET = 8
"""Shorter header values are not looked for (they would blank ordinary words)."""


def without(text: str, headers: Mapping[str, str]) -> str:
    """`text` with the credentials among `headers` (`Authorization`, `*key*`,
    `*token*`, `*secret*`, `cookie`) replaced by `…(redacted)`."""
    for name, value in headers.items():
        lowered = name.lower()
        if not (
            lowered in ("authorization", "proxy-authorization", "cookie")
            or any(word in lowered for word in ("key", "token", "secret"))
        ):
            continue
        scheme, _, credential = value.partition(" ")
        for secret in (value, credential if scheme.lower() in ("bearer", "basic") else ""):
            if len(secret) >= _MIN_SECRET:
                text = text.replace(secret, REDACTED)
    return text
