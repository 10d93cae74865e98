"""The provider streams' HTTP/1.1 transport (agents/providers/transport.py) against
real loopback servers that misbehave on purpose: reuse, servers that close, bodies
cut short, bad heads, limits, timeouts, and TLS records many to a read."""

from __future__ import annotations

import functools
import ssl
from collections.abc import Awaitable, Callable

import httpx
import pytest
import trio
import trustme

from agents.providers.transport import StreamTransport

Handler = Callable[[trio.abc.Stream], Awaitable[None]]


async def read_request(stream: trio.abc.Stream) -> bytes:
    """One request's head and its Content-Length body."""
    data = b""
    while b"\r\n\r\n" not in data:
        more = await stream.receive_some(65536)
        if not more:
            return b""
        data += more
    head, _, body = data.partition(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value)
    while len(body) < length:
        body += await stream.receive_some(65536)
    return head + b"\r\n\r\n" + body


def ok(body: bytes) -> bytes:
    return b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n\r\n%s" % (len(body), body)


async def serve(
    nursery: trio.Nursery, handler: Handler, context: ssl.SSLContext | None = None
) -> str:
    """A loopback server calling `handler` per connection; its base URL."""
    connections = 0

    async def per_connection(stream: trio.SocketStream) -> None:
        nonlocal connections
        connections += 1
        wrapped: trio.abc.Stream = stream
        if context is not None:
            wrapped = trio.SSLStream(stream, context, server_side=True)
        await handler(wrapped)

    (listener,) = await nursery.start(
        functools.partial(trio.serve_tcp, per_connection, 0, host="127.0.0.1")
    )
    port = listener.socket.getsockname()[1]
    return f"{'https' if context else 'http'}://127.0.0.1:{port}"


async def test_a_kept_alive_connection_is_reused_and_a_closed_one_replaced() -> None:
    opened: list[int] = []

    async def handler(stream: trio.abc.Stream) -> None:
        opened.append(1)
        for n in range(2):  # two requests, then the server closes the connection
            if not await read_request(stream):
                return
            await stream.send_all(ok(b"answer %d" % n))
        await stream.aclose()

    async with trio.open_nursery() as nursery:
        url = await serve(nursery, handler)
        async with httpx.AsyncClient(transport=StreamTransport()) as client:
            texts = [(await client.post(url + "/x", json={"n": n})).text for n in range(5)]
        nursery.cancel_scope.cancel()
    assert texts == ["answer 0", "answer 1", "answer 0", "answer 1", "answer 0"]
    assert len(opened) == 3


async def test_a_reused_connection_the_server_dropped_is_tried_once_more_anew() -> None:
    """The server takes the request on a kept-alive connection and closes it without
    a byte (it timed the connection out just then): sent again on a new one, once."""
    served = 0

    async def handler(stream: trio.abc.Stream) -> None:
        nonlocal served
        while await read_request(stream):
            served += 1
            if served == 2:
                await stream.aclose()
                return
            await stream.send_all(ok(b"fine"))

    async with trio.open_nursery() as nursery:
        url = await serve(nursery, handler)
        async with httpx.AsyncClient(transport=StreamTransport()) as client:
            assert (await client.post(url, content=b"1")).text == "fine"
            # (The pool's check before reuse sees an open connection: it is closed only
            # once the request is in.)
            assert (await client.post(url, content=b"2")).text == "fine"
        nursery.cancel_scope.cancel()
    assert served == 3


async def test_an_answer_sent_before_the_whole_request_was_read_is_the_response() -> None:
    """The server reads the head, answers 413 and closes with the body unread: the
    client's send fails (reset by peer), and the 413 is still what it gets, not a
    connection error (as with httpcore)."""

    async def handler(stream: trio.abc.Stream) -> None:
        data = b""
        while b"\r\n\r\n" not in data:
            data += await stream.receive_some(65536)
        await stream.send_all(
            b"HTTP/1.1 413 Payload Too Large\r\ncontent-length: 8\r\n"
            b"connection: close\r\n\r\ntoo long"
        )
        await trio.sleep(0.2)
        await trio.aclose_forcefully(stream)  # the body unread: a reset

    async with trio.open_nursery() as nursery:
        url = await serve(nursery, handler)
        async with httpx.AsyncClient(transport=StreamTransport()) as client:
            response = await client.post(url, content=b"x" * 16_000_000)
        nursery.cancel_scope.cancel()
    assert (response.status_code, response.text) == (413, "too long")


async def test_a_body_that_ends_with_the_connection_and_one_cut_short() -> None:
    async def handler(stream: trio.abc.Stream) -> None:
        request = await read_request(stream)
        if b"/eof" in request:  # HTTP/1.0 style: no length, the close ends it
            await stream.send_all(b"HTTP/1.1 200 OK\r\nconnection: close\r\n\r\nall of it")
        else:  # chunked, and the server dies in the middle
            await stream.send_all(
                b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n5\r\nhello\r\n3\r\nwo"
            )
        await stream.aclose()

    async with trio.open_nursery() as nursery:
        url = await serve(nursery, handler)
        async with httpx.AsyncClient(transport=StreamTransport()) as client:
            assert (await client.get(url + "/eof")).text == "all of it"
            seen: list[bytes] = []
            with pytest.raises(httpx.RemoteProtocolError, match="complete message body"):
                async with client.stream("GET", url + "/cut") as response:
                    async for piece in response.aiter_raw():
                        seen.append(piece)
            assert b"".join(seen).startswith(b"hello")
        nursery.cancel_scope.cancel()


async def test_an_interim_answer_is_skipped_and_a_head_has_no_body() -> None:
    async def handler(stream: trio.abc.Stream) -> None:
        while request := await read_request(stream):
            if request.startswith(b"HEAD"):
                await stream.send_all(b"HTTP/1.1 200 OK\r\ncontent-length: 99\r\n\r\n")
            else:
                await stream.send_all(b"HTTP/1.1 100 Continue\r\n\r\n" + ok(b"after"))

    async with trio.open_nursery() as nursery:
        url = await serve(nursery, handler)
        async with httpx.AsyncClient(transport=StreamTransport()) as client:
            with trio.fail_after(5):
                assert (await client.post(url, content=b"x")).text == "after"
                head = await client.head(url)
            assert head.status_code == 200 and head.content == b""
        nursery.cancel_scope.cancel()


@pytest.mark.parametrize(
    ("answer", "words"),
    [
        (b"HTTP/1.1 2x0 OK\r\n\r\n", "malformed HTTP response"),
        (b"", "without sending a response"),
        (b"HTTP/1.1 200 OK\r\nx: " + b"y" * 70_000, "headers larger than"),
    ],
)
async def test_a_bad_answer_is_a_protocol_error_that_says_what(answer: bytes, words: str) -> None:
    async def handler(stream: trio.abc.Stream) -> None:
        await read_request(stream)
        if answer:
            await stream.send_all(answer)
        await stream.aclose()

    async with trio.open_nursery() as nursery:
        url = await serve(nursery, handler)
        async with httpx.AsyncClient(transport=StreamTransport()) as client:
            with pytest.raises(httpx.RemoteProtocolError, match=words):
                await client.get(url)
        nursery.cancel_scope.cancel()


async def test_the_pool_holds_at_most_max_connections_and_times_out_waiting(
    autojump_clock: trio.testing.MockClock,
) -> None:
    release = trio.Event()

    async def handler(stream: trio.abc.Stream) -> None:
        while await read_request(stream):
            await release.wait()
            await stream.send_all(ok(b"done"))

    async with trio.open_nursery() as nursery:
        url = await serve(nursery, handler)
        async with httpx.AsyncClient(
            transport=StreamTransport(max_connections=2), timeout=httpx.Timeout(60, pool=5)
        ) as client:
            results: list[str] = []

            async def one() -> None:
                results.append((await client.get(url)).text)

            async with trio.open_nursery() as requests:
                requests.start_soon(one)
                requests.start_soon(one)
                await trio.sleep(1)
                with pytest.raises(httpx.PoolTimeout):
                    await client.get(url)
                release.set()
            assert results == ["done", "done"]
            assert (await client.get(url)).text == "done"  # a kept-alive one, reused
            # Past the limit, a request waits for the first connection to come back.
            results.clear()
            async with trio.open_nursery() as requests:
                for _ in range(5):
                    requests.start_soon(one)
            assert results == ["done"] * 5
        nursery.cancel_scope.cancel()


async def test_a_silent_server_is_a_read_timeout(autojump_clock: trio.testing.MockClock) -> None:
    async def handler(stream: trio.abc.Stream) -> None:
        await read_request(stream)
        await trio.sleep_forever()

    async with trio.open_nursery() as nursery:
        url = await serve(nursery, handler)
        async with httpx.AsyncClient(transport=StreamTransport(), timeout=10) as client:
            with pytest.raises(httpx.ReadTimeout):
                await client.get(url)
        nursery.cancel_scope.cancel()


async def test_many_tls_records_in_one_read_are_all_delivered_in_order() -> None:
    """Every record the kernel holds is decrypted in one wake-up: the body comes in
    fewer pieces than records, whole and in order."""
    ca = trustme.CA()
    server = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("127.0.0.1").configure_cert(server)
    client_context = ssl.create_default_context()
    ca.configure_trust(client_context)
    pieces = [b"data: %d\n\n" % n for n in range(2000)]

    async def handler(stream: trio.abc.Stream) -> None:
        await read_request(stream)
        await stream.send_all(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n")
        for piece in pieces:  # one TLS record each
            await stream.send_all(b"%x\r\n%s\r\n" % (len(piece), piece))
        await stream.send_all(b"0\r\n\r\n")
        await read_request(stream)

    async with trio.open_nursery() as nursery:
        url = await serve(nursery, handler, server)
        transport = StreamTransport(ssl_context=client_context)
        async with httpx.AsyncClient(transport=transport) as client:
            reads: list[bytes] = []
            async with client.stream("POST", url, json={}) as response:
                await trio.sleep(0.5)  # the records pile up in the socket meanwhile
                async for read in response.aiter_raw():
                    reads.append(read)
        nursery.cancel_scope.cancel()
    assert b"".join(reads) == b"".join(pieces)
    assert len(reads) < len(pieces)


async def test_an_untrusted_certificate_is_a_connect_error_with_its_cause() -> None:
    ca = trustme.CA()
    server = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("127.0.0.1").configure_cert(server)

    async def handler(stream: trio.abc.Stream) -> None:
        with pytest.raises(trio.BrokenResourceError):
            await read_request(stream)

    async with trio.open_nursery() as nursery:
        url = await serve(nursery, handler, server)
        async with httpx.AsyncClient(transport=StreamTransport()) as client:
            with pytest.raises(httpx.ConnectError) as caught:
                await client.get(url)
        nursery.cancel_scope.cancel()
    assert isinstance(caught.value.__cause__, ssl.SSLCertVerificationError)
