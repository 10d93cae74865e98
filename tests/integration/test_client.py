"""`orchestrator.client` against a real server: requests, a filtered follow, refusals,
and a follow that goes on through a restart of the server in the middle of the run —
every event once, in order, nothing missing."""

from __future__ import annotations

import signal
import socket
from pathlib import Path
from typing import Any

import pytest
import trio

from orchestrator.client import Client, ClientError
from orchestrator.core.events import Event, EventType
from tests.integration.test_approvals_server import AGENTS
from tests.integration.test_server_lifecycle import start_serve_process
from tests.memory_server import autojump, memory_server
from tests.server_helpers import demo_config

TOKENS = [{"name": "ann", "token": "a-secret", "role": "user"}]


@autojump
async def test_requests_and_a_filtered_follow(tmp_path: Path) -> None:
    config = demo_config(tmp_path, token_delay=0.01, server={"tokens": TOKENS}, extra_agents=AGENTS)
    async with memory_server(config) as server:
        with pytest.raises(ClientError) as refused:
            async with Client.connect(server.url, token="wrong"):
                pass
        assert refused.value.code == "unauthorized"
        async with Client.connect(server.url, token="a-secret") as client:
            assert {"planner", "researcher", "critic"} <= {a.id for a in await client.agents()}
            run_id = await client.start("planner", "compare trio and asyncio")
            events: list[Event] = []
            async with client.follow(run_id, filter={"maxDepth": 1}) as stream:
                async for event in stream:
                    events.append(event)
            assert client.ended is not None and client.ended.status == "completed"
            assert events[0].type is EventType.RUN_STARTED
            assert events[-1].type is EventType.RUN_FINISHED
            assert all(e.source is None or e.source.depth <= 1 for e in events)
            seqs = [e.seq for e in events]
            assert seqs == sorted(set(seqs))
            page = await client.runs(limit=10)
            assert [r.run_id for r in page.runs] == [run_id] and not page.more
            with pytest.raises(ClientError) as unknown:
                await client.cancel("run-nope")
            assert unknown.value.code == "not_found"
            # Approvals: a call waits, the client lists it and answers it.
            waiting_run = await client.start("top", "go")
            with trio.fail_after(10):
                while not (waiting := await client.pending(waiting_run)):  # noqa: ASYNC110
                    await trio.sleep(0.05)
            await client.approve(waiting_run, waiting[0].tool_call_id, deny=True, reason="no")
            async with client.follow(
                waiting_run, filter={"types": ["APPROVAL_RESOLVED"]}
            ) as stream:
                decisions = [event.data["decision"] async for event in stream]
            assert decisions == ["deny"]
            # A cancel reaches a running run.
            slow = await client.start("planner", "slowly")
            await client.cancel(slow, reason="enough")
            async with client.follow(slow, filter={"types": ["RUN_FINISHED"]}) as stream:
                finished = [event async for event in stream]
            assert (
                finished[0].data["status"] == "cancelled" and finished[0].data["reason"] == "enough"
            )


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def test_a_follow_goes_on_through_a_server_restart(tmp_path: Path) -> None:
    demo_config(tmp_path, token_delay=0.01, storage="sqlite:///journal.db")
    path, port = tmp_path / "server.yaml", free_port()
    got: list[Event] = []
    retries: list[tuple[int, bool]] = []

    def note(attempt: int, error: BaseException, connected: bool) -> None:
        retries.append((attempt, connected))

    async with trio.open_nursery() as nursery:
        proc, url = await start_serve_process(nursery, path, port)
        async with Client.connect(url, give_up_after=30) as client:
            run_id = await client.start("planner", "compare trio and asyncio")
            restarted = False
            async with client.follow(run_id, on_reconnect=note) as stream:
                async for event in stream:
                    got.append(event)
                    if not restarted and event.type is EventType.AGENT_RESULT:
                        restarted = True  # mid-run: one researcher done, the rest streaming
                        proc.send_signal(signal.SIGTERM)
                        with trio.fail_after(20):
                            await proc.wait()
                        proc, _ = await start_serve_process(nursery, path, port)
            assert client.ended is not None and client.ended.status == "completed"
            assert client.ended.reconnects >= 1 and retries and retries[0][1]
            proc.send_signal(signal.SIGTERM)
    seqs = [e.seq for e in got]
    assert seqs == list(range(1, len(seqs) + 1))  # every event once, in order
    assert any(e.type is EventType.RUN_RESUMED for e in got)
    assert got[-1].type is EventType.RUN_FINISHED
    assert got[-1].data["status"] == "completed"


def test_the_client_says_how_to_use_it_from_asyncio() -> None:
    import orchestrator.client as module

    doc: Any = module.__doc__
    assert "asyncio.to_thread(trio.run" in doc
