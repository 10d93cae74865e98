"""Shared helpers: write configs and subagents into a temp dir, collect run events."""

from __future__ import annotations

import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

import trio
import yaml

from orchestrator.config import ServerConfig, load_config
from orchestrator.core.events import Event
from orchestrator.runtime.engine import Orchestrator

REPO = Path(__file__).resolve().parent.parent


def write_config(
    tmp_path: Path,
    agents: dict[str, dict[str, Any]],
    *,
    models: dict[str, Any] | None = None,
    limits: dict[str, Any] | None = None,
    tools: dict[str, Any] | None = None,
) -> ServerConfig:
    """Write server.yaml and one YAML per agent under tmp_path, then load them."""
    sub = tmp_path / "subagents"
    sub.mkdir(exist_ok=True)
    for agent_id, spec in agents.items():
        (sub / f"{agent_id}.yaml").write_text(yaml.safe_dump(spec), encoding="utf-8")
    server = {
        "storage": "memory://",
        "models": models or {"default": {"provider": "scripted"}},
        "subagents_dir": "subagents",
        "limits": {
            "max_depth": 4,
            "max_children": 16,
            "run_timeout_seconds": 900,
            **(limits or {}),
        },
        "tools": tools or {},
    }
    path = tmp_path / "server.yaml"
    path.write_text(yaml.safe_dump(server), encoding="utf-8")
    return load_config(path)


def dedent(text: str) -> str:
    return textwrap.dedent(text).lstrip()


async def collect(orch: Orchestrator, agent: str, task: str, **kw: Any) -> list[Event]:
    """Stream a run to the end and return all its events."""
    events: list[Event] = []
    async with orch.stream(agent, task, **kw) as run:
        async for event in run:
            events.append(event)
    return events


def of_type(events: list[Event], kind: str) -> list[Event]:
    return [e for e in events if e.type == kind]


async def eventually(condition: Callable[[], bool], *, within: float = 10.0) -> None:
    """Wait until `condition()` holds (state another task or process changes), or fail."""
    with trio.fail_after(within):
        while not condition():  # noqa: ASYNC110 - polling state nobody signals
            await trio.sleep(0.05)
