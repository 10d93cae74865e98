"""Redis keyspace hygiene for tests that use the machine's Redis (127.0.0.1:6379)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
import trio

REDIS = "redis://127.0.0.1:6379/0"


def fresh_prefix() -> str:
    """A fresh key prefix per use, so tests never see each other's keys."""
    return f"aor-test-{uuid.uuid4().hex[:12]}:"


async def _drop_keys() -> None:
    import coredis

    async with coredis.Redis.from_url(REDIS) as client:
        keys = [key async for key in client.scan_iter(match="aor-test-*")]
        if keys:
            await client.delete(keys)


@pytest.fixture
def drop_redis_keys() -> Iterator[None]:
    """After the test, delete every `aor-test-*` key (a sync fixture: its own trio.run)."""
    yield
    trio.run(_drop_keys)
