"""Fork a three-level tree at an event, in process, against a fake OpenAI-compatible
server on loopback that counts the provider calls (docs/fork.md).

The planner spawns its researchers one after the other (alpha, then beta), so a seq
inside beta's first turn is one where alpha's whole subtree had ended."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import trio

from orchestrator.core.events import Event, EventType
from orchestrator.core.fork import ForkError
from orchestrator.runtime.engine import Orchestrator
from tests.fakes.provider_server import FakeOpenAI, Reply, serve_fake_openai
from tests.helpers import collect, write_config
from tests.memory_server import autojump

pytestmark = pytest.mark.trio


def brain(role: str, messages: list[dict[str, Any]], body: dict[str, Any]) -> Reply:
    results = [m["content"] for m in messages if m["role"] == "tool"]
    users = [m["content"] for m in messages if m["role"] == "user"]
    if role == "planner":
        if len(results) < 2:
            task = ("alpha", "beta")[len(results)]
            return Reply(
                f"Step {len(results) + 1}: asking the {task} researcher.",
                calls=[("agent_spawn", {"agent_id": "researcher", "task": task})],
            )
        return Reply("Final: " + " | ".join(results))
    if role == "researcher":
        if not results:
            return Reply(
                f"Researching {users[0]} with several words so that the stream takes a while.",
                calls=[("agent_spawn", {"agent_id": "critic", "task": f"review {users[0]}"})],
            )
        return Reply(f"{users[0]} reviewed: {results[0]}")
    if role == "critic":
        return Reply(f"critique of {' then '.join(users)}: looks fine overall")
    raise AssertionError(f"unexpected role {role}")


AGENTS: dict[str, dict[str, Any]] = {
    "planner": {
        "name": "PlannerAgent",
        "description": "Plans.",
        "instructions": "ROLE: planner\nPlan and delegate.",
        "tools": ["agent_spawn"],
    },
    "researcher": {
        "name": "ResearcherAgent",
        "description": "Researches.",
        "instructions": "ROLE: researcher\nResearch.",
        "tools": ["agent_spawn"],
    },
    "critic": {
        "name": "CriticAgent",
        "description": "Reviews drafts.",
        "instructions": "ROLE: critic\nReview the draft.",
    },
}


def asked(fake: FakeOpenAI, since: int) -> list[str]:
    """Who the provider was asked for since request `since`: role and first task."""
    out = []
    for request in fake.requests[since:]:
        system = request["messages"][0]["content"]
        role = system.split("\n")[0].removeprefix("ROLE: ")
        task = next(m["content"] for m in request["messages"] if m["role"] == "user")
        out.append(f"{role}:{task}")
    return out


def agent_of(events: list[Event], agent_id: str, task: str) -> str:
    for e in events:
        if (
            e.type is EventType.AGENT_STARTED
            and e.source is not None
            and e.source.agent_id == agent_id
            and e.data["task"] == task
        ):
            return e.source.agent_key
    raise AssertionError(f"no {agent_id} on {task!r}")


def mid_turn(events: list[Event], agent_key: str) -> int:
    """The seq of a text delta in the middle of the agent's first model turn."""
    deltas = [
        e.seq
        for e in events
        if e.type is EventType.REASONING
        and not e.last
        and e.source is not None
        and e.source.agent_key == agent_key
    ]
    assert len(deltas) > 3
    return deltas[len(deltas) // 3]


async def forked(orch: Orchestrator, events: list[Event], at_seq: int, **kw: Any) -> list[Event]:
    out: list[Event] = []
    async with orch.fork(events, at_seq, **kw) as run:
        async for event in run:
            out.append(event)
    return out


async def with_tree(tmp_path: Path, body: Any) -> None:
    async with trio.open_nursery() as nursery:
        fake = await serve_fake_openai(nursery, brain)
        config = write_config(
            tmp_path,
            AGENTS,
            models={
                "default": {
                    "provider": "openai",
                    "base_url": fake.base_url,
                    "model": "fake-model",
                    "read_timeout": 30,
                    "retry_base_delay": 0.01,
                }
            },
        )
        async with Orchestrator.open(config) as orch:
            events = await collect(orch, "planner", "the question")
            assert events[-1].data["status"] == "completed"
            assert len(fake.requests) == 9
            await body(orch, fake, events)
        nursery.cancel_scope.cancel()


@autojump
async def test_a_fork_inside_the_second_researchers_turn_runs_only_it_and_its_ancestors(
    tmp_path: Path,
) -> None:
    async def body(orch: Orchestrator, fake: FakeOpenAI, events: list[Event]) -> None:
        beta = agent_of(events, "researcher", "beta")
        at = mid_turn(events, beta)
        fork = await forked(orch, events, at)
        assert asked(fake, 9) == [
            "researcher:beta",
            "critic:review beta",
            "researcher:beta",
            "planner:the question",
        ]
        # The history up to the fork point is the original's, under the fork's runId.
        run_id = fork[0].run_id
        assert run_id != events[0].run_id and {e.run_id for e in fork} == {run_id}
        assert [e.seq for e in fork] == list(range(1, len(fork) + 1))
        assert [(e.type, e.data) for e in fork[1:at]] == [(e.type, e.data) for e in events[1:at]]
        assert fork[0].data["forkedFrom"] == {"runId": events[0].run_id, "seq": at}
        resumed = fork[at]
        assert resumed.type is EventType.RUN_RESUMED and resumed.data["reason"] == "fork"
        abandoned = [e for e in fork if e.type is EventType.TURN_ABANDONED]
        assert [e.source.agent_key for e in abandoned if e.source] == [beta]
        assert fork[-1].type is EventType.RUN_FINISHED
        assert fork[-1].data["result"] == events[-1].data["result"]
        # Every agent ends exactly once in the fork.
        ends = [
            e.source.agent_key
            for e in fork
            if e.type in (EventType.AGENT_RESULT, EventType.AGENT_ERROR) and e.source
        ]
        assert sorted(ends) == sorted(set(ends)) and len(ends) == 4

    await with_tree(tmp_path, body)


@autojump
async def test_replay_with_no_message_asks_the_provider_nothing(tmp_path: Path) -> None:
    async def body(orch: Orchestrator, fake: FakeOpenAI, events: list[Event]) -> None:
        beta = agent_of(events, "researcher", "beta")
        for at in (1, mid_turn(events, beta)):
            fork = await forked(orch, events, at, replay=True)
            assert len(fake.requests) == 9, at
            assert fork[-1].data["result"] == events[-1].data["result"]
            turns = [e for e in fork[at:] if e.type is EventType.REASONING and e.last]
            assert turns and all(e.data.get("replayed") for e in turns)
            # The replayed turns stream in the original's increments.
            deltas = [
                e.data["delta"]
                for e in fork[at:]
                if e.type is EventType.REASONING and "delta" in e.data and e.source is None
            ]
            original = [
                e.data["delta"]
                for e in events
                if e.type is EventType.REASONING and "delta" in e.data and e.source is None
            ]
            assert (at == 1 and deltas == original) or at > 1

    await with_tree(tmp_path, body)


@autojump
async def test_a_message_to_a_leaf_changes_only_it_and_its_ancestors_later_turns(
    tmp_path: Path,
) -> None:
    async def body(orch: Orchestrator, fake: FakeOpenAI, events: list[Event]) -> None:
        critic = agent_of(events, "critic", "review beta")
        at = mid_turn(events, critic)
        fork = await forked(orch, events, at, agent_key=critic, message="be harsher", replay=True)
        assert asked(fake, 9) == [
            "critic:review beta",
            "researcher:beta",
            "planner:the question",
        ]
        told = [e for e in fork[at:] if e.type is EventType.USER_MESSAGE]
        assert [(e.source.agent_key if e.source else None, e.data["text"]) for e in told] == [
            (critic, "be harsher")
        ]
        assert "review beta then be harsher" in fork[-1].data["result"]
        assert "critique of review alpha: looks fine" in fork[-1].data["result"]

    await with_tree(tmp_path, body)


@autojump
async def test_a_fork_at_an_unknown_seq_or_to_an_ended_agent_is_refused(tmp_path: Path) -> None:
    async def body(orch: Orchestrator, fake: FakeOpenAI, events: list[Event]) -> None:
        last = events[-1].seq
        for at in (0, last + 1):
            with pytest.raises(ForkError, match=rf"has no seq {at} \(its events are 1\.\.{last}\)"):
                await forked(orch, events, at)
        alpha = agent_of(events, "researcher", "alpha")
        beta = agent_of(events, "researcher", "beta")
        with pytest.raises(ForkError, match="had ended by seq"):
            await forked(orch, events, mid_turn(events, beta), agent_key=alpha, message="x")
        with pytest.raises(ForkError, match="had not started by seq 2"):
            await forked(orch, events, 2, agent_key=beta, message="x")
        # At the last seq: the tree had ended; the fork ends with the same answer.
        fork = await forked(orch, events, last)
        assert len(fake.requests) == 9
        assert fork[-1].data["status"] == "completed"
        assert fork[-1].data["result"] == events[-1].data["result"]

    await with_tree(tmp_path, body)
