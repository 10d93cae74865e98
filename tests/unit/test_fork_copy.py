"""A fork's copy of its original's history is the original's encoding with the fork's
runId in front (runs/fork.py): byte for byte what encoding the renamed event gives."""

from __future__ import annotations

import msgspec
from hypothesis import given
from hypothesis import strategies as st

from orchestrator.core.events import Event, EventType, Source, encode_event
from orchestrator.runs.fork import _Renamer

SOURCE = Source(
    agent_key="agent:critic:1",
    agent_id="critic",
    agent_name="Critic",
    session_id="sub-1",
    parent_session_id="sess-1",
    depth=1,
    path="sess-1/critic",
)


@given(
    st.text(min_size=1, max_size=40),
    st.text(min_size=1, max_size=40),
    st.integers(1, 10**9),
    st.dictionaries(st.text(max_size=8), st.text(max_size=20), max_size=4),
    st.booleans(),
)
def test_a_renamed_encoding_is_the_encoding_of_the_renamed_event(
    original: str, fork: str, seq: int, data: dict[str, str], root: bool
) -> None:
    event = Event(original, seq, 1.5, EventType.REASONING, None if root else SOURCE, False, data)
    renamed = _Renamer(original, fork)(encode_event(event))
    assert renamed == encode_event(msgspec.structs.replace(event, run_id=fork))


def test_an_encoding_that_does_not_start_as_expected_is_encoded_again() -> None:
    assert _Renamer("run-a", "run-b")(b'{"seq":1,"runId":"run-a"}') is None
