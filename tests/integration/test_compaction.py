"""Compaction against a fake provider speaking real SSE: a tree whose agents cross their
threshold several times, a prompt-too-long error in each wire format followed by a
successful retry, a summary that is itself too long, a turn cut by the output limit
and continued, and a resume after kill -9 that starts from the compacted conversation.

The fake model counts a request's size as its characters ÷ 4, reports that as its
input tokens, refuses a request over its window the way each provider does, and
writes summaries that keep every `PAGE-n` id it read: an agent that still knows all
its pages at the end remembered them through its compactions.
"""

from __future__ import annotations

import json
import re
import signal
from pathlib import Path
from typing import Any

import pytest
import trio
import yaml
from websockets.trio.client import connect

from agents.core.compaction import CONTINUE_PROMPT
from orchestrator.core.events import Event, EventType
from orchestrator.runtime.engine import Orchestrator
from tests.fakes.provider_server import FakeOpenAI, Reply, serve_fake_openai
from tests.helpers import collect, of_type, write_config
from tests.integration.test_provider_formats import FORMAT, PROVIDERS
from tests.integration.test_server_lifecycle import start_serve_process
from tests.server_helpers import read_until_end, recv, replay, request

FILLER = " ".join(["lorem"] * 150)  # a page: about 230 tokens by the fake's count
PAGE = re.compile(r"PAGE-\d+")


def size(messages: list[dict[str, Any]]) -> int:
    return (
        sum(len(str(m.get("content", ""))) + len(json.dumps(m.get("call", ""))) for m in messages)
        // 4
    )


def pages_known(messages: list[dict[str, Any]]) -> list[str]:
    found: list[str] = []
    for m in messages:
        for page in PAGE.findall(str(m.get("content", ""))):
            if page not in found:
                found.append(page)
    return found


def overflow_reply(fmt: str, have: int, window: int) -> Reply:
    """The provider's own way of saying the prompt is too long."""
    if fmt == "anthropic":
        body = {
            "type": "error",
            "error": {
                "type": "invalid_request_error",
                "message": f"prompt is too long: {have} tokens > {window} maximum",
            },
        }
    elif fmt == "responses":
        body = {
            "error": {
                "message": "Your input exceeds the context window of this model. Please "
                "adjust your input and try again.",
                "type": "invalid_request_error",
                "param": "input",
                "code": "context_length_exceeded",
            }
        }
    else:
        body = {
            "error": {
                "message": f"This model's maximum context length is {window} tokens. However, "
                f"your messages resulted in {have} tokens. Please reduce the length of the "
                "messages.",
                "type": "invalid_request_error",
                "param": "messages",
                "code": "context_length_exceeded",
            }
        }
    return Reply(status=400, error_body=json.dumps(body))


def failed_stream(have: int, window: int) -> Reply:
    """The Responses API's other way: a 200 stream whose `response.failed` says it."""
    error = {"code": "context_length_exceeded", "message": f"{have} tokens > {window}"}
    events: list[tuple[str, dict[str, Any]]] = [
        ("response.created", {"response": {"id": "r", "status": "in_progress", "output": []}}),
        ("response.failed", {"response": {"id": "r", "status": "failed", "error": error}}),
    ]
    raw = []
    for n, (kind, data) in enumerate(events):
        payload = json.dumps({"type": kind, "sequence_number": n, **data})
        raw.append(f"event: {kind}\ndata: {payload}\n\n".encode())
    return Reply(raw=raw)


class Model:
    """The fake model: `lead` reads `pages` pages through `reader` children, one per turn,
    then answers with every page id it knows; `reader` answers one long page."""

    def __init__(
        self, *, pages: int, window: int | None = None, summary_pad: int = 0, fmt: str = ""
    ) -> None:
        self.pages = pages
        self.window = window
        self.summary_pad = summary_pad
        self.fmt = fmt
        self.refused = 0
        self.summaries = 0
        self.hang_summaries = False
        self.lead_requests: list[list[dict[str, Any]]] = []

    def __call__(self, role: str, messages: list[dict[str, Any]], body: dict[str, Any]) -> Reply:
        have = size(messages)
        if self.window is not None and have > self.window:
            self.refused += 1
            if self.fmt == "responses-stream":
                return failed_stream(have, self.window)
            return overflow_reply(self.fmt or "openai", have, self.window)
        usage = (have + 50, 20)
        if role.startswith("You summarize"):
            if self.hang_summaries:
                return Reply("Notes:", hang=True)
            self.summaries += 1
            notes = "Notes: read " + " ".join(pages_known(messages))
            return Reply(notes + " pad" * self.summary_pad, usage=usage)
        if role == "boss":
            results = [m["content"] for m in messages if m["role"] == "tool"]
            if not results:
                calls = [
                    ("agent_spawn", {"agent_id": "lead", "task": f"shelf {i}"}) for i in (1, 2)
                ]
                return Reply("Two shelves, two readers.", calls=calls, usage=usage)
            return Reply(" / ".join(results), usage=usage)
        if role == "reader":
            task = messages[0]["content"]
            n = task.split()[-1]
            return Reply(f"PAGE-{n}: {FILLER}", usage=usage)
        if role == "lead":
            self.lead_requests.append(messages)
            if messages[-1]["content"] == CONTINUE_PROMPT:
                return Reply(" and that is all.", usage=usage)
            known = pages_known(messages)
            if len(known) < self.pages:
                n = len(known)
                return Reply(
                    f"Reading page {n}.",
                    calls=[("agent_spawn", {"agent_id": "reader", "task": f"read page {n}"})],
                    usage=usage,
                )
            return Reply("I read " + " ".join(known), usage=usage)
        raise AssertionError(f"unexpected role {role!r}")


def agents(**lead: Any) -> dict[str, dict[str, Any]]:
    return {
        "lead": {
            "description": "Reads pages.",
            "instructions": "ROLE: lead\nRead the pages one by one.",
            "tools": ["agent_spawn"],
            "max_turns": 30,
            **lead,
        },
        "reader": {"description": "Reads a page.", "instructions": "ROLE: reader\nRead."},
    }


def model_config(fake: FakeOpenAI, provider: str = "openai") -> dict[str, Any]:
    return {
        "default": {
            "provider": provider,
            "base_url": fake.base_url,
            "model": "fake-model",
            "retry_base_delay": 0.01,
        }
    }


async def run_lead(
    tmp_path: Path, model: Model, provider: str = "openai", **lead: Any
) -> list[Event]:
    async with trio.open_nursery() as nursery:
        fake = await serve_fake_openai(nursery, model, pause=0)
        config = write_config(tmp_path, agents(**lead), models=model_config(fake, provider))
        async with Orchestrator.open(config) as orch:
            events = await collect(orch, "lead", "read the pages")
        nursery.cancel_scope.cancel()
    return events


def root_result(events: list[Event]) -> Event:
    (result,) = [e for e in of_type(events, EventType.AGENT_RESULT) if e.source is None]
    return result


async def test_a_tree_crosses_its_threshold_several_times_and_remembers(tmp_path: Path) -> None:
    model = Model(pages=6)
    events = await run_lead(
        tmp_path, model, compaction={"max_context_tokens": 700, "keep_last_turns": 1}
    )
    assert events[-1].data["status"] == "completed"
    started = of_type(events, EventType.COMPACTION_STARTED)
    finished = of_type(events, EventType.COMPACTION_FINISHED)
    assert len(started) >= 2 and len(finished) == len(started)
    assert all(e.source is None for e in started)  # the lead compacted, from its own source
    for begun, done in zip(started, finished, strict=True):
        assert begun.data["reason"] == "threshold" and begun.data["beforeTokens"] > 700
        assert done.data["afterTokens"] < begun.data["beforeTokens"]
        assert done.data["summary"].startswith("Notes: read PAGE-0")
        assert done.data["keptMessages"] >= 2  # the last turn: its call and its result
    turns = [e.data["summarizedTurns"] for e in finished]
    assert turns == sorted(turns) and turns[0] >= 1  # a summary stands for the earlier ones too
    # Every page read is still known at the end: through the summaries.
    assert root_result(events).data["text"] == "I read " + " ".join(f"PAGE-{n}" for n in range(6))
    # The summarizing calls count in the lead's usage (its own model wrote them).
    assert model.summaries == len(finished)
    lead_turns = len(model.lead_requests) + model.summaries
    assert root_result(events).data["usage"]["outputTokens"] == 20 * lead_turns
    # No request passed what the threshold allows by much after a compaction.
    assert max(size(m) for m in model.lead_requests[-2:]) < 1000


async def test_a_summarizer_subagent_writes_the_summary_as_a_child(tmp_path: Path) -> None:
    model = Model(pages=4)
    extra = {
        "compaction": {"max_context_tokens": 700, "keep_last_turns": 1, "summarizer": "scribe"}
    }
    async with trio.open_nursery() as nursery:
        fake = await serve_fake_openai(nursery, model, pause=0)
        specs = agents(**extra)
        specs["scribe"] = {
            "description": "Writes summaries.",
            "instructions": "You summarize conversations for an agent.",
        }
        config = write_config(tmp_path, specs, models=model_config(fake))
        async with Orchestrator.open(config) as orch:
            events = await collect(orch, "lead", "read the pages")
        nursery.cancel_scope.cancel()
    assert events[-1].data["status"] == "completed"
    scribes = [
        e.source
        for e in of_type(events, EventType.AGENT_STARTED)
        if e.source is not None and e.source.agent_id == "scribe"
    ]
    finished = of_type(events, EventType.COMPACTION_FINISHED)
    assert scribes and len(scribes) == len(finished)
    for child in scribes:  # a child of the lead, in the tree like any other
        assert child.depth == 1
        assert (child.parent_tool_call_id or "").startswith("compaction-")
    assert root_result(events).data["text"] == "I read " + " ".join(f"PAGE-{n}" for n in range(4))
    scribe_usage = sum(
        e.data["usage"]["outputTokens"]
        for e in of_type(events, EventType.AGENT_RESULT)
        if e.source is not None and e.source.agent_id == "scribe"
    )
    assert scribe_usage > 0  # and it is in the lead's subtree usage:
    assert root_result(events).data["subtreeUsage"]["outputTokens"] >= scribe_usage + 20


async def test_children_deep_in_a_tree_compact_on_their_own(tmp_path: Path) -> None:
    model = Model(pages=5)
    async with trio.open_nursery() as nursery:
        fake = await serve_fake_openai(nursery, model, pause=0)
        specs = agents(compaction={"max_context_tokens": 700, "keep_last_turns": 1})
        specs["boss"] = {
            "description": "Splits the reading.",
            "instructions": "ROLE: boss\nSplit.",
            "tools": ["agent_spawn"],
        }
        config = write_config(tmp_path, specs, models=model_config(fake))
        async with Orchestrator.open(config) as orch:
            events = await collect(orch, "boss", "read both shelves")
        nursery.cancel_scope.cancel()
    assert events[-1].data["status"] == "completed"
    leads = {
        e.source.agent_key
        for e in of_type(events, EventType.AGENT_STARTED)
        if e.source and e.source.agent_id == "lead"
    }
    compacted = [e for e in of_type(events, EventType.COMPACTION_FINISHED) if e.source is not None]
    assert len(leads) == 2 and {e.source.agent_key for e in compacted if e.source} == leads
    assert all(e.source is not None and e.source.depth == 1 for e in compacted)
    everything = " ".join(f"PAGE-{n}" for n in range(5))
    assert events[-1].data["result"] == f"I read {everything} / I read {everything}"


@pytest.mark.parametrize("provider", [*PROVIDERS, "responses-stream"])
async def test_a_prompt_too_long_error_compacts_and_retries_in_every_format(
    tmp_path: Path, provider: str
) -> None:
    fmt = FORMAT.get(provider, provider)
    model = Model(pages=4, window=900, fmt=fmt)
    if provider == "responses-stream":
        provider = "openai-responses"
    events = await run_lead(tmp_path, model, provider)
    assert events[-1].data["status"] == "completed", events[-1].data
    assert model.refused >= 1
    started = of_type(events, EventType.COMPACTION_STARTED)
    assert started and {e.data["reason"] for e in started} == {"prompt_too_long"}
    finished = of_type(events, EventType.COMPACTION_FINISHED)
    assert len(finished) == len(started)
    for begun, done in zip(started, finished, strict=True):  # one scale for both
        assert 0 < done.data["afterTokens"] < begun.data["beforeTokens"], (begun.data, done.data)
    assert root_result(events).data["text"] == "I read " + " ".join(f"PAGE-{n}" for n in range(4))
    assert not of_type(events, EventType.AGENT_ERROR)


async def test_a_summary_that_is_itself_too_long_fails_with_context_overflow(
    tmp_path: Path,
) -> None:
    # Over the threshold after compaction: the agent fails, saying by how much.
    model = Model(pages=5, summary_pad=800)
    events = await run_lead(
        tmp_path, model, compaction={"max_context_tokens": 700, "keep_last_turns": 1}
    )
    (error,) = of_type(events, EventType.AGENT_ERROR)
    assert error.data["errorType"] == "context_overflow"
    assert "over compaction.max_context_tokens (700)" in error.data["message"]
    assert "the summary is about" in error.data["message"]
    assert of_type(events, EventType.COMPACTION_FINISHED)  # the summary is in the journal
    assert events[-1].data["status"] == "failed"
    # Still too long for the provider after the one retry: by how much, in its words.
    model = Model(pages=5, window=900, summary_pad=1000, fmt="anthropic")
    (tmp_path / "b").mkdir()
    events = await run_lead(tmp_path / "b", model, "anthropic")
    (error,) = of_type(events, EventType.AGENT_ERROR)
    assert error.data["errorType"] == "context_overflow"
    assert re.search(
        r"still too long for the model after compaction: \d+ tokens over", error.data["message"]
    )


async def test_a_cancel_during_a_compaction_leaves_the_conversation_as_it_was(
    tmp_path: Path,
) -> None:
    from orchestrator.core.rebuild import rebuild

    model = Model(pages=5)
    model.hang_summaries = True
    events: list[Event] = []
    root: Any = None
    before: list[Any] = []
    async with trio.open_nursery() as nursery:
        fake = await serve_fake_openai(nursery, model, pause=0)
        lead = {"compaction": {"max_context_tokens": 700, "keep_last_turns": 1}}
        config = write_config(tmp_path, agents(**lead), models=model_config(fake))
        async with Orchestrator.open(config) as orch, orch.stream("lead", "read") as run:
            async for event in run:
                events.append(event)
                if event.type == EventType.COMPACTION_STARTED:
                    runner = run._run.context.live.root
                    assert runner is not None
                    root, before = runner, list(runner.messages)
                    await trio.sleep(0.3)  # the summary is being written (and never ends)
                    run.cancel(reason="enough")
        nursery.cancel_scope.cancel()
    assert root.messages == before  # not one message changed
    assert not of_type(events, EventType.COMPACTION_FINISHED)
    (error,) = of_type(events, EventType.AGENT_ERROR)
    assert error.data["errorType"] == "cancelled" and error.data["reason"] == "enough"
    assert events[-1].data["status"] == "cancelled"
    # The journal says the same: a compaction that did not finish changed nothing.
    # (The rebuild writes tool arguments as compact JSON: compare what they say.)
    assert shape(rebuild(events).root.messages) == shape(before)


@pytest.mark.parametrize("provider", PROVIDERS)
async def test_an_answer_cut_by_the_output_limit_is_continued_once(
    tmp_path: Path, provider: str
) -> None:
    cuts: list[int] = []

    def brain(role: str, messages: list[dict[str, Any]], body: dict[str, Any]) -> Reply:
        if messages[-1]["content"] == CONTINUE_PROMPT:
            cuts.append(1)
            return Reply(" and the second half.", cut=len(cuts) > 1)
        return Reply("The first half", cut=True)

    async with trio.open_nursery() as nursery:
        fake = await serve_fake_openai(nursery, brain, pause=0)
        config = write_config(
            tmp_path,
            {
                "solo": {"description": "d", "instructions": "ROLE: solo\nAnswer."},
                "stubborn": {
                    "description": "d",
                    "instructions": "ROLE: solo\nAnswer.",
                    "continue_on_output_limit": 1,
                },
            },
            models=model_config(fake, provider),
        )
        async with Orchestrator.open(config) as orch:
            events = await collect(orch, "solo", "go")
            cut_twice = await collect(orch, "stubborn", "go")
        nursery.cancel_scope.cancel()
    assert root_result(events).data["text"] == "The first half and the second half."
    assert events[-1].data["result"] == "The first half and the second half."
    (asked,) = of_type(events, EventType.USER_MESSAGE)
    assert asked.data == {"text": CONTINUE_PROMPT, "from": "orchestrator", "continuation": True}
    (error,) = of_type(cut_twice, EventType.AGENT_ERROR)
    assert error.data["errorType"] == "output_limit"
    assert "again after 1 continuation" in error.data["message"]


async def test_a_resume_after_kill_9_starts_from_the_compacted_conversation(
    tmp_path: Path,
) -> None:
    model = Model(pages=6)
    async with trio.open_nursery() as fakes:
        fake = await serve_fake_openai(fakes, model, pause=0.003)
        subagents = tmp_path / "subagents"
        subagents.mkdir()
        for agent_id, spec in agents(
            compaction={"max_context_tokens": 700, "keep_last_turns": 1}
        ).items():
            (subagents / f"{agent_id}.yaml").write_text(yaml.safe_dump(spec))
        config = {
            "server": {"host": "127.0.0.1", "port": 0},
            "storage": "sqlite:///journal.db",
            "models": model_config(fake),
            "subagents_dir": "subagents",
        }
        (tmp_path / "server.yaml").write_text(yaml.safe_dump(config))
        seen: list[dict[str, Any]] = []
        async with trio.open_nursery() as nursery:
            proc, url = await start_serve_process(nursery, tmp_path / "server.yaml")
            async with connect(url, max_size=None) as ws:
                ack = await request(ws, op="run", id=1, agent="lead", input="read the pages")
                run_id = ack["runId"]
                while not any(e["type"] == "COMPACTION_FINISHED" for e in seen):
                    seen += (await recv(ws)).get("events", [])
                # The next lead turn has started from the compacted conversation: kill it.
                while not any(
                    e["type"] == "AGENT_STARTED" and e["seq"] > seen_at(seen) for e in seen
                ):
                    seen += (await recv(ws)).get("events", [])
                proc.send_signal(signal.SIGKILL)
        summary = next(e for e in seen if e["type"] == "COMPACTION_FINISHED")["data"]["summary"]
        before = len(model.lead_requests)
        async with trio.open_nursery() as nursery:
            proc, url = await start_serve_process(nursery, tmp_path / "server.yaml")
            try:
                async with connect(url, max_size=None) as ws:
                    ack = await request(ws, op="subscribe", id=2, runId=run_id)
                    rest, _ = await read_until_end(ws, ack["sub"])
                everything = await replay(url, run_id)
            finally:
                proc.send_signal(signal.SIGTERM)
        fakes.cancel_scope.cancel()
    assert rest[-1]["type"] == "RUN_FINISHED" and rest[-1]["data"]["status"] == "completed"
    assert any(e["type"] == "RUN_RESUMED" for e in everything)
    first_after = model.lead_requests[before]
    contents = [str(m["content"]) for m in first_after]
    assert any(summary in c for c in contents)  # the summary, not the pages it stands for
    assert not any(c.startswith("PAGE-0") for c in contents)
    final = next(e for e in everything if e["type"] == "AGENT_RESULT" and e["source"] is None)
    assert final["data"]["text"] == "I read " + " ".join(f"PAGE-{n}" for n in range(6))


def shape(messages: list[Any]) -> list[tuple[str, str, Any]]:
    """What each message says (tool arguments decoded)."""
    out = []
    for m in messages:
        calls = [(c.id, c.name, json.loads(c.arguments)) for c in getattr(m, "tool_calls", ())]
        out.append((type(m).__name__, getattr(m, "text", getattr(m, "content", "")), calls))
    return out


def seen_at(seen: list[dict[str, Any]]) -> int:
    """The seq of the first COMPACTION_FINISHED."""
    return int(next(e["seq"] for e in seen if e["type"] == "COMPACTION_FINISHED"))


async def test_a_turn_whose_background_child_still_runs_is_never_summarized(
    tmp_path: Path,
) -> None:
    """Turn 1 starts a background child that runs for a while; the pages read meanwhile
    cross the threshold, but the cut cannot pass turn 1 until the child is done."""
    page = " ".join(["word"] * 200)
    spawn = {"name": "agent_spawn", "args": {"agent_id": "page", "task": "p"}}
    lead: dict[str, Any] = {
        "description": "d",
        "instructions": "Read.",
        "tools": ["agent_spawn"],
        "max_turns": 20,
        "compaction": {"max_context_tokens": 600, "keep_last_turns": 1},
        "script": {
            "summary": "Notes: {input}",
            "turns": [
                {
                    "say": "Start the slow one.",
                    "calls": [
                        {
                            "name": "agent_spawn",
                            "args": {"agent_id": "slow", "task": "s", "timeout_seconds": 0},
                        }
                    ],
                },
                *[{"say": f"Page {i}.", "calls": [spawn]} for i in range(4)],
                {"say": "Done."},
            ],
        },
    }
    specs: dict[str, dict[str, Any]] = {
        "lead": lead,
        "page": {"description": "p", "instructions": "i", "script": {"turns": [{"say": page}]}},
        "slow": {
            "description": "s",
            "instructions": "i",
            "script": {"turns": [{"sleep": 1.0, "say": "slow result"}]},
        },
    }
    config = write_config(tmp_path, specs)
    async with Orchestrator.open(config) as orch:
        events = await collect(orch, "lead", "go")
    assert events[-1].data["status"] == "completed"
    slow_done = next(
        e.seq
        for e in of_type(events, EventType.AGENT_RESULT)
        if e.source is not None and e.source.agent_id == "slow"
    )
    finished = of_type(events, EventType.COMPACTION_FINISHED)
    assert finished, "the threshold was crossed: a compaction once the child is done"
    assert all(e.seq > slow_done for e in finished)
    started = of_type(events, EventType.COMPACTION_STARTED)
    assert all(e.seq > slow_done for e in started)


async def test_the_scripted_models_word_counts_and_the_estimate_agree_on_shrinking(
    tmp_path: Path,
) -> None:
    """Regression: with the scripted model (which counts words), a `prompt_too_long`
    compaction reported `afterTokens` 367 > `beforeTokens` 231."""
    words = " ".join(f"lengthyword{i}" for i in range(60))
    reading = {"say": words, "calls": [{"name": "read_file", "args": {"path": "none.txt"}}]}
    spec = {
        "description": "d",
        "instructions": "i",
        "tools": ["read_file"],
        "compaction": {"keep_last_turns": 1},
        "script": {
            "context_window": 200,
            "summary": "short summary",
            "turns": [reading] * 5 + [{"say": "done"}],
        },
    }
    config = write_config(tmp_path, {"reader": spec})
    async with Orchestrator.open(config) as orch:
        events = await collect(orch, "reader", "go")
    assert events[-1].data["status"] == "completed"
    started = of_type(events, EventType.COMPACTION_STARTED)
    finished = of_type(events, EventType.COMPACTION_FINISHED)
    assert started and len(started) == len(finished)
    for begun, done in zip(started, finished, strict=True):
        assert 0 < done.data["afterTokens"] < begun.data["beforeTokens"]
