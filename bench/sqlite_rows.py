"""What a journaled event costs SQLite alone, by events-table layout.

R runs write K events each per commit (as a server at a model's pace does: many
runs, a few events each per commit), 600-byte bodies, WAL and `synchronous=NORMAL`
as `sqlite://` uses, 256 rows per INSERT. Layouts: a `(run_id TEXT, seq)` index,
an integer run key instead, no index at all (the floor), and the current one: the
integer key with one row per run per commit holding its events (a pack).

    python -m bench.sqlite_rows [--runs 250] [--per-commit 8] [--commits 200]
"""

from __future__ import annotations

import argparse
import os
import sqlite3
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path

_TABLE = "CREATE TABLE events (run_id {kind} NOT NULL, seq INTEGER NOT NULL, body BLOB NOT NULL);"
_INDEX = "CREATE UNIQUE INDEX events_by_run ON events (run_id, seq);"


def measure(
    path: Path,
    schema: str,
    key: Callable[[int], object],
    runs: int,
    per: int,
    commits: int,
    pack: bool = False,
) -> tuple[float, float, float]:
    """µs per event, ms per commit (mean), ms of the slowest commit."""
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=NORMAL")
    conn.executescript(schema)
    ids = [key(i) for i in range(runs)]
    body = os.urandom(300).hex().encode()
    seq = [0] * runs
    worst = 0.0
    start = time.perf_counter()
    for _ in range(commits):
        rows: list[tuple[object, int, bytes]] = []
        for r in range(runs):
            if pack:  # (sqlite.py `_packs`: the encodings joined by newlines)
                seq[r] += per
                rows.append((ids[r], seq[r], b"\n".join([body] * per)))
                continue
            for _ in range(per):
                seq[r] += 1
                rows.append((ids[r], seq[r], body))
        began = time.perf_counter()
        conn.execute("BEGIN")
        for i in range(0, len(rows), 256):
            chunk = rows[i : i + 256]
            values = ",".join(["(?,?,?)"] * len(chunk))
            params = [x for row in chunk for x in row]
            conn.execute(f"INSERT INTO events (run_id, seq, body) VALUES {values}", params)
        conn.execute("COMMIT")
        worst = max(worst, time.perf_counter() - began)
    elapsed = time.perf_counter() - start
    conn.close()
    return elapsed / (runs * per * commits) * 1e6, elapsed / commits * 1e3, worst * 1e3


def parser() -> argparse.ArgumentParser:
    """The command line (docs/benchmarks.md shows it; tests/unit/test_doc_examples.py parses it)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=250)
    parser.add_argument("--per-commit", type=int, default=8, help="events per run per commit")
    parser.add_argument("--commits", type=int, default=200)
    return parser


def main() -> None:
    args = parser().parse_args()
    layouts: list[tuple[str, str, Callable[[int], object], bool]] = [
        ("(run_id TEXT, seq) index", _TABLE.format(kind="TEXT") + _INDEX, _run_id, False),
        ("(run INTEGER, seq) index", _TABLE.format(kind="INTEGER") + _INDEX, int, False),
        ("no index", _TABLE.format(kind="TEXT"), _run_id, False),
        ("packs, (run INTEGER, seq)", _TABLE.format(kind="INTEGER") + _INDEX, int, True),
    ]
    print(f"{args.runs} runs × {args.per_commit} events per commit, {args.commits} commits")
    for name, schema, key, pack in layouts:
        with tempfile.TemporaryDirectory() as tmp:
            per_row, per_commit, worst = measure(
                Path(tmp) / "j.db", schema, key, args.runs, args.per_commit, args.commits, pack
            )
        print(
            f"{name:<26} {per_row:6.2f} µs an event  {per_commit:6.1f} ms a commit"
            f"  (slowest {worst:.1f} ms)"
        )


def _run_id(_: int) -> str:
    return f"run-{uuid.uuid4().hex}"


if __name__ == "__main__":
    main()
