"""Draws a `TreeView` with rich: one line per agent instance, indented by depth."""

from __future__ import annotations

from rich.console import Group
from rich.text import Text

from orchestrator.core.tree import AgentNode, TreeView

__all__ = ["render_tree"]

_STATUS = {
    "running": ("●", "yellow"),
    "done": ("✓", "green"),
    "timeout": ("⏱", "red"),
    "cancelled": ("⊘", "magenta"),
}


def _line(node: AgentNode, width: int) -> Text:
    icon, style = _STATUS.get(node.status, ("✗", "red"))
    line = Text("  " * node.depth)
    line.append(f"{icon} ", style=style)
    line.append(node.name, style="bold")
    if node.name != node.agent_id:
        line.append(f" ({node.agent_id})", style="dim")
    line.append(f" {node.status}", style=style)
    if node.status == "running" and node.stalled is not None:
        line.append(f" ⚠ stalled: no event for {node.stalled:g} s", style="bold yellow")
    if node.status == "running":
        for fields in node.pending.values():
            who = fields.get("$.agent_id", "")
            task = " ".join(str(fields.get("$.task", "")).split())[:40]
            line.append(f" → spawning {who}: {task}…", style="cyan")
        if node.waiting:
            line.append(
                f" ⏸ waiting for approval: {', '.join(node.waiting.values())}", style="magenta"
            )
        elif node.compacting:
            line.append(" ⟲ compacting its conversation…", style="yellow")
        elif node.tools_running:
            line.append(f" ⚙ {', '.join(node.tools_running)}", style="cyan")
        elif node.thinking:
            line.append(" thinking…", style="italic dim")
    if node.compactions:
        line.append(f" [compacted ×{node.compactions}]", style="dim")
    if node.usage:
        used = int(node.usage.get("inputTokens", 0)) + int(node.usage.get("outputTokens", 0))
        line.append(f" [{used} tok]", style="dim")
    if node.error:
        detail = node.error
    elif node.status == "running":
        detail = node.text
    else:
        detail = node.result or node.text
    detail = " ".join(detail.split())
    room = width - line.cell_len - 3
    if detail and room > 10:
        if len(detail) > room:
            detail = (
                "…" + detail[-(room - 1) :]
                if node.status == "running"
                else (detail[: room - 1] + "…")
            )
        line.append("  " + detail, style="red" if node.error else "")
    return line


def render_tree(view: TreeView, width: int = 100) -> Group:
    """The whole tree as a rich renderable, plus a status line for the run."""
    lines = [_line(node, width) for node in view.walk()]
    if view.run_status != "running":
        style = "green" if view.run_status == "completed" else "red"
        footer = Text(f"run {view.run_status}", style=f"bold {style}")
        if view.error:
            footer.append(f": {view.error}", style=style)
        lines.append(footer)
    return Group(*lines)
