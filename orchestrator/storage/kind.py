"""Which kind of journal a storage is, without importing the Redis client where none
is used (coredis is a quarter of a process's start: every CLI command and server)."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, TypeGuard

if TYPE_CHECKING:
    from orchestrator.storage.redis import RedisStorage

__all__ = ["is_redis"]


def is_redis(storage: object) -> TypeGuard[RedisStorage]:
    """Whether `storage` is a Redis journal: an instance of `RedisStorage` exists
    only once its module was imported, so an unimported module means no."""
    module = sys.modules.get("orchestrator.storage.redis")
    return module is not None and isinstance(storage, module.RedisStorage)
