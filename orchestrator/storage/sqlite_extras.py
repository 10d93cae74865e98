"""SQLite's blob store (attachments, content-addressed) and triggers' state: the
statements `SqliteStorage` runs in its writer's transactions and the reads it runs on
its reader connection (docs/structured.md#attachments, docs/triggers.md)."""

from __future__ import annotations

import sqlite3

__all__ = ["get_blobs", "load_triggers", "put_blobs", "ref_blobs", "save_trigger"]

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


def load_triggers(conn: sqlite3.Connection) -> dict[str, bytes]:
    """Every trigger's kept state, by name."""
    rows = conn.execute("SELECT name, state FROM triggers").fetchall()
    return {str(name): bytes(state) for name, state in rows}


def save_trigger(name: str, state: bytes) -> Statements:
    """One trigger's state, replaced."""
    return [("INSERT OR REPLACE INTO triggers (name, state) VALUES (?, ?)", [(name, state)])]
