"""The pure parts of remote subagents: how a remote run's events are tagged into this
tree, and how a `RemoteLink` lists the calls that wait there and hands answers,
messages and cancels to that server (a stand-in client records what it is asked)."""

from __future__ import annotations

import time
from typing import Any

import pytest
import trio

from agents.approval import ApprovalRequest, Decision
from orchestrator.client import ClientError
from orchestrator.core.approvals import Answer
from orchestrator.core.events import Event, EventType, RemoteRef, Source
from orchestrator.runtime.approvals import ApprovalDesk, ApprovalError
from orchestrator.runtime.remote import RemoteLink, RemoteRefused, RemoteTagger

CHILD = Source(
    agent_key="agent:far:1",
    agent_id="far",
    agent_name="far",
    session_id="sub-child",
    parent_session_id="root-here",
    depth=2,
    path="root-here/boss/far",
)


def theirs(key: str, depth: int, path: str, parent: str = "root-there") -> Source:
    return Source(
        agent_key=key,
        agent_id=key.split(":")[1],
        agent_name=key.split(":")[1],
        session_id=f"sub-{key}",
        parent_session_id=parent,
        depth=depth,
        path=path,
    )


def event(seq: int, kind: EventType, source: Source | None, **data: Any) -> Event:
    return Event(run_id="run-there", seq=seq, ts=100.0 + seq, type=kind, source=source, data=data)


def test_the_remote_root_is_the_child_and_its_descendants_continue_below_it() -> None:
    tagger = RemoteTagger(CHILD, "run-there")
    root = tagger.source_of(event(2, EventType.REASONING, None))
    assert isinstance(root.remote, RemoteRef) and root.remote.seq == 2
    assert (root.agent_key, root.depth, root.path) == (CHILD.agent_key, 2, CHILD.path)
    one = tagger.source_of(event(3, EventType.REASONING, theirs("agent:a:1", 1, "root-there/a")))
    assert (one.depth, one.path, one.parent_session_id) == (3, CHILD.path + "/a", "sub-child")
    two = theirs("agent:b:1", 2, "root-there/a/b", parent="sub-agent:a:1")
    deeper = tagger.source_of(event(4, EventType.REASONING, two))
    assert (deeper.depth, deeper.path) == (4, CHILD.path + "/a/b")
    assert deeper.parent_session_id == "sub-agent:a:1"
    assert isinstance(deeper.remote, RemoteRef) and deeper.remote.run_id == "run-there"


class Recorder:
    """Stands in for the typed client: records requests, or refuses with `refuse`."""

    def __init__(self, refuse: ClientError | None = None) -> None:
        self.asked: list[tuple[Any, ...]] = []
        self.refuse = refuse

    async def _record(self, *request: Any) -> None:
        await trio.lowlevel.checkpoint()
        if self.refuse is not None:
            raise self.refuse
        self.asked.append(request)

    async def approve(self, run_id: str, call_id: str, **how: Any) -> None:
        await self._record("approve", run_id, call_id, how)

    async def send(self, run_id: str, message: str, agent_key: str | None = None) -> None:
        await self._record("send", run_id, message, agent_key)

    async def cancel(self, run_id: str, agent_key: str | None, reason: str | None) -> None:
        await self._record("cancel", run_id, agent_key, reason)


def linked(refuse: ClientError | None = None) -> tuple[RemoteLink, ApprovalDesk, Recorder]:
    desk, registry = ApprovalDesk(), {}  # type: ignore[var-annotated]
    link = RemoteLink(CHILD.agent_key, None, registry, desk)
    client = Recorder(refuse)
    link.client, link.run_id, link.where = client, "run-there", "remote agent 'far'"  # type: ignore[assignment]
    return link, desk, client


def asked(call_id: str, source: Source | None = None) -> Event:
    return event(
        5,
        EventType.APPROVAL_REQUESTED,
        source,
        toolCallId=call_id,
        name="write_file",
        args={"path": "a"},
        timeoutAt=time.time() + 60,
        edit=True,
    )


async def test_a_call_waiting_there_is_listed_here_until_resolved_there() -> None:
    link, desk, client = linked()
    tagged = RemoteTagger(CHILD, "run-there").source_of(asked("c1"))
    link.hold("run-here", tagged, asked("c1"))
    (waiting,) = desk.pending("run-here")
    assert waiting.source == tagged and waiting.request.name == "write_file"
    assert waiting.there is not None and desk.count == 1
    with pytest.raises(ApprovalError, match="waits on another server"):  # not in-process
        desk.answer(
            "run-here", here=True, answer=Answer(tool_call_id="c1", decision="approve", by="ann")
        )
    await waiting.there(Decision(decision="approve", by="ann", reason="fine"))
    assert client.asked == [
        (
            "approve",
            "run-there",
            "c1",
            {"agent_key": None, "deny": False, "reason": "fine", "args": None},
        )
    ]
    resolved = event(6, EventType.APPROVAL_RESOLVED, None, toolCallId="c1", decision="approve")
    link.resolved("run-here", tagged, resolved)
    assert desk.pending("run-here") == [] and desk.count == 0
    with pytest.raises(ApprovalError, match=r"already answered \(approve\)"):
        desk.claim("run-here", "c1")


async def test_a_refusal_there_is_the_answers_error_here() -> None:
    link, desk, _ = linked(ClientError("bad_request", "args are not valid"))
    link.hold("run-here", CHILD, asked("c1"))
    (waiting,) = desk.pending("run-here")
    assert waiting.there is not None
    with pytest.raises(ApprovalError, match="args are not valid") as info:
        await waiting.there(Decision(decision="approve", by="ann", args={"x": 1}))
    assert info.value.code == "bad_request"
    link, desk, _ = linked(ClientError("not_found", "already answered"))
    link.hold("run-here", CHILD, asked("c1"))
    with pytest.raises(ApprovalError) as info:
        await desk.pending("run-here")[0].there(Decision(decision="deny", by="ann"))  # type: ignore[misc]
    assert info.value.code == "not_found"


async def test_a_local_call_with_a_held_calls_id_is_another_call_and_close_lists_none() -> None:
    """Regression: a call's id alone named it, so the root's `c1` dropped the remote
    child's `c1` (each agent numbers its own calls)."""
    link, desk, _ = linked()
    link.hold("run-here", CHILD, asked("c1"))
    link.hold("run-here", CHILD, asked("c2"))
    request = ApprovalRequest(
        tool_call_id="c1",
        name="read_file",
        args={},
        requested_at=time.time(),
        timeout_at=time.time() + 1,
        wait=0.0,
        edit=False,
        parameters={},
    )
    decision = await desk.wait("run-here", None, request)  # the root's own c1
    assert decision.decision == "timeout"
    assert [w.key for w in desk.pending("run-here")] == [
        (CHILD.agent_key, "c1"),
        (CHILD.agent_key, "c2"),
    ]
    link.close()
    assert desk.pending() == [] and desk.count == 0 and link.registry == {}


async def test_messages_and_cancels_go_to_the_agent_there() -> None:
    link, _, client = linked()
    link.adopt("agent:a:1")
    assert link.registry == {CHILD.agent_key: link, "agent:a:1": link}
    await link.send(CHILD.agent_key, "to the root there")
    await link.send("agent:a:1", "to a there")
    await link.cancel_below("agent:a:1", "enough")
    assert client.asked == [
        ("send", "run-there", "to the root there", None),
        ("send", "run-there", "to a there", "agent:a:1"),
        ("cancel", "run-there", "agent:a:1", "enough"),
    ]
    fresh = RemoteLink("agent:far:2", None, {})
    with pytest.raises(RemoteRefused, match="has not started there yet"):
        await fresh.send("agent:far:2", "too early")


async def test_a_server_that_does_not_answer_a_control_is_an_error_in_bounded_time(
    autojump_clock: trio.testing.MockClock,
) -> None:
    link, _, client = linked()

    async def never(*_: Any) -> None:
        await trio.sleep_forever()

    client._record = never  # type: ignore[method-assign]
    start = trio.current_time()
    with pytest.raises(RemoteRefused, match=r"unreachable: .*no answer within 10 s"):
        await link.send(CHILD.agent_key, "anyone?")
    assert trio.current_time() - start == 10


def test_listeners_hear_each_call_start_and_stop_waiting_until_they_unsubscribe() -> None:
    """What must hear of waiting calls (a cluster worker's list) subscribes to the desk;
    every listener hears each change, and none after it unsubscribes."""
    desk = ApprovalDesk()
    heard: list[tuple[str, str, bool]] = []
    also: list[str] = []
    stop = desk.subscribe(lambda run, call, waiting: heard.append((run, call[1], bool(waiting))))
    desk.subscribe(lambda run, call, waiting: also.append(call[1]))
    now = time.time()
    request = ApprovalRequest(
        tool_call_id="c1",
        name="write_file",
        args={},
        requested_at=now,
        timeout_at=now + 60,
        wait=60.0,
        edit=False,
        parameters={},
    )
    desk.adopt("run-1", None, request)
    desk.forget_run("run-1")
    assert heard == [("run-1", "c1", True), ("run-1", "c1", False)]
    stop()
    desk.adopt("run-2", None, request)
    assert len(heard) == 2 and also == ["c1", "c1", "c1"]
