"""Shared pieces of the soak runs: a server on loopback, configs, memory readings."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml
from websockets.trio.client import ClientConnection

from orchestrator.config import ServerConfig, load_config
from tests.server_helpers import read_until_end, replay, running_server

__all__ = [
    "read_until_end",
    "replay",
    "request",
    "row",
    "rss_mib",
    "running_server",
    "talker",
    "write_config",
]


def rss_mib() -> float:
    """This process's resident memory now (VmRSS), in MiB."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def talker(words: int, delay: float = 0.0) -> dict[str, Any]:
    """A scripted agent that streams `words` text deltas."""
    return {
        "description": "streams a lot",
        "instructions": "talk",
        "script": {"token_delay": delay, "turns": [{"say": "w " * words}]},
    }


def write_config(
    root: Path,
    agents: dict[str, dict[str, Any]],
    *,
    storage: Any = "memory://",
    server: dict[str, Any] | None = None,
    limits: dict[str, Any] | None = None,
    models: dict[str, Any] | None = None,
) -> ServerConfig:
    (root / "subagents").mkdir(parents=True, exist_ok=True)
    for name, spec in agents.items():
        (root / "subagents" / f"{name}.yaml").write_text(yaml.safe_dump(spec))
    data = {
        "server": {"host": "127.0.0.1", "port": 0, **(server or {})},
        "storage": storage,
        "models": models or {"default": {"provider": "scripted"}},
        "subagents_dir": "subagents",
        "limits": limits or {},
    }
    (root / "server.yaml").write_text(yaml.safe_dump(data))
    return load_config(root / "server.yaml")


async def request(ws: ClientConnection, **message: Any) -> dict[str, Any]:
    await ws.send(json.dumps(message))
    while True:
        frame: dict[str, Any] = json.loads(await ws.recv())
        if frame["op"] not in ("events", "end", "gap"):
            return frame


def row(*cells: object) -> str:
    return "| " + " | ".join(str(c) for c in cells) + " |"
