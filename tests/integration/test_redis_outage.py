"""A single server on a Redis journal through a Redis outage (issue 47), with a Redis
of the test's own (`redis-server` on a free port, no persistence): after Redis came
back empty, or after an outage that outlasted the server's claim with the data kept,
the server takes its claim again and goes on — runs start, live runs finish — where
it used to refuse every run as "taken over" until restarted."""

from __future__ import annotations

import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import trio
from websockets.trio.client import connect

import orchestrator.storage.owner as owner
from tests.server_helpers import demo_config, read_until_end, request, running_server

pytestmark = pytest.mark.trio


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class PrivateRedis:
    """A `redis-server` of this test's own, to stop, freeze and start again."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self.proc = subprocess.Popen(
            ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "no"],
            stdout=subprocess.DEVNULL,
        )  # fmt: skip
        for _ in range(200):
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.2) as s:
                    s.sendall(b"PING\r\n")
                    if s.recv(16).startswith(b"+PONG"):
                        return
            except OSError:
                pass
            time.sleep(0.02)  # (a fixture's setup, before any trio run)
        raise RuntimeError("redis-server did not start")

    def kill(self) -> None:
        assert self.proc is not None
        self.proc.kill()
        self.proc.wait()

    def signal(self, sig: int) -> None:
        assert self.proc is not None
        self.proc.send_signal(sig)


@pytest.fixture
def private_redis() -> Iterator[PrivateRedis]:
    if shutil.which("redis-server") is None:
        pytest.skip("needs redis-server (`apt-get install redis-server`, as .ci/run does)")
    redis = PrivateRedis(free_port())
    redis.start()
    yield redis
    if redis.proc is not None and redis.proc.poll() is None:
        redis.signal(signal.SIGCONT)
        redis.kill()


def config_on(tmp_path: Path, redis: PrivateRedis) -> Any:
    return demo_config(
        tmp_path,
        token_delay=0.02,
        storage={"url": f"redis://127.0.0.1:{redis.port}/0", "durability": "relaxed"},
    )


async def a_run_completes(url: str) -> None:
    """A new run is accepted and completes (retried while the server finds its feet)."""
    with trio.fail_after(60):
        while True:
            async with connect(url) as ws:
                ack = await request(ws, op="run", id=1, agent="critic", input="after the outage")
                if ack["op"] == "ack":
                    _, end = await read_until_end(ws, ack["sub"])
                    assert end["status"] == "completed", end
                    return
            assert ack["code"] == "unavailable", ack  # (storage still failing: retry)
            await trio.sleep(0.5)


async def test_redis_back_empty_the_server_takes_its_claim_again(
    tmp_path: Path, private_redis: PrivateRedis
) -> None:
    async with running_server(config_on(tmp_path, private_redis)) as server:
        async with connect(server.url) as ws:
            live = await request(ws, op="run", id=1, agent="planner", input="through it")
            assert live["op"] == "ack", live
            private_redis.kill()
            private_redis.start()  # the same port, no data: no claim, no events
            _, end = await read_until_end(ws, live["sub"])
        assert end["status"] == "completed", end  # the live run went on
        await a_run_completes(server.url)


async def test_an_outage_longer_than_the_claim_with_data_kept(
    tmp_path: Path, private_redis: PrivateRedis, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(owner, "OWNER_LEASE_SECONDS", 1.0)
    async with running_server(config_on(tmp_path, private_redis)) as server:
        await a_run_completes(server.url)
        private_redis.signal(signal.SIGSTOP)  # unreachable, its data kept
        await trio.sleep(2.5)  # the claim's 1 s passes meanwhile
        private_redis.signal(signal.SIGCONT)
        await a_run_completes(server.url)
