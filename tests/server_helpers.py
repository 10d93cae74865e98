"""Helpers for tests against a real server on loopback with a real websockets client."""

from __future__ import annotations

import functools
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import trio
import yaml
from websockets.trio.client import ClientConnection, connect

from orchestrator.config import ServerConfig, load_config
from orchestrator.server.app import RunningServer, serve
from tests.helpers import REPO


def demo_config(
    tmp_path: Path,
    *,
    token_delay: float | None = 0.0,
    storage: str | dict[str, Any] = "memory://",
    server: dict[str, Any] | None = None,
    limits: dict[str, Any] | None = None,
    extra_agents: dict[str, dict[str, Any]] | None = None,
) -> ServerConfig:
    """The shipped demo agents (token_delay replaced), with a config of our own."""
    sub = tmp_path / "subagents"
    sub.mkdir(exist_ok=True)
    for spec_path in (REPO / "configs" / "subagents").glob("*.yaml"):
        spec = yaml.safe_load(spec_path.read_text())
        if token_delay is not None:
            spec["script"]["token_delay"] = token_delay
        (sub / spec_path.name).write_text(yaml.safe_dump(spec))
    for agent_id, spec in (extra_agents or {}).items():
        (sub / f"{agent_id}.yaml").write_text(yaml.safe_dump(spec))
    data = {
        "server": {"host": "127.0.0.1", "port": 0, **(server or {})},
        "storage": storage,
        "models": {"default": {"provider": "scripted"}},
        "subagents_dir": "subagents",
        "limits": {"max_depth": 4, **(limits or {})},
    }
    path = tmp_path / "server.yaml"
    path.write_text(yaml.safe_dump(data))
    return load_config(path)


@asynccontextmanager
async def running_server(config: ServerConfig) -> AsyncIterator[RunningServer]:
    """Start a server on a free port; shut it down gracefully afterwards."""
    async with trio.open_nursery() as nursery:
        server: RunningServer = await nursery.start(functools.partial(serve, config, port=0))
        try:
            yield server
        finally:
            with trio.CancelScope(shield=True), trio.move_on_after(10):
                await server.shutdown()


async def send(ws: ClientConnection, **message: Any) -> None:
    await ws.send(json.dumps(message))


async def recv(ws: ClientConnection) -> dict[str, Any]:
    with trio.fail_after(10):
        frame: dict[str, Any] = json.loads(await ws.recv())
        return frame


async def request(ws: ClientConnection, **message: Any) -> dict[str, Any]:
    await send(ws, **message)
    return await recv(ws)


async def read_until_end(
    ws: ClientConnection, sub: str | None = None
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Collect the events of a subscription until its `end` frame."""
    events: list[dict[str, Any]] = []
    while True:
        frame = await recv(ws)
        if frame["op"] == "events" and (sub is None or frame["sub"] == sub):
            events.extend(frame["events"])
        elif frame["op"] == "end" and (sub is None or frame["sub"] == sub):
            return events, frame


async def run_to_end(
    url: str, agent: str = "planner", task: str = "q", **kw: Any
) -> tuple[str, list[dict[str, Any]], dict[str, Any]]:
    async with connect(url, max_size=None) as ws:
        ack = await request(ws, op="run", id="r", agent=agent, input=task, **kw)
        assert ack["op"] == "ack", ack
        events, end = await read_until_end(ws, ack["sub"])
        return ack["runId"], events, end


async def replay(
    url: str, run_id: str, after_seq: int = 0, headers: dict[str, str] | None = None, **kw: Any
) -> list[dict[str, Any]]:
    async with connect(url, max_size=None, additional_headers=headers) as ws:
        ack = await request(ws, op="subscribe", id="s", runId=run_id, afterSeq=after_seq, **kw)
        assert ack["op"] == "ack", ack
        events, _ = await read_until_end(ws, ack["sub"])
        return events
