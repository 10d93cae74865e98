"""Triggers' schedules (orchestrator/core/schedule.py), without a clock: durations, the
ticks of `every` and of `cron` in a time zone (a daylight-saving day included), which
are due, and a trigger's kept state in every store."""

from __future__ import annotations

from datetime import UTC, datetime
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given
from hypothesis import strategies as st

from orchestrator.core.schedule import MAX_CATCH_UP, Schedule, due, parse_duration
from tests.unit.test_journal import Factory, factory  # noqa: F401  (the fixture: every store)


def test_durations() -> None:
    assert [parse_duration(d) for d in ("30s", "5m", "1.5h", "1d", "250ms", "90", 2)] == [
        30,
        300,
        5400,
        86400,
        0.25,
        90,
        2,
    ]
    for bad in ("0s", "-1", "soon", "5 weeks"):
        with pytest.raises(ValueError, match="duration"):
            parse_duration(bad)


def test_a_schedule_says_what_is_wrong() -> None:
    with pytest.raises(ValueError, match="not a 5-field cron expression"):
        Schedule(cron="0 3 * *")
    with pytest.raises(ValueError, match="not a 5-field cron expression"):
        Schedule(cron="61 * * * *")
    with pytest.raises(ValueError, match="not a time zone"):
        Schedule(cron="0 3 * * *", timezone="Mars/Olympus")
    with pytest.raises(ValueError, match="either cron or every"):
        Schedule()


@given(st.floats(min_value=1, max_value=1e6), st.floats(min_value=0, max_value=2e9))
def test_every_ticks_at_multiples_of_its_interval(every: float, t: float) -> None:
    after = Schedule(every=every).next_after(t)
    assert t < after <= t + every * (1 + 1e-9)
    assert after / every == pytest.approx(round(after / every))


def test_cron_follows_its_time_zone_across_a_daylight_saving_change() -> None:
    berlin = ZoneInfo("Europe/Berlin")
    schedule = Schedule(cron="30 2 * * *", timezone="Europe/Berlin")
    # 2026-03-29: clocks go from 02:00 to 03:00 in Berlin; 02:30 does not exist that day.
    t = datetime(2026, 3, 28, 12, 0, tzinfo=berlin).timestamp()
    days = []
    for _ in range(3):
        t = schedule.next_after(t)
        days.append(datetime.fromtimestamp(t, UTC).astimezone(berlin).strftime("%m-%d %H:%M"))
    assert days == ["03-29 03:00", "03-30 02:30", "03-31 02:30"]  # (that day: when it resumes)


def test_due_fires_the_tick_that_came_and_catches_up_as_asked() -> None:
    s = Schedule(every=60)
    assert due(s, None, 1000, "all") == ([], 1000)  # never fired: starts from now
    assert due(s, 1020, 1070, "one") == ([], 1020)  # no tick yet
    assert due(s, 1020, 1085, "one") == ([1080], 1080)
    missed = (1020, 1330)  # the ticks of 1080 .. 1320 were missed
    assert due(s, *missed, "all") == ([1080, 1140, 1200, 1260, 1320], 1320)
    assert due(s, *missed, "one") == ([1320], 1320)
    assert due(s, *missed, "none") == ([], 1320)
    fired, last = due(s, 0, 60 * (MAX_CATCH_UP + 50), "all")
    assert len(fired) == MAX_CATCH_UP and last == fired[-1]  # the newest, bounded


async def test_state_is_kept_by_every_store_in_its_space(factory: Factory) -> None:  # noqa: F811
    async with factory() as storage:
        await storage.keep("triggers", {"daily": b'{"lastTick":1.0}', "hourly": b"{}"})
        await storage.keep("triggers", {"daily": b'{"lastTick":2.0}'})
        await storage.keep("outbox", {"d:1": b"x", "d:2": b"y"})
        await storage.keep("outbox", {"d:3": b"z"}, delete=["d:1", "d:9"])
        assert await storage.load_kept("triggers") == {
            "daily": b'{"lastTick":2.0}',
            "hourly": b"{}",
        }
        assert await storage.load_kept("outbox") == {"d:2": b"y", "d:3": b"z"}
        assert await storage.load_kept("nothing") == {}
