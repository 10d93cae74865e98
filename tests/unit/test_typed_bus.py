"""Each event type takes its own payload at the bus too: the `Emitter`'s overloads
(agents/emitter.py) reach every producer that holds a `Bus`, so mypy refuses a payload
that is not its type's (issue 45: they stopped at the bus, whose methods took any
mapping)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.helpers import REPO

PRODUCER = """\
from orchestrator.core.bus import Bus
from orchestrator.core.events import EventType


def produce(bus: Bus) -> None:
    bus.emit_nowait(EventType.AGENT_STARTED, {"agentId": "critic", "task": "review"})
    bus.emit_nowait(EventType.AGENT_STARTED, {"agentId": "critic"})
    bus.offer(EventType.USER_MESSAGE, {"text": "hi", "from": "ann"})
    bus.offer(EventType.USER_MESSAGE, {"txt": "hi", "from": "ann"})
    bus.emit_any(EventType.USER_MESSAGE, {"anything": 1})
"""


def test_mypy_refuses_a_payload_that_is_not_its_types(tmp_path: Path) -> None:
    source = tmp_path / "producer.py"
    source.write_text(PRODUCER, encoding="utf-8")
    checked = subprocess.run(
        [
            sys.executable,
            "-m",
            "mypy",
            "--strict",
            "--cache-dir",
            str(tmp_path / "cache"),
            str(source),
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
    )
    refused = sorted(
        int(line.split(":")[1]) for line in checked.stdout.splitlines() if ": error:" in line
    )
    assert refused == [7, 9], checked.stdout
