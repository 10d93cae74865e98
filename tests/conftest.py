"""Fixtures shared by every test module."""

import logging
from collections.abc import Iterator

import pytest

from tests.redis_helpers import redis_url

__all__ = ["redis_url"]


@pytest.fixture(autouse=True)
def _logger_levels() -> Iterator[None]:
    """Undo what an in-process `main(["serve", …])` sets on loggers, so no test depends
    on which CLI test ran before it (the CLI quiets the access loggers for its process)."""
    manager = logging.Logger.manager
    before = {
        name: logger.level
        for name, logger in manager.loggerDict.items()
        if isinstance(logger, logging.Logger)
    }
    yield
    for name, logger in list(manager.loggerDict.items()):
        level = before.get(name, logging.NOTSET)
        if isinstance(logger, logging.Logger) and logger.level != level:
            logger.setLevel(level)
