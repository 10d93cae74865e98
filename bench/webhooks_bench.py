"""What webhooks cost a run: one run streaming D text deltas on SQLite, watched by one
client, with no webhook, with one that matches only RUN_FINISHED (the outbox follows
the run and matches every event, to send one), and with one that matches every event
(D deliveries, to a receiver on loopback that answers 204 at once).

Reports the run's wall time (start to its `end` at the client), the server process's
CPU time over it, and for the last case how long the outbox took to send everything
after the run ended.

    python -m bench.webhooks_bench                 # D = 20,000, 3 rounds each
    python -m bench.webhooks_bench --deltas 50000 --rounds 5
"""

from __future__ import annotations

import argparse
import base64
import os
import resource
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import trio
import yaml
from websockets.trio.client import connect

from orchestrator.config import load_config
from tests.fakes.webhook_receiver import WebhookReceiver
from tests.server_helpers import read_until_end, request, running_server

CASES = ("none", "RUN_FINISHED only", "every event")


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _config(root: Path, deltas: int, case: str, url: str) -> Any:
    (root / "subagents").mkdir(parents=True, exist_ok=True)
    talker = {
        "description": "talks",
        "instructions": "talk",
        "script": {"token_delay": 0, "turns": [{"say": "w " * deltas}]},
    }
    (root / "subagents" / "talker.yaml").write_text(yaml.safe_dump(talker))
    data: dict[str, Any] = {
        "server": {"host": "127.0.0.1", "port": 0},
        "storage": "sqlite:///journal.db",
        "models": {"default": {"provider": "scripted"}},
        "subagents_dir": "subagents",
        "tools": {"http_allowed_hosts": ["127.0.0.1"]},
        "limits": {"max_turn_events": max(200_000, deltas * 2)},
    }
    if case != "none":
        events = ["RUN_FINISHED"] if case == "RUN_FINISHED only" else None
        data["webhooks"] = {
            "bench": {"url": url, "secret_env": "BENCH_WEBHOOK_SECRET"}
            | ({"events": events} if events else {})
        }
    (root / "server.yaml").write_text(yaml.safe_dump(data))
    return load_config(root / "server.yaml")


async def one(deltas: int, case: str, receiver: WebhookReceiver) -> tuple[float, float, float]:
    """(run seconds, CPU seconds over the run, seconds to send the rest after it)."""
    config = _config(Path(tempfile.mkdtemp()), deltas, case, receiver.url())
    async with running_server(config) as server:
        async with connect(server.url, max_size=None) as ws:
            cpu, start = _cpu(), time.perf_counter()
            ack = await request(ws, op="run", id="r", agent="talker", input="x")
            events, _ = await read_until_end(ws, ack["sub"])
            ran, cpu = time.perf_counter() - start, _cpu() - cpu
        outbox = server.app.outbox
        after = time.perf_counter()
        if outbox is not None:
            while not outbox.idle:  # noqa: ASYNC110 - polling the outbox's state
                await trio.sleep(0.01)
        assert len(events) > deltas
        return ran, cpu, time.perf_counter() - after


async def main(args: argparse.Namespace) -> None:
    os.environ["BENCH_WEBHOOK_SECRET"] = "whsec_" + base64.b64encode(os.urandom(32)).decode()
    receiver = WebhookReceiver(answer=lambda n: 204)
    async with trio.open_nursery() as nursery:
        await nursery.start(receiver.serve)
        print(f"one run of {args.deltas:,} deltas on SQLite; best and median of {args.rounds}")
        print("| webhook | run s (best / median) | server CPU s (best) | sending after the run s |")
        print("|---|---:|---:|---:|")
        for case in CASES:
            rows = [await one(args.deltas, case, receiver) for _ in range(args.rounds)]
            runs = [r[0] for r in rows]
            print(
                f"| {case} | {min(runs):.2f} / {statistics.median(runs):.2f} "
                f"| {min(r[1] for r in rows):.2f} | {statistics.median(r[2] for r in rows):.2f} |"
            )
        nursery.cancel_scope.cancel()


def parser() -> argparse.ArgumentParser:
    command = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    command.add_argument("--deltas", type=int, default=20_000)
    command.add_argument("--rounds", type=int, default=3)
    return command


if __name__ == "__main__":
    trio.run(main, parser().parse_args())
