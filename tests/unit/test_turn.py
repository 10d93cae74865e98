"""The turn assembler: when a tool call is ready, ordering, ids."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agents.core.turn import TurnAssembler, parse_arguments


def test_call_ready_when_args_form_a_complete_object() -> None:
    turn = TurnAssembler()
    turn.start_call(0, "a", "f")
    assert turn.add_args(0, '{"x": {"y": 1}') is None
    ready = turn.add_args(0, "}")
    assert ready is not None and ready.arguments == '{"x": {"y": 1}}'
    assert turn.finish("tool_calls") == []  # already started, not started again


def test_braces_inside_strings_do_not_fool_readiness() -> None:
    turn = TurnAssembler()
    turn.start_call(0, "a", "f")
    assert turn.add_args(0, '{"t": "}') is None
    assert turn.add_args(0, '}"') is None
    assert turn.add_args(0, "}") is not None


def test_finish_releases_remaining_calls_in_start_order() -> None:
    turn = TurnAssembler()
    turn.start_call(0, "a", "f")
    turn.start_call(1, "b", "g")
    turn.add_args(1, '{"partial": ')
    ready = turn.finish("length")
    assert [c.id for c in ready] == ["a", "b"]
    assert [c.id for c in turn.message().tool_calls] == ["a", "b"]


def test_end_call_and_late_fragments_ignored() -> None:
    turn = TurnAssembler()
    turn.start_call(0, "a", "f")
    turn.add_args(0, '{"a":1')
    ready = turn.end_call(0)
    assert ready is not None and ready.arguments == '{"a":1'
    assert turn.add_args(0, "}") is None
    assert turn.end_call(0) is None


def test_duplicate_ids_made_unique() -> None:
    turn = TurnAssembler()
    assert [turn.start_call(i, "same", "f") for i in range(3)] == ["same", "same_2", "same_3"]


@pytest.mark.parametrize(("raw", "expected"), [("", {}), ("  ", {}), ('{"a": [1]}', {"a": [1]})])
def test_parse_arguments(raw: str, expected: dict[str, object]) -> None:
    assert parse_arguments(raw) == expected


@pytest.mark.parametrize(
    ("raw", "message"), [('{"a":', "invalid JSON"), ("[1]", "must be a JSON object")]
)
def test_parse_arguments_errors(raw: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_arguments(raw)


@given(
    args=st.dictionaries(
        st.text(max_size=5),
        st.recursive(
            st.none() | st.integers() | st.text(max_size=5),
            lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=3), c, max_size=3),
            max_leaves=6,
        ),
        max_size=4,
    ),
    data=st.data(),
)
def test_ready_exactly_when_complete_over_any_fragmentation(
    args: dict[str, object], data: st.DataObject
) -> None:
    import json

    raw = json.dumps(args)
    cuts = sorted(
        data.draw(st.lists(st.integers(1, max(1, len(raw) - 1)), max_size=8, unique=True))
    )
    pieces = [raw[a:b] for a, b in zip([0, *cuts], [*cuts, len(raw)], strict=True) if raw[a:b]]
    turn = TurnAssembler()
    turn.start_call(0, "id", "f")
    ready_at = [i for i, p in enumerate(pieces) if turn.add_args(0, p) is not None]
    assert ready_at == [len(pieces) - 1]
