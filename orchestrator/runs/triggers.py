"""Runs that start themselves: the server config's `triggers:`, fired on their schedules.

One task sleeps until the next tick of any trigger, then fires what is due
(`core/schedule.py` decides, from the tick each trigger last fired, which ticks are
due and how missed ones are caught up). Firing starts a run as the `run` op would —
with `trigger: {name, scheduledFor}` in its RUN_STARTED, in the trigger's thread if it
has one — unless its last run still runs and its `overlap` says `skip`. What each
trigger last did is kept in the journal's store (`keep`), so a restart goes
on from there. A person lists, pauses, resumes and fires them (`triggers` op,
`orchestrator triggers`; docs/triggers.md).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from datetime import UTC, datetime
from zoneinfo import ZoneInfo

import msgspec
import trio

from orchestrator.config import TriggerConfig
from orchestrator.core.schedule import Schedule, TriggerInfo, due
from orchestrator.core.threads import Multitask, ThreadAsk
from orchestrator.runs.service import RunService
from orchestrator.storage.base import RunOptions
from orchestrator.storage.journal import Journal
from orchestrator.storage.runlog import UNFINISHED, UnknownRun

__all__ = ["TriggerState", "Triggers"]

logger = logging.getLogger(__name__)
SPACE = "triggers"
"""Where their states are kept in the journal's store: `<name>` what it last did,
`paused:<name>` while it is paused (a key of its own: whoever fires never overwrites
a pause another gateway made)."""
PAUSED = "paused:"
Claim = Callable[[str, float], Awaitable[bool]]
"""May this process fire tick `t` of trigger `name`? (a cluster's lease)"""


class TriggerState(msgspec.Struct, kw_only=True, omit_defaults=True, rename="camel"):
    """What a trigger last did, kept across restarts."""

    last_tick: float | None = None
    """The last tick it fired (or skipped, or caught up past)."""
    paused: bool = False
    last_fired_at: float | None = None
    """When it last started (or skipped) a run, wall-clock."""
    last_run: str | None = None
    """The runId of its last run."""
    last_outcome: str | None = None
    """`started`, `skipped: …` or `failed: …`."""


class Triggers:
    """The triggers of one server.

    Args:
        configs: the server config's `triggers`.
        runs: starts their runs.
        journal: says whether a trigger's last run still runs; its store keeps each
            trigger's state.
        now: the wall clock (a test gives one that follows trio's clock).
        shared: the store is a cluster's, shared by its gateways: what a person does
            reads the states there first (another gateway may hold them newer).
    """

    def __init__(
        self,
        configs: Mapping[str, TriggerConfig],
        runs: RunService,
        journal: Journal,
        now: Callable[[], float] = time.time,
        *,
        shared: bool = False,
    ) -> None:
        self.configs = dict(configs)
        self._schedules: dict[str, Schedule] = {n: c.schedule() for n, c in configs.items()}
        self._runs = runs
        self._journal = journal
        self._storage = journal.storage
        self._now = now
        self.states: dict[str, TriggerState] = {name: TriggerState() for name in configs}
        self._wake = trio.Event()
        self._claim: Claim | None = None
        self._shared = shared

    async def run(
        self,
        *,
        claim: Claim | None = None,
        poll: float | None = None,
        task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        """Fire the triggers on their schedules until cancelled.

        Args:
            claim: asked before each tick is fired (a cluster's lease: the holder may,
                once); None: this process alone fires them.
            poll: the states are read again from the store at least this often (in a
                cluster another gateway may pause, resume or fire one).
            task_status: told once the triggers are armed.
        """
        self._claim = claim
        await self.refresh()
        task_status.started()
        await self._fire_due(starting=True)  # what was missed while the server was down
        while True:
            wait = self._next_wake() - self._now()
            if poll is not None:
                wait = min(wait, poll)
            with trio.move_on_after(max(0.0, wait)):
                await self._wake.wait()  # (a person's pause, resume or fire wakes it)
            self._wake = trio.Event()  # (before firing: an act meanwhile wakes the next wait)
            if poll is not None:
                await self.refresh()
            await self._fire_due()

    async def refresh(self) -> None:
        """Read every trigger's state from the store (a cluster's gateways share it)."""
        kept = await self._storage.load_kept(SPACE)
        for name in self.configs:
            raw = kept.get(name)
            read = msgspec.json.decode(raw, type=TriggerState) if raw else TriggerState()
            read.paused = read.paused or f"{PAUSED}{name}" in kept  # (a state from before
            state = self.states[name]  # the pause flag: paused inside it)
            for field in msgspec.structs.fields(TriggerState):  # (in place: a fire under
                setattr(state, field.name, getattr(read, field.name))  # way keeps it)

    def _next_wake(self) -> float:
        ticks = [
            self._schedules[name].next_after(state.last_tick or self._now())
            for name, state in self.states.items()
            if not state.paused
        ]
        return min(ticks, default=self._now() + 3600.0)

    async def _fire_due(self, *, starting: bool = False) -> None:
        now = self._now()
        for name, state in self.states.items():
            if state.paused:
                continue
            catch_up = self.configs[name].catch_up if starting else "one"
            ticks, last = due(self._schedules[name], state.last_tick, now, catch_up)
            changed = last != state.last_tick
            state.last_tick = last
            for tick in ticks:
                await self._fire(name, tick)
            if changed and not ticks:
                await self._save(name)

    async def _fire(self, name: str, tick: float, *, claimed: bool = False) -> None:
        """Start the trigger's run for `tick`, or skip it (its last run still runs; in a
        cluster, the tick was claimed by another gateway, or the lease is lost)."""
        config, state = self.configs[name], self.states[name]
        if self._claim is not None and not claimed and not await self._claim(name, tick):
            return
        state.last_fired_at = self._now()
        if config.overlap == "skip" and state.last_run and await self._running(state.last_run):
            state.last_outcome = f"skipped: run {state.last_run} still runs"
            await self._save(name)
            return
        scheduled = _iso(tick, config.timezone)
        task = config.input.replace("{name}", name).replace("{scheduled_for}", scheduled)
        thread_id = config.thread or (f"trigger-{name}" if config.overlap == "enqueue" else None)
        thread = None
        if thread_id is not None:
            multitask: Multitask = "enqueue" if config.overlap == "enqueue" else "reject"
            thread = ThreadAsk(thread_id=thread_id, multitask=multitask)
        options = RunOptions(trigger={"name": name, "scheduledFor": scheduled})
        try:
            started = await self._runs.start(config.agent, task, thread=thread, options=options)
        except Exception as exc:  # (a refused start is this trigger's outcome, not a crash)
            state.last_outcome = f"failed: {type(exc).__name__}: {exc}"
            logger.warning("trigger %s: the run for %s was not started: %s", name, scheduled, exc)
        else:
            state.last_run, state.last_outcome = started.run_id, "started"
        await self._save(name)

    async def _running(self, run_id: str) -> bool:
        lookup = self._journal.mirrors.lookup
        if self._shared and lookup is not None:  # (it may run anywhere in the cluster)
            record = await lookup(run_id)
            return record is not None and record.status in UNFINISHED
        try:
            return self._journal.get(run_id).record.status in UNFINISHED
        except UnknownRun:  # (retention removed it: it ended)
            return False

    async def _save(self, name: str) -> None:
        state = msgspec.structs.replace(self.states[name], paused=False)  # (its own key)
        try:
            await self._storage.keep(SPACE, {name: msgspec.json.encode(state)})
        except Exception:  # (the next change writes it again)
            logger.exception("trigger %s: its state was not stored", name)

    # -- what a person does -----------------------------------------------------------

    @property
    def shared(self) -> bool:
        """The states live in a cluster's store (read them again before listing)."""
        return self._shared

    def listed(self) -> list[TriggerInfo]:
        """Every trigger, with its next and last fire times and last outcome."""
        now = self._now()
        out = []
        for name, config in self.configs.items():
            state, schedule = self.states[name], self._schedules[name]
            shown = (
                f"cron {config.cron} {config.timezone}"
                if config.cron
                else f"every {schedule.every:g} s"
            )
            out.append(
                TriggerInfo(
                    name=name,
                    agent=config.agent,
                    schedule=shown,
                    timezone=config.timezone,
                    next_at=None if state.paused else schedule.next_after(state.last_tick or now),
                    paused=state.paused,
                    last_fired_at=state.last_fired_at,
                    last_run=state.last_run,
                    last_outcome=state.last_outcome,
                )
            )
        return out

    async def act(self, action: str, name: str) -> None:
        """`pause`, `resume` or `fire` (now) the trigger `name`.

        Raises:
            LookupError: no such trigger.
        """
        state = self.states.get(name)
        if state is None:
            raise LookupError(
                f"no trigger {name!r} (triggers: {', '.join(self.configs) or 'none'})"
            )
        if self._shared:
            await self.refresh()
            state = self.states[name]
        if action == "fire":
            await self._fire(name, self._now(), claimed=True)  # (a person's: not a tick)
        elif action == "pause":
            state.paused = True
            await self._storage.keep(SPACE, {f"{PAUSED}{name}": b"1"})
        else:
            state.paused = False
            state.last_tick = self._now()  # ticks missed while paused are not caught up
            kept = msgspec.json.encode(msgspec.structs.replace(state, paused=False))
            await self._storage.keep(SPACE, {name: kept}, [f"{PAUSED}{name}"])
        self._wake.set()


def _iso(tick: float, timezone: str) -> str:
    """A tick as ISO 8601 in the trigger's time zone."""
    return datetime.fromtimestamp(tick, UTC).astimezone(ZoneInfo(timezone)).isoformat()
