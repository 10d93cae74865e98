"""A cheap `sleep_until` for many paced streams: one shared alarm per trio run.

`trio.sleep_until` opens a cancel scope with a deadline and, when it expires,
delivers a Cancelled into the sleeper and catches it: ~20 µs of CPU per sleep here.
A thousand scripted agents at 50 words a second sleep 50,000 times a second, and
that machinery was a fifth of the server's CPU (`bench/capacity.py`, py-spy). Here a
sleeper parks on `wait_task_rescheduled` in a heap, and one system task wakes every
sleeper that is due, rounding its own wake-ups up to a `TICK` so that sleepers due
within the same tick are woken by one timer. A sleeper is never woken early and at
most `TICK` late (2 ms: a tenth of a 50-words-a-second gap). Cancelling a sleeper
works as for any trio sleep (it is taken out of the heap).
"""

from __future__ import annotations

import heapq
import math
from itertools import count

import trio

__all__ = ["TICK", "sleep_until"]

TICK = 0.002
"""How far a wake-up may be rounded up (seconds)."""


class _Alarm:
    """The heap of parked sleepers of one trio run, and the task that wakes them."""

    def __init__(self) -> None:
        self.heap: list[tuple[float, int, trio.lowlevel.Task]] = []
        self.cancelled: set[int] = set()
        self.order = count()
        self.changed = trio.lowlevel.ParkingLot()
        trio.lowlevel.spawn_system_task(self._wake, name="agents.pacing alarm")

    async def sleep_until(self, deadline: float) -> None:
        task = trio.lowlevel.current_task()
        ticket = next(self.order)
        first = not self.heap or deadline < self.heap[0][0]
        heapq.heappush(self.heap, (deadline, ticket, task))
        if first:
            self.changed.unpark_all()

        def abort(_: object) -> trio.lowlevel.Abort:
            self.cancelled.add(ticket)
            return trio.lowlevel.Abort.SUCCEEDED

        await trio.lowlevel.wait_task_rescheduled(abort)

    async def _wake(self) -> None:
        heap = self.heap
        while True:
            while heap and heap[0][1] in self.cancelled:
                self.cancelled.discard(heapq.heappop(heap)[1])
            if not heap:
                await self.changed.park()
                continue
            now = trio.current_time()
            if heap[0][0] > now:
                wake_at = math.ceil(heap[0][0] / TICK - 1e-9) * TICK  # (shared by the tick)
                wake_at = max(wake_at, heap[0][0])
                with trio.move_on_at(wake_at):
                    await self.changed.park()  # (or sooner: an earlier sleeper came)
                continue
            while heap and heap[0][0] <= now:
                _, ticket, task = heapq.heappop(heap)
                if ticket in self.cancelled:
                    self.cancelled.discard(ticket)
                else:
                    trio.lowlevel.reschedule(task)


_ALARM: trio.lowlevel.RunVar[_Alarm] = trio.lowlevel.RunVar("agents.pacing alarm")


async def sleep_until(deadline: float) -> None:
    """Sleep until trio's clock reaches `deadline` (at most `TICK` later), cheaply."""
    if deadline <= trio.current_time():
        await trio.lowlevel.checkpoint()
        return
    try:
        alarm = _ALARM.get()
    except LookupError:
        alarm = _Alarm()
        _ALARM.set(alarm)
    await alarm.sleep_until(deadline)
