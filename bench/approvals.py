"""How many runs can wait on an approval at once on one server, and what it costs.

Starts N runs on an in-process server (memory storage), each a root agent whose
first tool call waits for approval; once all N wait it reports the server's RSS
growth per waiting run, the time of a `pending` op listing all of them over a real
WebSocket connection (and of the desk's own listing), then approves every call and
reports how long the N approvals and the N runs' ends took.

    .venv/bin/python -m bench.approvals --runs 10000

The cost on the forwarding path when no approval is configured is measured with
`bench/tree_once.py` under callgrind (docs/benchmarks.md).
"""

from __future__ import annotations

import argparse
import functools
import json
import resource
import tempfile
import time
from pathlib import Path
from typing import Any

import trio
import yaml
from websockets.trio.client import connect

from orchestrator.config import load_config
from orchestrator.core.approvals import Answer
from orchestrator.server.app import RunningServer, serve

ASKER = {
    "description": "asks",
    "instructions": "a",
    "tools": ["write_file"],
    "approval": ["write_file"],
    "script": {
        "turns": [
            {"calls": [{"name": "write_file", "args": {"path": "f.txt", "content": "x"}}]},
            {"say": "done: {results}"},
        ]
    },
}


def rss_mb() -> float:
    """The process's resident set now (MiB), from /proc (ru_maxrss is the peak)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def write_config(root: Path, runs: int) -> Path:
    (root / "subagents").mkdir()
    (root / "subagents" / "asker.yaml").write_text(yaml.safe_dump(ASKER))
    config = {
        "server": {"host": "127.0.0.1", "port": 0, "max_frame_bytes": 64 * 1024 * 1024},
        "storage": "memory://",
        "models": {"default": {"provider": "scripted"}},
        "subagents_dir": "subagents",
        "limits": {"max_concurrent_runs": runs + 10, "max_pending_approvals": runs + 10},
        "tools": {"root": str(root / "ws")},
    }
    (root / "ws").mkdir()
    path = root / "server.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


async def bench(runs: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        config = load_config(write_config(Path(tmp), runs))
        async with trio.open_nursery() as nursery:
            server: RunningServer = await nursery.start(functools.partial(serve, config, port=0))
            host, desk = server.app.host, server.app.orchestrator.catalog.desk
            base = rss_mb()
            started = time.perf_counter()
            for _ in range(runs):
                await host.start("asker", "go")
            while desk.count < runs:  # noqa: ASYNC110 - polling state nobody signals
                await trio.sleep(0.05)
            waiting_s = time.perf_counter() - started
            await trio.sleep(0.5)  # let the journal's writer settle
            grown = rss_mb() - base
            t0 = time.perf_counter()
            listed = desk.pending()
            desk_ms = (time.perf_counter() - t0) * 1000
            async with connect(server.url, max_size=None) as ws:
                t0 = time.perf_counter()
                await ws.send(json.dumps({"op": "pending", "id": 1, "limit": 10_000}))
                reply = json.loads(await ws.recv())
                op_ms = (time.perf_counter() - t0) * 1000
                frame_bytes = len(json.dumps(reply))
            t0 = time.perf_counter()
            for waiting in listed:
                answer = Answer(tool_call_id=waiting.request.tool_call_id, decision="approve")
                host.active[waiting.run_id].approve(answer)
            answer_ms = (time.perf_counter() - t0) * 1000
            while host.active:  # noqa: ASYNC110 - polling state nobody signals
                await trio.sleep(0.05)
            ended_s = time.perf_counter() - t0
            await server.shutdown()
    return {
        "runs waiting": runs,
        "time to get them all waiting, s": round(waiting_s, 2),
        "RSS growth per waiting run, KiB": round(grown * 1024 / runs, 1),
        "desk listing of all, ms": round(desk_ms, 1),
        "`pending` op, 10,000 listed over WebSocket, ms": round(op_ms, 1),
        "listed": len(reply["approvals"]),
        "reply bytes": frame_bytes,
        "approving all (in-process), ms": round(answer_ms, 1),
        "all runs ended after, s": round(ended_s, 2),
    }


def parser() -> argparse.ArgumentParser:
    """The command line (docs/benchmarks.md shows it; tests/unit/test_doc_examples.py parses it)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10_000)
    return parser


def main() -> None:
    args = parser().parse_args()
    result = trio.run(bench, args.runs)
    for key, value in result.items():
        print(f"{key}: {value}")


if __name__ == "__main__":
    main()
