"""A real MCP server (the `mcp` package's own `MCPServer`) for the tests, over stdio.

python tests/fakes/mcp_server.py            # stdio
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import anyio
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import ImageContent, TextContent

app = MCPServer("demo")


@app.tool()
def add(a: int, b: int) -> int:
    """Add two numbers."""
    return a + b


@app.tool()
async def slow(steps: int, ctx: Context) -> str:
    """Count to `steps`, reporting progress at each."""
    for i in range(steps):
        await ctx.report_progress(i + 1, steps, f"step {i + 1}")
        await anyio.sleep(0.15)
    return f"counted to {steps}"


@app.tool()
def crash() -> str:
    """Exit the process mid-call."""
    os._exit(3)


@app.tool()
async def hang(marker: str) -> str:
    """Never answer; write `marker` (a file path) if the call is cancelled."""
    try:
        await anyio.sleep(3600)
    except anyio.get_cancelled_exc_class():
        Path(marker).write_text("cancelled")  # noqa: ASYNC240 - cancelled: no await here
        raise
    return "never"


@app.tool()
def pid() -> int:
    """This server's process id."""
    return os.getpid()


@app.tool()
def env(name: str) -> str:
    """An environment variable of this process."""
    return os.environ.get(name, "<unset>")


@app.tool()
def fail() -> str:
    """A tool that reports an error."""
    raise ToolError("it went wrong on purpose")


@app.tool()
def header(name: str, ctx: Context) -> str:
    """A header of the HTTP request that carried this call (`<none>` over stdio)."""
    headers = ctx.headers or {}
    return headers.get(name.lower(), "<none>")


DOT_PNG = (
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk"
    "+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="
)


@app.tool()
def dot() -> list[TextContent | ImageContent]:
    """A one-pixel PNG, with a caption."""
    return [
        TextContent(type="text", text="a dot"),
        ImageContent(type="image", data=DOT_PNG, mime_type="image/png"),
    ]


@app.tool(name="odd name!")
def odd() -> str:
    """A tool whose name models would refuse."""
    return "odd"


if __name__ == "__main__":
    if sys.argv[1:2] == ["--http"]:
        app.run("streamable-http", host="127.0.0.1", port=int(sys.argv[2]))
    else:
        app.run()
