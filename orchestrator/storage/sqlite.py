"""`sqlite:///PATH`: the embedded default. WAL mode, batched writes, all off the trio thread.

One connection writes (one transaction per batch), one reads; each is used by one
worker thread at a time (a CapacityLimiter of 1), so sqlite3's threading rules hold.
A failed write (a full disk, a locked file) rolls back and raises; the journal keeps
the batch and retries it.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import sqlite3
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, TypeVar

import msgspec
import outcome
import trio

from orchestrator.storage import sqlite_extras
from orchestrator.storage.base import ForkPoint, RunOptions, RunRecord, StorageError

__all__ = ["SqliteStorage"]

logger = logging.getLogger(__name__)

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
    first_seq INTEGER NOT NULL DEFAULT 1,
    attempt INTEGER NOT NULL DEFAULT 0,
    context_id TEXT,
    forked_from TEXT,
    thread_id TEXT,
    previous_run_id TEXT,
    continues_agent TEXT,
    options TEXT
);
CREATE TABLE IF NOT EXISTS run_nums (num INTEGER PRIMARY KEY, run_id TEXT NOT NULL UNIQUE);
CREATE TABLE IF NOT EXISTS events (
    run INTEGER NOT NULL,
    seq INTEGER NOT NULL,
    body BLOB NOT NULL,
    first INTEGER
);
CREATE UNIQUE INDEX IF NOT EXISTS events_by_run ON events (run, seq);
"""
# A row is a pack: one run's consecutive events `first`..`seq` of one commit, their
# encodings joined by b"\n" (JSON never holds a raw newline), or one event alone
# (`first` NULL; every row of a file written before packs). At a model's pace each
# run writes a few events per commit; one row and one index entry for them instead
# of one each cuts what a commit costs by a third to two thirds (bench/sqlite_rows.py:
# 9.8 -> 3.3 µs an event at 8 a run per commit, 9.9 -> 6.2 at 4), and with it
# how long a live event waits for its commit. A pack is cut at `_PACK_EVENTS`
# events or `_PACK_BYTES`, so a read (which can start mid-pack) stays bounded.
_PACK_EVENTS = 64
_CHECKPOINT_EVERY = 0.5
_PACK_BYTES = 256 * 1024
# Events are a rowid table (rows appended in write order) with a (run, seq) index,
# `run` being the run's number in `run_nums`. The index is what a commit at a
# model's pace costs: each run writing a few events dirties its own leaf page of it,
# and a smaller key packs more runs' tails per page — 12–15 µs a row with the
# `runId` text in the index, 8–8.6 with the number (bench/sqlite_rows.py). Files
# made before keep `run_id` in the events table (and, older still, in a WITHOUT
# ROWID table whose B-tree held the bodies); they are converted once, when opened.
_CONVERT_EVENTS = """
CREATE TABLE IF NOT EXISTS run_nums (num INTEGER PRIMARY KEY, run_id TEXT NOT NULL UNIQUE);
INSERT OR IGNORE INTO run_nums (run_id) SELECT DISTINCT run_id FROM events;
CREATE TABLE events_by_num (
    run INTEGER NOT NULL, seq INTEGER NOT NULL, body BLOB NOT NULL, first INTEGER
);
INSERT INTO events_by_num (run, seq, body)
    SELECT n.num, e.seq, e.body FROM events e JOIN run_nums n ON n.run_id = e.run_id;
DROP TABLE events;
ALTER TABLE events_by_num RENAME TO events;
CREATE UNIQUE INDEX events_by_run ON events (run, seq);
"""
# Columns added after the first release: added in place to older files.
_ADDED_TABLES = """
CREATE TABLE IF NOT EXISTS blobs (key TEXT PRIMARY KEY, data BLOB NOT NULL) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS blob_refs (
    run_id TEXT NOT NULL, key TEXT NOT NULL, PRIMARY KEY (run_id, key)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS blob_refs_by_key ON blob_refs (key);
CREATE TABLE IF NOT EXISTS kept (
    space TEXT NOT NULL, key TEXT NOT NULL, value BLOB NOT NULL, PRIMARY KEY (space, key)
) WITHOUT ROWID;
"""
"""Tables added since the first layout: created in a file of any age when it is opened."""
_ADDED_COLUMNS = {
    "owner": "TEXT",
    "first_seq": "INTEGER NOT NULL DEFAULT 1",
    "attempt": "INTEGER NOT NULL DEFAULT 0",
    "context_id": "TEXT",
    "forked_from": "TEXT",
    "thread_id": "TEXT",
    "previous_run_id": "TEXT",
    "continues_agent": "TEXT",
    "options": "TEXT",
}
_COLUMNS = (
    "run_id, agent_id, input, status, created_at, finished_at, root_session_id, last_seq,"
    " owner, first_seq, attempt, context_id, forked_from, thread_id, previous_run_id,"
    " continues_agent, options"
)


class SqliteStorage:
    """Run records and events in one SQLite file."""

    durable = True

    def __init__(self, path: Path) -> None:
        self.path = path
        self._writer: sqlite3.Connection | None = None
        self._reader: sqlite3.Connection | None = None
        self._checkpointer: sqlite3.Connection | None = None
        self._write_limiter = trio.CapacityLimiter(1)
        self._read_limiter = trio.CapacityLimiter(1)
        self._wrote = trio.Event()
        """Set by a write since the last checkpoint (`_checkpoints`)."""
        self._written: dict[str, tuple[str, int]] = {}
        """runId → the status and attempt its record was last written with (`write`)."""
        self._nums: dict[str, int] = {}
        """runId → its number in `run_nums` (the events' `run`), for every run with events."""

    def _num(self, run_id: str) -> int:
        """The run's number in `run_nums`; -1 (no row has it) when none of its events
        was ever written."""
        return self._nums.get(run_id, -1)

    def _connect(self) -> sqlite3.Connection:
        conn = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
        conn.execute("PRAGMA busy_timeout=5000")
        mode = conn.execute("PRAGMA journal_mode").fetchone()[0]
        if mode != "wal":  # switching needs a write: skip it when already set (full disk)
            conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=NORMAL")
        return conn

    async def upkeep(self) -> None:
        """Copy the WAL into the database file every `_CHECKPOINT_EVERY` s
        while writes come, on a connection and thread of its own.

        Why not SQLite's own: it checkpoints inside the commit that crosses 1,000 WAL
        pages, and that commit then takes 15-20 ms instead of 2 at a model's pace; every
        live event waits for the next commit. A PASSIVE checkpoint takes no lock the
        writer or the reader needs, so it runs beside them. (A store opened without a
        journal, by a tool, keeps SQLite's own.)
        """
        writer = self._writer
        assert writer is not None, "storage is not open"
        await trio.to_thread.run_sync(
            writer.execute, "PRAGMA wal_autocheckpoint=0", limiter=self._write_limiter
        )
        while True:
            await self._wrote.wait()
            await trio.sleep(_CHECKPOINT_EVERY)
            self._wrote = trio.Event()
            try:
                await trio.to_thread.run_sync(self._checkpoint)
            except sqlite3.Error as exc:  # the next one tries again; the WAL keeps all
                logger.warning("sqlite storage %s: checkpoint failed: %s", self.path, exc)

    def _checkpoint(self) -> None:
        if self._checkpointer is None:
            self._checkpointer = self._connect()
        self._checkpointer.execute("PRAGMA wal_checkpoint(PASSIVE)")

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
            self._writer.executescript(_ADDED_TABLES)
            sqlite_extras.move_triggers(self._writer)
            for column, decl in _ADDED_COLUMNS.items():
                if existing and column not in existing:
                    self._writer.execute(f"ALTER TABLE runs ADD COLUMN {column} {decl}")
            columns = {r[1] for r in self._writer.execute("PRAGMA table_info(events)")}
            if "run_id" in columns:
                self._convert_events()
            elif "first" not in columns:  # rows of one event only: they stay as they are
                self._writer.execute("ALTER TABLE events ADD COLUMN first INTEGER")
            self._nums = dict(self._writer.execute("SELECT run_id, num FROM run_nums"))
            self._reader = self._connect()
        except (OSError, sqlite3.Error) as exc:
            self._close()
            raise StorageError(f"sqlite storage {str(self.path)!r}: {exc}") from None

    def _convert_events(self) -> None:
        """An older file's events, moved once into the current layout (one transaction)."""
        conn = self._writer
        assert conn is not None
        count = conn.execute("SELECT COUNT(*) FROM events").fetchone()[0]
        logger.warning(
            "sqlite storage %s: converting %d events to the new layout", self.path, count
        )
        conn.execute("BEGIN")
        try:
            for statement in _CONVERT_EVENTS.strip().split(";\n"):
                conn.execute(statement)
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise

    def _load(self) -> list[RunRecord]:
        conn = self._writer
        assert conn is not None, "storage is not open"
        rows = conn.execute(f"SELECT {_COLUMNS} FROM runs ORDER BY created_at, run_id").fetchall()
        last = "SELECT MAX(seq) FROM events WHERE run = ?"
        rows = [  # a running run's `last_seq` is written with its status only (`write`)
            (
                *r[:7],
                max(r[7], conn.execute(last, (self._num(r[0]),)).fetchone()[0] or 0),
                *r[8:],
            )
            if r[3] == "running"
            else r
            for r in rows
        ]
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
                attempt=r[10],
                context_id=r[11],
                forked_from=None if r[12] is None else _decode_fork(r[12]),
                thread_id=r[13],
                previous_run_id=r[14],
                continues_agent=r[15],
                options=None if r[16] is None else _decode_options(r[16]),
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
        """One transaction for the whole batch, in a worker thread (`write_then`)."""
        await self.write_then(records, events, None)

    async def write_then(
        self,
        records: list[RunRecord],
        events: list[tuple[str, int, bytes]],
        committed: Callable[[], None] | None,
    ) -> None:
        """`begin_write` once the connection is free (a trim or a load may hold it),
        and wait for the transaction."""
        while (started := self.begin_write(records, events, committed)) is None:
            async with self._write_limiter:
                pass
        await started.wait()

    def begin_write(
        self,
        records: list[RunRecord],
        events: list[tuple[str, int, bytes]],
        committed: Callable[[], None] | None,
    ) -> _Commit | None:
        """Start the batch's transaction in a worker thread now, without awaiting
        (None: a trim or a load holds the connection). `committed()` is called in
        trio's thread as soon as it is committed, before any task is woken
        (`CommitsEarly`: the journal hands the batch to live feeds there and starts
        the next one).

        A record is written when it is new or its status or attempt changed (not for
        every batch of its events: at a model's pace that was a row per run per batch,
        as many as the events themselves); a running run's `last_seq` is read back
        from its events at `load`.
        """
        records = [r for r in records if self._written.get(r.run_id) != (r.status, r.attempt)]
        record_rows: list[tuple[object, ...]] = [
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
                r.attempt,
                r.context_id,
                msgspec.json.encode(r.forked_from).decode() if r.forked_from else None,
                r.thread_id,
                r.previous_run_id,
                r.continues_agent,
                msgspec.json.encode(r.options).decode() if r.options else None,
            )
            for r in records
        ]

        def done() -> None:  # (before `committed`: it may begin the next write)
            self._wrote.set()
            for record in records:
                self._written[record.run_id] = (record.status, record.attempt)
            if committed is not None:
                committed()

        commit = _Commit(self._write_limiter, done)
        try:
            self._write_limiter.acquire_on_behalf_of_nowait(commit)
        except trio.WouldBlock:
            return None
        commit.start(functools.partial(self._write, events, record_rows))
        return commit

    def _write(
        self, events: list[tuple[str, int, bytes]], record_rows: list[tuple[object, ...]]
    ) -> None:
        """The batch's transaction: new runs numbered, their events, the records."""
        conn = self._writer
        assert conn is not None, "storage is not open"
        nums, numbered = self._nums, []
        conn.execute("BEGIN")
        try:
            rows: list[tuple[object, ...]] = []
            run_id, num = None, 0
            for event_run, first, last, body in _packs(events):
                if event_run != run_id:
                    run_id = event_run
                    known = nums.get(run_id)
                    if known is None:
                        cursor = conn.execute("INSERT INTO run_nums (run_id) VALUES (?)", (run_id,))
                        assert cursor.lastrowid is not None
                        known = nums[run_id] = cursor.lastrowid
                        numbered.append(run_id)
                    num = known
                rows.append((num, last, body, first))
            _insert_many(conn, "INSERT INTO events (run, seq, body, first) VALUES {values}", rows)
            _insert_many(conn, _UPSERT_RUNS, record_rows)
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            for run_id in numbered:  # those numbers were not kept
                del nums[run_id]
            raise

    def _read(self, run_id: str, after_seq: int, limit: int) -> list[bytes]:
        conn = self._reader
        assert conn is not None, "storage is not open"
        num = self._nums.get(run_id)
        if num is None:  # no event of it was ever written
            return []
        rows = conn.execute(  # each row holds one event at least: `limit` rows suffice
            "SELECT first, seq, body FROM events WHERE run = ? AND seq > ? ORDER BY seq LIMIT ?",
            (num, after_seq, limit),
        )
        found: list[bytes] = []
        for first, _, body in rows:
            if first is None:
                found.append(bytes(body))
            else:
                parts = bytes(body).split(b"\n")
                found.extend(parts[after_seq - first + 1 :] if first <= after_seq else parts)
            if len(found) >= limit:
                del found[limit:]
                break
        return found

    async def read(self, run_id: str, after_seq: int, limit: int) -> list[bytes]:
        """Events after `after_seq`, from the read connection, in a worker thread."""
        return await trio.to_thread.run_sync(
            self._read, run_id, after_seq, limit, limiter=self._read_limiter
        )

    async def trim(self, run_id: str, first_seq: int) -> None:
        """Delete the run's events below `first_seq` (a pack that holds it loses its
        head), in one transaction."""
        await trio.to_thread.run_sync(self._trim, run_id, first_seq, limiter=self._write_limiter)

    def _trim(self, run_id: str, first_seq: int) -> None:
        conn = self._writer
        assert conn is not None, "storage is not open"
        num = self._num(run_id)
        conn.execute("BEGIN")
        try:
            conn.execute("DELETE FROM events WHERE run = ? AND seq < ?", (num, first_seq))
            held = conn.execute(
                "SELECT rowid, first, body FROM events WHERE run = ? AND seq >= ?"
                " ORDER BY seq LIMIT 1",
                (num, first_seq),
            ).fetchone()
            if held is not None and held[1] is not None and held[1] < first_seq:
                rowid, first, body = held
                kept = bytes(body).split(b"\n")[first_seq - first :]
                conn.execute(
                    "UPDATE events SET body = ?, first = ? WHERE rowid = ?",
                    (b"\n".join(kept), first_seq if len(kept) > 1 else None, rowid),
                )
            conn.execute("UPDATE runs SET first_seq = ? WHERE run_id = ?", (first_seq, run_id))
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise

    async def delete_runs(self, run_ids: list[str]) -> None:
        """Delete whole runs, records and events, in one transaction."""
        rows: list[tuple[object, ...]] = [(run_id,) for run_id in run_ids]
        nums: list[tuple[object, ...]] = [(self._num(run_id),) for run_id in run_ids]
        statements: list[tuple[str, list[tuple[object, ...]]]] = [
            ("DELETE FROM events WHERE run = ?", nums),
            ("DELETE FROM run_nums WHERE run_id = ?", rows),
            ("DELETE FROM runs WHERE run_id = ?", rows),
            ("DELETE FROM blob_refs WHERE run_id = ?", rows),
            (_UNUSED_BLOBS, [()]),
        ]
        await trio.to_thread.run_sync(self._transaction, statements, limiter=self._write_limiter)
        for run_id in run_ids:
            self._written.pop(run_id, None)
            self._nums.pop(run_id, None)

    async def put_blobs(self, run_id: str, blobs: dict[str, bytes]) -> None:
        """Each blob stored once, with the run's reference, in one transaction."""
        await self._statements(sqlite_extras.put_blobs(run_id, blobs))

    async def ref_blobs(self, run_id: str, keys: list[str]) -> None:
        """The run's references to blobs stored already."""
        await self._statements(sqlite_extras.ref_blobs(run_id, keys))

    async def get_blobs(self, keys: list[str], run_id: str | None = None) -> dict[str, bytes]:
        """Those stored (with `run_id`: that the run refers to), read in a worker thread."""
        return await self._read_with(sqlite_extras.get_blobs, keys, run_id)

    async def load_kept(self, space: str) -> dict[str, bytes]:
        """Every value kept in `space`."""
        return await self._read_with(sqlite_extras.load_kept, space)

    async def keep(self, space: str, put: dict[str, bytes], delete: Sequence[str] = ()) -> None:
        """Upserts and deletes in `space`, in one transaction."""
        await self._statements(sqlite_extras.keep(space, put, delete))

    async def _statements(self, statements: list[tuple[str, list[tuple[object, ...]]]]) -> None:
        await trio.to_thread.run_sync(self._transaction, statements, limiter=self._write_limiter)

    async def _read_with(self, read: Callable[..., T], *args: Any) -> T:
        conn = self._reader
        assert conn is not None, "storage is not open"
        return await trio.to_thread.run_sync(read, conn, *args, limiter=self._read_limiter)

    def _close(self) -> None:
        for conn in (self._reader, self._checkpointer, self._writer):
            if conn is not None:
                conn.close()  # the last one checkpoints what is left
        self._reader = self._checkpointer = self._writer = None


_UNUSED_BLOBS = "DELETE FROM blobs WHERE key NOT IN (SELECT key FROM blob_refs)"
T = TypeVar("T")
_decode_fork = msgspec.json.Decoder(ForkPoint).decode
_decode_options = msgspec.json.Decoder(RunOptions).decode


class _Commit:
    """One batch's transaction in a worker thread, started at once, holding the write
    limiter until it ends.

    Why not `trio.to_thread.run_sync`: it takes its limiter with a checkpoint first,
    so the thread started only after the loop had run every task that was ready, and
    its result reaches the awaiting task one more such turn after the callback that
    delivers it. At 1,000 agents the first wait was 7 ms (p50) to 32 ms (p90) of every
    commit cycle, which is what a live event waits for; `committed` runs in that
    callback instead (bench/capacity.py; docs/benchmarks.md).
    """

    def __init__(self, limiter: trio.CapacityLimiter, committed: Callable[[], None]) -> None:
        self._limiter = limiter
        self._committed = committed
        self._result: outcome.Outcome[None] | None = None
        self._waiter: trio.lowlevel.Task | None = None

    def start(self, fn: Callable[[], None]) -> None:
        token = trio.lowlevel.current_trio_token()

        def deliver(result: outcome.Outcome[None]) -> None:
            with contextlib.suppress(trio.RunFinishedError):
                token.run_sync_soon(self._done, result)

        trio.lowlevel.start_thread_soon(fn, deliver)

    def _done(self, result: outcome.Outcome[None]) -> None:
        self._limiter.release_on_behalf_of(self)
        if isinstance(result, outcome.Value):
            try:
                self._committed()
            except BaseException as exc:  # (raised in the waiting task, never in trio's loop)
                result = outcome.Error(exc)
        self._result = result
        if self._waiter is not None:
            trio.lowlevel.reschedule(self._waiter)

    async def wait(self) -> None:
        """Return once committed (raise what failed it); not abandoned when cancelled:
        the cancellation is noted and raised at the next checkpoint."""
        if self._result is None:
            self._waiter = trio.lowlevel.current_task()
            await trio.lowlevel.wait_task_rescheduled(lambda _: trio.lowlevel.Abort.FAILED)
        else:
            await trio.lowlevel.checkpoint()
        assert self._result is not None
        self._result.unwrap()


def _packs(
    events: list[tuple[str, int, bytes]],
) -> Iterator[tuple[str, int | None, int, bytes]]:
    """The batch's rows: (runId, first seq or None for one event, last seq, body).

    A run's events come together in a batch; consecutive seqs of one run join a pack
    up to `_PACK_EVENTS` events and `_PACK_BYTES`. An encoding holding a newline (none
    does: they are JSON) is a row of its own, never split when read.
    """
    run_id, parts, first, last, size = "", list[bytes](), 0, 0, 0
    for event_run, seq, body in events:
        if (
            parts
            and event_run == run_id
            and seq == last + 1
            and len(parts) < _PACK_EVENTS
            and size + len(body) < _PACK_BYTES
            and b"\n" not in body
        ):
            parts.append(body)
            last, size = seq, size + len(body) + 1
            continue
        if parts:
            yield run_id, first if len(parts) > 1 else None, last, b"\n".join(parts)
        if b"\n" in body:
            yield event_run, None, seq, body
            parts = []
            continue
        run_id, parts, first, last, size = event_run, [body], seq, seq, len(body)
    if parts:
        yield run_id, first if len(parts) > 1 else None, last, b"\n".join(parts)


_UPSERT_RUNS = (
    f"INSERT INTO runs ({_COLUMNS}) VALUES {{values}}"
    " ON CONFLICT(run_id) DO UPDATE SET status=excluded.status,"
    " finished_at=excluded.finished_at, last_seq=excluded.last_seq,"
    " first_seq=excluded.first_seq, attempt=excluded.attempt"
)

_ROWS_PER_STATEMENT = 256
"""Rows one INSERT carries (`VALUES (…), (…), …`; under SQLite's 32,766 variables)."""


@functools.cache
def _statement(sql: str, width: int, rows: int) -> str:
    row = "(" + ", ".join("?" * width) + ")"
    return sql.format(values=", ".join([row] * rows))


def _insert_many(conn: sqlite3.Connection, sql: str, rows: list[tuple[object, ...]]) -> None:
    """`rows` into `sql` (its `{values}`), many rows per statement.

    Why not `executemany`: it steps SQLite once per row, and the sqlite3 module lets
    go of the GIL around every step. At 40,000 rows a second that is 80,000 GIL
    hand-overs between this writer thread and the event loop's — a convoy that cost
    the loop more than the inserts themselves (bench/capacity.py: p99 716 ms at 800
    paced agents). One statement per 256 rows binds them all while it holds the GIL,
    then lets go once while SQLite inserts them (in parallel with the loop).
    """
    if not rows:
        return
    width = len(rows[0])
    for start in range(0, len(rows), _ROWS_PER_STATEMENT):
        part = rows[start : start + _ROWS_PER_STATEMENT]
        flat = [value for row in part for value in row]
        conn.execute(_statement(sql, width, len(part)), flat)
