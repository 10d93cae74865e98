"""What starting a thread's next run costs, as the thread grows (docs/threads.md).

A thread of `--runs` runs on SQLite, each run's root streaming `--words` words (one
REASONING event each) on the scripted model with no delay, so the journal holds about
runs × words events. The time measured is `RunHost.start` of the next run: finding the
thread, its conversation so far (rebuilt from the previous run's events, then kept),
the record, and RUN_STARTED committed — what stands between a `run` frame and the
provider's request. It is measured for the 2nd run and the last, and for the first
follow-up after a restart (a new `Threads`: the conversation is rebuilt from the
thread's runs back to its start, once).

    .venv/bin/python -m bench.thread_bench --runs 200 --words 2500
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from contextlib import AsyncExitStack
from pathlib import Path

import trio
import yaml

from orchestrator.config import load_config
from orchestrator.core.threads import ThreadAsk
from orchestrator.runs.host import RunHost
from orchestrator.runs.threads import Threads
from orchestrator.runtime.engine import Orchestrator
from orchestrator.storage.open import open_journal


def write(root: Path, words: int) -> Path:
    (root / "subagents").mkdir(parents=True, exist_ok=True)
    talker = {
        "description": "talks",
        "instructions": "t",
        "script": {"token_delay": 0, "turns": [{"say": "w " * words}]},
    }
    (root / "subagents" / "talker.yaml").write_text(yaml.safe_dump(talker))
    data = {
        "storage": "sqlite:///journal.db",
        "models": {"default": {"provider": "scripted"}},
        "subagents_dir": "subagents",
    }
    (root / "server.yaml").write_text(yaml.safe_dump(data))
    return root / "server.yaml"


async def measure(root: Path, runs: int, words: int) -> dict[str, float | int]:
    """Seconds each `start` took, by which run of the thread it started."""
    config = load_config(write(root, words))
    took: dict[str, float | int] = {}
    async with AsyncExitStack() as stack:
        journal = await stack.enter_async_context(open_journal(config))
        orch = await stack.enter_async_context(Orchestrator.open(config))
        nursery = await stack.enter_async_context(trio.open_nursery())
        host = RunHost(orch, journal, nursery)
        ask = ThreadAsk(thread_id="bench")
        for n in range(1, runs + 1):
            began = time.perf_counter()
            started = await host.start("talker", f"turn {n}", thread=ask)
            if n in (2, runs):
                took[f"run {n}"] = time.perf_counter() - began
            await started.wait()
            await journal.flush_run(started.run_id)
        took["events"] = sum(log.committed for log in journal.logs.values())
        host.threads = Threads(journal)  # as after a restart: nothing kept
        began = time.perf_counter()
        started = await host.start("talker", "after a restart", thread=ask)
        took["first after a restart"] = time.perf_counter() - began
        await started.wait()
        nursery.cancel_scope.cancel()
    return took


def parser() -> argparse.ArgumentParser:
    """The command line (docs/benchmarks.md shows it; tests/unit/test_doc_examples.py parses it)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--words", type=int, default=2500, help="events each run's root streams")
    parser.add_argument("--repeat", type=int, default=3)
    return parser


def main() -> None:
    args = parser().parse_args()
    rows: dict[str, list[float]] = {}
    events = 0
    for _ in range(args.repeat):
        with tempfile.TemporaryDirectory() as tmp:
            took = trio.run(measure, Path(tmp), args.runs, args.words)
        events = int(took.pop("events"))
        for name, seconds in took.items():
            rows.setdefault(name, []).append(seconds * 1000)
    print(f"thread of {args.runs} runs, {events:,} events in the journal (SQLite), scripted")
    print("| the thread's next run started | ms, median of " + f"{args.repeat} | all |")
    print("|---|---:|---|")
    for name, ms in rows.items():
        print(f"| {name} | {statistics.median(ms):.1f} | {', '.join(f'{m:.1f}' for m in ms)} |")


if __name__ == "__main__":
    main()
