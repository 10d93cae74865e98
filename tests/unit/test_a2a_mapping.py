"""A2A translated both ways (orchestrator/a2a/mapping.py), with the SDK's own types:
an A2A task's responses as a child's events, a run's events as an A2A task; and the
`remote:` spec's two kinds."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("a2a", reason="the A2A tests need the `a2a` extra (pip install -e '.[dev]')")

from a2a.types import a2a_pb2 as pb
from google.protobuf import json_format

from agents.errors import SpecError
from agents.spec import AgentSpec, load_spec
from orchestrator.a2a.mapping import TaskFollower, TaskView, answer_of
from orchestrator.core.approvals import Answer
from orchestrator.core.events import Event, EventType, Source

S = pb.TaskState


def status(state: int, text: str | None = None) -> pb.StreamResponse:
    update = pb.TaskStatusUpdateEvent(task_id="t1", context_id="c1")
    update.status.state = state  # type: ignore[assignment]
    if text is not None:
        update.status.message.parts.append(pb.Part(text=text))
    return pb.StreamResponse(status_update=update)


def artifact(text: str, append: bool, artifact_id: str = "a1") -> pb.StreamResponse:
    update = pb.TaskArtifactUpdateEvent(task_id="t1", context_id="c1", append=append)
    update.artifact.artifact_id = artifact_id
    update.artifact.parts.append(pb.Part(text=text))
    return pb.StreamResponse(artifact_update=update)


def task(state: int) -> pb.StreamResponse:
    found = pb.Task(id="t1", context_id="c1")
    found.status.state = state  # type: ignore[assignment]
    return pb.StreamResponse(task=found)


def feed(follower: TaskFollower, *responses: pb.StreamResponse) -> list[tuple[Any, ...]]:
    return [event for response in responses for event in follower.feed(response)]


def test_a_completed_task_streams_its_text_and_answers_with_its_artifacts() -> None:
    follower = TaskFollower()
    events = feed(
        follower,
        task(S.TASK_STATE_SUBMITTED),
        status(S.TASK_STATE_WORKING, "reading "),
        artifact("draft", False),
        artifact("trio: ", False),  # replaces the draft
        artifact("structured", True),
        artifact("notes", False, "a2"),
        status(S.TASK_STATE_COMPLETED),
        status(S.TASK_STATE_WORKING, "after the end"),
    )
    assert follower.task_id == "t1" and follower.ended
    deltas = [data["delta"] for kind, data, last in events if not last]
    assert deltas == ["reading ", "draft", "trio: ", "structured", "notes"]
    turn, result = events[-2], events[-1]
    assert turn == (
        EventType.REASONING,
        {"text": "".join(deltas), "toolCalls": [], "finishReason": "stop"},
        True,
    )
    assert result[0] is EventType.AGENT_RESULT and result[1]["text"] == "trio: structured\nnotes"
    assert follower.result == "trio: structured\nnotes" and follower.stopped() == []


@pytest.mark.parametrize(
    ("state", "kind", "says"),
    [
        (S.TASK_STATE_FAILED, "failed", "no sources"),
        (S.TASK_STATE_REJECTED, "rejected", "no sources"),
        (S.TASK_STATE_CANCELED, "cancelled", "no sources"),
        (S.TASK_STATE_AUTH_REQUIRED, "auth_required", "asks for authentication"),
    ],
)
def test_a_task_that_does_not_complete_is_the_childs_error(
    state: int, kind: str, says: str
) -> None:
    follower = TaskFollower()
    events = feed(follower, status(S.TASK_STATE_WORKING, "no sources"), status(state))
    assert events[-1][0] is EventType.AGENT_ERROR and events[-1][1]["errorType"] == kind
    assert follower.error is not None and says in follower.error[1]


def test_a_lone_message_is_the_answer_and_a_cut_stream_an_error() -> None:
    follower = TaskFollower()
    reply = pb.Message(message_id="m", role=pb.Role.ROLE_AGENT)
    reply.parts.append(pb.Part(text="42"))
    events = feed(follower, pb.StreamResponse(message=reply))
    assert events[-1][0] is EventType.AGENT_RESULT and follower.result == "42"
    cut = TaskFollower()
    feed(cut, status(S.TASK_STATE_WORKING, "half"))
    (turn, error) = cut.stopped()
    assert turn[2] and error[0] is EventType.AGENT_ERROR and error[1]["errorType"] == "a2a"


def source(path: str) -> Source:
    return Source(
        agent_key="agent:r:1",
        agent_id="r",
        agent_name="r",
        session_id="s",
        parent_session_id="p",
        depth=1,
        path=path,
    )


def ev(kind: EventType, src: Source | None = None, last: bool = False, **data: Any) -> Event:
    return Event("run-1", 1, 1.0, kind, src, last, data)


def test_a_run_is_a_task_whose_artifact_is_the_last_turns_text() -> None:
    view = TaskView("run-1", "ctx")
    assert view.task().status.state == S.TASK_STATE_SUBMITTED
    out = [
        *view.updates(ev(EventType.RUN_STARTED, agentId="p", input="q")),
        *view.updates(ev(EventType.REASONING, delta="I'll ask. ")),
        *view.updates(ev(EventType.REASONING, last=True, text="I'll ask. ", toolCalls=[{"x": 1}])),
        *view.updates(ev(EventType.AGENT_STARTED, source("root/r"), task="t")),
        *view.updates(ev(EventType.REASONING, source("root/r"), delta="child text")),
        *view.updates(ev(EventType.AGENT_RESULT, source("root/r"), last=True, text="c")),
        *view.updates(ev(EventType.REASONING, delta="The ")),
        *view.updates(ev(EventType.REASONING, delta="answer.")),
        *view.updates(
            ev(EventType.RUN_FINISHED, last=True, status="completed", result="The answer.")
        ),
    ]
    chunks = [u for u in out if isinstance(u, pb.TaskArtifactUpdateEvent)]
    assert [(c.artifact.parts[0].text, c.append) for c in chunks] == [
        ("I'll ask. ", False),
        ("The ", False),  # a new turn: replaces the one that called tools
        ("answer.", True),
    ]
    said = [u.status.message.parts[0].text for u in out if isinstance(u, pb.TaskStatusUpdateEvent)]
    assert said == ["started", "root/r: started", "root/r: done", "completed"]
    final = view.task()
    assert final.status.state == S.TASK_STATE_COMPLETED and view.ended
    assert final.artifacts[0].parts[0].text == "The answer."


def test_a_stall_is_a_working_status_update_that_says_where() -> None:
    view = TaskView("run-1", "ctx")
    marked: dict[str, Any] = {"stalled": True, "silentSeconds": 61.5, "lastSeq": 7, "tool": "x"}
    moved: dict[str, Any] = {"stalled": False, "silentSeconds": 70.0, "lastSeq": 9}
    out = [
        *view.updates(ev(EventType.AGENT_STALLED, source("root/r"), **marked)),
        *view.updates(
            ev(EventType.AGENT_STALLED, None, stalled=True, silentSeconds=61.5, lastSeq=3)
        ),
        *view.updates(ev(EventType.AGENT_STALLED, source("root/r"), **moved)),
    ]
    said = [u.status.message.parts[0].text for u in out if isinstance(u, pb.TaskStatusUpdateEvent)]
    assert all(isinstance(u, pb.TaskStatusUpdateEvent) for u in out)
    assert {u.status.state for u in out if isinstance(u, pb.TaskStatusUpdateEvent)} == {
        S.TASK_STATE_WORKING
    }
    assert said == [
        "root/r: stalled in x, no event for 61.5 s",
        "root: stalled, no event for 61.5 s",
        "root/r: moving again after 70 s",
    ]


def test_a_failed_or_cancelled_run_ends_its_task_so() -> None:
    for status_, state in (("failed", S.TASK_STATE_FAILED), ("cancelled", S.TASK_STATE_CANCELED)):
        view = TaskView("run-1", "ctx")
        (update,) = view.updates(
            ev(EventType.RUN_FINISHED, last=True, status=status_, error="boom")
        )
        assert isinstance(update, pb.TaskStatusUpdateEvent)
        assert update.status.state == state and update.status.message.parts[0].text == "boom"


def test_remote_is_either_another_orchestrator_or_an_a2a_agent() -> None:
    a2a = AgentSpec.model_validate({"description": "d", "remote": {"a2a": "http://x/a2a/p"}})
    assert a2a.remote is not None and a2a.remote.where == "A2A agent at http://x/a2a/p"
    ours = {"url": "ws://x/ws", "agent": "p"}
    assert AgentSpec.model_validate({"description": "d", "remote": ours}).remote is not None
    for bad, says in (
        ({"a2a": "http://x", **ours}, "not both"),
        ({"url": "ws://x/ws"}, "needs `url` and `agent`"),
    ):
        with pytest.raises(ValueError, match=says):
            AgentSpec.model_validate({"description": "d", "remote": bad})


def test_a_bad_remote_names_its_file(tmp_path: Path) -> None:
    path = tmp_path / "far.yaml"
    path.write_text("description: d\nremote: {a2a: 'http://x', url: 'ws://x/ws', agent: p}\n")
    with pytest.raises(SpecError, match=r"far\.yaml") as info:
        load_spec(path)
    assert "not both" in str(info.value)


def asked(call_id: str, name: str = "write_file") -> dict[str, Any]:
    return {"toolCallId": call_id, "name": name, "args": {"p": 1}, "timeoutAt": 9.0, "edit": True}


def answer_message(text: str, data: dict[str, Any] | None = None) -> pb.Message:
    message = pb.Message(message_id="m", task_id="run-1")
    message.parts.append(pb.Part(text=text))
    if data is not None:
        part = pb.Part()
        part.data.struct_value.update(data)
        message.parts.append(part)
    return message


def test_a_call_waiting_for_a_person_makes_the_task_input_required() -> None:
    view = TaskView("run-1", "ctx")
    view.updates(ev(EventType.RUN_STARTED, agentId="p", input="q"))
    (first,) = view.updates(ev(EventType.APPROVAL_REQUESTED, source("root/r"), **asked("c1")))
    view.updates(ev(EventType.APPROVAL_REQUESTED, None, **asked("c2", "http_get")))
    assert first.status.state == S.TASK_STATE_INPUT_REQUIRED
    assert "asks to run write_file" in first.status.message.parts[0].text
    assert first.status.message.parts[1].data.struct_value["toolCallId"] == "c1"
    assert list(view.waiting) == ["c1", "c2"]
    (still,) = view.updates(
        ev(EventType.APPROVAL_RESOLVED, source("root/r"), toolCallId="c1", decision="approve",
           by="ann", edited=False)
    )  # fmt: skip
    assert still.status.state == S.TASK_STATE_INPUT_REQUIRED  # c2 still waits
    assert "http_get" in still.status.message.parts[0].text
    (going,) = view.updates(
        ev(EventType.APPROVAL_RESOLVED, None, toolCallId="c2", decision="deny", by="ann",
           edited=False)
    )  # fmt: skip
    assert going.status.state == S.TASK_STATE_WORKING and not view.waiting


def test_an_input_required_tasks_answer_is_read_from_its_message() -> None:
    view = TaskView("run-1", "ctx")
    view.updates(ev(EventType.APPROVAL_REQUESTED, source("root/r"), **asked("c1")))
    view.updates(ev(EventType.APPROVAL_REQUESTED, None, **asked("c2")))
    said = answer_of(answer_message("Deny: too risky"), view.waiting, "ann")
    assert isinstance(said, Answer)
    assert (said.tool_call_id, said.decision, said.reason, said.by) == (
        "c1",
        "deny",
        "too risky",
        "ann",
    )
    assert said.agent_key == "agent:r:1"
    named = answer_of(
        answer_message("", {"decision": "approve", "toolCallId": "c2", "args": {"p": 2}}),
        view.waiting,
        "ann",
    )
    assert isinstance(named, Answer)
    assert (named.tool_call_id, named.decision, named.agent_key, named.args) == (
        "c2", "approve", None, {"p": 2.0}
    )  # fmt: skip
    assert "approve" in str(answer_of(answer_message("maybe"), view.waiting, "ann"))
    assert "no waiting call 'c9'" in str(
        answer_of(answer_message("yes", {"toolCallId": "c9"}), view.waiting, "ann")
    )
    assert "no call" in str(answer_of(answer_message("yes"), {}, "ann"))


def test_a_task_that_asks_for_input_waits_and_goes_on_after_the_answer() -> None:
    follower = TaskFollower()
    asking = status(S.TASK_STATE_INPUT_REQUIRED, "which one?")
    named = json_format.ParseDict({"data": {"toolCallId": "c1"}}, pb.Part())
    asking.status_update.status.message.parts.append(named)
    first = feed(follower, task(S.TASK_STATE_WORKING), artifact("half ", False), asking)
    assert not follower.ended and follower.asking == ("which one?", {"toolCallId": "c1"})
    assert [e[1] for e in first] == [{"delta": "half "}, {"delta": "which one?"}]
    again = task(S.TASK_STATE_INPUT_REQUIRED)  # the answer's stream starts with the task
    again.task.artifacts.append(artifact("half ", False).artifact_update.artifact)
    rest = feed(
        follower,
        again,
        status(S.TASK_STATE_WORKING),
        artifact("done", True),
        status(S.TASK_STATE_COMPLETED),
    )
    assert follower.asking is None and follower.result == "half done"
    assert [e[1].get("delta") for e in rest if not e[2]] == ["done"]  # nothing said twice
