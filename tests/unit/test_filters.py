"""Filter semantics: whole-segment prefixes, segment globs, root rules (with hypothesis)."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from orchestrator.core.bus import Bus, RunSink
from orchestrator.core.events import Event, EventType
from orchestrator.core.filters import FeedFilter, FilterSpec, glob_match, prefix_match
from tests.unit.test_events_bus import ListOutlet

segment = st.sampled_from(["sess-1", "planner", "researcher", "critic", "executor", "a", "ab"])
paths = st.lists(segment, min_size=1, max_size=5).map("/".join)
patterns = st.lists(
    st.one_of(segment, st.just("*"), st.just("**"), st.sampled_from(["re*", "*er", "c*c"])),
    min_size=1,
    max_size=5,
).map("/".join)


def reference_glob(pattern: str, path: str) -> bool:
    """Independent regex translation: each segment is `/…`; `**` is any run of them."""
    regex = "".join(
        "(?:/[^/]+)*" if part == "**" else "/" + "[^/]*".join(re.escape(p) for p in part.split("*"))
        for part in pattern.strip("/").split("/")
    )
    return re.fullmatch(regex, "/" + path) is not None


@given(pattern=patterns, path=paths)
def test_glob_matches_reference(pattern: str, path: str) -> None:
    assert glob_match(pattern, path) == reference_glob(pattern, path)


@given(path=paths)
def test_double_star_matches_everything_and_literal_matches_itself(path: str) -> None:
    assert glob_match("**", path)
    assert glob_match(path, path)
    assert prefix_match(path, path)


@pytest.mark.parametrize(
    ("pattern", "path", "expected"),
    [
        ("**/executor", "sess-1/planner/executor", True),
        ("**/executor", "sess-1/executor", True),
        ("**/executor", "sess-1/executor/sub", False),
        ("*/researcher", "sess-1/researcher", True),
        ("*/researcher", "sess-1/a/researcher", False),
        ("sess-1/*/critic", "sess-1/researcher/critic", True),
        ("sess-1/re*", "sess-1/researcher", True),
        ("sess-1/re*", "sess-1/critic", False),
        ("sess-1/**/critic", "sess-1/critic", True),
    ],
)
def test_glob_examples(pattern: str, path: str, expected: bool) -> None:
    assert glob_match(pattern, path) is expected


@pytest.mark.parametrize(
    ("prefix", "path", "expected"),
    [
        ("sess-1/researcher", "sess-1/researcher", True),
        ("sess-1/researcher", "sess-1/researcher/critic", True),
        ("sess-1/researcher", "sess-1/researcherX", False),
        ("sess-1/researcher/", "sess-1/researcher/critic", True),
        ("sess-1", "sess-1", True),
    ],
)
def test_prefix_is_by_whole_segments(prefix: str, path: str, expected: bool) -> None:
    assert prefix_match(prefix, path) is expected


@given(prefix=paths, path=paths)
def test_prefix_equals_segment_list_prefix(prefix: str, path: str) -> None:
    p, q = prefix.split("/"), path.split("/")
    assert prefix_match(prefix, path) == (q[: len(p)] == p)


def sample_events() -> list[Event]:
    outlet = ListOutlet()
    root = Bus(RunSink("run-1", "sess-1", outlet))
    child = root.child(agent_id="researcher", agent_name="R")
    grand = child.child(agent_id="critic", agent_name="C")
    for bus in (root, child, grand):
        bus.emit_nowait(EventType.REASONING, {"delta": "x"})
        bus.emit_nowait(
            EventType.TOOL_RESULT, {"toolCallId": "c", "name": "n", "content": "", "isError": False}
        )
    return outlet.events


def test_root_counts_as_depth_zero_root_session_root_agent() -> None:
    events = sample_events()

    def kept(**spec: object) -> list[int]:
        flt = FeedFilter(FilterSpec(**spec), root_agent_id="planner", root_session_id="sess-1")  # type: ignore[arg-type]
        return [e.seq for e in events if flt.matches(e)]

    assert kept() == [1, 2, 3, 4, 5, 6]
    assert kept(max_depth=0) == [1, 2]
    assert kept(agent_ids=["planner"]) == [1, 2]
    assert kept(path_glob="sess-1") == [1, 2]
    assert kept(path_prefix="sess-1") == [1, 2, 3, 4, 5, 6]
    assert kept(path_prefix="sess-1/researcher/critic") == [5, 6]
    assert kept(types=["TOOL_RESULT"], max_depth=1) == [2, 4]
    assert FeedFilter(None, root_agent_id="p", root_session_id="s").everything


def test_filter_problems() -> None:
    assert FilterSpec(max_depth=-1, types=["NOPE"], path_glob="/").problems() == [
        "filter.maxDepth must be 0 or more",
        "filter.types: unknown event type 'NOPE'",
        "filter.pathGlob must not be empty",
    ]
