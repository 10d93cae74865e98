"""The WHATWG SSE decoder: spec vectors, chunk boundaries, limits."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agents.core.sse import SseDecoder, SseError, SseEvent

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "sse"


def decode(raw: bytes, cuts: list[int] | None = None) -> list[SseEvent]:
    decoder = SseDecoder()
    events: list[SseEvent] = []
    last = 0
    for cut in sorted(cuts or []):
        events += decoder.feed(raw[last:cut])
        last = cut
    events += decoder.feed(raw[last:])
    decoder.close()
    return events


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("data: a\ndata: b\n\n", ["a\nb"]),
        ("data:a\r\n\r\n", ["a"]),
        ("data:  a\n\n", [" a"]),
        ("\ufeffdata: a\n\n", ["a"]),
        ("event: x\n\n", []),
        ("data\n\n", [""]),
        (": keepalive\n\ndata: a\n\n", ["a"]),
        ("data: a\rdata: b\r\r", ["a\nb"]),
        ("data: a\n", []),
        ('data: {"t":"x\u2028y\u2029z\x85"}\n\n', ['{"t":"x\u2028y\u2029z\x85"}']),
        ("DATA: a\n\n", []),
    ],
)
def test_spec_vectors(raw: str, expected: list[str]) -> None:
    assert [e.data for e in decode(raw.encode())] == expected


def test_event_id_and_retry() -> None:
    events = decode(
        b"id: 7\nevent: ping\ndata: a\n\ndata: b\nretry: 10x\n\nretry: 250\ndata: c\n\n"
    )
    assert [(e.id, e.event) for e in events] == [("7", "ping"), ("7", "message"), ("7", "message")]
    assert events[1].retry is None and events[2].retry == 250


def test_bom_only_stripped_once_at_start() -> None:
    events = decode("\ufeffdata: a\n\n".encode() + "data: \ufeffb\n\n".encode(), cuts=[1, 2])
    assert [e.data for e in events] == ["a", "\ufeffb"]


@given(cut=st.integers(min_value=0, max_value=40))
def test_utf8_is_decoded_per_event_wherever_a_read_cuts_it(cut: int) -> None:
    """Lines are split on bytes, and only an event's data is decoded: a character cut
    between two reads is whole, an invalid byte becomes U+FFFD (as a decoder of the
    whole stream with errors="replace" made it)."""
    raw = (
        "data: h\u00e9 \u2028 \U0001f600\n\n".encode() + b"data: bad \xff\xfe end\n\nevent: \xe9\n"
    )
    raw += b"data: x\n\n"
    events = decode(raw, cuts=[min(cut, len(raw))])
    assert [e.data for e in events] == ["h\u00e9 \u2028 \U0001f600", "bad \ufffd\ufffd end", "x"]
    assert events[2].event == "\ufffd"


def test_close_reports_pending_partial_event() -> None:
    decoder = SseDecoder()
    assert decoder.feed(b"data: a\n\ndata: half") == [SseEvent("a")]
    assert decoder.close() is True


def test_event_size_limit() -> None:
    decoder = SseDecoder(max_event_bytes=100)
    with pytest.raises(SseError, match="larger than 100 bytes"):
        decoder.feed(b"data: " + b"x" * 200)


@pytest.mark.parametrize("name", sorted(p.name for p in FIXTURES.glob("*.sse")))
@given(data=st.data())
def test_fixtures_ignore_chunk_boundaries(name: str, data: st.DataObject) -> None:
    raw = (FIXTURES / name).read_bytes()
    cuts = data.draw(st.lists(st.integers(0, len(raw)), max_size=40))
    assert decode(raw, cuts) == decode(raw)


_line_end = st.sampled_from(["\n", "\r", "\r\n"])
_value = st.text(
    alphabet=st.characters(blacklist_characters="\r\n", blacklist_categories=["Cs"]), max_size=12
)


@given(
    values=st.lists(st.lists(_value, min_size=1, max_size=3), min_size=1, max_size=5),
    ends=st.lists(_line_end, min_size=40, max_size=40),
    bom=st.booleans(),
    data=st.data(),
)
def test_arbitrary_streams_any_line_ends_any_chunks(
    values: list[list[str]], ends: list[str], bom: bool, data: st.DataObject
) -> None:
    text = "\ufeff" if bom else ""
    i = 0
    for lines in values:
        for value in lines:
            text += f"data: {value}{ends[i % 40]}"
            i += 1
        text += ends[i % 40]
        i += 1
    raw = text.encode()
    cuts = data.draw(st.lists(st.integers(0, len(raw)), max_size=30))
    got = [e.data for e in decode(raw, cuts)]
    # A lone CR followed by a blank LF line is one CRLF: build expectations by the same
    # rule the spec gives, so compare against an unsplit decode of equivalent LF text.
    normalized = text.lstrip("\ufeff").replace("\r\n", "\n").replace("\r", "\n")
    expected = [e.data for e in decode(normalized.encode())]
    assert got == expected


def test_endless_lines_without_events_are_an_error() -> None:
    """A provider that sends garbage forever: lines that make no event are bounded."""
    decoder = SseDecoder(max_ignored_bytes=1000)
    decoder.feed(b": keepalive\n" * 50 + b"data: x\n\n")  # 600 bytes, then an event resets
    decoder.feed(b": keepalive\n" * 50)
    with pytest.raises(SseError, match="without an SSE event"):
        decoder.feed(b"junk line\n" * 100)
