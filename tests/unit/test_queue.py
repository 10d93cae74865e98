"""The bounded event queue between a run and its consumer."""

from __future__ import annotations

import pytest
import trio
import trio.testing

from orchestrator.core.bus import Bus, RunSink
from orchestrator.core.events import EventType
from orchestrator.runtime.queue import EventQueue


async def test_consumer_gets_everything_waiting_in_one_batch() -> None:
    queue = EventQueue(100)
    bus = Bus(RunSink("r", "s", queue))
    for _ in range(10):
        await bus.emit(EventType.REASONING, {"delta": "x"})
    batch = await queue.get_batch()
    assert [e.seq for e in batch] == list(range(1, 11))
    queue.close()
    with pytest.raises(trio.EndOfChannel):
        await queue.get_batch()


async def test_producer_waits_at_capacity_memory_stays_bounded() -> None:
    queue = EventQueue(8)
    bus = Bus(RunSink("r", "s", queue))
    produced = 0

    async def produce() -> None:
        nonlocal produced
        for _ in range(100):
            await bus.emit(EventType.REASONING, {"delta": "x"})
            produced += 1

    async with trio.open_nursery() as nursery:
        nursery.start_soon(produce)
        await trio.testing.wait_all_tasks_blocked()
        # Blocked: the 8th event is queued and its emit() waits for the consumer.
        assert len(queue) == 8 and produced == 7
        seen: list[int] = []
        while len(seen) < 100:
            batch = await queue.get_batch()
            assert len(batch) <= 8
            seen += [e.seq for e in batch]
    assert seen == list(range(1, 101))


async def test_close_wakes_a_waiting_consumer() -> None:
    queue = EventQueue(4)
    async with trio.open_nursery() as nursery:

        async def consume() -> None:
            with pytest.raises(trio.EndOfChannel):
                await queue.get_batch()

        nursery.start_soon(consume)
        await trio.testing.wait_all_tasks_blocked()
        queue.close()


async def test_put_after_close_fails() -> None:
    queue = EventQueue(4)
    queue.close()
    bus = Bus(RunSink("r", "s", queue))
    with pytest.raises(trio.ClosedResourceError):
        bus.emit_nowait(EventType.REASONING, {"delta": "x"})
