"""How a run goes on from its journal (orchestrator/runtime/continuation.py), case by
case and without trio: a fresh run, a restart, a takeover with each kind of child,
a fork, and what a run that ends early still owes its rebuilt agents."""

from __future__ import annotations

import ast
from typing import Any

import pytest

from agents.core.messages import Inbound
from orchestrator.core.continuation import (
    FRESH,
    Answered,
    Continuation,
    Continue,
    Follow,
    Kind,
    Lost,
    Opening,
)
from orchestrator.core.events import EventType, RemoteRef, Source
from orchestrator.core.fork import fork_run
from orchestrator.core.rebuild import rebuild
from tests.helpers import REPO
from tests.unit.test_rebuild import ROOT_SESSION, Journal, child, spawn_call

R = EventType


def below(parent: Source, key: str, session: str, call: str, **kw: Any) -> Source:
    """A child of `parent` (a path under the parent's)."""
    agent_id = key.split("#")[0]
    return Source(
        agent_key=key,
        agent_id=agent_id,
        agent_name=key,
        session_id=session,
        parent_session_id=parent.session_id,
        depth=parent.depth + 1,
        path=f"{parent.path}/{agent_id}",
        parent_tool_call_id=call,
        **kw,
    )


def planner_with_children(*children: tuple[str, str]) -> Journal:
    """A root that spawned each (agentKey, call id) in one finished turn."""
    j = Journal()
    j.add(R.RUN_STARTED, None, agentId="planner", input="plan it")
    calls = [spawn_call(call, key.split("#")[0], f"task {key}") for key, call in children]
    j.add(R.REASONING, None, last=True, text="Spawning", toolCalls=calls)
    return j


def continuation(
    j: Journal, kinds: dict[str, Kind] | None = None, **resumed: object
) -> Continuation:
    return Continuation(rebuild(j.events), kinds or {}, resumed or {"attempt": 2})


def kinds_of(openings: list[Opening]) -> list[tuple[EventType, str | None]]:
    return [(o.type, o.source.agent_key if o.source else None) for o in openings]


def test_a_fresh_run_is_an_empty_plan() -> None:
    fresh = Continuation()
    assert fresh.opening("planner", "go") == [
        Opening(None, R.RUN_STARTED, {"agentId": "planner", "input": "go"})
    ]
    assert fresh.root() is FRESH
    assert fresh.start(None, "call-1") is FRESH and fresh.start("agent:x", "c") is FRESH
    assert fresh.approvals() == [] and fresh.unresumed({"k"}, "cancelled") == []
    assert fresh.background(rebuild([]).root) == []


def test_a_restart_continues_the_root_and_its_running_child() -> None:
    j = planner_with_children(("a#1", "c1"))
    a = child("a#1", "s-a", ROOT_SESSION, 1, "c1")
    j.add(R.AGENT_STARTED, a, agentId="a", task="task a#1")
    j.add(R.REASONING, a, delta="half")
    plan = continuation(j, reason="restart", attempt=2)
    assert kinds_of(plan.opening("planner", "plan it")) == [
        (R.RUN_RESUMED, None),
        (R.TURN_ABANDONED, "a#1"),
    ]
    opened = plan.opening("planner", "plan it")
    assert opened[0].data == {"reason": "restart", "attempt": 2}
    assert opened[1].data == {"reason": "restart", "attempt": 2}
    root = plan.root()
    assert isinstance(root, Continue) and root.plan.key is None
    start = plan.start(None, "c1")
    assert isinstance(start, Continue) and start.plan.key == "a#1" and not start.background
    assert plan.start(None, "c-unknown") is FRESH  # a call the journal shows no child of
    assert plan.start("a#1", "c-none") is FRESH


def test_a_child_that_had_ended_is_answered_from_the_journal() -> None:
    j = planner_with_children(("a#1", "c1"), ("b#1", "c2"))
    a = child("a#1", "s-a", ROOT_SESSION, 1, "c1")
    b = child("b#1", "s-b", ROOT_SESSION, 1, "c2")
    j.add(R.AGENT_STARTED, a, agentId="a", task="t")
    j.add(R.AGENT_STARTED, b, agentId="b", task="t")
    j.add(R.AGENT_RESULT, a, last=True, text="A done")
    j.add(R.AGENT_ERROR, b, last=True, errorType="budget", message="over budget")
    plan = continuation(j)
    ok, failed = plan.start(None, "c1"), plan.start(None, "c2")
    assert isinstance(ok, Answered) and ok.result == "A done"
    assert isinstance(failed, Answered) and failed.result is None
    assert (failed.error, failed.error_type) == ("over budget", "budget")


def test_the_root_that_had_answered_only_lacks_its_run_finished() -> None:
    j = Journal()
    j.add(R.RUN_STARTED, None, agentId="planner", input="x")
    j.add(R.REASONING, None, last=True, text="all done", toolCalls=[])
    j.add(R.AGENT_RESULT, None, last=True, text="all done")
    root = continuation(j).root()
    assert isinstance(root, Answered) and root.result == "all done"


def test_a_remote_child_is_followed_from_its_cursor_with_its_open_subtree() -> None:
    j = planner_with_children(("far#1", "c1"))
    far = child("far#1", "s-far", ROOT_SESSION, 1, "c1")
    j.add(R.AGENT_STARTED, far, agentId="far", task="t")
    ref = RemoteRef(run_id="run-there", seq=4)
    remote = Source(**{**_fields(far), "remote": ref})
    j.add(R.REASONING, remote, delta="x")
    deep = below(far, "deep#1", "s-deep", "c7", remote=RemoteRef(run_id="run-there", seq=9))
    done = below(far, "done#1", "s-done", "c8", remote=RemoteRef(run_id="run-there", seq=6))
    j.add(R.AGENT_STARTED, deep, agentId="deep", task="t")
    j.add(R.AGENT_STARTED, done, agentId="done", task="t")
    j.add(R.AGENT_RESULT, done, last=True, text="ok")
    plan = continuation(j, {"far": "remote"})
    start = plan.start(None, "c1")
    assert isinstance(start, Follow)
    assert start.cursor == RemoteRef(run_id="run-there", seq=9)  # the last seq of that run
    assert set(start.below) == {"deep#1"}  # the ended one is not followed
    assert (R.TURN_ABANDONED, "far#1") not in kinds_of(plan.opening("planner", "x"))


def test_a_remote_child_without_a_cursor_and_an_a2a_child_are_lost_deepest_first() -> None:
    j = planner_with_children(("far#1", "c1"), ("card#1", "c2"))
    far = child("far#1", "s-far", ROOT_SESSION, 1, "c1")
    card = child("card#1", "s-card", ROOT_SESSION, 1, "c2")
    deep = below(far, "deep#1", "s-deep", "c7")
    j.add(R.AGENT_STARTED, far, agentId="far", task="t")
    j.add(R.AGENT_STARTED, deep, agentId="deep", task="t")
    j.add(R.AGENT_STARTED, card, agentId="card", task="t")
    plan = continuation(j, {"far": "remote", "card": "a2a"})
    lost = plan.start(None, "c1")
    assert isinstance(lost, Lost) and lost.kind == "remote"
    assert [s.agent_key for s in lost.ends] == ["deep#1", "far#1"]
    a2a = plan.start(None, "c2")
    assert isinstance(a2a, Lost) and a2a.kind == "a2a"
    assert [s.agent_key for s in a2a.ends] == ["card#1"]


def test_orphans_and_cut_off_turns_open_the_run_once_each() -> None:
    j = Journal()
    a = child("a#1", "s-a", ROOT_SESSION, 1, "c1")
    g = below(a, "g#1", "s-g", "c9")
    j.add(R.RUN_STARTED, None, agentId="planner", input="x")
    j.add(R.REASONING, None, delta="calling")  # the root's turn was cut off
    j.add(R.AGENT_STARTED, a, agentId="a", task="t")
    j.add(R.AGENT_STARTED, g, agentId="g", task="t2")
    plan = continuation(j, reason="restart")
    opened = plan.opening("planner", "x")
    assert kinds_of(opened) == [
        (R.RUN_RESUMED, None),
        (R.TURN_ABANDONED, None),
        (R.AGENT_ERROR, "g#1"),
        (R.AGENT_ERROR, "a#1"),
    ]
    assert all(o.last for o in opened[2:])
    assert "when the server restarted" in str(opened[2].data["message"])
    # The run ends before going on: the orphans already ended, nobody else is owed.
    assert plan.unresumed(set(), "cancelled") == []


def test_a_run_that_ends_before_continuing_its_children_ends_them() -> None:
    j = planner_with_children(("a#1", "c1"), ("b#1", "c2"))
    for key, session, call in (("a#1", "s-a", "c1"), ("b#1", "s-b", "c2")):
        j.add(R.AGENT_STARTED, child(key, session, ROOT_SESSION, 1, call), agentId=key[0], task="t")
    plan = continuation(j)
    ends = plan.unresumed({"a#1"}, "cancelled")  # a was continued, b never was
    assert kinds_of(ends) == [(R.AGENT_ERROR, "b#1")]
    assert ends[0].data["errorType"] == "cancelled" and ends[0].last
    assert plan.unresumed(set(), "interrupted")[0].data["errorType"] == "worker_lost"


def planner_a_with_child_b() -> Journal:
    """A root that spawned a#1, which spawned b#1; both still running."""
    j = planner_with_children(("a#1", "c1"))
    a = child("a#1", "s-a", ROOT_SESSION, 1, "c1")
    b = below(a, "b#1", "s-b", "cb")
    j.add(R.AGENT_STARTED, a, agentId="a", task="task a#1")
    j.add(R.REASONING, a, last=True, text="", toolCalls=[spawn_call("cb", "b", "task b")])
    j.add(R.AGENT_STARTED, b, agentId="b", task="task b")
    sent: dict[str, Any] = {"text": "earlier", "from": "client", "control": "1-0"}
    j.add(R.USER_MESSAGE, b, False, **sent)
    return j


def test_a_cancel_before_its_agent_is_rebuilt_ends_it_and_its_subtree_once() -> None:
    plan = continuation(planner_a_with_child_b())
    assert plan.waiting("a#1", set()) is not None and plan.waiting("b#1", set()) is not None
    assert plan.waiting("a#1", {"a#1"}) is None  # started again: the runner takes it
    assert plan.waiting("zz#9", set()) is None
    agent = plan.waiting("a#1", set())
    assert agent is not None
    ends = plan.cancel_early(agent, set(), by="user", reason="enough", itself=True)
    assert kinds_of(ends) == [(R.AGENT_ERROR, "b#1"), (R.AGENT_ERROR, "a#1")]  # deepest first
    assert ends[1].data == {
        "errorType": "cancelled",
        "message": "agent 'a' was cancelled by the user: enough",
        "by": "user",
        "reason": "enough",
    }
    start = plan.start(None, "c1")  # its parent reaches its spawn call: the cancel's error
    assert isinstance(start, Answered) and start.error_type == "cancelled"
    assert plan.waiting("a#1", set()) is None  # ended: a second cancel is refused
    assert plan.cancel_early(agent, set(), by="user", reason=None, itself=True) == []
    assert plan.unresumed(set(), "completed") == []  # nothing ends twice


def test_a_cancel_of_a_rebuilt_agent_ends_what_it_had_not_started_again() -> None:
    plan = continuation(planner_a_with_child_b())
    a = plan.journaled("a#1")
    assert a is not None and plan.journaled("nobody") is None
    ends = plan.cancel_early(a, {"a#1"}, by="user", reason=None, itself=False)
    assert kinds_of(ends) == [(R.AGENT_ERROR, "b#1")]
    assert ends[0].data["message"] == "agent 'b' was cancelled by the user"
    fresh = continuation(planner_a_with_child_b())  # b started again: its runner ends it
    a2 = fresh.journaled("a#1")
    assert a2 is not None
    assert fresh.cancel_early(a2, {"a#1", "b#1"}, by="user", reason=None, itself=False) == []


def test_a_message_is_kept_for_an_agent_not_rebuilt_and_delivered_once() -> None:
    plan = continuation(planner_a_with_child_b())
    assert plan.delivered("1-0") and not plan.delivered("2-0")  # the journal shows 1-0
    b = plan.waiting("b#1", set())
    assert b is not None
    b.inbox.append(Inbound("later", "2-0"))
    assert plan.delivered("2-0")  # kept for it: not kept twice
    assert not Continuation().delivered("1-0")
    assert Continuation().waiting(None, set()) is None


def test_controls_for_remote_lost_or_orphaned_agents_are_not_kept() -> None:
    j = planner_with_children(("r#1", "c1"))
    j.add(R.AGENT_STARTED, child("r#1", "s-r", ROOT_SESSION, 1, "c1"), agentId="r", task="t")
    assert continuation(j, {"r": "remote"}).waiting("r#1", set()) is None
    orphan = Journal()  # a child whose spawn call is not pending: nobody waits for it
    orphan.add(R.RUN_STARTED, None, agentId="planner", input="x")
    orphan.add(R.AGENT_STARTED, child("o#1", "s-o", ROOT_SESSION, 1, "c9"), agentId="o", task="t")
    assert continuation(orphan).waiting("o#1", set()) is None


def test_waiting_approvals_are_adopted_and_decided_ones_are_not() -> None:
    j = Journal()
    j.add(R.RUN_STARTED, None, agentId="planner", input="x")
    calls = [
        {"toolCallId": "w1", "name": "write", "args": {"path": "a"}},
        {"toolCallId": "w2", "name": "write", "args": {"path": "b"}},
    ]
    j.add(R.REASONING, None, last=True, text="", toolCalls=calls)
    j.add(R.APPROVAL_REQUESTED, None, toolCallId="w1", name="write", timeoutAt=500.0)
    j.add(R.APPROVAL_REQUESTED, None, toolCallId="w2", name="write", timeoutAt=600.0)
    j.add(R.APPROVAL_RESOLVED, None, toolCallId="w2", decision="deny", by="ann")
    waiting = continuation(j).approvals()
    assert [(w.call.id, w.requested_at, w.timeout_at) for w in waiting] == [("w1", 3.0, 500.0)]


def test_background_children_go_on_beside_their_parent() -> None:
    j = Journal()
    bg = child("w#1", "s-w", ROOT_SESSION, 1, "c1", task_id="task-1")
    done = child("v#1", "s-v", ROOT_SESSION, 1, "c2", task_id="task-2")
    j.add(R.RUN_STARTED, None, agentId="planner", input="x")
    calls = [spawn_call("c1", "w", "bg"), spawn_call("c2", "v", "bg")]
    j.add(R.REASONING, None, last=True, text="", toolCalls=calls)
    j.add(R.AGENT_STARTED, bg, agentId="w", task="bg")
    j.add(R.AGENT_STARTED, done, agentId="v", task="bg")
    j.add(R.AGENT_RESULT, done, last=True, text="v done")  # its report never reached the root
    plan = continuation(j)
    root = plan.root()
    assert isinstance(root, Continue)
    again = {task: (start, call) for start, task, call in plan.background(root.plan)}
    running, ended = again["task-1"][0], again["task-2"][0]
    assert isinstance(running, Continue) and running.background and again["task-1"][1] == "c1"
    assert isinstance(ended, Answered) and ended.background and ended.result == "v done"


def test_a_fork_ends_remote_subtrees_first_and_says_it_is_a_fork() -> None:
    j = planner_with_children(("a#1", "c1"))
    a = child("a#1", "s-a", ROOT_SESSION, 1, "c1")
    j.add(R.AGENT_STARTED, a, agentId="a", task="task a#1")
    j.add(R.REASONING, a, last=True, text="thinking", toolCalls=[])
    fork = fork_run(j.events, len(j.events), "run-fork", now=100.0)
    plan = Continuation(fork.plan, {}, {"attempt": 1, "afterSeq": len(j.events), "reason": "fork"})
    assert plan.opening("planner", "plan it")[0] == Opening(
        None, R.RUN_RESUMED, {"attempt": 1, "afterSeq": len(j.events), "reason": "fork"}
    )
    start = plan.start(None, "c1")
    assert isinstance(start, Continue) and start.plan.key == "a#1"


def test_the_planner_is_pure() -> None:
    tree = ast.parse((REPO / "orchestrator/core/continuation.py").read_text(encoding="utf-8"))
    imported = {
        node.module.split(".")[0] if node.module else ""
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom)
    } | {
        alias.name.split(".")[0]
        for node in ast.walk(tree)
        if isinstance(node, ast.Import)
        for alias in node.names
    }
    assert imported <= {
        "__future__",
        "collections",
        "dataclasses",
        "typing",
        "agents",
        "orchestrator",
    }
    assert "trio" not in imported


def _fields(source: Source) -> dict[str, Any]:
    return {name: getattr(source, name) for name in source.__struct_fields__}


def test_a_threads_next_run_opens_with_its_thread_and_starts_from_its_history() -> None:
    from agents.core.messages import AssistantMessage, UserMessage
    from orchestrator.core.continuation import Fresh, ThreadStart

    history = (UserMessage(text="my name is Ann"), AssistantMessage(text="hello Ann"))
    follow_up = Continuation(thread=ThreadStart("t-1", "run-1", None, history))
    assert follow_up.opening("chat", "what is my name?") == [
        Opening(
            None,
            R.RUN_STARTED,
            {
                "agentId": "chat",
                "input": "what is my name?",
                "threadId": "t-1",
                "previousRunId": "run-1",
            },
        )
    ]
    assert follow_up.root() == Fresh(history)
    continued = Continuation(thread=ThreadStart("t-1", "run-2", "agent:helper:1", history))
    assert continued.opening("helper", "more?")[0].data["continues"] == {
        "runId": "run-2",
        "agentKey": "agent:helper:1",
    }
    first = Continuation(thread=ThreadStart("t-2"))
    assert first.opening("chat", "hi")[0].data == {
        "agentId": "chat",
        "input": "hi",
        "threadId": "t-2",
    }
    assert first.root() == Fresh()


def test_a_run_context_is_made_whole_at_once() -> None:
    from unittest.mock import MagicMock

    from orchestrator.runtime.context import RunContext, RunLimits
    from orchestrator.runtime.spawn import run_tools

    catalog = MagicMock(tools={}, specs={})
    context = RunContext(catalog, RunLimits(max_depth=2, max_children=2), runtime=run_tools)
    assert set(context.tools) == {"agent_spawn", "agent_send"}
    assert context.continuation.plan.fresh  # a fresh run: an empty plan
    with pytest.raises(AttributeError, match="made whole at once"):
        context.limits = RunLimits(max_depth=9, max_children=9)


def test_a_fresh_run_is_never_a_missing_plan() -> None:
    """Issue 58: the continuation lives in core/ and a fresh run is the empty plan —
    no `plan is None` anywhere."""
    assert not (REPO / "orchestrator/runtime/continuation.py").exists()
    found = [
        str(path.relative_to(REPO))
        for path in (REPO / "orchestrator").rglob("*.py")
        if "plan is None" in path.read_text(encoding="utf-8")
    ]
    assert found == []
