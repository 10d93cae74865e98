"""The layering holds: `agents` never imports `orchestrator`; cores stay sans-I/O;
one context variable; the public face exports what the README uses."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
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


# -- layers: the packages of orchestrator/ and who may import whom ------------------

ORCH = REPO / "orchestrator"


def unit_of(module: str) -> str | None:
    """The layer a dotted module name belongs to: `core`, `storage`, `config`, …
    (None: outside `orchestrator`). The package itself is its public face."""
    parts = module.split(".")
    if parts[0] != "orchestrator":
        return None
    if len(parts) == 1:
        return "orchestrator"
    return parts[1]


def module_name(path: Path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imported_units(path: Path) -> set[str]:
    """Layers `path` imports: every import anywhere in the file (inside functions and
    under TYPE_CHECKING too), relative ones resolved, `from orchestrator import x`
    counted as the module `x` when it is one."""
    here = module_name(path)
    package = here if path.name == "__init__.py" else here.rpartition(".")[0]
    units: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, *([base] if base else [])])
            names = [base]
            if base == "orchestrator":  # `from orchestrator import protocol`
                names = [
                    f"orchestrator.{alias.name}"
                    if (ORCH / alias.name).is_dir() or (ORCH / f"{alias.name}.py").exists()
                    else "orchestrator"
                    for alias in node.names
                ]
        for name in names:
            unit = unit_of(name)
            if unit is not None:
                units.add(unit)
    return units


def layer_graph() -> dict[str, set[str]]:
    """Layer → the other layers its files import."""
    graph: dict[str, set[str]] = {}
    for path in sorted(ORCH.rglob("*.py")):
        unit = unit_of(module_name(path))
        assert unit is not None
        graph.setdefault(unit, set()).update(imported_units(path) - {unit})
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one node (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for nxt in graph.get(node, ()):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_no_import_cycle_between_packages() -> None:
    graph = layer_graph()
    assert cycles(graph) == [], {a: sorted(b) for a, b in graph.items()}


def test_the_cycle_finder_finds_cycles() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def documented_layers() -> dict[str, set[str]]:
    """The table in docs/architecture.md: `| folder | owns | may import |`."""
    text = (REPO / "docs" / "architecture.md").read_text(encoding="utf-8")
    allowed: dict[str, set[str]] = {}
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 3 or not cells[0].startswith("`orchestrator"):
            continue
        dotted = cells[0].strip("`").rstrip("/").removesuffix(".py").replace("/", ".")
        unit = unit_of(dotted.removesuffix(".__init__"))
        assert unit is not None
        allowed[unit] = {
            unit_of(f"orchestrator.{name.strip('` ')}") or ""
            for name in cells[2].split(",")
            if name.strip() not in ("", "—")
        }
    return allowed


def test_every_import_is_one_the_architecture_doc_allows() -> None:
    allowed = documented_layers()
    graph = layer_graph()
    assert set(allowed) == set(graph), "docs/architecture.md lists every layer of orchestrator/"
    wrong = {unit: sorted(graph[unit] - allowed[unit]) for unit in graph}
    assert {unit: extra for unit, extra in wrong.items() if extra} == {}


_ENTRY = re.compile(r"  ([\w/]+(?:\.py|/)(?:, [\w/]+\.py)*)(?:\s|$)")
"""An entry of the module list: two spaces in, a path (or a folder, or a file and its
siblings: `storage/memory.py, sqlite.py, redis.py`), then what it holds."""


def documented_modules() -> tuple[set[str], set[str]]:
    """The files and folders docs/architecture.md's module list names (`Modules`),
    as paths from the repository root."""
    doc = (REPO / "docs" / "architecture.md").read_text(encoding="utf-8")
    block = doc.split("## Modules", 1)[1].split("```text\n", 1)[1].split("```", 1)[0]
    files: set[str] = set()
    folders: set[str] = set()
    root = ""
    for line in block.splitlines():
        if line and not line.startswith(" "):  # `orchestrator/`, `agents/`
            root = line.strip()
            continue
        entry = _ENTRY.match(line)
        if entry is None:
            continue  # a description's next line
        names = [n.strip() for n in entry.group(1).split(",")]
        first = root + names[0]
        where = first.rsplit("/", 1)[0] if not first.endswith("/") else first.rstrip("/")
        for n, name in enumerate(names):
            path = first if n == 0 else f"{where}/{name}"
            (folders if path.endswith("/") else files).add(path.rstrip("/"))
    return files, folders


def test_the_module_list_names_every_module() -> None:
    """Regression: the list lacked six `server/` files and whole packages."""
    files, folders = documented_modules()
    missing = [
        name
        for package in ("agents", "orchestrator")
        for path in modules(package)
        if (name := str(path.relative_to(REPO))) not in files
        and not any(name.startswith(folder + "/") for folder in folders)
        and not (path.name == "__init__.py" and name != "orchestrator/__init__.py")
    ]
    assert missing == []
    stale = sorted(f for f in files if not (REPO / f).is_file())
    assert stale == []


def test_the_picture_shows_every_package() -> None:
    doc = (REPO / "docs" / "architecture.md").read_text(encoding="utf-8")
    picture = doc.split("```text\n", 1)[1].split("```", 1)[0]
    packages = sorted(
        p.name for p in (REPO / "orchestrator").iterdir() if (p / "__init__.py").is_file()
    )
    shown = [p for p in packages if f"orchestrator.{p}" in picture or f"o.{p}" in picture]
    assert shown == packages
    assert "client" in picture  # orchestrator/client.py, a layer of its own


def test_every_door_is_a_setting_with_its_own_prefix() -> None:
    from orchestrator.config import ServerSection
    from orchestrator.server.doors import DOORS
    from orchestrator.server.front import ENDPOINT_SETTINGS

    prefixes = [door.prefix for door in DOORS]
    assert len(set(prefixes)) == len(prefixes)
    for door in DOORS:
        assert ServerSection.model_fields[door.setting].annotation is bool, door.setting
        assert ENDPOINT_SETTINGS[door.prefix] == f"server.{door.setting}"


MAX_CLASS_LINES = 400
MAX_FUNCTION_LINES = 80
LONG_ON_PURPOSE = "# Long on purpose:"
"""The comment, in the lines right above a class or function (or its decorators), that
says why it must be one piece."""


def oversized(source: str) -> list[tuple[str, int]]:
    """Classes over MAX_CLASS_LINES and functions over MAX_FUNCTION_LINES (name, lines)
    whose line above does not say why they are long on purpose."""
    lines = source.splitlines()
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ClassDef):
            limit = MAX_CLASS_LINES
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            limit = MAX_FUNCTION_LINES
        else:
            continue
        assert node.end_lineno is not None
        size = node.end_lineno - node.lineno + 1
        first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
        comment, at = [], first - 2
        while at >= 0 and lines[at].strip().startswith("#"):
            comment.append(lines[at].strip())
            at -= 1
        if size > limit and not any(line.startswith(LONG_ON_PURPOSE) for line in comment):
            found.append((node.name, size))
    return found


@pytest.mark.parametrize(
    "path",
    [*modules("agents"), *modules("orchestrator")],
    ids=lambda p: str(p.relative_to(REPO)),
)
def test_no_class_or_function_is_too_long_to_read(path: Path) -> None:
    """A change to one idea should not mean reading 900 lines: classes up to 400
    lines, functions up to 80, unless a comment above says why it must be one."""
    assert oversized(path.read_text(encoding="utf-8")) == []


def test_the_size_check_finds_a_long_function_and_takes_a_reason() -> None:
    body = "".join(f"    x{i} = {i}\n" for i in range(MAX_FUNCTION_LINES))
    assert oversized(f"def long():\n{body}") == [("long", MAX_FUNCTION_LINES + 1)]
    assert oversized(f"{LONG_ON_PURPOSE} a table,\n# one row a line\ndef long():\n{body}") == []
    assert oversized(f"{LONG_ON_PURPOSE} a table\n\ndef long():\n{body}") != []
    assert oversized(f"def short():\n{body[: body.index('x1')]}") == []


def module_graph(package: str) -> dict[str, set[str]]:
    """Module → the modules of `package` it imports (anywhere in the file, under
    TYPE_CHECKING too; `from a import b` counts the module `a.b` when it is one)."""
    modules = {module_name(path): path for path in (REPO / package).rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        here = name if path.name == "__init__.py" else name.rpartition(".")[0]
        found: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                found |= {alias.name for alias in node.names}
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = here.split(".")[: len(here.split(".")) - node.level + 1]
                    base = ".".join([*anchor, *([base] if base else [])])
                for alias in node.names:
                    full = f"{base}.{alias.name}"
                    found.add(full if full in modules else base)
        graph[name] = {m for m in found if m in modules and m not in (name, package)}
    return graph


@pytest.mark.parametrize("package", ["orchestrator", "agents"])
def test_no_import_cycle_between_modules(package: str) -> None:
    """No two modules need each other, not even for a type: a module that only needs
    a few things of another states them as a Protocol of its own (`server/ops.py`
    `Caller`, `server/endpoints.py` `DoorContext`, `storage/mirror.py`
    `MirroredJournal`, …) instead of importing the class that has them."""
    assert cycles(module_graph(package)) == []


def test_the_redis_client_loads_only_where_a_redis_journal_is_used() -> None:
    """Coredis is a quarter of a process's start (0.25 of ~0.8 s): the CLI and a
    server on SQLite or memory never import it."""
    code = (
        "import sys, orchestrator.cli.main, orchestrator.server.app\n"
        "assert 'coredis' not in sys.modules, sorted(m for m in sys.modules if 'coredis' in m)"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=REPO)


def test_how_a_run_goes_on_is_asked_in_one_place() -> None:
    """Whether a run goes on from its journal is the `Continuation`'s to know (a fresh
    run is an empty plan), whether events reach anyone is the bus's (a call's sink and
    bus are null objects): nobody else branches on either."""
    found = [
        f"{path.relative_to(REPO)}:{n}: {line.strip()}"
        for path in modules("orchestrator")
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if (
            (re.search(r"\bplan is (not )?None\b", line) and path.name != "continuation.py")
            or re.search(r"\bsink is (not )?None\b", line)
            or (re.search(r"isinstance\([^)]*\b(Bus|NullBus)\b", line) and path.name != "bus.py")
        )
    ]
    assert found == []
