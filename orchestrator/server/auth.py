"""Who a WebSocket client is, and whether its page may talk to us at all.

Tokens have names and roles. An `admin` sees and controls every run; a `user`
sees and controls only the runs its token started (others are `not_found`, so a
user cannot even learn they exist); a `viewer` sees every run and controls none
(the on-looker's console: ops that start, cancel or send are refused). Without
configured tokens there is no auth and every client is an anonymous admin. Tokens
are compared in constant time and are never logged: only their names are.

DNS rebinding: a page on evil.example can make its own name resolve to 127.0.0.1
and then talk to a server on loopback as "same-origin". So every request's `Host`
must be a name the server is reachable by (`host_allowed`): on a loopback bind,
`localhost`, `127.0.0.1` and `[::1]` with the server's port; on any other bind also
any IP address (rebinding needs a name); plus `server.allowed_hosts` (a name: any
port; `name:port`: that port). A request with another Host is refused (403).

Browsers send `Origin` on every WebSocket upgrade and cross-site request, and a page
on any site may try one, so an Origin is accepted only when its host is one of
those same names (the console served at `/`), or listed in
`server.allowed_origins` — never just because it equals the request's own `Host`,
which a rebinding page controls. Clients that send no Origin (the CLI, scripts,
other servers) are not browsers and are let through; the token still applies.
"""

from __future__ import annotations

import hmac
import ipaddress
import logging
import re
from urllib.parse import parse_qs, urlsplit

import msgspec
from websockets.datastructures import Headers

from orchestrator.config import ServerConfig

__all__ = ["Auth", "Principal", "RedactTokens", "offered_tokens"]

_SECRET_IN_TEXT = re.compile(r"((?:[?&]token=)|(?:authorization: *bearer +))[^\s&]+", re.I)


class RedactTokens(logging.Filter):
    """Blanks `?token=…` and `Authorization: Bearer …` in log records.

    websockets logs each request line at DEBUG, query string included.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        redacted = _SECRET_IN_TEXT.sub(r"\1[redacted]", message)
        if redacted != message:
            record.msg, record.args = redacted, ()
        return True


class Principal(msgspec.Struct, frozen=True, kw_only=True):
    """The holder of a token (or anyone, without auth)."""

    name: str | None
    """The token's name, recorded as a run's owner; None without auth."""
    admin: bool
    read_only: bool = False
    """A `viewer`: sees every run, may change nothing."""
    max_runs: int
    """Runs this principal may have running at once."""
    max_subscriptions: int
    """Subscriptions this principal may hold over all its connections."""

    @property
    def sees_all(self) -> bool:
        """Sees every run (admins and viewers), not only its own."""
        return self.admin or self.read_only

    def may_see(self, owner: str | None) -> bool:
        """May this principal see a run started by `owner` (and control it, unless it
        is read-only)?"""
        return self.sees_all or owner == self.name


def offered_tokens(headers: Headers, query: str) -> list[str]:
    """Tokens a request carries: `Authorization: Bearer …` and `?token=…`."""
    offered = []
    auth = headers.get("Authorization", "")
    if auth[:7].lower() == "bearer ":
        offered.append(auth[7:].strip())
    offered += parse_qs(query).get("token", [])
    return [t for t in offered if t]


def unauthorized(headers: Headers, query: str) -> str:
    """Why a request that `Auth.identify` refused is refused: no token, or a token
    that is not one of the server's (never which, nor any part of it)."""
    if offered_tokens(headers, query):
        return "unauthorized: the token was refused (it is not one of server.tokens)"
    return "unauthorized: send Authorization: Bearer <token>"


def _matches(offered: str, secret: str) -> bool:
    return hmac.compare_digest(offered.encode(), secret.encode())


LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "::1"})


def split_host(value: str) -> tuple[str, int | None] | None:
    """`name[:port]` or `[v6][:port]` → (lower-case name, port); None: not a host."""
    value = value.strip().lower()
    if value.startswith("["):
        name, bracket, rest = value[1:].partition("]")
        if not bracket or (rest and not rest.startswith(":")):
            return None
        port_text = rest[1:] if rest else None
    else:
        name, colon, port_text_or = value.partition(":")
        port_text = port_text_or if colon else None
    if port_text is not None and not (
        port_text.isascii() and port_text.isdigit() and int(port_text) <= 65535
    ):
        return None  # (`str.isdigit` alone accepts `²`, which `int` refuses)
    if not name:
        return None
    return name, int(port_text) if port_text is not None else None


JUDGED_HEADERS = ("Host", "Origin", "Authorization")
"""The headers a request is let in by: each at most once, and well formed."""


def bad_headers(headers: Headers) -> str | None:
    """Why a request cannot be judged (400), or None: a duplicate `Host`, `Origin` or
    `Authorization` (which one would count?), or a `Host` or `Origin` whose port is not
    a port."""
    for name in JUDGED_HEADERS:
        if len(headers.get_all(name)) > 1:
            return f"bad request: more than one {name} header"
    host = headers.get("Host")
    if host is not None and split_host(host) is None:
        return "bad request: the Host header is not a host[:port]"
    origin = headers.get("Origin")
    if origin is not None:
        netloc = urlsplit(origin.strip()).netloc
        if netloc and split_host(netloc) is None:
            return "bad request: the Origin header's host or port is not valid"
    return None


def _is_ip(name: str) -> bool:
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


class Auth:
    """Resolves requests to principals; checks hosts, origins and the metrics token."""

    def __init__(self, config: ServerConfig, port: int | None = None) -> None:
        server = config.server
        self._tokens = server.tokens
        self._metrics_token = server.metrics_token
        self._origins = {o.rstrip("/").lower() for o in server.allowed_origins or ()}
        self.port = server.port if port is None else port
        """The port the server listens on (the bound one, for `port: 0`)."""
        bind = server.host.strip("[]").lower()
        self._any_ip = not (
            bind in LOOPBACK_NAMES or (_is_ip(bind) and ipaddress.ip_address(bind).is_loopback)
        )
        """Bound beyond loopback: a Host that is an IP address is one of ours too."""
        self._names: set[str] = set()
        self._pairs: set[tuple[str, int]] = set()
        for entry in server.allowed_hosts or ():
            found = split_host(entry)
            if found is None:
                continue
            name, entry_port = found
            if entry_port is None:
                self._names.add(name)
            else:
                self._pairs.add((name, entry_port))
        per_connection = server.max_subscriptions
        self._anonymous = Principal(
            name=None,
            admin=True,
            max_runs=config.limits.max_concurrent_runs,
            max_subscriptions=1 << 30,
        )
        self._principals = {
            t.name: Principal(
                name=t.name,
                admin=t.role == "admin",
                read_only=t.role == "viewer",
                max_runs=t.max_concurrent_runs or config.limits.max_runs_per_token,
                max_subscriptions=t.max_subscriptions or 4 * per_connection,
            )
            for t in server.tokens
        }

    @property
    def enabled(self) -> bool:
        """True when tokens are configured."""
        return bool(self._tokens)

    def identify(self, headers: Headers, query: str) -> Principal | None:
        """The principal of a request, or None when it carries no valid token."""
        if not self._tokens:
            return self._anonymous
        found = None
        for offered in offered_tokens(headers, query):
            for token in self._tokens:  # check them all: timing does not tell which
                if _matches(offered, token.token) and found is None:
                    found = self._principals[token.name]
        return found

    def may_read_metrics(self, headers: Headers, query: str) -> bool:
        """`/metrics`: open without tokens; else an admin token or `metrics_token`."""
        if not self._tokens and self._metrics_token is None:
            return True
        principal = self.identify(headers, query) if self._tokens else None
        if principal is not None and principal.admin:
            return True
        secret = self._metrics_token
        return secret is not None and any(
            _matches(t, secret) for t in offered_tokens(headers, query)
        )

    def host_allowed(self, host: str | None) -> bool:
        """A `Host` the server is reachable by (module doc): not a rebinding page's."""
        found = split_host(host) if host else None
        if found is None:
            return False
        name, port = found
        if name in self._names or (port is not None and (name, port) in self._pairs):
            return True
        own_name = name in LOOPBACK_NAMES or (self._any_ip and _is_ip(name))
        return own_name and (port == self.port or (port is None and self.port in (80, 443)))

    def origin_allowed(self, headers: Headers) -> bool:
        """No Origin (not a browser), a listed one, or a page served from one of the
        names `host_allowed` accepts (never merely the request's own Host)."""
        origin = headers.get("Origin")
        if origin is None:
            return True
        origin = origin.rstrip("/").lower()
        if origin in self._origins:
            return True
        parts = urlsplit(origin)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            return False
        netloc = parts.netloc
        found = split_host(netloc)  # (not `parts.port`: it raises on a port out of range)
        if found is None:
            return False
        if found[1] is None:  # a default port: say it, as the Host check wants one
            netloc += ":443" if parts.scheme == "https" else ":80"
        return self.host_allowed(netloc)
