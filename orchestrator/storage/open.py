"""Open what `storage:` in server.yaml names: the backend, and the journal over it.

Used by everything that journals runs: `orchestrator serve` and `orchestrator worker`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path

from orchestrator.config import ConfigError, ServerConfig
from orchestrator.storage.base import Storage
from orchestrator.storage.journal import Journal
from orchestrator.storage.memory import MemoryStorage
from orchestrator.storage.redis import RedisStorage
from orchestrator.storage.retention import RetentionPolicy
from orchestrator.storage.sqlite import SqliteStorage

__all__ = ["open_journal", "open_storage"]


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
        return RedisStorage.open(url, durability=config.storage.durability)
    raise ConfigError(f"storage: {url!r} is not supported (memory://, sqlite:///PATH, redis://)")


@asynccontextmanager
async def open_journal(config: ServerConfig) -> AsyncIterator[Journal]:
    """The configured storage and the journal over it, with the configured bounds."""
    retention = config.storage.effective_retention
    async with (
        open_storage(config) as storage,
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
        ) as journal,
    ):
        yield journal
