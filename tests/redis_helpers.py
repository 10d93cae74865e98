"""Redis for tests: the machine's server at 127.0.0.1:6379, a fresh key prefix per test.

Tests that need Redis take the `redis_url` fixture; it skips them (with how to
enable them) when nothing answers there. CI (`.ci/run`) starts Redis when it is
missing, so they always run there.
"""

from __future__ import annotations

import functools
import socket
import uuid
from collections.abc import Iterator

import pytest
import trio

REDIS = "redis://127.0.0.1:6379/0"
SKIP_REASON = (
    "Redis is not answering at 127.0.0.1:6379; start one to run these tests "
    "(e.g. `redis-server --daemonize yes --port 6379`, as .ci/run does)"
)


@functools.cache
def redis_available() -> bool:
    """True when a Redis server answers PING at 127.0.0.1:6379."""
    try:
        with socket.create_connection(("127.0.0.1", 6379), timeout=1.0) as sock:
            sock.sendall(b"PING\r\n")
            return sock.recv(16).startswith(b"+PONG")
    except OSError:
        return False


def require_redis() -> None:
    """Skip the calling test when Redis is absent."""
    if not redis_available():
        pytest.skip(SKIP_REASON)


def fresh_prefix() -> str:
    """A fresh key prefix per use, so tests never see each other's keys."""
    return f"aor-test-{uuid.uuid4().hex[:12]}:"


async def _drop_keys(prefix: str) -> None:
    import coredis

    async with coredis.Redis.from_url(REDIS) as client:
        keys = [key async for key in client.scan_iter(match=f"{prefix}*")]
        if keys:
            await client.delete(keys)


@pytest.fixture
def redis_url() -> Iterator[str]:
    """`redis://127.0.0.1:6379/0?prefix=<fresh>`; the test's keys are dropped after it."""
    require_redis()
    prefix = fresh_prefix()
    yield f"{REDIS}?prefix={prefix}"
    trio.run(_drop_keys, prefix)
