"""The h11 bridge that serves `/mcp` (server/asgi.py) and the front door's routing
(server/front.py), over trio's in-memory streams: keep-alive, bodies, streamed
answers, a client leaving mid-answer, refusals and bounds."""

from __future__ import annotations

from collections.abc import MutableMapping
from typing import Any

import pytest
import trio
import trio.testing

from orchestrator.server.asgi import BODY_SECONDS, HEAD_SECONDS, MAX_HEAD_BYTES, serve_http
from orchestrator.server.front import MAX_HEAD_BYTES as FRONT_HEAD_BYTES
from orchestrator.server.front import request_path


async def echo(scope: MutableMapping[str, Any], receive: Any, send: Any) -> None:
    """Answers the body it read, in two pieces, with the path and query."""
    body = b""
    while True:
        message = await receive()
        body += message.get("body", b"")
        if not message.get("more_body"):
            break
    await send(
        {
            "type": "http.response.start",
            "status": 200,
            "headers": [(b"x-path", scope["path"].encode())],
        }
    )
    await send({"type": "http.response.body", "body": b"got:", "more_body": True})
    await send({"type": "http.response.body", "body": body + b"|" + scope["query_string"]})


async def exchange(app: Any, data: bytes, *, close: bool = True) -> bytes:
    client, server = trio.testing.memory_stream_pair()
    out = b""
    async with trio.open_nursery() as nursery:
        nursery.start_soon(lambda: serve_http(server, app, server=("127.0.0.1", 1), client=None))
        await client.send_all(data)
        if close:
            await client.send_eof()
        with trio.fail_after(5):
            while chunk := await client.receive_some():
                out += chunk
    return out


async def test_requests_on_one_connection_with_bodies_and_streamed_answers() -> None:
    one = b"POST /mcp?a=1 HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello"
    two = (
        b"POST /mcp HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
        b"Transfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n"
    )
    out = await exchange(echo, one + two, close=False)
    assert out.count(b"HTTP/1.1 200") == 2
    assert b"x-path: /mcp" in out
    assert b"got:" in out and b"hello|a=1" in out and b"abc|" in out


async def test_a_client_that_leaves_mid_answer_is_told_to_the_app() -> None:
    told: list[str] = []

    async def forever(scope: Any, receive: Any, send: Any) -> None:
        await receive()
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"data: 1\n\n", "more_body": True})
        told.append((await receive())["type"])

    client, server = trio.testing.memory_stream_pair()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(lambda: serve_http(server, forever, server=None, client=None))
        await client.send_all(b"GET /mcp HTTP/1.1\r\nHost: x\r\n\r\n")
        seen = b""
        while b"data: 1" not in seen:
            seen += await client.receive_some()
        await client.aclose()
    assert told == ["http.disconnect"]


async def test_an_answer_without_reading_the_body_keeps_the_connection() -> None:
    async def refuse(scope: Any, receive: Any, send: Any) -> None:
        await send(
            {"type": "http.response.start", "status": 401, "headers": [(b"content-length", b"0")]}
        )
        await send({"type": "http.response.body", "body": b""})

    request = b"POST /mcp HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nabc"
    out = await exchange(refuse, request * 2)
    assert out.count(b"HTTP/1.1 401") == 2


async def test_bad_requests_are_refused_with_a_status_and_the_app_never_runs() -> None:
    ran: list[bool] = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        ran.append(True)

    huge = b"GET /mcp HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * MAX_HEAD_BYTES  # and no end
    assert (await exchange(app, huge, close=False)).startswith(b"HTTP/1.1 431")
    assert (await exchange(app, b"NOT HTTP AT ALL\r\n\r\n")).startswith(b"HTTP/1.1 400")
    assert ran == []


async def test_an_app_that_fails_before_answering_is_a_500() -> None:
    async def broken(scope: Any, receive: Any, send: Any) -> None:
        raise RuntimeError("boom")

    out = await exchange(broken, b"GET /mcp HTTP/1.1\r\nHost: x\r\n\r\n")
    assert out.startswith(b"HTTP/1.1 500") and b"boom" not in out


async def test_an_idle_connection_is_closed(autojump_clock: trio.abc.Clock) -> None:
    client, server = trio.testing.memory_stream_pair()
    with trio.fail_after(120):
        await serve_http(server, echo, server=None, client=None)  # no request ever comes
    assert await client.receive_some() == b""


async def test_a_dripped_body_is_cut_off_at_its_deadline(autojump_clock: trio.abc.Clock) -> None:
    """One byte every 20 s never trips a per-read timeout: the whole body has a
    deadline, then the request gets a 408 and the connection is closed."""
    client, server = trio.testing.memory_stream_pair()
    out = b""
    async with trio.open_nursery() as nursery:
        nursery.start_soon(lambda: serve_http(server, echo, server=None, client=None))
        started = trio.current_time()
        await client.send_all(b"POST /mcp HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n")

        async def drip() -> None:
            for _ in range(100):
                await trio.sleep(20)
                try:
                    await client.send_all(b"x")
                except trio.BrokenResourceError:
                    return

        nursery.start_soon(drip)
        while chunk := await client.receive_some():
            out += chunk
        nursery.cancel_scope.cancel()
    assert out.startswith(b"HTTP/1.1 408"), out
    assert trio.current_time() - started <= BODY_SECONDS + 20


async def test_a_dripped_head_on_a_kept_connection_is_closed(
    autojump_clock: trio.abc.Clock,
) -> None:
    client, server = trio.testing.memory_stream_pair()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(lambda: serve_http(server, echo, server=None, client=None))
        await client.send_all(b"GET /mcp HTTP/1.1\r\nHost: x\r\n\r\n")
        out = b""
        while not out.endswith(b"0\r\n\r\n"):  # the whole (chunked) answer
            out += await client.receive_some()
        started = trio.current_time()
        for byte in b"GET /mcp HTTP/1.1\r\nHost: x":  # a byte a second, never ending
            try:
                await client.send_all(bytes([byte]))
            except trio.BrokenResourceError:
                break
            await trio.sleep(1)
        assert await client.receive_some() == b""
        assert trio.current_time() - started <= HEAD_SECONDS + 2


@pytest.mark.parametrize(
    ("peeked", "expected"),
    [
        (b"POST /mcp HTTP/1.1\r\nHost: x\r\n\r\n", b"/mcp"),
        (b"GET /mcp?token=t HTTP/1.1\r\n\r\n", b"/mcp"),
        (b"POST /ag-ui/planner HTTP/1.1\r\nHost: x\r\n\r\n{body", b"/ag-ui/planner"),
        (b"GET /ws HTTP/1.1\n\n", b"/ws"),
        (b"garbage\r\n", b""),
        (b"POST /mc", None),  # the rest of the line has not arrived
        (b"POST /mcp HTTP/1.1\r\nHost: x\r\n", None),  # nor the rest of the head
        (b"G" * FRONT_HEAD_BYTES, b""),  # too long to be a head: refused (431)
        (b"GET /ws HTTP/1.1\r\nX: " + b"y" * FRONT_HEAD_BYTES, b""),
    ],
)
def test_the_front_door_reads_the_request_path(peeked: bytes, expected: bytes | None) -> None:
    assert request_path(peeked) == expected


def test_routes_match_a_path_or_below_it_only() -> None:
    from orchestrator.server.front import _serve_of

    async def mcp(stream: Any) -> None: ...

    async def agui(stream: Any) -> None: ...

    routes = [(b"/mcp", mcp), (b"/ag-ui", agui)]
    assert _serve_of(b"/mcp", routes) is mcp and _serve_of(b"/mcp/", routes) is mcp
    assert _serve_of(b"/ag-ui/planner", routes) is agui
    assert _serve_of(b"/mcpx", routes) is None and _serve_of(b"/ws", routes) is None
