"""48 streams recorded from real providers, replayed through the real provider code.

Each recording (`../shared/provider-streams/NAME.sse`, next to the repository) is
served over loopback HTTP by the fake provider, once in one write and once cut at
random byte positions, to one agent whose model points at it. The first model turn
must come out as `expected.json` says: text, reasoning, client tool calls (server-
side tools are not client calls), usage and errors. The recordings are other
projects' test data: they are read at test time, never copied here; without them
these tests skip. `PROVIDER_STREAMS=/path` points elsewhere.
"""

from __future__ import annotations

import json
import os
import random
import zlib
from pathlib import Path
from typing import Any

import pytest
import trio

from orchestrator.core.events import Event, EventType
from orchestrator.runtime.engine import Orchestrator
from tests.fakes.provider_server import Reply, serve_fake_openai
from tests.helpers import REPO, collect, write_config


def _streams_dir() -> Path | None:
    configured = os.environ.get("PROVIDER_STREAMS")
    path = Path(configured) if configured else REPO.parent / "shared" / "provider-streams"
    return path if (path / "expected.json").is_file() else None


STREAMS = _streams_dir()
EXPECTED: dict[str, dict[str, Any]] = (
    json.loads((STREAMS / "expected.json").read_text()) if STREAMS else {}
)
SKIP = (
    "the recorded provider streams are absent (expected ../shared/provider-streams next "
    "to the repository, or PROVIDER_STREAMS=/path/to/provider-streams)"
)


def pieces_of(raw: bytes, name: str, cut: str) -> list[bytes]:
    """The stream as written: whole, or cut at 1–12 random positions (seeded by name)."""
    if cut == "whole":
        return [raw]
    rng = random.Random(zlib.crc32(name.encode()))
    cuts = sorted({rng.randrange(1, len(raw)) for _ in range(rng.randint(1, 12))})
    return [raw[a:b] for a, b in zip([0, *cuts], [*cuts, len(raw)], strict=True)]


class Observed:
    """What one model turn came out as, read from the run's events."""

    def __init__(self, events: list[Event]) -> None:
        root = [e for e in events if e.source is None]
        turn_end = next(
            (i for i, e in enumerate(root) if e.type is EventType.REASONING and e.last), len(root)
        )
        turn = root[:turn_end]
        reasoning = [e for e in turn if e.type is EventType.REASONING]
        self.text = "".join(e.data.get("delta", "") for e in reasoning)
        self.reasoning = "".join(e.data.get("thinkingDelta", "") for e in reasoning)
        self.last_text = root[turn_end].data["text"] if turn_end < len(root) else None
        calls = [e.data for e in root if e.type is EventType.TOOL_CALL]
        self.tool_calls = [c for c in calls if not c.get("server")]
        self.server_calls = [c for c in calls if c.get("server")]
        self.server_results = [
            e.data for e in root if e.type is EventType.TOOL_RESULT and e.data.get("server")
        ]
        ends = [e for e in root if e.type in (EventType.AGENT_RESULT, EventType.AGENT_ERROR)]
        self.end = ends[0] if ends else None
        self.usage = self.end.data.get("usage") if self.end else None
        self.error = self.end.data if self.end and self.end.type is EventType.AGENT_ERROR else None
        self.model_calls = 0


async def replay(tmp_path: Path, api: str, pieces: list[bytes]) -> Observed:
    def brain(role: str, messages: list[dict[str, Any]], body: dict[str, Any]) -> Reply:
        return Reply(raw=pieces)

    async with trio.open_nursery() as nursery:
        fake = await serve_fake_openai(nursery, brain, pause=0.001)
        agent = {
            "description": "replays a recording",
            "instructions": "ROLE: replay",
            "model": "recorded",
            "max_turns": 1,
            "continue_on_output_limit": 0,  # one turn: a cut answer is the answer here
        }
        model = {"provider": api, "base_url": fake.base_url, "max_retries": 0, "model": "m"}
        config = write_config(
            tmp_path,
            {"replay": agent},
            models={"default": {"provider": "scripted"}, "recorded": model},
        )
        async with Orchestrator.open(config) as orch:
            events = await collect(orch, "replay", "go")
        nursery.cancel_scope.cancel()
    observed = Observed(events)
    observed.model_calls = len(fake.requests)
    return observed


def check(name: str, observed: Observed) -> None:
    expected = EXPECTED[name]
    assert observed.model_calls == 1, "one model call per recording"
    if "error" in expected:
        assert observed.error is not None, f"{name}: expected an error, the agent ended well"
        assert observed.error["errorType"] == expected["error"]["errorType"]
        for needle in expected["error"].get("message_contains", []):
            assert needle in observed.error["message"], observed.error["message"]
        assert observed.text == expected["text"]
        return
    assert observed.text == expected["text"]
    assert observed.last_text == expected["text"]
    assert observed.reasoning == expected["reasoning"]
    got = [(c["name"], c["args"]) for c in observed.tool_calls]
    want = [
        (c["name"], c["arguments_raw"] if c.get("invalid_json") else c["arguments"])
        for c in expected["tool_calls"]
    ]
    assert got == want
    if "usage" in expected:
        assert observed.usage == expected["usage"]
    if not expected["tool_calls"]:  # nothing to run: the turn is the agent's answer
        assert observed.end is not None and observed.end.type is EventType.AGENT_RESULT
    if "server_tool_use" in expected["source"].get("note", "") or "server-side" in expected[
        "source"
    ].get("note", ""):  # the provider ran tools: shown as server calls with their results
        assert observed.server_calls
        results = {r["toolCallId"] for r in observed.server_results}
        assert {c["toolCallId"] for c in observed.server_calls} <= results


@pytest.mark.parametrize("cut", ["whole", "random"])
@pytest.mark.parametrize("name", sorted(EXPECTED) or ["-"])
async def test_recorded_stream(tmp_path: Path, name: str, cut: str) -> None:
    if STREAMS is None:
        pytest.skip(SKIP)
    raw = (STREAMS / f"{name}.sse").read_bytes()
    observed = await replay(tmp_path, EXPECTED[name]["api"], pieces_of(raw, name, cut))
    check(name, observed)
