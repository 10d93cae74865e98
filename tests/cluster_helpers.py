"""Real `orchestrator serve` / `orchestrator worker` processes on one Redis, per test.

Each test gets its own key prefix (so its cluster shares nothing with another
test's), configs for gateways and workers, and processes that are killed at the
end whatever happens. A process's output is drained into `lines` all along (a
full pipe would stall it) and shown when a test fails.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import msgspec
import trio
import yaml
from websockets.trio.client import ClientConnection

from tests.server_helpers import request

REPO = Path(__file__).resolve().parent.parent


class Instance:
    """One running process of the cluster."""

    def __init__(self, process: trio.Process, kind: str) -> None:
        self.process = process
        self.kind = kind
        self.lines: list[str] = []
        self.url = ""
        self.name = ""
        self.ready = trio.Event()

    async def _drain(self) -> None:
        assert self.process.stdout is not None
        buffer = b""
        async for chunk in self.process.stdout:
            buffer += chunk
            while b"\n" in buffer:
                raw, buffer = buffer.split(b"\n", 1)
                line = raw.decode(errors="replace")
                self.lines.append(line)
                if line.startswith("orchestrator listening on "):
                    self.url = line.split()[3]
                    self.ready.set()
                elif line.startswith("orchestrator worker "):
                    self.name = line.split()[2]
                    self.ready.set()

    def kill(self) -> None:
        """Kill -9."""
        if self.process.returncode is None:
            self.process.kill()

    def stop(self) -> None:
        """SIGSTOP: the process is frozen, its sockets stay open."""
        self.process.send_signal(signal.SIGSTOP)

    def cont(self) -> None:
        """SIGCONT."""
        self.process.send_signal(signal.SIGCONT)

    def log(self) -> str:
        return "\n".join(self.lines[-60:])


def write_cluster_configs(
    root: Path,
    redis_url: str,
    *,
    lease_seconds: float = 2.0,
    max_runs: int = 16,
    max_attempts: int = 3,
    token_delay: float = 0.002,
    extra_agents: dict[str, dict[str, Any]] | None = None,
    model: dict[str, Any] | None = None,
    limits: dict[str, Any] | None = None,
) -> tuple[Path, Path]:
    """(gateway config, worker config) for one cluster in `root` (`model`: the default
    model, else the offline `scripted` one)."""
    sub = root / "subagents"
    sub.mkdir(parents=True, exist_ok=True)
    for spec_path in (REPO / "configs" / "subagents").glob("*.yaml"):
        spec = yaml.safe_load(spec_path.read_text())
        spec["script"]["token_delay"] = token_delay
        (sub / spec_path.name).write_text(yaml.safe_dump(spec))
    for agent_id, spec in (extra_agents or {}).items():
        (sub / f"{agent_id}.yaml").write_text(yaml.safe_dump(spec))
    paths = []
    for name, worker in (("gateway", False), ("worker", True)):
        data = {
            "server": {"host": "127.0.0.1", "port": 0, "shutdown_timeout": 5},
            "storage": {"url": redis_url, "durability": "relaxed"},
            "models": {"default": model or {"provider": "scripted"}},
            "subagents_dir": "subagents",
            **({"limits": limits} if limits else {}),
            "cluster": {
                "name": "test",
                "worker": worker,
                "lease_seconds": lease_seconds,
                "max_runs": max_runs,
                "max_attempts": max_attempts,
            },
        }
        path = root / f"{name}.yaml"
        path.write_text(yaml.safe_dump(data))
        paths.append(path)
    return paths[0], paths[1]


class Cluster:
    """Start instances; every one is killed when the block ends."""

    def __init__(self, nursery: trio.Nursery, gateway_config: Path, worker_config: Path) -> None:
        self.nursery = nursery
        self.gateway_config = gateway_config
        self.worker_config = worker_config
        self.instances: list[Instance] = []

    async def start(self, kind: str, config: Path | None = None, port: int = 0) -> Instance:
        """`serve` (a gateway, on `port`: by default a free one) or `worker`; returns
        once it is ready."""
        if config is None:
            config = self.gateway_config if kind == "serve" else self.worker_config
        args = [sys.executable, "-m", "orchestrator", kind, "--config", str(config)]
        if kind == "serve":
            args += ["--port", str(port)]
        process = await trio.lowlevel.open_process(
            args,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            cwd=REPO,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        instance = Instance(process, kind)
        self.instances.append(instance)
        self.nursery.start_soon(instance._drain)
        with trio.fail_after(30):
            while not instance.ready.is_set():
                if process.returncode is not None:
                    raise RuntimeError(f"{kind} exited early:\n{instance.log()}")
                with trio.move_on_after(0.1):
                    await instance.ready.wait()
        return instance

    def logs(self) -> str:
        return "\n\n".join(f"--- {i.kind} {i.name or i.url}\n{i.log()}" for i in self.instances)


@asynccontextmanager
async def cluster(root: Path, redis_url: str, **options: Any) -> AsyncIterator[Cluster]:
    """A cluster's configs in `root`; its processes are killed (and reaped) afterwards."""
    gateway, worker = write_cluster_configs(root, redis_url, **options)
    async with trio.open_nursery() as nursery:
        group = Cluster(nursery, gateway, worker)
        try:
            yield group
        except BaseException:
            print(group.logs())
            raise
        finally:
            await reap(group.instances)
            nursery.cancel_scope.cancel()


async def reap(instances: list[Instance]) -> None:
    """Kill every process still running (a stopped one too) and wait for them all."""
    for instance in instances:
        if instance.process.returncode is None:
            instance.cont()
            instance.kill()
    with trio.CancelScope(shield=True), trio.move_on_after(10):
        for instance in instances:
            await instance.process.wait()


# -- reading what the cluster says ------------------------------------------------


class _Frame(msgspec.Struct):
    op: str
    events: list[msgspec.Raw] = []
    status: str | None = None


_decode_frame = msgspec.json.Decoder(_Frame).decode


async def raw_events(ws: ClientConnection, *, within: float = 60) -> tuple[list[bytes], str]:
    """Every event of the subscription on `ws`, as the bytes the server sent, and the end status."""
    out: list[bytes] = []
    with trio.fail_after(within):
        while True:
            frame = _decode_frame(await ws.recv(decode=False))
            if frame.op == "events":
                out.extend(bytes(raw) for raw in frame.events)
            elif frame.op == "end":
                return out, frame.status or ""


def seqs(raws: list[bytes]) -> list[int]:
    return [json.loads(raw)["seq"] for raw in raws]


async def watch_all(ws: ClientConnection, within: float = 60) -> tuple[list[dict[str, Any]], str]:
    raws, status = await raw_events(ws, within=within)
    return [json.loads(r) for r in raws], status


def check_tree(events: list[dict[str, Any]]) -> None:
    """Seq gap-free, one terminal event per agent, no tool result twice."""
    assert [e["seq"] for e in events] == list(range(1, len(events) + 1))

    def key(e: dict[str, Any]) -> str | None:
        return e["source"]["agentKey"] if e["source"] else None

    started = [key(e) for e in events if e["type"] in ("RUN_STARTED", "AGENT_STARTED")]
    ended = [key(e) for e in events if e["type"] in ("AGENT_RESULT", "AGENT_ERROR")]
    assert sorted(started, key=str) == sorted(ended, key=str), (started, ended)
    results = [
        (key(e), e["data"]["toolCallId"])
        for e in events
        if e["type"] == "TOOL_RESULT" and not e["data"].get("server")
    ]
    assert len(results) == len(set(results))
    assert events[-1]["type"] == "RUN_FINISHED"


async def runs_entry(ws: ClientConnection, run_id: str) -> dict[str, Any]:
    listing = await request(ws, op="runs", id="runs", limit=50)
    (entry,) = [r for r in listing["runs"] if r["runId"] == run_id]
    assert isinstance(entry, dict)
    return entry


async def until(condition: Any, within: float = 30) -> None:
    """Poll an async condition about other processes' state (nobody signals it)."""
    with trio.fail_after(within):
        while not await condition():  # noqa: ASYNC110 - polling state nobody signals
            await trio.sleep(0.1)
