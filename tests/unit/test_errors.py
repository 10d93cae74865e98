"""One error tree: every public exception of both packages is an `OrchestratorError`,
and each door shows it by its code from one table (orchestrator/errors.py)."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import pytest

import agents
import orchestrator
from orchestrator.core.threads import ThreadError
from orchestrator.errors import SHOWN, ErrorCode, OrchestratorError, Refused, http_status, shown
from orchestrator.runs.service import LimitExceeded, StorageUnavailable
from orchestrator.runtime.context import UnknownAgent
from orchestrator.storage.runlog import UnknownRun


def public_exceptions() -> dict[str, type[BaseException]]:
    found: dict[str, type[BaseException]] = {}
    for package in (agents, orchestrator):
        for info in pkgutil.walk_packages(package.__path__, package.__name__ + "."):
            if info.name.endswith("__main__"):
                continue
            module = importlib.import_module(info.name)
            for name, value in vars(module).items():
                if (
                    inspect.isclass(value)
                    and issubclass(value, BaseException)
                    and value.__module__ == info.name
                    and not name.startswith("_")
                ):
                    found[f"{info.name}.{name}"] = value
    return found


def test_every_public_exception_is_under_one_root() -> None:
    found = public_exceptions()
    assert len(found) >= 20
    outside = sorted(name for name, cls in found.items() if not issubclass(cls, OrchestratorError))
    assert outside == []


def test_every_code_has_one_row_and_each_family_shows_as_before() -> None:
    assert set(SHOWN) == set(ErrorCode.__args__)  # type: ignore[attr-defined]
    cases: list[tuple[OrchestratorError, str, int]] = [
        (UnknownAgent("x", []), "not_found", 404),
        (UnknownRun("run-1"), "not_found", 404),
        (ThreadError("bad_request", "no"), "bad_request", 400),
        (ThreadError("not_found", "no"), "not_found", 404),
        (LimitExceeded("too many"), "limit_exceeded", 429),
        (StorageUnavailable("down"), "unavailable", 503),
        (Refused(413, "too long"), "bad_request", 413),
    ]
    for error, ws, status in cases:
        assert (shown(error).ws, http_status(error)) == (ws, status), error


@pytest.mark.parametrize("code", sorted(SHOWN))
def test_a_plain_root_error_takes_its_code(code: str) -> None:
    error = OrchestratorError("why", code=code)
    assert shown(error) == SHOWN[code]
    assert error.message == str(error) == "why"
