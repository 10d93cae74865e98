"""What models call MCP tools: `<server>__<tool>`, valid for every provider (pure).

OpenAI and Anthropic both accept tool names of 1–64 characters from `[A-Za-z0-9_-]`.
An MCP server may name its tools anything, so each name is mapped: characters
outside the set become `_`, and a name that is too long — or that two tools of one
server would share after that — keeps its first characters and ends with 8 hex
digits of a hash of the original, so it stays unique and stable across restarts.
Every such change is returned as a note, for the log: nothing is dropped.

Subagent YAML lists MCP tools by these names, or by patterns with `*` (any run of
characters): `fs__*`, `github__search_*`. Matching is linear in the name's length
for each pattern segment (no backtracking regex).
"""

from __future__ import annotations

import hashlib
import re

from agents.core.wildcard import wildcard_match

__all__ = [
    "MAX_NAME",
    "SEPARATOR",
    "exposed_names",
    "server_of",
    "wildcard_match",
]

MAX_NAME = 64
SEPARATOR = "__"
_BAD = re.compile(r"[^A-Za-z0-9_-]")


def server_of(name: str) -> str | None:
    """The MCP server a tool name (or pattern) refers to: the part before `__`."""
    server, sep, _ = name.partition(SEPARATOR)
    return server if sep and server else None


def exposed_names(server: str, tools: list[str]) -> tuple[dict[str, str], list[str]]:
    """Map a server's tool names to the names models see.

    Returns `{exposed: original}` (one entry per tool, in the server's order) and
    notes on every name that had to change (for the log).
    """
    notes: list[str] = []
    plain: dict[str, list[str]] = {}
    for tool in tools:
        plain.setdefault(_clean(f"{server}{SEPARATOR}{tool}"), []).append(tool)
    out: dict[str, str] = {}
    for name, originals in plain.items():
        for tool in originals:
            exposed = name
            if len(originals) > 1 or len(name) > MAX_NAME:
                exposed = _hashed(name, f"{server}{SEPARATOR}{tool}")
                why = "collides with another tool's name" if len(originals) > 1 else "is too long"
                notes.append(
                    f"MCP tool {tool!r} of server {server!r} {why}: models see {exposed!r}"
                )
            elif name != f"{server}{SEPARATOR}{tool}":
                notes.append(f"MCP tool {tool!r} of {server!r}: models see {exposed!r}")
            out[exposed] = tool
    return out, notes


def _clean(name: str) -> str:
    return _BAD.sub("_", name)


def _hashed(name: str, original: str) -> str:
    digest = hashlib.sha256(original.encode()).hexdigest()[:8]
    return f"{name[: MAX_NAME - 9]}_{digest}"
