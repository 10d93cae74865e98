"""Fixtures shared by every test module."""

from tests.redis_helpers import drop_redis_keys

__all__ = ["drop_redis_keys"]
