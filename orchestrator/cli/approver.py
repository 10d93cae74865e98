"""`orchestrator run` answers the tool calls that wait for approval.

`--approve-all` and `--deny-all` answer at once (scripts). Otherwise, with stdin a
terminal, each waiting call is asked on it, one at a time (the run goes on while a
question waits); with stdin not a terminal and neither flag, each is denied with a
reason that says why, so a script never hangs.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Awaitable, Callable
from typing import Literal, cast

import msgspec
import trio
from rich.live import Live

from agents.core.payloads import ApprovalRequestedData
from orchestrator.core.events import Event, EventType
from orchestrator.runtime.approvals import ApprovalError
from orchestrator.runtime.engine import RunStream

__all__ = ["HANDLES", "IGNORES", "NO_TERMINAL", "TerminalApprover", "ask_terminal", "pausing"]

Mode = Literal["ask", "approve", "deny", "no-terminal"]
NO_TERMINAL = (
    "stdin is not a terminal, so nobody could be asked "
    "(run with --approve-all or --deny-all to decide for scripts)"
)


async def ask_terminal(question: str) -> str:
    """Print `question` on stderr and read one line from stdin (in a thread: trio has
    no portable non-blocking stdin; the thread is abandoned if the run ends first)."""
    print(question, end="", file=sys.stderr, flush=True)
    line: str = await trio.to_thread.run_sync(sys.stdin.readline, abandon_on_cancel=True)
    return line


def pausing(live: Live) -> Callable[[bool], None]:
    """The `pause` for a live tree: before a question the tree is erased (not left on
    screen above the question), after the answer it is drawn again below it — so the
    terminal shows each question with its answer, and one tree."""

    def pause(asking: bool) -> None:
        if asking:
            live.transient = True  # stop() erases what it drew
            live.stop()
            live.transient = False  # the tree left at the end of the run stays
        else:
            live.start(refresh=True)

    return pause


HANDLES = frozenset({EventType.APPROVAL_REQUESTED})
"""Event types the terminal approver reads: a call that waits for a person."""
IGNORES = frozenset(
    {
        EventType.RUN_STARTED,
        EventType.AGENT_STARTED,
        EventType.REASONING,
        EventType.TOOL_CALL_DELTA,
        EventType.TOOL_CALL,
        EventType.TOOL_RESULT,
        EventType.AGENT_RESULT,
        EventType.AGENT_ERROR,
        EventType.USER_MESSAGE,
        EventType.TOOL_PROGRESS,
        EventType.RUN_RESUMED,
        EventType.TURN_ABANDONED,
        EventType.APPROVAL_RESOLVED,
        EventType.COMPACTION_STARTED,
        EventType.COMPACTION_FINISHED,
        EventType.AGENT_STALLED,
        EventType.MODEL_FALLBACK,
        EventType.RUN_FINISHED,
    }
)
"""Event types it leaves aside (the live view shows them); tests/unit/test_payloads.py
checks that every type is in one of the two."""


class TerminalApprover:
    """Answers a run's APPROVAL_REQUESTED events (`see` them; `run` asks the questions)."""

    def __init__(
        self,
        stream: RunStream,
        mode: Mode,
        ask: Callable[[str], Awaitable[str]] = ask_terminal,
        *,
        pause: Callable[[bool], None] | None = None,
    ) -> None:
        self.stream = stream
        self.mode = mode
        self._ask = ask
        self.pause = pause
        """Called with True before a question and False after (stops a live display)."""
        self._send, self._questions = trio.open_memory_channel[Event](256)

    def see(self, event: Event) -> None:
        """Look at one event of the run; answer or queue a question for a waiting call."""
        if event.type is not EventType.APPROVAL_REQUESTED:
            return
        if self.mode == "approve":
            self._answer(event, "approve", "--approve-all")
        elif self.mode == "deny":
            self._answer(event, "deny", "--deny-all")
        elif self.mode == "no-terminal":
            self._answer(event, "deny", NO_TERMINAL)
        else:
            try:
                self._send.send_nowait(event)
            except trio.WouldBlock:
                self._answer(event, "deny", "too many questions wait on the terminal")

    async def run(self) -> None:
        """Ask the queued questions, one at a time, until cancelled."""
        async for event in self._questions:
            if _call_of(event) not in {p.key for p in self.stream.pending_approvals}:
                continue  # answered meanwhile (a cancel, a timeout)
            if self.pause is not None:
                self.pause(True)
            try:
                reply = (await self._ask(_question(event))).strip()
            finally:
                if self.pause is not None:
                    self.pause(False)
            if reply.lower() in ("y", "yes"):
                self._answer(event, "approve", None)
            else:
                reason = None if reply.lower() in ("", "n", "no") else reply
                self._answer(event, "deny", reason or "denied on the terminal")

    def _answer(
        self, asked: Event, decision: Literal["approve", "deny"], reason: str | None
    ) -> None:
        """Answer the call `asked` (its APPROVAL_REQUESTED) asked about."""
        agent_key, call_id = _call_of(asked)
        with contextlib.suppress(ApprovalError):  # answered already (a timeout, a cancel)
            self.stream.approve(call_id, decision, agent_key=agent_key, reason=reason)


def _call_of(asked: Event) -> tuple[str | None, str]:
    """The call an APPROVAL_REQUESTED is about: (its agent's key, its id)."""
    source = asked.source
    call_id = cast(ApprovalRequestedData, asked.data).get("toolCallId")
    return (source.agent_key if source is not None else None, str(call_id))


def _question(event: Event) -> str:
    data, source = cast(ApprovalRequestedData, event.data), event.source
    who = f"{source.agent_name} ({source.path})" if source is not None else "the root agent"
    args = msgspec.json.encode(data.get("args")).decode()
    if len(args) > 500:
        args = args[:500] + "…"
    return (
        f"\n{who} wants to run {data.get('name')}({args}).\n"
        "Approve? [y = yes; Enter, n or a reason = no]: "
    )
