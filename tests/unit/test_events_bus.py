"""Event model encoding and the hierarchical bus (pure parts)."""

from __future__ import annotations

import json
import re

import msgspec
import pytest

from orchestrator.core.bus import Bus, RunSink, child_source, current_bus, new_run_id
from orchestrator.core.events import Event, EventType, Source, decode_event, encode_event


class ListOutlet:
    def __init__(self, capacity: int = 10**9) -> None:
        self.events: list[Event] = []
        self.capacity = capacity

    def put_nowait(self, event: Event) -> bool:
        self.events.append(event)
        return len(self.events) >= self.capacity

    def put_many(self, events: list[Event]) -> bool:
        self.events.extend(events)
        return len(self.events) >= self.capacity

    async def wait_writable(self) -> None:
        raise AssertionError("not expected to wait")


def make_sink(outlet: ListOutlet | None = None) -> tuple[RunSink, ListOutlet]:
    outlet = outlet or ListOutlet()
    return RunSink("run-x", "sess-root", outlet, clock=lambda: 1.5), outlet


def test_event_encodes_to_contract_camel_case() -> None:
    source = child_source(
        parent=None,
        root_session_id="sess-1",
        agent_id="researcher",
        agent_name="R",
        parent_tool_call_id="call_9",
    )
    event = Event(
        run_id="run-1",
        seq=17,
        ts=1.0,
        type=EventType.REASONING,
        source=source,
        data={"delta": "Hel"},
    )
    obj = json.loads(encode_event(event))
    assert list(obj) == ["runId", "seq", "ts", "type", "source", "last", "data"]
    assert list(obj["source"]) == [
        "agentKey",
        "agentId",
        "agentName",
        "sessionId",
        "parentSessionId",
        "depth",
        "path",
        "taskId",
        "parentToolCallId",
    ]
    assert obj["source"]["taskId"] is None and obj["source"]["parentToolCallId"] == "call_9"
    assert obj["type"] == "REASONING" and obj["last"] is False
    assert decode_event(encode_event(event)) == event


def test_root_event_has_null_source() -> None:
    event = Event(run_id="r", seq=1, ts=0.0, type=EventType.RUN_STARTED, source=None)
    assert json.loads(encode_event(event))["source"] is None


def test_decode_names_bad_field() -> None:
    with pytest.raises(msgspec.ValidationError, match=r"\$\.seq"):
        decode_event(b'{"runId":"r","seq":"x","ts":0,"type":"REASONING","source":null}')


def test_ids_follow_contract_formats() -> None:
    assert re.fullmatch(r"run-[0-9a-f]{32}", new_run_id())
    src = child_source(parent=None, root_session_id="sess-1", agent_id="a", agent_name="A")
    assert re.fullmatch(r"agent:a:[0-9a-f-]{36}", src.agent_key)
    assert re.fullmatch(r"sub-[0-9a-f]{16}", src.session_id)


def test_seq_is_one_based_and_gapless_across_agents() -> None:
    sink, outlet = make_sink()
    root = Bus(sink)
    child = root.child(agent_id="c", agent_name="C")
    grandchild = child.child(agent_id="g", agent_name="G")
    for bus in (root, grandchild, child, root, grandchild):
        bus.emit_nowait(EventType.REASONING, {"delta": "x"})
    assert [e.seq for e in outlet.events] == [1, 2, 3, 4, 5]
    assert sink.last_seq == 5
    assert all(e.ts == 1.5 and e.run_id == "run-x" for e in outlet.events)


def test_child_sources_stamp_depth_path_and_parents() -> None:
    sink, outlet = make_sink()
    root = Bus(sink)
    child = root.child(agent_id="planner", agent_name="P", parent_tool_call_id="call_1")
    grand = child.child(
        agent_id="executor", agent_name="E", parent_tool_call_id="call_2", task_id="task-1"
    )
    assert root.source is None and root.depth == 0
    c, g = child.source, grand.source
    assert c is not None and g is not None
    assert (c.depth, c.path, c.parent_session_id, c.parent_tool_call_id) == (
        1,
        "sess-root/planner",
        "sess-root",
        "call_1",
    )
    assert (g.depth, g.path, g.parent_session_id, g.task_id) == (
        2,
        "sess-root/planner/executor",
        c.session_id,
        "task-1",
    )
    grand.emit_nowait(EventType.AGENT_STARTED, {"agentId": "executor", "task": "t"})
    assert outlet.events[0].source is g


def test_forwarding_is_flat_one_hop_at_any_depth() -> None:
    sink, _ = make_sink()
    bus = Bus(sink)
    for depth in range(1, 10):
        bus = bus.child(agent_id=f"a{depth}", agent_name="x")
        assert bus.sink is sink and bus.depth == depth


def test_nothing_after_run_finished() -> None:
    sink, _ = make_sink()
    bus = Bus(sink)
    bus.emit_nowait(EventType.RUN_FINISHED, {"status": "completed"}, last=True)
    assert sink.closed
    with pytest.raises(RuntimeError, match="already finished"):
        bus.emit_nowait(EventType.REASONING, {"delta": "late"})


def test_current_bus_defaults_to_none() -> None:
    assert current_bus.get() is None


def test_source_is_shared_not_copied() -> None:
    src = Source(
        agent_key="k",
        agent_id="a",
        agent_name="A",
        session_id="s",
        parent_session_id="p",
        depth=1,
        path="p/a",
    )
    with pytest.raises(AttributeError):
        src.depth = 2  # type: ignore[misc]


def test_deltas_read_together_become_one_event_each_handed_over_at_once() -> None:
    outlet = ListOutlet(capacity=4)
    sink = RunSink("run-1", "sess-root", outlet, clock=lambda: 7.0)
    bus = Bus(sink)
    assert bus.offer(EventType.REASONING, {"delta": "a"}) is False
    assert bus.offer_deltas(["b", "c"]) is False
    assert bus.offer_deltas(["d"]) is True  # the outlet is full now: wait
    assert [(e.seq, e.data, e.ts, e.last) for e in outlet.events] == [
        (1, {"delta": "a"}, 7.0, False),
        (2, {"delta": "b"}, 7.0, False),
        (3, {"delta": "c"}, 7.0, False),
        (4, {"delta": "d"}, 7.0, False),
    ]
    assert sink.last_seq == 4
    sink.closed = True
    with pytest.raises(RuntimeError, match="already finished"):
        bus.offer_deltas(["e"])
