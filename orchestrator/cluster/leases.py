"""The runs a cluster worker holds the lease of, and the journal's writes behind them.

Built before the journal opens, so the journal is given its fence at construction
(`open_journal(fence=...)`): every write of a run goes to Redis behind the token of
that run's lease, and a run this worker does not hold is refused (never written).
The worker adds a run when it takes its lease and removes it when it lets go.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from orchestrator.storage.base import RunRecord, Storage
from orchestrator.storage.kind import is_redis
from orchestrator.storage.writer import FencedWrite

__all__ = ["Leases", "Owned"]


@dataclass(slots=True)
class Owned:
    """A run this worker holds the lease of (from taking the lease to letting it go)."""

    token: str
    entry_id: str
    control_cursor: str = "0-0"
    replay_until: tuple[int, int] = (0, 0)
    """Control requests up to this stream id were applied by an earlier owner. Its
    cancels and answers are applied again — both are idempotent, and that owner may
    have stopped before their effect was journaled — its messages are not (they were
    delivered: a message is delivered at most once)."""
    started: bool = False
    """The run executes here now: its control requests can be applied (not before,
    or a cancel read during the takeover would find nothing to cancel and be lost)."""


@dataclass(slots=True)
class Leases:
    """The leases this worker holds, by run id."""

    owned: dict[str, Owned] = field(default_factory=dict)

    def fence(self, storage: Storage) -> FencedWrite:
        """The journal's write on `storage`, each run's behind its lease."""
        if not is_redis(storage):  # the config validator makes this impossible
            raise TypeError("cluster mode needs redis storage")

        async def write(records: list[RunRecord], rows: list[tuple[str, int, bytes]]) -> set[str]:
            tokens = {run_id: owned.token for run_id, owned in self.owned.items()}
            return await storage.append(records, rows, tokens)

        return write
