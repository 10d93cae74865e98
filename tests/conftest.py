"""Fixtures shared by every test module."""

import contextlib
import fcntl
import logging
import os
import tempfile
from collections.abc import Generator, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import croniter  # noqa: F401 (its import runs `file` once: a process no test starts)
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
# the light tests and the other groups on the other. Three groups, so the two processes
# share the heavy work evenly, and no more than two of these run at once on 2 cores.
HEAVY = {
    "cluster": (
        "tests/integration/test_chaos.py",
        "tests/integration/test_cluster",
    ),
    "browser": ("tests/browser/test_console", "tests/browser/test_agui_cors.py"),
    "servers": (
        "tests/integration/test_official_clients.py",  # Node clients, Arize Phoenix's start
        "tests/integration/test_js_package.py",  # its Node tests start servers
        # It bundles from js/ (writing a page into js/test) while the package's test packs
        # js/: one after the other (`npm pack` read a file going away: "unexpected EOF").
        "tests/browser/test_react.py",
        "tests/integration/test_remote",
        "tests/integration/test_restart_resume.py",
        "tests/integration/test_serve_start.py",
    ),
}

# Tests that measure how smooth something is to a person (a browser's frames with 500
# agents): beside other tests on 2 cores they measure the load, not the code. Under
# xdist each runs alone: the other process waits for it to end.
ALONE = ("tests/browser/test_console.py::test_500_agents_stream_without_long_frames",)


# The process-level tests (`slow`): what needs real processes — servers started and
# killed (restart, kill -9, SIGTERM, the cluster, chaos), the command line in a shell,
# a browser, Node and the official clients, MCP servers over stdio, mypy. `pytest -m
# "not slow"` runs everything else, in memory (tests/memory_server.py), and there a
# test that starts a process fails, naming this list.
SLOW = (
    *HEAVY["cluster"],
    *HEAVY["browser"],
    *HEAVY["servers"],
    "tests/integration/test_a2a_remote.py",
    "tests/integration/test_a2a_serve.py::test_a_dropped_subscriber_resumes_exactly_by_seq",
    "tests/integration/test_agui_resume.py::test_a_dropped_client_resumes_exactly_by_seq",
    "tests/integration/test_agui_threads.py::test_the_official_client",
    "tests/integration/test_approvals_cli.py",
    "tests/integration/test_attachments.py::test_an_image_survives_a_restart",
    "tests/integration/test_attachments.py::test_an_mcp_tools_image_reaches_the_model",
    "tests/integration/test_cli_first_hour.py",
    "tests/integration/test_client.py::test_a_follow_goes_on_through_a_server_restart",
    "tests/integration/test_compaction.py::test_a_resume_after_kill_9",
    "tests/integration/test_doc_examples_run.py",
    "tests/integration/test_fake_provider.py",
    "tests/integration/test_mcp_endpoint.py::test_sigterm_of_serve",
    "tests/integration/test_mcp_serve.py",
    "tests/integration/test_stalls_server.py::test_a_gateway_counts_the_stalls",
    "tests/integration/test_fork_server.py::test_the_cli_and_the_typed_client_fork",
    "tests/integration/test_mcp_tools.py",
    "tests/integration/test_redis_outage.py",
    "tests/integration/test_server_lifecycle.py::test_a_client_command_says_where",
    "tests/integration/test_server_lifecycle.py::test_kill_9_loses_none",
    "tests/integration/test_server_lifecycle.py::test_serve_command_shuts_down",
    "tests/integration/test_server_lifecycle.py::test_start_command_starts",
    "tests/integration/test_server_lifecycle.py::test_watch_command_prints",
    "tests/integration/test_structured_server.py::test_the_cli_asks",
    "tests/integration/test_structured_server.py::test_the_schema_of_a_run_survives_a_restart",
    "tests/integration/test_subtree_cancel.py::test_the_cancel_command_stops",
    "tests/integration/test_telemetry.py::test_a_dead_collector",
    "tests/integration/test_telemetry.py::test_a_real_otlp_receiver",
    "tests/integration/test_telemetry.py::test_a_run_resumed_after_kill_9",
    "tests/integration/test_threads.py::test_an_a2a_task_waiting_for_approval",
    "tests/integration/test_threads.py::test_the_command_line_chats",
    "tests/integration/test_threads.py::test_the_official_a2a_client",
    "tests/integration/test_threads.py::test_the_official_ag_ui_client",
    "tests/integration/test_triggers.py::test_the_triggers_op_lists",
    "tests/unit/test_architecture.py::test_the_redis_client_loads_only_where",
    "tests/unit/test_cli.py::test_help_imports_nothing_heavy",
    "tests/unit/test_cli.py::test_invalid_subagent_stops_startup_with_one_line",
    "tests/unit/test_config_spec.py::test_a_start_reports_every_problem_with_the_file",
    "tests/unit/test_doc_examples.py::test_yaml_loads_as_a_server_config_or_a_subagent",
    "tests/unit/test_typed_bus.py::test_mypy_refuses",
)


@pytest.hookimpl(tryfirst=True)  # (before `-m` selects)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        for group, prefixes in HEAVY.items():
            if item.nodeid.startswith(prefixes):
                item.add_marker(pytest.mark.xdist_group(group))
        if item.nodeid.startswith(SLOW):
            item.add_marker(pytest.mark.slow)


def pytest_configure(config: pytest.Config) -> None:
    config.pluginmanager.register(_Autojump(), "orchestrator-autojump")


class _Autojump:
    """Gives the tests marked `autojump` their clock (tests/memory_server.py): after
    pytest-trio has marked every async test with its own runner."""

    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(self, items: list[pytest.Item]) -> None:
        from tests.memory_server import autojump_run

        for item in items:
            if item.get_closest_marker("autojump") is not None:
                item.add_marker(pytest.mark.trio(run=autojump_run), append=False)


@pytest.fixture(autouse=True)
def _no_process_in_the_fast_tier(request: pytest.FixtureRequest) -> Iterator[None]:
    """Under `-m "not slow"`, a test that starts a process fails: it belongs in SLOW."""
    import subprocess

    if "not slow" not in (request.config.option.markexpr or ""):
        yield
        return

    def refused(self: Any, *args: Any, **kwargs: Any) -> None:
        raise AssertionError(
            f"{request.node.nodeid} starts a process: name it in tests/conftest.py SLOW"
        )

    patch = pytest.MonkeyPatch()
    patch.setattr(subprocess.Popen, "__init__", refused)
    yield
    patch.undo()


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
