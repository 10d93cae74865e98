"""Built-in tools and provider errors stay bounded whatever the file, server or model does."""

from __future__ import annotations

import functools
import gzip
import os
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import trio

from orchestrator.core.events import Event, EventType
from tests.helpers import of_type
from tests.integration.test_beyond import agent, run

Handler = Callable[[trio.SocketStream], Awaitable[None]]


def results(events: list[Event]) -> dict[str, dict[str, Any]]:
    return {e.data["toolCallId"]: e.data for e in of_type(events, EventType.TOOL_RESULT)}


async def test_read_file_refuses_fifos_and_reads_only_what_it_returns(tmp_path: Path) -> None:
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    os.mkfifo(workspace / "pipe")  # opening it for reading would block forever
    fd = os.open(workspace / "huge.bin", os.O_CREAT | os.O_WRONLY)
    os.ftruncate(fd, 1 << 30)  # 1 GiB, sparse: costs no disk
    os.close(fd)
    calls = [
        {"name": "read_file", "args": {"path": "pipe"}},
        {"name": "read_file", "args": {"path": "huge.bin", "max_bytes": 300}},
        {"name": "write_file", "args": {"path": "pipe", "content": "x"}},
    ]
    boss = agent([{"calls": calls}, {"say": "ok"}], tools=["read_file", "write_file"])
    with trio.fail_after(20):
        events = await run(tmp_path, {"boss": boss})
    found = results(events)
    assert found["call_0"]["isError"] and "not a regular file" in found["call_0"]["content"]
    assert found["call_1"]["content"] == "\0" * 300 + "\n[truncated]"
    # Writing: refused at once (ENXIO without a reader, else "not a regular file").
    assert found["call_2"]["isError"] and "cannot write 'pipe'" in found["call_2"]["content"]


async def serve_http(nursery: trio.Nursery, handler: Handler) -> int:
    async def wrapped(stream: trio.SocketStream) -> None:
        try:
            await stream.receive_some(65536)
            await handler(stream)
        except trio.BrokenResourceError:
            pass
        finally:
            await stream.aclose()

    listeners = await nursery.start(functools.partial(trio.serve_tcp, wrapped, 0, host="127.0.0.1"))
    return int(listeners[0].socket.getsockname()[1])


async def test_http_get_has_one_deadline_and_inflates_at_most_max_bytes(tmp_path: Path) -> None:
    bomb = gzip.compress(b"\0" * 50_000_000)  # 50 MB that travels as ~50 KB

    async def drip(stream: trio.SocketStream) -> None:
        await stream.send_all(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n")
        for _ in range(100):  # a byte every 0.3 s: each read is quick, the whole is not
            await stream.send_all(b"x")
            await trio.sleep(0.3)

    async def gzip_bomb(stream: trio.SocketStream) -> None:
        head = f"HTTP/1.1 200 OK\r\nContent-Encoding: gzip\r\nContent-Length: {len(bomb)}\r\n\r\n"
        await stream.send_all(head.encode() + bomb)

    async with trio.open_nursery() as nursery:
        slow = await serve_http(nursery, drip)
        big = await serve_http(nursery, gzip_bomb)
        calls = [
            {"name": "http_get", "args": {"url": f"http://127.0.0.1:{slow}/"}},
            {"name": "http_get", "args": {"url": f"http://127.0.0.1:{big}/", "max_bytes": 1000}},
        ]
        boss = agent([{"calls": calls}, {"say": "ok"}], tools=["http_get"])
        start = trio.current_time()
        events = await run(
            tmp_path,
            {"boss": boss},
            tools={"http_timeout": 1.5, "http_allowed_hosts": ["127.0.0.1"]},
        )
        elapsed = trio.current_time() - start
        nursery.cancel_scope.cancel()
    found = results(events)
    assert (
        found["call_0"]["isError"] and "no complete answer in 1.5 s" in found["call_0"]["content"]
    )
    assert elapsed < 15  # the drip alone would take 30 s
    assert found["call_1"]["content"] == "HTTP 200\n" + "\0" * 1000 + "\n[truncated]"


async def test_a_huge_provider_error_body_is_read_only_in_part(tmp_path: Path) -> None:
    body = gzip.compress(b'{"error": "' + b"e" * 100_000_000 + b'"}')

    async def failing(stream: trio.SocketStream) -> None:
        head = (
            "HTTP/1.1 400 Bad Request\r\nContent-Type: application/json\r\n"
            f"Content-Encoding: gzip\r\nContent-Length: {len(body)}\r\n\r\n"
        )
        await stream.send_all(head.encode() + body)

    async with trio.open_nursery() as nursery:
        port = await serve_http(nursery, failing)
        boss = {"description": "d", "instructions": "i", "model": "remote"}
        models = {
            "default": {"provider": "scripted"},
            "remote": {"provider": "openai", "base_url": f"http://127.0.0.1:{port}/v1"},
        }
        events = await run(tmp_path, {"boss": boss}, models=models)
        nursery.cancel_scope.cancel()
    (error,) = of_type(events, EventType.AGENT_ERROR)
    assert error.data["errorType"] == "provider_error"
    assert "HTTP 400" in error.data["message"] and len(error.data["message"]) < 1000


async def test_file_tools_stay_inside_the_root(tmp_path: Path) -> None:
    """What held under attack (issue 8): every way out of tools.root is refused."""
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    (tmp_path / "secret.txt").write_text("top secret")
    os.symlink(tmp_path / "secret.txt", workspace / "link.txt")
    os.symlink(tmp_path, workspace / "up")
    paths = [
        "../secret.txt",
        str(tmp_path / "secret.txt"),
        "/proc/self/environ",
        "link.txt",
        "up/secret.txt",
        "a\0b",
    ]
    calls = [{"name": "read_file", "args": {"path": p}} for p in paths]
    calls.append({"name": "write_file", "args": {"path": "../escape.txt", "content": "x"}})
    boss = agent([{"calls": calls}, {"say": "ok"}], tools=["read_file", "write_file"])
    found = results(await run(tmp_path, {"boss": boss}))
    assert len(found) == len(calls)
    for result in found.values():
        assert result["isError"], result
        assert "top secret" not in result["content"]
    assert not (tmp_path / "escape.txt").exists()
