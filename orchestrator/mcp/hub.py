"""The MCP sessions of this process: one per configured server, started on first use.

A session belongs to the process (`orchestrator serve`, `orchestrator run`), not to
a run: a stdio server may keep state between calls (an open repository, a browser
page), and starting its process for every run would cost every run that start-up
(docs/benchmarks.md measures both). Every session is a task of the hub's nursery, so
a stdio server's process never outlives the hub: leaving `McpHub.open` — a cancel,
a crash, SIGTERM of the server — closes each session, and the `mcp` package's stdio
transport stops its process (terminate, then kill).

A session that fails — its process exits, a call times out, the transport breaks —
is closed; the next call starts a new one.
"""

from __future__ import annotations

import logging
import math
import os
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import trio

from agents.errors import OrchestratorError
from orchestrator.config import McpServerConfig
from orchestrator.mcp.names import exposed_names

__all__ = ["McpError", "McpHub", "ToolInfo"]

logger = logging.getLogger(__name__)
_MAX_PAGES = 100
"""Most pages of a tool listing read (a server that pages for ever cannot hang a start)."""


class McpError(OrchestratorError):
    """An MCP server could not be started, listed or called; the message says which."""

    code = "unavailable"


class ToolInfo:
    """One tool of a server, as models see it."""

    __slots__ = ("description", "exposed", "original", "parameters", "server")

    def __init__(
        self, server: str, exposed: str, original: str, description: str, parameters: dict[str, Any]
    ) -> None:
        self.server = server
        self.exposed = exposed
        self.original = original
        self.description = description
        self.parameters = parameters


class _Session:
    """One live connection to a server (a task of the hub's nursery)."""

    def __init__(self, name: str, config: McpServerConfig, base_dir: Path) -> None:
        self.name = name
        self.config = config
        self.base_dir = base_dir
        self.client: Any = None
        self.tools: dict[str, ToolInfo] = {}
        self.ready = trio.Event()
        self.closed = trio.Event()
        self.failure: str | None = None
        self._stop = trio.Event()
        self.pid: int | None = None

    @property
    def alive(self) -> bool:
        return self.ready.is_set() and self.failure is None and not self._stop.is_set()

    def stop(self) -> None:
        """Close the session (its process stops); the hub starts a new one when needed."""
        self._stop.set()

    async def run(self) -> None:
        from mcp import Client

        config = self.config
        try:
            with trio.CancelScope(
                deadline=trio.current_time() + config.startup_timeout_seconds
            ) as start:
                async with Client(self._transport(), read_timeout_seconds=None) as client:
                    self.client = client
                    self.tools = await self._list(client)
                    start.deadline = math.inf  # started: the session lives until stopped
                    self.ready.set()
                    await self._stop.wait()
            if start.cancelled_caught and not self.ready.is_set():
                self.failure = (
                    f"MCP server {self.name!r} did not start within "
                    f"{config.startup_timeout_seconds:g} s (mcp_servers.{self.name}."
                    "startup_timeout_seconds)"
                )
        except Exception as exc:  # the process died, the handshake failed, the listing broke
            self.failure = f"MCP server {self.name!r} failed: {_describe(exc)}"
            if self.ready.is_set():
                logger.warning("%s; it is started again on its next call", self.failure)
        finally:
            if self.failure is None and not self.ready.is_set():
                self.failure = f"MCP server {self.name!r} stopped while starting"
            self._stop.set()
            self.ready.set()
            self.closed.set()

    def _transport(self) -> Any:
        from mcp.client.stdio import StdioServerParameters

        config = self.config
        if config.command is not None:
            env = dict(config.env)
            for key, variable in config.env_from.items():
                value = os.environ.get(variable)
                if value is None:
                    raise McpError(
                        f"mcp_servers.{self.name}.env_from.{key}: ${variable} is not set"
                    )
                env[key] = value
            if "PATH" not in env and "PATH" in os.environ:
                env["PATH"] = os.environ["PATH"]
            command, cwd = stdio_command(config, self.base_dir)
            return StdioServerParameters(command=command, args=list(config.args), env=env, cwd=cwd)
        return _http_transport(self.name, config)

    async def _list(self, client: Any) -> dict[str, ToolInfo]:
        listed: list[Any] = []
        cursor: str | None = None
        for _ in range(_MAX_PAGES):
            page = await client.list_tools(cursor=cursor)
            listed.extend(page.tools)
            cursor = page.next_cursor
            if cursor is None:
                break
        names, notes = exposed_names(self.name, [tool.name for tool in listed])
        for note in notes:
            logger.warning("%s", note)
        by_original = {tool.name: tool for tool in listed}
        return {
            exposed: ToolInfo(
                self.name,
                exposed,
                original,
                by_original[original].description or f"{original} (from MCP server {self.name})",
                by_original[original].input_schema,
            )
            for exposed, original in names.items()
        }


class McpHub:
    """Every configured MCP server's session, started on first use, shared by all runs."""

    def __init__(
        self, configs: dict[str, McpServerConfig], base_dir: Path, nursery: trio.Nursery
    ) -> None:
        self.configs = configs
        self.base_dir = base_dir
        self._nursery = nursery
        self._sessions: dict[str, _Session] = {}
        self._starting: dict[str, trio.Lock] = {name: trio.Lock() for name in configs}
        self.starts = 0
        """Sessions started so far (a restarted one counts again)."""

    @classmethod
    @asynccontextmanager
    async def open(
        cls, configs: dict[str, McpServerConfig], base_dir: Path
    ) -> AsyncIterator[McpHub]:
        """A hub whose sessions end (their processes stop) when the block is left."""
        async with trio.open_nursery() as nursery:
            hub = cls(configs, base_dir, nursery)
            try:
                yield hub
            finally:
                for session in hub._sessions.values():
                    session.stop()
                nursery.cancel_scope.cancel()

    async def session(self, name: str) -> _Session:
        """The live session of server `name`, started if need be.

        Raises:
            McpError: it cannot be started (the message says why).
        """
        if name not in self.configs:
            raise McpError(f"no MCP server {name!r} in mcp_servers")
        session = self._sessions.get(name)
        if session is not None and session.alive:
            return session
        async with self._starting[name]:
            session = self._sessions.get(name)
            if session is None or not session.alive:
                if session is not None:
                    session.stop()
                session = _Session(name, self.configs[name], self.base_dir)
                self._sessions[name] = session
                self.starts += 1
                self._nursery.start_soon(session.run)
                await session.ready.wait()
        if session.failure is not None:
            raise McpError(session.failure)
        return session

    async def tools(self, name: str) -> dict[str, ToolInfo]:
        """Server `name`'s tools by the names models see (starting its session)."""
        return (await self.session(name)).tools

    async def call(
        self,
        info: ToolInfo,
        args: dict[str, Any],
        report: Callable[[float, float | None, str | None], None] | None = None,
    ) -> tuple[list[Any], Any, bool]:
        """Call a tool: its result's content blocks, structured content and `isError`.

        A call that takes longer than the server's `timeout_seconds`, or whose session
        breaks, raises `McpError`, and the session is closed (the next call starts a
        new one). Cancelling the caller sends MCP's cancellation for the call.
        """
        session = await self.session(info.server)
        timeout = session.config.timeout_seconds

        async def on_progress(progress: float, total: float | None, message: str | None) -> None:
            if report is not None:  # the `mcp` package's callback: these parameter names
                report(progress, total, message)

        with trio.move_on_after(timeout) as deadline:
            try:
                result = await session.client.call_tool(
                    info.original, args, progress_callback=on_progress
                )
            except Exception as exc:
                session.stop()
                raise McpError(
                    f"MCP server {info.server!r} failed during {info.original!r}: {_describe(exc)}"
                    " (it is started again for the next call)"
                ) from None
        if deadline.cancelled_caught:
            session.stop()
            raise McpError(
                f"MCP server {info.server!r} did not answer {info.original!r} within "
                f"{timeout:g} s (mcp_servers.{info.server}.timeout_seconds); it is started "
                "again for the next call"
            )
        return list(result.content), result.structured_content, bool(result.is_error)


def stdio_command(config: McpServerConfig, base_dir: Path) -> tuple[str, Path]:
    """The program and working directory of a stdio server, as the config file means
    them wherever the orchestrator was started: relative paths (`cwd`, a `command`
    with a `/`, and so the `args` run in that `cwd`) are the config file's directory's;
    a bare `python`/`python3` is the interpreter running the orchestrator (the one
    with the `mcp` package), not whichever one PATH finds first."""
    assert config.command is not None
    cwd = (base_dir / config.cwd).resolve() if config.cwd is not None else base_dir.resolve()
    command = config.command
    if command in ("python", "python3"):
        command = sys.executable
    elif "/" in command and not Path(command).is_absolute():
        command = str((base_dir / command).resolve())
    return command, cwd


@asynccontextmanager
async def _http_transport(name: str, config: McpServerConfig) -> AsyncIterator[Any]:
    """The streamable-HTTP transport, with headers from the config and the environment."""
    import httpx2
    from mcp.client.streamable_http import streamable_http_client

    headers = dict(config.headers)
    for header, variable in config.headers_from.items():
        value = os.environ.get(variable)
        if value is None:
            raise McpError(f"mcp_servers.{name}.headers_from.{header}: ${variable} is not set")
        headers[header] = value
    if config.token_env is not None:
        token = os.environ.get(config.token_env)
        if token is None:
            raise McpError(f"mcp_servers.{name}.token_env: ${config.token_env} is not set")
        headers["Authorization"] = f"Bearer {token}"
    assert config.url is not None
    # The `mcp` package's own timeouts for its HTTP client: a stream may stay open long.
    timeout = httpx2.Timeout(30.0, read=300.0)
    async with (
        httpx2.AsyncClient(headers=headers, timeout=timeout) as http,
        streamable_http_client(config.url, http_client=http) as streams,
    ):
        yield streams


def _describe(exc: BaseException) -> str:
    """One line for an exception (groups: their first leaf), never a secret-bearing repr."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    text = str(exc).splitlines()[0] if str(exc) else ""
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
