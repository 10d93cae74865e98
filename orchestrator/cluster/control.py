"""What a worker does with a control request of a run it executes (`cancel`, `send`,
`approve`, written by any gateway to the run's control stream).

`again`: an earlier owner of the run applied the request already (the worker took
the run over and reads its control stream from the start). Every request is applied
again — that owner may have stopped before its effect was journaled: a cancel or an
answer is idempotent, and a message carries its request's id into its USER_MESSAGE
(`control`), so one the journal shows is not delivered twice. A request for an agent
the new owner has not rebuilt yet waits for it (`Continuation.waiting`).
"""

from __future__ import annotations

import logging

import trio

from agents.core.attachments import from_infos
from orchestrator.cluster.store import ApproveControl, CancelControl, Control, SendControl
from orchestrator.core.approvals import Answer
from orchestrator.runs.host import RunHost
from orchestrator.runs.service import AgentNotRunning
from orchestrator.runtime.approvals import ApprovalError

__all__ = ["apply_control"]

logger = logging.getLogger(__name__)


async def apply_control(
    host: RunHost,
    nursery: trio.Nursery,
    run_id: str,
    entry_id: str,
    control: Control,
    *,
    again: bool,
) -> None:
    """Apply one control request (`entry_id` in the run's control stream) to the run
    here (errors are logged, not raised)."""
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
        case SendControl(agent_key=agent_key, message=message, attachments=named):
            try:
                blobs = await host.journal.storage.get_blobs([a["id"] for a in named])
                given = from_infos(named, blobs)
                await host.send(run_id, agent_key, message, given, control=entry_id)
            except (AgentNotRunning, LookupError) as exc:
                log = logger.debug if again else logger.warning
                log("run %s: message not delivered: %s", run_id, exc)


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
