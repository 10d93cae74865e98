"""Malformed requests are refusals, never a 500 with a traceback (issue 47): duplicate
`Host`, `Origin` or `Authorization`, ports that are not ports, digits that are not
ASCII, and a chunked A2A body over the limit — on `/ws` and every HTTP door."""

from __future__ import annotations

import contextlib
import json
import logging
import re
from pathlib import Path

import pytest
import trio
from websockets.trio.client import connect

from tests.memory_server import autojump, memory_server
from tests.server_helpers import demo_config, request

pytestmark = [pytest.mark.trio, autojump]

pytest.importorskip("a2a", reason="the A2A door needs the `a2a` extra (pip install -e '.[dev]')")

UPGRADE = (
    b"GET /ws HTTP/1.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
    b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n"
)
AUTH = b"Authorization: Bearer t-a\r\n"
CLOSE = b"Connection: close\r\n"  # (the HTTP doors keep a connection otherwise)


async def exchange(port: int, data: bytes) -> bytes:
    """Send `data` (while reading: a refusal may come before it is all sent); what came back."""
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    got = b""

    async def sender() -> None:
        with contextlib.suppress(trio.BrokenResourceError):
            await stream.send_all(data)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(sender)
        with trio.move_on_after(10):
            try:
                while chunk := await stream.receive_some():
                    got += chunk
            except trio.BrokenResourceError:
                pass
        nursery.cancel_scope.cancel()
    await stream.aclose()
    return got


def cases(port: int) -> dict[str, bytes]:
    host = f"Host: 127.0.0.1:{port}\r\n".encode()
    post = CLOSE + b"Content-Type: application/json\r\nContent-Length: 2\r\n\r\n{}"
    found: dict[str, bytes] = {}
    for door, start in (
        ("ws", UPGRADE),
        ("ag-ui", b"POST /ag-ui/planner HTTP/1.1\r\n"),
        ("mcp", b"POST /mcp HTTP/1.1\r\n"),
        ("a2a", b"POST /a2a/planner/ HTTP/1.1\r\n"),
    ):
        end = b"\r\n" if door == "ws" else post
        found |= {
            f"{door}: two Hosts": start + host + host + AUTH + end,
            f"{door}: two Origins": start + host + AUTH + b"Origin: http://a\r\n"
            b"Origin: http://b\r\n" + end,
            f"{door}: two Authorizations": start + host + AUTH + AUTH + end,
            f"{door}: Origin port 99999": start
            + host
            + AUTH
            + b"Origin: http://127.0.0.1:99999\r\n"
            + end,
            f"{door}: Origin port -1": start
            + host
            + AUTH
            + b"Origin: http://127.0.0.1:-1\r\n"
            + end,
            f"{door}: a Host port in other digits": start
            + "Host: 127.0.0.1:８７６５\r\n".encode()
            + AUTH
            + end,
        }
    return found


async def test_malformed_headers_are_a_400_on_every_door(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    config = demo_config(
        tmp_path,
        server={"ag_ui": True, "a2a": True, "mcp": True, "tokens": [{"name": "a", "token": "t-a"}]},
    )
    async with memory_server(config) as server:
        with caplog.at_level(logging.ERROR):
            for name, data in cases(server.port).items():
                answer = await exchange(server.port, data)
                assert answer.startswith(b"HTTP/1.1 400"), (name, answer[:200])
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


async def test_bad_seqs_and_a_chunked_body_over_the_limit_are_refusals(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    config = demo_config(
        tmp_path,
        token_delay=0.05,  # (a run that still runs while its task is subscribed to)
        server={"ag_ui": True, "a2a": True, "tokens": [{"name": "a", "token": "t-a"}]},
    )
    async with memory_server(config) as server:
        host = f"Host: 127.0.0.1:{server.port}\r\n".encode()
        with caplog.at_level(logging.ERROR):
            # An A2A cursor whose digit is not ASCII (the byte 0xB2, `²`): invalid params.
            async with connect(
                server.url, additional_headers={"Authorization": "Bearer t-a"}
            ) as ws:
                ack = await request(ws, op="run", id=1, agent="planner", input="slowly")
            rpc = json.dumps(
                {
                    "jsonrpc": "2.0",
                    "id": 1,
                    "method": "SubscribeToTask",
                    "params": {"id": ack["runId"]},
                }
            ).encode()
            answer = await exchange(
                server.port,
                b"POST /a2a/planner/ HTTP/1.1\r\n" + host + AUTH + CLOSE + b"A2A-Version: 1.0\r\n"
                + b"A2A-Orchestrator-After-Seq: \xb2\r\nContent-Type: application/json\r\n"
                + b"Content-Length: %d\r\n\r\n" % len(rpc) + rpc,
            )  # fmt: skip
            assert b'"code":-32602' in answer.replace(b" ", b""), answer[-300:]
            # A chunked body over the limit (no Content-Length to refuse it by): 413.
            chunk = b"100000\r\n" + b" " * 0x100000 + b"\r\n"
            answer = await exchange(
                server.port,
                b"POST /a2a/planner/ HTTP/1.1\r\n" + host + AUTH + CLOSE
                + b"Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
                + chunk * 6 + b"0\r\n\r\n",
            )  # fmt: skip
            assert answer.startswith(b"HTTP/1.1 413"), answer[:200]
            # An AG-UI interrupt id with a digit that is not ASCII: a 400, not a 500.
            body = json.dumps(
                {
                    "threadId": "t",
                    "runId": "r",
                    "messages": [],
                    "resume": [{"interruptId": "run-x@1#²", "status": "resolved"}],
                }
            ).encode()
            answer = await exchange(
                server.port,
                b"POST /ag-ui/planner HTTP/1.1\r\n" + host + AUTH + CLOSE
                + b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(body)
                + body,
            )  # fmt: skip
            assert answer.startswith(b"HTTP/1.1 400"), answer[:300]
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


async def test_a2a_seqs_are_integers_both_ways(tmp_path: Path) -> None:
    """`metadata.seq` went out as `17.0` (a protobuf Struct's numbers are doubles), and
    the documented cursor `1.0` was refused: seqs go out whole and `1.0` is 1."""
    config = demo_config(
        tmp_path,
        token_delay=0.05,
        server={"a2a": True, "tokens": [{"name": "a", "token": "t-a"}]},
    )
    async with memory_server(config) as server:
        host = f"Host: 127.0.0.1:{server.port}\r\n".encode()
        async with connect(server.url, additional_headers={"Authorization": "Bearer t-a"}) as ws:
            ack = await request(ws, op="run", id=1, agent="planner", input="slowly")

        def rpc(method: str, *extra: bytes) -> bytes:
            body = json.dumps(
                {"jsonrpc": "2.0", "id": 1, "method": method, "params": {"id": ack["runId"]}}
            ).encode()
            return (
                b"POST /a2a/planner/ HTTP/1.1\r\n" + host + AUTH + CLOSE + b"A2A-Version: 1.0\r\n"
                + b"".join(extra) + b"Content-Type: application/json\r\n"
                + b"Content-Length: %d\r\n\r\n" % len(body) + body
            )  # fmt: skip

        got = await exchange(server.port, rpc("GetTask"))
        assert b'"seq":' in got.replace(b" ", b""), got[-300:]
        assert not re.search(rb'"seq": ?\d+\.\d', got), got[-300:]
        stream = await exchange(
            server.port, rpc("SubscribeToTask", b"A2A-Orchestrator-After-Seq: 1.0\r\n")
        )
        assert b'"task"' in stream, stream.decode(errors="replace")[-700:]
        assert b'"error"' not in stream, stream[:400]
