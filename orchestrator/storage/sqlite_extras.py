"""SQLite's blob store (attachments, content-addressed) and kept state (triggers',
the webhooks' outbox): the statements `SqliteStorage` runs in its writer's
transactions and the reads it runs on its reader connection
(docs/structured.md#attachments, docs/triggers.md, docs/webhooks.md)."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence

__all__ = ["get_blobs", "keep", "load_kept", "move_triggers", "put_blobs", "ref_blobs"]

Statements = list[tuple[str, list[tuple[object, ...]]]]


def put_blobs(run_id: str, blobs: dict[str, bytes]) -> Statements:
    """Each blob once (`INSERT OR IGNORE`), and the run's reference to it."""
    return [
        ("INSERT OR IGNORE INTO blobs (key, data) VALUES (?, ?)", list(blobs.items())),
        (
            "INSERT OR IGNORE INTO blob_refs (run_id, key) VALUES (?, ?)",
            [(run_id, key) for key in blobs],
        ),
    ]


def ref_blobs(run_id: str, keys: list[str]) -> Statements:
    """The run's references to blobs stored already (an unknown key: none)."""
    sql = "INSERT OR IGNORE INTO blob_refs (run_id, key) SELECT ?, key FROM blobs WHERE key = ?"
    return [(sql, [(run_id, key) for key in keys])]


def get_blobs(conn: sqlite3.Connection, keys: list[str], run_id: str | None) -> dict[str, bytes]:
    """The blobs of `keys` stored (with `run_id`: those the run refers to)."""
    sql, extra = "SELECT data FROM blobs WHERE key = ?", tuple[str, ...]()
    if run_id is not None:
        sql = (
            "SELECT b.data FROM blobs b JOIN blob_refs r ON r.key = b.key "
            "WHERE b.key = ? AND r.run_id = ?"
        )
        extra = (run_id,)
    found: dict[str, bytes] = {}
    for key in keys:
        row = conn.execute(sql, (key, *extra)).fetchone()
        if row is not None:
            found[key] = bytes(row[0])
    return found


def load_kept(conn: sqlite3.Connection, space: str) -> dict[str, bytes]:
    """Every value kept in `space`, by key."""
    rows = conn.execute("SELECT key, value FROM kept WHERE space = ?", (space,)).fetchall()
    return {str(key): bytes(value) for key, value in rows}


def keep(space: str, put: dict[str, bytes], delete: Sequence[str]) -> Statements:
    """Values of `space` replaced and removed."""
    return [
        (
            "INSERT OR REPLACE INTO kept (space, key, value) VALUES (?, ?, ?)",
            [(space, key, value) for key, value in put.items()],
        ),
        ("DELETE FROM kept WHERE space = ? AND key = ?", [(space, key) for key in delete]),
    ]


def move_triggers(conn: sqlite3.Connection) -> None:
    """A file written when triggers had their own table: its rows moved into `kept`."""
    found = conn.execute("SELECT name FROM sqlite_master WHERE name = 'triggers'").fetchone()
    if found is None:
        return
    conn.execute("BEGIN")
    try:
        conn.execute(
            "INSERT OR IGNORE INTO kept (space, key, value) "
            "SELECT 'triggers', name, state FROM triggers"
        )
        conn.execute("DROP TABLE triggers")
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise
