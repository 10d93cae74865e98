"""Fixtures shared by every test module."""

from tests.redis_helpers import redis_url

__all__ = ["redis_url"]
