"""Built-in tools: `http_get`, `read_file`, `write_file`, `wait`.

Each declares its arguments as a pydantic model (the JSON schema models see comes
from it) and a `concurrency_safe` flag: safe tools run in parallel with the other
calls of a turn; unsafe ones (`write_file`) run one at a time, in call order.

Everything a model controls is bounded. Files are confined to one configured root
and must be regular files (a FIFO or a device would block or never end); reads
stop at `max_bytes`. `http_get` has one deadline for the whole request, reads and
inflates at most `max_bytes`, follows no redirects, and by default refuses hosts
that resolve to loopback, private, link-local or other non-public addresses (the
server's own `/metrics`, a cloud metadata endpoint, the LAN). The address check
resolves the name before the request; a name that resolves differently a moment
later (DNS rebinding) is not caught: deny such hosts at the network too.
"""

from __future__ import annotations

import errno
import ipaddress
import os
import stat
from collections.abc import Collection
from pathlib import Path
from typing import Any, ClassVar
from urllib.parse import urlsplit

import httpx
import pydantic
import trio
from pydantic import BaseModel, ConfigDict, Field

from agents.errors import ToolError
from agents.providers.http import read_body
from agents.tools.base import ToolContext

__all__ = [
    "BUILTIN_TOOLS",
    "HttpGetTool",
    "ReadFileTool",
    "WaitTool",
    "WriteFileTool",
    "builtin_tools",
    "check_host",
]


class _Args(BaseModel):
    model_config = ConfigDict(extra="forbid")


class _PydanticTool:
    """Common plumbing: schema from the args model, validation with a clear error."""

    name: ClassVar[str]
    description: ClassVar[str]
    args_model: ClassVar[type[_Args]]
    concurrency_safe: ClassVar[bool] = True
    stream_paths: ClassVar[tuple[str, ...]] = ()
    idempotent: ClassVar[bool] = False

    def description_for(self, agent_id: str) -> str:
        """The tool's description (the same for every agent)."""
        return self.description

    def parameters(self) -> dict[str, Any]:
        """JSON schema of the arguments, from the pydantic model."""
        return self.args_model.model_json_schema()

    def parse(self, args: dict[str, Any]) -> Any:
        try:
            return self.args_model.model_validate(args)
        except pydantic.ValidationError as exc:
            problems = "; ".join(
                f"{'.'.join(str(p) for p in e['loc']) or 'args'}: {e['msg']}" for e in exc.errors()
            )
            raise ToolError(f"{self.name}: invalid arguments: {problems}") from None


class _Root:
    def __init__(self, root: Path) -> None:
        self.root = root.resolve()

    def resolve(self, tool: str, relative: str) -> Path:
        path = (self.root / relative).resolve()
        if path != self.root and self.root not in path.parents:
            raise ToolError(f"{tool}: {relative!r} is outside the allowed root {str(self.root)!r}")
        return path


class ReadFileArgs(_Args):
    path: str = Field(description="Path relative to the tool root.")
    max_bytes: int = Field(default=100_000, ge=1, le=10_000_000)


class ReadFileTool(_PydanticTool, _Root):
    """Reads a UTF-8 text file under the configured root."""

    name = "read_file"
    description = "Read a text file (path relative to the workspace root)."
    args_model = ReadFileArgs
    idempotent = True

    async def run(self, args: dict[str, Any], ctx: ToolContext) -> str:
        """The file's text (cut at max_bytes)."""
        parsed: ReadFileArgs = self.parse(args)
        path = self.resolve(self.name, parsed.path)
        try:
            data = await trio.to_thread.run_sync(
                _read_regular, path, parsed.max_bytes + 1, abandon_on_cancel=True
            )
        except OSError as exc:
            raise ToolError(f"read_file: cannot read {parsed.path!r}: {_why(exc)}") from None
        text = data[: parsed.max_bytes].decode("utf-8", "replace")
        return text + ("\n[truncated]" if len(data) > parsed.max_bytes else "")


def _why(exc: OSError) -> str:
    return exc.strerror or str(exc)


def _open_regular(path: Path, flags: int) -> int:
    """Open without blocking (a FIFO would) or following a last-moment symlink; regular only."""
    fd = os.open(path, flags | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(errno.EINVAL, "not a regular file")
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _read_regular(path: Path, limit: int) -> bytes:
    """At most `limit` bytes of a regular file (never the whole of a huge one)."""
    fd = _open_regular(path, os.O_RDONLY)
    try:
        chunks, size = [], 0
        while size < limit:
            chunk = os.read(fd, min(limit - size, 1 << 20))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def _write_regular(path: Path, content: str, append: bool) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    flags = os.O_WRONLY | os.O_CREAT | (os.O_APPEND if append else os.O_TRUNC)
    fd = _open_regular(path, flags)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(content)


class WriteFileArgs(_Args):
    path: str = Field(description="Path relative to the tool root.")
    content: str
    append: bool = False


class WriteFileTool(_PydanticTool, _Root):
    """Writes a text file under the configured root (one call at a time, in order)."""

    name = "write_file"
    description = "Write (or append to) a text file under the workspace root."
    args_model = WriteFileArgs
    concurrency_safe = False

    async def run(self, args: dict[str, Any], ctx: ToolContext) -> str:
        """Write and say how many characters went where."""
        parsed: WriteFileArgs = self.parse(args)
        path = self.resolve(self.name, parsed.path)
        try:
            await trio.to_thread.run_sync(_write_regular, path, parsed.content, parsed.append)
        except OSError as exc:
            raise ToolError(f"write_file: cannot write {parsed.path!r}: {_why(exc)}") from None
        return f"wrote {len(parsed.content)} characters to {parsed.path}"


class HttpGetArgs(_Args):
    url: str = Field(pattern=r"^https?://", description="An http:// or https:// URL.")
    max_bytes: int = Field(default=100_000, ge=1, le=10_000_000)


class HttpGetTool(_PydanticTool):
    """GETs a URL and returns the status line and the start of the body."""

    name = "http_get"
    description = "Fetch a URL with HTTP GET; returns the status and the body text."
    args_model = HttpGetArgs
    idempotent = True

    def __init__(
        self,
        client: httpx.AsyncClient,
        *,
        timeout: float = 10.0,
        allow_private: bool = False,
        allowed_hosts: list[str] | None = None,
    ) -> None:
        self._client = client
        self._timeout = timeout
        self._allow_private = allow_private
        self._allowed_hosts = {h.lower() for h in allowed_hosts or ()}

    async def run(self, args: dict[str, Any], ctx: ToolContext) -> str:
        """`HTTP <status>` then the body (cut at max_bytes)."""
        parsed: HttpGetArgs = self.parse(args)
        with trio.move_on_after(self._timeout) as deadline:
            await self._check_host(parsed.url)
            try:
                async with self._client.stream(
                    "GET",
                    parsed.url,
                    timeout=self._timeout,
                    headers={"Accept-Encoding": "gzip, deflate"},
                ) as response:
                    body, cut = await read_body(response, parsed.max_bytes)
            except httpx.HTTPError as exc:
                raise ToolError(f"http_get {parsed.url}: {type(exc).__name__}: {exc}") from None
        if deadline.cancelled_caught:
            raise ToolError(f"http_get {parsed.url}: no complete answer in {self._timeout:g} s")
        text = body.decode(response.encoding or "utf-8", "replace")
        return f"HTTP {response.status_code}\n{text}" + ("\n[truncated]" if cut else "")

    async def fetch(self, url: str, max_bytes: int) -> tuple[int, str | None, bytes, bool]:
        """GET `url` under this tool's rules (its timeout; no non-public address unless
        allowed): the status, the Content-Type, at most `max_bytes` of the body, and
        whether it was cut. An attachment given by URL is fetched this way.

        Raises:
            ToolError: a refused host, a failed request, or no answer in time.
        """
        with trio.move_on_after(self._timeout) as deadline:
            await self._check_host(url)
            try:
                async with self._client.stream("GET", url, timeout=self._timeout) as response:
                    body, cut = await read_body(response, max_bytes)
            except httpx.HTTPError as exc:
                raise ToolError(f"GET {url}: {type(exc).__name__}: {exc}") from None
        if deadline.cancelled_caught:
            raise ToolError(f"GET {url}: no complete answer in {self._timeout:g} s")
        return response.status_code, response.headers.get("content-type"), body, cut

    async def _check_host(self, url: str) -> None:
        await check_host(url, allow_private=self._allow_private, allowed_hosts=self._allowed_hosts)


async def check_host(
    url: str,
    *,
    allow_private: bool = False,
    allowed_hosts: Collection[str] = (),
    what: str = "http_get",
) -> None:
    """Refuse a URL whose host is, or resolves to, a non-public address (loopback,
    private, link-local, …) unless `allow_private` or the host is in `allowed_hosts`:
    `http_get`'s rules, which webhooks follow too.

    Raises:
        ToolError: naming `what`, the URL and why.
    """
    parts = urlsplit(url)
    host = (parts.hostname or "").lower()
    if not host:
        raise ToolError(f"{what} {url}: no host in the URL")
    if allow_private or host in allowed_hosts:
        return
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        raise ToolError(f"{what} {url}: bad port") from None
    try:
        infos = await trio.socket.getaddrinfo(host, port, type=trio.socket.SOCK_STREAM)
    except OSError as exc:
        raise ToolError(f"{what} {url}: cannot resolve {host!r}: {_why(exc)}") from None
    for info in infos:
        address = ipaddress.ip_address(str(info[4][0]).split("%")[0])
        if not address.is_global:
            raise ToolError(
                f"{what} {url}: {host!r} is a non-public address ({address}); "
                "allow it with tools.http_allowed_hosts or tools.http_allow_private"
            )


class WaitArgs(_Args):
    seconds: float = Field(ge=0, le=3600)


class WaitTool(_PydanticTool):
    """Waits; useful to let background agents make progress."""

    name = "wait"
    description = "Wait for a number of seconds."
    args_model = WaitArgs
    idempotent = True

    async def run(self, args: dict[str, Any], ctx: ToolContext) -> str:
        """Sleep (cancellable)."""
        parsed: WaitArgs = self.parse(args)
        await trio.sleep(parsed.seconds)
        return f"waited {parsed.seconds:g} s"


BUILTIN_TOOLS: tuple[type[_PydanticTool], ...] = (
    ReadFileTool,
    WriteFileTool,
    HttpGetTool,
    WaitTool,
)
"""Every built-in tool class: the registry that `tools:` in a subagent YAML may name."""


def builtin_tools(
    root: Path,
    client: httpx.AsyncClient,
    *,
    http_timeout: float,
    http_allow_private: bool = False,
    http_allowed_hosts: list[str] | None = None,
) -> dict[str, Any]:
    """Every built-in tool by name."""
    tools: list[Any] = [
        ReadFileTool(root),
        WriteFileTool(root),
        HttpGetTool(
            client,
            timeout=http_timeout,
            allow_private=http_allow_private,
            allowed_hosts=http_allowed_hosts,
        ),
        WaitTool(),
    ]
    return {tool.name: tool for tool in tools}
