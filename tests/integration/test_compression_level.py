"""`server.compression_level` reaches the wire: the same replay costs fewer bytes at
level 9 than at level 1, and is the same events either way."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import trio
from websockets.client import ClientProtocol
from websockets.extensions.permessage_deflate import ClientPerMessageDeflateFactory
from websockets.frames import Frame, Opcode
from websockets.http11 import Response
from websockets.uri import parse_uri

from tests.memory_server import autojump, memory_server
from tests.server_helpers import demo_config, run_to_end

pytestmark = [pytest.mark.trio, autojump]


async def replay_bytes(url: str, run_id: str) -> tuple[int, list[dict[str, object]]]:
    """Bytes on the wire of a whole replay of the run, with deflate negotiated, and its
    events."""
    uri = parse_uri(url)
    stream = await trio.open_tcp_stream(uri.host, uri.port)
    deflate = ClientPerMessageDeflateFactory(client_max_window_bits=12)
    protocol = ClientProtocol(uri, extensions=[deflate])
    protocol.send_request(protocol.connect())
    wire, events = 0, []
    try:
        for data in protocol.data_to_send():
            await stream.send_all(data)
        subscribed = False
        with trio.fail_after(20):
            while True:
                data = await stream.receive_some(65536)
                wire += len(data) if subscribed else 0
                protocol.receive_data(data)
                for item in protocol.events_received():
                    if isinstance(item, Response):
                        assert "permessage-deflate" in item.headers["Sec-WebSocket-Extensions"]
                        subscribe = {"op": "subscribe", "id": 1, "runId": run_id}
                        protocol.send_text(json.dumps(subscribe).encode())
                        for out in protocol.data_to_send():
                            await stream.send_all(out)
                        subscribed = True
                    elif isinstance(item, Frame) and item.opcode is Opcode.TEXT:
                        frame = json.loads(bytes(item.data))
                        if frame["op"] == "events":
                            events += frame["events"]
                        elif frame["op"] == "end":
                            return wire, events
    finally:
        await trio.aclose_forcefully(stream)


async def test_the_level_reaches_the_wire(tmp_path: Path) -> None:
    seen = {}
    for level in (1, 9):
        root = tmp_path / str(level)
        root.mkdir()
        config = demo_config(root, server={"compression_level": level})
        async with memory_server(config) as server:
            run_id, events, _ = await run_to_end(server.url)
            seen[level] = await replay_bytes(server.url, run_id)
        assert [e["seq"] for e in seen[level][1]] == [e["seq"] for e in events]
    assert seen[9][0] < seen[1][0] * 0.9, (seen[1][0], seen[9][0])
