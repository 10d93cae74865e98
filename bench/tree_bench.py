"""Tree workload benchmark: events/s and emit→consumer latency through the whole stack.

A tree of scripted agents (no sleeps): every agent streams T text deltas; each
agent above depth D spawns F children in one turn (they run in parallel), then
answers. Events flow through the real path: scripted provider → agent runner →
child bus (Source stamped at the source) → run sink → bounded queue → consumer.
A bare trio memory channel (`await send()` per event) runs in the same process
as the baseline.

    python -m bench.tree_bench                      # the default matrix
    python -m bench.tree_bench --fanout 2 --depth 4 --deltas 2000 --repeat 3
    python -m bench.tree_bench --fanout 4 --depth 2 --deltas 20000 --yielding

Every run also reports the garbage collector's full (generation 2) collections and
the longest collection pause during it (`gc.callbacks`), and two `send_nowait`
baselines: one producer task per agent pushing the same number of items into one
bounded trio channel (`send_nowait`, awaiting only when full), the consumer taking
batches — *flat* (every producer from the start: `nowait/s`) and *shaped* (started
as the tree starts its agents: one, then its F children once it has streamed, and
so on: `shaped/s`). `--yielding` makes every scripted delta (and every
baseline item) yield to the scheduler, as deltas read from sockets do.
"""

from __future__ import annotations

import argparse
import gc
import resource
import time
from typing import Any

import trio

from agents.spec import AgentSpec, ScriptedCall, ScriptSpec, ScriptStep
from orchestrator.config import LimitsConfig, ServerConfig
from orchestrator.runtime.engine import Orchestrator


class GcWatch:
    """Counts collections per generation and the longest pause, via `gc.callbacks`."""

    def __init__(self) -> None:
        self.collections = [0, 0, 0]
        self.longest = 0.0
        self._start = 0.0

    def __enter__(self) -> GcWatch:
        gc.callbacks.append(self._callback)
        return self

    def __exit__(self, *exc: object) -> None:
        gc.callbacks.remove(self._callback)

    def _callback(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._start = time.perf_counter()
        else:
            self.collections[info["generation"]] += 1
            self.longest = max(self.longest, time.perf_counter() - self._start)


def tree_specs(
    fanout: int, depth: int, deltas: int, *, yield_every: int = 64
) -> dict[str, AgentSpec]:
    """Agents level0..levelD; level d spawns `fanout` level d+1 children."""
    words = "w " * deltas
    specs = {}
    for level in range(depth + 1):
        if level < depth:
            calls = [
                ScriptedCall(
                    name="agent_spawn",
                    args={"agent_id": f"level{level + 1}", "task": f"part {i}"},
                )
                for i in range(fanout)
            ]
            turns = [ScriptStep(say=words, calls=calls), ScriptStep(say="ok")]
        else:
            turns = [ScriptStep(say=words)]
        specs[f"level{level}"] = AgentSpec(
            id=f"level{level}",
            description="bench agent",
            instructions="bench",
            tools=["agent_spawn"],
            script=ScriptSpec(turns=turns, yield_every=yield_every),
        )
    return specs


def summary(events: int, elapsed: float, latencies: list[float], **extra: Any) -> dict[str, Any]:
    """events/s and latency percentiles (latencies in seconds, sorted here)."""
    latencies.sort()
    return {
        "events": events,
        "seconds": elapsed,
        "eps": events / elapsed,
        "p50_us": latencies[len(latencies) // 2] * 1e6,
        "p99_us": latencies[int(len(latencies) * 0.99)] * 1e6,
        **extra,
    }


def max_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


async def run_tree(
    fanout: int, depth: int, deltas: int, capacity: int, *, yielding: bool = False
) -> dict[str, Any]:
    config = ServerConfig(
        limits=LimitsConfig(max_depth=depth, max_children=max(fanout, 1), run_timeout_seconds=3600)
    )
    specs = tree_specs(fanout, depth, deltas, yield_every=1 if yielding else 64)
    latencies: list[float] = []
    count = 0
    async with Orchestrator.open(config, specs) as orch:
        gc.collect()
        start = time.perf_counter()
        with GcWatch() as watch:
            async with orch.stream("level0", "bench", capacity=capacity) as stream:
                async for batch in stream.batches():
                    now = time.time()
                    count += len(batch)
                    latencies.extend(now - e.ts for e in batch[:: max(1, len(batch) // 64)])
        elapsed = time.perf_counter() - start
        assert stream.result is not None and stream.result.status == "completed"
    agents = sum(fanout**d for d in range(depth + 1))
    return summary(
        count,
        elapsed,
        latencies,
        agents=agents,
        full_gc=watch.collections[2],
        gc_pause_ms=watch.longest * 1e3,
    )


async def nowait_baseline(
    producers: int,
    items: int,
    capacity: int,
    *,
    yielding: bool,
    tree: tuple[int, int] | None = None,
) -> dict[str, Any]:
    """The bare-trio limit: `producers` tasks × `items` items into one bounded channel.

    Flat (`tree=None`): every producer from the start. `tree=(F, D)`: the tree's
    own shape — one producer first, each starting F more once its items are out,
    D levels deep — as the agents do (each streams, then spawns its children). The
    flat shape has more tasks runnable at once, so each scheduler round (and its
    `epoll_wait`) is shared by more items: it is faster than the same tree can be.
    """
    send, recv = trio.open_memory_channel[tuple[float, int]](capacity)
    latencies: list[float] = []
    count = 0

    async def produce(level: int, nursery: trio.Nursery) -> None:
        for i in range(items):
            item = (time.time(), i)
            try:
                send.send_nowait(item)
            except trio.WouldBlock:
                await send.send(item)
            if yielding or i % 64 == 63:
                await trio.lowlevel.checkpoint()
        if tree is not None and level < tree[1]:
            for _ in range(tree[0]):
                nursery.start_soon(produce, level + 1, nursery)

    start = time.perf_counter()
    with GcWatch() as watch:
        async with trio.open_nursery() as nursery:
            for _ in range(1 if tree is not None else producers):
                nursery.start_soon(produce, 0, nursery)
            total = producers * items
            while count < total:
                batch = [await recv.receive()]
                while True:
                    try:
                        batch.append(recv.receive_nowait())
                    except trio.WouldBlock:
                        break
                now = time.time()
                count += len(batch)
                latencies.extend(now - ts for ts, _ in batch[:: max(1, len(batch) // 64)])
    elapsed = time.perf_counter() - start
    return summary(
        count, elapsed, latencies, full_gc=watch.collections[2], gc_pause_ms=watch.longest * 1e3
    )


async def channel_baseline(n: int) -> dict[str, Any]:
    """A bare trio memory channel, one `await send()` per event."""
    send, recv = trio.open_memory_channel[tuple[float, int]](1024)
    latencies: list[float] = []

    async def produce() -> None:
        async with send:
            for i in range(n):
                await send.send((time.time(), i))

    start = time.perf_counter()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(produce)
        async with recv:
            i = 0
            async for ts, _ in recv:
                if i % 64 == 0:
                    latencies.append(time.time() - ts)
                i += 1
    elapsed = time.perf_counter() - start
    return summary(n, elapsed, latencies)


def median_of(runs: list[dict[str, Any]]) -> dict[str, Any]:
    best = sorted(runs, key=lambda r: r["eps"])[len(runs) // 2]
    return {**best, "eps_all": [round(r["eps"]) for r in runs]}


async def main(args: argparse.Namespace) -> None:
    matrix = (
        [(args.fanout, args.depth, args.deltas)]
        if args.depth is not None
        else [
            (2, 1, 20000),  # depth 1 and depth 4 with about the same number of events
            (2, 4, 2000),
            (1, 1, 30000),  # a chain: one agent streams at a time, so only depth differs
            (1, 4, 12000),
            (4, 2, 3000),
            (3, 4, 500),
            (100, 1, 600),  # wide: one parent, 100 children streaming at once
        ]
    )
    base = median_of([await channel_baseline(args.baseline) for _ in range(args.repeat)])
    rss0 = max_rss_mb()
    runs: dict[tuple[int, int, int], list[dict[str, Any]]] = {w: [] for w in matrix}
    limits: dict[tuple[int, int, int], list[dict[str, Any]]] = {w: [] for w in matrix}
    shaped: dict[tuple[int, int, int], list[dict[str, Any]]] = {w: [] for w in matrix}
    for _ in range(args.repeat):  # round-robin, so machine noise spreads over all rows
        for fanout, depth, deltas in matrix:
            shape = (fanout, depth, deltas)
            result = await run_tree(fanout, depth, deltas, args.capacity, yielding=args.yielding)
            runs[shape].append(result)
            agents = sum(fanout**d for d in range(depth + 1))
            per_agent = result["events"] // agents
            limits[shape].append(
                await nowait_baseline(agents, per_agent, args.capacity, yielding=args.yielding)
            )
            shaped[shape].append(
                await nowait_baseline(
                    agents,
                    per_agent,
                    args.capacity,
                    yielding=args.yielding,
                    tree=(fanout, depth),
                )
            )
    rss1 = max_rss_mb()
    rows = [(w, median_of(r), median_of(limits[w]), median_of(shaped[w])) for w, r in runs.items()]

    print(
        f"{'workload':<28}{'agents':>7}{'events':>9}{'events/s':>11}{'p50 µs':>9}{'p99 µs':>9}"
        f"{'full GCs':>9}{'GC ms':>7}{'nowait/s':>11}{'ratio':>7}{'shaped/s':>11}{'ratio':>7}"
    )
    print(
        f"{'trio channel baseline':<28}{'-':>7}{base['events']:>9}{base['eps']:>11,.0f}"
        f"{base['p50_us']:>9.0f}{base['p99_us']:>9.0f}"
    )
    for (fanout, depth, deltas), r, limit, tree_limit in rows:
        name = f"tree F={fanout} D={depth} T={deltas}"
        print(
            f"{name:<28}{r['agents']:>7}{r['events']:>9}{r['eps']:>11,.0f}"
            f"{r['p50_us']:>9.0f}{r['p99_us']:>9.0f}{r['full_gc']:>9}{r['gc_pause_ms']:>7.1f}"
            f"{limit['eps']:>11,.0f}{r['eps'] / limit['eps']:>7.2f}"
            f"{tree_limit['eps']:>11,.0f}{r['eps'] / tree_limit['eps']:>7.2f}"
            f"   runs: {r['eps_all']}, shaped: {tree_limit['eps_all']}"
        )
    by_shape = {(f, d): r["eps"] for (f, d, _), r, _limit, _tree in rows}
    for fanout in (2, 1):
        if (fanout, 1) in by_shape and (fanout, 4) in by_shape:
            ratio = by_shape[(fanout, 4)] / by_shape[(fanout, 1)]
            print(f"events/s at depth 4 vs depth 1 (F={fanout}): {ratio:.1%}")
    print(f"max RSS: {rss0:.0f} MB before the tree runs, {rss1:.0f} MB after")
    print(f"repeats: {args.repeat} (median shown), queue capacity {args.capacity}")
    mode = "every delta yields" if args.yielding else "a checkpoint every 64 deltas"
    print(
        f"provider: {mode}; nowait/s = a send_nowait channel with every producer at once,"
        " shaped/s = the same with producers started as the tree starts its agents"
    )


def parser() -> argparse.ArgumentParser:
    """The command line (docs/benchmarks.md shows it; tests/unit/test_doc_examples.py parses it)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fanout", type=int, default=2)
    parser.add_argument("--depth", type=int, default=None)
    parser.add_argument("--deltas", type=int, default=2000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--capacity", type=int, default=4096)
    parser.add_argument("--baseline", type=int, default=200_000)
    parser.add_argument("--yielding", action="store_true", help="every delta yields")
    return parser


if __name__ == "__main__":
    trio.run(main, parser().parse_args())
