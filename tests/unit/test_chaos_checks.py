"""The chaos run's checks find what they are for (`tests/chaos.py::check_run`).

A chaos run that reports nothing is only worth something if each check fails on the
fault it names: a lost or repeated event, an agent started or ended twice, a second
result for a call, a write that ran twice or against its decision, a run that ended
for an undocumented reason, and `runs` disagreeing with the journal.
"""

from __future__ import annotations

import collections
import copy
from typing import Any

from tests.chaos import Watched, check_run

WRITER = {"agentKey": "agent:writer:1", "agentId": "writer"}


def event(seq: int, kind: str, source: dict[str, Any] | None = None, **data: Any) -> dict[str, Any]:
    return {"seq": seq, "type": kind, "source": source, "last": True, "data": data}


def story(decision: str = "approve", wrote: bool = True) -> list[dict[str, Any]]:
    """A boss run whose writer asked, got `decision`, and (maybe) wrote."""
    events = [
        event(1, "RUN_STARTED", agentId="boss", input="boss-1"),
        event(2, "AGENT_STARTED", WRITER, agentId="writer", task="boss-1"),
        event(3, "APPROVAL_REQUESTED", WRITER, toolCallId="call_0", name="write_file"),
        event(4, "APPROVAL_RESOLVED", WRITER, toolCallId="call_0", decision=decision),
        event(5, "TOOL_RESULT", WRITER, toolCallId="call_0", name="write_file", isError=not wrote),
        event(6, "AGENT_RESULT", WRITER, text="wrote"),
        event(7, "AGENT_RESULT", None, text="ok"),
        event(8, "RUN_FINISHED", None, status="completed"),
    ]
    return events


def watched(events: list[dict[str, Any]], status: str = "completed") -> Watched:
    return Watched("run-1", "boss", "boss-1", events=copy.deepcopy(events), status=status)


def renumbered(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Copies of `events` with seqs 1..n (the journal of another story)."""
    out = copy.deepcopy(events)
    for seq, e in enumerate(out, 1):
        e["seq"] = seq
    return out


RECORD = {"runId": "run-1", "status": "completed", "attempt": 1}


def problems(
    events: list[dict[str, Any]],
    seen: Watched | None = None,
    record: dict[str, Any] | None = RECORD,
    lines: int = 1,
) -> list[str]:
    written = collections.Counter({"boss-1": lines})
    return check_run(seen or watched(events), events, record, written)


def test_a_clean_run_has_no_problem() -> None:
    assert problems(story()) == []
    assert problems(story("deny", wrote=False), lines=0) == []
    # Approved, its worker died before the result: it may or may not have run once.
    interrupted = story(wrote=False)
    assert problems(interrupted, lines=0) == [] and problems(interrupted, lines=1) == []


def test_each_fault_is_found() -> None:
    events = story()
    assert any("in the file 2x" in p for p in problems(events, lines=2))
    assert any("in the file 0x" in p for p in problems(events, lines=0))
    assert any("decision deny" in p for p in problems(story("deny", wrote=False), lines=1))
    assert any("in the file 2x" in p for p in problems(story(wrote=False), lines=2))

    lost = watched(events)
    del lost.events[3]
    lost.lost = 1
    found = problems(events, lost)
    assert any("watcher lost 1" in p for p in found)
    assert any("the watcher saw 7 events" in p for p in found)

    twice = renumbered([*events[:6], event(0, "AGENT_STARTED", WRITER), *events[6:]])
    assert any("agents started twice" in p for p in problems(twice))
    two_results = renumbered([*events[:5], events[4], *events[5:]])
    assert any("two results" in p for p in problems(two_results))

    failed = copy.deepcopy(events)
    failed[-1]["data"] = {"status": "failed", "errorType": "internal", "error": "boom"}
    assert any("ended failed" in p for p in problems(failed, watched(failed, "failed")))
    lost_worker = copy.deepcopy(events)
    lost_worker[-1]["data"] = {"status": "failed", "errorType": "worker_lost", "error": "…"}
    assert (
        problems(lost_worker, watched(lost_worker, "failed"), {**RECORD, "status": "failed"}) == []
    )

    assert any(
        "`runs` says running" in p for p in problems(events, None, {**RECORD, "status": "running"})
    )
    resumed = renumbered([*events[:3], event(0, "RUN_RESUMED", None, attempt=2), *events[3:]])
    assert any("after 1 RUN_RESUMED" in p for p in problems(resumed))
    assert any("not listed" in p for p in problems(events, None, None))
    assert any("no RUN_FINISHED" in p for p in problems(events[:-1], watched(events[:-1], "")))
