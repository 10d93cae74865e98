"""Paging the runs list (the `runs` op): one rule for the journal and the cluster.

A page is up to `limit` records, newest first, starting after run `before`, of one
owner if given, and says whether older ones remain. The journal pages its runs in
memory; the cluster reads its index and records from Redis in chunks. Both feed
the records, newest first, into a `RunPaging` until it is full.
"""

from __future__ import annotations

from collections.abc import Iterable

from orchestrator.storage.base import RunRecord

__all__ = ["RunPaging"]


class RunPaging:
    """Collects one page of runs from records offered newest first."""

    __slots__ = ("_limit", "_owner", "more", "records")

    def __init__(self, *, limit: int, owner: str | None = None) -> None:
        self._limit = limit
        self._owner = owner
        self.records: list[RunRecord] = []
        self.more = False
        """True once a record past the page was seen: older runs remain."""

    def add(self, records: Iterable[RunRecord]) -> bool:
        """Offer the next records (newest first); True once the page is full.

        "Full" means one more matching record was seen beyond `limit`, so `more`
        is known: the caller stops reading there.
        """
        for record in records:
            if self._owner is not None and record.owner != self._owner:
                continue
            if len(self.records) == self._limit:
                self.more = True
                return True
            self.records.append(record)
        return False

    def result(self) -> tuple[list[RunRecord], bool]:
        """The page and whether older runs remain."""
        return self.records, self.more
