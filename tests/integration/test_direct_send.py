"""Frames written by `direct_send` are exactly what `ws.send()` would have sent."""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

import pytest
import trio
from websockets.client import ClientProtocol
from websockets.extensions.permessage_deflate import enable_client_permessage_deflate
from websockets.frames import Frame, Opcode
from websockets.http11 import Response
from websockets.trio.client import connect
from websockets.trio.server import ServerConnection, serve
from websockets.uri import parse_uri

from orchestrator.server import direct_send
from tests.server_helpers import demo_config, read_until_end, recv, replay, request, running_server

pytestmark = pytest.mark.trio


async def test_text_frame_is_what_websockets_makes_without_extensions() -> None:
    for size in (0, 1, 125, 126, 127, 65535, 65536, 70000):
        payload = b"x" * size
        assert direct_send.text_frame(payload) == Frame(Opcode.TEXT, payload).serialize(
            mask=False, extensions=[]
        )


@pytest.mark.parametrize("compression", ["deflate", None])
async def test_direct_and_ordinary_sends_interleave_on_one_compression_context(
    compression: str | None,
) -> None:
    """Frames sent by `ws.send`, compressed directly and uncompressed directly, mixed."""
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
            rest = direct_send.write_now(ws, fd, frame, compress=i % 3 == 1)
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


def frame_heads(data: bytes) -> list[tuple[bool, int]]:
    """(RSV1 = compressed, payload length on the wire) of each whole text frame in `data`."""
    heads, at = [], 0
    while at + 2 <= len(data):
        first, size = data[at], data[at + 1] & 0x7F
        at += 2
        if size == 126:
            size, at = int.from_bytes(data[at : at + 2]), at + 2
        elif size == 127:
            size, at = int.from_bytes(data[at : at + 8]), at + 8
        if first & 0x0F == 1:
            heads.append((bool(first & 0x40), size))
        at += size
    return heads


async def test_small_frames_go_uncompressed_and_big_ones_compressed(tmp_path: Path) -> None:
    """`server.compression_threshold`: the bytes on the wire, read below websockets."""
    config = demo_config(tmp_path, token_delay=0.002, server={"compression_threshold": 1024})
    async with running_server(config) as server:
        uri = parse_uri(server.url)
        stream = await trio.open_tcp_stream(uri.host, uri.port)
        protocol = ClientProtocol(
            uri, extensions=enable_client_permessage_deflate(None), max_size=None
        )
        protocol.send_request(protocol.connect())
        raw = b""
        async with stream:
            await stream.send_all(b"".join(protocol.data_to_send()))
            while not any(isinstance(e, Response) for e in protocol.events_received()):
                protocol.receive_data(await stream.receive_some())
            assert protocol.extensions, "permessage-deflate was negotiated"
            run = {"op": "run", "id": 1, "agent": "planner", "input": "q"}
            protocol.send_text(json.dumps(run).encode())
            await stream.send_all(b"".join(protocol.data_to_send()))
            texts: list[dict[str, object]] = []
            sizes: list[int] = []
            with trio.fail_after(20):
                while not texts or texts[-1].get("op") != "end":
                    data = await stream.receive_some()
                    raw += data
                    protocol.receive_data(data)
                    payloads = [
                        bytes(e.data)
                        for e in protocol.events_received()
                        if isinstance(e, Frame) and e.opcode is Opcode.TEXT
                    ]
                    sizes += map(len, payloads)
                    texts += map(json.loads, payloads)
        heads = frame_heads(raw)
        assert len(heads) == len(texts) > 10
        assert [compressed for compressed, _ in heads] == [size >= 1024 for size in sizes]
        assert any(size >= 1024 for size in sizes) and any(size < 1024 for size in sizes)
        seqs = [e["seq"] for t in texts if t["op"] == "events" for e in t["events"]]  # type: ignore[attr-defined]
        assert seqs == list(range(1, len(seqs) + 1))


async def test_many_live_watchers_with_mixed_filters_get_exactly_their_events(
    tmp_path: Path,
) -> None:
    """Watchers that follow the journal (shared frames per sub and filter) miss nothing."""
    config = demo_config(tmp_path, token_delay=0.0005)
    shapes: list[dict[str, Any]] = [
        {},
        {},
        {"filter": {"maxDepth": 1}},
        {"filter": {"maxDepth": 1}},
        {"filter": {"types": ["TOOL_CALL", "TOOL_RESULT"]}},
        {"detail": "status"},
        {"detail": "blocks"},
    ]
    async with running_server(config) as server, connect(server.url, max_size=None) as ws:
        ack = await request(ws, op="run", id=1, agent="planner", input="watchers")
        run_id = ack["runId"]
        got: dict[int, list[dict[str, object]]] = {}

        async def watch(index: int, shape: dict[str, Any], compression: str | None) -> None:
            async with connect(server.url, max_size=None, compression=compression) as w:
                sub_ack = await request(w, op="subscribe", id=1, runId=run_id, **shape)
                got[index], end = await read_until_end(w, sub_ack["sub"])
                assert end["status"] == "completed"

        async with trio.open_nursery() as nursery:
            for index in range(3 * len(shapes)):
                shape = shapes[index % len(shapes)]
                nursery.start_soon(watch, index, shape, "deflate" if index % 2 else None)
        events, _ = await read_until_end(ws, ack["sub"])
        replays = [await replay(server.url, run_id, **shape) for shape in shapes]
    assert [e["seq"] for e in events] == list(range(1, len(events) + 1))
    assert replays[0] == events
    for index, received in got.items():
        shape = shapes[index % len(shapes)]
        assert received and received == replays[index % len(shapes)], shape
