"""Fixtures shared by every test module."""

import logging
from collections.abc import Iterator

import pytest
from hypothesis import settings

from tests.redis_helpers import redis_url

__all__ = ["redis_url"]

# No per-example deadline: how long an example takes says how loaded the machine is
# (other tests and processes share it), not whether the code is right. Speed is measured in
# bench/.
settings.register_profile("suite", deadline=None)
settings.load_profile("suite")


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


# Tests that run several server processes, a browser, the official clients or a chaos
# run, and that check
# what happens within seconds (a takeover within the lease, a page that keeps up). The
# suite is run on every core (pytest-xdist, `-n auto --dist loadgroup`): these run one at
# a time, on one worker, beside the light tests on the others — two of them side by side
# on 2 cores starve each other past those seconds.
HEAVY = (
    "tests/browser/",
    "tests/integration/test_chaos.py",
    "tests/integration/test_official_clients.py",  # Node clients, Arize Phoenix's start
    "tests/integration/test_cluster",
    "tests/integration/test_remote",
    "tests/integration/test_restart_resume.py",
    "tests/integration/test_serve_start.py",
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if item.nodeid.startswith(HEAVY):
            item.add_marker(pytest.mark.xdist_group("heavy"))
