"""A thread's words shared by the protocol, the runs and the doors (docs/threads.md)."""

from __future__ import annotations

import uuid
from typing import Literal

import msgspec

from agents.errors import OrchestratorError

__all__ = [
    "MAX_THREAD_ID",
    "MULTITASK",
    "Multitask",
    "Policy",
    "ThreadAsk",
    "ThreadError",
    "agent_id_of",
    "new_thread_id",
]

Multitask = Literal["reject", "enqueue", "interrupt", "rollback", "steer"]
"""What a new input of a thread does while one of its runs runs: refused (`reject`),
started when that run ends (`enqueue`), started after cancelling it, from the
conversation so far (`interrupt`) or from before it (`rollback`), or delivered into
its root as a message (`steer`)."""
MAX_THREAD_ID = 256
"""Longest thread id a client may choose (AG-UI and A2A clients choose their own)."""


class Policy(msgspec.Struct, frozen=True, kw_only=True):
    """What one `Multitask` value does while a run of the thread runs."""

    refuses: bool = False
    """No run: the input is refused (`limit_exceeded`)."""
    delivers: bool = False
    """No run: the input is delivered into the running run's root as a message."""
    queues: bool = False
    """A run that starts once the running run (and the runs queued before it) ended."""
    stops: bool = False
    """The running run and the runs queued behind it end (`cancelled`) first."""
    rolls_back: bool = False
    """The new run goes on from the conversation before the running run's."""


MULTITASK: dict[Multitask, Policy] = {
    "reject": Policy(refuses=True),
    "steer": Policy(delivers=True),
    "enqueue": Policy(queues=True),
    "interrupt": Policy(stops=True),
    "rollback": Policy(stops=True, rolls_back=True),
}
"""The multitask policy, as one table: the single server (`runs/thread_inputs.py`) and
a cluster's gateways (`cluster/threads.py`) both act on it."""


class ThreadError(OrchestratorError, LookupError):
    """A thread or its agent cannot be continued as asked (`code`: `not_found` or
    `bad_request`)."""

    def __init__(self, code: Literal["not_found", "bad_request"], message: str) -> None:
        super().__init__(message, code=code)


class ThreadAsk(msgspec.Struct, frozen=True, kw_only=True):
    """What a client asked of a new run's thread."""

    thread_id: str | None = None
    """The thread (None: a new one)."""
    agent_key: str | None = None
    """Continue this agent of the thread's run `from_run` instead of the thread's root."""
    from_run: str | None = None
    """The run of `agent_key` (None: the thread's newest)."""
    multitask: Multitask = "reject"


def new_thread_id() -> str:
    """`thread-<32 hex>`: the id of a thread the server makes."""
    return f"thread-{uuid.uuid4().hex}"


def agent_id_of(agent_key: str) -> str | None:
    """The agentId inside an agentKey (`agent:<agentId>:<uuid>`; None: not one)."""
    head, _, rest = agent_key.partition(":")
    agent_id, sep, _ = rest.rpartition(":")
    return agent_id if head == "agent" and sep and agent_id else None
