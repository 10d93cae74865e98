"""The real server on trio memory streams: every door, no socket, no real time needed.

`memory_server(config)` starts the server exactly as `serve` does (the same front door,
websockets' server, the HTTP endpoints), accepting from a `MemoryListener` instead of
a bound socket. While it runs, `trio.open_tcp_stream` to its address is answered with
one end of a `memory_stream_pair`: websockets' client, `orchestrator.client.Client`,
httpx (on trio; its pool takes a memory stream as open, having no socket to ask) and
the `mcp` and A2A SDK clients reach it by its URL unchanged, and
another in-memory server reaches it too (remote agents). Nothing waits on a socket,
so tests may run under `MockClock(autojump_threshold=0)`: a 10 s timeout takes no
time at all. `autojump` marks a test (or a module, as `pytestmark`) to run so.

What needs a real socket stays on `tests.server_helpers.running_server`: flow control
(memory streams buffer without bound), a client in another thread's event loop or in
another process, TLS.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import math
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
import trio
import trio.testing
from httpcore._backends.trio import TrioStream

from orchestrator.config import ServerConfig
from orchestrator.server.app import RunningServer, serve

__all__ = ["MemoryListener", "autojump", "autojump_run", "memory_server"]

HOST = "127.0.0.1"
_PORTS = itertools.count(20001)
"""Addresses of in-memory servers: below the kernel's ephemeral ports (32768 up), so a
real server of the same test (bound to port 0) never has one of them."""
_LISTENING: dict[tuple[str, int], MemoryListener] = {}
_real_open_tcp_stream = trio.open_tcp_stream
_real_extra_info = TrioStream.get_extra_info


def _extra_info(self: TrioStream, info: str) -> Any:
    """Httpcore asks a pooled connection whether it is readable (closed by the server)
    through its socket; a memory stream has none: it is taken as open."""
    if isinstance(self._stream, trio.SocketStream | trio.SSLStream):
        return _real_extra_info(self, info)
    return False if info == "is_readable" else None


_threads_of: dict[trio.testing.MockClock, int] = {}
_real_run_sync = trio.to_thread.run_sync


async def _run_sync_holding_the_clock(sync_fn: Any, *args: Any, **kwargs: Any) -> Any:
    """`trio.to_thread.run_sync`, with an autojump clock held still while the thread
    works: the run loop waiting for a thread (SQLite, a file tool, `trio.Path`) is not
    idle, and jumping then would fire timeouts no real time has reached."""
    clock = trio.lowlevel.current_clock()
    if not isinstance(clock, trio.testing.MockClock):
        return await _real_run_sync(sync_fn, *args, **kwargs)
    _hold(clock)
    try:
        return await _real_run_sync(sync_fn, *args, **kwargs)
    finally:
        _release(clock)


_real_start_thread_soon = trio.lowlevel.start_thread_soon


def _hold(clock: trio.testing.MockClock) -> None:
    _threads_of[clock] = _threads_of.get(clock, 0) + 1
    clock.autojump_threshold = math.inf


def _release(clock: trio.testing.MockClock) -> None:
    _threads_of[clock] -= 1
    if not _threads_of[clock]:
        del _threads_of[clock]
        clock.autojump_threshold = 0


def _start_thread_soon_holding_the_clock(fn: Any, deliver: Any, name: Any = None) -> None:
    """`trio.lowlevel.start_thread_soon` (SQLite's commits), the clock held still until
    the result is back in trio's thread."""
    try:
        clock = trio.lowlevel.current_clock()
        token = trio.lowlevel.current_trio_token()
    except RuntimeError:  # (called from outside trio)
        return _real_start_thread_soon(fn, deliver, name=name)
    if not isinstance(clock, trio.testing.MockClock):
        return _real_start_thread_soon(fn, deliver, name=name)
    _hold(clock)

    def delivered(result: Any) -> None:
        try:
            deliver(result)  # (schedules its own callback first: it runs first)
        finally:
            with contextlib.suppress(trio.RunFinishedError):  # (a thread left behind)
                token.run_sync_soon(_release, clock)

    return _real_start_thread_soon(fn, delivered, name=name)


def autojump_run(fn: Any, *, clock: trio.abc.Clock | None = None, **kwargs: Any) -> Any:
    """`trio.run` on a `MockClock(autojump_threshold=0)` (tests/conftest.py gives it to
    the tests marked `autojump`), held still while a thread works."""
    import trio._path

    trio.to_thread.run_sync = _run_sync_holding_the_clock  # type: ignore[assignment]
    trio.lowlevel.start_thread_soon = _start_thread_soon_holding_the_clock
    trio._path.run_sync = _run_sync_holding_the_clock  # type: ignore[attr-defined,assignment]
    try:
        clock = clock or trio.testing.MockClock(autojump_threshold=0)
        return trio.run(fn, clock=clock, **kwargs)
    finally:
        trio.to_thread.run_sync = _real_run_sync
        trio.lowlevel.start_thread_soon = _real_start_thread_soon
        trio._path.run_sync = _real_run_sync  # type: ignore[attr-defined]


autojump = pytest.mark.autojump
"""Run the test on a `MockClock(autojump_threshold=0)`, as pytest-trio's `autojump_clock`
fixture does for a test that names it (a `usefixtures` mark would not reach the clock)."""


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
    TrioStream.get_extra_info = _extra_info  # type: ignore[method-assign]
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
            TrioStream.get_extra_info = _real_extra_info  # type: ignore[method-assign]
