"""The scripted provider paces words on the clock, as a remote model does."""

from __future__ import annotations

import pytest
import trio
import trio.testing

from agents.core.messages import ModelRequest, TextDelta, UserMessage
from agents.providers.scripted import ScriptedProvider
from agents.spec import ScriptSpec, ScriptStep

pytestmark = pytest.mark.trio


async def test_a_slow_consumer_finds_the_words_waiting(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """100 words at 10 ms: a consumer stalled 0.5 s midway still ends at ~1 s, not 1.5 s."""
    words = " ".join(["w"] * 100)
    provider = ScriptedProvider(ScriptSpec(token_delay=0.01, turns=[ScriptStep(say=words)]))
    request = ModelRequest(system="s", messages=(UserMessage(text="t"),))
    start = trio.current_time()
    arrivals: list[float] = []
    async for batch in provider.stream(request):
        for part in batch:
            if isinstance(part, TextDelta):
                arrivals.append(trio.current_time() - start)
        if len(arrivals) == 40:
            await trio.sleep(0.5)
    assert len(arrivals) == 100
    assert arrivals[0] == pytest.approx(0.01)
    assert arrivals[-1] == pytest.approx(1.0)
    # After the stall, the words due meanwhile come at once, in one batch.
    assert arrivals[40] == pytest.approx(0.9) and arrivals[89] == pytest.approx(0.9)
