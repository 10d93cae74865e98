"""Fixtures shared by every test module."""

import contextlib
import fcntl
import logging
import os
import tempfile
from collections.abc import Generator, Iterator
from pathlib import Path
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
# run, and that check what happens within seconds (a takeover within the lease, a page
# that keeps up). The suite runs on two processes (pytest-xdist, `-n 2 --dist
# loadgroup`): each group below runs on one of them, one test after the other, beside
# the light tests on the other. Two groups, so the two processes share the heavy work
# and no more than two of these run at once on 2 cores.
HEAVY = {
    "cluster": (
        "tests/integration/test_chaos.py",
        "tests/integration/test_cluster",
    ),
    "servers": (
        "tests/browser/",
        "tests/integration/test_official_clients.py",  # Node clients, Arize Phoenix's start
        "tests/integration/test_js_package.py",  # its Node tests start servers
        "tests/integration/test_remote",
        "tests/integration/test_restart_resume.py",
        "tests/integration/test_serve_start.py",
    ),
}

# Tests that measure how smooth something is to a person (a browser's frames with 500
# agents): beside other tests on 2 cores they measure the load, not the code. Under
# xdist each runs alone: the other process waits for it to end.
ALONE = ("tests/browser/test_console.py::test_500_agents_stream_without_long_frames",)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        for group, prefixes in HEAVY.items():
            if item.nodeid.startswith(prefixes):
                item.add_marker(pytest.mark.xdist_group(group))


class _Alone:
    """A readers-writer lock over the xdist workers of one run (`flock` on two files):
    every test holds it shared, an ALONE test exclusively. The gate file gives the
    writer precedence: once it waits, no new test starts on the other workers."""

    def __init__(self, run_id: str) -> None:
        base = Path(tempfile.gettempdir()) / f"orchestrator-tests-{run_id}"
        self._gate = open(f"{base}.gate", "a+")  # noqa: SIM115 (held for the session)
        self._main = open(f"{base}.lock", "a+")  # noqa: SIM115

    @contextlib.contextmanager
    def holding(self, alone: bool) -> Iterator[None]:
        fcntl.flock(self._gate, fcntl.LOCK_EX)
        try:
            fcntl.flock(self._main, fcntl.LOCK_EX if alone else fcntl.LOCK_SH)
        finally:
            if not alone:
                fcntl.flock(self._gate, fcntl.LOCK_UN)
        try:
            yield
        finally:
            fcntl.flock(self._main, fcntl.LOCK_UN)
            if alone:
                fcntl.flock(self._gate, fcntl.LOCK_UN)

    def close(self) -> None:
        self._gate.close()
        self._main.close()


_ALONE_LOCK: list[_Alone] = []


def pytest_sessionfinish() -> None:
    while _ALONE_LOCK:
        _ALONE_LOCK.pop().close()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item) -> Generator[None, object, object]:
    run_id = os.environ.get("PYTEST_XDIST_TESTRUNUID")
    if run_id is None:  # one process: nothing runs beside anything
        return (yield)
    if not _ALONE_LOCK:
        _ALONE_LOCK.append(_Alone(run_id))
    with _ALONE_LOCK[0].holding(item.nodeid.startswith(ALONE)):
        return (yield)
