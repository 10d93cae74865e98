"""Open what `storage:` in server.yaml names: the backend, and the journal over it.

Used by everything that journals runs: `orchestrator serve` and `orchestrator worker`
(no other command opens a journal: `watch`, `pending`, `runs`, … ask the server).
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from orchestrator.config import ConfigError, ServerConfig
from orchestrator.storage.base import RunRecord, Storage
from orchestrator.storage.journal import Journal
from orchestrator.storage.kind import is_redis
from orchestrator.storage.memory import MemoryStorage
from orchestrator.storage.owner import Holder, Ownership, own
from orchestrator.storage.retention import RetentionPolicy
from orchestrator.storage.sqlite import SqliteStorage
from orchestrator.storage.writer import FencedWrite

if TYPE_CHECKING:
    from orchestrator.storage.redis import RedisStorage

__all__ = ["journal_name", "open_journal", "open_storage"]


def open_storage(config: ServerConfig) -> AbstractAsyncContextManager[Storage]:
    """Open the backend named by `storage:` (relative paths: the config's directory).

    Raises:
        ConfigError: an unsupported storage URL.
    """
    url = config.storage.url
    if url.startswith("memory://"):
        return MemoryStorage.open()
    if url.startswith("sqlite:///"):
        path = Path(url.removeprefix("sqlite:///"))
        return SqliteStorage.open(path if path.is_absolute() else config.base_dir / path)
    if url.startswith("redis://"):
        from orchestrator.storage.redis import RedisStorage  # (only where one is used)

        return RedisStorage.open(url, durability=config.storage.durability)
    raise ConfigError(f"storage: {url!r} is not supported (memory://, sqlite:///PATH, redis://)")


@asynccontextmanager
async def open_journal(
    config: ServerConfig,
    *,
    holder: Holder | None = None,
    fence: Callable[[Storage], FencedWrite] | None = None,
) -> AsyncIterator[Journal]:
    """The configured storage and the journal over it, with the configured bounds.

    `holder`: this process serves the journal alone (not in cluster mode) — it owns it
    first, before anything is read or written, or refuses (storage/owner.py).
    `fence`: this process is a cluster worker — every write goes behind the lease of
    its run, from the first (`cluster/leases.py`).

    Raises:
        JournalInUse: another live server owns the journal.
    """
    retention = config.storage.effective_retention
    alone = holder is not None and config.cluster is None
    async with open_storage(config) as storage, contextlib.AsyncExitStack() as stack:
        ownership = Ownership()
        if alone:
            assert holder is not None
            name = journal_name(storage, config.storage.url)
            ownership = await stack.enter_async_context(own(storage, holder, journal=name))
        journal = await stack.enter_async_context(
            Journal.open(
                storage,
                max_pending=config.storage.max_pending_events,
                max_event_bytes=config.limits.max_event_bytes,
                fail_runs_after=config.storage.fail_runs_after_seconds,
                retention=RetentionPolicy(
                    retention.max_age_seconds, retention.max_runs, retention.max_run_events
                ),
                cluster=config.cluster is not None,
                resume=config.server.resume_runs,
                fenced_write=(
                    fence(storage)
                    if fence is not None
                    else functools.partial(_owned_write, storage, ownership)
                    if ownership.key is not None and is_redis(storage)
                    else None
                ),
            )
        )
        yield journal


async def _owned_write(
    storage: RedisStorage,
    ownership: Ownership,
    records: list[RunRecord],
    rows: list[tuple[str, int, bytes]],
) -> set[str]:
    """A single server's writes to Redis, each run's behind the server's claim. Writes
    refused because the claim is gone (not someone else's: Redis restarted without it,
    or an outage outlasted it) go again once it is taken again (the append skips what
    was written: storage/redis.py)."""
    runs = {record.run_id for record in records} | {run_id for run_id, _, _ in rows}
    tokens = dict.fromkeys(runs, ownership.token)
    refused = await storage.append(records, rows, tokens, lease_key=ownership.key)
    if refused and await ownership.renew():
        tokens = dict.fromkeys(runs, ownership.token)
        refused = await storage.append(records, rows, tokens, lease_key=ownership.key)
    return refused


def journal_name(storage: Storage, url: str) -> str:
    """How messages name the journal: the file a person can open, or the Redis server
    and key prefix (never a password)."""
    if isinstance(storage, SqliteStorage):
        return str(storage.path.resolve())
    if is_redis(storage):
        return f"{storage.shown} (key prefix {storage.prefix!r})"
    return url
