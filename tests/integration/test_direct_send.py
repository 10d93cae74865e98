"""Frames written by `direct_send` are exactly what `ws.send()` would have sent."""

from __future__ import annotations

import functools
import json
from pathlib import Path

import pytest
import trio
from websockets.trio.client import connect
from websockets.trio.server import ServerConnection, serve

from orchestrator.server import direct_send
from tests.server_helpers import demo_config, read_until_end, recv, replay, request, running_server

pytestmark = pytest.mark.trio


@pytest.mark.parametrize("compression", ["deflate", None])
async def test_direct_and_ordinary_sends_interleave_on_one_compression_context(
    compression: str | None,
) -> None:
    frames = [json.dumps({"n": i, "text": "w " * (i % 50)}).encode() for i in range(300)]
    direct = 0
    server_done = trio.Event()

    async def handler(ws: ServerConnection) -> None:
        nonlocal direct
        fd = direct_send.socket_fd(ws)
        assert fd is not None
        for i, frame in enumerate(frames):
            if i % 3 == 0:
                await ws.send(frame, text=True)
                continue
            rest = direct_send.write_now(ws, fd, frame)
            assert rest is not None
            direct += 1
            if rest:
                async with ws.send_lock:
                    await ws.stream.send_all(rest)
        await server_done.wait()

    async with trio.open_nursery() as nursery:
        server = await nursery.start(functools.partial(serve, handler, 0, compression=compression))
        port = server.listeners[0].socket.getsockname()[1]
        async with connect(f"ws://127.0.0.1:{port}", compression=compression) as client:
            got = [await client.recv(decode=False) for _ in frames]
        server_done.set()
        nursery.cancel_scope.cancel()
    assert got == frames
    assert direct == 200


async def test_a_frame_bigger_than_the_socket_takes_goes_whole() -> None:
    """The client reads nothing until the server has handed over a 16 MiB frame."""
    big = b'"' + b"x" * (16 * 1024 * 1024) + b'"'
    rests: list[int] = []
    sent = trio.Event()

    async def handler(ws: ServerConnection) -> None:
        fd = direct_send.socket_fd(ws)
        assert fd is not None
        rest = direct_send.write_now(ws, fd, big)
        assert rest is not None
        rests.append(len(rest))
        async with ws.send_lock:
            await ws.stream.send_all(rest)
        await ws.send(b'"after"', text=True)
        sent.set()
        await trio.sleep_forever()

    async with trio.open_nursery() as nursery:
        server = await nursery.start(functools.partial(serve, handler, 0, compression=None))
        port = server.listeners[0].socket.getsockname()[1]
        async with connect(f"ws://127.0.0.1:{port}", compression=None, max_size=None) as client:
            await trio.sleep(0.2)  # the server's write fills the socket buffers
            assert rests and rests[0] > 0, "the socket took 16 MiB at once"
            assert await client.recv(decode=False) == big
            assert await client.recv(decode=False) == b'"after"'
        await sent.wait()
        nursery.cancel_scope.cancel()


async def test_not_used_while_another_send_is_writing() -> None:
    seen: list[bytes | None] = []

    async def handler(ws: ServerConnection) -> None:
        fd = direct_send.socket_fd(ws)
        assert fd is not None
        async with ws.send_lock:  # as websockets holds it during send_all
            seen.append(direct_send.write_now(ws, fd, b'"x"'))
        seen.append(direct_send.write_now(ws, fd, b'"y"'))
        await trio.sleep_forever()

    async with trio.open_nursery() as nursery:
        server = await nursery.start(serve, handler, 0)
        port = server.listeners[0].socket.getsockname()[1]
        async with connect(f"ws://127.0.0.1:{port}") as client:
            assert await client.recv() == '"y"'
        nursery.cancel_scope.cancel()
    assert seen == [None, b""]


@pytest.mark.parametrize("direct", [True, False])
async def test_a_run_reaches_watchers_whole_either_way(tmp_path: Path, direct: bool) -> None:
    """Three watchers (one replaying, one unsubscribing mid-run) see the same events."""
    config = demo_config(tmp_path, token_delay=0.0005, server={"direct_send": direct})
    async with (
        running_server(config) as server,
        connect(server.url, max_size=None) as a,
        connect(server.url, max_size=None) as b,
    ):
        ack = await request(a, op="run", id=1, agent="planner", input="direct")
        b_ack = await request(b, op="subscribe", id=1, runId=ack["runId"])
        await b.send(json.dumps({"op": "unsubscribe", "id": 2, "sub": b_ack["sub"]}))
        events, end = await read_until_end(a, ack["sub"])
        assert end["status"] == "completed"
        assert [e["seq"] for e in events] == list(range(1, len(events) + 1))
        assert await replay(server.url, ack["runId"]) == events
        # b got its unsubscribe ack after whole frames only, and the socket still works.
        while (frame := await recv(b))["op"] != "ack":
            assert frame["op"] == "events"
        assert (await request(b, op="ping", id=3))["op"] == "pong"
