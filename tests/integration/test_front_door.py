"""The front door under unauthenticated floods (issue 47): half-sent request heads and
slowly dripped ones hold no HTTP slot and cannot starve anyone — the oldest of too
many pending heads is dropped, a head must arrive whole in time, and a body too."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
import trio
from websockets.trio.client import connect

import orchestrator.server.asgi as asgi
import orchestrator.server.front as front
from tests.server_helpers import demo_config, request, running_server

pytestmark = pytest.mark.trio


async def closed_by_server(stream: trio.SocketStream) -> bool:
    """Has the server closed this connection (EOF or reset) without a word?"""
    with trio.move_on_after(0.01):
        try:
            return await stream.receive_some(100) == b""
        except trio.BrokenResourceError:
            return True
    return False


async def test_half_sent_heads_are_dropped_oldest_first_and_starve_nobody(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(front, "MAX_PENDING_HEADS", 40)
    monkeypatch.setattr(front, "HEAD_SECONDS", 600.0)  # only the cap drops them here
    async with running_server(demo_config(tmp_path)) as server:
        flood = []
        for _ in range(60):  # 20 more than may wait: the first 20 go
            stream = await trio.open_tcp_stream("127.0.0.1", server.port)
            await stream.send_all(b"GET /ws")
            flood.append(stream)
        with trio.fail_after(30):
            while sum([await closed_by_server(s) for s in flood[:20]]) < 20:  # noqa: ASYNC110
                await trio.sleep(0.05)  # (the server's doing: nothing here to wait on)
        assert not any([await closed_by_server(s) for s in flood[25:]])
        # Meanwhile (the flood still pending) a request and a handshake get through.
        async with httpx.AsyncClient() as http:
            health = await http.get(f"http://127.0.0.1:{server.port}/healthz", timeout=10)
        assert health.status_code == 200
        async with connect(server.url) as ws:
            assert (await request(ws, op="agents", id=1))["op"] == "agents"
        for stream in flood:
            await stream.aclose()


async def test_a_burst_of_honest_clients_is_not_cut_by_the_slow_head_defence(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 57, defect 13: 300 clients connect at once (many more than may be pending:
    the server has accepted them all before any head arrives), then each sends its
    whole head: every one is answered, none dropped as if it were slow."""
    monkeypatch.setattr(front, "MAX_PENDING_HEADS", 16)
    async with running_server(demo_config(tmp_path)) as server:
        streams = [await trio.open_tcp_stream("127.0.0.1", server.port) for _ in range(300)]
        await trio.sleep(0.5)  # (each accepted, and found with nothing to read yet)
        head = f"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1:{server.port}\r\n\r\n".encode()
        answers: list[bytes] = []

        async def ask(stream: trio.SocketStream) -> None:
            await stream.send_all(head)
            got = b""
            with trio.move_on_after(30):
                while b"\r\n\r\n" not in got and (chunk := await stream.receive_some()):
                    got += chunk
            answers.append(got)
            await stream.aclose()

        async with trio.open_nursery() as nursery:
            for stream in streams:
                nursery.start_soon(ask, stream)
        assert sum(a.startswith(b"HTTP/1.1 200") for a in answers) == 300, [
            a[:40] for a in answers if not a.startswith(b"HTTP/1.1 200")
        ][:3]


async def test_a_head_that_does_not_arrive_in_time_is_dropped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(front, "HEAD_SECONDS", 0.5)
    async with running_server(demo_config(tmp_path)) as server:
        stream = await trio.open_tcp_stream("127.0.0.1", server.port)
        await stream.send_all(b"GET /ws HTTP/1.1\r\nHost: x")  # …and never the rest
        with trio.fail_after(30):
            while not await closed_by_server(stream):  # noqa: ASYNC110
                await trio.sleep(0.05)  # (the server's doing: nothing here to wait on)
        await stream.aclose()


async def test_slow_heads_take_no_http_slot(tmp_path: Path) -> None:
    """1,001 connections dripping a POST's headers made every HTTP door answer 503:
    a connection routed before its head was whole took a slot for a minute."""
    config = demo_config(
        tmp_path,
        server={"ag_ui": True, "max_connections": 10, "tokens": [{"name": "a", "token": "t-a"}]},
    )
    async with running_server(config) as server:
        slow = []
        for _ in range(30):
            stream = await trio.open_tcp_stream("127.0.0.1", server.port)
            await stream.send_all(b"POST /ag-ui/planner HTTP/1.1\r\nH")
            slow.append(stream)
        await trio.sleep(0.2)
        async with httpx.AsyncClient() as http:
            answer = await http.post(
                f"http://127.0.0.1:{server.port}/ag-ui/planner",
                headers={"Authorization": "Bearer t-a"},
                json={"threadId": "t", "runId": "r", "messages": []},
                timeout=10,
            )
        assert answer.status_code != 503, answer.text
        for stream in slow:
            await stream.aclose()


async def test_a_head_over_the_limit_is_a_431(tmp_path: Path) -> None:
    async with running_server(demo_config(tmp_path)) as server:
        stream = await trio.open_tcp_stream("127.0.0.1", server.port)
        await stream.send_all(b"GET /ws HTTP/1.1\r\nX: " + b"y" * (20 * 1024))
        got = b""
        with trio.fail_after(10):
            while chunk := await stream.receive_some():
                got += chunk
        await stream.aclose()
        assert got.startswith(b"HTTP/1.1 431"), got


async def test_a_body_dripped_on_a_door_is_cut_off(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(asgi, "BODY_SECONDS", 1.0)
    config = demo_config(
        tmp_path, server={"ag_ui": True, "tokens": [{"name": "a", "token": "t-a"}]}
    )
    async with running_server(config) as server:
        stream = await trio.open_tcp_stream("127.0.0.1", server.port)
        host = f"Host: 127.0.0.1:{server.port}\r\n".encode()
        await stream.send_all(
            b"POST /ag-ui/planner HTTP/1.1\r\n" + host + b"Authorization: Bearer t-a\r\n"
            b"Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n{"
        )
        got = b""

        async def drip() -> None:
            while True:
                await trio.sleep(0.3)
                try:
                    await stream.send_all(b" ")
                except (trio.BrokenResourceError, trio.ClosedResourceError):
                    return

        async with trio.open_nursery() as nursery:
            nursery.start_soon(drip)
            with trio.fail_after(30):
                try:
                    while chunk := await stream.receive_some():
                        got += chunk
                except trio.BrokenResourceError:
                    pass
            nursery.cancel_scope.cancel()
        await stream.aclose()
        assert got.startswith(b"HTTP/1.1 408"), got
