"""The storage goes away and comes back under a live run (a real Redis, killed -9).

A private `redis-server` (append-only file, `appendfsync always`, on a free
loopback port, in a temporary directory) is the journal. A run streams at a live
pace; the Redis process is killed with SIGKILL, kept down for a while, then
restarted on the same files. Reported per outage: what /healthz said during it,
whether a new run was refused, how the run ended, and whether a full replay after
recovery is gap-free and identical to what a live client saw. With an outage
longer than `storage.fail_runs_after_seconds` the run is failed instead of waiting.
"""

from __future__ import annotations

import json
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import trio
from websockets.trio.client import connect

from bench.soak.common import replay, request, row, running_server, talker, write_config
from tests.helpers import eventually


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def start_redis(directory: Path, port: int) -> trio.Process:
    proc = await trio.lowlevel.open_process(
        [
            "redis-server",
            "--port",
            str(port),
            "--bind",
            "127.0.0.1",
            "--dir",
            str(directory),
            "--appendonly",
            "yes",
            "--appendfsync",
            "always",
            "--save",
            "",
        ],
        stdout=subprocess.DEVNULL,
    )
    with trio.fail_after(10):
        while True:
            try:
                await trio.open_tcp_stream("127.0.0.1", port)
                return proc
            except OSError:
                await trio.sleep(0.05)


async def one(outage: float, fail_after: float) -> list[object]:
    root = Path(tempfile.mkdtemp())
    port = free_port()
    redis = await start_redis(root, port)
    config = write_config(
        root,
        {"talker": talker(3000, delay=0.003)},
        storage={"url": f"redis://127.0.0.1:{port}/0", "fail_runs_after_seconds": fail_after},
    )
    health_during = refused = "?"
    try:
        async with running_server(config) as server, httpx.AsyncClient() as http:
            base = f"http://127.0.0.1:{server.port}"
            async with connect(server.url, max_size=None) as ws:
                ack = await request(ws, op="run", agent="talker", input="x")
                live: list[dict[str, Any]] = []
                end: dict[str, Any] = {}
                async with trio.open_nursery() as nursery:

                    async def read() -> None:
                        nonlocal end
                        while True:
                            frame = json.loads(await ws.recv())
                            if frame["op"] == "events":
                                live.extend(frame["events"])
                            elif frame["op"] == "end":
                                end = frame
                                return

                    nursery.start_soon(read)
                    await trio.sleep(2)
                    redis.send_signal(signal.SIGKILL)
                    await redis.wait()
                    down_at = time.perf_counter()
                    with trio.move_on_after(5):
                        await eventually(lambda: not server.app.journal.writer.healthy)
                    health = await http.get(f"{base}/healthz")
                    health_during = str(health.status_code)
                    async with connect(server.url) as other:
                        reply = await request(other, op="run", agent="talker", input="y")
                        refused = reply.get("code", reply["op"])
                    await trio.sleep(max(0.0, outage - (time.perf_counter() - down_at)))
                    redis = await start_redis(root, port)
                    back_at = time.perf_counter()
                    await eventually(lambda: server.app.journal.writer.healthy, within=60)
                    recovered = time.perf_counter() - back_at
            replayed = await replay(server.url, ack["runId"])
            health_after = (await http.get(f"{base}/healthz")).status_code
        seqs = [e["seq"] for e in replayed]
        gap_free = seqs == list(range(1, len(seqs) + 1))
        same = replayed == live
        last = replayed[-1]["data"]
        outcome = last["status"] + (f" ({last['error'].split(':')[0]})" if "error" in last else "")
    finally:
        redis.send_signal(signal.SIGKILL)
        await redis.wait()
        shutil.rmtree(root, ignore_errors=True)
    return [
        f"{outage:g} s",
        f"{fail_after:g} s",
        health_during,
        refused,
        f"{recovered:.2f} s",
        health_after,
        outcome,
        f"{len(replayed):,}",
        "yes" if gap_free and same else "NO",
    ]


async def main() -> list[str]:
    if shutil.which("redis-server") is None:
        return ["redis-server is not installed: `apt-get install redis-server` to run this"]
    lines = [
        row(
            "outage",
            "fail runs after",
            "/healthz during",
            "new run during",
            "writes back after restart",
            "/healthz after",
            "run ended",
            "events",
            "replay = live, gap-free",
        ),
        row("---:", "---:", ":-:", ":-:", "---:", ":-:", ":-:", "---:", ":-:"),
    ]
    for outage, fail_after in ((3.0, 30.0), (5.0, 2.0)):
        lines.append(row(*await one(outage, fail_after)))
    return lines
