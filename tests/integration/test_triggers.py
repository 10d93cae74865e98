"""Triggers (docs/triggers.md): runs that start themselves on a schedule, on trio's
clock (autojump) with a wall clock that follows it — `every` with `skip` and `enqueue`
overlap, `cron` in a time zone, catch-up after a restart (none, one, all) from the
state kept in the store, and the `triggers` op on a real server."""

from __future__ import annotations

import os
import re
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing
import yaml
from websockets.trio.client import connect

from orchestrator.config import ServerConfig, load_config
from orchestrator.runs.host import RunHost
from orchestrator.runs.triggers import Triggers
from orchestrator.runtime.engine import Orchestrator
from orchestrator.storage.journal import Journal
from orchestrator.storage.memory import MemoryStorage
from tests.helpers import REPO, write_config
from tests.server_helpers import demo_config, read_until_end, request, running_server

BASE = datetime(2026, 11, 28, 9, 58, 30, tzinfo=UTC).timestamp()
"""The wall clock at trio's time 0."""


def slow(seconds: float) -> dict[str, Any]:
    return {
        "description": "takes its time",
        "instructions": "work",
        "script": {"turns": [{"sleep": seconds, "say": "done at {input}"}]},
    }


def config_for(tmp_path: Path, triggers: dict[str, Any], run_seconds: float = 0.0) -> ServerConfig:
    config = write_config(tmp_path, {"worker": slow(run_seconds)})
    data = {**config.model_dump(exclude={"base_dir"}), "triggers": triggers}
    return ServerConfig.model_validate({**data, "base_dir": tmp_path})


@asynccontextmanager
async def running(
    config: ServerConfig, storage: Any, offset: float = 0.0
) -> AsyncIterator[tuple[Triggers, Journal]]:
    """The config's triggers firing on `storage`, the wall clock at BASE + offset + trio's."""
    async with (
        Journal.open(storage) as journal,
        Orchestrator.open(config) as orch,
        trio.open_nursery() as nursery,
    ):
        host = RunHost(orch, journal, nursery)
        triggers = Triggers(
            config.triggers, host, journal, now=lambda: BASE + offset + trio.current_time()
        )
        await nursery.start(triggers.run)
        yield triggers, journal
        nursery.cancel_scope.cancel()


def started(journal: Journal) -> list[str]:
    return [r.input for r in sorted(journal.records(), key=lambda r: r.created_at)]


async def test_every_second_with_skip_and_enqueue(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    """Runs take 2.5 s: `skip` starts one at ticks 1, 4, 7, 10 (the others find the last
    still running); `enqueue` starts one at every tick, each after the one before."""
    everything = {
        "skipper": {"agent": "worker", "input": "{scheduled_for}", "every": "1s"},
        "queuer": {"agent": "worker", "input": "q", "every": 1, "overlap": "enqueue"},
    }
    config = config_for(tmp_path, everything, run_seconds=2.5)
    async with MemoryStorage.open() as storage, running(config, storage) as (triggers, journal):
        await trio.sleep(2.5)  # the tick at 2 s found the run of 1 s still running
        skipped = triggers.states["skipper"].last_outcome
        await trio.sleep(8)
        records = journal.records()
    fired = sorted(r.created_at for r in records if r.input != "q")
    assert len(fired) == 4, fired
    assert skipped is not None and skipped.startswith("skipped: run ")
    queued = [r for r in records if r.input == "q"]
    assert len(queued) == 10
    assert {r.thread_id for r in queued} == {"trigger-queuer"}


async def test_a_triggers_thread_remembers_its_last_run(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    config = config_for(
        tmp_path, {"daily": {"agent": "worker", "input": "again", "every": 1, "thread": "t1"}}
    )
    async with MemoryStorage.open() as storage, running(config, storage) as (_, journal):
        await trio.sleep(3.5)
        records = sorted(journal.records(), key=lambda r: r.created_at)
    assert len(records) == 3 and {r.thread_id for r in records} == {"t1"}
    assert [r.previous_run_id for r in records] == [None, records[0].run_id, records[1].run_id]


async def test_a_cron_schedule_in_a_time_zone(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    cron = {
        "agent": "worker",
        "input": "{name} for {scheduled_for}",
        "cron": "*/5 * * * *",
        "timezone": "Asia/Kolkata",
    }
    config = config_for(tmp_path, {"five": cron})
    async with MemoryStorage.open() as storage, running(config, storage) as (triggers, journal):
        await trio.sleep(16 * 60)
        listed = triggers.listed()
        inputs = started(journal)
    # Trio's 0 is 09:58:30 UTC, 15:28:30 in Kolkata (+05:30): ticks at :30, :35, :40.
    assert inputs == [
        "five for 2026-11-28T15:30:00+05:30",
        "five for 2026-11-28T15:35:00+05:30",
        "five for 2026-11-28T15:40:00+05:30",
    ]
    (info,) = listed
    assert info.schedule == "cron */5 * * * * Asia/Kolkata" and info.last_outcome == "started"
    assert info.next_at == datetime(2026, 11, 28, 10, 15, tzinfo=UTC).timestamp()


@pytest.mark.parametrize(("catch_up", "fired"), [("none", 0), ("one", 1), ("all", 5)])
async def test_ticks_missed_while_down_are_caught_up_as_configured(
    tmp_path: Path, autojump_clock: trio.testing.MockClock, catch_up: str, fired: int
) -> None:
    """Every 60 s; the server is down for 5 ticks (and more than a minute): the next
    start fires none, the last, or each of them, from the state the store kept (one
    store for both lives: its triggers' state is what a restart reads)."""
    trigger = {
        "agent": "worker",
        "input": "{scheduled_for}",
        "every": 60,
        "catch_up": catch_up,
        "overlap": "allow",  # (each caught-up tick starts a run, the one before or not)
    }
    config = config_for(tmp_path, {"minutely": trigger})
    storage = MemoryStorage()
    async with running(config, storage) as (_, journal):
        await trio.sleep(61)  # Trio's 0 is 30 s past a minute: the tick at 30 s fired
        assert started(journal) == ["2026-11-28T09:59:00+00:00"]
    # 5 minutes later: the ticks of 10:00 .. 10:04 were missed; it is 10:04:10 now.
    async with running(config, storage, offset=340 - trio.current_time()) as (_, journal):
        await trio.sleep(1)
        inputs = started(journal)
    assert len(inputs) == fired, inputs
    if fired:
        assert inputs[-1] == "2026-11-28T10:04:00+00:00"


async def test_the_triggers_op_lists_fires_pauses_and_resumes(tmp_path: Path) -> None:
    tokens = [
        {"name": "ops", "token": "ops-secret", "role": "admin"},
        {"name": "ann", "token": "ann-secret", "role": "user"},
    ]
    demo_config(tmp_path, server={"tokens": tokens})
    path = tmp_path / "server.yaml"
    data = yaml.safe_load(path.read_text())
    data["triggers"] = {"daily": {"agent": "planner", "input": "daily report", "cron": "0 3 * * *"}}
    path.write_text(yaml.safe_dump(data))
    admin = {"Authorization": "Bearer ops-secret"}
    async with running_server(load_config(path)) as server:
        async with connect(server.url, additional_headers=admin) as ws:
            (listed,) = (await request(ws, op="triggers", id=1))["triggers"]
            assert listed["name"] == "daily" and listed["nextAt"] > 0
            fired = await request(ws, op="triggers", id=2, action="fire", name="daily")
            (after,) = fired["triggers"]
            assert after["lastOutcome"] == "started"
            sub = await request(ws, op="subscribe", id=3, runId=after["lastRun"])
            events, _ = await read_until_end(ws, sub["sub"])
            assert events[0]["data"]["trigger"]["name"] == "daily"
            paused = await request(ws, op="triggers", id=4, action="pause", name="daily")
            assert paused["triggers"][0]["paused"] and paused["triggers"][0]["nextAt"] is None
            resumed = await request(ws, op="triggers", id=5, action="resume", name="daily")
            assert not resumed["triggers"][0].get("paused") and resumed["triggers"][0]["nextAt"]
            unknown = await request(ws, op="triggers", id=6, action="fire", name="nope")
            assert unknown["code"] == "not_found" and "no trigger 'nope'" in unknown["message"]
        cli = [sys.executable, "-m", "orchestrator", "triggers", "--url", server.url]
        done = await trio.run_process(
            [*cli, "--token", "ops-secret", "--pause", "daily"],
            capture_stdout=True,
            capture_stderr=True,
            env={**os.environ, "PYTHONPATH": str(REPO)},
        )
        shown = done.stdout.decode().splitlines()
        assert shown[0].split() == [
            "daily",
            "planner",
            "cron",
            "0",
            "3",
            "*",
            "*",
            "*",
            "UTC",
            "paused",
        ]
        assert shown[1].startswith("    last ") and ": started run-" in shown[1]
        assert shown[1].split(":")[2].endswith(" UTC")  # (times say their zone: 18)
        done = await trio.run_process(
            [*cli, "--token", "ops-secret", "--resume", "daily"],
            capture_stdout=True,
            capture_stderr=True,
            env={**os.environ, "PYTHONPATH": str(REPO)},
        )
        line = done.stdout.decode().splitlines()[0]
        assert re.search(r"next \d{4}-\d\d-\d\d 03:00:00 UTC$", line), line
        async with connect(
            server.url, additional_headers={"Authorization": "Bearer ann-secret"}
        ) as ws:
            refused = await request(ws, op="triggers", id=7, action="fire", name="daily")
            assert refused["code"] == "unauthorized"
