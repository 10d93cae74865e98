"""The shared alarm of paced streams (agents/providers/pacing.py): never early, at
most a tick late, cancellable, and one timer for the sleepers of one tick."""

from __future__ import annotations

import pytest
import trio
import trio.testing

from agents.providers.pacing import TICK, sleep_until

pytestmark = pytest.mark.trio


async def test_sleepers_wake_in_order_never_early_and_at_most_a_tick_late(
    autojump_clock: trio.testing.MockClock,
) -> None:
    start = trio.current_time()
    woke: dict[int, float] = {}
    dues = {i: start + 0.0137 * ((i * 7) % 50 + 1) for i in range(200)}

    async def sleeper(i: int) -> None:
        await sleep_until(dues[i])
        woke[i] = trio.current_time()

    async with trio.open_nursery() as nursery:
        for i in dues:
            nursery.start_soon(sleeper, i)
    assert set(woke) == set(dues)
    for i, due in dues.items():
        assert due <= woke[i] <= due + TICK + 1e-9
    # Sleepers due in the same tick wake at the same moment (one timer for them).
    assert len(set(woke.values())) <= len({round(d / TICK + 0.5) for d in dues.values()})


async def test_a_sleeper_can_be_cancelled_and_the_others_still_wake(
    autojump_clock: trio.testing.MockClock,
) -> None:
    start = trio.current_time()
    woke: list[str] = []

    async def sleeper(name: str, due: float) -> None:
        await sleep_until(due)
        woke.append(name)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(sleeper, "late", start + 2)
        with trio.move_on_after(0.5) as scope:
            await sleep_until(start + 1)  # cancelled before its time
        nursery.start_soon(sleeper, "early", start + 0.7)
    assert scope.cancelled_caught and woke == ["early", "late"]
    assert trio.current_time() == pytest.approx(start + 2, abs=TICK)


async def test_a_deadline_already_past_is_a_checkpoint() -> None:
    with trio.CancelScope() as scope:
        scope.cancel()
        await sleep_until(trio.current_time() - 1)  # a cancel point, as trio's sleeps
        pytest.fail("not reached")
    assert scope.cancelled_caught
