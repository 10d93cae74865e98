"""The run journal over every backend: commit before visibility, bounded memory, restart."""

from __future__ import annotations

import gc
import threading
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing

from orchestrator.core.bus import Bus, RunSink
from orchestrator.core.events import EventType, decode_event
from orchestrator.storage.base import RunRecord, Storage, StorageError
from orchestrator.storage.journal import Journal, UnknownRun
from orchestrator.storage.memory import MemoryStorage
from orchestrator.storage.redis import RedisStorage
from orchestrator.storage.runlog import Entry
from orchestrator.storage.sqlite import SqliteStorage

Factory = Callable[[], AbstractAsyncContextManager[Storage]]


@pytest.fixture(params=["memory", "sqlite", "redis"])
def factory(request: pytest.FixtureRequest, tmp_path: Path) -> Factory:
    if request.param == "memory":
        return MemoryStorage.open
    if request.param == "redis":
        url = request.getfixturevalue("redis_url")  # a fresh keyspace per test
        return lambda: RedisStorage.open(url, durability="relaxed")
    return lambda: SqliteStorage.open(tmp_path / "j.db")


@asynccontextmanager
async def open_journal(
    storage: AbstractAsyncContextManager[Storage], *, tail: int = 8192, max_pending: int = 8192
) -> AsyncIterator[Journal]:
    # Storage is closed however the test ends (a leaked coredis client breaks others).
    async with storage as opened, Journal.open(opened, tail=tail, max_pending=max_pending) as j:
        yield j
        await j.writer.flush()


def record(run_id: str = "run-1") -> RunRecord:
    return RunRecord(
        run_id=run_id,
        agent_id="planner",
        input="q",
        status="running",
        created_at=1.0,
        root_session_id="sess-1",
    )


async def test_events_become_readable_only_once_committed(factory: Factory) -> None:
    async with open_journal(factory()) as journal:
        journal.create_run(record())
        bus = Bus(RunSink("run-1", "sess-1", journal.outlet("run-1")))
        bus.emit_nowait(EventType.RUN_STARTED, {"agentId": "planner", "input": "q"})
        assert await journal.read("run-1", 0, 10) == []  # pending, not committed yet
        await journal.writer.flush()
        (entry,) = await journal.read("run-1", 0, 10)
        assert entry.seq == 1 and entry.raw.startswith(b'{"runId":"run-1","seq":1')
        assert journal.writer.events_written == 1


async def test_the_tail_is_out_of_the_garbage_collectors_reach() -> None:
    """A run keeps up to `tail` committed entries: tracked, 1,000 agents' tails made
    a collection of generation 1 pause the server 261 ms (docs/benchmarks.md)."""
    async with open_journal(MemoryStorage.open()) as journal:
        journal.create_run(record())
        bus = Bus(RunSink("run-1", "sess-1", journal.outlet("run-1")))
        bus.emit_nowait(EventType.RUN_STARTED, {"agentId": "planner", "input": "q"})
        bus.emit_nowait(EventType.REASONING, {"delta": "hi"})
        await journal.writer.flush()
        entries = await journal.read("run-1", 0, 10)
        assert [e.seq for e in entries] == [1, 2]
        assert not any(gc.is_tracked(e) for e in entries)


async def test_wait_wakes_on_commit_and_on_finish(factory: Factory) -> None:
    async with open_journal(factory()) as journal:
        journal.create_run(record())
        bus = Bus(RunSink("run-1", "sess-1", journal.outlet("run-1")))
        woke: list[int] = []

        async def waiter() -> None:
            await journal.wait("run-1", 0)
            woke.append(journal.get("run-1").committed)
            await journal.wait("run-1", 1)
            woke.append(journal.get("run-1").committed)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(waiter)
            await trio.testing.wait_all_tasks_blocked()
            bus.emit_nowait(EventType.RUN_STARTED, {"agentId": "a", "input": "q"})
            await journal.writer.flush()
            await trio.testing.wait_all_tasks_blocked()
            assert woke == [1]
            bus.emit_nowait(EventType.RUN_FINISHED, {"status": "failed"}, last=True)
        assert woke == [1, 2]
        log = journal.get("run-1")
        assert log.finished and log.finished_status == "failed" and log.record.status == "failed"


async def test_producers_wait_when_the_writer_is_behind(factory: Factory) -> None:
    async with open_journal(factory(), max_pending=4) as journal:
        journal.create_run(record())
        bus = Bus(RunSink("run-1", "sess-1", journal.outlet("run-1")))
        for _ in range(50):
            await bus.emit(EventType.REASONING, {"delta": "x"})
            assert len(journal.get("run-1").pending) <= 4
        await journal.writer.flush()
        entries = await journal.read("run-1", 0, 100)
        assert [e.seq for e in entries] == list(range(1, 51))


async def test_durable_tail_is_bounded_and_old_events_come_from_storage(tmp_path: Path) -> None:
    async with open_journal(
        SqliteStorage.open(tmp_path / "t.db"), tail=10, max_pending=5
    ) as journal:
        journal.create_run(record())
        bus = Bus(RunSink("run-1", "sess-1", journal.outlet("run-1")))
        for _ in range(100):
            await bus.emit(EventType.REASONING, {"delta": "x"})
        await journal.writer.flush()
        log = journal.get("run-1")
        assert len(log.entries) <= 20 and log.tail_first > 50
        assert [e.seq for e in await journal.read("run-1", 5, 7)] == list(range(6, 13))
        assert [e.seq for e in await journal.read("run-1", 95, 100)] == list(range(96, 101))


@pytest.mark.parametrize("backend", ["sqlite", "redis"])
async def test_restart_keeps_history_and_interrupts_running_runs(
    tmp_path: Path, backend: str, request: pytest.FixtureRequest
) -> None:
    url = request.getfixturevalue("redis_url") if backend == "redis" else ""

    def storage() -> AbstractAsyncContextManager[Storage]:
        if backend == "redis":
            return RedisStorage.open(url, durability="relaxed")
        return SqliteStorage.open(tmp_path / "r.db")

    async with open_journal(storage()) as journal:
        journal.create_run(record("run-done"))
        done = Bus(RunSink("run-done", "sess-1", journal.outlet("run-done")))
        done.emit_nowait(EventType.RUN_STARTED, {"agentId": "a", "input": "q"})
        done.emit_nowait(EventType.RUN_FINISHED, {"status": "completed"}, last=True)
        journal.create_run(record("run-live"))
        live = Bus(RunSink("run-live", "sess-1", journal.outlet("run-live")))
        for _ in range(3):
            live.emit_nowait(EventType.REASONING, {"delta": "x"})
    async with storage() as opened, Journal.open(opened) as journal:
        assert journal.interrupted == ["run-live"]
        await journal.writer.flush()
        # Both records have created_at 1.0: ties are broken by runId, never by a hash.
        assert [(r.run_id, r.status) for r in journal.records()] == [
            ("run-done", "completed"),
            ("run-live", "interrupted"),
        ]
        entries = await journal.read("run-live", 0, 10)
        assert [e.seq for e in entries] == [1, 2, 3, 4]
        assert entries[-1].event.type is EventType.RUN_FINISHED
        assert entries[-1].event.data["status"] == "interrupted"
        assert journal.get("run-live").finished
        assert [e.seq for e in await journal.read("run-done", 0, 10)] == [1, 2]


async def test_unknown_run(factory: Factory) -> None:
    async with open_journal(factory()) as journal:
        with pytest.raises(UnknownRun, match="unknown run 'nope'"):
            journal.get("nope")


async def test_flush_waits_for_a_write_in_progress() -> None:
    """Regression: flush() returned while a batch was still being written."""
    gate = trio.Event()

    class SlowStorage(MemoryStorage):
        async def write(
            self, records: list[RunRecord], events: list[tuple[str, int, bytes]]
        ) -> None:
            await gate.wait()

    async with open_journal(SlowStorage.open()) as journal:
        journal.create_run(record())
        Bus(RunSink("run-1", "sess-1", journal.outlet("run-1"))).emit_nowait(
            EventType.RUN_STARTED, {"agentId": "a", "input": "q"}
        )
        await trio.testing.wait_all_tasks_blocked()  # the writer took the batch and waits
        flushed = False

        async def flush() -> None:
            nonlocal flushed
            await journal.writer.flush()
            flushed = True

        async with trio.open_nursery() as nursery:
            nursery.start_soon(flush)
            await trio.testing.wait_all_tasks_blocked()
            assert not flushed and journal.get("run-1").committed == 0
            gate.set()
        assert flushed and journal.get("run-1").committed == 1


async def test_sqlite_hands_a_batch_to_live_feeds_as_soon_as_it_is_committed(
    tmp_path: Path,
) -> None:
    """The feeds are offered the batch in the callback that reports the commit (trio's
    `run_sync_soon` task), not after the writer task has waited for its next turn;
    a write that fails offers nothing, and the batch is written on the retry."""

    class Follower:
        def __init__(self) -> None:
            self.offered: list[tuple[str, list[int]]] = []

        def offer(self, entries: list[Entry], shared: dict[object, bytes]) -> bool:
            self.offered.append((trio.lowlevel.current_task().name, [e.seq for e in entries]))
            return True

        def wake(self) -> None:
            pass

    failing = [True]

    class Once(SqliteStorage):
        def _write(self, *args: Any) -> None:
            if failing.pop() if failing else False:
                raise OSError(28, "No space left on device")
            super()._write(*args)

    async with Once.open(tmp_path / "j.db") as storage, Journal.open(storage) as journal:
        log = journal.create_run(record())
        follower = Follower()
        journal.follow(log, follower)
        Bus(RunSink("run-1", "sess-1", journal.outlet("run-1"))).emit_nowait(
            EventType.RUN_STARTED, {"agentId": "planner", "input": "q"}
        )
        with trio.fail_after(10):
            await journal.writer.flush()
        assert journal.writer.write_failures == 1
        assert [seqs for _, seqs in follower.offered] == [[1]]
        (task,) = {name for name, _ in follower.offered}
        assert "JournalWriter" not in task
        assert "run_sync_soon" in task


async def test_sqlite_starts_the_next_commit_when_one_is_committed(tmp_path: Path) -> None:
    """Events published while a commit runs are committed by the next one, started in
    the callback that reports the first (not a turn later by the writer task); all
    arrive in order, and closing the journal waits for a commit under way."""
    release = threading.Event()
    started_by: list[str] = []

    class Slow(SqliteStorage):
        def begin_write(self, *args: Any) -> Any:
            started_by.append(f"{trio.lowlevel.current_task().name}: {len(args[1])} events")
            return super().begin_write(*args)

        def _write(self, *args: Any) -> None:
            release.wait(10)
            super()._write(*args)

    path = tmp_path / "j.db"
    async with Slow.open(path) as storage, Journal.open(storage) as journal:
        journal.create_run(record())
        bus = Bus(RunSink("run-1", "sess-1", journal.outlet("run-1")))
        bus.emit_nowait(EventType.RUN_STARTED, {"agentId": "planner", "input": "q"})
        await trio.testing.wait_all_tasks_blocked()  # the first commit waits in its thread
        for _ in range(5):
            bus.emit_nowait(EventType.REASONING, {"delta": "x"})
        release.set()
        with trio.fail_after(10):
            await journal.writer.flush()
        assert [s for s in started_by if "run_sync_soon" in s] == [
            "<TrioToken.run_sync_soon task>: 5 events"
        ]
        bus.emit_nowait(EventType.REASONING, {"delta": "y"})  # closed while it commits
    async with SqliteStorage.open(path) as storage:
        seqs = [decode_event(raw).seq for raw in await storage.read("run-1", 0, 100)]
    assert seqs == [1, 2, 3, 4, 5, 6, 7]


async def test_flush_returns_when_a_commit_the_last_one_started_is_already_over() -> None:
    """Regression: the writer took a commit that was already over and said it was
    writing; a `flush` that came then waited for a wake-up that never came."""

    class Started:
        def __init__(self, committed: Callable[[], None]) -> None:
            self.committed, self.over, self.waiter = committed, False, trio.Event()

        def finish(self) -> None:
            self.over = True
            self.committed()
            self.waiter.set()

        async def wait(self) -> None:
            await self.waiter.wait()

    class Early(MemoryStorage):
        def __init__(self) -> None:
            self.started: list[Started] = []

        def begin_write(self, records: Any, events: Any, committed: Any) -> Started:
            self.started.append(Started(committed))
            return self.started[-1]

        async def write_then(self, records: Any, events: Any, committed: Any) -> None:
            await self.begin_write(records, events, committed).wait()

    for _ in range(20):  # (which of the writer and `flush` runs first varies)
        async with Early.open() as storage, Journal.open(storage) as journal:
            assert isinstance(storage, Early)
            journal.create_run(record())
            bus = Bus(RunSink("run-1", "sess-1", journal.outlet("run-1")))
            bus.emit_nowait(EventType.RUN_STARTED, {"agentId": "planner", "input": "q"})
            await trio.testing.wait_all_tasks_blocked()
            bus.emit_nowait(EventType.REASONING, {"delta": "x"})
            storage.started[0].finish()  # starts the next commit, which is over at once
            storage.started[1].finish()
            await trio.lowlevel.checkpoint()  # the writer takes that one (or not yet)
            with trio.fail_after(5):
                await journal.writer.flush()
            assert journal.get("run-1").committed == 2


async def test_strict_durability_refuses_a_redis_that_forgets(redis_url: str) -> None:
    """The machine's Redis keeps nothing on disk: strict mode must refuse it (issue 8.8)."""
    import coredis

    async with coredis.Redis.from_url(redis_url.split("?")[0]) as client:
        settings = await client.config_get(["appendonly"])
    if settings.get(b"appendonly") == b"yes":
        pytest.skip("this Redis has appendonly yes: nothing to refuse")
    with pytest.raises(StorageError, match=r"appendonly is 'no'.*durability: relaxed"):
        async with RedisStorage.open(redis_url):  # durability="strict" is the default
            pass
    async with RedisStorage.open(redis_url, durability="relaxed") as relaxed:
        assert await relaxed.load() == []


async def test_a_redis_batch_written_twice_is_written_once(redis_url: str) -> None:
    """Regression: a batch retried after a lost connection had left it half written
    failed for ever on stream ids Redis refuses; the append script skips what is there."""
    record = RunRecord(
        run_id="run-r",
        agent_id="a",
        input="x",
        status="running",
        created_at=1.0,
        root_session_id="s",
        last_seq=3,
    )
    rows = [("run-r", seq, f'{{"seq":{seq}}}'.encode()) for seq in (1, 2, 3)]
    async with RedisStorage.open(redis_url, durability="relaxed") as storage:
        await storage.write([record], rows[:2])  # the first half made it
        await storage.write([record], rows)  # the retry of the whole batch
        assert await storage.read("run-r", 0, 10) == [body for _, _, body in rows]
        (loaded,) = await storage.load()
        assert loaded.last_seq == 3
        # A fenced append without the run's lease writes nothing.
        refused = await storage.append(
            [record], [("run-r", 4, b'{"seq":4}')], {"run-r": "w:1"}, fenced=True
        )
        assert refused == {"run-r"}
        assert len(await storage.read("run-r", 0, 10)) == 3
