"""Stall detection's pure part (`core/stalls.py`) and how the tree shows a stall."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from orchestrator.core.events import Event, EventType, Source
from orchestrator.core.stalls import StallWatch
from orchestrator.core.tree import TreeView

ROOT_SESSION = "sess-1"


def source(name: str, parent: Source | None = None) -> Source:
    return Source(
        agent_key=f"agent:{name}:1",
        agent_id=name,
        agent_name=name,
        session_id=f"sub-{name}",
        parent_session_id=parent.session_id if parent else ROOT_SESSION,
        depth=(parent.depth + 1) if parent else 1,
        path=f"{ROOT_SESSION}/{name}",
    )


class Run:
    """Events of one run, numbered, fed to a StallWatch at given times."""

    def __init__(self) -> None:
        self.seq = 0
        self.watch = StallWatch(0.0)
        self.tree = TreeView()

    def emit(self, at: float, who: Source | None, kind: EventType, **data: Any) -> Event:
        self.seq += 1
        event = Event("run-1", self.seq, at, kind, who, False, data)
        self.watch.apply([event], at)
        self.tree.apply(event)
        return event

    def due(self, at: float) -> list[tuple[str | None, dict[str, Any]]]:
        found = [(s.agent_key, dict(s.data)) for s in self.watch.due(at, 60.0)]
        for stall in self.watch.due(at, 60.0):  # the sweeper writes them: marked
            self.emit(at, stall.source, EventType.AGENT_STALLED, **stall.data)
        return found


def test_a_silent_agent_is_due_once_and_its_next_event_ends_the_silence() -> None:
    run = Run()
    run.emit(0, None, EventType.RUN_STARTED, agentId="boss", input="x")
    worker = source("worker")
    run.emit(1, None, EventType.TOOL_CALL, toolCallId="c0", name="agent_spawn", args={})
    run.emit(2, worker, EventType.AGENT_STARTED, agentId="worker", task="t")
    run.emit(3, worker, EventType.REASONING, delta="hi")
    assert run.due(62) == []  # 59 s of silence: not yet
    assert run.due(63.5) == [
        ("agent:worker:1", {"stalled": True, "silentSeconds": 60.5, "lastSeq": 4})
    ]  # the boss waits for its child: not stalled
    assert run.watch.stalled == 1 and run.tree.nodes["agent:worker:1"].stalled == 60.5
    assert run.due(200) == []  # once per silence
    run.emit(201, worker, EventType.REASONING, delta=" again")
    assert run.watch.stalled == 0 and run.tree.nodes["agent:worker:1"].stalled is None
    (moved,) = run.watch.moved  # the server says it moved (for `detail: status`)
    assert dict(moved.data) == {"stalled": False, "silentSeconds": 198.0, "lastSeq": 6}
    assert run.due(240) == []
    assert [key for key, _ in run.due(262)] == ["agent:worker:1"]


def test_waiting_for_a_person_or_for_children_is_not_a_stall() -> None:
    run = Run()
    run.emit(0, None, EventType.RUN_STARTED, agentId="boss", input="x")
    lead = source("lead")
    worker = source("worker", lead)
    run.emit(1, lead, EventType.AGENT_STARTED, agentId="lead", task="t")
    run.emit(2, worker, EventType.AGENT_STARTED, agentId="worker", task="t")
    run.emit(3, worker, EventType.TOOL_CALL, toolCallId="c1", name="write_file", args={})
    run.emit(4, worker, EventType.APPROVAL_REQUESTED, toolCallId="c1", name="write_file")
    assert run.due(1000) == []  # the worker waits for a person; the others for it
    run.emit(1001, worker, EventType.APPROVAL_RESOLVED, toolCallId="c1", decision="approve")
    assert run.due(1062) == [
        (
            "agent:worker:1",
            {"stalled": True, "silentSeconds": 61.0, "lastSeq": 6, "tool": "write_file"},
        )
    ]
    run.emit(1063, worker, EventType.AGENT_RESULT, text="done", usage={}, subtreeUsage={})
    assert run.watch.moved == []  # its end says it
    assert run.watch.stalled == 0
    assert [key for key, _ in run.due(1124)] == ["agent:lead:1"]  # now the lead is silent
    run.emit(1125, None, EventType.RUN_FINISHED, status="completed")
    assert run.due(5000) == [] and run.watch.stalled == 0


@given(st.lists(st.tuples(st.sampled_from(["a", "b"]), st.floats(0, 200)), max_size=30))
def test_the_count_of_stalled_agents_is_the_marks_that_hold(steps: list[tuple[str, float]]) -> None:
    run = Run()
    run.emit(0, None, EventType.RUN_STARTED, agentId="boss", input="x")
    agents = {name: source(name) for name in ("a", "b")}
    for who in agents.values():
        run.emit(0, who, EventType.AGENT_STARTED, agentId=who.agent_id, task="t")
    now = 0.0
    for name, wait in steps:
        now += wait
        run.due(now)
        run.emit(now, agents[name], EventType.REASONING, delta="x")
        marked = [n for n in run.tree.nodes.values() if n.stalled is not None]
        assert run.watch.stalled == len(marked)


def test_orchestrator_watch_shows_a_stalled_agent_until_it_moves() -> None:
    from rich.console import Console

    from orchestrator.cli.render import render_tree

    def shown(view: TreeView) -> str:
        console = Console(width=120, record=True)
        console.print(render_tree(view, 120))
        return console.export_text()

    run = Run()
    run.emit(0, None, EventType.RUN_STARTED, agentId="boss", input="x")
    worker = source("worker")
    run.emit(1, worker, EventType.AGENT_STARTED, agentId="worker", task="t")
    run.emit(2, worker, EventType.TOOL_CALL, toolCallId="c1", name="http_get", args={})
    run.due(70)
    assert "⚠ stalled: no event for 68 s" in shown(run.tree)
    run.emit(71, worker, EventType.TOOL_RESULT, toolCallId="c1", name="http_get", content="x")
    assert "stalled" not in shown(run.tree)


def test_a_batch_of_deltas_counts_as_activity_in_order() -> None:
    """Deltas are looked at in bulk (each agent's last of a run of them), yet the
    silence ends at the first one, and an event between deltas keeps its place."""
    watch = StallWatch(0.0)
    worker = source("worker")
    events = [Event("run-1", 1, 0.0, EventType.AGENT_STARTED, worker, False, {"task": "t"})]
    watch.apply(events, 0.0)
    (stall,) = watch.due(61, 60.0)
    watch.mark(stall.agent_key)
    batch = [
        Event("run-1", seq, 0.0, EventType.REASONING, worker, False, {"delta": "x"})
        for seq in (3, 4, 5)
    ]
    batch.append(
        Event(
            "run-1",
            6,
            0.0,
            EventType.TOOL_CALL,
            worker,
            False,
            {"toolCallId": "c", "name": "t", "args": {}},
        )
    )
    batch += [Event("run-1", 7, 0.0, EventType.TOOL_CALL_DELTA, worker, False, {"toolCallId": "d"})]
    watch.apply(batch, 70.0)
    (moved,) = watch.moved
    assert moved.data["lastSeq"] == 3 and moved.data["silentSeconds"] == 70.0
    assert watch.stalled == 0
    (again,) = watch.due(131, 60.0)  # silent since its last event, seq 7, in tool t
    assert again.data == {"stalled": True, "silentSeconds": 61.0, "lastSeq": 7, "tool": "t"}
