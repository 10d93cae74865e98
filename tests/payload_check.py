"""Every event a test's run emits has its type's payload (agents/core/payloads.py).

`tests/conftest.py` wraps the two outlets events leave a run by (the in-process
queue and the journal's) so that each event of every in-process run in the suite is
checked: its keys are the payload's (the required ones present, no other), and each
value has the payload's type (`msgspec.convert`). Subprocess servers are not
checked here; their events are the same code's.
"""

from __future__ import annotations

from typing import Any

import msgspec

from agents.core.payloads import PAYLOADS, ReasoningDeltaData, ThinkingDeltaData, TurnEndData
from orchestrator.core.events import Event, EventType


class PayloadMismatch(AssertionError):
    """An event's data is not its type's payload."""


def payload_type(event: Event) -> type:
    """The payload an event must have (REASONING: by `last`, then by its one key)."""
    if event.type is EventType.REASONING:
        if event.last:
            return TurnEndData
        return ReasoningDeltaData if "delta" in event.data else ThinkingDeltaData
    (shape,) = PAYLOADS[event.type]
    return shape


def check(event: Event) -> None:
    """Raise `PayloadMismatch` unless `event.data` is its type's payload."""
    shape: Any = payload_type(event)
    keys = set(event.data)
    required, optional = set(shape.__required_keys__), set(shape.__optional_keys__)
    where = f"{event.type} (seq {event.seq}) of run {event.run_id}"
    if missing := required - keys:
        raise PayloadMismatch(f"{where} lacks {sorted(missing)}: {event.data!r}")
    if extra := keys - required - optional:
        raise PayloadMismatch(f"{where} has {sorted(extra)}, not in {shape.__name__}")
    try:
        msgspec.convert(event.data, shape)
    except msgspec.ValidationError as exc:
        raise PayloadMismatch(f"{where}: {exc}: {event.data!r}") from None
