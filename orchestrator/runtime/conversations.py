"""An `Orchestrator`'s threads in process: each thread's conversation so far, kept in
memory (docs/threads.md). The server keeps its threads in the journal
(`runs/threads.py`); `Orchestrator.stream(…, thread=…)` and `call(…, thread=…)`, which
have none, keep the conversation a thread's last run left here: its root's messages,
as its model saw them, with the answer last (a run that did not complete leaves the
conversation it started from and its input)."""

from __future__ import annotations

from collections import OrderedDict

from agents.core.messages import Message, UserMessage
from agents.errors import OrchestratorError
from orchestrator.core.continuation import ThreadStart
from orchestrator.core.threads import new_thread_id
from orchestrator.runtime.run import Run

__all__ = ["THREADS_KEPT", "Conversations", "ThreadBusy"]

THREADS_KEPT = 256
"""Threads kept in memory (the least recently used goes first)."""


class ThreadBusy(OrchestratorError, RuntimeError):
    """A run of that thread runs now: one at a time."""

    code = "bad_request"


class Conversations:
    """The in-process threads: their last run and conversation, bounded."""

    def __init__(self, kept: int = THREADS_KEPT) -> None:
        self._kept = kept
        self._threads: OrderedDict[str, tuple[str, tuple[Message, ...]]] = OrderedDict()
        self._running: set[str] = set()

    def start(self, thread_id: str | None) -> ThreadStart:
        """Where a new run of `thread_id` (None: a new thread) stands.

        Raises:
            ThreadBusy: a run of that thread runs now.
        """
        thread_id = thread_id or new_thread_id()
        if thread_id in self._running:
            raise ThreadBusy(f"thread {thread_id!r} has a run running: one at a time")
        self._running.add(thread_id)
        last = self._threads.get(thread_id)
        if last is None:
            return ThreadStart(thread_id)
        return ThreadStart(thread_id, last[0], None, last[1])

    def ended(self, start: ThreadStart, run: Run) -> None:
        """`run` (started at `start`) ended: its thread goes on from what it left."""
        self._running.discard(start.thread_id)
        completed = run.result is not None and run.result.status == "completed"
        if completed and run.root is not None:
            left = tuple(run.root.messages)
        else:
            left = (*start.history, UserMessage(text=run.input))
        self._threads[start.thread_id] = (run.run_id, left)
        self._threads.move_to_end(start.thread_id)
        while len(self._threads) > self._kept:
            self._threads.popitem(last=False)
