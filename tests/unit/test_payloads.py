"""One typed payload per event type, stated once (agents/core/payloads.py): the docs
say the same, and every consumer of events says which types it handles and which
it leaves aside, so a new type cannot be missed by one of them."""

from __future__ import annotations

import ast
import re
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from agents.core.events import EventType
from agents.core.payloads import PAYLOADS
from orchestrator.a2a import mapping as a2a_mapping
from orchestrator.agui import mapping as agui_mapping
from orchestrator.core import rebuild, stalls, tree
from orchestrator.telemetry import trace
from tests.helpers import REPO

CONSUMERS: list[ModuleType] = [tree, rebuild, stalls, agui_mapping, a2a_mapping, trace]
"""Every Python module that reads runs' events by type (the console's model.js below)."""


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
    match = re.search(rf"export const {name} = \[(.*?)\];", source, re.S)
    assert match is not None, name
    return set(re.findall(r'"([A-Z_]+)"', match.group(1)))


def test_the_console_model_names_every_type_and_handles_what_it_says() -> None:
    source = (REPO / "orchestrator/server/static/model.js").read_text(encoding="utf-8")
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
