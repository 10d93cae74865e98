"""3,000 small runs on SQLite: does the server's memory stay flat once runs finish?

Eight clients run a small scripted agent (about 40 events) back to back until
3,000 runs have finished; the process's RSS is read after every 1,000. Finished
runs keep only their record in memory (their events are in SQLite).
"""

from __future__ import annotations

import gc
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


async def main(total: int = 3000, clients: int = 8) -> list[str]:
    root = Path(tempfile.mkdtemp())
    config = write_config(root, {"small": talker(36)}, storage="sqlite:///journal.db")
    readings: list[tuple[int, float, int]] = []
    async with running_server(config) as server:
        gc.collect()
        readings.append((0, rss_mib(), 0))
        done = 0

        async def client() -> None:
            nonlocal done
            async with connect(server.url, max_size=None) as ws:
                while done < total:
                    ack = await request(ws, op="run", agent="small", input="x")
                    await read_until_end(ws, ack["sub"])
                    done += 1
                    if done % 1000 == 0:
                        gc.collect()
                        held = sum(
                            len(server.app.journal.get(r.run_id).entries)
                            for r in server.app.journal.records()
                        )
                        readings.append((done, rss_mib(), held))

        async with trio.open_nursery() as nursery:
            for _ in range(clients):
                nursery.start_soon(client)
    lines = [row("runs finished", "RSS MiB", "events held in memory"), row("---:", "---:", "---:")]
    lines += [row(f"{n:,}", f"{mib:.0f}", f"{held:,}") for n, mib, held in readings]
    return lines
