"""The real server on trio memory streams: every door, no socket, no real time needed.

`memory_server(config)` starts the server exactly as `serve` does (the same front door,
websockets' server, the HTTP endpoints), accepting from a `MemoryListener` instead of
a bound socket. While it runs, `trio.open_tcp_stream` to its address is answered with
one end of a `memory_stream_pair`: websockets' client, `orchestrator.client.Client`,
httpx (on trio) and the `mcp` and A2A SDK clients reach it by its URL unchanged, and
another in-memory server reaches it too (remote agents). Nothing waits on a socket,
so tests may run under `MockClock(autojump_threshold=0)` (pytest-trio's
`autojump_clock` fixture): a 10 s timeout takes no time at all.

What needs a real socket stays on `tests.server_helpers.running_server`: flow control
(memory streams buffer without bound), a client in another thread's event loop or in
another process, TLS.
"""

from __future__ import annotations

import functools
import itertools
import math
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import trio
import trio.testing

from orchestrator.config import ServerConfig
from orchestrator.server.app import RunningServer, serve

__all__ = ["MemoryListener", "memory_server"]

HOST = "127.0.0.1"
_PORTS = itertools.count(20001)
"""Addresses of in-memory servers: below the kernel's ephemeral ports (32768 up), so a
real server of the same test (bound to port 0) never has one of them."""
_LISTENING: dict[tuple[str, int], MemoryListener] = {}
_real_open_tcp_stream = trio.open_tcp_stream


class MemoryListener(trio.abc.Listener[trio.abc.Stream]):
    """Connections made with `connect()` are accepted here, as a socket's would be."""

    def __init__(self) -> None:
        self._send, self._receive = trio.open_memory_channel[trio.abc.Stream](math.inf)

    async def connect(self) -> trio.abc.Stream:
        client, server = trio.testing.memory_stream_pair()
        try:
            self._send.send_nowait(server)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            raise OSError("connection refused (the in-memory server is closed)") from None
        await trio.lowlevel.checkpoint()
        return client

    async def accept(self) -> trio.abc.Stream:
        try:
            return await self._receive.receive()
        except (trio.EndOfChannel, trio.ClosedResourceError):
            raise trio.ClosedResourceError("the listener is closed") from None

    async def aclose(self) -> None:
        self._send.close()
        await self._receive.aclose()


async def _open_tcp_stream(host: str | bytes, port: int, **kwargs: Any) -> trio.abc.Stream:
    name = host.decode() if isinstance(host, bytes) else host
    listener = _LISTENING.get((name, port))
    if listener is None and name == "localhost":
        listener = _LISTENING.get((HOST, port))
    if listener is not None:
        return await listener.connect()
    return await _real_open_tcp_stream(host, port, **kwargs)


@asynccontextmanager
async def memory_server(config: ServerConfig) -> AsyncIterator[RunningServer]:
    """Start the server on memory streams; shut it down gracefully afterwards. Its
    `url` is `ws://127.0.0.1:<port>/ws` with a port no socket has."""
    listener = MemoryListener()
    address = (HOST, next(_PORTS))
    _LISTENING[address] = listener
    trio.open_tcp_stream = _open_tcp_stream  # type: ignore[assignment]  # (the docstring says why)
    try:
        async with trio.open_nursery() as nursery:
            server: RunningServer = await nursery.start(
                functools.partial(
                    serve, config, host=address[0], port=address[1], listeners=[listener]
                )
            )
            try:
                yield server
            finally:
                with trio.CancelScope(shield=True), trio.move_on_after(10):
                    await server.shutdown()
    finally:
        del _LISTENING[address]
        if not _LISTENING:
            trio.open_tcp_stream = _real_open_tcp_stream
