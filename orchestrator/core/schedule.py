"""When a trigger fires (pure): its schedule's ticks, and which of them are due.

A schedule is a 5-field `cron` expression in a time zone (`croniter` reads it: the
well-kept parser, daylight-saving days included) or a fixed interval (`every`),
whose ticks are the multiples of the interval since the epoch — the same ticks in
every process and after every restart. `due` decides, from the last tick fired and
the time now, which ticks fire: ticks missed while the server was down fire once
(`catch_up: one`, the default), each (`all`, at most `MAX_CATCH_UP`) or not at all
(`none`); while it runs, the tick that came fires (one, if a busy moment let several
pass).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import msgspec

__all__ = ["MAX_CATCH_UP", "CatchUp", "Schedule", "TriggerInfo", "due", "parse_duration"]

CatchUp = Literal["none", "one", "all"]
MAX_CATCH_UP = 100
"""Most missed ticks `catch_up: all` fires at once (the oldest are left out)."""
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)?\s*$")
_UNIT = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, None: 1.0}


def parse_duration(text: str | float) -> float:
    """Seconds of `30s`, `5m`, `1.5h`, `1d`, `250ms` or a bare number of seconds.

    Raises:
        ValueError: anything else, or not more than 0.
    """
    if isinstance(text, (int, float)):
        seconds = float(text)
    else:
        found = _DURATION.match(text)
        if found is None:
            raise ValueError(f"{text!r} is not a duration (30s, 5m, 1h, 1d, or seconds)")
        seconds = float(found.group(1)) * _UNIT[found.group(2)]
    if not seconds > 0 or not math.isfinite(seconds):
        raise ValueError(f"{text!r}: a duration is more than 0")
    return seconds


@dataclass(frozen=True)
class Schedule:
    """A trigger's ticks: `cron` (in `timezone`) or `every` seconds."""

    cron: str | None = None
    every: float | None = None
    timezone: str = "UTC"

    def __post_init__(self) -> None:
        from croniter import croniter

        if (self.cron is None) == (self.every is None):
            raise ValueError("give either cron or every")
        if self.cron is not None and (
            len(self.cron.split()) != 5 or not croniter.is_valid(self.cron)
        ):
            raise ValueError(f"cron {self.cron!r}: not a 5-field cron expression")
        try:
            ZoneInfo(self.timezone)
        except (ZoneInfoNotFoundError, ValueError):
            raise ValueError(f"timezone {self.timezone!r}: not a time zone") from None

    def next_after(self, t: float) -> float:
        """The first tick after `t` (epoch seconds)."""
        if self.every is not None:
            return (math.floor(t / self.every) + 1) * self.every
        from croniter import croniter

        assert self.cron is not None
        start = datetime.fromtimestamp(t, UTC).astimezone(ZoneInfo(self.timezone))
        after: datetime = croniter(self.cron, start).get_next(datetime)
        return after.timestamp()

    def ticks(self, after: float, upto: float, most: int) -> list[float]:
        """The ticks in (`after`, `upto`], the latest `most` of them."""
        if self.every is not None:
            first = math.floor(after / self.every) + 1
            last = math.floor(upto / self.every)
            return [n * self.every for n in range(max(first, last - most + 1), last + 1)]
        out: list[float] = []
        t = self.next_after(after)
        while t <= upto:
            out.append(t)
            if len(out) > most:
                out.pop(0)
            t = self.next_after(t)
        return out


def due(
    schedule: Schedule, last: float | None, now: float, catch_up: CatchUp
) -> tuple[list[float], float]:
    """The ticks to fire now, and the tick to remember as the last one fired.

    `last`: the last tick fired (None: the trigger never fired: it starts from now,
    with nothing to catch up). The ticks since follow `catch_up` (at a start after
    downtime, the trigger's; while running, `one`).
    """
    if last is None:
        return [], now
    missed = schedule.ticks(last, now, MAX_CATCH_UP)
    if not missed:
        return [], last
    if catch_up == "all":
        return missed, missed[-1]
    if catch_up == "one":
        return missed[-1:], missed[-1]
    return [], missed[-1]


class TriggerInfo(msgspec.Struct, kw_only=True, omit_defaults=True, rename="camel"):
    """One trigger as the `triggers` reply lists it."""

    name: str
    agent: str
    schedule: str
    """`cron 0 3 * * * Europe/Berlin` or `every 3600 s`."""
    timezone: str = "UTC"
    """The IANA time zone of its schedule: its times are shown in it."""
    next_at: float | None
    """When it fires next (None: paused)."""
    paused: bool = False
    last_fired_at: float | None = None
    last_run: str | None = None
    last_outcome: str | None = None
    """`started`, `skipped: …` or `failed: …`."""
