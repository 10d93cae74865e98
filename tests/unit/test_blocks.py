"""The `blocks` detail level: merged REASONING blocks that keep resume cursors exact."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from agents.providers.scripted import split_tokens
from orchestrator.core.blocks import BlockMerger
from orchestrator.core.bus import Bus, RunSink
from orchestrator.core.events import Event, EventType
from tests.unit.test_events_bus import ListOutlet


def stream(texts: dict[str, str], order: list[str]) -> list[Event]:
    """Deltas of several agents, interleaved word by word in `order`, then their last events."""
    outlet = ListOutlet()
    root = Bus(RunSink("run-1", "sess-1", outlet))
    buses = {name: root.child(agent_id=name, agent_name=name) for name in texts}
    tokens = {name: split_tokens(text) for name, text in texts.items()}
    for name in order:
        if tokens.get(name):
            buses[name].emit_nowait(EventType.REASONING, {"delta": tokens[name].pop(0)})
    for name, rest in tokens.items():
        for token in rest:
            buses[name].emit_nowait(EventType.REASONING, {"delta": token})
        buses[name].emit_nowait(  # type: ignore[call-overload]
            EventType.REASONING, {"text": texts[name], "toolCalls": []}, last=True
        )
    return outlet.events


def merge(events: list[Event], merger: BlockMerger | None = None) -> list[Event]:
    merger = merger or BlockMerger(min_chars=20, max_chars=60)
    out = [e for event in events for e in merger.feed(event)]
    return out + merger.flush()


def text_of(events: list[Event], agent: str) -> str:
    return "".join(
        e.data["delta"]
        for e in events
        if e.source and e.source.agent_id == agent and e.type == EventType.REASONING and not e.last
    )


PROSE = (
    "First sentence here. Second one follows!\n\nA new paragraph starts now and it goes on "
    "for a while. ```\ncode that must not be split. really\n``` Done? Yes."
)


def test_blocks_join_to_the_same_text_and_carry_the_last_delta_seq() -> None:
    events = stream({"a": PROSE}, ["a"] * 100)
    merged = merge(events)
    assert text_of(merged, "a") == PROSE
    deltas = [e for e in merged if e.type == EventType.REASONING and not e.last]
    assert 1 < len(deltas) < len(split_tokens(PROSE))
    original_seqs = {e.seq for e in events}
    assert all(e.seq in original_seqs for e in merged)
    assert [e.seq for e in merged] == sorted(e.seq for e in merged)
    for block in deltas:  # never cut inside a code fence
        before = PROSE[: PROSE.index(block.data["delta"]) + len(block.data["delta"])]
        assert before.count("```") % 2 == 0


def test_paragraph_breaks_preferred() -> None:
    events = stream({"a": "x" * 25 + "\n\n" + "tail words"}, ["a"] * 10)
    blocks = [e.data["delta"] for e in merge(events) if "delta" in e.data]
    assert blocks[0] == "x" * 25 and blocks[1].startswith("\n\ntail")


@given(
    texts=st.dictionaries(st.sampled_from("abc"), st.text(min_size=1, max_size=120), min_size=1),
    order=st.lists(st.sampled_from("abc"), max_size=200),
    cut=st.integers(0, 400),
)
def test_any_resume_point_loses_nothing(texts: dict[str, str], order: list[str], cut: int) -> None:
    events = stream(texts, order)
    merged = merge(events)
    for name, text in texts.items():
        assert text_of(merged, name) == text
    # A client that received the merged events up to one of them (its cursor N) and
    # resumes after N must get every delta it has not seen: nothing below N is unsent.
    cursors = [0] + [e.seq for e in merged]
    cut = cursors[cut % len(cursors)]
    seen = [e for e in merged if e.seq <= cut]
    rest = merge([e for e in events if e.seq > cut])
    for name, text in texts.items():
        assert text_of(seen, name) + text_of(rest, name) == text
