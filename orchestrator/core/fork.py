"""Fork a run at one of its events: the new run's history, plan and recording.

Pure: the original run's events in, a `Fork` out (docs/fork.md). The fork's journal
begins with a copy of the original's events 1..S under the fork's runId — the same
tree, sessions and agentKeys — its RUN_STARTED carrying `forkedFrom` and a
RUN_FINISHED at S left out (the fork goes on). The run is then continued from
those events exactly as a resume continues a run (`core/rebuild.py`): agents that
had ended stand, a turn cut off at S is asked again, calls that waited for a
decision wait again, background children keep their taskIds. What differs from a
resume:

- a call still waiting for approval at S waits its whole timeout again, from the
  fork's start (the original's clock has run on);
- a message (`agent_key`, `message`) goes into that agent's inbox, delivered as a
  `send` would have been when it goes on; an agent that had not started, had ended
  or runs on a remote server by S is refused;
- a remote subtree that had not ended by S is not run again: its spawn call gets an
  error result (`remote_not_forked`), and the fork goes on;
- with `replay`, the original's recorded turns answer every turn asked the same
  (agents/core/replay.py), from all of its events, not only those up to S.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from agents.core.messages import Inbound, Message
from agents.core.payloads import ForkedFromData
from agents.core.replay import Recorder, Recording, conversation_digest
from agents.errors import OrchestratorError
from orchestrator.core.events import Event, EventType
from orchestrator.core.rebuild import AgentPlan, ResumePlan, rebuild

__all__ = ["Fork", "ForkError", "fork_run", "recorded"]


class ForkError(OrchestratorError, ValueError):
    """The fork cannot be made as asked (one line naming what and why)."""

    code = "bad_request"


@dataclass
class Fork:
    """What a fork starts from."""

    events: list[Event]
    """The fork's first events (the original's up to S, renamed to the fork)."""
    plan: ResumePlan
    """Its agents as of S, with the fork's changes (remote subtrees in `end_now`,
    inboxes, approval timers)."""
    recording: Recording | None
    """With `replay`: the original's recorded turns."""
    forked_from: ForkedFromData


def fork_run(
    events: Sequence[Event],
    at_seq: int,
    run_id: str,
    *,
    agent_key: str | None = None,
    message: str | None = None,
    replay: bool = False,
    now: float,
    history: Sequence[Message] = (),
    continued: Mapping[str, Sequence[Message]] | None = None,
    thread_id: str | None = None,
    blobs: Mapping[str, bytes] | None = None,
) -> Fork:
    """The fork of the run whose kept events are `events` (in seq order) at `at_seq`.

    `history`: the conversation the original's root started from (a thread's run);
    `continued`: those of its children that continue earlier agents (`rebuild`);
    `thread_id`: the fork's thread, which its RUN_STARTED says (docs/threads.md);
    `blobs`: the bytes of the attachments the events name.

    Raises:
        ForkError: `at_seq` is not one of the run's seqs, the events before it were
            trimmed, or the message's agent cannot take it at S.
    """
    if not events:
        raise ForkError("the run has no events to fork from")
    original = events[0].run_id
    last = events[-1].seq
    if events[0].seq != 1:
        raise ForkError(
            f"run {original!r} keeps events {events[0].seq}..{last} only (retention): "
            "a fork needs its history from seq 1"
        )
    if not 1 <= at_seq <= last:
        raise ForkError(f"run {original!r} has no seq {at_seq} (its events are 1..{last})")
    forked_from: ForkedFromData = {"runId": original, "seq": at_seq}
    copied = [_renamed(event, run_id, forked_from, thread_id) for event in events[:at_seq]]
    if copied[-1].type is EventType.RUN_FINISHED:
        copied.pop()  # the fork goes on: it ends with an end of its own
    plan = rebuild(copied, history=history, continued=continued, blobs=blobs)
    plan.end_now = _end_remote(plan, at_seq)
    _restart_approvals(plan, now)
    if message is not None:
        _deliver(plan, agent_key, message, at_seq)
    recording = recorded(events, history, continued) if replay else None
    return Fork(copied, plan, recording, forked_from)


def recorded(
    events: Sequence[Event],
    history: Sequence[Message] = (),
    continued: Mapping[str, Sequence[Message]] | None = None,
) -> Recording:
    """The recorded model turns of a run's events (agents/core/replay.py): the
    conversation before each turn rebuilt as a resume rebuilds it (after `history`, a
    thread's run's), the turn's parts as they streamed."""
    recorder = Recorder()

    def turn(agent: AgentPlan) -> None:
        recorder.turn_started(agent.key, conversation_digest(agent.messages))

    def seen(event: Event) -> None:
        source = event.source
        recorder.feed(source.agent_key if source else None, event.type, event.last, event.data)

    rebuild(events, history=history, continued=continued, on_turn=turn, after=seen)
    return recorder.recording


def _renamed(
    event: Event, run_id: str, forked_from: ForkedFromData, thread_id: str | None
) -> Event:
    data = event.data
    if event.type is EventType.RUN_STARTED:
        thread = {"threadId": thread_id} if thread_id is not None else {}
        data = {**data, "forkedFrom": dict(forked_from), **thread}
    return Event(run_id, event.seq, event.ts, event.type, event.source, event.last, data)


def _restart_approvals(plan: ResumePlan, now: float) -> None:
    """Calls waiting for a decision at S wait their whole timeout again, from now."""
    for agent in plan.agents.values():
        for call_id, prior in list(agent.approvals.items()):
            if isinstance(prior, tuple):
                requested_at, timeout_at = prior
                agent.approvals[call_id] = (now, now + max(0.0, timeout_at - requested_at))


def _end_remote(plan: ResumePlan, at_seq: int) -> list[AgentPlan]:
    """Remote children still running at S end in the fork (their run there is the
    original's: following it would mix the two)."""
    ended = []
    for agent in plan.remote_children().values():
        if agent.ended:
            continue
        agent.ended = True
        agent.pending.clear()  # nobody waits for its subtree here: those are orphans
        agent.background.clear()
        agent.error_type = "remote_not_forked"
        agent.error = (
            f"agent {agent.agent_id!r} ran on a remote server at seq {at_seq}: "
            "a fork does not run a remote subtree again"
        )
        ended.append(agent)
    return ended


def _deliver(plan: ResumePlan, agent_key: str | None, message: str, at_seq: int) -> None:
    who = "the root agent" if agent_key is None else f"agent {agent_key!r}"
    agent = plan.agents.get(agent_key)
    if agent is None or (agent_key is None and not agent.agent_id):
        raise ForkError(f"{who} had not started by seq {at_seq}")
    if agent_key is not None and agent_key in plan.remote:
        raise ForkError(f"{who} runs on a remote server: a fork cannot send it a message")
    if agent.ended:
        raise ForkError(
            f"{who} had ended by seq {at_seq}: fork at a seq before its end to tell it more"
        )
    agent.inbox.append(Inbound(message))
