"""One name and one room per concept (issue 58): checks that read the code."""

from __future__ import annotations

import ast
import tomllib
from pathlib import Path

from tests.helpers import REPO


def classes_named(name: str) -> list[str]:
    found = []
    for package in ("agents", "orchestrator"):
        for path in (REPO / package).rglob("*.py"):
            tree = ast.parse(path.read_text(encoding="utf-8"))
            found += [
                str(path.relative_to(REPO))
                for node in ast.walk(tree)
                if isinstance(node, ast.ClassDef) and node.name == name
            ]
    return found


def test_answer_is_one_concept() -> None:
    assert classes_named("Answer") == ["orchestrator/core/approvals.py"]


def test_the_mcp_bridge_reads_events_through_the_typed_client() -> None:
    """No event type compared as a string, no raw frame read: `Client` and `EventType`."""
    source = (REPO / "orchestrator/cli/mcp_serve.py").read_text(encoding="utf-8")
    tree = ast.parse(source)
    strings = {
        node.value
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str)
    }
    assert not strings & {"RUN_STARTED", "RUN_FINISHED", "events", "end", "ack", "op"}
    assert "json.loads" not in source and "websockets" not in source


def test_docstring_rules_are_on() -> None:
    lint = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["ruff"]
    assert "D" in lint["lint"]["select"]
    assert lint["lint"]["pydocstyle"]["convention"] == "google"


def test_the_multitask_policy_is_one_table_both_hosts_read() -> None:
    from typing import get_args

    from orchestrator.core.threads import MULTITASK, Multitask

    assert set(MULTITASK) == set(get_args(Multitask))
    for name, policy in MULTITASK.items():
        kinds = [policy.refuses, policy.delivers, policy.queues, policy.stops]
        assert sum(kinds) == 1, name  # each does one thing
        assert not policy.rolls_back or policy.stops, name
    compared = [
        str(path.relative_to(REPO))
        for path in (REPO / "orchestrator").rglob("*.py")
        if "multitask ==" in (text := path.read_text(encoding="utf-8")) or "multitask in (" in text
    ]
    assert compared == []


def test_the_approval_desk_has_one_way_in() -> None:
    from orchestrator.runtime.approvals import ApprovalDesk

    ways_in = [name for name in vars(ApprovalDesk) if name.startswith("answer")]
    assert ways_in == ["answer"]


def test_no_protocol_type_is_named_like_a_domain_class() -> None:
    """An op or a frame of the wire never shares its name with a class of the domain
    (`protocol.ThreadsOp` beside `runs.threads.Threads`)."""
    wire = {name for name in classes_in(REPO / "orchestrator/protocol.py")}
    domain: dict[str, str] = {}
    for folder in ("core", "runs", "runtime", "storage", "cluster"):
        for path in (REPO / "orchestrator" / folder).rglob("*.py"):
            for name in classes_in(path):
                domain[name] = str(path.relative_to(REPO))
    assert {name: domain[name] for name in wire & set(domain)} == {}


def classes_in(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return [n.name for n in tree.body if isinstance(n, ast.ClassDef) and not n.name.startswith("_")]
