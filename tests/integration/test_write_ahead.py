"""Write-ahead: a tool that acts on the world runs only once its call is journaled.

A takeover or a restart rebuilds a run from its journal; a call the journal does not
show was never made as far as the new executor knows, and a call without a result
is not made again (its effect is unknown). Both hold only if the effect cannot run
ahead of the journal (issue 31).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
import trio

from orchestrator.core.events import EventType
from orchestrator.runs.host import RunHost
from orchestrator.runtime.engine import Orchestrator
from orchestrator.storage.journal import Journal
from orchestrator.storage.runlog import RunLog
from tests.helpers import eventually, write_config
from tests.unit.test_journal_faults import FlakyStorage

pytestmark = pytest.mark.trio

AGENTS = {
    "scribe": {
        "description": "writes a file, then reads one",
        "instructions": "i",
        "tools": ["write_file", "read_file"],
        "script": {
            "turns": [
                {
                    "sleep": 0.5,  # (the test makes storage fail meanwhile)
                    "calls": [
                        {"name": "read_file", "args": {"path": "in.txt"}},
                        {"name": "write_file", "args": {"path": "out.txt", "content": "once"}},
                    ],
                },
                {"say": "done: {results}"},
            ]
        },
    }
}


@asynccontextmanager
async def scribe_host(tmp_path: Path) -> AsyncIterator[tuple[RunHost, FlakyStorage, Path]]:
    """A `RunHost` on a SQLite journal whose writes fail while `storage.failing`; the
    scribe's workspace holds `in.txt`."""
    config = write_config(tmp_path, AGENTS)
    workspace = config.tools_root
    workspace.mkdir()
    (workspace / "in.txt").write_text("hello")
    async with (
        FlakyStorage.open(tmp_path / "j.db") as storage,
        Journal.open(storage) as journal,
        Orchestrator.open(config) as orch,
        trio.open_nursery() as nursery,
    ):
        assert isinstance(storage, FlakyStorage)
        yield RunHost(orch, journal, nursery), storage, workspace
        nursery.cancel_scope.cancel()


async def test_a_tool_with_effects_waits_for_its_call_to_be_stored(tmp_path: Path) -> None:
    async with scribe_host(tmp_path) as (host, storage, workspace):
        hosted = await host.start("scribe", "go")
        storage.failing = True  # nothing the run publishes from now on is stored
        log = host.journal.get(hosted.run_id)
        # The idempotent read runs; the write waits for the call to be stored.
        await eventually(lambda: _results(log) == 1)
        await trio.sleep(0.5)
        assert not (workspace / "out.txt").exists()
        assert _results(log) == 1
        storage.failing = False
        result = await hosted.wait()
        assert result.status == "completed"
        assert (workspace / "out.txt").read_text() == "once"


async def test_a_copy_that_lost_its_run_acts_on_nothing(tmp_path: Path) -> None:
    """Its lease lost (fenced) while the call waits to be stored: the call never runs."""
    async with scribe_host(tmp_path) as (host, storage, workspace):
        hosted = await host.start("scribe", "go")
        storage.failing = True
        log = host.journal.get(hosted.run_id)
        await eventually(lambda: _results(log) == 1)
        log.refuse()  # as the cluster writer does when an append is refused
        log.readers.unpark_all()
        storage.failing = False
        with trio.fail_after(30):
            await hosted.wait()
        assert not (workspace / "out.txt").exists()


def _results(log: RunLog) -> int:
    """TOOL_RESULTs the run published (stored or not)."""
    entries = [*log.entries, *log.pending]
    return sum(entry.event.type is EventType.TOOL_RESULT for entry in entries)


async def test_a_run_is_acknowledged_once_its_start_is_stored(tmp_path: Path) -> None:
    """`start` (the `run` op's ack) returns once RUN_STARTED is committed: a crash
    right after the ack can no longer lose the run (issue 31's chaos found one)."""
    async with scribe_host(tmp_path) as (host, storage, _):
        storage.failing = True
        started: list[str] = []

        async def start() -> None:
            started.append((await host.start("scribe", "go")).run_id)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(start)
            await trio.sleep(0.5)
            assert started == []  # not acknowledged while nothing of it is stored
            storage.failing = False
            await eventually(lambda: bool(started))
        assert host.journal.get(started[0]).committed >= 1
