"""More agents than httpx's default pool (100 connections) stream from a real (fake)
provider at once: each model request is answered only once all of them are open, so
a pool that holds fewer connections than agents would never get there."""

from __future__ import annotations

import functools
import json
from pathlib import Path

import trio

from orchestrator.runtime.engine import Orchestrator
from tests.helpers import write_config

AGENTS = 120


def chunk(delta: dict[str, object], finish: str | None = None) -> bytes:
    body = {"id": "c", "object": "chat.completion.chunk", "created": 0, "model": "m"}
    body["choices"] = [{"index": 0, "delta": delta, "finish_reason": finish}]
    return b"data: " + json.dumps(body).encode() + b"\n\n"


async def test_more_agents_than_httpx_default_pool_stream_at_once(tmp_path: Path) -> None:
    open_now, all_open = 0, trio.Event()

    async def handle(stream: trio.SocketStream) -> None:
        nonlocal open_now
        data = b""
        while b"\r\n\r\n" not in data:
            data += await stream.receive_some(65536)
        open_now += 1
        if open_now == AGENTS:
            all_open.set()
        await all_open.wait()  # nobody is answered before everyone is connected
        body = chunk({"content": "here"}) + chunk({}, "stop") + b"data: [DONE]\n\n"
        await stream.send_all(
            b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
            b"content-length: %d\r\nconnection: close\r\n\r\n%s" % (len(body), body)
        )
        await stream.aclose()

    async with trio.open_nursery() as nursery:
        (listener,) = await nursery.start(
            functools.partial(trio.serve_tcp, handle, 0, host="127.0.0.1")
        )
        port = listener.socket.getsockname()[1]
        model = {"provider": "openai", "base_url": f"http://127.0.0.1:{port}/v1", "model": "m"}
        agents = {"solo": {"description": "d", "instructions": "i"}}
        config = write_config(
            tmp_path, agents, models={"default": model}, limits={"max_concurrent_runs": AGENTS}
        )
        async with Orchestrator.open(config) as orchestrator:
            results: list[str] = []

            async def one() -> None:
                result = await orchestrator.call("solo", "go")
                results.append(result.text or result.error or "")

            with trio.fail_after(20):
                async with trio.open_nursery() as runs:
                    for _ in range(AGENTS):
                        runs.start_soon(one)
        nursery.cancel_scope.cancel()
    assert results == ["here"] * AGENTS
