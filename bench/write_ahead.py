"""What write-ahead costs a tool with effects: the time from a `write_file` call to its
result, with the run journaled (the call waits for the commit of its turn) and not.

One root agent makes `--calls` model turns, each one `write_file` call (appending a
line), on the scripted model with no delay. Journaled: a `RunHost` run on SQLite
(the default store) or Redis; not journaled: the same agent through
`Orchestrator.stream` (nothing to wait for). Each call's latency is its TOOL_CALL
event's timestamp to its TOOL_RESULT's; idle (one run) and with `--busy` other runs
streaming into the same journal (the commit cycle the call waits on is longer).

    .venv/bin/python -m bench.write_ahead --calls 200 --busy 50
    .venv/bin/python -m bench.write_ahead --store redis://127.0.0.1:6379/0
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import trio
import yaml

from orchestrator.config import load_config
from orchestrator.core.events import Event, EventType
from orchestrator.runs.host import RunHost
from orchestrator.runtime.engine import Orchestrator
from orchestrator.storage.open import open_journal


def agents(calls: int) -> dict[str, dict[str, Any]]:
    write = {"name": "write_file", "args": {"path": "out.txt", "content": "x\n", "append": True}}
    return {
        "writer": {
            "description": "writes",
            "instructions": "w",
            "tools": ["write_file"],
            "max_turns": calls + 1,
            "script": {"turns": [{"calls": [write]} for _ in range(calls)] + [{"say": "done"}]},
        },
        "talker": {
            "description": "talks",
            "instructions": "t",
            "script": {"token_delay": 0.02, "turns": [{"say": "w " * 2000}]},
        },
    }


def latencies(events: list[Event]) -> list[float]:
    """Seconds from each TOOL_CALL to its TOOL_RESULT."""
    called = {e.data["toolCallId"]: e.ts for e in events if e.type is EventType.TOOL_CALL}
    return [
        e.ts - called[e.data["toolCallId"]]
        for e in events
        if e.type is EventType.TOOL_RESULT and e.data["toolCallId"] in called
    ]


async def journaled(root: Path, store: str, calls: int, busy: int) -> list[float]:
    config = load_config(write(root, store, calls))
    async with AsyncExitStack() as stack:
        journal = await stack.enter_async_context(open_journal(config))
        orch = await stack.enter_async_context(Orchestrator.open(config))
        nursery = await stack.enter_async_context(trio.open_nursery())
        host = RunHost(orch, journal, nursery)
        others = [await host.start("talker", "busy") for _ in range(busy)]
        await trio.sleep(0.5 if busy else 0)
        hosted = await host.start("writer", "go")
        await hosted.wait()
        await journal.flush_run(hosted.run_id)
        entries = await journal.read_all(hosted.run_id, journal.get(hosted.run_id).committed)
        for other in others:
            await host.cancel(other.run_id)
        return latencies([entry.event for entry in entries])


async def in_process(root: Path, calls: int) -> list[float]:
    config = load_config(write(root, "memory://", calls))
    events: list[Event] = []
    async with Orchestrator.open(config) as orch, orch.stream("writer", "go") as run:
        async for event in run:
            events.append(event)
    return latencies(events)


def write(root: Path, store: str, calls: int) -> Path:
    (root / "subagents").mkdir(parents=True, exist_ok=True)
    (root / "workspace").mkdir(exist_ok=True)
    for name, spec in agents(calls).items():
        (root / "subagents" / f"{name}.yaml").write_text(yaml.safe_dump(spec))
    data = {
        "storage": {"url": store, "durability": "relaxed"} if store.startswith("redis") else store,
        "models": {"default": {"provider": "scripted"}},
        "subagents_dir": "subagents",
        "limits": {"max_concurrent_runs": 1000},
    }
    (root / "server.yaml").write_text(yaml.safe_dump(data))
    return root / "server.yaml"


def row(name: str, values: list[float]) -> str:
    ms = sorted(v * 1000 for v in values)
    p99 = ms[min(len(ms) - 1, int(len(ms) * 0.99))]
    return f"| {name} | {len(ms)} | {statistics.median(ms):.2f} | {p99:.2f} |"


def parser() -> argparse.ArgumentParser:
    """The command line (docs/benchmarks.md shows it; tests/unit/test_doc_examples.py parses it)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--busy", type=int, default=50, help="other runs streaming meanwhile")
    parser.add_argument("--store", default="sqlite:///journal.db")
    return parser


def main() -> None:
    args = parser().parse_args()
    print("| write_file call to its result | calls | p50 ms | p99 ms |")
    print("|---|---:|---:|---:|")
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        print(
            row(
                "not journaled (`Orchestrator.stream`)",
                trio.run(in_process, root / "a", args.calls),
            )
        )
        for busy in (0, args.busy):
            name = f"journaled ({args.store.split(':')[0]}), {busy} other runs streaming"
            result = trio.run(journaled, root / f"b{busy}", args.store, args.calls, busy)
            print(row(name, result))


if __name__ == "__main__":
    main()
