"""How `orchestrator serve` starts (issue 32): one journal, one owner — a second
server on a journal a live process owns refuses at once and changes nothing, a
holder that died never blocks the next start, the port is bound before anything is
resumed — the line it prints, and its access log, off by default.

Real `orchestrator serve` processes (SQLite, and Redis without `cluster:`), and a
server in this process where a process boundary adds nothing.
"""

from __future__ import annotations

import functools
import json
import os
import signal
import socket
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import msgspec
import pytest
import trio
from websockets.trio.client import connect

from orchestrator.config import load_config
from orchestrator.server.app import serve
from orchestrator.storage.owner import JournalInUse
from tests.helpers import REPO
from tests.integration.test_server_lifecycle import serve_process, start_serve_process
from tests.redis_helpers import redis_url  # noqa: F401  (fixture)
from tests.server_helpers import demo_config, recv, replay, request, running_server

pytestmark = pytest.mark.trio


async def second_serve(config: Path, port: int = 0) -> tuple[int, str]:
    """`orchestrator serve` that is expected to refuse: its exit code and stderr."""
    command = [sys.executable, "-m", "orchestrator", "serve", "--config", str(config)]
    with trio.fail_after(30):
        done = await trio.run_process(
            [*command, "--port", str(port)],
            capture_stdout=True,
            capture_stderr=True,
            check=False,
            env={**os.environ, "PYTHONPATH": str(REPO)},
        )
    return done.returncode, done.stderr.decode()


def stored(db: Path) -> tuple[list[tuple[Any, ...]], int]:
    """The runs table and the number of events in the journal file."""
    with sqlite3.connect(db) as conn:
        runs = conn.execute("SELECT run_id, status, last_seq FROM runs ORDER BY run_id").fetchall()
        events = conn.execute("SELECT COUNT(*) FROM events").fetchone()[0]
    return runs, events


async def test_a_second_server_on_a_live_servers_journal_refuses_and_changes_nothing(
    tmp_path: Path,
) -> None:
    config = tmp_path / "server.yaml"
    demo_config(tmp_path, token_delay=0.05, storage="sqlite:///journal.db")
    async with trio.open_nursery() as nursery:
        first, url = await start_serve_process(nursery, config)
        try:
            async with connect(url, max_size=None) as ws:
                ack = await request(ws, op="run", id=1, agent="planner", input="a long one")
                seen: list[dict[str, Any]] = []
                while len(seen) < 20:
                    seen += (await recv(ws)).get("events", [])
                before = stored(tmp_path / "journal.db")
                code, err = await second_serve(config)
                assert code == 2, err
                (line,) = err.strip().splitlines()
                journal = (tmp_path / "journal.db").resolve()
                port = url.split(":")[2].split("/")[0]
                assert line.startswith(f"error: journal {journal} is in use by pid {first.pid}")
                assert f"(127.0.0.1:{port})" in line
                # It changed nothing: no resume, no write, no `interrupted` marker.
                runs_after, _ = stored(tmp_path / "journal.db")
                assert [r[:2] for r in runs_after] == [r[:2] for r in before[0]]
                # The first server is fine: healthy, and its run completes.
                base = url.replace("ws://", "http://").removesuffix("/ws")
                async with httpx.AsyncClient() as http:
                    assert (await http.get(f"{base}/healthz")).json() == {"status": "ok"}
                while True:
                    frame = await recv(ws)
                    seen += frame.get("events", [])
                    if frame["op"] == "end":
                        break
                assert frame["status"] == "completed"
                assert [e["seq"] for e in seen] == list(range(1, len(seen) + 1))
                assert "RUN_RESUMED" not in {e["type"] for e in seen}
            first.send_signal(signal.SIGKILL)
            await first.wait()
        finally:
            if first.returncode is None:
                first.kill()
    # A holder that died (kill -9) does not block the next start.
    async with trio.open_nursery() as nursery:
        again, url = await start_serve_process(nursery, config)
        try:
            assert (await replay(url, ack["runId"]))[-1]["type"] == "RUN_FINISHED"
        finally:
            again.send_signal(signal.SIGTERM)


async def test_a_start_that_cannot_listen_resumes_nothing(tmp_path: Path) -> None:
    """The run left running by a killed server stays as it was while the next start
    cannot bind its port; the start after that resumes it."""
    config = tmp_path / "server.yaml"
    demo_config(tmp_path, token_delay=0.05, storage="sqlite:///journal.db")
    async with trio.open_nursery() as nursery:
        first, url = await start_serve_process(nursery, config)
        async with connect(url, max_size=None) as ws:
            ack = await request(ws, op="run", id=1, agent="planner", input="interrupted")
            seen: list[dict[str, Any]] = []
            while len(seen) < 20:
                seen += (await recv(ws)).get("events", [])
            first.send_signal(signal.SIGKILL)
        await first.wait()
    before = stored(tmp_path / "journal.db")
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        code, err = await second_serve(config, port)
    assert code == 2
    assert err.strip() == f"error: cannot listen on 127.0.0.1:{port}: address already in use"
    assert stored(tmp_path / "journal.db") == before  # not resumed, not touched
    lock = json.loads((tmp_path / "journal.db.lock").read_bytes())
    assert lock["pid"] == first.pid  # the dead holder's note: nobody claimed it since
    async with trio.open_nursery() as nursery:
        again, url = await start_serve_process(nursery, config, port)
        try:
            events = await replay(url, ack["runId"])
        finally:
            again.send_signal(signal.SIGTERM)
    assert [e["type"] for e in events].count("RUN_RESUMED") == 1
    assert events[-1]["data"]["status"] == "completed"


async def test_two_servers_in_one_process_on_one_journal(tmp_path: Path) -> None:
    """The lock is per open file, so it holds within one process too."""
    config = demo_config(tmp_path, storage="sqlite:///journal.db")
    async with running_server(config) as first:
        with pytest.raises(JournalInUse) as refused, trio.fail_after(10):
            await serve(config)
        assert f"pid {os.getpid()} (127.0.0.1:{first.port})" in str(refused.value)


async def test_a_redis_journal_has_one_server_too(
    tmp_path: Path,
    redis_url: str,  # noqa: F811
) -> None:
    """Without `cluster:`, a Redis journal is claimed with a lease: a live holder
    refuses the next start; one that died on this host is taken over at once; a
    server whose claim was taken writes nothing more (fenced)."""
    config = tmp_path / "server.yaml"
    demo_config(tmp_path, token_delay=0.05, storage={"url": redis_url, "durability": "relaxed"})
    async with trio.open_nursery() as nursery:
        first, _ = await start_serve_process(nursery, config)
        code, err = await second_serve(config)
        assert code == 2
        assert f"is in use by pid {first.pid}" in err and "claim expires within" in err
        first.send_signal(signal.SIGKILL)
        await first.wait()
    with trio.fail_after(5):  # at once, not after the 10 s lease
        async with trio.open_nursery() as nursery:
            again, _ = await start_serve_process(nursery, config)
            again.send_signal(signal.SIGTERM)
            await again.wait()
    # Fencing: a server whose claim another took writes nothing more.
    import coredis

    loaded = load_config(config)
    prefix = redis_url.split("prefix=", 1)[1]
    async with (
        running_server(loaded) as server,
        coredis.Redis.from_url(redis_url.split("?", 1)[0]) as client,
    ):
        holder = json.loads(await client.get(f"{prefix}owner") or b"{}")
        assert holder["pid"] == os.getpid()
        await client.set(f"{prefix}owner", msgspec.json.encode({**holder, "token": "x"}))
        async with connect(server.url, max_size=None) as ws:
            refused = await request(ws, op="run", id=1, agent="critic", input="fenced")
        assert refused["op"] == "error" and "taken over" in refused["message"], refused
        run_ids = await client.hkeys(f"{prefix}runs")
        assert not run_ids  # nothing of it was written
        await client.delete([f"{prefix}owner"])


async def test_serve_says_where_its_journal_is(tmp_path: Path) -> None:
    """The start line names the file a person can open (it said `sqlite:///journal.db`
    while the file was next to the config)."""
    config = tmp_path / "server.yaml"
    demo_config(tmp_path, storage="sqlite:///data/journal.db")
    async with trio.open_nursery() as nursery:
        proc, line = await serve_process(nursery, config)
        proc.send_signal(signal.SIGTERM)
    path = (tmp_path / "data" / "journal.db").resolve()
    assert line.splitlines()[0].strip().endswith(f"(storage: {path})")


@pytest.mark.parametrize("flag", [[], ["--access-log"]])
async def test_requests_are_not_logged_one_by_one_unless_asked(
    tmp_path: Path, flag: list[str]
) -> None:
    """Every HTTP request was a log line at INFO; an access log is off by default."""
    config = tmp_path / "server.yaml"
    demo_config(tmp_path)
    command = [sys.executable, "-m", "orchestrator", "serve", "--config", str(config)]
    async with trio.open_nursery() as nursery:
        proc: trio.Process = await nursery.start(
            functools.partial(
                trio.run_process,
                [*command, "--port", "0", *flag],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                env={**os.environ, "PYTHONPATH": str(REPO)},
                check=False,
            )
        )
        assert proc.stdout is not None and proc.stderr is not None
        line = b""
        with trio.fail_after(20):
            while b"\n" not in line:
                line += await proc.stdout.receive_some(1000)
        url = line.decode().split()[3].replace("ws://", "http://").removesuffix("/ws")
        async with httpx.AsyncClient() as http:
            for _ in range(3):
                assert (await http.get(f"{url}/healthz")).status_code == 200
        proc.send_signal(signal.SIGTERM)
        err = b""
        with trio.fail_after(20):
            async for chunk in proc.stderr:
                err += chunk
    logged = err.decode().count("HTTP response sent")
    assert logged == (3 if flag else 0), err.decode()
