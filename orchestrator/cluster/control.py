"""What a worker does with a control request of a run it executes (`cancel`, `send`,
`approve`, written by any gateway to the run's control stream).

`again`: an earlier owner of the run applied the request already (the worker took
the run over and reads its control stream from the start). Cancels and answers are
applied again — both are idempotent, and that owner may have stopped before their
effect was journaled — messages are not: a message is delivered at most once.
"""

from __future__ import annotations

import logging

import trio

from orchestrator.cluster.store import ApproveControl, CancelControl, Control, SendControl
from orchestrator.core.approvals import Answer
from orchestrator.runs.host import RunHost
from orchestrator.runs.service import AgentNotRunning
from orchestrator.runtime.approvals import ApprovalError

__all__ = ["apply_control"]

logger = logging.getLogger(__name__)


async def apply_control(
    host: RunHost, nursery: trio.Nursery, run_id: str, control: Control, *, again: bool
) -> None:
    """Apply one control request to the run here (errors are logged, not raised)."""
    match control:
        case CancelControl(agent_key=agent_key, reason=reason):
            try:
                await host.cancel(run_id, agent_key, reason)
            except (AgentNotRunning, LookupError) as exc:
                log = logger.debug if again else logger.warning
                log("run %s: cancel not applied: %s", run_id, exc)
        case ApproveControl(answer=answer):
            # One of a remote subtree may take a round trip to its server: it does not
            # hold up the other controls.
            nursery.start_soon(_approve, host, run_id, answer, again)
        case SendControl(agent_key=agent_key, message=message) if not again:
            try:
                await host.send(run_id, agent_key, message)
            except (AgentNotRunning, LookupError) as exc:
                logger.warning("run %s: message not delivered: %s", run_id, exc)


async def _approve(host: RunHost, run_id: str, answer: Answer, again: bool) -> None:
    """An answer a gateway checked and claimed: give it to the waiting call (or to the
    server it waits on, for a call of a remote subtree), without checking it again."""
    try:
        if run_id not in host.active:
            raise ApprovalError("not_found", "the run is not running here")
        await host.approve(run_id, answer, checked=True)
    except LookupError as exc:  # (ApprovalError, UnknownRun)
        log = logger.debug if again else logger.warning
        log("run %s: approval not applied: %s", run_id, exc)
