"""The server process's interpreter, tuned once the server is up: its garbage
collector, and how soon the journal's writer thread gets the GIL."""

from __future__ import annotations

import gc
import sys

__all__ = ["SWITCH_INTERVAL", "settle_heap"]

SWITCH_INTERVAL = 0.0002
"""Seconds a thread may hold the GIL while another waits for it (Python's default:
0.005)."""


def settle_heap() -> None:
    """Move everything alive now out of the garbage collector's reach (`gc.freeze`).

    Call it once the server is up, in a process that is the server (the CLI does).
    A full collection walks every tracked object; right after start-up those are
    ~80k objects of imported modules, config models and schemas that never die,
    and walking them paused the server 50–60 ms several times a minute under load
    (the p99 of live delivery to 100 clients; docs/benchmarks.md). Frozen, a full
    collection walks only what the server allocated since, and pauses ~5 ms.
    With 1,000 connections even that heap is ~200k objects (a 90–120 ms full
    collection, every few seconds, from the short-lived objects of in-flight
    frames that a young collection happens to promote): collecting the young
    generation after 50,000 net allocations instead of 700 makes those rare (none
    in a 5 s live run of 1,000 watchers). Nearly everything here dies by reference
    counting; the collector only finds cycles, which wait a little longer.
    Not done by `serve()` itself: a host embedding the server (tests, an app)
    owns its process's collector and switch interval.
    """
    gc.collect()
    gc.freeze()
    gc.set_threshold(50_000, 20, 20)
    # The SQLite journal commits in a worker thread, which needs the GIL between its
    # SQLite steps; with the event loop busy it waited up to 5 ms each time, and the
    # commit cycle — what a live watcher waits for — grew with it. At 1,000 agents
    # streaming 50 words a second (bench/capacity.py): p50 151 → 65 ms, p99 1.5 s →
    # 0.15 s; handing the GIL over sooner costs the loop nothing measurable here.
    sys.setswitchinterval(SWITCH_INTERVAL)
