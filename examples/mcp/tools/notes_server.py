"""A small MCP server over stdio (the `mcp` package's `MCPServer`): notes kept for as
long as its session lives. `examples/mcp/server.yaml` starts it for its agents."""

from __future__ import annotations

import os

from mcp.server.mcpserver import MCPServer

app = MCPServer("notes")
notes: list[str] = []


@app.tool()
def add(text: str) -> str:
    """Add a note."""
    notes.append(text)
    return f"noted ({len(notes)} so far)"


@app.tool(name="list")
def list_notes() -> str:
    """Every note, one per line, under the list's title."""
    title = os.environ.get("NOTES_TITLE", "Notes")
    return "\n".join([f"{title}:", *(f"- {note}" for note in notes)])


if __name__ == "__main__":
    app.run()
