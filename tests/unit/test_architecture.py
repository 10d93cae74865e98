"""The layering holds: `agents` never imports `orchestrator`; cores stay sans-I/O;
one context variable; the public face exports what the README uses."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import orchestrator
from tests.helpers import REPO

IO_LIBRARIES = {"trio", "websockets", "httpx", "sqlite3", "socket", "coredis", "asyncio"}


def modules(package: str) -> list[Path]:
    return sorted((REPO / package).rglob("*.py"))


def imported_roots(path: Path) -> set[str]:
    roots = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            roots |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            roots.add(node.module.split(".")[0])
    return roots


@pytest.mark.parametrize("path", modules("agents"), ids=lambda p: str(p.relative_to(REPO)))
def test_agents_never_imports_orchestrator(path: Path) -> None:
    assert "orchestrator" not in imported_roots(path)


@pytest.mark.parametrize(
    "path",
    [*modules("agents/core"), *modules("orchestrator/core")],
    ids=lambda p: str(p.relative_to(REPO)),
)
def test_cores_are_sans_io(path: Path) -> None:
    assert not imported_roots(path) & IO_LIBRARIES


def test_one_context_variable() -> None:
    found = [
        str(path.relative_to(REPO))
        for package in ("agents", "orchestrator")
        for path in modules(package)
        if "ContextVar(" in path.read_text(encoding="utf-8")
    ]
    assert found == ["orchestrator/core/bus.py"]


def test_the_public_face() -> None:
    for name in orchestrator.__all__:
        assert getattr(orchestrator, name) is not None
    assert {"Orchestrator", "RunStream", "RunResult", "load_config", "serve", "Event"} <= set(
        orchestrator.__all__
    )
