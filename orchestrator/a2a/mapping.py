"""A2A tasks as a child's events, and a run's events as an A2A task (pure).

`TaskFollower` turns the stream of an A2A agent's task (the `a2a-sdk` protobuf
`StreamResponse`s: the task, its status updates, its artifact chunks, or a lone
message) into the events of the child it runs as here: its status messages and
artifact text stream as REASONING deltas, and its end is one REASONING `last`
(the text), then AGENT_RESULT (completed: the artifacts' text, else the last
message's) or AGENT_ERROR (failed, rejected, canceled, or a state this tree cannot
answer: input or auth required).

`TaskView` is the other way: the events of a run here (one of our subagents served
as an A2A agent) as the task's updates — the root's text as one streamed artifact
(a turn that ends in tool calls is replaced by the next: the last turn's text is the
answer),
each agent of the tree starting and ending as a `working` status message, the run's
end as the task's final state.
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass, field
from typing import Any, Literal, cast

from a2a.types import a2a_pb2 as pb
from google.protobuf import json_format

from agents.core.attachments import AttachmentIn
from agents.core.payloads import (
    AgentErrorData,
    AgentStalledData,
    ApprovalRequestedData,
    ApprovalResolvedData,
    ReasoningData,
    RunFinishedData,
    TurnEndData,
    agent_error,
)
from orchestrator.core.approvals import Answer
from orchestrator.core.events import Event, EventType

__all__ = [
    "HANDLES",
    "IGNORES",
    "ChildEvent",
    "TaskFollower",
    "TaskUpdate",
    "TaskView",
    "Waiting",
    "answer_of",
    "text_of",
]

HANDLES = frozenset(
    {
        EventType.RUN_STARTED,
        EventType.AGENT_STARTED,
        EventType.REASONING,
        EventType.AGENT_RESULT,
        EventType.AGENT_ERROR,
        EventType.AGENT_STALLED,
        EventType.APPROVAL_REQUESTED,
        EventType.APPROVAL_RESOLVED,
        EventType.RUN_FINISHED,
    }
)
"""Event types `TaskView` turns into A2A task updates."""
IGNORES = frozenset(
    {
        EventType.TOOL_CALL_DELTA,
        EventType.TOOL_CALL,
        EventType.TOOL_RESULT,
        EventType.USER_MESSAGE,
        EventType.TOOL_PROGRESS,
        EventType.RUN_RESUMED,
        EventType.TURN_ABANDONED,
        EventType.COMPACTION_STARTED,
        EventType.COMPACTION_FINISHED,
        EventType.MODEL_FALLBACK,
    }
)
"""Event types an A2A task does not show (it has a status, a message and the answer);
tests/unit/test_payloads.py checks that every type is in one of the two."""

ChildEvent = tuple[EventType, dict[str, Any], bool]
"""(type, data, last) of one event of the child."""

S = pb.TaskState
_ENDED_BADLY = {
    S.TASK_STATE_FAILED: "failed",
    S.TASK_STATE_REJECTED: "rejected",
    S.TASK_STATE_CANCELED: "cancelled",
    S.TASK_STATE_AUTH_REQUIRED: "auth_required",
}
_WHY = {
    "auth_required": "the A2A agent asks for authentication, which a spawned child cannot give",
}


def data_of(parts: Any) -> dict[str, Any] | None:
    """The first data part of a message that holds an object (None: none does)."""
    for part in parts:
        fields = json_format.MessageToDict(part)  # (a data part: {"data": {…}})
        if isinstance(fields.get("data"), dict):
            found: dict[str, Any] = fields["data"]
            return found
    return None


def text_of(parts: Any) -> str:
    """The text parts of a message or artifact, joined (other parts are skipped)."""
    return "".join(part.text for part in parts if part.WhichOneof("content") == "text")


def files_of(parts: Any) -> list[AttachmentIn]:
    """A message's FileParts (bytes or a URL) as attachments of the run it starts."""
    out = []
    for i, part in enumerate(parts, 1):
        kind = part.WhichOneof("content")
        name = part.filename or f"file-{i}"
        if kind == "raw":
            data = base64.b64encode(part.raw).decode("ascii")
            out.append(AttachmentIn(name=name, media_type=part.media_type, data=data))
        elif kind == "url":
            out.append(AttachmentIn(name=name, media_type=part.media_type, url=part.url))
    return out


def artifact_text(parts: Any) -> str:
    """An artifact's answer as text: its text parts, and its data parts (a structured
    answer) as compact JSON, joined."""
    out = []
    for part in parts:
        kind = part.WhichOneof("content")
        if kind == "text":
            out.append(part.text)
        elif kind == "data":
            value = json_format.MessageToDict(part.data)
            out.append(json.dumps(value, separators=(",", ":"), ensure_ascii=False))
    return "".join(out)


@dataclass
class TaskFollower:
    """The child's events for each response of its A2A task, until `ended`."""

    task_id: str = ""
    context_id: str = ""
    ended: bool = False
    result: str | None = None
    """Its answer, once it completed."""
    error: tuple[str, str] | None = None
    """(errorType, message), once it ended otherwise."""
    asking: tuple[str, dict[str, Any] | None] | None = None
    """While the task is `input-required`: its question, and the data part it came
    with (a person here answers it: `runtime/a2a_child.py`)."""
    _spoken: list[str] = field(default_factory=list)
    _artifacts: dict[str, list[str]] = field(default_factory=dict)
    _last_message: str = ""

    def feed(self, response: pb.StreamResponse) -> list[ChildEvent]:
        """The events `response` makes (none once the task has ended)."""
        if self.ended:
            return []
        kind = response.WhichOneof("payload")
        out: list[ChildEvent] = []
        if kind == "task":
            task = response.task
            if self.task_id:  # the task again, after an answer: as it stood, known here
                for artifact in task.artifacts:
                    self._artifacts[artifact.artifact_id] = [artifact_text(artifact.parts)]
                return out
            self.task_id, self.context_id = task.id, task.context_id
            for artifact in task.artifacts:
                self._artifact(artifact, False, out)
            self._status(task.status, out)
        elif kind == "status_update":
            self._status(response.status_update.status, out)
        elif kind == "artifact_update":
            update = response.artifact_update
            self._artifact(update.artifact, update.append, out)
        elif kind == "message":  # an answer without a task: it is the whole result
            self._say(text_of(response.message.parts), out)
            self._end(None, out)
        return out

    def stopped(self) -> list[ChildEvent]:
        """The stream ended without a final state."""
        if self.ended:
            return []
        out: list[ChildEvent] = []
        self._end(("a2a", "the A2A agent's stream ended before its task did"), out)
        return out

    def _status(self, status: pb.TaskStatus, out: list[ChildEvent]) -> None:
        text = ""
        if status.HasField("message"):
            text = text_of(status.message.parts)
            if text:
                self._last_message = text
                self._say(text, out)
        state = status.state
        self.asking = None
        if state == S.TASK_STATE_INPUT_REQUIRED:
            asked = data_of(status.message.parts)
            self.asking = (text or "the A2A agent asks for more input", asked)
        elif state == S.TASK_STATE_COMPLETED:
            self._end(None, out)
        elif state in _ENDED_BADLY:
            kind = _ENDED_BADLY[state]
            message = _WHY.get(kind) or self._last_message or f"the A2A task was {kind}"
            self._end((kind, message), out)

    def _artifact(self, artifact: pb.Artifact, append: bool, out: list[ChildEvent]) -> None:
        text = artifact_text(artifact.parts)
        chunks = self._artifacts.setdefault(artifact.artifact_id, [])
        if not append:
            chunks.clear()
        chunks.append(text)
        self._say(text, out)

    def _say(self, text: str, out: list[ChildEvent]) -> None:
        if text:
            self._spoken.append(text)
            out.append((EventType.REASONING, {"delta": text}, False))

    def _end(self, error: tuple[str, str] | None, out: list[ChildEvent]) -> None:
        self.ended = True
        spoken = "".join(self._spoken)
        turn = {
            "text": spoken,
            "toolCalls": [],
            "finishReason": "stop" if error is None else error[0],
        }
        out.append((EventType.REASONING, turn, True))
        if error is None:
            answer = "\n".join("".join(c) for c in self._artifacts.values() if "".join(c))
            self.result = answer or self._last_message or spoken
            none = {"inputTokens": 0, "outputTokens": 0}  # (A2A reports no usage)
            result = {"text": self.result, "usage": none, "subtreeUsage": dict(none)}
            out.append((EventType.AGENT_RESULT, result, True))
        else:
            self.error = error
            out.append((EventType.AGENT_ERROR, dict(agent_error(*error)), True))


TaskUpdate = pb.TaskStatusUpdateEvent | pb.TaskArtifactUpdateEvent

ARGS_SHOWN = 500
"""Characters of a waiting call's arguments its question quotes (its data part has
them whole)."""


@dataclass(frozen=True, slots=True)
class Waiting:
    """A call that waits for a person: the question an `input-required` task asks."""

    tool_call_id: str
    agent_key: str | None
    asked: ApprovalRequestedData

    @property
    def name(self) -> str:
        return self.asked["name"]

    def question(self) -> str:
        """What the task's status message asks."""
        args = json.dumps(self.asked["args"], ensure_ascii=False)
        if len(args) > ARGS_SHOWN:
            args = args[:ARGS_SHOWN] + "…"
        who = f"agent {self.agent_key}" if self.agent_key else "the root agent"
        return (
            f'{who} asks to run {self.name} with {args}: reply "approve" or "deny" '
            "(a reason may follow a colon)"
        )

    def data(self) -> dict[str, Any]:
        """The status message's data part: the call, as a client answers it."""
        return {
            "toolCallId": self.tool_call_id,
            "agentKey": self.agent_key,
            "name": self.name,
            "args": self.asked["args"],
            "timeoutAt": self.asked["timeoutAt"],
            "edit": self.asked["edit"],
        }


_YES = frozenset({"approve", "approved", "yes", "y", "ok", "allow"})
_NO = frozenset({"deny", "denied", "reject", "rejected", "no", "n"})


def answer_of(message: pb.Message, waiting: dict[str, Waiting], by: str) -> Answer | str:
    """The answer a message to an `input-required` task gives one of its waiting calls,
    or why it gives none. A data part `{decision: approve|deny, toolCallId?, reason?,
    args?}` says it exactly; else the text does: `approve` or `deny` (or yes/no), a
    reason after a colon, for the oldest waiting call."""
    if not waiting:
        return "no call of this task waits for an answer"
    data = data_of(message.parts) or {}
    text = text_of(message.parts).strip()
    word, _, reason = text.partition(":")
    said_decision = str(data.get("decision") or word.strip().lower())
    decision: Literal["approve", "deny"]
    if said_decision in _YES:
        decision = "approve"
    elif said_decision in _NO:
        decision = "deny"
    else:
        return (
            'answer "approve" or "deny" (a reason may follow a colon), or a data part '
            "{decision, toolCallId?, reason?, args?}"
        )
    call_id = data.get("toolCallId") or next(iter(waiting))
    call = waiting.get(str(call_id))
    if call is None:
        return f"no waiting call {call_id!r} (waiting: {', '.join(waiting)})"
    said = data.get("reason") or reason.strip() or None
    args = data.get("args") if decision == "approve" else None
    return Answer(
        tool_call_id=call.tool_call_id,
        decision=decision,
        agent_key=call.agent_key,
        by=by,
        reason=str(said) if said is not None else None,
        args=args if isinstance(args, dict) else None,
    )


@dataclass
class TaskView:
    """A run's events as its A2A task (`task`) and the task's updates (`updates`)."""

    task_id: str
    context_id: str
    artifact_id: str = "answer"
    state: int = S.TASK_STATE_SUBMITTED
    answer: list[str] = field(default_factory=list)
    message: str = ""
    data: dict[str, Any] | None = None
    """The data part of the status message (a waiting call's, while input is required)."""
    structured: Any = None
    """The root's validated answer (an output schema's): the answer artifact is then one
    DataPart holding it (`has_structured`)."""
    has_structured: bool = False
    seq: int = 0
    """The seq of the last event taken in: each update carries its event's seq
    (`metadata.seq`), the task the seq it stands at — the cursor of SubscribeToTask."""
    waiting: dict[str, Waiting] = field(default_factory=dict)
    """The calls that wait for a person's answer, oldest first, by toolCallId: while
    there is one the task is `input-required` (its answer: `answer_of`)."""
    _messages: int = 0
    _replace: bool = False

    def updates(self, event: Event) -> list[TaskUpdate]:
        """What `event` changes of the task (most events change nothing)."""
        self.seq = event.seq
        out = self._updates(event)
        for update in out:
            update.metadata.update({"seq": event.seq})
        return out

    def _updates(self, event: Event) -> list[TaskUpdate]:
        kind, data, source = event.type, event.data, event.source
        if kind is EventType.RUN_STARTED:
            return [self._status(S.TASK_STATE_WORKING, "started")]
        if source is None and kind is EventType.REASONING:
            if event.last:  # a turn that called tools was not the answer: the next replaces it
                self._replace = bool(cast(TurnEndData, data).get("toolCalls"))
                return []
            delta = cast(ReasoningData, data)
            if "delta" not in delta:
                return []
            text = str(delta["delta"])
            if self._replace:
                self.answer.clear()
                self._replace = False
            append = bool(self.answer)
            self.answer.append(text)
            return [self._chunk(text, append)]
        if source is not None and kind is EventType.AGENT_STARTED:
            return [self._status(S.TASK_STATE_WORKING, f"{source.path}: started")]
        if source is not None and kind in (EventType.AGENT_RESULT, EventType.AGENT_ERROR):
            failed = cast(AgentErrorData, data)
            how = "done" if kind is EventType.AGENT_RESULT else f"failed: {failed.get('message')}"
            return [self._status(S.TASK_STATE_WORKING, f"{source.path}: {how}")]
        if kind is EventType.AGENT_STALLED:
            stall = cast(AgentStalledData, data)
            where = source.path if source is not None else "root"
            if not stall["stalled"]:
                said = f"{where}: moving again after {stall['silentSeconds']:g} s"
            else:
                tool = f" in {stall['tool']}" if "tool" in stall else ""
                said = f"{where}: stalled{tool}, no event for {stall['silentSeconds']:g} s"
            return [self._status(S.TASK_STATE_WORKING, said)]
        if kind is EventType.APPROVAL_REQUESTED:
            asked = cast(ApprovalRequestedData, data)
            call = Waiting(asked["toolCallId"], source.agent_key if source else None, asked)
            self.waiting[call.tool_call_id] = call
            return [self._status(S.TASK_STATE_INPUT_REQUIRED, call.question(), call.data())]
        if kind is EventType.APPROVAL_RESOLVED:
            resolved = cast(ApprovalResolvedData, data)
            call_id = resolved["toolCallId"]
            gone = self.waiting.pop(call_id, None)
            if gone is None:
                return []
            said = f"{gone.name} ({call_id}): {resolved['decision']} by {resolved['by']}"
            if self.waiting:  # the next one still waits
                first = next(iter(self.waiting.values()))
                return [self._status(S.TASK_STATE_INPUT_REQUIRED, first.question(), first.data())]
            return [self._status(S.TASK_STATE_WORKING, said)]
        if kind is EventType.RUN_FINISHED:
            self.waiting.clear()
            return self._final(cast(RunFinishedData, data))
        return []

    @property
    def ended(self) -> bool:
        return self.state in _ENDED_BADLY or self.state == S.TASK_STATE_COMPLETED

    def task(self) -> pb.Task:
        """The task as it stands (`GetTask`, and the first response of a stream)."""
        task = pb.Task(id=self.task_id, context_id=self.context_id)
        task.metadata.update({"seq": self.seq})
        task.status.state = self.state  # type: ignore[assignment]
        if self.message:
            task.status.message.CopyFrom(self._message(self.message, self.data))
        if self.answer:
            task.artifacts.append(self._artifact("".join(self.answer)))
        return task

    def _final(self, data: RunFinishedData) -> list[TaskUpdate]:
        status = str(data.get("status", "failed"))
        if status == "completed":
            out: list[TaskUpdate] = []
            result = str(data.get("result") or "")
            if "structured" in data:  # the answer is a value: one DataPart replaces the text
                self.structured, self.has_structured = data["structured"], True
                self.answer[:] = [result]
                update = pb.TaskArtifactUpdateEvent(
                    task_id=self.task_id, context_id=self.context_id, artifact=self._artifact("")
                )
                out.append(update)
            elif not self.answer and result:  # (a run that streamed no text of its root)
                self.answer.append(result)
                out.append(self._chunk(result, False))
            return [*out, self._status(S.TASK_STATE_COMPLETED, "completed")]
        state = S.TASK_STATE_CANCELED if status == "cancelled" else S.TASK_STATE_FAILED
        return [self._status(state, str(data.get("error") or f"the run ended {status}"))]

    def _chunk(self, text: str, append: bool) -> pb.TaskArtifactUpdateEvent:
        return pb.TaskArtifactUpdateEvent(
            task_id=self.task_id,
            context_id=self.context_id,
            artifact=self._artifact(text),
            append=append,
        )

    def _status(
        self, state: int, text: str, data: dict[str, Any] | None = None
    ) -> pb.TaskStatusUpdateEvent:
        self.state, self.message, self.data = state, text, data
        update = pb.TaskStatusUpdateEvent(task_id=self.task_id, context_id=self.context_id)
        update.status.state = state  # type: ignore[assignment]
        update.status.message.CopyFrom(self._message(text, data))
        return update

    def _message(self, text: str, data: dict[str, Any] | None = None) -> pb.Message:
        self._messages += 1
        message = pb.Message(
            message_id=f"{self.task_id}-{self._messages}",
            context_id=self.context_id,
            task_id=self.task_id,
            role=pb.Role.ROLE_AGENT,
        )
        message.parts.append(pb.Part(text=text))
        if data is not None:
            message.parts.append(json_format.ParseDict({"data": data}, pb.Part()))
        return message

    def _artifact(self, text: str) -> pb.Artifact:
        artifact = pb.Artifact(artifact_id=self.artifact_id, name="answer")
        if self.has_structured:
            part = json_format.ParseDict({"data": self.structured}, pb.Part())
            part.media_type = "application/json"
            artifact.parts.append(part)
        else:
            artifact.parts.append(pb.Part(text=text))
        return artifact
