"""Live feeds follow the journal: committed batches are written from the writer's pass.

A fake `LiveSink` stands for the connection, so what the feed writes where (directly
from the journal, or through its own task's `send`) is visible and can be refused.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest
import trio
import trio.testing

from orchestrator.core.bus import Bus, RunSink
from orchestrator.core.events import EventType
from orchestrator.core.filters import FilterSpec
from orchestrator.server.feed import Feed, Sent
from orchestrator.storage.journal import Entry, Journal
from orchestrator.storage.memory import MemoryStorage
from tests.unit.test_journal import record


class FakeSink:
    """Records frames written now (`live`) and through the task (`sent`), in one order."""

    def __init__(self, answers: list[Sent] | None = None) -> None:
        self.answers = answers or []
        """What `send_now` answers next (then WHOLE); NOT_NOW writes nothing."""
        self.wire: list[tuple[str, bytes]] = []
        self.flushes = 0

    def send_now(self, frame: bytes) -> Sent:
        answer = self.answers.pop(0) if self.answers else Sent.WHOLE
        if answer is not Sent.NOT_NOW:
            self.wire.append(("live", frame))
        return answer

    async def flush(self) -> None:
        self.flushes += 1

    async def send(self, frame: bytes) -> None:
        self.wire.append(("task", frame))

    def seqs(self) -> list[int]:
        out: list[int] = []
        for _, frame in self.wire:
            body = json.loads(frame)
            out.extend(e["seq"] for e in body.get("events", []))
        return out


@asynccontextmanager
async def live_run() -> AsyncIterator[tuple[Journal, Bus]]:
    async with MemoryStorage.open() as storage, Journal.open(storage) as journal:
        journal.create_run(record())
        yield journal, Bus(RunSink("run-1", "sess-1", journal.outlet("run-1")))


async def emit_and_commit(journal: Journal, bus: Bus, count: int) -> None:
    for n in range(count):
        bus.emit_nowait(EventType.REASONING, {"delta": f"w{n}"})
    await journal.writer.flush()
    await trio.testing.wait_all_tasks_blocked()


async def test_caught_up_feeds_get_batches_from_the_writer_and_share_one_frame() -> None:
    async with live_run() as (journal, bus), trio.open_nursery() as nursery:
        sinks = [FakeSink() for _ in range(3)]
        for sink in sinks:
            feed = Feed(journal, "s1", "run-1")
            nursery.start_soon(feed.run, sink.send, sink)
        await trio.testing.wait_all_tasks_blocked()
        log = journal.get("run-1")
        assert len(log.followers) == 3
        await emit_and_commit(journal, bus, 3)
        assert [kind for s in sinks for kind, _ in s.wire] == ["live"] * 3
        frames = [s.wire[0][1] for s in sinks]
        assert frames[0] is frames[1] is frames[2]  # made once, written three times
        assert all(s.seqs() == [1, 2, 3] for s in sinks)
        bus.emit_nowait(EventType.RUN_FINISHED, {"status": "completed"}, last=True)
    for sink in sinks:
        assert sink.seqs() == [1, 2, 3, 4]
        assert json.loads(sink.wire[-1][1])["op"] == "end"
    assert not log.followers


async def test_different_filters_and_subs_make_their_own_frames() -> None:
    async with live_run() as (journal, bus), trio.open_nursery() as nursery:
        plain, other_sub, filtered = FakeSink(), FakeSink(), FakeSink()
        nursery.start_soon(Feed(journal, "s1", "run-1").run, plain.send, plain)
        nursery.start_soon(Feed(journal, "s2", "run-1").run, other_sub.send, other_sub)
        only_calls = FilterSpec(types=["TOOL_CALL"])
        feed = Feed(journal, "s1", "run-1", filter=only_calls)
        nursery.start_soon(feed.run, filtered.send, filtered)
        await trio.testing.wait_all_tasks_blocked()
        await emit_and_commit(journal, bus, 2)
        assert plain.seqs() == other_sub.seqs() == [1, 2]
        assert b'"sub":"s2"' in other_sub.wire[0][1]
        assert filtered.wire == [] and feed.cursor == 2  # nothing matched, but handled
        bus.emit_nowait(EventType.TOOL_CALL, {"toolCallId": "c", "name": "x", "args": {}})
        await journal.writer.flush()
        await trio.testing.wait_all_tasks_blocked()
        assert filtered.seqs() == [3] and filtered.wire[0][0] == "live"
        nursery.cancel_scope.cancel()


@pytest.mark.parametrize(
    ("answer", "wire"),
    [
        (Sent.NOT_NOW, ["task", "live"]),  # busy: the feed's task reads and sends it
        (Sent.PARTLY, ["live", "live"]),  # taken: the rest is flushed, never resent
    ],
)
async def test_a_declined_or_half_written_frame_and_then_following_again(
    answer: Sent, wire: list[str]
) -> None:
    async with live_run() as (journal, bus), trio.open_nursery() as nursery:
        sink = FakeSink([answer])
        feed = Feed(journal, "s1", "run-1")
        nursery.start_soon(feed.run, sink.send, sink)
        await trio.testing.wait_all_tasks_blocked()
        await emit_and_commit(journal, bus, 2)
        assert feed.cursor == 2 and sink.flushes == 1  # woken once: what is left goes out
        await emit_and_commit(journal, bus, 1)  # following again
        assert [kind for kind, _ in sink.wire] == wire
        assert sink.seqs() == [1, 2, 3]
        nursery.cancel_scope.cancel()


async def test_a_batch_bigger_than_a_frame_goes_through_the_task_in_pieces() -> None:
    async with live_run() as (journal, bus), trio.open_nursery() as nursery:
        sink = FakeSink()
        feed = Feed(journal, "s1", "run-1", frame_bytes=600)
        nursery.start_soon(feed.run, sink.send, sink)
        await trio.testing.wait_all_tasks_blocked()
        await emit_and_commit(journal, bus, 10)
        assert {kind for kind, _ in sink.wire} == {"task"} and len(sink.wire) > 1
        assert sink.seqs() == list(range(1, 11))
        nursery.cancel_scope.cancel()


async def test_a_cancelled_feed_stops_following() -> None:
    async with live_run() as (journal, bus):
        sink = FakeSink()
        feed = Feed(journal, "s1", "run-1")
        with trio.move_on_after(0.1):
            await feed.run(sink.send, sink)
        assert not journal.get("run-1").followers
        await emit_and_commit(journal, bus, 1)
        assert sink.wire == []


async def test_a_failing_follower_does_not_fail_the_write(caplog: pytest.LogCaptureFixture) -> None:
    class Broken:
        woken = False

        def offer(self, entries: list[Entry], shared: dict[object, bytes]) -> bool:
            raise RuntimeError("boom")

        def wake(self) -> None:
            self.woken = True

    async with live_run() as (journal, bus):
        broken = Broken()
        log = journal.get("run-1")
        journal.follow(log, broken)
        await emit_and_commit(journal, bus, 2)
        assert broken.woken and not log.followers
        assert log.committed == 2 and journal.writer.healthy
        assert "a follower of run run-1 failed" in caplog.text


async def test_a_blocks_feed_never_follows() -> None:
    async with live_run() as (journal, bus), trio.open_nursery() as nursery:
        sink = FakeSink()
        nursery.start_soon(Feed(journal, "s1", "run-1", detail="blocks").run, sink.send, sink)
        await trio.testing.wait_all_tasks_blocked()
        assert not journal.get("run-1").followers
        await emit_and_commit(journal, bus, 1)
        nursery.cancel_scope.cancel()


async def test_a_write_of_the_record_alone_does_not_wake_followers() -> None:
    """Regression: a status-only write woke every follower (a herd of 1,000 tasks)."""
    async with live_run() as (journal, _), trio.open_nursery() as nursery:
        sink = FakeSink()
        feed = Feed(journal, "s1", "run-1")
        nursery.start_soon(feed.run, sink.send, sink)
        await trio.testing.wait_all_tasks_blocked()
        log = journal.get("run-1")
        journal.writer.mark(log)  # the record changed, no events
        await journal.writer.flush()
        await trio.testing.wait_all_tasks_blocked()
        assert feed in log.followers and sink.flushes == 0
        nursery.cancel_scope.cancel()
