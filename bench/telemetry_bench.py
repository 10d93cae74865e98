"""The tree bench through the journal (as `orchestrator serve` runs it), with traces off
and on: what `telemetry:` costs a run.

The tree of `bench/tree_bench.py` (scripted agents, no delay), run by a `RunHost` on
the memory journal, timed from the start to the run's end. Telemetry on: spans built
from the journal and handed to an exporter — a null one (our own cost only), and a
dead collector (OTLP/HTTP to a port nothing listens on: exports fail, spans are
counted failed, the run must not notice).

    .venv/bin/python -m bench.telemetry_bench [--fanout 4] [--depth 2] [--deltas 5000] [--repeat 5]
"""

from __future__ import annotations

import argparse
import functools
import statistics
import time
from collections.abc import Sequence
from typing import Any

import trio
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

from bench.tree_bench import tree_specs
from orchestrator.config import LimitsConfig, ServerConfig, TelemetryConfig
from orchestrator.runs.host import RunHost
from orchestrator.runtime.engine import Orchestrator
from orchestrator.storage.open import open_journal
from orchestrator.telemetry.export import model_info, open_telemetry


class NullExporter(SpanExporter):
    """Accepts every span and keeps only a count."""

    def __init__(self) -> None:
        self.spans = 0

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        self.spans += len(spans)
        return SpanExportResult.SUCCESS


async def one_run(fanout: int, depth: int, deltas: int, mode: str) -> dict[str, Any]:
    config = ServerConfig(
        storage="memory://",  # type: ignore[arg-type]
        limits=LimitsConfig(max_depth=depth, max_children=max(fanout, 1), run_timeout_seconds=3600),
    )
    specs = tree_specs(fanout, depth, deltas)
    settings = TelemetryConfig(otlp_endpoint="http://127.0.0.1:9", export_timeout_seconds=1)
    exporter = NullExporter() if mode == "on" else None
    async with (
        open_journal(config) as journal,
        Orchestrator.open(config, specs) as orch,
        trio.open_nursery() as nursery,
    ):
        hub = None
        if mode != "off":
            hub = await nursery.start(
                functools.partial(
                    _telemetry, settings, journal, model_info(specs, config.models), exporter
                )
            )
        host = RunHost(orch, journal, nursery)
        start = time.perf_counter()
        started = await host.start("level0", "bench")
        result = await started.wait()
        await journal.flush_run(started.run_id)
        elapsed = time.perf_counter() - start
        assert result.status == "completed"
        events = journal.get(started.run_id).committed
        exported = 0
        if hub is not None:
            deadline = time.perf_counter() + 30
            while hub.stats()["exported"] + hub.stats()["failed"] < _expected(fanout, depth):
                if time.perf_counter() > deadline:
                    break
                await trio.sleep(0.05)
            exported = hub.stats()["exported"] + hub.stats()["failed"]
        drained = time.perf_counter() - start
        nursery.cancel_scope.cancel()
    return {
        "events": events,
        "seconds": elapsed,
        "eps": events / elapsed,
        "spans": exported,
        "spans_done_s": drained,
    }


def _expected(fanout: int, depth: int) -> int:
    """Spans of the bench tree: per agent one invoke_agent and its chat turns, per spawn
    one execute_tool."""
    agents = int(sum(fanout**d for d in range(depth + 1)))
    inner = int(sum(fanout**d for d in range(depth)))
    return agents + (agents + inner) + (agents - 1)


async def _telemetry(
    settings: TelemetryConfig,
    journal: Any,
    models: Any,
    exporter: SpanExporter | None,
    task_status: trio.TaskStatus[Any] = trio.TASK_STATUS_IGNORED,
) -> None:
    async with open_telemetry(settings, journal, models, exporter) as hub:
        task_status.started(hub)
        await trio.sleep_forever()


def parser() -> argparse.ArgumentParser:
    """The command line (docs/benchmarks.md shows it; tests/unit/test_doc_examples.py parses it)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fanout", type=int, default=4)
    parser.add_argument("--depth", type=int, default=2)
    parser.add_argument("--deltas", type=int, default=5000)
    parser.add_argument("--repeat", type=int, default=5)
    return parser


def main() -> None:
    args = parser().parse_args()
    for mode in ("off", "on", "dead collector", "off", "on"):
        runs = [
            trio.run(one_run, args.fanout, args.depth, args.deltas, mode)
            for _ in range(args.repeat)
        ]
        eps = statistics.median(r["eps"] for r in runs)
        line = f"telemetry {mode:>14}: {runs[0]['events']:,} events, median {eps:,.0f} events/s"
        if mode != "off":
            spans = runs[0]["spans"]
            done = statistics.median(r["spans_done_s"] for r in runs)
            line += f", {spans} spans handed to the exporter by {done:.2f} s after the start"
        print(line, flush=True)


if __name__ == "__main__":
    main()
