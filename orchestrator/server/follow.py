"""Follow one run's committed events from the journal, in batches: for the HTTP
endpoints that stream a run (`/mcp` progress, `/ag-ui`), which need no feed machinery."""

from __future__ import annotations

from collections.abc import AsyncGenerator

from orchestrator.storage.journal import Journal
from orchestrator.storage.runlog import Entry

__all__ = ["follow_run"]

BATCH = 1024


async def follow_run(
    journal: Journal, run_id: str, after: int = 0
) -> AsyncGenerator[list[Entry], None]:
    """The run's events after `after`, a batch at a time, until its last one (a run of
    another cluster instance is tailed while followed)."""
    log = journal.get(run_id)
    journal.mirrors.watch(log, +1)
    try:
        while not log.finished or after < log.committed:
            await journal.wait(run_id, after)
            entries = await journal.read(run_id, after, BATCH)
            if entries:
                after = entries[-1].seq
                yield entries
    finally:
        journal.mirrors.watch(log, -1)
