"""Slow and stalled clients vs the run's duration and the server's memory.

One run streams 40,000 deltas while one normal client follows it live and K
stalled clients subscribe and never read (raw sockets with a 4 KiB receive
buffer). Reported: the run's duration (RUN_STARTED to RUN_FINISHED), whether the
normal client got every event, and the process's memory growth.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import trio
from websockets.trio.client import connect

from bench.soak.common import (
    read_until_end,
    request,
    row,
    rss_mib,
    running_server,
    talker,
    write_config,
)
from tests.raw_client import raw_client


async def one(stalled: int) -> list[object]:
    root = Path(tempfile.mkdtemp())
    config = write_config(
        root,
        {"talker": talker(40_000, delay=0.00005)},
        server={"slow_client_timeout": 600, "max_connections": 2000},
    )
    async with running_server(config) as server:
        before = rss_mib()
        async with trio.open_nursery() as nursery, connect(server.url, max_size=None) as ws:
            ack = await request(ws, op="run", agent="talker", input="x")
            run_id = ack["runId"]

            async def stall() -> None:
                async with raw_client(server.url) as client:
                    await client.send_text(json.dumps({"op": "subscribe", "runId": run_id}))
                    await trio.sleep_forever()

            for _ in range(stalled):
                nursery.start_soon(stall)
            events, _ = await read_until_end(ws, ack["sub"])
            grown = rss_mib() - before
            nursery.cancel_scope.cancel()
        complete = [e["seq"] for e in events] == list(range(1, len(events) + 1))
        duration = events[-1]["ts"] - events[0]["ts"]
    return [
        stalled,
        f"{len(events):,}",
        "yes" if complete else "NO",
        f"{duration:.2f}",
        f"{grown:+.0f}",
    ]


async def main() -> list[str]:
    lines = [
        row("stalled clients", "events to the normal client", "complete", "run s", "RSS MiB"),
        row("---:", "---:", ":-:", "---:", "---:"),
    ]
    for stalled in (0, 50, 200):
        lines.append(row(*await one(stalled)))
    return lines
