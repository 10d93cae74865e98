"""A three-level tree (planner → 2 researchers → critic each) against a fake
OpenAI-compatible server that speaks real HTTP and SSE on loopback."""

from __future__ import annotations

import itertools
import re
from pathlib import Path
from typing import Any

import pytest
import trio

from orchestrator.config import ServerConfig
from orchestrator.core.events import Event, EventType
from orchestrator.runtime.engine import Orchestrator
from tests.fakes.provider_server import Brain, FakeOpenAI, Reply, serve_fake_openai
from tests.helpers import collect, of_type, write_config


def tree_brain(role: str, messages: list[dict[str, Any]], body: dict[str, Any]) -> Reply:
    results = [m["content"] for m in messages if m["role"] == "tool"]
    task = [m for m in messages if m["role"] == "user"][-1]["content"]
    if role == "planner":
        if not results:
            return Reply(
                "Planning the work: two researchers in parallel.",
                calls=[
                    ("agent_spawn", {"agent_id": "researcher", "task": "alpha"}),
                    ("agent_spawn", {"agent_id": "researcher", "task": "beta"}),
                ],
            )
        return Reply("Final: " + " | ".join(results))
    if role == "researcher":
        if not results:
            return Reply(
                f"Researching {task} with several words so that the stream takes a while.",
                calls=[("agent_spawn", {"agent_id": "critic", "task": f"review {task}"})],
            )
        return Reply(f"{task} reviewed: {results[0]}")
    if role == "critic":
        return Reply(f"critique of {task}: looks fine overall")
    raise AssertionError(f"unexpected role {role}")


def agents(
    critic_timeout: float | None = None, critic_model: str | None = None
) -> dict[str, dict[str, Any]]:
    critic: dict[str, Any] = {
        "name": "CriticAgent",
        "description": "Reviews drafts.",
        "instructions": "ROLE: critic\nReview the draft.",
    }
    if critic_timeout is not None:
        critic["timeout_seconds"] = critic_timeout
    if critic_model is not None:
        critic["model"] = critic_model
    return {
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
        "critic": critic,
    }


def config_for(tmp_path: Path, fake: FakeOpenAI, **kw: Any) -> ServerConfig:
    critic_timeout = kw.pop("critic_timeout", None)
    return write_config(
        tmp_path,
        agents(critic_timeout),
        models={
            "default": {
                "provider": "openai",
                "base_url": fake.base_url,
                "model": "fake-model",
                "read_timeout": 30,
                "retry_base_delay": 0.01,
            }
        },
        **kw,
    )


async def run_tree(
    tmp_path: Path, brain: Brain = tree_brain, **kw: Any
) -> tuple[list[Event], FakeOpenAI]:
    max_depth = kw.pop("max_depth", None)
    async with trio.open_nursery() as nursery:
        fake = await serve_fake_openai(nursery, brain)
        async with Orchestrator.open(config_for(tmp_path, fake, **kw)) as orch:
            events = await collect(orch, "planner", "the question", max_depth=max_depth)
        nursery.cancel_scope.cancel()
    return events, fake


def descends_from(session: str, ancestor: str, parents: dict[str, str]) -> bool:
    while session in parents:
        if session == ancestor:
            return True
        session = parents[session]
    return session == ancestor


async def test_tree_tags_paths_and_seq(tmp_path: Path) -> None:
    events, fake = await run_tree(tmp_path)
    assert [e.seq for e in events] == list(range(1, len(events) + 1))
    assert events[0].type == EventType.RUN_STARTED and events[-1].type == EventType.RUN_FINISHED
    assert events[-1].data["status"] == "completed"
    assert len({e.run_id for e in events}) == 1

    started = of_type(events, EventType.AGENT_STARTED)
    assert sorted(e.source.agent_id for e in started if e.source) == [
        "critic",
        "critic",
        "researcher",
        "researcher",
    ]
    researchers = [e.source for e in started if e.source and e.source.depth == 1]
    critics = [e.source for e in started if e.source and e.source.depth == 2]
    assert len(researchers) == 2 and len(critics) == 2
    root_session = researchers[0].parent_session_id
    assert re.fullmatch(r"sess-[0-9a-f]+", root_session)
    root_calls = {
        e.data["toolCallId"] for e in of_type(events, EventType.TOOL_CALL) if e.source is None
    }
    for src in researchers:
        assert src.path == f"{root_session}/researcher"
        assert src.parent_session_id == root_session
        assert src.agent_name == "ResearcherAgent"
        assert re.fullmatch(r"agent:researcher:[0-9a-f-]{36}", src.agent_key)
        assert re.fullmatch(r"sub-[0-9a-f]+", src.session_id)
        assert src.task_id is None
        assert src.parent_tool_call_id in root_calls
    sessions = {s.session_id: s for s in researchers}
    for src in critics:
        parent = sessions[src.parent_session_id]
        assert src.path == f"{root_session}/researcher/critic"
        assert src.depth == 2
        parent_calls = {
            e.data["toolCallId"]
            for e in of_type(events, EventType.TOOL_CALL)
            if e.source and e.source.session_id == parent.session_id
        }
        assert src.parent_tool_call_id in parent_calls
    # Every event of an instance carries the same, complete source.
    by_key: dict[str, set[Any]] = {}
    for e in events:
        if e.source is not None:
            by_key.setdefault(e.source.agent_key, set()).add(e.source)
    assert all(len(v) == 1 for v in by_key.values())
    assert "alpha reviewed: critique of review alpha" in events[-1].data["result"]
    assert len(fake.requests) == 8
    assert all(
        r["stream"] is True and r["stream_options"] == {"include_usage": True}
        for r in fake.requests
    )


async def test_child_events_precede_parent_tool_result(tmp_path: Path) -> None:
    events, _ = await run_tree(tmp_path)
    parents = {
        e.source.session_id: e.source.parent_session_id for e in events if e.source is not None
    }
    for start in of_type(events, EventType.AGENT_STARTED):
        child = start.source
        assert child is not None
        spawner = child.parent_session_id
        result = next(
            e
            for e in of_type(events, EventType.TOOL_RESULT)
            if e.data["toolCallId"] == child.parent_tool_call_id
            and (e.source.session_id if e.source else parents.get(child.session_id)) == spawner
        )
        subtree = [
            e
            for e in events
            if e.source and descends_from(e.source.session_id, child.session_id, parents)
        ]
        assert subtree[0].type == EventType.AGENT_STARTED
        assert subtree[-1].type in (EventType.AGENT_RESULT, EventType.AGENT_ERROR)
        assert max(e.seq for e in subtree) < result.seq
        assert result.data["isError"] is False


async def test_parallel_children_interleave_live(tmp_path: Path) -> None:
    events, _ = await run_tree(tmp_path)
    depth1 = [e for e in events if e.source is not None and e.source.depth == 1]
    keys = [e.source.agent_key for e in depth1 if e.source]
    first, second = dict.fromkeys(keys)  # in order of first appearance
    # The second researcher starts streaming before the first one has finished.
    first_end = max(i for i, k in enumerate(keys) if k == first)
    second_start = keys.index(second)
    assert second_start < first_end
    switches = sum(1 for a, b in itertools.pairwise(keys) if a != b)
    assert switches >= 4, "deltas of the two researchers should interleave, not come in blocks"


async def test_reasoning_deltas_join_to_final_text(tmp_path: Path) -> None:
    events, _ = await run_tree(tmp_path)
    turns: dict[str | None, list[str]] = {}
    for e in of_type(events, EventType.REASONING):
        key = e.source.agent_key if e.source else None
        if e.last:
            assert "".join(turns.pop(key, [])) == e.data["text"]
            assert isinstance(e.data["toolCalls"], list)
        else:
            turns.setdefault(key, []).append(e.data["delta"])
    assert not any(turns.values())
    finals = [e for e in of_type(events, EventType.REASONING) if e.last]
    assert len(finals) == 8  # one per model turn


async def test_usage_and_subtree_usage(tmp_path: Path) -> None:
    events, _ = await run_tree(tmp_path)
    results = {
        (e.source.agent_id if e.source else "planner", e.source.agent_key if e.source else ""): e
        for e in of_type(events, EventType.AGENT_RESULT)
    }
    for (agent_id, _key), e in results.items():
        turns = 1 if agent_id == "critic" else 2
        assert e.data["usage"] == {"inputTokens": 10 * turns, "outputTokens": 5 * turns}
        subtree = {"critic": 1, "researcher": 3, "planner": 8}[agent_id]
        assert e.data["subtreeUsage"] == {"inputTokens": 10 * subtree, "outputTokens": 5 * subtree}
    assert events[-1].data["usage"] == {"inputTokens": 80, "outputTokens": 40}


async def test_tool_results_go_back_in_call_order(tmp_path: Path) -> None:
    def brain(role: str, messages: list[dict[str, Any]], body: dict[str, Any]) -> Reply:
        if role == "researcher":
            task = [m for m in messages if m["role"] == "user"][-1]["content"]
            # alpha has a long answer (slow), beta a short one: beta finishes first.
            words = " ".join(["slow"] * 60) if task == "alpha" else "quick"
            return Reply(f"{task}: {words}")
        return tree_brain(role, messages, body)

    events, fake = await run_tree(tmp_path, brain)
    root_results = [e for e in of_type(events, EventType.TOOL_RESULT) if e.source is None]
    assert [r.data["content"].split(":")[0] for r in root_results] == ["beta", "alpha"]
    second = [r for r in fake.requests if r["messages"][0]["content"].startswith("ROLE: planner")][
        1
    ]
    assistant = next(m for m in second["messages"] if m["role"] == "assistant")
    order = [c["id"] for c in assistant["tool_calls"]]
    tools = [m for m in second["messages"] if m["role"] == "tool"]
    assert [m["tool_call_id"] for m in tools] == order
    assert tools[0]["content"].startswith("alpha")


async def test_tool_starts_while_model_still_streams(tmp_path: Path) -> None:
    events, _ = await run_tree(tmp_path)
    root = [e for e in events if e.source is None]
    calls = [e for e in root if e.type == EventType.TOOL_CALL_DELTA]
    second_call_id = calls[-1].data["toolCallId"]
    first_child = of_type(events, EventType.AGENT_STARTED)[0]
    last_arg_of_second = max(e.seq for e in calls if e.data["toolCallId"] == second_call_id)
    assert first_child.seq < last_arg_of_second


async def test_failing_child_becomes_error_result(tmp_path: Path) -> None:
    def brain(role: str, messages: list[dict[str, Any]], body: dict[str, Any]) -> Reply:
        if role == "critic":
            return Reply(status=500, error_body='{"error": {"message": "boom"}}')
        return tree_brain(role, messages, body)

    events, _ = await run_tree(tmp_path, brain)
    errors = of_type(events, EventType.AGENT_ERROR)
    assert len(errors) == 2
    assert all(e.source and e.source.agent_id == "critic" for e in errors)
    assert all(
        e.data["errorType"] == "provider_error" and "500" in e.data["message"] for e in errors
    )
    researcher_results = [
        e for e in of_type(events, EventType.TOOL_RESULT) if e.source and e.source.depth == 1
    ]
    assert len(researcher_results) == 2
    for e in researcher_results:
        assert e.data["isError"] is True
        assert "critic" in e.data["content"] and "500" in e.data["content"]
    assert events[-1].data["status"] == "completed"


async def test_child_timeout_is_cancelled_and_reported(tmp_path: Path) -> None:
    def brain(role: str, messages: list[dict[str, Any]], body: dict[str, Any]) -> Reply:
        if role == "critic":
            return Reply("thinking about it", hang=True)
        return tree_brain(role, messages, body)

    with trio.fail_after(20):
        events, _ = await run_tree(tmp_path, brain, critic_timeout=0.5)
    errors = of_type(events, EventType.AGENT_ERROR)
    assert [e.data["errorType"] for e in errors] == ["timeout", "timeout"]
    results = [
        e for e in of_type(events, EventType.TOOL_RESULT) if e.source and e.source.depth == 1
    ]
    assert all(e.data["isError"] and "timed out after 0.5 s" in e.data["content"] for e in results)
    assert events[-1].data["status"] == "completed"


async def test_depth_limit_refuses_spawn(tmp_path: Path) -> None:
    events, _ = await run_tree(tmp_path, max_depth=1)
    assert max(e.source.depth for e in events if e.source) == 1
    results = [
        e for e in of_type(events, EventType.TOOL_RESULT) if e.source and e.source.depth == 1
    ]
    assert len(results) == 2
    assert all(e.data["isError"] and "depth limit" in e.data["content"] for e in results)
    assert events[-1].data["status"] == "completed"


async def test_config_max_depth_applies(tmp_path: Path) -> None:
    events, _ = await run_tree(tmp_path, limits={"max_depth": 0})
    assert all(e.source is None for e in events)
    results = of_type(events, EventType.TOOL_RESULT)
    assert len(results) == 2 and all("max_depth is 0" in e.data["content"] for e in results)


async def test_unknown_agent_is_error_result(tmp_path: Path) -> None:
    def brain(role: str, messages: list[dict[str, Any]], body: dict[str, Any]) -> Reply:
        if role == "planner" and not any(m["role"] == "tool" for m in messages):
            return Reply("hm", calls=[("agent_spawn", {"agent_id": "ghost", "task": "boo"})])
        return tree_brain(role, messages, body)

    events, _ = await run_tree(tmp_path, brain)
    (result,) = of_type(events, EventType.TOOL_RESULT)
    assert result.data["isError"] and "unknown agent 'ghost'" in result.data["content"]
    assert events[-1].data["status"] == "completed"


async def test_root_failure_fails_the_run(tmp_path: Path) -> None:
    def brain(role: str, messages: list[dict[str, Any]], body: dict[str, Any]) -> Reply:
        return Reply(status=503, error_body="overloaded")

    events, _ = await run_tree(tmp_path, brain)
    error = of_type(events, EventType.AGENT_ERROR)[0]
    assert error.source is None and error.data["errorType"] == "provider_error"
    finished = events[-1]
    assert finished.type == EventType.RUN_FINISHED
    assert finished.data["status"] == "failed" and "503" in finished.data["error"]


async def test_truncated_stream_is_an_error(tmp_path: Path) -> None:
    def brain(role: str, messages: list[dict[str, Any]], body: dict[str, Any]) -> Reply:
        if role == "critic":
            return Reply("partial answer", truncate=True)
        return tree_brain(role, messages, body)

    events, _ = await run_tree(tmp_path, brain)
    errors = of_type(events, EventType.AGENT_ERROR)
    assert len(errors) == 2 and all("stream ended" in e.data["message"] for e in errors)
    assert events[-1].data["status"] == "completed"


async def test_call_mode_runs_children_blocking(tmp_path: Path) -> None:
    async with trio.open_nursery() as nursery:
        fake = await serve_fake_openai(nursery, tree_brain)
        async with Orchestrator.open(config_for(tmp_path, fake)) as orch:
            result = await orch.call("planner", "the question")
        nursery.cancel_scope.cancel()
    assert result.status == "completed"
    assert result.text is not None
    assert "alpha reviewed: critique of review alpha" in result.text
    assert "beta reviewed: critique of review beta" in result.text
    assert len(fake.requests) == 8
    assert result.usage.input_tokens == 80


async def test_api_key_from_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAKE_KEY", "sk-test-123")
    async with trio.open_nursery() as nursery:
        fake = await serve_fake_openai(nursery, tree_brain)
        cfg = write_config(
            tmp_path,
            agents(),
            models={
                "default": {
                    "provider": "openai",
                    "base_url": fake.base_url,
                    "model": "m",
                    "api_key_env": "FAKE_KEY",
                }
            },
        )
        async with Orchestrator.open(cfg) as orch:
            await orch.call("critic", "x")
        nursery.cancel_scope.cancel()
    assert fake.headers[0]["authorization"] == "Bearer sk-test-123"
    assert fake.requests[0]["model"] == "m"


async def test_cancel_reaches_every_agent(tmp_path: Path) -> None:
    def brain(role: str, messages: list[dict[str, Any]], body: dict[str, Any]) -> Reply:
        if role == "critic":
            return Reply("looking", hang=True)
        return tree_brain(role, messages, body)

    events: list[Event] = []
    async with trio.open_nursery() as nursery:
        fake = await serve_fake_openai(nursery, brain)
        async with (
            Orchestrator.open(config_for(tmp_path, fake)) as orch,
            orch.stream("planner", "q") as run,
        ):
            async for event in run:
                events.append(event)
                critics_streaming = [
                    e
                    for e in events
                    if e.type == EventType.REASONING and e.source and e.source.agent_id == "critic"
                ]
                if len({e.source.agent_key for e in critics_streaming if e.source}) == 2:
                    run.cancel()
        nursery.cancel_scope.cancel()
    errors = of_type(events, EventType.AGENT_ERROR)
    assert sorted(e.source.agent_id if e.source else "root" for e in errors) == [
        "critic",
        "critic",
        "researcher",
        "researcher",
        "root",
    ]
    assert all(e.data["errorType"] == "cancelled" for e in errors)
    assert events[-1].type == EventType.RUN_FINISHED and events[-1].data["status"] == "cancelled"
    assert [e.seq for e in events] == list(range(1, len(events) + 1))
