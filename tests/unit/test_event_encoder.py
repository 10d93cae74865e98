"""`EventEncoder`: a run's events encoded with each Source encoded once — the same
bytes as `encode_event`, whatever the event."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from orchestrator.core.events import (
    Event,
    EventEncoder,
    EventType,
    RemoteRef,
    RemoteSource,
    Source,
    decode_event,
    encode_event,
)

_text = st.text(max_size=20)
_json: st.SearchStrategy[Any] = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**53), 2**53) | _text,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_text, inner, max_size=3),
    max_leaves=8,
)
_fields = {
    "agent_key": _text,
    "agent_id": _text,
    "agent_name": _text,
    "session_id": _text,
    "parent_session_id": _text,
    "depth": st.integers(0, 20),
    "path": _text,
    "task_id": st.none() | _text,
    "parent_tool_call_id": st.none() | _text,
}
_plain = st.builds(Source, **_fields)
_remote = st.builds(
    RemoteSource, remote=st.builds(RemoteRef, run_id=_text, seq=st.integers(1, 10**6)), **_fields
)
_events = st.builds(
    Event,
    run_id=_text,
    seq=st.integers(1, 10**9),
    ts=st.floats(allow_nan=False, allow_infinity=False),
    type=st.sampled_from(list(EventType)),
    source=st.none() | _plain | _remote,
    last=st.booleans(),
    data=st.dictionaries(_text, _json, max_size=4),
)


@given(st.lists(_events, min_size=1, max_size=10))
def test_the_same_bytes_as_encode_event(events: list[Event]) -> None:
    encoder = EventEncoder()
    for event in events + events:  # the second time, every source is known
        raw = encoder.encode(event)
        assert raw == encode_event(event)
        if not isinstance(event.source, RemoteSource):  # decoded, `remote` is dropped
            assert decode_event(raw) == event


def _source(agent_key: str) -> Source:
    return Source(
        agent_key=agent_key,
        agent_id="a",
        agent_name="a",
        session_id="s",
        parent_session_id="p",
        depth=1,
        path="p/a",
    )


def test_each_source_encoded_once_and_the_cache_bounded() -> None:
    source = _source("agent:a:1")
    encoder = EventEncoder()
    for seq in range(1, 100):
        encoder.encode(Event("run", seq, 1.0, EventType.REASONING, source, False, {"delta": "x"}))
    assert len(encoder._sources) == 1
    for seq in range(2 * EventEncoder.MAX_SOURCES):  # a new Source per event
        event = Event("run", seq + 1, 1.0, EventType.REASONING, _source(f"k{seq}"), False, {})
        assert encoder.encode(event) == encode_event(event)
    assert len(encoder._sources) <= EventEncoder.MAX_SOURCES
