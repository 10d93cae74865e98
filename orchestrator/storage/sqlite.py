"""`sqlite:///PATH`: the embedded default. WAL mode, batched writes, all off the trio thread.

One connection writes (one transaction per batch), one reads; each is used by one
worker thread at a time (a CapacityLimiter of 1), so sqlite3's threading rules hold.
A failed write (a full disk, a locked file) rolls back and raises; the journal keeps
the batch and retries it.
"""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import trio

from orchestrator.storage.base import RunRecord, StorageError

__all__ = ["SqliteStorage"]

_SCHEMA = """
CREATE TABLE IF NOT EXISTS runs (
    run_id TEXT PRIMARY KEY,
    agent_id TEXT NOT NULL,
    input TEXT NOT NULL,
    status TEXT NOT NULL,
    created_at REAL NOT NULL,
    finished_at REAL,
    root_session_id TEXT NOT NULL,
    last_seq INTEGER NOT NULL,
    owner TEXT,
    first_seq INTEGER NOT NULL DEFAULT 1
);
CREATE TABLE IF NOT EXISTS events (
    run_id TEXT NOT NULL,
    seq INTEGER NOT NULL,
    body BLOB NOT NULL,
    PRIMARY KEY (run_id, seq)
) WITHOUT ROWID;
"""
# Columns added after the first release: added in place to older files.
_ADDED_COLUMNS = {"owner": "TEXT", "first_seq": "INTEGER NOT NULL DEFAULT 1"}
_COLUMNS = (
    "run_id, agent_id, input, status, created_at, finished_at, root_session_id, last_seq,"
    " owner, first_seq"
)


class SqliteStorage:
    """Run records and events in one SQLite file."""

    durable = True

    def __init__(self, path: Path) -> None:
        self.path = path
        self._writer: sqlite3.Connection | None = None
        self._reader: sqlite3.Connection | None = None
        self._write_limiter = trio.CapacityLimiter(1)
        self._read_limiter = trio.CapacityLimiter(1)

    def _connect(self) -> sqlite3.Connection:
        conn = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
        conn.execute("PRAGMA busy_timeout=5000")
        mode = conn.execute("PRAGMA journal_mode").fetchone()[0]
        if mode != "wal":  # switching needs a write: skip it when already set (full disk)
            conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=NORMAL")
        return conn

    @classmethod
    @asynccontextmanager
    async def open(cls, path: Path) -> AsyncIterator[SqliteStorage]:
        """Create the file and schema if needed; the connections live for the block.

        Raises:
            StorageError: the file cannot be used (the message names it and why).
        """
        storage = cls(path)
        await trio.to_thread.run_sync(storage._open, limiter=storage._write_limiter)
        try:
            yield storage
        finally:
            storage._close()  # directly: quick, and it must run even when cancelled

    def _open(self) -> None:
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._writer = self._connect()
            existing = {
                row[1] for row in self._writer.execute("PRAGMA table_info(runs)").fetchall()
            }
            if not existing:
                self._writer.executescript(_SCHEMA)
            for column, decl in _ADDED_COLUMNS.items():
                if existing and column not in existing:
                    self._writer.execute(f"ALTER TABLE runs ADD COLUMN {column} {decl}")
            self._reader = self._connect()
        except (OSError, sqlite3.Error) as exc:
            self._close()
            raise StorageError(f"sqlite storage {str(self.path)!r}: {exc}") from None

    def _load(self) -> list[RunRecord]:
        conn = self._writer
        assert conn is not None, "storage is not open"
        rows = conn.execute(f"SELECT {_COLUMNS} FROM runs ORDER BY created_at, run_id").fetchall()
        return [
            RunRecord(
                run_id=r[0],
                agent_id=r[1],
                input=r[2],
                status=r[3],
                created_at=r[4],
                finished_at=r[5],
                root_session_id=r[6],
                last_seq=r[7],
                owner=r[8],
                first_seq=r[9],
            )
            for r in rows
        ]

    async def load(self) -> list[RunRecord]:
        """Every run record, in creation order."""
        return await trio.to_thread.run_sync(self._load, limiter=self._write_limiter)

    def _transaction(self, statements: list[tuple[str, list[tuple[object, ...]]]]) -> None:
        conn = self._writer
        assert conn is not None, "storage is not open"
        conn.execute("BEGIN")
        try:
            for sql, rows in statements:
                if rows:
                    conn.executemany(sql, rows)
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise

    async def write(self, records: list[RunRecord], events: list[tuple[str, int, bytes]]) -> None:
        """One transaction for the whole batch, in a worker thread."""
        statements: list[tuple[str, list[tuple[object, ...]]]] = [
            ("INSERT INTO events (run_id, seq, body) VALUES (?, ?, ?)", list(events)),
            (
                f"INSERT INTO runs ({_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
                " ON CONFLICT(run_id) DO UPDATE SET status=excluded.status,"
                " finished_at=excluded.finished_at, last_seq=excluded.last_seq,"
                " first_seq=excluded.first_seq",
                [
                    (
                        r.run_id,
                        r.agent_id,
                        r.input,
                        r.status,
                        r.created_at,
                        r.finished_at,
                        r.root_session_id,
                        r.last_seq,
                        r.owner,
                        r.first_seq,
                    )
                    for r in records
                ],
            ),
        ]
        await trio.to_thread.run_sync(self._transaction, statements, limiter=self._write_limiter)

    def _read(self, run_id: str, after_seq: int, limit: int) -> list[bytes]:
        conn = self._reader
        assert conn is not None, "storage is not open"
        rows = conn.execute(
            "SELECT body FROM events WHERE run_id = ? AND seq > ? ORDER BY seq LIMIT ?",
            (run_id, after_seq, limit),
        ).fetchall()
        return [bytes(r[0]) for r in rows]

    async def read(self, run_id: str, after_seq: int, limit: int) -> list[bytes]:
        """Events after `after_seq`, from the read connection, in a worker thread."""
        return await trio.to_thread.run_sync(
            self._read, run_id, after_seq, limit, limiter=self._read_limiter
        )

    async def trim(self, run_id: str, first_seq: int) -> None:
        """Delete the run's events below `first_seq`."""
        statements: list[tuple[str, list[tuple[object, ...]]]] = [
            ("DELETE FROM events WHERE run_id = ? AND seq < ?", [(run_id, first_seq)]),
            ("UPDATE runs SET first_seq = ? WHERE run_id = ?", [(first_seq, run_id)]),
        ]
        await trio.to_thread.run_sync(self._transaction, statements, limiter=self._write_limiter)

    async def delete_runs(self, run_ids: list[str]) -> None:
        """Delete whole runs, records and events, in one transaction."""
        rows: list[tuple[object, ...]] = [(run_id,) for run_id in run_ids]
        statements: list[tuple[str, list[tuple[object, ...]]]] = [
            ("DELETE FROM events WHERE run_id = ?", rows),
            ("DELETE FROM runs WHERE run_id = ?", rows),
        ]
        await trio.to_thread.run_sync(self._transaction, statements, limiter=self._write_limiter)

    def _close(self) -> None:
        for conn in (self._reader, self._writer):
            if conn is not None:
                conn.close()
        self._reader = self._writer = None
