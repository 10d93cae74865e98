"""What permessage-deflate costs per live frame, at each zlib level.

Runs the shipped demo tree once (scripted, no pauses) in process, cuts its events
into the frames a watcher gets live — a few events each, as a paced run's wake-ups
give them, kept where they reach `server.compression_threshold` (1 KiB) — and
compresses them in order with one context per connection, as websockets does for the
server (window 2^12, memLevel 5, context takeover, a sync flush per message). Prints
µs per frame and the compression ratio for each level.

    .venv/bin/python -m bench.deflate_bench
"""

from __future__ import annotations

import argparse
import time
import zlib
from pathlib import Path

import trio

from orchestrator.config import load_config
from orchestrator.core.events import encode_event
from orchestrator.runtime.engine import Orchestrator

REPO = Path(__file__).resolve().parent.parent


async def frames(events_per_frame: int, threshold: int) -> list[bytes]:
    """The demo tree's events as live `events` frames of `events_per_frame` each."""
    config = load_config(REPO / "configs" / "server.yaml")
    async with Orchestrator.open(config) as orch:
        raws: list[bytes] = []
        async with orch.stream("planner", "compare trio and asyncio") as run:
            async for event in run:
                raws.append(encode_event(event))
    out = []
    for i in range(0, len(raws), events_per_frame):
        body = b'{"op":"events","sub":"s1","events":[' + b",".join(raws[i : i + events_per_frame])
        frame = body + b"]}"
        if len(frame) >= threshold:
            out.append(frame)
    return out


def compress_all(frames: list[bytes], level: int, rounds: int) -> tuple[float, float]:
    """(µs per frame, ratio) for one connection's context at `level`, sending the
    frames `rounds` times over."""
    compressor = zlib.compressobj(level, zlib.DEFLATED, -12, 5)
    started = time.perf_counter()
    sent = 0
    for _ in range(rounds):
        for frame in frames:
            data = compressor.compress(frame) + compressor.flush(zlib.Z_SYNC_FLUSH)
            sent += len(data) - 4
    took = time.perf_counter() - started
    return took / (len(frames) * rounds) * 1e6, sum(map(len, frames)) * rounds / sent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events-per-frame", type=int, nargs="+", default=[4, 12])
    parser.add_argument("--rounds", type=int, default=200, help="times the frames are sent")
    args = parser.parse_args()
    for per_frame in args.events_per_frame:
        found = trio.run(frames, per_frame, 1024)
        size = sum(map(len, found)) / len(found)
        print(f"{per_frame} events a frame: {len(found)} frames of {size:.0f} bytes")
        for level in (1, 2, 3, 6, 9):
            best = min(
                (compress_all(found, level, args.rounds) for _ in range(3)),
                key=lambda pair: pair[0],
            )
            print(f"  level {level}: {best[0]:.1f} µs a frame, ratio {best[1]:.1f}")


if __name__ == "__main__":
    main()
