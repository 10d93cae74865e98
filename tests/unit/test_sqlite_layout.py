"""The SQLite journal's layout: events in a rowid table with a (run_id, seq) index,
written many rows per statement; a file of the older layout (WITHOUT ROWID) is
converted when opened, and nothing in it is lost."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from orchestrator.storage.base import RunRecord
from orchestrator.storage.sqlite import SqliteStorage

pytestmark = pytest.mark.trio

OLD_SCHEMA = """
CREATE TABLE runs (
    run_id TEXT PRIMARY KEY, agent_id TEXT NOT NULL, input TEXT NOT NULL,
    status TEXT NOT NULL, created_at REAL NOT NULL, finished_at REAL,
    root_session_id TEXT NOT NULL, last_seq INTEGER NOT NULL, owner TEXT,
    first_seq INTEGER NOT NULL DEFAULT 1
);
CREATE TABLE events (
    run_id TEXT NOT NULL, seq INTEGER NOT NULL, body BLOB NOT NULL,
    PRIMARY KEY (run_id, seq)
) WITHOUT ROWID;
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


async def test_an_older_file_is_converted_when_opened(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    conn = sqlite3.connect(path)
    conn.executescript(OLD_SCHEMA)
    conn.execute(
        "INSERT INTO runs VALUES ('run-1', 'a', 'i', 'running', 1.0, NULL, 'r', 2, NULL, 1)"
    )
    conn.executemany(
        "INSERT INTO events VALUES (?, ?, ?)", [("run-1", s, b"e%d" % s) for s in (1, 2, 3)]
    )
    conn.commit()
    conn.close()
    async with SqliteStorage.open(path) as storage:
        (loaded,) = await storage.load()
        assert loaded.last_seq == 3  # a running run's last seq: read from its events
        assert await storage.read("run-1", 0, 10) == [b"e1", b"e2", b"e3"]
        await storage.write([], [("run-1", 4, b"e4")])
        assert await storage.read("run-1", 2, 10) == [b"e3", b"e4"]
    conn = sqlite3.connect(path)
    (sql,) = conn.execute("SELECT sql FROM sqlite_master WHERE name = 'events'").fetchone()
    conn.close()
    assert "WITHOUT ROWID" not in sql.upper()


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
