"""Restart with SQLite, crash recovery with `resume_runs: false` (`interrupted`), graceful
shutdown, `watch` (resuming after a restart: test_restart_resume.py)."""

from __future__ import annotations

import contextlib
import functools
import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import trio
from websockets.exceptions import ConnectionClosed
from websockets.trio.client import connect

from orchestrator.cli.watch import follow
from orchestrator.core.events import Event
from orchestrator.server.app import RunningServer, serve
from tests.helpers import REPO
from tests.memory_server import autojump, memory_server
from tests.server_helpers import (
    demo_config,
    read_until_end,
    recv,
    replay,
    request,
    run_to_end,
    running_server,
)


@pytest.fixture(params=["sqlite", "redis"])
def durable_storage(request: pytest.FixtureRequest) -> str | dict[str, Any]:
    if request.param == "redis":
        return {"url": request.getfixturevalue("redis_url"), "durability": "relaxed"}
    return "sqlite:///data/journal.db"


async def test_history_survives_a_restart(
    tmp_path: Path, durable_storage: str | dict[str, Any]
) -> None:
    config = demo_config(tmp_path, storage=durable_storage)
    async with running_server(config) as server:
        run_id, events, _ = await run_to_end(server.url)
        critic_id, critic_events, _ = await run_to_end(server.url, agent="critic")
    if durable_storage == "sqlite:///data/journal.db":
        assert (tmp_path / "data" / "journal.db").exists()
    async with running_server(config) as server:
        assert await replay(server.url, run_id) == events
        assert await replay(server.url, critic_id, after_seq=3) == critic_events[3:]
        async with connect(server.url) as ws:
            runs = await request(ws, op="runs")
        assert [(r["runId"], r["status"]) for r in runs["runs"]] == [  # newest first
            (critic_id, "completed"),
            (run_id, "completed"),
        ]


@autojump
async def test_runs_left_running_by_a_crash_end_interrupted(tmp_path: Path) -> None:
    config = demo_config(
        tmp_path, token_delay=0.02, storage="sqlite:///journal.db", server={"resume_runs": False}
    )
    seen: list[dict[str, Any]] = []
    async with trio.open_nursery() as nursery:
        server: RunningServer = await nursery.start(functools.partial(serve, config, port=0))
        async with connect(server.url, max_size=None) as ws:
            ack = await request(ws, op="run", id=1, agent="planner", input="q")
            while len(seen) < 20:
                frame = await recv(ws)
                if frame["op"] == "events":
                    seen += frame["events"]
            nursery.cancel_scope.cancel()  # a crash: no graceful shutdown
    async with memory_server(config) as server:
        replayed = await replay(server.url, ack["runId"])
        assert [e["seq"] for e in replayed] == list(range(1, len(replayed) + 1))
        assert replayed[: len(seen)] == seen
        last = replayed[-1]
        assert last["type"] == "RUN_FINISHED" and last["source"] is None
        assert last["data"]["status"] == "interrupted"
        async with connect(server.url) as ws:
            (listed,) = (await request(ws, op="runs"))["runs"]
        assert listed["status"] == "interrupted"


@autojump
async def test_graceful_shutdown_ends_runs_and_closes_clients_1001(tmp_path: Path) -> None:
    config = demo_config(tmp_path, token_delay=0.02)
    async with trio.open_nursery() as nursery:
        server: RunningServer = await nursery.start(functools.partial(serve, config, port=0))
        async with connect(server.url, max_size=None) as ws:
            ack = await request(ws, op="run", id=1, agent="planner", input="q")
            first = await recv(ws)
            assert first["op"] == "events"
            nursery.start_soon(server.shutdown)
            events, end = await read_until_end(ws, ack["sub"])
            assert end["status"] == "interrupted"
            assert events[-1]["type"] == "RUN_FINISHED"
            assert events[-1]["data"]["status"] == "interrupted"
            try:
                await ws.recv()
                raise AssertionError("the server should have closed the connection")
            except ConnectionClosed as exc:
                assert exc.rcvd is not None and exc.rcvd.code == 1001
    with trio.fail_after(2):
        async with trio.open_nursery():
            pass


@autojump
async def test_follow_reconnects_and_resumes_by_seq(tmp_path: Path) -> None:
    async with memory_server(demo_config(tmp_path, token_delay=0.004)) as server:
        received: list[Event] = []
        drops_at = [30, 90]

        async with trio.open_nursery() as nursery:

            def on_events(events: list[Event]) -> None:
                received.extend(events)
                if drops_at and len(received) > drops_at[0]:
                    drops_at.pop(0)
                    for connection in list(server.app.connections):  # the server drops us
                        nursery.start_soon(trio.aclose_forcefully, connection.ws.stream)

            async with connect(server.url) as ws:
                ack = await request(ws, op="run", id=2, agent="planner", input="q", stream=False)
            async with connect(server.url) as ws:
                ack = await request(ws, op="run", id=2, agent="planner", input="q")
            result = await follow(server.url, ack["runId"], on_events, give_up_after=30)
        assert result.status == "completed" and result.reconnects == 2
        full = await replay(server.url, ack["runId"])
        assert [e.seq for e in received] == [e["seq"] for e in full]
        assert [e.seq for e in received] == list(range(1, len(received) + 1))


async def test_watch_command_prints_json_lines(tmp_path: Path) -> None:
    async with running_server(demo_config(tmp_path, token_delay=0.002)) as server:
        async with connect(server.url) as ws:
            ack = await request(ws, op="run", id=1, agent="planner", input="q")
        proc = await trio.run_process(
            [
                sys.executable,
                "-m",
                "orchestrator",
                "watch",
                ack["runId"],
                "--url",
                server.url,
                "--json",
                "--max-depth",
                "1",
            ],
            capture_stdout=True,
            capture_stderr=True,
            check=False,
            env={**os.environ, "PYTHONPATH": str(REPO)},
        )
        assert proc.returncode == 0, proc.stderr
        events = [json.loads(line) for line in proc.stdout.decode().splitlines()]
        assert events[0]["type"] == "RUN_STARTED" and events[-1]["type"] == "RUN_FINISHED"
        assert max(e["source"]["depth"] for e in events if e["source"]) == 1
        expected = await replay(server.url, ack["runId"], filter={"maxDepth": 1})
        assert events == expected
        missing = await trio.run_process(
            [sys.executable, "-m", "orchestrator", "watch", "run-nope", "--url", server.url],
            capture_stdout=True,
            capture_stderr=True,
            check=False,
            env={**os.environ, "PYTHONPATH": str(REPO)},
        )
        assert missing.returncode == 2
        assert b"not_found: unknown run 'run-nope'" in missing.stderr
        assert missing.stdout == b""  # no tree drawn for a run that is not there


async def test_stalled_client_is_closed_and_the_server_forgets_it(tmp_path: Path) -> None:
    big = {"description": "d", "instructions": "i", "script": {"turns": [{"say": "word " * 60000}]}}
    config = demo_config(
        tmp_path, server={"slow_client_timeout": 0.5}, extra_agents={"talker": big}
    )
    async with running_server(config) as server:
        async with connect(server.url, max_size=None, max_queue=1) as slow:
            ack = await request(slow, op="run", id=1, agent="talker", input="x")
            with trio.fail_after(15):
                while server.app.connections:
                    await server.app.feed_ended.park()
            assert not server.app.connections
            # The stalled client finds the connection closed once it reads again.
            received = 0
            try:
                with trio.fail_after(15):
                    while True:
                        frame = json.loads(await slow.recv())
                        received += len(frame.get("events", []))
            except ConnectionClosed as exc:
                closed = exc
            assert closed.rcvd is None or closed.rcvd.code == 4000
        # It resumes by afterSeq and gets the rest.
        rest = await replay(server.url, ack["runId"], after_seq=received)
        assert rest[0]["seq"] == received + 1 and rest[-1]["type"] == "RUN_FINISHED"


async def start_serve_process(
    nursery: trio.Nursery, config_path: Path, port: int = 0
) -> tuple[trio.Process, str]:
    """`python -m orchestrator serve` on `port` (0: a free one); the process and its URL."""
    proc, line = await serve_process(nursery, config_path, port)
    return proc, line.split("listening on ")[1].split()[0]


async def serve_process(
    nursery: trio.Nursery, config_path: Path, port: int = 0, *flags: str
) -> tuple[trio.Process, str]:
    """`python -m orchestrator serve` on `port` (with `flags`): the process and the line
    it printed once it listened."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    command = [sys.executable, "-m", "orchestrator", "serve", "--config", str(config_path)]
    proc: trio.Process = await nursery.start(
        functools.partial(
            trio.run_process,
            [*command, "--port", str(port), *flags],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
            check=False,
        )
    )
    assert proc.stdout is not None
    line = b""
    with trio.fail_after(20):
        while b"\n" not in line:
            line += await proc.stdout.receive_some(1000)
    return proc, line.decode()


async def test_serve_command_shuts_down_gracefully_on_sigterm(tmp_path: Path) -> None:
    config = demo_config(
        tmp_path, token_delay=0.02, storage="sqlite:///j.db", server={"resume_runs": False}
    )
    async with trio.open_nursery() as nursery:
        proc, url = await start_serve_process(nursery, tmp_path / "server.yaml")
        async with connect(url, max_size=None) as ws:
            ack = await request(ws, op="run", id=1, agent="planner", input="q")
            assert (await recv(ws))["op"] == "events"
            proc.send_signal(signal.SIGTERM)
            _, end = await read_until_end(ws, ack["sub"])
            assert end["status"] == "interrupted"
            with pytest.raises(ConnectionClosed) as info:
                await recv(ws)
            assert info.value.rcvd is not None and info.value.rcvd.code == 1001
        with trio.fail_after(20):
            await proc.wait()
        assert proc.returncode == 0
    async with running_server(config) as server:
        (listed,) = (await _runs(server.url))["runs"]
        assert listed["status"] == "interrupted"


async def test_kill_9_loses_none_of_the_events_a_client_saw(
    tmp_path: Path, durable_storage: str | dict[str, Any]
) -> None:
    talker = {
        "description": "talks",
        "instructions": "i",
        "script": {"token_delay": 0.001, "turns": [{"say": "w " * 20000}]},
    }
    config = demo_config(
        tmp_path,
        storage=durable_storage,
        extra_agents={"talker": talker},
        server={"resume_runs": False},
    )
    seen: list[dict[str, Any]] = []
    async with trio.open_nursery() as nursery:
        proc, url = await start_serve_process(nursery, tmp_path / "server.yaml")
        async with connect(url, max_size=None) as ws:
            ack = await request(ws, op="run", id=1, agent="talker", input="q")
            while len(seen) < 1000:
                frame = await recv(ws)
                seen += frame.get("events", [])
            proc.send_signal(signal.SIGKILL)
            with contextlib.suppress(ConnectionClosed):  # what was already on the socket
                while True:
                    frame = await recv(ws)
                    seen += frame.get("events", [])
    assert proc.returncode == -signal.SIGKILL
    async with running_server(config) as server:
        replayed = await replay(server.url, ack["runId"])
    assert replayed[: len(seen)] == seen  # every event a client saw survived
    assert [e["seq"] for e in replayed] == list(range(1, len(replayed) + 1))
    assert replayed[-1]["data"]["status"] == "interrupted"


async def _runs(url: str) -> dict[str, Any]:
    async with connect(url) as ws:
        return await request(ws, op="runs")


async def cli(*argv: str, cwd: Path = REPO, **env: str) -> subprocess.CompletedProcess[bytes]:
    return await trio.run_process(
        [sys.executable, "-m", "orchestrator", *argv],
        cwd=cwd,
        capture_stdout=True,
        capture_stderr=True,
        check=False,
        env={**os.environ, "PYTHONPATH": str(REPO), **env},
    )


async def test_start_command_starts_a_run_on_a_server_and_follows_it(tmp_path: Path) -> None:
    """Regression: no CLI command started a run on a running server."""
    async with running_server(demo_config(tmp_path, token_delay=0.001)) as server:
        started = await cli("start", "planner", "q", "--url", server.url)
        assert started.returncode == 0, started.stderr
        (run_id,) = started.stdout.decode().split()
        assert run_id.startswith("run-") and started.stderr == b""
        replayed = await replay(server.url, run_id)
        assert replayed[0]["data"]["input"] == "q"
        followed = await cli(
            "start", "critic", "d", "--follow", "--json", ORCHESTRATOR_URL=server.url
        )
        assert followed.returncode == 0, followed.stderr
        events = [json.loads(line) for line in followed.stdout.decode().splitlines()]
        assert events[-1]["data"]["status"] == "completed"
        assert followed.stderr.decode() == f"started {events[0]['runId']}\n"
        unknown = await cli("start", "nope", "x", "--url", server.url)
        assert unknown.returncode == 1 and b"not_found: unknown agent 'nope'" in unknown.stderr


async def test_a_client_command_says_where_it_connects_unless_told(tmp_path: Path) -> None:
    """Regression: without --url, every control command silently tried 127.0.0.1:8765."""
    nowhere = await cli("pending", cwd=tmp_path)  # no configs/server.yaml here
    err = nowhere.stderr.decode()
    assert nowhere.returncode == 2
    assert err.startswith(
        "connecting to ws://127.0.0.1:8765/ws (the default; --url or $ORCHESTRATOR_URL to choose)\n"
    )
    told = await cli("pending", "--url", "ws://127.0.0.1:9/ws", cwd=tmp_path)
    assert not told.stderr.decode().startswith("connecting")
    bad = await cli("pending", cwd=tmp_path, ORCHESTRATOR_URL="http://127.0.0.1:9/ws")
    assert bad.stderr.decode().startswith("error: $ORCHESTRATOR_URL: must be a WebSocket URL")
