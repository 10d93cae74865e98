"""A cheap `sleep_until` for many paced streams: one shared alarm per trio run.

`trio.sleep_until` opens a cancel scope with a deadline and, when it expires,
delivers a Cancelled into the sleeper and catches it: ~20 µs of CPU per sleep here.
A thousand scripted agents at 50 words a second sleep 50,000 times a second, and
that machinery was a fifth of the server's CPU (`bench/capacity.py`, py-spy). Here a
sleeper parks on `wait_task_rescheduled` in the list of its `TICK` (its deadline
rounded up to one), and one system task wakes each tick's sleepers when it comes,
so that sleepers due within the same tick are woken by one timer. A sleeper is
never woken early and at most `TICK` late (2 ms: a tenth of a 50-words-a-second
gap). Cancelling a sleeper works as for any trio sleep (it is taken out of its
tick's list).
"""

from __future__ import annotations

import heapq
import math

import trio

__all__ = ["TICK", "sleep_until"]

TICK = 0.002
"""How far a wake-up may be rounded up (seconds)."""


class _Alarm:
    """The parked sleepers of one trio run, by tick, and the task that wakes them.

    Sleepers due in the same tick share one list (a dict of tick → tasks, with a
    heap of the ticks that have sleepers): a sleep is an append, and a wake-up pops
    one list per tick — not a heap entry (a tuple, and its comparisons) per
    sleeper.
    """

    def __init__(self) -> None:
        self.due: dict[int, list[trio.lowlevel.Task]] = {}
        """Tick number (deadline ÷ TICK, rounded up) → the tasks sleeping until then."""
        self.ticks: list[int] = []
        """A heap of the keys of `due`."""
        self.changed = trio.lowlevel.ParkingLot()
        trio.lowlevel.spawn_system_task(self._wake, name="agents.pacing alarm")

    async def sleep_until(self, deadline: float) -> None:
        task = trio.lowlevel.current_task()
        tick = math.ceil(deadline / TICK - 1e-9)
        sleepers = self.due.get(tick)
        if sleepers is None:
            sleepers = self.due[tick] = []
            first = not self.ticks or tick < self.ticks[0]
            heapq.heappush(self.ticks, tick)
            if first:
                self.changed.unpark_all()
        sleepers.append(task)

        def abort(_: object) -> trio.lowlevel.Abort:
            sleepers.remove(task)  # (an emptied tick is dropped when it comes)
            return trio.lowlevel.Abort.SUCCEEDED

        await trio.lowlevel.wait_task_rescheduled(abort)

    async def _wake(self) -> None:
        ticks, due, reschedule = self.ticks, self.due, trio.lowlevel.reschedule
        while True:
            if not ticks:
                await self.changed.park()
                continue
            now = trio.current_time()
            if ticks[0] * TICK > now:
                with trio.move_on_at(ticks[0] * TICK):
                    await self.changed.park()  # (or sooner: an earlier sleeper came)
                continue
            while ticks and ticks[0] * TICK <= now:
                for task in due.pop(heapq.heappop(ticks)):
                    reschedule(task)


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
