"""Rebuilding a run's agents from its journal (orchestrator/core/rebuild.py)."""

from __future__ import annotations

from typing import Any

import msgspec

from agents.core.messages import AssistantMessage, ToolCall, ToolResultMessage, UserMessage
from orchestrator.core.events import Event, EventType, RemoteRef, Source
from orchestrator.core.rebuild import rebuild

ROOT_SESSION = "sess-root"


def child(key: str, session: str, parent_session: str, depth: int, call: str, **kw: Any) -> Source:
    return Source(
        agent_key=key,
        agent_id=key.split("#")[0],
        agent_name=key,
        session_id=session,
        parent_session_id=parent_session,
        depth=depth,
        path=f"{ROOT_SESSION}/{key}",
        parent_tool_call_id=call,
        **kw,
    )


class Journal:
    def __init__(self) -> None:
        self.events: list[Event] = []

    def add(self, kind: EventType, source: Source | None, last: bool = False, **data: Any) -> None:
        seq = len(self.events) + 1
        self.events.append(Event("run-1", seq, float(seq), kind, source, last, data))


R = EventType


def spawn_call(call_id: str, agent: str, task: str) -> dict[str, Any]:
    return {"toolCallId": call_id, "name": "agent_spawn", "args": {"agent_id": agent, "task": task}}


def test_a_finished_turn_with_results_before_it_and_a_pending_spawn() -> None:
    """Tool results may be journaled before their turn's `last` REASONING (tools start
    while the model streams); a spawn whose child still runs is pending, not orphaned."""
    j = Journal()
    a = child("a#1", "s-a", ROOT_SESSION, 1, "c1")
    b = child("b#1", "s-b", ROOT_SESSION, 1, "c2")
    j.add(R.RUN_STARTED, None, agentId="planner", input="plan it")
    j.add(R.REASONING, None, delta="Sp")
    j.add(R.AGENT_STARTED, a, agentId="a", task="task a")
    j.add(R.AGENT_STARTED, b, agentId="b", task="task b")
    j.add(R.REASONING, a, delta="wor")
    j.add(R.REASONING, a, last=True, text="A done", toolCalls=[])
    j.add(R.AGENT_RESULT, a, last=True, text="A done")
    j.add(R.TOOL_RESULT, None, toolCallId="c1", name="agent_spawn", content="A done", isError=False)
    j.add(
        R.REASONING,
        None,
        last=True,
        text="Spawning",
        toolCalls=[spawn_call("c1", "a", "task a"), spawn_call("c2", "b", "task b")],
    )
    j.add(R.REASONING, b, delta="half a sen")
    plan = rebuild(j.events)
    root = plan.root
    assert root.messages == [
        UserMessage(text="plan it"),
        AssistantMessage(
            text="Spawning",
            tool_calls=(
                ToolCall(id="c1", name="agent_spawn", arguments='{"agent_id":"a","task":"task a"}'),
                ToolCall(id="c2", name="agent_spawn", arguments='{"agent_id":"b","task":"task b"}'),
            ),
        ),
    ]
    assert root.done == [ToolResultMessage(tool_call_id="c1", name="agent_spawn", content="A done")]
    assert [c.id for c in root.pending] == ["c2"]
    assert not root.cut_off and not root.ended
    assert plan.child_of(root, "c2") is plan.agents["b#1"]
    b_plan = plan.agents["b#1"]
    assert b_plan.cut_off and b_plan.messages == [UserMessage(text="task b")]
    assert plan.agents["a#1"].ended and plan.agents["a#1"].result == "A done"
    assert [x.key for x in plan.cut_off()] == ["b#1"]
    assert plan.orphans() == []
    assert not plan.finished and plan.last_seq == len(j.events)


def test_children_of_a_cut_off_turn_are_orphans_deepest_first() -> None:
    j = Journal()
    a = child("a#1", "s-a", ROOT_SESSION, 1, "c1")
    g = child("g#1", "s-g", "s-a", 2, "c9")
    j.add(R.RUN_STARTED, None, agentId="planner", input="x")
    j.add(R.REASONING, None, delta="calling")
    j.add(R.TOOL_CALL, None, toolCallId="c1", name="agent_spawn", args={})
    j.add(R.AGENT_STARTED, a, agentId="a", task="t")
    j.add(R.AGENT_STARTED, g, agentId="g", task="t2")  # the child's own child
    plan = rebuild(j.events)
    assert plan.root.cut_off and plan.root.pending == []
    assert [o.key for o in plan.orphans()] == ["g#1", "a#1"]


def test_messages_sent_in_join_before_the_next_turn_and_background_children_go_on() -> None:
    j = Journal()
    bg = child("w#1", "s-w", ROOT_SESSION, 1, "c1", task_id="task-1")
    j.add(R.RUN_STARTED, None, agentId="planner", input="x")
    j.add(R.REASONING, None, last=True, text="", toolCalls=[spawn_call("c1", "w", "bg")])
    j.add(R.AGENT_STARTED, bg, agentId="w", task="bg")
    j.add(
        R.TOOL_RESULT,
        None,
        toolCallId="c1",
        name="agent_spawn",
        content='{"taskId":"task-1"}',
        isError=False,
    )
    j.add(R.USER_MESSAGE, None, text="hurry")
    j.add(R.REASONING, None, delta="ok")
    j.add(R.REASONING, None, last=True, text="ok", toolCalls=[])
    j.add(R.USER_MESSAGE, None, text="one more")
    plan = rebuild(j.events)
    texts = [
        type(m).__name__ + ":" + getattr(m, "text", getattr(m, "content", ""))
        for m in plan.root.messages
    ]
    assert texts == [
        "UserMessage:x",
        "AssistantMessage:",
        'ToolResultMessage:{"taskId":"task-1"}',
        "UserMessage:hurry",
        "AssistantMessage:ok",
        "UserMessage:one more",
    ]
    assert plan.root.pending == []
    # The background child still runs: it goes on beside the root, under its taskId.
    assert plan.orphans() == []
    assert [(c.key, t, call) for c, t, call in plan.background_of(plan.root)] == [
        ("w#1", "task-1", "c1")
    ]


def test_a_background_child_that_ended_reports_once() -> None:
    """Ended before its report reached the parent: picked up again (to report its
    journaled result); once the parent heard from it, never again. Below a parent that
    nobody continues, a running one is an orphan like any child."""
    j = Journal()
    bg = child("w#1", "s-w", ROOT_SESSION, 1, "c1", task_id="task-1")
    j.add(R.RUN_STARTED, None, agentId="planner", input="x")
    j.add(R.REASONING, None, last=True, text="", toolCalls=[spawn_call("c1", "w", "bg")])
    j.add(R.AGENT_STARTED, bg, agentId="w", task="bg")
    j.add(R.TOOL_RESULT, None, toolCallId="c1", name="agent_spawn", content="{}", isError=False)
    j.add(R.AGENT_ERROR, bg, last=True, errorType="timeout", message="too slow")
    plan = rebuild(j.events)
    ((again, task_id, _),) = plan.background_of(plan.root)
    assert (again.key, task_id, again.ended, again.error_type) == ("w#1", "task-1", True, "timeout")
    heard = {"text": "[task-1 w w#1 failed (timeout)]\ntoo slow", "from": "task-1"}
    j.events.append(Event("run-1", len(j.events) + 1, 9.0, R.USER_MESSAGE, None, False, heard))
    plan = rebuild(j.events)
    assert plan.background_of(plan.root) == []
    # A background grandchild whose parent's turn was cut off: nobody picks it up.
    k = Journal()
    mid = child("m#1", "s-m", ROOT_SESSION, 1, "c1")
    low = child("l#1", "s-l", "s-m", 2, "d1", task_id="task-2")
    k.add(R.RUN_STARTED, None, agentId="planner", input="x")
    k.add(R.REASONING, None, delta="cut off before its calls were final")
    k.add(R.AGENT_STARTED, mid, agentId="m", task="t")
    k.add(R.REASONING, mid, last=True, text="", toolCalls=[spawn_call("d1", "l", "t")])
    k.add(R.AGENT_STARTED, low, agentId="l", task="t")
    plan = rebuild(k.events)
    assert [o.key for o in plan.orphans()] == ["l#1", "m#1"]


def test_a_finished_run_and_an_ended_root() -> None:
    j = Journal()
    j.add(R.RUN_STARTED, None, agentId="critic", input="x")
    j.add(R.REASONING, None, last=True, text="fine", toolCalls=[])
    j.add(R.AGENT_RESULT, None, last=True, text="fine")
    assert rebuild(j.events).root.result == "fine"
    assert not rebuild(j.events).finished
    j.add(R.RUN_FINISHED, None, last=True, status="completed", result="fine")
    assert rebuild(j.events).finished


def test_a_call_whose_arguments_were_not_json_keeps_its_raw_text() -> None:
    j = Journal()
    j.add(R.RUN_STARTED, None, agentId="critic", input="x")
    call = {"toolCallId": "c1", "name": "read_file", "args": '{"path": "a'}
    j.add(R.REASONING, None, last=True, text="", toolCalls=[call])
    (pending,) = rebuild(j.events).root.pending
    assert pending.arguments == '{"path": "a'


def forwarded(source: Source, run: str, seq: int) -> Source:
    return msgspec.structs.replace(source, remote=RemoteRef(run_id=run, seq=seq))


def test_a_remote_subtree_is_followed_again_not_cut_off_or_orphaned() -> None:
    """A remote child's forwarded agents (`Source.remote`) keep going on their server:
    the plan says where to follow its run again, and none of them is cut off or
    orphaned here — unless the child itself ended."""
    j = Journal()
    far = child("far#1", "s-far", ROOT_SESSION, 1, "c1")
    deep = child("deep#1", "s-deep", "s-far", 2, "t1")
    bg = child("bg#1", "s-bg", "s-far", 2, "t2", task_id="task-1")
    j.add(R.RUN_STARTED, None, agentId="boss", input="go")
    j.add(R.REASONING, None, last=True, text="", toolCalls=[spawn_call("c1", "far", "t")])
    j.add(R.AGENT_STARTED, far, agentId="far", task="t")
    j.add(
        R.REASONING,
        forwarded(far, "run-x", 2),
        last=True,
        text="",
        toolCalls=[spawn_call("t1", "deep", "t")],
    )
    j.add(R.AGENT_STARTED, forwarded(deep, "run-x", 3), agentId="deep", task="t")
    j.add(R.AGENT_STARTED, forwarded(bg, "run-x", 4), agentId="bg", task="t")
    j.add(R.REASONING, forwarded(deep, "run-x", 5), delta="half a tur")  # cut off here
    plan = rebuild(j.events)
    cursor = plan.remote_cursor("far#1")
    assert cursor is not None and (cursor.run_id, cursor.seq) == ("run-x", 5)
    assert plan.followed() == {"far#1", "deep#1", "bg#1"}
    assert plan.cut_off() == [] and plan.orphans() == []
    assert plan.remote_cursor("boss") is None
    # Once the child has ended, a background agent it left running is orphaned as usual.
    j.add(R.AGENT_RESULT, forwarded(deep, "run-x", 6), last=True, text="deep done")
    j.add(R.AGENT_RESULT, forwarded(far, "run-x", 7), last=True, text="done")
    plan = rebuild(j.events)
    assert plan.followed() == set()
    assert [a.key for a in plan.orphans()] == ["bg#1"]
