"""The cost of one remote hop: a child that runs on another server, next to a local one.

Two `orchestrator serve` processes on loopback — "there" runs `talker` (T text
deltas), "here" has `far_boss` (spawns `far_talker`: `remote:` → there's `talker`)
and `boss` (spawns the same `talker` locally) — and this process watches the run
here over a WebSocket. So three processes share the 2 cores, as they would two
hosts' worth of work.

Reported per case: the talker's deltas per second as the watcher receives them
(first to last), and the latency from the talker's emission to the watcher:
for the local child, receipt − the event's `ts`; through the hop, receipt − the
`ts` the event had *there* (its `remote.seq` looked up in the remote run, read
back afterwards), so the hop's own time is counted.

    python -m bench.remote_bench                    # 20,000 unpaced, then 1,000 at 200/s
    python -m bench.remote_bench --deltas 50000 --paced 2000 --rate 100
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import msgspec
import trio
import yaml
from websockets.trio.client import connect

REPO = Path(__file__).resolve().parent.parent


class _Source(msgspec.Struct):
    depth: int
    remote: dict[str, Any] | None = None


class _Event(msgspec.Struct):
    seq: int
    ts: float
    type: str
    source: _Source | None = None


class _Frame(msgspec.Struct):
    op: str
    events: list[_Event] = []
    runId: str | None = None
    sub: str | None = None


_decode = msgspec.json.Decoder(_Frame).decode


def write_config(root: Path, agents: dict[str, Any]) -> Path:
    (root / "subagents").mkdir(parents=True)
    for name, spec in agents.items():
        (root / "subagents" / f"{name}.yaml").write_text(yaml.safe_dump(spec))
    config = {
        "server": {"host": "127.0.0.1", "port": 0},
        "storage": "sqlite:///journal.db",
        "models": {"default": {"provider": "scripted"}},
        "subagents_dir": "subagents",
    }
    (root / "server.yaml").write_text(yaml.safe_dump(config))
    return root / "server.yaml"


def talker(deltas: int, delay: float) -> dict[str, Any]:
    return {
        "description": "streams words",
        "instructions": "talk",
        "script": {"token_delay": delay, "turns": [{"say": "w " * deltas}]},
    }


def boss(child: str) -> dict[str, Any]:
    spawn = {"name": "agent_spawn", "args": {"agent_id": child, "task": "talk"}}
    return {
        "description": "spawns one child",
        "instructions": "lead",
        "tools": ["agent_spawn"],
        "script": {"turns": [{"calls": [spawn]}, {"say": "done"}]},
    }


def start(config: Path) -> tuple[subprocess.Popen[bytes], str]:
    """`orchestrator serve` on a free port: the process and its URL."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "orchestrator", "serve", "--config", str(config)],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    assert proc.stdout is not None
    line = proc.stdout.readline().decode()
    return proc, line.split("listening on ")[1].split()[0]


async def watch(url: str, agent: str) -> tuple[list[tuple[float, _Event]], str]:
    """Run `agent` here and keep the depth-1 deltas with their receipt times."""
    got: list[tuple[float, _Event]] = []
    async with connect(url, max_size=None) as ws:
        await ws.send(json.dumps({"op": "run", "id": 1, "agent": agent, "input": "go"}))
        run_id = ""
        while True:
            frame = _decode(await ws.recv())
            now = time.time()
            if frame.op == "ack":
                run_id = frame.runId or ""
            elif frame.op == "events":
                got += [
                    (now, e)
                    for e in frame.events
                    if e.type == "REASONING" and e.source is not None and e.source.depth == 1
                ]
            elif frame.op == "end":
                return got, run_id


async def emitted_there(url: str, run_id: str) -> dict[int, float]:
    """Seq → ts of a run on the remote server (read back after it ended)."""
    found: dict[int, float] = {}
    async with connect(url, max_size=None) as ws:
        await ws.send(json.dumps({"op": "subscribe", "id": 1, "runId": run_id}))
        while True:
            frame = _decode(await ws.recv())
            if frame.op == "events":
                found.update((e.seq, e.ts) for e in frame.events)
            elif frame.op == "end":
                return found


async def measure(here: str, there: str, agent: str) -> dict[str, float]:
    got, _ = await watch(here, agent)
    remote_run = next(
        (e.source.remote["runId"] for _, e in got if e.source and e.source.remote), None
    )
    if remote_run is not None:
        ts = await emitted_there(there, remote_run)
        lags = [t - ts[e.source.remote["seq"]] for t, e in got if e.source and e.source.remote]
    else:
        lags = [t - e.ts for t, e in got]
    span = got[-1][0] - got[0][0]
    lags.sort()
    return {
        "deltas": len(got),
        "per_second": len(got) / span if span > 0 else float("inf"),
        "p50_ms": statistics.median(lags) * 1000,
        "p99_ms": lags[int(len(lags) * 0.99) - 1] * 1000,
    }


def run_case(deltas: int, delay: float, rounds: int) -> dict[str, list[dict[str, float]]]:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        there_proc, there = start(write_config(root / "there", {"talker": talker(deltas, delay)}))
        here_agents = {
            "talker": talker(deltas, delay),
            "far_talker": {"description": "far", "remote": {"url": there, "agent": "talker"}},
            "boss": boss("talker"),
            "far_boss": boss("far_talker"),
        }
        here_proc, here = start(write_config(root / "here", here_agents))
        try:
            results: dict[str, list[dict[str, float]]] = {"local child": [], "remote child": []}
            for _ in range(rounds):
                results["local child"].append(trio.run(measure, here, there, "boss"))
                results["remote child"].append(trio.run(measure, here, there, "far_boss"))
            return results
        finally:
            for proc in (here_proc, there_proc):
                proc.send_signal(signal.SIGTERM)
                proc.wait(10)


def parser() -> argparse.ArgumentParser:
    """The command line (docs/benchmarks.md shows it; tests/unit/test_doc_examples.py parses it)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--deltas", type=int, default=20_000, help="unpaced deltas")
    parser.add_argument("--paced", type=int, default=1_000, help="paced deltas")
    parser.add_argument("--rate", type=float, default=200.0, help="paced deltas per second")
    parser.add_argument("--rounds", type=int, default=3)
    return parser


def main() -> None:
    args = parser().parse_args()
    cases = [
        (f"{args.deltas:,} deltas, unpaced", args.deltas, 0.0),
        (f"{args.paced:,} deltas at {args.rate:g}/s", args.paced, 1.0 / args.rate),
    ]
    print("| case | child | deltas/s at the watcher | p50 ms | p99 ms |")
    print("|---|---|---:|---:|---:|")
    for name, deltas, delay in cases:
        for child, rounds in run_case(deltas, delay, args.rounds).items():
            best = max(rounds, key=lambda r: r["per_second"])
            p50 = statistics.median(r["p50_ms"] for r in rounds)
            p99 = statistics.median(r["p99_ms"] for r in rounds)
            print(f"| {name} | {child} | {best['per_second']:,.0f} | {p50:.1f} | {p99:.1f} |")


if __name__ == "__main__":
    main()
