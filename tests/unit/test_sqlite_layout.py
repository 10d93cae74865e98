"""The SQLite journal's layout: events in a rowid table with a (run number, seq)
index, written many rows per statement; files of the older layouts (`run_id` in the
events table, in a WITHOUT ROWID table before that) are converted when opened, and
nothing in them is lost."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import msgspec
import pytest
import trio

from orchestrator.storage.base import RunRecord
from orchestrator.storage.sqlite import SqliteStorage
from tests.helpers import eventually

pytestmark = pytest.mark.trio

RUNS = """
CREATE TABLE runs (
    run_id TEXT PRIMARY KEY, agent_id TEXT NOT NULL, input TEXT NOT NULL,
    status TEXT NOT NULL, created_at REAL NOT NULL, finished_at REAL,
    root_session_id TEXT NOT NULL, last_seq INTEGER NOT NULL, owner TEXT,
    first_seq INTEGER NOT NULL DEFAULT 1
);
"""
WITHOUT_ROWID = """
CREATE TABLE events (
    run_id TEXT NOT NULL, seq INTEGER NOT NULL, body BLOB NOT NULL,
    PRIMARY KEY (run_id, seq)
) WITHOUT ROWID;
"""
BY_RUN_ID = """
CREATE TABLE events (run_id TEXT NOT NULL, seq INTEGER NOT NULL, body BLOB NOT NULL);
CREATE UNIQUE INDEX events_by_run ON events (run_id, seq);
"""


def record(run_id: str, status: str = "running", last_seq: int = 0) -> RunRecord:
    return RunRecord(
        run_id=run_id,
        agent_id="a",
        input="i",
        status=status,
        created_at=1.0,
        root_session_id="r",
        last_seq=last_seq,
    )


@pytest.mark.parametrize("events_table", [WITHOUT_ROWID, BY_RUN_ID], ids=["oldest", "older"])
async def test_an_older_file_is_converted_when_opened(tmp_path: Path, events_table: str) -> None:
    path = tmp_path / "old.db"
    conn = sqlite3.connect(path)
    conn.executescript(RUNS + events_table)
    conn.execute(
        "INSERT INTO runs VALUES ('run-1', 'a', 'i', 'running', 1.0, NULL, 'r', 2, NULL, 1)"
    )
    conn.executemany(
        "INSERT INTO events VALUES (?, ?, ?)",
        [("run-1", s, b"e%d" % s) for s in (1, 2, 3)] + [("run-2", 1, b"f1")],
    )
    conn.commit()
    conn.close()
    async with SqliteStorage.open(path) as storage:
        (loaded,) = await storage.load()
        assert loaded.last_seq == 3  # a running run's last seq: read from its events
        assert await storage.read("run-1", 0, 10) == [b"e1", b"e2", b"e3"]
        assert await storage.read("run-2", 0, 10) == [b"f1"]  # events without a record
        await storage.write([], [("run-1", 4, b"e4"), ("run-3", 1, b"g1")])
        assert await storage.read("run-1", 2, 10) == [b"e3", b"e4"]
    async with SqliteStorage.open(path) as storage:  # and again: nothing to convert
        assert await storage.read("run-3", 0, 10) == [b"g1"]
        assert await storage.read("run-1", 3, 10) == [b"e4"]
    conn = sqlite3.connect(path)
    columns = [r[1] for r in conn.execute("PRAGMA table_info(events)")]
    (sql,) = conn.execute("SELECT sql FROM sqlite_master WHERE name = 'events'").fetchone()
    conn.close()
    assert columns == ["run", "seq", "body", "first"] and "WITHOUT ROWID" not in sql.upper()


async def test_a_failed_write_keeps_no_run_number(tmp_path: Path) -> None:
    """A batch that rolls back must not leave its new runs' numbers behind: the next
    write would put their events under a number no file row maps to a run."""
    async with SqliteStorage.open(tmp_path / "j.db") as storage:
        await storage.write([], [("run-1", 1, b"a")])
        with pytest.raises(sqlite3.IntegrityError):  # run-2 is new, then run-1's seq 1 again
            await storage.write([], [("run-2", 1, b"b"), ("run-1", 1, b"again")])
        await storage.write([], [("run-2", 1, b"b")])
        assert await storage.read("run-2", 0, 10) == [b"b"]
    async with SqliteStorage.open(tmp_path / "j.db") as storage:
        assert await storage.read("run-2", 0, 10) == [b"b"]
        assert await storage.read("run-1", 0, 10) == [b"a"]


async def test_many_rows_and_records_only_when_their_status_changes(tmp_path: Path) -> None:
    async with SqliteStorage.open(tmp_path / "j.db") as storage:
        rows = [(f"run-{r}", s, b"x%d" % s) for s in range(1, 301) for r in range(3)]
        records = [record(f"run-{r}", last_seq=300) for r in range(3)]
        await storage.write(records, rows)  # 900 rows: four statements of up to 256
        assert len(await storage.read("run-2", 0, 1000)) == 300
        await storage.write([record("run-0", last_seq=301)], [("run-0", 301, b"y")])
        await storage.write([record("run-1", "completed", 300)], [])
        with pytest.raises(sqlite3.IntegrityError):  # (run, seq) stays unique
            await storage.write([], [("run-0", 301, b"again")])
        loaded = {r.run_id: r for r in await storage.load()}
    assert loaded["run-0"].last_seq == 301 and loaded["run-0"].status == "running"
    assert loaded["run-1"].status == "completed" and loaded["run-1"].last_seq == 300


async def test_a_runs_attempt_is_kept_while_its_status_stays_running(tmp_path: Path) -> None:
    """A run resumed after a restart stays `running` with a new attempt: that record is
    written too, so the restart bound (`MAX_RESTARTS`) counts every restart (issue 31:
    without it every resume was attempt 2, and a run could be resumed for ever)."""
    path = tmp_path / "j.db"
    async with SqliteStorage.open(path) as storage:
        await storage.write([record("run-1")], [("run-1", 1, b"a")])
        for attempt in (2, 3):
            resumed = msgspec.structs.replace(record("run-1"), attempt=attempt)
            await storage.write([resumed], [])
    async with SqliteStorage.open(path) as storage:
        (loaded,) = await storage.load()
    assert (loaded.status, loaded.attempt, loaded.last_seq) == ("running", 3, 1)
    # An older file (no `attempt` column) gets one, at 0.
    conn = sqlite3.connect(tmp_path / "old.db")
    conn.executescript(RUNS + BY_RUN_ID)
    conn.execute(
        "INSERT INTO runs VALUES ('run-1', 'a', 'i', 'running', 1.0, NULL, 'r', 0, NULL, 1)"
    )
    conn.commit()
    conn.close()
    async with SqliteStorage.open(tmp_path / "old.db") as storage:
        (loaded,) = await storage.load()
    assert loaded.attempt == 0
    assert loaded.context_id is None  # nor a `context_id` one: added, empty


async def test_a_runs_context_is_kept(tmp_path: Path) -> None:
    """An A2A message's `contextId` stays with its run across a restart (issue 33:
    GetTask and CancelTask reported the runId as the context)."""
    path = tmp_path / "j.db"
    async with SqliteStorage.open(path) as storage:
        given = msgspec.structs.replace(record("run-1"), context_id="ctx-42")
        await storage.write([given, record("run-2")], [("run-1", 1, b"a")])
    async with SqliteStorage.open(path) as storage:
        loaded = {r.run_id: r.context_id for r in await storage.load()}
    assert loaded == {"run-1": "ctx-42", "run-2": None}


async def test_a_runs_consecutive_events_are_one_row_read_from_any_seq(tmp_path: Path) -> None:
    """A commit writes one row per run for its consecutive events (a pack): reads may
    start and stop inside one, retention may cut into one, and rows of one event
    (older files, an encoding with a newline) are read as they are."""
    path = tmp_path / "j.db"
    conn = sqlite3.connect(path)  # a file of the layout before packs: no `first`
    conn.executescript(
        RUNS
        + "CREATE TABLE run_nums (num INTEGER PRIMARY KEY, run_id TEXT NOT NULL UNIQUE);"
        + "CREATE TABLE events (run INTEGER NOT NULL, seq INTEGER NOT NULL, body BLOB NOT NULL);"
        + "CREATE UNIQUE INDEX events_by_run ON events (run, seq);"
        + "INSERT INTO run_nums VALUES (1, 'run-1');"
        + "INSERT INTO events VALUES (1, 1, CAST('e1' AS BLOB)), (1, 2, CAST('e2' AS BLOB));"
    )
    conn.close()
    events = [b"e%d" % s for s in range(1, 201)]
    async with SqliteStorage.open(path) as storage:
        batch = [("run-1", s, events[s - 1]) for s in range(3, 151)]
        batch += [("run-2", 1, b"f1"), ("run-2", 2, b"f\n2"), ("run-2", 3, b"f3")]
        batch += [("run-1", s, events[s - 1]) for s in range(151, 201)]
        await storage.write([], batch)
        for after in (0, 1, 2, 3, 63, 66, 67, 150, 199, 200):
            for limit in (1, 5, 64, 1000):
                got = await storage.read("run-1", after, limit)
                assert got == events[after : after + limit], (after, limit)
        assert await storage.read("run-2", 0, 10) == [b"f1", b"f\n2", b"f3"]
        assert await storage.read("run-2", 1, 10) == [b"f\n2", b"f3"]
        await storage.trim("run-1", 100)  # inside the pack of 67..130
        assert await storage.read("run-1", 0, 1000) == events[99:]
        assert await storage.read("run-1", 120, 3) == events[120:123]
        await storage.trim("run-1", 130)  # that pack's last event alone is left
        assert await storage.read("run-1", 0, 2) == events[129:131]
    conn = sqlite3.connect(path)
    rows = conn.execute("SELECT seq, first FROM events WHERE run = 1 ORDER BY seq").fetchall()
    conn.close()
    assert rows == [(130, None), (150, 131), (200, 151)]


async def test_the_wal_is_checkpointed_beside_the_writer_not_in_its_commits(
    tmp_path: Path,
) -> None:
    """While a journal is open its store's upkeep copies the WAL into the database
    file every half second; the writer's commits no longer do it (a commit that did
    took 15-20 ms instead of 2). A store opened without upkeep (a tool) keeps
    SQLite's own checkpoints."""
    path = tmp_path / "j.db"
    async with SqliteStorage.open(path) as storage:
        writer = storage._writer
        assert writer is not None
        assert writer.execute("PRAGMA wal_autocheckpoint").fetchone()[0] == 1000
        async with trio.open_nursery() as nursery:
            nursery.start_soon(storage.upkeep)
            rows = [("run-1", s, b"x" * 500) for s in range(1, 2001)]
            await storage.write([], rows)
            size = path.stat().st_size
            await eventually(lambda: path.stat().st_size > size)  # the events reach the file
            assert writer.execute("PRAGMA wal_autocheckpoint").fetchone()[0] == 0
            nursery.cancel_scope.cancel()
        assert len(await storage.read("run-1", 0, 5000)) == 2000


async def test_a_file_from_before_blobs_and_kept_state_gets_their_tables(tmp_path: Path) -> None:
    """A bug: the tables added after the first layout were only made in a new file, so a
    file written before attachments could not keep one."""
    path = tmp_path / "old.db"
    conn = sqlite3.connect(path)
    conn.executescript(RUNS + BY_RUN_ID)
    conn.commit()
    conn.close()
    async with SqliteStorage.open(path) as storage:
        await storage.put_blobs("run-1", {"k": b"bytes"})
        assert await storage.get_blobs(["k"]) == {"k": b"bytes"}
        await storage.keep("outbox", {"a": b"1"})
        assert await storage.load_kept("outbox") == {"a": b"1"}


async def test_triggers_kept_in_their_own_table_move_to_the_kept_state(tmp_path: Path) -> None:
    path = tmp_path / "t.db"
    async with SqliteStorage.open(path):
        pass
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE triggers (name TEXT PRIMARY KEY, state BLOB NOT NULL)")
    conn.execute("INSERT INTO triggers VALUES ('daily', x'7b7d')")
    conn.commit()
    conn.close()
    async with SqliteStorage.open(path) as storage:
        assert await storage.load_kept("triggers") == {"daily": b"{}"}
    async with SqliteStorage.open(path) as storage:  # moved once; the old table is gone
        assert await storage.load_kept("triggers") == {"daily": b"{}"}
