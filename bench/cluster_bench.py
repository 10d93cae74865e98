"""Cluster benchmark: the same run in one process and across a gateway and a worker.

Real `orchestrator` processes on the machine's Redis (a fresh key prefix, dropped
afterwards), clients in this process on websockets' Sans-I/O protocol
(`bench.ws_bench.LeanClient`):

- throughput: a `talker` agent streams T deltas with no delay; one client on the
  gateway counts events/s from its first frame to `end`;
- live latency: the talker streams at one delta per `--delay` s; latency is
  receipt time minus the event's `ts` (stamped by the worker), so across processes
  it includes the worker's journal write, Redis, the gateway's tail and its send;
- the fenced append: `ClusterStore.append` (a lease check and the XADDs in one
  script per run) against the plain journal write (`RedisStorage.write`, one
  MULTI/EXEC), per batch of N events, in this process.

    python -m bench.cluster_bench
    python -m bench.cluster_bench --deltas 50000 --paced 3000 --delay 0.001
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import msgspec
import trio
import yaml

from bench.ws_bench import LeanClient, _decode
from orchestrator.cluster.store import ClusterStore
from orchestrator.storage.base import RunRecord
from orchestrator.storage.redis import RedisStorage

REDIS = "redis://127.0.0.1:6379/0"


def write_configs(root: Path, prefix: str, deltas: int, delay: float) -> dict[str, Path]:
    (root / "subagents").mkdir(parents=True, exist_ok=True)
    talker = {
        "description": "streams",
        "instructions": "talk",
        "script": {"token_delay": delay, "turns": [{"say": "w " * deltas, "sleep": 0.5}]},
    }
    (root / "subagents" / "talker.yaml").write_text(yaml.safe_dump(talker))
    base: dict[str, Any] = {
        "server": {"host": "127.0.0.1", "port": 0},
        "storage": {"url": f"{REDIS}?prefix={prefix}", "durability": "relaxed"},
        "models": {"default": {"provider": "scripted"}},
        "subagents_dir": "subagents",
    }
    configs = {
        "single": base,
        "gateway": {**base, "cluster": {"name": "bench", "worker": False}},
        "worker": {**base, "cluster": {"name": "bench", "worker": True}},
    }
    paths = {}
    for name, data in configs.items():
        paths[name] = root / f"{name}.yaml"
        paths[name].write_text(yaml.safe_dump(data))
    return paths


async def start(kind: str, config: Path, nursery: trio.Nursery) -> tuple[trio.Process, str]:
    """An `orchestrator` process; returns it and its URL (serve) or name (worker)."""
    args = [sys.executable, "-m", "orchestrator", kind, "--config", str(config)]
    if kind == "serve":
        args += ["--port", "0"]
    proc = await trio.lowlevel.open_process(
        args,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    assert proc.stdout is not None
    buffer = b""
    with trio.fail_after(30):
        while b"\n" not in buffer:
            buffer += await proc.stdout.receive_some(4096)
    line = buffer.split(b"\n", 1)[0].decode()
    nursery.start_soon(_drain, proc)
    return proc, line.split()[3] if kind == "serve" else line.split()[2]


async def _drain(proc: trio.Process) -> None:
    assert proc.stdout is not None
    async for _ in proc.stdout:
        pass


async def one_run(url: str) -> dict[str, Any]:
    """Start the talker through `url`; events/s and latencies seen by this client."""
    latencies: list[float] = []
    count, first = 0, None
    async with LeanClient(url) as ws:
        await ws.send(json.dumps({"op": "run", "id": 0, "agent": "talker", "input": "x"}))
        while True:
            for raw in await ws.messages():
                now = time.time()
                frame = _decode(raw)
                if frame.op == "events":
                    if first is None:
                        first = now
                    count += len(frame.events)
                    latencies.extend(now - e.ts for e in frame.events)
                elif frame.op == "end":
                    elapsed = now - (first or now)
                    latencies.sort()
                    return {
                        "events": count,
                        "eps": count / elapsed if elapsed else 0.0,
                        "p50_ms": latencies[len(latencies) // 2] * 1000,
                        "p99_ms": latencies[int(len(latencies) * 0.99)] * 1000,
                    }


async def measure(mode: str, deltas: int, delay: float) -> dict[str, Any]:
    prefix = f"aor-bench-{uuid.uuid4().hex[:8]}:"
    with tempfile.TemporaryDirectory() as tmp:
        paths = write_configs(Path(tmp), prefix, deltas, delay)
        async with trio.open_nursery() as nursery:
            procs = []
            try:
                if mode == "single":
                    proc, url = await start("serve", paths["single"], nursery)
                    procs.append(proc)
                else:
                    proc, url = await start("serve", paths["gateway"], nursery)
                    procs.append(proc)
                    procs.append((await start("worker", paths["worker"], nursery))[0])
                return await one_run(url)
            finally:
                for proc in procs:
                    proc.terminate()
                with trio.CancelScope(shield=True):
                    for proc in procs:
                        await proc.wait()
                    await _drop(prefix)
                nursery.cancel_scope.cancel()


async def _drop(prefix: str) -> None:
    async with RedisStorage.open(f"{REDIS}?prefix={prefix}", durability="relaxed") as storage:
        client = storage._client
        assert client is not None
        keys = [key async for key in client.scan_iter(match=f"{prefix}*")]
        if keys:
            await client.delete(keys)


async def append_cost(batch: int, rounds: int) -> dict[str, float]:
    """µs per batch: the fenced append vs the plain journal write."""
    prefix = f"aor-bench-{uuid.uuid4().hex[:8]}:"
    body = json.dumps({"type": "REASONING", "data": {"delta": "w "}, "pad": "x" * 150}).encode()
    out: dict[str, float] = {}
    async with RedisStorage.open(f"{REDIS}?prefix={prefix}", durability="relaxed") as storage:
        store = ClusterStore(storage, "bench")
        record = RunRecord(
            run_id="run-f",
            agent_id="a",
            input="x",
            status="running",
            created_at=0.0,
            root_session_id="s",
        )
        token = await store.acquire("run-f", "w", 60)
        assert token is not None
        for name in ("plain", "fenced"):
            run_id = "run-p" if name == "plain" else "run-f"
            seq = 0
            start = time.perf_counter()
            for _ in range(rounds):
                rows = [(run_id, seq + i + 1, body) for i in range(batch)]
                seq += batch
                rec = msgspec.structs.replace(record, run_id=run_id, last_seq=seq)
                if name == "plain":
                    await storage.write([rec], rows)
                else:
                    refused = await storage.append([rec], rows, {run_id: token})
                    assert not refused
            out[name] = (time.perf_counter() - start) / rounds * 1e6
    await _drop(prefix)
    return out


async def main(args: argparse.Namespace) -> None:
    print(
        f"throughput: the talker streams {args.deltas} deltas with no delay "
        f"(medians of {args.repeat})"
    )
    rows: dict[str, list[dict[str, Any]]] = {"single": [], "cluster": []}
    for _ in range(args.repeat):
        for mode in rows:
            rows[mode].append(await measure(mode, args.deltas, 0.0))
    for mode, results in rows.items():
        eps = statistics.median(r["eps"] for r in results)
        print(f"  {mode:8} {eps:>12,.0f} events/s   runs: {[round(r['eps']) for r in results]}")
    print(f"\nlive latency: {args.paced} deltas at one per {args.delay * 1000:g} ms")
    for mode in rows:
        results = [await measure(mode, args.paced, args.delay) for _ in range(args.repeat)]
        p50 = statistics.median(r["p50_ms"] for r in results)
        p99 = statistics.median(r["p99_ms"] for r in results)
        print(
            f"  {mode:8} p50 {p50:6.2f} ms   p99 {p99:6.2f} ms   "
            f"runs p99: {[round(r['p99_ms'], 2) for r in results]}"
        )
    print("\nappend per batch (this process, loopback Redis):")
    for batch in (1, 16, 256):
        cost = await append_cost(batch, max(20, 2000 // batch))
        print(
            f"  {batch:>4} events: plain {cost['plain']:8.0f} µs   fenced {cost['fenced']:8.0f} µs"
        )


def parser() -> argparse.ArgumentParser:
    """The command line (docs/benchmarks.md shows it; tests/unit/test_doc_examples.py parses it)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--deltas", type=int, default=20_000)
    parser.add_argument("--paced", type=int, default=2000)
    parser.add_argument("--delay", type=float, default=0.002)
    parser.add_argument("--repeat", type=int, default=3)
    return parser


if __name__ == "__main__":
    import logging

    logging.getLogger("orchestrator.storage.redis").setLevel(logging.ERROR)  # relaxed: known
    trio.run(main, parser().parse_args())
