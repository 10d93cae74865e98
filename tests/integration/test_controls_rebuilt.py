"""A person's control that comes before its agent is rebuilt (issue 47).

A run goes on from its journal after a restart or a takeover; its children are made
again only when their parent reaches its spawn call. A `cancel` or `send` for one of
them that comes in between (a worker that takes a run over reads the run's control
stream as soon as the run starts) waits for it instead of being dropped, and a
message the journal already shows (USER_MESSAGE `control`) is not delivered twice.
In process, on SQLite, with the restart made by `suspend_all` (a SIGTERM), on an
autojump clock (held still while SQLite works in its thread).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import trio

from orchestrator.runs.host import RunHost
from orchestrator.runs.service import AgentNotRunning
from orchestrator.runtime.engine import Orchestrator
from orchestrator.storage.journal import Journal
from orchestrator.storage.sqlite import SqliteStorage
from tests.integration.test_restart_resume import check_story
from tests.memory_server import autojump
from tests.server_helpers import demo_config

pytestmark = autojump

WORDS = " ".join(f"w{i}" for i in range(80))
AGENTS: dict[str, dict[str, Any]] = {
    "pair": {
        "description": "Two slow children at once.",
        "instructions": "i",
        "tools": ["agent_spawn"],
        "script": {
            "turns": [
                {
                    "calls": [
                        {"name": "agent_spawn", "args": {"agent_id": "slow", "task": "one"}},
                        {"name": "agent_spawn", "args": {"agent_id": "slow", "task": "two"}},
                    ]
                },
                {"say": "pair: {results}"},
            ],
            "token_delay": 0.05,
        },
    },
    "slow": {
        "description": "Streams for a while.",
        "instructions": "i",
        "script": {"turns": [{"say": WORDS}], "token_delay": 0.05},
    },
}


@asynccontextmanager
async def server_life(tmp_path: Path) -> AsyncIterator[tuple[Journal, RunHost]]:
    """One life of a server on the test's SQLite journal (its runs resumable)."""
    config = demo_config(tmp_path, storage="sqlite:///journal.db", extra_agents=AGENTS)
    async with (
        SqliteStorage.open(tmp_path / "journal.db") as storage,
        Journal.open(storage, resume=True) as journal,
        Orchestrator.open(config) as orch,
        trio.open_nursery() as nursery,
    ):
        yield journal, RunHost(orch, journal, nursery)


async def events_of(journal: Journal, run_id: str) -> list[dict[str, Any]]:
    entries = await journal.read_all(run_id, 10**6)
    return [
        {
            "seq": e.event.seq,
            "type": str(e.event.type),
            "source": None
            if e.event.source is None
            else {"agentKey": e.event.source.agent_key, "agentId": e.event.source.agent_id},
            "data": dict(e.event.data),
        }
        for e in entries
    ]


async def until(journal: Journal, run_id: str, found: Any) -> list[dict[str, Any]]:
    """The run's journal once `found(events)` holds (within 20 s)."""
    with trio.fail_after(20):
        while True:
            await journal.flush_run(run_id)
            events = await events_of(journal, run_id)
            if found(events):
                return events
            await trio.sleep(0.05)


def children(events: list[dict[str, Any]]) -> list[str]:
    return [e["source"]["agentKey"] for e in events if e["type"] == "AGENT_STARTED"]


async def test_a_cancel_and_a_message_wait_for_their_agent_and_count_once(tmp_path: Path) -> None:
    async with server_life(tmp_path) as (journal, host):
        run_id = (await host.start("pair", "go")).run_id
        events = await until(
            journal, run_id, lambda ev: len(children(ev)) == 2 and ev[-1]["source"] is not None
        )
        await host.suspend_all()
        await journal.writer.flush()
    one, two = children(events)

    async with server_life(tmp_path) as (journal, host):
        assert await host.resume_left(journal.resumable) == 1
        run = host.active[run_id]
        assert one not in run.agents and two not in run.agents  # not made again yet
        await host.cancel(run_id, one, "enough")
        await host.send(run_id, two, "a note", control="1700000000000-0")
        await host.send(run_id, two, "a note", control="1700000000000-0")  # read again: once
        events = await until(
            journal, run_id, lambda ev: any(e["type"] == "USER_MESSAGE" for e in ev)
        )
        await host.suspend_all()  # before `two` ends: the next life goes on with it
        await journal.writer.flush()

    async with server_life(tmp_path) as (journal, host):
        assert await host.resume_left(journal.resumable) == 1
        # A new owner reads the control stream from the start again.
        await host.send(run_id, two, "a note", control="1700000000000-0")
        with pytest.raises(AgentNotRunning):
            await host.cancel(run_id, one, "enough")  # its end is journaled
        await journal.wait_finished(run_id)
        events = await events_of(journal, run_id)

    check_story(events)
    assert events[-1]["data"]["status"] == "completed"
    (ended,) = [
        e
        for e in events
        if e["source"]
        and e["source"]["agentKey"] == one
        and e["type"] in ("AGENT_RESULT", "AGENT_ERROR")
    ]
    assert ended["type"] == "AGENT_ERROR"
    assert ended["data"]["errorType"] == "cancelled"
    assert (ended["data"]["by"], ended["data"]["reason"]) == ("user", "enough")
    notes = [e for e in events if e["type"] == "USER_MESSAGE"]
    assert [(e["source"]["agentKey"], e["data"]) for e in notes] == [
        (two, {"text": "a note", "from": "client", "control": "1700000000000-0"})
    ]
    results = [e["data"] for e in events if e["type"] == "TOOL_RESULT" and e["source"] is None]
    assert sorted(r["isError"] for r in results) == [False, True]
    (failed,) = [r for r in results if r["isError"]]
    assert failed["content"] == "agent 'slow' was cancelled by the user: enough"
