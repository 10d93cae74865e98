"""1,000 random disconnect/resume cycles during live runs: nothing lost, nothing twice.

Runs stream at a live pace; a client subscribes with `afterSeq` = the last seq it
holds, reads a random number of frames, drops the TCP connection without a close
handshake, and does it again, until 1,000 cycles are done (starting new runs as
runs finish). Every run's collected events are compared with a full replay.
"""

from __future__ import annotations

import json
import random
import tempfile
import time
from pathlib import Path
from typing import Any

import trio
from websockets.exceptions import ConnectionClosed
from websockets.trio.client import connect

from bench.soak.common import replay, request, row, running_server, talker, write_config


async def main(cycles: int = 1000, seed: int = 7) -> list[str]:
    rng = random.Random(seed)
    root = Path(tempfile.mkdtemp())
    config = write_config(
        root, {"talker": talker(4000, delay=0.001)}, storage="sqlite:///journal.db"
    )
    done = lost = duplicated = runs = events_total = 0
    started = time.perf_counter()
    async with running_server(config) as server:
        while done < cycles:
            async with connect(server.url) as ws:  # start it, then leave: it goes on
                run_id = (await request(ws, op="run", agent="talker", input="x"))["runId"]
            runs += 1
            got: list[dict[str, Any]] = []
            finished = False
            while not finished:
                cursor = got[-1]["seq"] if got else 0
                subscribe = {"op": "subscribe", "runId": run_id, "afterSeq": cursor}
                try:
                    async with connect(server.url, max_size=None) as ws:
                        await ws.send(json.dumps(subscribe))
                        for _ in range(rng.randint(1, 6)):
                            frame = json.loads(await ws.recv())
                            if frame["op"] == "events":
                                got += frame["events"]
                            elif frame["op"] == "end":
                                finished = True
                                break
                        await trio.aclose_forcefully(ws.stream)  # drop it: no close handshake
                except (ConnectionClosed, trio.BrokenResourceError, trio.ClosedResourceError):
                    pass
                done += 1
            reference = await replay(server.url, run_id)
            seqs = [e["seq"] for e in got]
            duplicated += len(seqs) - len(set(seqs))
            lost += len({e["seq"] for e in reference} - set(seqs))
            if not lost and not duplicated:
                assert got == reference, "events differ from the replay"
            events_total += len(reference)
    elapsed = time.perf_counter() - started
    return [
        row("cycles", "runs", "events checked", "lost", "duplicated", "seconds"),
        row("---:", "---:", "---:", "---:", "---:", "---:"),
        row(done, runs, f"{events_total:,}", lost, duplicated, f"{elapsed:.1f}"),
    ]
