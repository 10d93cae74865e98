"""An agent's inbox and its background work: what reaches it between turns.

Messages sent to a running agent (a person's `send`, `agent_send`, a background
child's report) wait in the inbox for its next model turn. Work started beside the
agent (a background spawn) runs in the agent's own nursery; the agent's final
answer is final only once none of it runs and no message waits (`wait_quiet`).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import trio

from agents.core.attachments import Attachment, infos
from agents.core.events import EventType
from agents.core.messages import Message, UserMessage
from agents.core.payloads import UserMessageData
from agents.emitter import Emitter
from agents.errors import AgentFailed, ToolError

__all__ = ["Background", "user_message"]


class Background:
    """The inbox and the background work of one agent instance.

    Args:
        bus: where USER_MESSAGE goes for each message delivered.
        accepting: whether the agent takes messages now (it is running and not
            cancelled); asked on each delivery.
    """

    __slots__ = ("_accepting", "_bus", "_nursery", "_wake", "calls", "inbox", "running")

    def __init__(self, bus: Emitter, accepting: Callable[[], bool]) -> None:
        self._bus = bus
        self._accepting = accepting
        self.inbox: list[tuple[str, str, tuple[Attachment, ...]]] = []
        """(text, sender) of each message waiting for the next model turn."""
        self.running = 0
        """Background work still running."""
        self.calls: dict[str, int] = {}
        """Tool call id → background work it started that is still running (a
        compaction never summarizes such a call away)."""
        self._nursery: trio.Nursery | None = None
        self._wake = trio.lowlevel.ParkingLot()

    def open(self, nursery: trio.Nursery | None) -> None:
        """Where background work runs during one run of the agent (None: not running)."""
        self._nursery = nursery

    def start(
        self,
        label: str,
        work: Callable[[], Awaitable[str]],
        *,
        report: bool = True,
        call_id: str | None = None,
    ) -> None:
        """Run `work` beside the agent, which does not finish before it (see
        `AgentRunner.start_background`)."""
        if self._nursery is None:
            raise RuntimeError("the agent is not running")
        self.running += 1
        if call_id is not None:
            self.calls[call_id] = self.calls.get(call_id, 0) + 1
        self._nursery.start_soon(self._task, label, work, report, call_id)

    async def _task(
        self,
        label: str,
        work: Callable[[], Awaitable[str]],
        report: bool,
        call_id: str | None = None,
    ) -> None:
        message = None
        try:
            text = await work()
            message = f"[{label} finished]\n{text}"
        except (AgentFailed, ToolError) as exc:
            kind = exc.error_type if isinstance(exc, AgentFailed) else "error"
            message = f"[{label} failed ({kind})]\n{exc}"
        finally:
            self.running -= 1
            if call_id is not None:
                left = self.calls.pop(call_id, 1) - 1
                if left:
                    self.calls[call_id] = left
            self._wake.unpark_all()
        if report:
            self.deliver(message, label.split(" ")[0])

    def deliver(
        self,
        text: str,
        sender: str,
        control: str | None = None,
        attachments: tuple[Attachment, ...] = (),
    ) -> bool:
        """Queue a message for the next model turn and emit USER_MESSAGE (with the
        `control` request that brought it, if any); False (and nothing done) once the
        agent no longer takes messages."""
        if not self._accepting():
            return False
        self.inbox.append((text, sender, attachments))
        if not self._bus.closed:
            said = user_message(text, sender, control, attachments)
            self._bus.emit_nowait(EventType.USER_MESSAGE, said)
        self._wake.unpark_all()
        return True

    def take_into(self, messages: list[Message]) -> None:
        """The waiting messages join the conversation, in the order they came."""
        inbox = self.inbox
        while inbox:
            text, _, attachments = inbox.pop(0)
            messages.append(UserMessage(text=text, attachments=attachments))

    async def wait_quiet(self) -> bool:
        """Wait until a message waits or no background work runs; True for a message."""
        while not self.inbox and self.running:
            await self._wake.park()
        return bool(self.inbox)


def user_message(
    text: str,
    sender: str,
    control: str | None = None,
    attachments: tuple[Attachment, ...] = (),
) -> UserMessageData:
    """USER_MESSAGE's data (`control`: the cluster control request that brought it)."""
    data: UserMessageData = {"text": text, "from": sender}
    if control is not None:
        data["control"] = control
    if attachments:
        data["attachments"] = infos(attachments)
    return data
