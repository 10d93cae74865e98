"""The journal under storage faults, and its retention policy (gaps included)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path
from typing import Any

import msgspec
import pytest
import trio
import trio.testing

from orchestrator.core.bus import Bus, RunSink
from orchestrator.core.events import EventType
from orchestrator.server.feed import Feed
from orchestrator.storage.base import RunRecord, Storage
from orchestrator.storage.journal import Journal, UnknownRun
from orchestrator.storage.memory import MemoryStorage
from orchestrator.storage.retention import Retention, RetentionPolicy
from orchestrator.storage.sqlite import SqliteStorage, _Commit


class FlakyStorage(SqliteStorage):
    """SQLite whose writes fail while `failing` is set (a full disk, a dead server)."""

    fail_from_start = False

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.failing = FlakyStorage.fail_from_start
        self.attempts = 0

    def begin_write(
        self,
        records: list[RunRecord],
        events: list[tuple[str, int, bytes]],
        committed: Callable[[], None] | None,
    ) -> _Commit | None:
        self.attempts += 1
        if self.failing:
            raise OSError(28, "No space left on device")
        return super().begin_write(records, events, committed)


def record(run_id: str, created_at: float = 1.0, status: str = "running") -> RunRecord:
    return RunRecord(
        run_id=run_id,
        agent_id="planner",
        input="q",
        status=status,
        created_at=created_at,
        root_session_id="sess-1",
    )


@asynccontextmanager
async def flaky_journal(path: Path, **options: Any) -> AsyncIterator[tuple[Journal, FlakyStorage]]:
    async with FlakyStorage.open(path) as storage, Journal.open(storage, **options) as journal:
        assert isinstance(storage, FlakyStorage)
        yield journal, storage


async def test_failed_writes_are_retried_without_loss(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    async with flaky_journal(tmp_path / "j.db", max_pending=16) as (journal, storage):
        journal.create_run(record("run-1"))
        bus = Bus(RunSink("run-1", "sess-1", journal.outlet("run-1")))
        bus.emit_nowait(EventType.RUN_STARTED, {"agentId": "a", "input": "q"})
        await journal.writer.flush()
        storage.failing = True
        produced = 0

        async def produce() -> None:
            nonlocal produced
            for _ in range(40):  # more than max_pending: the producer waits, memory stays bounded
                await bus.emit(EventType.REASONING, {"delta": "x"})
                produced += 1

        async with trio.open_nursery() as nursery:
            nursery.start_soon(produce)
            await trio.sleep(2)
            assert not journal.writer.healthy and "No space left" in (
                journal.writer.last_error or ""
            )
            assert journal.writer.write_failures >= 3 and produced < 40
            assert journal.writer.pending_events <= 2 * 16 + 1
            assert journal.get("run-1").committed == 1  # nothing uncommitted is visible
            storage.failing = False
        await journal.writer.flush()
        assert journal.writer.healthy and journal.writer.last_error is None
        entries = await journal.read("run-1", 0, 100)
        assert [e.seq for e in entries] == list(range(1, 42))


async def test_runs_that_cannot_be_stored_are_reported_once(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    stalled: list[tuple[list[str], str]] = []
    async with flaky_journal(tmp_path / "j.db", fail_runs_after=10) as (journal, storage):
        journal.writer.stalled.subscribe(lambda runs, why: stalled.append((runs, why)))
        journal.create_run(record("run-1"))
        await journal.writer.flush()
        storage.failing = True
        Bus(RunSink("run-1", "sess-1", journal.outlet("run-1"))).emit_nowait(
            EventType.RUN_STARTED, {"agentId": "a", "input": "q"}
        )
        await trio.sleep(9)
        assert stalled == []
        await trio.sleep(20)
        assert stalled == [(["run-1"], "OSError: [Errno 28] No space left on device")]
        storage.failing = False
        await journal.writer.flush()
        assert journal.get("run-1").committed == 1


async def test_start_on_a_failing_store_is_read_only_until_it_recovers(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    path = tmp_path / "j.db"
    async with SqliteStorage.open(path) as first_storage, Journal.open(first_storage) as first:
        first.create_run(record("run-old"))
        Bus(RunSink("run-old", "sess-1", first.outlet("run-old"))).emit_nowait(
            EventType.RUN_STARTED, {"agentId": "a", "input": "q"}
        )
        await first.writer.flush()
    FlakyStorage.fail_from_start = True
    try:
        async with flaky_journal(path) as (journal, storage):
            assert journal.interrupted == ["run-old"]  # opening writes nothing: it works
            await trio.sleep(1)
            assert not journal.writer.healthy
            assert [e.seq for e in await journal.read("run-old", 0, 10)] == [1]  # readable
            storage.failing = False
            await journal.writer.flush()
            assert (
                journal.writer.healthy and journal.get("run-old").finished_status == "interrupted"
            )
    finally:
        FlakyStorage.fail_from_start = False


async def test_the_final_flush_of_a_dead_store_is_bounded(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    start = trio.current_time()
    async with flaky_journal(tmp_path / "j.db") as (journal, storage):
        storage.failing = True
        journal.create_run(record("run-1"))
        await trio.sleep(1)
    assert trio.current_time() - start < 13  # 1 s, then at most the 10 s final flush


@pytest.mark.parametrize("backend", ["memory", "sqlite"])
async def test_retention_trims_runs_and_events_and_feeds_see_a_gap(
    tmp_path: Path, backend: str
) -> None:
    opener: AbstractAsyncContextManager[Storage] = (
        MemoryStorage.open() if backend == "memory" else SqliteStorage.open(tmp_path / "r.db")
    )
    async with opener as storage, Journal.open(storage, tail=50) as journal:
        for n in range(4):
            run_id = f"run-{n}"
            journal.create_run(record(run_id, created_at=float(n)))
            bus = Bus(RunSink(run_id, "sess-1", journal.outlet(run_id)))
            bus.emit_nowait(EventType.RUN_STARTED, {"agentId": "a", "input": "q"})
            for _ in range(300 if n == 3 else 2):
                bus.emit_nowait(EventType.REASONING, {"delta": "x"})
            if n < 3:
                bus.emit_nowait(EventType.RUN_FINISHED, {"status": "completed"}, last=True)
        await journal.writer.flush()
        retention = Retention(journal, RetentionPolicy(max_runs=2, max_run_events=100))
        await retention.apply()
        assert [r.run_id for r in journal.records()] == ["run-1", "run-2", "run-3"]
        with pytest.raises(UnknownRun):
            journal.get("run-0")
        assert retention.runs_deleted == 1
        log = journal.get("run-3")  # still running: never deleted, but trimmed
        assert log.record.first_seq == 202 and log.committed == 301
        frames: list[bytes] = []

        async def send(frame: bytes) -> None:
            frames.append(frame)

        feed = Feed(journal, "s1", "run-3", after_seq=10, batch_events=64)
        with trio.move_on_after(1):
            await feed.run(send)
        assert frames[0] == b'{"op":"gap","sub":"s1","fromSeq":11,"toSeq":201}'
        assert b'"seq":202,' in frames[1] and feed.cursor == 301
        await Retention(journal, RetentionPolicy(max_age=0.001)).apply()
        assert [r.run_id for r in journal.records()] == ["run-3"]
    if backend == "sqlite":  # the deletes reached the file
        async with SqliteStorage.open(tmp_path / "r.db") as reopened:
            records = await reopened.load()
        assert [r.run_id for r in records] == ["run-3"] and records[0].first_seq == 202


async def test_retention_keeps_the_runs_a_kept_run_goes_on_from() -> None:
    """A thread's run is rebuilt from the runs before it: retention deletes a run only
    once no kept run goes on from it (at any distance), then the thread from its start;
    and a thread that needs a run whose early events were trimmed says so."""
    from orchestrator.core.threads import ThreadError
    from orchestrator.runs.threads import Threads

    async with MemoryStorage.open() as storage, Journal.open(storage) as journal:
        chain = {"run-a": None, "run-c": None, "run-b": "run-a", "run-d": "run-b"}
        for n, (run_id, previous) in enumerate(chain.items()):
            journal.create_run(
                msgspec.structs.replace(
                    record(run_id, created_at=float(n)),
                    thread_id=None if run_id == "run-c" else "t",
                    previous_run_id=previous,
                )
            )
            bus = Bus(RunSink(run_id, "sess-1", journal.outlet(run_id)))
            bus.emit_nowait(EventType.RUN_STARTED, {"agentId": "a", "input": run_id})
            bus.emit_nowait(
                EventType.RUN_FINISHED, {"status": "completed", "result": "ok"}, last=True
            )
        await journal.writer.flush()
        await Retention(journal, RetentionPolicy(max_runs=1)).apply()
        # run-d is kept: run-b and (through it) run-a stay; only run-c goes
        assert [r.run_id for r in journal.records()] == ["run-a", "run-b", "run-d"]
        said = [getattr(m, "text", "") for m in await Threads(journal).conversation("run-d")]
        assert said == ["run-a", "run-b", "run-d"]  # (each run's input; no turns here)
        await Retention(journal, RetentionPolicy(max_run_events=1)).apply()
        with pytest.raises(ThreadError, match="max_run_events trimmed"):
            await Threads(journal).conversation("run-d")
        await trio.sleep(0.05)  # (wall-clock ages: every run finished over 1 ms ago)
        await Retention(journal, RetentionPolicy(max_age=0.001)).apply()
        assert journal.records() == []  # nothing kept goes on from them: the thread goes


def test_every_listener_hears() -> None:
    """The writer's notices go to every subscriber (a slot had one owner, and a second
    silently replaced the first)."""
    from orchestrator.core.listeners import Listeners

    heard: list[tuple[str, list[str]]] = []
    fenced: Listeners[[list[str]]] = Listeners()
    stop = fenced.subscribe(lambda runs: heard.append(("host", runs)))
    fenced.subscribe(lambda runs: heard.append(("worker", runs)))
    fenced(["run-1"])
    stop()
    fenced(["run-2"])
    assert heard == [("host", ["run-1"]), ("worker", ["run-1"]), ("worker", ["run-2"])]
