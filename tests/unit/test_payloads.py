"""One typed payload per event type, stated once (agents/core/payloads.py): the docs
say the same, and every consumer of events says which types it handles and which
it leaves aside, so a new type cannot be missed by one of them."""

from __future__ import annotations

import ast
import re
from pathlib import Path
from types import ModuleType
from typing import Any, TypeGuard

import pytest

from agents.core import replay
from agents.core.events import EventType
from agents.core.payloads import PAYLOADS
from orchestrator.a2a import mapping as a2a_mapping
from orchestrator.agui import mapping as agui_mapping
from orchestrator.cli import approver
from orchestrator.cluster import gateway
from orchestrator.core import blocks, rebuild, stalls, tree
from orchestrator.mcp import expose
from orchestrator.runtime import remote
from orchestrator.server import agui_http
from orchestrator.telemetry import trace
from tests.helpers import REPO

CONSUMERS: list[ModuleType] = [
    tree,
    rebuild,
    stalls,
    agui_mapping,
    a2a_mapping,
    trace,
    replay,
    blocks,
    approver,
    remote,
    expose,
    gateway,
    agui_http,
]
"""Every Python module that reads runs' events by type (the console's, js/src/tree.ts: below)."""
LIFECYCLE = {
    "orchestrator/storage/journal.py": {"RunFinishedData"},
    "orchestrator/storage/runlog.py": {"RunFinishedData"},
    "orchestrator/runtime/engine.py": {"RunStartedData"},
    "orchestrator/core/fork.py": {"RunStartedData"},
    "orchestrator/runs/threads.py": {"AgentStartedData", "RunFinishedData"},
    "orchestrator/cli/mcp_serve.py": {"RunFinishedData", "RunStartedData"},
}
"""Modules that read only a run's start or end (its status, its agent and input), or
an agent's start (what a thread's earlier agents were asked), as a journal, a fork
and a thread must: not consumers of the tree's events."""
GENERIC = {"orchestrator/core/capping.py": "cuts any payload by its values' sizes"}
"""Modules that read any payload alike, whatever its type, and why."""


def test_every_event_type_has_a_payload() -> None:
    assert set(PAYLOADS) == set(EventType)


def shapes_in_docs() -> dict[str, list[dict[str, bool]]]:
    """docs/events.md's type table: each type's payload shapes, key → optional."""
    text = (REPO / "docs/events.md").read_text(encoding="utf-8")
    found: dict[str, list[dict[str, bool]]] = {}
    for line in text.splitlines():
        row = re.match(r"\| `([A-Z_]+)` \| (.*?) \| ", line)
        if row is None:
            continue
        column = row.group(2).split(" (")[0]
        found[row.group(1)] = [
            {
                m.group(1): bool(m.group(2))
                for part in shape.split(",")
                if (m := re.match(r"\s*([A-Za-z]+)(\?)?", part))
            }
            for shape in re.findall(r"`\{([^}]*)\}`", column)
        ]
    return found


def shape_of(payload: Any) -> dict[str, bool]:
    return {
        **dict.fromkeys(payload.__required_keys__, False),
        **dict.fromkeys(payload.__optional_keys__, True),
    }


@pytest.mark.parametrize("kind", list(EventType), ids=str)
def test_the_docs_table_says_what_each_payload_holds(kind: EventType) -> None:
    """Each shape the docs give is the payload's (a type with one payload and two
    shapes in the docs, RUN_RESUMED: a key in only one shape is optional)."""
    documented = shapes_in_docs()[kind.value]
    payloads = PAYLOADS[kind]
    if len(payloads) == len(documented):
        assert sorted(map(sorted, documented)) == sorted(sorted(shape_of(p)) for p in payloads), (
            kind
        )
        for shape in documented:
            (payload,) = [p for p in payloads if set(shape_of(p)) == set(shape)]
            assert shape == shape_of(payload), kind
        return
    (payload,) = payloads
    keys = set().union(*documented)
    merged = {key: any(shape.get(key, True) for shape in documented) for key in sorted(keys)}
    assert merged == shape_of(payload), kind


@pytest.mark.parametrize("module", CONSUMERS, ids=lambda m: m.__name__)
def test_every_consumer_names_every_type(module: ModuleType) -> None:
    handles, ignores = module.HANDLES, module.IGNORES
    assert not handles & ignores, module.__name__
    assert handles | ignores == set(EventType), (
        f"{module.__name__} says nothing of {sorted(set(EventType) - handles - ignores)}: "
        "add each to its HANDLES (and handle it) or to its IGNORES"
    )


@pytest.mark.parametrize("module", CONSUMERS, ids=lambda m: m.__name__)
def test_a_consumer_handles_every_type_its_code_reads(module: ModuleType) -> None:
    """An `EventType.X` in a consumer's code (outside its IGNORES) is in its HANDLES."""
    assert module.__file__ is not None
    source = Path(module.__file__).read_text(encoding="utf-8")
    tree_ = ast.parse(source)
    read = set()
    for node in ast.walk(tree_):
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "IGNORES" for t in node.targets
        ):
            node.value = ast.Constant(None)  # its own list is not a read
    for node in ast.walk(tree_):
        if (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id == "EventType"
        ):
            read.add(EventType(node.attr))
    assert read <= module.HANDLES, sorted(read - module.HANDLES)


def js_list(source: str, name: str) -> set[str]:
    match = re.search(rf"export const {name}(?:: [^=]+)? = \[(.*?)\];", source, re.S)
    assert match is not None, name
    return set(re.findall(r'"([A-Z_]+)"', match.group(1)))


@pytest.mark.parametrize("path", ["js/src/tree.ts"])
def test_the_js_tree_models_name_every_type_and_handle_what_they_say(path: str) -> None:
    source = (REPO / path).read_text(encoding="utf-8")
    handles, ignores = js_list(source, "HANDLES"), js_list(source, "IGNORES")
    every = {kind.value for kind in EventType}
    assert not handles & ignores
    assert handles | ignores == every, sorted(every - handles - ignores)
    assert set(re.findall(r'case "([A-Z_]+)"', source)) == handles


def test_the_payload_check_catches_a_drifting_producer() -> None:
    from orchestrator.core.events import Event
    from tests.payload_check import PayloadMismatch, check

    def event(kind: EventType, data: dict[str, Any], last: bool = False) -> Event:
        return Event("run-1", 1, 0.0, kind, None, last, data)

    check(
        event(
            EventType.TOOL_RESULT,
            {"toolCallId": "c", "name": "f", "content": "x", "isError": False},
        )
    )
    check(event(EventType.REASONING, {"delta": "hi"}))
    check(event(EventType.REASONING, {"text": "", "toolCalls": [], "finishReason": "stop"}, True))
    with pytest.raises(PayloadMismatch, match="lacks \\['isError'\\]"):
        check(event(EventType.TOOL_RESULT, {"toolCallId": "c", "name": "f", "content": "x"}))
    with pytest.raises(PayloadMismatch, match="has \\['colour'\\]"):
        check(event(EventType.REASONING, {"delta": "hi", "colour": "red"}))
    with pytest.raises(PayloadMismatch, match="Expected `str`"):
        check(event(EventType.USER_MESSAGE, {"text": 1, "from": "client"}))


def _python_modules() -> list[Path]:
    return sorted([*(REPO / "agents").rglob("*.py"), *(REPO / "orchestrator").rglob("*.py")])


def _link(tree_: ast.AST) -> None:
    for node in ast.walk(tree_):
        for child in ast.iter_child_nodes(node):
            child._parent = node  # type: ignore[attr-defined]


def _is_data(node: ast.AST) -> TypeGuard[ast.Attribute]:
    return (
        isinstance(node, ast.Attribute) and node.attr == "data" and isinstance(node.ctx, ast.Load)
    )


def _keys_read(use: ast.AST) -> bool:
    """`x.get(…)`, `x[…]`, `… in x`: a read of `x`'s keys."""
    parent = getattr(use, "_parent", None)
    if isinstance(parent, (ast.Attribute, ast.Subscript)) and parent.value is use:
        return True
    return isinstance(parent, ast.Compare) and use in parent.comparators


def untyped_reads(path: Path) -> list[int]:
    """Lines that read keys of an event's `data` as a plain dict: `event.data.get(…)`,
    `event.data[…]`, `… in event.data`, or the same of a local name assigned from it
    (`data = event.data`), instead of through the type's payload (`cast(XData, …)`)."""
    tree_ = ast.parse(path.read_text(encoding="utf-8"))
    _link(tree_)
    lines = [node.lineno for node in ast.walk(tree_) if _is_data(node) and _keys_read(node)]
    for function in ast.walk(tree_):
        if not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        names = set()
        for node in ast.walk(function):
            if not isinstance(node, ast.Assign):
                continue
            target, value = node.targets[0], node.value
            pairs = (
                zip(target.elts, value.elts, strict=False)
                if isinstance(target, ast.Tuple) and isinstance(value, ast.Tuple)
                else [(target, value)]
            )
            names |= {t.id for t, v in pairs if isinstance(t, ast.Name) and _is_data(v)}
        lines += [
            node.lineno
            for node in ast.walk(function)
            if isinstance(node, ast.Name)
            and node.id in names
            and isinstance(node.ctx, ast.Load)
            and _keys_read(node)
        ]
    return sorted(set(lines))


def test_no_module_reads_an_events_data_as_an_untyped_dict() -> None:
    """`agents` sees events' data only through the Emitter and `replay`; its other
    `.data` are SSE events' text."""
    readers = [*(REPO / "orchestrator").rglob("*.py"), REPO / "agents/core/replay.py"]
    found = {
        name: lines
        for path in sorted(readers)
        if (name := str(path.relative_to(REPO))) not in GENERIC and (lines := untyped_reads(path))
    }
    assert found == {}, "read it through its payload type: cast(XData, event.data)"


def test_the_untyped_read_check_finds_what_it_looks_for(tmp_path: Path) -> None:
    source = tmp_path / "reader.py"
    source.write_text(
        "def f(event):\n"
        "    a = event.data.get('x')\n"
        "    kind, data = event.type, event.data\n"
        "    if 'delta' in data:\n"
        "        return data['delta']\n"
        "    return cast(RunFinishedData, event.data).get('status')\n",
        encoding="utf-8",
    )
    assert untyped_reads(source) == [2, 4, 5]


def test_every_module_that_reads_a_payload_is_a_registered_consumer() -> None:
    """A module that reads an event's data through its payload type reads events by
    type: it says which it handles (CONSUMERS), unless it reads only a run's start or
    end (LIFECYCLE, with exactly those payloads)."""
    registered = {str(Path(m.__file__ or "").relative_to(REPO)) for m in CONSUMERS}
    for path in _python_modules():
        name = str(path.relative_to(REPO))
        read = set(re.findall(r"cast\(\s*(\w+Data)\b", path.read_text(encoding="utf-8")))
        if not read or name in registered:
            continue
        assert name in LIFECYCLE, f"{name} reads {sorted(read)}: add it to CONSUMERS"
        assert read == LIFECYCLE[name], name
