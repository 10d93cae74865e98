"""The benches' fake provider (bench/fake_provider.py) speaks both dialects as our
provider stack reads them: its figures are of streams the server accepts."""

from __future__ import annotations

import os
import ssl
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Literal

import httpx
import pytest

from agents.core.messages import (
    AssistantMessage,
    Finish,
    ModelRequest,
    TextDelta,
    ToolCall,
    ToolCallArgs,
    ToolCallStart,
    ToolResultMessage,
    UserMessage,
)
from agents.model_config import ModelConfig
from agents.providers.anthropic import AnthropicProvider
from agents.providers.openai_chat import OpenAIProvider
from agents.providers.transport import StreamTransport

REPO = Path(__file__).resolve().parents[2]
PROVIDERS = {"openai": OpenAIProvider, "anthropic": AnthropicProvider}


@pytest.fixture(params=["http", "https"])
def fake(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """The fake provider (20 words a stream, as fast as it can; 3 spawns for a lead)."""
    with subprocess.Popen(
        [sys.executable, "-m", "bench.fake_provider", "1e9", "20", "3", request.param],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    ) as proc:
        try:
            assert proc.stdout is not None
            line = proc.stdout.readline().decode()
            assert "listening on" in line, line
            yield line.split("listening on ")[1].split()[0], tmp_path
        finally:
            proc.kill()


async def turn(
    fake: tuple[str, Path], kind: Literal["openai", "anthropic"], request: ModelRequest
) -> list[object]:
    url, root = fake
    context = (
        ssl.create_default_context(cafile=str(root / "ca.pem")) if url.startswith("https") else None
    )
    config = ModelConfig(provider=kind, base_url=url, model="paced", read_timeout=10)
    parts: list[object] = []
    async with httpx.AsyncClient(transport=StreamTransport(ssl_context=context)) as client:
        provider = PROVIDERS[kind](config, client)
        async for batch in provider.stream(request):
            parts.extend(batch)
    return parts


@pytest.mark.parametrize("kind", sorted(PROVIDERS))
async def test_the_fake_provider_streams_words_then_ends_the_turn(
    fake: tuple[str, Path], kind: Literal["openai", "anthropic"]
) -> None:
    request = ModelRequest(system="ROLE: leaf", messages=(UserMessage(text="talk"),))
    parts = await turn(fake, kind, request)
    words = [p.text for p in parts if isinstance(p, TextDelta)]
    assert len(words) == 20
    assert all(float(word) > 0 for word in words)  # each word is the time it was written
    finishes = [p for p in parts if isinstance(p, Finish)]
    assert len(finishes) == 1
    assert finishes[0].reason in ("stop", "end_turn")


@pytest.mark.parametrize("kind", sorted(PROVIDERS))
async def test_a_lead_is_asked_for_spawns_then_says_done(
    fake: tuple[str, Path], kind: Literal["openai", "anthropic"]
) -> None:
    ask = ModelRequest(system="ROLE: lead", messages=(UserMessage(text="go"),))
    parts = await turn(fake, kind, ask)
    starts = [p for p in parts if isinstance(p, ToolCallStart)]
    assert [s.name for s in starts] == ["agent_spawn"] * 3
    args = "".join(p.delta for p in parts if isinstance(p, ToolCallArgs))
    assert args.count('"agent_id": "leaf"') == 3
    calls = tuple(ToolCall(id=s.id, name=s.name, arguments="{}") for s in starts)
    answered = ModelRequest(
        system="ROLE: lead",
        messages=(
            UserMessage(text="go"),
            AssistantMessage(text="", tool_calls=calls),
            *(ToolResultMessage(tool_call_id=c.id, name=c.name, content="ok") for c in calls),
        ),
    )
    parts = await turn(fake, kind, answered)
    assert "".join(p.text for p in parts if isinstance(p, TextDelta)) == "done"
