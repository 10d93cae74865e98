"""Server-side feed filters (contract §4), pure.

All given criteria must hold. For filtering, a root event (source null) counts as
depth 0, path = the root sessionId, agentId = the root agent.
"""

from __future__ import annotations

from functools import lru_cache

import msgspec

from orchestrator.core.events import Event, EventType

__all__ = [
    "MAX_GLOB_CHARS",
    "MAX_GLOB_SEGMENTS",
    "FeedFilter",
    "FilterSpec",
    "glob_match",
    "prefix_match",
]

_TYPES = frozenset(t.value for t in EventType)
MAX_GLOB_CHARS = 512
"""Longest `pathGlob` accepted (a tree path is at most `max_depth` + 1 segments)."""
MAX_GLOB_SEGMENTS = 64
MAX_LIST_ITEMS = 256
"""Most `agentIds` or `types` in one filter."""


class FilterSpec(msgspec.Struct, kw_only=True, rename="camel", forbid_unknown_fields=True):
    """The `filter` object of `run` and `subscribe`."""

    max_depth: int | None = None
    path_prefix: str | None = None
    path_glob: str | None = None
    agent_ids: list[str] | None = None
    types: list[str] | None = None

    def problems(self) -> list[str]:
        """What is invalid in the filter (empty when it is fine)."""
        found = []
        if self.max_depth is not None and self.max_depth < 0:
            found.append("filter.maxDepth must be 0 or more")
        for kind in self.types or ():
            if kind not in _TYPES:
                found.append(f"filter.types: unknown event type {kind!r}")
        if self.path_glob is not None:
            if not self.path_glob.strip("/"):
                found.append("filter.pathGlob must not be empty")
            elif len(self.path_glob) > MAX_GLOB_CHARS:
                found.append(f"filter.pathGlob is longer than {MAX_GLOB_CHARS} characters")
            elif self.path_glob.count("/") >= MAX_GLOB_SEGMENTS:
                found.append(f"filter.pathGlob has more than {MAX_GLOB_SEGMENTS} segments")
        if self.path_prefix is not None and len(self.path_prefix) > MAX_GLOB_CHARS:
            found.append(f"filter.pathPrefix is longer than {MAX_GLOB_CHARS} characters")
        for name, items in (("agentIds", self.agent_ids), ("types", self.types)):
            if items is not None and len(items) > MAX_LIST_ITEMS:
                found.append(f"filter.{name} has more than {MAX_LIST_ITEMS} entries")
        return found


def prefix_match(prefix: str, path: str) -> bool:
    """True if `path` is `prefix` or below it, by whole `/` segments."""
    prefix = prefix.rstrip("/")
    return path == prefix or path.startswith(prefix + "/") or not prefix


def segment_match(pieces: tuple[str, ...], text: str) -> bool:
    """Match one segment against a `*` pattern split at its stars, in linear time.

    With only `*` wildcards, taking each literal piece at its leftmost place is
    always right, so there is no backtracking: one `find` per piece (a regex for
    `a*a*a*…b` backtracks exponentially on a long run of `a`s).
    """
    if len(pieces) == 1:
        return text == pieces[0]
    first, *middle, last = pieces
    if len(text) < len(first) + len(last) or not text.startswith(first):
        return False
    if not text.endswith(last):
        return False
    pos, end = len(first), len(text) - len(last)
    for piece in middle:
        found = text.find(piece, pos, end)
        if found < 0:
            return False
        pos = found + len(piece)
    return True


@lru_cache(maxsize=256)
def _compile_glob(pattern: str) -> tuple[tuple[str, ...] | None, ...]:
    """Segments as star-split pieces; None for `**` (runs of `**` collapse into one)."""
    out: list[tuple[str, ...] | None] = []
    for segment in pattern.strip("/").split("/"):
        if segment == "**":
            if out and out[-1] is None:
                continue
            out.append(None)
        else:
            out.append(tuple(segment.split("*")))
    return tuple(out)


def glob_match(pattern: str, path: str) -> bool:
    """Match whole `/`-separated segments: `*` within one segment, `**` any number of them.

    A table over (pattern segment, path segment), filled once: time is bounded by
    their product times a segment's length, never exponential.
    """
    parts = _compile_glob(pattern)
    segments = path.split("/")
    n = len(segments)
    # reach[j]: the parts matched so far can end just before path segment j.
    reach = [True] + [False] * n
    for part in parts:
        if part is None:  # `**`: from any reachable point, any number of segments
            seen = False
            for j in range(n + 1):
                seen = seen or reach[j]
                reach[j] = seen
        else:
            reach = [False] + [reach[j] and segment_match(part, segments[j]) for j in range(n)]
        if not any(reach):
            return False
    return reach[n]


class FeedFilter:
    """A compiled filter for one run (it needs the run's root agent and session)."""

    __slots__ = (
        "_agent_ids",
        "_glob",
        "_max_depth",
        "_prefix",
        "_types",
        "root_agent_id",
        "root_session_id",
    )

    def __init__(
        self, spec: FilterSpec | None, *, root_agent_id: str, root_session_id: str
    ) -> None:
        spec = spec or FilterSpec()
        self._max_depth = spec.max_depth
        self._prefix = spec.path_prefix
        self._glob = spec.path_glob
        self._agent_ids = frozenset(spec.agent_ids) if spec.agent_ids is not None else None
        self._types = frozenset(spec.types) if spec.types is not None else None
        self.root_agent_id = root_agent_id
        self.root_session_id = root_session_id

    @property
    def everything(self) -> bool:
        """True when the filter lets every event through."""
        return (
            self._max_depth is None
            and self._prefix is None
            and self._glob is None
            and self._agent_ids is None
            and self._types is None
        )

    def matches(self, event: Event) -> bool:
        """True if the event passes every criterion."""
        if self._types is not None and event.type not in self._types:
            return False
        source = event.source
        if source is None:
            depth, path, agent_id = 0, self.root_session_id, self.root_agent_id
        else:
            depth, path, agent_id = source.depth, source.path, source.agent_id
        if self._max_depth is not None and depth > self._max_depth:
            return False
        if self._agent_ids is not None and agent_id not in self._agent_ids:
            return False
        if self._prefix is not None and not prefix_match(self._prefix, path):
            return False
        return self._glob is None or glob_match(self._glob, path)
