"""The streaming partial-JSON reader with path subscriptions."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agents.core.partial_json import PartialJson, compile_path, format_path

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(10**6), 10**6),
    st.floats(allow_nan=False, allow_infinity=False, width=32),
    st.text(max_size=12),
)
documents = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4)
    ),
    max_leaves=12,
)


def leaves(value: Any, path: tuple[str | int, ...] = ()) -> dict[tuple[str | int, ...], Any]:
    if isinstance(value, dict):
        out: dict[tuple[str | int, ...], Any] = {}
        for k, v in value.items():
            out.update(leaves(v, (*path, k)))
        return out
    if isinstance(value, list):
        out = {}
        for i, v in enumerate(value):
            out.update(leaves(v, (*path, i)))
        return out
    return {path: value}


def pattern_for(path: tuple[str | int, ...]) -> str:
    return "$" + "".join(f"[{p}]" if isinstance(p, int) else f'["{p}"]' for p in path)


@given(
    doc=st.dictionaries(st.text(max_size=6).filter(lambda k: '"' not in k), documents, max_size=5),
    ascii_only=st.booleans(),
    data=st.data(),
)
def test_subscribed_leaves_are_exact_over_any_fragmentation(
    doc: dict[str, Any], ascii_only: bool, data: st.DataObject
) -> None:
    text = json.dumps(doc, ensure_ascii=ascii_only)
    wanted = {p: v for p, v in leaves(doc).items() if all('"' not in str(s) for s in p)}
    reader = PartialJson([pattern_for(p) for p in wanted])
    cuts = sorted(data.draw(st.lists(st.integers(0, len(text)), max_size=10)))
    seen: dict[str, list[Any]] = {}
    for a, b in zip([0, *cuts], [*cuts, len(text)], strict=True):
        for name, value in reader.feed(text[a:b]).items():
            seen.setdefault(name, []).append(value)
    assert not reader.broken
    for path, value in wanted.items():
        name = format_path(path)
        if path == ():
            continue
        assert reader.values[name] == value
        if isinstance(value, str):  # the pieces reported concatenate to the final string
            assert "".join(seen[name]) == value


def test_spawn_task_visible_before_the_arguments_finish() -> None:
    reader = PartialJson(["$.agent_id", "$.task"])
    assert reader.feed('{"agent_id": "resea') == {"$.agent_id": "resea"}
    assert reader.feed('rcher", "task": "Find') == {"$.agent_id": "rcher", "$.task": "Find"}
    assert reader.feed(" the history") == {"$.task": " the history"}
    assert reader.feed('"}') == {}
    assert reader.values == {"$.agent_id": "researcher", "$.task": "Find the history"}


def test_reported_bytes_are_linear_in_the_value() -> None:
    """Regression: each report repeated the whole string so far (a 20 KB task in
    4-character tokens made 51 MB of events)."""
    task = "abcd" * 5000
    text = json.dumps({"agent_id": "researcher", "task": task})
    reader = PartialJson(["$.agent_id", "$.task"])
    reported = 0
    pieces = []
    for i in range(0, len(text), 4):
        for name, value in reader.feed(text[i : i + 4]).items():
            reported += len(value)
            if name == "$.task":
                pieces.append(value)
    assert "".join(pieces) == task
    assert reported == len(task) + len("researcher")


def test_wildcards_and_escapes() -> None:
    reader = PartialJson(["$.nodes[*].title", "$.n"])
    updates = reader.feed(
        '{"nodes": [{"title": "a\\u00e9\\ud83d\\ude00\\n"}, {"title": "b"}], "n": 12.5}'
    )
    assert updates == {"$.nodes[0].title": "aé😀\n", "$.nodes[1].title": "b", "$.n": 12.5}


def test_invalid_input_stops_quietly() -> None:
    reader = PartialJson(["$.a"])
    assert reader.feed('{"a": tru') == {}
    assert reader.feed("x}") == {}
    assert reader.broken


def test_bad_paths() -> None:
    assert compile_path("$.a[0].b") == ("a", 0, "b")
    with pytest.raises(ValueError, match="must start with"):
        compile_path("a.b")
    with pytest.raises(ValueError, match="bad path segment"):
        compile_path("$..a")
