"""The server in memory (tests/memory_server.py): a real client reaches it by its URL,
time jumps while nothing runs, and stands still while a thread works."""

import time
from pathlib import Path

import httpx
import trio
import trio.testing

from tests.memory_server import autojump, memory_server
from tests.server_helpers import demo_config, run_to_end

pytestmark = autojump


async def test_a_run_and_a_plain_request_reach_the_server_in_memory(tmp_path: Path) -> None:
    config = demo_config(tmp_path, token_delay=0.5)  # a minute of words, no real wait
    async with memory_server(config) as server:
        began = trio.current_time()
        _, events, end = await run_to_end(server.url, "planner", "go")
        assert end["status"] == "completed" and events[-1]["type"] == "RUN_FINISHED"
        assert isinstance(trio.lowlevel.current_clock(), trio.testing.MockClock)
        assert trio.current_time() - began > 30  # (on the mock clock: no real wait)
        async with httpx.AsyncClient() as http:
            health = await http.get(f"http://{server.host}:{server.port}/healthz")
        assert health.json() == {"status": "ok"}


async def test_the_clock_stands_still_while_a_thread_works() -> None:
    began = trio.current_time()
    with trio.fail_after(1):  # would fire at once if the clock jumped meanwhile
        await trio.to_thread.run_sync(time.sleep, 0.05)
    assert trio.current_time() == began
