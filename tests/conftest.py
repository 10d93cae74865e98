"""Fixtures shared by every test module."""

import logging
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import pytest
from hypothesis import settings

from tests.redis_helpers import redis_url

if TYPE_CHECKING:
    from orchestrator.core.events import Event

__all__ = ["redis_url"]

# No per-example deadline: how long an example takes says how loaded the machine is
# (other tests and processes share it), not whether the code is right. Speed is measured in
# bench/.
settings.register_profile("suite", deadline=None)
settings.load_profile("suite")


@pytest.fixture(autouse=True, scope="session")
def _payloads_checked() -> Iterator[None]:
    """Every event of every in-process run in the suite has its type's payload
    (tests/payload_check.py): a producer that drifts from agents/core/payloads.py
    fails the test that made it emit."""
    from orchestrator.runtime.queue import EventQueue
    from orchestrator.storage.journal import RunOutlet
    from tests.payload_check import check

    patch = pytest.MonkeyPatch()
    for outlet in (EventQueue, RunOutlet):
        put_nowait, put_many = outlet.put_nowait, outlet.put_many

        def checked_one(self: object, event: "Event", _put: Any = put_nowait) -> bool:
            check(event)
            return bool(_put(self, event))

        def checked_many(self: object, events: "list[Event]", _put: Any = put_many) -> bool:
            for event in events:
                check(event)
            return bool(_put(self, events))

        patch.setattr(outlet, "put_nowait", checked_one)
        patch.setattr(outlet, "put_many", checked_many)
    yield
    patch.undo()


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
