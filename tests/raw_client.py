"""A WebSocket client that can misbehave: it sends, and reads only when told to.

Built on websockets' sans-I/O `ClientProtocol` over a bare trio TCP stream, so a
test controls exactly what reaches the socket and when (a real client library
keeps reading into its own buffers).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import trio
from websockets.client import ClientProtocol
from websockets.http11 import Response
from websockets.uri import parse_uri


class RawClient:
    """Handshaken connection: `send_text` frames; never reads unless asked."""

    def __init__(self, stream: trio.SocketStream, protocol: ClientProtocol) -> None:
        self.stream = stream
        self.protocol = protocol

    async def send_text(self, text: str) -> None:
        self.protocol.send_text(text.encode())
        for data in self.protocol.data_to_send():
            await self.stream.send_all(data)


@asynccontextmanager
async def raw_client(url: str, *, receive_buffer: int = 4096) -> AsyncIterator[RawClient]:
    """Connect and handshake; the socket's receive buffer is kept small."""
    uri = parse_uri(url)
    stream = await trio.open_tcp_stream(uri.host, uri.port)
    stream.setsockopt(trio.socket.SOL_SOCKET, trio.socket.SO_RCVBUF, receive_buffer)
    protocol = ClientProtocol(uri)
    protocol.send_request(protocol.connect())
    try:
        for data in protocol.data_to_send():
            await stream.send_all(data)
        with trio.fail_after(10):
            while True:
                protocol.receive_data(await stream.receive_some(4096))
                if any(isinstance(e, Response) for e in protocol.events_received()):
                    break
        yield RawClient(stream, protocol)
    finally:
        await trio.aclose_forcefully(stream)
