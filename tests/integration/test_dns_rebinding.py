"""DNS rebinding (issue 32): a page whose name resolves to 127.0.0.1 must not reach
the server. Every door checks the request's `Host` against the names the server is
reachable by, and an `Origin` against those names (never against the request's own
Host, which such a page controls).

Before: `Host: evil.example.com:PORT` with `Origin: http://evil.example.com:PORT`
got `101 Switching Protocols` on `/ws`, the console was served, and the MCP
conformance suite's `dns-rebinding-protection` scenario failed on `/mcp`.
"""

from __future__ import annotations

import socket
from pathlib import Path

import httpx
import pytest
import trio

from orchestrator.config import ServerConfig
from tests.memory_server import autojump, memory_server
from tests.server_helpers import demo_config

UPGRADE = (
    "GET /ws HTTP/1.1\r\nHost: {host}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
    "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n{origin}\r\n"
)


async def upgrade_status(port: int, host: str, origin: str | None = None) -> int:
    """The status a raw WebSocket upgrade with these headers gets."""
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    async with stream:
        header = f"Origin: {origin}\r\n" if origin else ""
        await stream.send_all(UPGRADE.format(host=host, origin=header).encode())
        with trio.fail_after(10):
            head = await stream.receive_some(4096)
    parts = head.split(b" ", 2)
    return int(parts[1]) if len(parts) > 1 else 0  # 0: closed without an answer


def full_server(tmp_path: Path, **server: object) -> ServerConfig:
    return demo_config(
        tmp_path,
        server={"mcp": True, "ag_ui": True, "a2a": True, **server},
        storage="memory://",
    )


@autojump
async def test_every_door_refuses_a_foreign_host(tmp_path: Path) -> None:
    async with memory_server(full_server(tmp_path)) as server:
        port = server.port
        evil = f"evil.example.com:{port}"
        # The WebSocket: a rebinding page's upgrade, and its same-"origin" Origin.
        assert await upgrade_status(port, evil, f"http://{evil}") == 403
        assert await upgrade_status(port, evil) == 403
        assert await upgrade_status(port, f"127.0.0.1:{port}", f"http://{evil}") == 403
        # The console, /healthz, /metrics, /auth, and the HTTP endpoints.
        base = f"http://127.0.0.1:{port}"
        async with httpx.AsyncClient() as http:
            for method, path in [
                ("GET", "/"),
                ("GET", "/static/app.js"),
                ("GET", "/healthz"),
                ("GET", "/metrics"),
                ("GET", "/auth"),
                ("POST", "/mcp"),
                ("POST", "/ag-ui/planner"),
                ("GET", "/a2a/planner/.well-known/agent-card.json"),
                ("POST", "/a2a/planner/"),
            ]:
                reply = await http.request(method, base + path, headers={"Host": evil})
                assert reply.status_code == 403, (path, reply.status_code, reply.text)
                assert "server.allowed_hosts" in reply.text
                # The names it is reachable by are served as before.
                for host in (f"127.0.0.1:{port}", f"localhost:{port}", f"[::1]:{port}"):
                    ok = await http.request(method, base + path, headers={"Host": host})
                    assert ok.status_code != 403, (path, host, ok.text)
        for host in (f"127.0.0.1:{port}", f"localhost:{port}"):
            assert await upgrade_status(port, host, f"http://{host}") == 101
        # A loopback name on another port is another origin (another server).
        assert await upgrade_status(port, f"127.0.0.1:{port}", "http://127.0.0.1:1") == 403


@autojump
async def test_allowed_hosts_name_a_server_behind_a_dns_name_or_proxy(tmp_path: Path) -> None:
    config = full_server(tmp_path, allowed_hosts=["orch.example.com", "proxy.example.com:443"])
    async with memory_server(config) as server:
        port = server.port
        assert await upgrade_status(port, f"orch.example.com:{port}") == 101
        assert await upgrade_status(port, "orch.example.com", "https://proxy.example.com") == 101
        assert await upgrade_status(port, "proxy.example.com:8443") == 403  # not that port
        assert await upgrade_status(port, f"evil.example.com:{port}") == 403


@autojump
async def test_a_refused_host_is_one_log_line(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    async with memory_server(full_server(tmp_path)) as server:
        assert await upgrade_status(server.port, "evil.example.com" + "x" * 500) == 403
    lines = [r.getMessage() for r in caplog.records if "refused a request" in r.getMessage()]
    assert len(lines) == 1
    assert len(lines[0]) < 300


def test_a_non_loopback_bind_takes_ip_hosts_but_no_unknown_names(tmp_path: Path) -> None:
    from orchestrator.server.auth import Auth

    config = demo_config(tmp_path, server={"host": "0.0.0.0", "port": 8765})
    auth = Auth(config)
    assert auth.host_allowed("192.0.2.7:8765") and auth.host_allowed("[2001:db8::1]:8765")
    assert not auth.host_allowed("192.0.2.7:9999")
    assert not auth.host_allowed("evil.example.com:8765")
    assert not auth.host_allowed(None) and not auth.host_allowed("")
    assert socket.gethostname()  # (a machine name is not an IP: it must be listed)
