"""Where an agent's events go: the one seam between `agents` and the runtime above it.

The runner emits through an `Emitter` and knows nothing of runs, sinks or clients;
`orchestrator.core.bus.Bus` is the real one. `NULL_EMITTER` drops everything (in
the spirit of `trio.TASK_STATUS_IGNORED`), so the runner never asks "is there a
bus?".
"""

from __future__ import annotations

from typing import Any, Protocol

from agents.core.events import EventType

__all__ = ["NULL_EMITTER", "Emitter", "NullEmitter"]


class Emitter(Protocol):
    """One agent instance's event outlet."""

    @property
    def agent_key(self) -> str | None:
        """The instance's agentKey (None for the root agent)."""
        ...

    @property
    def run_id(self) -> str:
        """The run the events belong to (for logs)."""
        ...

    @property
    def closed(self) -> bool:
        """True once the run finished: nothing more may be emitted."""
        ...

    async def emit(self, type: EventType, data: dict[str, Any], last: bool = False) -> None:
        """Emit one event, waiting while the run's outlet is full (backpressure)."""
        ...

    def emit_nowait(self, type: EventType, data: dict[str, Any], last: bool = False) -> None:
        """Emit without waiting: lifecycle events, also while being cancelled."""
        ...

    def offer(self, type: EventType, data: dict[str, Any]) -> bool:
        """Emit one event now; True: the outlet is full, `await wait_writable()` next.

        `emit` split in two for the per-delta hot path: a plain call per delta, and
        an await only when backpressure asks for one (no coroutine per delta).
        """
        ...

    def offer_deltas(self, texts: list[str]) -> bool:
        """REASONING `{delta}` events for texts read together; True: the outlet is full."""
        ...

    async def wait_writable(self) -> None:
        """Return once the run's outlet has room again."""
        ...

    async def durable(self) -> bool:
        """Return once every event emitted so far is stored (write-ahead: a tool that
        acts on the world runs only after its call is journaled, so a restart or a
        takeover knows it was made and never makes it twice).

        False: this copy of the run lost it (another worker continues it, or the
        server is stopping): nothing may act for it any more.
        """
        ...


class NullEmitter:
    """Drops every event (`orchestrator.core.bus.NullBus` adds a Source and children)."""

    __slots__ = ()

    run_id = ""
    closed = False

    @property
    def agent_key(self) -> str | None:
        """No agent instance: None."""
        return None

    async def emit(self, type: EventType, data: dict[str, Any], last: bool = False) -> None:
        """Nothing to do."""

    def emit_nowait(self, type: EventType, data: dict[str, Any], last: bool = False) -> None:
        """Nothing to do."""

    def offer(self, type: EventType, data: dict[str, Any]) -> bool:
        """Nothing to do; never full."""
        return False

    def offer_deltas(self, texts: list[str]) -> bool:
        """Nothing to do; never full."""
        return False

    async def wait_writable(self) -> None:
        """Never full."""

    async def durable(self) -> bool:
        """Nothing is stored: nothing to wait for."""
        return True


NULL_EMITTER = NullEmitter()
