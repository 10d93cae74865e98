"""Built-in tools: `http_get`, `read_file`, `write_file`, `wait`.

Each declares its arguments as a pydantic model (the JSON schema models see comes
from it) and a `concurrency_safe` flag: safe tools run in parallel with the other
calls of a turn; unsafe ones (`write_file`) run one at a time, in call order.
Files are confined to one configured root directory.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

import httpx
import pydantic
import trio
from pydantic import BaseModel, ConfigDict, Field

from agents.errors import ToolError
from agents.tools.base import ToolContext

__all__ = ["HttpGetTool", "ReadFileTool", "WaitTool", "WriteFileTool", "builtin_tools"]


class _Args(BaseModel):
    model_config = ConfigDict(extra="forbid")


class _PydanticTool:
    """Common plumbing: schema from the args model, validation with a clear error."""

    name: ClassVar[str]
    description: ClassVar[str]
    args_model: ClassVar[type[_Args]]
    concurrency_safe: ClassVar[bool] = True

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

    async def run(self, args: dict[str, Any], ctx: ToolContext) -> str:
        """The file's text (cut at max_bytes)."""
        parsed: ReadFileArgs = self.parse(args)
        path = self.resolve(self.name, parsed.path)
        try:
            data = await trio.Path(path).read_bytes()
        except OSError as exc:
            raise ToolError(f"read_file: cannot read {parsed.path!r}: {exc.strerror}") from None
        text = data[: parsed.max_bytes].decode("utf-8", "replace")
        return text + ("\n[truncated]" if len(data) > parsed.max_bytes else "")


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
        target = trio.Path(path)
        await target.parent.mkdir(parents=True, exist_ok=True)
        mode = "a" if parsed.append else "w"
        async with await target.open(mode, encoding="utf-8") as handle:
            await handle.write(parsed.content)
        return f"wrote {len(parsed.content)} characters to {parsed.path}"


class HttpGetArgs(_Args):
    url: str = Field(pattern=r"^https?://", description="An http:// or https:// URL.")
    max_bytes: int = Field(default=100_000, ge=1, le=10_000_000)


class HttpGetTool(_PydanticTool):
    """GETs a URL and returns the status line and the start of the body."""

    name = "http_get"
    description = "Fetch a URL with HTTP GET; returns the status and the body text."
    args_model = HttpGetArgs

    def __init__(self, client: httpx.AsyncClient, *, timeout: float = 10.0) -> None:
        self._client = client
        self._timeout = timeout

    async def run(self, args: dict[str, Any], ctx: ToolContext) -> str:
        """`HTTP <status>` then the body (cut at max_bytes)."""
        parsed: HttpGetArgs = self.parse(args)
        try:
            async with self._client.stream("GET", parsed.url, timeout=self._timeout) as response:
                body = b""
                async for chunk in response.aiter_bytes():
                    body += chunk
                    if len(body) >= parsed.max_bytes:
                        break
        except httpx.HTTPError as exc:
            raise ToolError(f"http_get {parsed.url}: {type(exc).__name__}: {exc}") from None
        text = body[: parsed.max_bytes].decode(response.encoding or "utf-8", "replace")
        return f"HTTP {response.status_code}\n{text}"


class WaitArgs(_Args):
    seconds: float = Field(ge=0, le=3600)


class WaitTool(_PydanticTool):
    """Waits; useful to let background agents make progress."""

    name = "wait"
    description = "Wait for a number of seconds."
    args_model = WaitArgs

    async def run(self, args: dict[str, Any], ctx: ToolContext) -> str:
        """Sleep (cancellable)."""
        parsed: WaitArgs = self.parse(args)
        await trio.sleep(parsed.seconds)
        return f"waited {parsed.seconds:g} s"


def builtin_tools(root: Path, client: httpx.AsyncClient, *, http_timeout: float) -> dict[str, Any]:
    """Every built-in tool by name."""
    tools: list[Any] = [
        ReadFileTool(root),
        WriteFileTool(root),
        HttpGetTool(client, timeout=http_timeout),
        WaitTool(),
    ]
    return {tool.name: tool for tool in tools}
