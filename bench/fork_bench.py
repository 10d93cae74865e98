"""What starting a fork of a large run costs, next to what resuming it costs.

Runs one tree of `--leads` × `--workers` scripted agents (526 by default: a boss, 25
leads, 500 workers) to its end on SQLite, then times, each `--repeat` times:

- resume: what a restart or a takeover does before the run goes on — read the run's
  events from the journal and rebuild its agents (`runs/resume.py` `plan_resume`);
- fork: `RunHost.fork` until it returns — read, rebuild with the fork's changes,
  copy the events 1..S under the new runId and wait for their commit — at the last
  seq and at the middle one, without and with `replay` (which reads the original's
  turns into a recording too).

    .venv/bin/python -m bench.fork_bench

It first prints what replay costs where it is not used — one spec key per agent
instance (agents/core/replay.py) — and what a replaying fork pays per turn: the
request key of conversations of 10, 100 and 1,000 messages.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import trio
import yaml

from agents.core.messages import AssistantMessage, Message, ToolCall, ToolResultMessage, ToolSpec
from agents.core.replay import request_key, spec_key
from orchestrator.config import load_config
from orchestrator.runs.host import RunHost
from orchestrator.runs.resume import plan_resume
from orchestrator.runtime.engine import Orchestrator
from orchestrator.storage.base import ForkPoint
from orchestrator.storage.open import open_journal


def spawn(agent_id: str, count: int) -> dict[str, Any]:
    calls = [
        {"name": "agent_spawn", "args": {"agent_id": agent_id, "task": f"part {i}"}}
        for i in range(count)
    ]
    return {"say": f"Splitting the work in {count}.", "calls": calls}


def write_config(root: Path, leads: int, workers: int) -> Path:
    sub = root / "subagents"
    sub.mkdir()
    words = "one two three four five six seven eight nine ten eleven twelve"
    agents = {
        "boss": {"turns": [spawn("lead", leads), {"say": "done: {results}"}]},
        "lead": {"turns": [spawn("worker", workers), {"say": "lead done"}]},
        "worker": {"turns": [{"think": "Hmm.", "say": words}]},
    }
    for agent_id, script in agents.items():
        spec = {
            "description": agent_id,
            "instructions": agent_id,
            "tools": ["agent_spawn"] if agent_id != "worker" else [],
            "script": {"token_delay": 0, **script},
        }
        (sub / f"{agent_id}.yaml").write_text(yaml.safe_dump(spec))
    config = {
        "storage": "sqlite:///journal.db",
        "models": {"default": {"provider": "scripted"}},
        "subagents_dir": "subagents",
        "limits": {
            "max_depth": 3,
            "max_children": max(leads, workers),
            "max_agents": 1 + leads + leads * workers,
        },
    }
    path = root / "server.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


async def bench(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        config = load_config(write_config(Path(tmp), args.leads, args.workers))
        async with (
            open_journal(config) as journal,
            Orchestrator.open(config) as orch,
            trio.open_nursery() as nursery,
        ):
            host = RunHost(orch, journal, nursery)
            run = await host.start("boss", "go")
            result = await run.wait()
            await journal.wait_finished(run.run_id)
            record = journal.get(run.run_id).record
            agents = 1 + args.leads + args.leads * args.workers
            print(
                f"{agents} agents, {record.last_seq} events, status {result.status} "
                f"(medians of {args.repeat})"
            )

            async def resume() -> Any:
                await plan_resume(journal, record)
                return None

            async def fork(seq: int, replay: bool) -> Any:
                # Timed until the fork is acknowledged (its copy committed), as `fork` is.
                return await host.fork(ForkPoint(run_id=run.run_id, seq=seq, replay=replay))

            cases: list[tuple[str, Any]] = [("resume (read + rebuild)", resume)]
            for seq in (record.last_seq, record.last_seq // 2):
                for replay in (False, True):
                    name = f"fork at seq {seq}{' with replay' if replay else ''}"
                    cases.append((name, _bound(fork, seq, replay)))
            for name, work in cases:
                times = []
                for _ in range(args.repeat):
                    started = time.perf_counter()
                    forked = await work()
                    times.append(time.perf_counter() - started)
                    if forked is not None:  # then it runs to its end, untimed
                        await forked.wait()
                    await journal.writer.flush()
                print(f"  {name}: {statistics.median(times) * 1000:.0f} ms")
            nursery.cancel_scope.cancel()


def _bound(fork: Any, seq: int, replay: bool) -> Any:
    async def work() -> Any:
        return await fork(seq, replay)

    return work


def key_cost() -> None:
    """µs per agent instance for its spec key (every run), and per turn of a replaying
    fork for its request key, for conversations of typical and large sizes."""
    tools = (ToolSpec(name="agent_spawn", description="Spawn a subagent.", parameters=_SCHEMA),)
    rounds = 20_000
    started = time.perf_counter()
    for _ in range(rounds):
        spec_key("default", "instructions " * 40, tools)
    took = (time.perf_counter() - started) / rounds * 1e6
    print(f"  spec key (every agent instance): {took:.1f} µs")
    spec = spec_key("default", "instructions " * 40, tools)
    for size in (10, 100, 1000):
        messages: list[Message] = []
        for i in range(size // 2):
            call = ToolCall(id=f"call_{i}", name="agent_spawn", arguments='{"task": "part"}')
            messages.append(AssistantMessage(text="word " * 60, tool_calls=(call,)))
            result = ToolResultMessage(tool_call_id=f"call_{i}", name="t", content="r " * 60)
            messages.append(result)
        rounds = max(20, 20_000 // size)
        started = time.perf_counter()
        for _ in range(rounds):
            request_key(spec, messages)
        took = (time.perf_counter() - started) / rounds * 1e6
        print(f"  request key (a replaying fork's turn), {size} messages: {took:.1f} µs")


_SCHEMA = {"type": "object", "properties": {"task": {"type": "string"}}, "required": ["task"]}


def parser() -> argparse.ArgumentParser:
    """The command line (docs/benchmarks.md shows it)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--leads", type=int, default=25)
    parser.add_argument("--workers", type=int, default=20, help="workers per lead")
    parser.add_argument("--repeat", type=int, default=5)
    return parser


def main() -> None:
    args = parser().parse_args()
    key_cost()
    trio.run(bench, args)


if __name__ == "__main__":
    main()
