"""A provider that hangs, floods or sends garbage: the agent fails, the server does not.

A raw trio HTTP server on loopback answers the OpenAI-compatible endpoint in one
of three ways: `hang` (200 and headers, then nothing), `flood` (text deltas
without end), `garbage` (random bytes on an event-stream). For each, one run: how
it ended, the agent's errorType, how long it took, how many events it made, the
process's memory growth, and whether /healthz still answered.
"""

from __future__ import annotations

import functools
import json
import os
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import trio
import trio.lowlevel
from websockets.trio.client import connect

from bench.soak.common import request, row, rss_mib, running_server, write_config

HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n"
DELTA = (
    b'data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"m",'
    b'"choices":[{"index":0,"delta":{"content":"flood "},"finish_reason":null}]}\n\n'
)


async def provider(mode: str, stream: trio.SocketStream) -> None:
    try:
        await stream.receive_some(1 << 16)
        await stream.send_all(HEAD)
        if mode == "hang":
            await trio.sleep_forever()
        elif mode == "flood":
            while True:
                await stream.send_all(DELTA * 64)
        else:
            while True:
                await stream.send_all(os.urandom(4096))
                await trio.lowlevel.checkpoint()
    except (trio.BrokenResourceError, trio.ClosedResourceError):
        pass
    finally:
        await trio.aclose_forcefully(stream)


async def one(mode: str) -> list[object]:
    root = Path(tempfile.mkdtemp())
    async with trio.open_nursery() as nursery:
        listeners = await nursery.start(
            functools.partial(
                trio.serve_tcp, functools.partial(provider, mode), 0, host="127.0.0.1"
            )
        )
        port = listeners[0].socket.getsockname()[1]
        model = {
            "provider": "openai",
            "base_url": f"http://127.0.0.1:{port}/v1",
            "read_timeout": 3,
            "max_retries": 0,
        }
        agent = {"description": "d", "instructions": "i", "model": "remote"}
        config = write_config(
            root,
            {"victim": agent},
            models={"default": {"provider": "scripted"}, "remote": model},
            limits={"turn_timeout_seconds": 20},
        )
        async with running_server(config) as server, httpx.AsyncClient() as http:
            before = rss_mib()
            started = time.perf_counter()
            async with connect(server.url, max_size=None) as ws:
                ack = await request(ws, op="run", agent="victim", input="x", detail="status")
                events: list[dict[str, Any]] = []
                healthy = True
                while True:
                    parsed = json.loads(await ws.recv())
                    if parsed["op"] == "events":
                        events += parsed["events"]
                    elif parsed["op"] == "end":
                        break
                    healthy = (
                        healthy
                        and (await http.get(f"http://127.0.0.1:{server.port}/healthz")).status_code
                        == 200
                    )
            took = time.perf_counter() - started
            grown = rss_mib() - before
            log = server.app.journal.get(ack["runId"])
            total = log.committed
        nursery.cancel_scope.cancel()
    error: dict[str, Any] = next((e["data"] for e in events if e["type"] == "AGENT_ERROR"), {})
    return [
        mode,
        events[-1]["data"]["status"],
        error.get("errorType", "-"),
        f"{took:.1f}",
        f"{total:,}",
        f"{grown:+.0f}",
        "yes" if healthy else "NO",
    ]


async def main() -> list[str]:
    lines = [
        row(
            "provider", "run", "errorType", "seconds", "events journaled", "RSS MiB", "/healthz ok"
        ),
        row(":-", ":-:", ":-:", "---:", "---:", "---:", ":-:"),
    ]
    for mode in ("hang", "flood", "garbage"):
        lines.append(row(*await one(mode)))
    return lines
