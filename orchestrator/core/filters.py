"""Server-side feed filters (contract §4), pure.

All given criteria must hold. For filtering, a root event (source null) counts as
depth 0, path = the root sessionId, agentId = the root agent.
"""

from __future__ import annotations

import re
from functools import lru_cache

import msgspec

from orchestrator.core.events import Event, EventType

__all__ = ["FeedFilter", "FilterSpec", "glob_match", "prefix_match"]

_TYPES = frozenset(t.value for t in EventType)


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
        if self.path_glob is not None and not self.path_glob.strip("/"):
            found.append("filter.pathGlob must not be empty")
        return found


def prefix_match(prefix: str, path: str) -> bool:
    """True if `path` is `prefix` or below it, by whole `/` segments."""
    prefix = prefix.rstrip("/")
    return path == prefix or path.startswith(prefix + "/") or not prefix


@lru_cache(maxsize=1024)
def _segment_regex(segment: str) -> re.Pattern[str]:
    return re.compile("[^/]*".join(re.escape(part) for part in segment.split("*")))


@lru_cache(maxsize=256)
def _compile_glob(pattern: str) -> tuple[str, ...]:
    return tuple(pattern.strip("/").split("/"))


def glob_match(pattern: str, path: str) -> bool:
    """Match whole `/`-separated segments: `*` within one segment, `**` any number of them."""
    parts = _compile_glob(pattern)
    segments = path.split("/")
    memo: dict[tuple[int, int], bool] = {}

    def match(i: int, j: int) -> bool:
        key = (i, j)
        if key in memo:
            return memo[key]
        if i == len(parts):
            result = j == len(segments)
        elif parts[i] == "**":
            result = match(i + 1, j) or (j < len(segments) and match(i, j + 1))
        else:
            result = (
                j < len(segments)
                and _segment_regex(parts[i]).fullmatch(segments[j]) is not None
                and match(i + 1, j + 1)
            )
        memo[key] = result
        return result

    return match(0, 0)


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
